//! The offline catalog: database, schema and relation names read straight from the system
//! catalogs' files (relation map files, `pg_database`, `pg_class`, `pg_namespace`, `pg_am`), so
//! that every finding can name `database`, `schema.relation`, its kind and access method without a
//! running server. Damage to a catalog becomes a finding; the rest is still named.

pub mod attributes;
pub mod heapscan;
pub mod index_meta;
pub mod layouts;
pub mod relmap;
pub mod twophase;
pub mod xact;

#[doc(hidden)]
pub mod fuzzing;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use crate::control::ControlFile;
use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use attributes::{align_of, attribute_layout, Attribute, PgAttributeLayout};
use heapscan::{for_each_page, rows_of_page, usable_page_header, Row, RowState, ScanTrouble};
use layouts::{
    layouts_for, oids, CatalogLayouts, PgClassLayout, PgDatabaseLayout, NAMEDATALEN, OID_THEN_NAME,
};
use pgcheckdb_scan::open::not_regular;
use twophase::PreparedXact;
use xact::CommitLog;

/// `pg_class.relkind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelKind {
    Table,
    Index,
    Sequence,
    Toast,
    View,
    MaterializedView,
    CompositeType,
    ForeignTable,
    PartitionedTable,
    PartitionedIndex,
    Other(u8),
}

impl RelKind {
    fn from_byte(b: u8) -> RelKind {
        match b {
            b'r' => RelKind::Table,
            b'i' => RelKind::Index,
            b'S' => RelKind::Sequence,
            b't' => RelKind::Toast,
            b'v' => RelKind::View,
            b'm' => RelKind::MaterializedView,
            b'c' => RelKind::CompositeType,
            b'f' => RelKind::ForeignTable,
            b'p' => RelKind::PartitionedTable,
            b'I' => RelKind::PartitionedIndex,
            other => RelKind::Other(other),
        }
    }

    /// Whether relations of this kind have files (`RELKIND_HAS_STORAGE`): tables, indexes,
    /// sequences, TOAST tables and materialized views; not views, composite types, foreign
    /// tables or partitioned tables and indexes.
    pub fn has_storage(self) -> bool {
        matches!(
            self,
            RelKind::Table
                | RelKind::Index
                | RelKind::Sequence
                | RelKind::Toast
                | RelKind::MaterializedView
        )
    }

    /// The name used in output (`table`, `index`, `toast_table`, ...).
    pub fn name(self) -> String {
        match self {
            RelKind::Table => "table".into(),
            RelKind::Index => "index".into(),
            RelKind::Sequence => "sequence".into(),
            RelKind::Toast => "toast_table".into(),
            RelKind::View => "view".into(),
            RelKind::MaterializedView => "materialized_view".into(),
            RelKind::CompositeType => "composite_type".into(),
            RelKind::ForeignTable => "foreign_table".into(),
            RelKind::PartitionedTable => "partitioned_table".into(),
            RelKind::PartitionedIndex => "partitioned_index".into(),
            RelKind::Other(b) => format!("relkind_{}", b as char),
        }
    }
}

/// One database from `pg_database`.
#[derive(Debug, Clone)]
pub struct DatabaseInfo {
    pub oid: u32,
    pub name: String,
    pub tablespace: u32,
    pub frozenxid: u32,
    /// `datconnlimit = -2` (`DATCONNLIMIT_INVALID_DB`): an interrupted `DROP DATABASE` left the
    /// row; its files may be partly removed.
    pub invalid: bool,
}

/// `DATCONNLIMIT_INVALID_DB`.
const DATCONNLIMIT_INVALID_DB: i32 = -2;

/// `relpersistence` values.
pub mod persistence {
    pub const PERMANENT: u8 = b'p';
    pub const UNLOGGED: u8 = b'u';
    pub const TEMP: u8 = b't';
}

/// A `pg_class` row inserted by a transaction that has not committed (prepared, or cut off by a
/// crash): its file exists, but no committed row owns it.
#[derive(Debug, Clone)]
pub struct PendingRelation {
    pub oid: u32,
    /// `schema.name`.
    pub name: String,
    pub kind: RelKind,
    /// The inserting transaction (`t_xmin`).
    pub xmin: u32,
}

/// One relation from `pg_class`.
#[derive(Debug, Clone)]
pub struct RelationInfo {
    pub oid: u32,
    /// `schema.name`.
    pub name: String,
    pub kind: RelKind,
    pub relam: u32,
    /// Access method name (`heap`, `btree`, ...), if it has one; shared by every relation of
    /// the access method.
    pub am: Option<Arc<str>>,
    pub relnatts: i16,
    pub reltoastrelid: u32,
    pub relfrozenxid: u32,
    pub relminmxid: u32,
    pub persistence: u8,
    pub is_shared: bool,
    /// Tablespace name, when not the database's default.
    pub tablespace: Option<Box<str>>,
    /// For an index, its table; for a TOAST table, the table whose values it holds.
    pub owner: Option<Box<str>>,
    /// Columns 1..=relnatts, if `pg_attribute` described them completely.
    pub attributes: Option<Arc<[Attribute]>>,
}

/// Key of a relation's files: database oid (0 for shared), tablespace oid, file number.
pub type FileKey = (u32, u32, u32);

/// The relations of the catalogs by file key, held compactly: the descriptions in one vector
/// (grown per database to its exact size) and a small hash index of 16-byte entries, instead of
/// a hash table whose empty slots are each as large as a description. Iteration order is
/// unspecified, as with a hash map.
#[derive(Debug, Default)]
pub struct RelationMap {
    entries: Vec<(FileKey, RelationInfo)>,
    index: HashMap<FileKey, u32>,
}

impl RelationMap {
    /// Inserts or replaces the relation of `key`; returns the one it replaced.
    pub fn insert(&mut self, key: FileKey, info: RelationInfo) -> Option<RelationInfo> {
        if let Some(&i) = self.index.get(&key) {
            return Some(std::mem::replace(&mut self.entries[i as usize].1, info));
        }
        let i = u32::try_from(self.entries.len()).expect("fewer than 2^32 relations");
        self.index.insert(key, i);
        self.entries.push((key, info));
        None
    }

    /// Room for `n` more relations, exactly.
    pub fn reserve_exact(&mut self, n: usize) {
        self.entries.reserve_exact(n);
        self.index.reserve(n);
    }

    pub fn get(&self, key: &FileKey) -> Option<&RelationInfo> {
        self.index.get(key).map(|&i| &self.entries[i as usize].1)
    }

    pub fn contains_key(&self, key: &FileKey) -> bool {
        self.index.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(key, relation)` pairs, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&FileKey, &RelationInfo)> + '_ {
        self.entries.iter().map(|(k, r)| (k, r))
    }

    pub fn keys(&self) -> impl Iterator<Item = &FileKey> + '_ {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &RelationInfo> + '_ {
        self.entries.iter().map(|(_, r)| r)
    }
}

impl<'a> IntoIterator for &'a RelationMap {
    type Item = (&'a FileKey, &'a RelationInfo);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (FileKey, RelationInfo)>,
        fn(&'a (FileKey, RelationInfo)) -> (&'a FileKey, &'a RelationInfo),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, r)| (k, r))
    }
}

/// Names for everything the catalogs describe.
#[derive(Debug, Default)]
pub struct Catalog {
    pub databases: HashMap<u32, DatabaseInfo>,
    pub relations: RelationMap,
    /// `pg_tablespace`: oid -> name.
    pub tablespaces: HashMap<u32, String>,
    /// The commit log, for tuple visibility.
    pub clog: CommitLog,
    /// Databases whose `pg_class` could not be read whole: their unnamed files may still have
    /// owners, so they are not called orphans.
    pub incomplete_databases: HashSet<u32>,
    /// Problems met while reading the catalogs.
    pub findings: Vec<Finding>,
    /// What pgcheckdb itself could not read (permission denied, ...): the run is incomplete,
    /// but that is no evidence of corruption.
    pub tool_errors: Vec<String>,
    /// Relations whose `pg_class` row is not committed, by file key.
    pub pending: HashMap<FileKey, PendingRelation>,
    /// Prepared transactions (`pg_twophase/`).
    pub prepared: Vec<PreparedXact>,
    /// What B-tree key order depends on (operator classes, collations, `pg_index` options).
    pub order: index_meta::OrderCatalog,
}

/// Context for reading one cluster's catalogs.
struct Reader<'a> {
    datadir: &'a Path,
    control: &'a ControlFile,
    layouts: CatalogLayouts,
    catalog: Catalog,
    /// Column lists already seen: relations with the same columns (the tables of a
    /// multi-tenant cluster's schemas, every TOAST table) share one list.
    column_lists: ColumnLists,
    /// Whether to read `pg_attribute` (the structure checks need it; names do not).
    columns: bool,
}

/// Interned column lists.
#[derive(Default)]
struct ColumnLists(HashSet<Arc<[Attribute]>>);

impl ColumnLists {
    /// The shared list of the columns `ids` (indexes into `distinct`).
    fn intern(&mut self, ids: Vec<u32>, distinct: &[Attribute]) -> Arc<[Attribute]> {
        let columns: Vec<Attribute> = ids
            .iter()
            .filter_map(|&i| distinct.get(i as usize).cloned())
            .collect();
        if let Some(seen) = self.0.get(columns.as_slice()) {
            return Arc::clone(seen);
        }
        let list: Arc<[Attribute]> = columns.into();
        self.0.insert(Arc::clone(&list));
        list
    }
}

/// The user columns of one database's relations as read from `pg_attribute`.
#[derive(Default)]
struct RelationColumns {
    /// Every distinct column.
    distinct: Vec<Attribute>,
    /// `(attrelid, attnum, index into distinct)`, sorted.
    by_relation: Vec<(u32, i16, u32)>,
}

impl RelationColumns {
    /// `(attnum, index into distinct)` of the columns of `relid`, or `None` if it has none.
    fn of(&self, relid: u32) -> Option<Vec<(i16, u32)>> {
        let start = self.by_relation.partition_point(|c| c.0 < relid);
        let end = self.by_relation.partition_point(|c| c.0 <= relid);
        (start < end).then(|| {
            self.by_relation[start..end]
                .iter()
                .map(|&(_, attnum, id)| (attnum, id))
                .collect()
        })
    }
}

impl Catalog {
    /// Reads the catalogs of a stopped cluster. Never fails: what cannot be read becomes a
    /// finding and is left unnamed.
    pub fn read(datadir: &Path, control: &ControlFile) -> Catalog {
        Catalog::read_with(datadir, control, true)
    }

    /// [`Catalog::read`], reading the columns of every relation (`pg_attribute`, for the
    /// structure checks) only when `columns`: without them every relation's
    /// [`RelationInfo::attributes`] is `None`, which is all the physical level needs.
    pub fn read_with(datadir: &Path, control: &ControlFile, columns: bool) -> Catalog {
        let Some(layouts) = control.major.and_then(layouts_for) else {
            let mut c = Catalog::default();
            c.findings.push(catalog_finding(
                "global/pg_control",
                "unknown PostgreSQL version: catalogs not read, findings are not named".into(),
            ));
            return c;
        };
        let (clog, trouble) = CommitLog::load(datadir, control.blcksz);
        let mut reader = Reader {
            datadir,
            control,
            layouts,
            catalog: Catalog {
                clog,
                findings: trouble.findings,
                tool_errors: trouble.tool_errors,
                prepared: control
                    .major
                    .map(|m| twophase::read_prepared(datadir, m))
                    .unwrap_or_default(),
                ..Catalog::default()
            },
            column_lists: ColumnLists::default(),
            columns,
        };
        reader.read_databases();
        let dbs: Vec<DatabaseInfo> = reader.catalog.databases.values().cloned().collect();
        for db in &dbs {
            reader.read_database_relations(db);
        }
        reader.catalog
    }

    /// The relation stored in `file` (a path relative to the data directory) under file number
    /// `filenode` of database `db_oid`.
    pub fn relation_for_file(
        &self,
        file: &str,
        db_oid: u32,
        filenode: u32,
    ) -> Option<&RelationInfo> {
        self.relations
            .get(&(db_oid, tablespace_of_path(file), filenode))
    }

    /// The relation a listed relation file belongs to.
    pub fn relation_of(&self, f: &crate::datadir::RelationFile) -> Option<&RelationInfo> {
        self.relations.get(&file_key(f))
    }

    /// The uncommitted relation a listed relation file belongs to.
    pub fn pending_of(&self, f: &crate::datadir::RelationFile) -> Option<&PendingRelation> {
        self.pending.get(&file_key(f))
    }

    /// The uncommitted relation stored in `file` under file number `filenode` of `db_oid`.
    pub fn pending_for_file(
        &self,
        file: &str,
        db_oid: u32,
        filenode: u32,
    ) -> Option<&PendingRelation> {
        self.pending
            .get(&(db_oid, tablespace_of_path(file), filenode))
    }

    /// The prepared transaction that `xid` belongs to (as itself or a subtransaction).
    pub fn prepared_xact(&self, xid: u32) -> Option<&PreparedXact> {
        self.prepared.iter().find(|p| p.owns(xid))
    }

    /// Fills in the names of a finding's database and relation.
    pub fn annotate(&self, f: &mut Finding) {
        let Some(db_oid) = f.database.as_ref().and_then(|d| d.oid) else {
            return;
        };
        if let Some(db) = self.databases.get(&db_oid) {
            f.database = Some(DatabaseRef {
                oid: Some(db_oid),
                name: Some(db.name.clone()),
            });
        }
        let Some(filenode) = f.relation.as_ref().and_then(|r| r.filenode) else {
            return;
        };
        if let Some(rel) = self.relation_for_file(&f.file, db_oid, filenode) {
            f.relation = Some(RelationRef {
                filenode: Some(filenode),
                oid: Some(rel.oid),
                name: Some(rel.name.clone()),
                kind: Some(rel.kind.name()),
            });
            if let Some(obj) = f.detail.as_object_mut() {
                let extra = [
                    ("access_method", rel.am.as_deref()),
                    ("table", rel.owner.as_deref()),
                    ("tablespace", rel.tablespace.as_deref()),
                ];
                for (key, value) in extra {
                    if let Some(v) = value {
                        obj.insert(key.into(), json!(v));
                    }
                }
            }
        }
    }
}

impl Catalog {
    /// Finds a relation by `schema.name` (or a bare name, if unique) in the database called
    /// `database`, or in any database when `None`. Returns its file key and description.
    pub fn find_relation(
        &self,
        name: &str,
        database: Option<&str>,
    ) -> Result<(FileKey, &RelationInfo), String> {
        let wanted_db = |db_oid: u32| match database {
            None => true,
            Some(d) => db_oid == 0 || self.databases.get(&db_oid).is_some_and(|db| db.name == d),
        };
        let matches_name = |rel: &RelationInfo| {
            rel.name == name
                || (!name.contains('.')
                    && rel.name.rsplit_once('.').is_some_and(|(_, n)| n == name))
        };
        let mut found: Vec<(FileKey, &RelationInfo)> = self
            .relations
            .iter()
            .filter(|(k, r)| wanted_db(k.0) && matches_name(r))
            .map(|(k, r)| (*k, r))
            .collect();
        found.sort_by_key(|(k, _)| *k);
        found.dedup_by_key(|(_, r)| (r.oid, r.is_shared));
        match found.len() {
            0 => Err(format!(
                "no relation \"{name}\" found in the catalogs{}",
                database
                    .map(|d| format!(" of database \"{d}\""))
                    .unwrap_or_default()
            )),
            1 => Ok(found[0]),
            n => Err(format!(
                "\"{name}\" names {n} relations; add the schema or --database"
            )),
        }
    }

    /// The directory of a relation's files, relative to the data directory.
    pub fn relation_dir(key: FileKey, version_dir: &str) -> String {
        let (db, spc, _) = key;
        match spc {
            oids::GLOBALTABLESPACE => "global".to_string(),
            oids::DEFAULTTABLESPACE => format!("base/{db}"),
            spc => format!("pg_tblspc/{spc}/{version_dir}/{db}"),
        }
    }
}

/// Tablespace oid of a relation file from its path: `global/` is pg_global, `base/` pg_default.
/// The file key of a listed relation file.
pub fn file_key(f: &crate::datadir::RelationFile) -> FileKey {
    (
        f.location.db_oid(),
        f.location.tablespace_oid(),
        f.name.relfilenode,
    )
}

pub fn tablespace_of_path(file: &str) -> u32 {
    if file.starts_with("global/") {
        oids::GLOBALTABLESPACE
    } else if let Some(rest) = file.strip_prefix("pg_tblspc/") {
        rest.split('/')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    } else {
        oids::DEFAULTTABLESPACE
    }
}

fn catalog_finding(file: &str, message: String) -> Finding {
    Finding::for_file(
        FindingKind::CatalogUnreadable,
        Severity::Warning,
        file,
        message,
    )
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn i16_at(b: &[u8], off: usize) -> Option<i16> {
    let s = b.get(off..off + 2)?;
    Some(i16::from_le_bytes([s[0], s[1]]))
}

/// A `name` column: NUL-padded, at most `NAMEDATALEN - 1` bytes.
fn name_at(b: &[u8], off: usize) -> Option<String> {
    let s = b.get(off..off + NAMEDATALEN)?;
    let end = s.iter().position(|&c| c == 0).unwrap_or(NAMEDATALEN);
    Some(String::from_utf8_lossy(&s[..end]).into_owned())
}

/// Built-in access methods, used when `pg_am` cannot be read.
fn builtin_am(oid: u32) -> Option<&'static str> {
    Some(match oid {
        2 => "heap",
        403 => "btree",
        405 => "hash",
        783 => "gist",
        2742 => "gin",
        4000 => "spgist",
        3580 => "brin",
        _ => return None,
    })
}

/// Columns `1..=relnatts` in order, or `None` if any is missing or doubled.
fn complete_columns<T>(rows: Option<Vec<(i16, T)>>, relnatts: i16) -> Option<Vec<T>> {
    let mut rows = rows?;
    rows.sort_by_key(|(n, _)| *n);
    let dense = rows.len() == relnatts.max(0) as usize
        && rows
            .iter()
            .enumerate()
            .all(|(i, (n, _))| *n as usize == i + 1);
    dense.then(|| rows.into_iter().map(|(_, a)| a).collect())
}

/// What one database's catalogs give for naming its relations.
struct NameSources<'a> {
    namespaces: &'a HashMap<u32, String>,
    ams: &'a HashMap<u32, Arc<str>>,
    local_map: &'a HashMap<u32, u32>,
    global_map: &'a HashMap<u32, u32>,
}

/// A `pg_class` row as read, before names are resolved.
struct ClassRow {
    oid: u32,
    relname: String,
    relnamespace: u32,
    relam: u32,
    relfilenode: u32,
    reltablespace: u32,
    reltoastrelid: u32,
    relisshared: bool,
    relpersistence: u8,
    relkind: RelKind,
    relnatts: i16,
    relfrozenxid: u32,
    relminmxid: u32,
    state: RowState,
}

/// One `pg_class` row's columns, `None` if the row is too short for them.
fn class_row(d: &[u8], l: &PgClassLayout, state: RowState) -> Option<ClassRow> {
    let byte = |off: usize| d.get(off).copied();
    Some(ClassRow {
        oid: u32_at(d, l.oid)?,
        relname: name_at(d, l.relname)?,
        relnamespace: u32_at(d, l.relnamespace)?,
        relam: u32_at(d, l.relam)?,
        relfilenode: u32_at(d, l.relfilenode)?,
        reltablespace: u32_at(d, l.reltablespace)?,
        reltoastrelid: u32_at(d, l.reltoastrelid)?,
        relisshared: byte(l.relisshared)? != 0,
        relpersistence: byte(l.relpersistence)?,
        relkind: RelKind::from_byte(byte(l.relkind)?),
        relnatts: i16_at(d, l.relnatts)?,
        relfrozenxid: u32_at(d, l.relfrozenxid)?,
        relminmxid: u32_at(d, l.relminmxid)?,
        state,
    })
}

/// One `pg_attribute` row: `(attrelid, attnum, column)`.
fn attribute_row(
    d: &[u8],
    l: &PgAttributeLayout,
    types: &HashMap<u32, String>,
) -> Option<(u32, i16, Attribute)> {
    let attnum = i16_at(d, l.attnum)?;
    let attr = Attribute {
        name: name_at(d, l.attname)?,
        type_name: u32_at(d, l.atttypid).and_then(|t| types.get(&t).cloned()),
        attlen: i16_at(d, l.attlen)?,
        align: align_of(*d.get(l.attalign)?)?,
        dropped: *d.get(l.attisdropped)? != 0,
    };
    Some((u32_at(d, l.attrelid)?, attnum, attr))
}

/// One `pg_database` row.
fn database_row(d: &[u8], l: &PgDatabaseLayout) -> Option<DatabaseInfo> {
    Some(DatabaseInfo {
        oid: u32_at(d, l.oid)?,
        name: name_at(d, l.datname)?,
        tablespace: u32_at(d, l.dattablespace)?,
        frozenxid: u32_at(d, l.datfrozenxid)?,
        invalid: u32_at(d, l.datconnlimit).map(|v| v as i32) == Some(DATCONNLIMIT_INVALID_DB),
    })
}

/// `(oid, name)` of a catalog row that starts with them (pg_namespace, pg_am, ...).
fn oid_name_row(d: &[u8]) -> Option<(u32, String)> {
    Some((u32_at(d, OID_THEN_NAME.0)?, name_at(d, OID_THEN_NAME.1)?))
}

/// `(indexrelid, indrelid)` of a `pg_index` row.
fn index_row(d: &[u8]) -> Option<(u32, u32)> {
    Some((
        u32_at(d, layouts::pg_index::INDEXRELID)?,
        u32_at(d, layouts::pg_index::INDRELID)?,
    ))
}

impl Reader<'_> {
    fn dir_of(&self, db_oid: u32, spc: u32) -> PathBuf {
        match spc {
            oids::GLOBALTABLESPACE => self.datadir.join("global"),
            oids::DEFAULTTABLESPACE | 0 => self.datadir.join("base").join(db_oid.to_string()),
            spc => {
                let version = self
                    .control
                    .tablespace_version_directory()
                    .unwrap_or_default();
                self.datadir
                    .join("pg_tblspc")
                    .join(spc.to_string())
                    .join(version)
                    .join(db_oid.to_string())
            }
        }
    }

    fn shown(&self, dir: &Path, filenode: u32) -> String {
        let rel = dir.strip_prefix(self.datadir).unwrap_or(dir);
        format!("{}/{filenode}", rel.display())
    }

    /// Reads the visible rows of the relation `filenode` in `dir` page by page, reporting
    /// trouble; false if the file could not be read whole.
    fn scan(&mut self, dir: &Path, filenode: u32, what: &str, mut f: impl FnMut(Row<'_>)) -> bool {
        self.scan_rows(dir, filenode, what, |row, state| {
            if state == RowState::Visible {
                f(row);
            }
        })
    }

    /// [`Self::scan`], also passing the rows of transactions that did not commit.
    fn scan_rows(
        &mut self,
        dir: &Path,
        filenode: u32,
        what: &str,
        mut f: impl FnMut(Row<'_>, RowState),
    ) -> bool {
        let ma = self.control.max_align as usize;
        // The commit log is lent to the page visitor for the scan and put back after it.
        let clog = std::mem::take(&mut self.catalog.clog);
        let complete = self.scan_pages(dir, filenode, what, |blkno, page, trouble| {
            rows_of_page(page, blkno, ma, &clog, trouble, &mut f)
        });
        self.catalog.clog = clog;
        complete
    }

    /// Reads every page of the catalog `filenode` in `dir`, handing each to `visit`, and reports
    /// the pages `visit` notes as damaged and a file that cannot be read; false if the file
    /// could not be used whole.
    fn scan_pages(
        &mut self,
        dir: &Path,
        filenode: u32,
        what: &str,
        mut visit: impl FnMut(u32, &[u8], &mut ScanTrouble),
    ) -> bool {
        let shown = self.shown(dir, filenode);
        let bs = self.control.block_size();
        let mut trouble = ScanTrouble::default();
        let read = for_each_page(dir, filenode, bs, |blkno, page| {
            visit(blkno, page, &mut trouble)
        });
        if let Err(e) = read {
            self.read_failed(&shown, what, &e);
            return false;
        }
        if trouble.bad_count > 0 {
            let more = if trouble.bad_count > trouble.bad_blocks.len() as u64 {
                format!(" (first {} listed)", trouble.bad_blocks.len())
            } else {
                String::new()
            };
            let msg = format!(
                "{what} has {} damaged page(s) {:?}{more}; rows on them are not used for names",
                trouble.bad_count, trouble.bad_blocks
            );
            self.catalog
                .findings
                .push(catalog_finding(&shown, msg).with_detail(
                    json!({"blocks": trouble.bad_blocks, "count": trouble.bad_count}),
                ));
            return false;
        }
        true
    }

    /// A catalog file that could not be read: permission problems are the tool's, anything
    /// else (missing, not a regular file, I/O error) is a finding.
    fn read_failed(&mut self, shown: &str, what: &str, e: &std::io::Error) {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            self.catalog
                .tool_errors
                .push(format!("could not read {what} \"{shown}\": {e}"));
            return;
        }
        // A catalog file that is not a regular file is already an `irregular_file` of the
        // data-directory listing; here it only explains the names that are missing.
        let mut f = catalog_finding(shown, format!("could not read {what}: {e}"));
        if let Some(file_type) = not_regular(e) {
            f.detail = json!({"file_type": file_type});
        }
        self.catalog.findings.push(f);
    }

    fn map_of(&mut self, dir: &Path) -> HashMap<u32, u32> {
        match relmap::read_relmap(dir) {
            Ok(m) => m,
            Err(e) => {
                let shown = format!(
                    "{}/pg_filenode.map",
                    dir.strip_prefix(self.datadir).unwrap_or(dir).display()
                );
                if let relmap::RelMapError::Io(io) = &e {
                    if io.kind() == std::io::ErrorKind::PermissionDenied {
                        self.read_failed(&shown, "the relation map file", io);
                        return HashMap::new();
                    }
                }
                let mut f = catalog_finding(&shown, format!("relation map file is unusable: {e}"));
                f.kind = FindingKind::BadRelmap;
                f.severity = Severity::Error;
                if let relmap::RelMapError::Io(io) = &e {
                    if let Some(file_type) = not_regular(io) {
                        f.kind = FindingKind::IrregularFile;
                        f.message = format!("\"{shown}\" is a {file_type} where the relation map file is named; it was not read");
                        f.detail = json!({"file_type": file_type});
                    }
                }
                self.catalog.findings.push(f);
                HashMap::new()
            }
        }
    }

    /// `attrelid -> [(attnum, column)]` for user columns (attnum > 0), each column as its index
    /// in the returned table of distinct columns: a cluster of many alike tables holds each
    /// distinct column once while its catalogs are read.
    fn read_attributes(
        &mut self,
        dir: &Path,
        filenode: u32,
        types: &HashMap<u32, String>,
    ) -> RelationColumns {
        let mut out = RelationColumns::default();
        let Some(l) = self.control.major.and_then(attribute_layout) else {
            return out;
        };
        if !self.columns {
            self.check_pages(dir, Some(filenode), "pg_attribute");
            return out;
        }
        let mut ids: HashMap<Attribute, u32> = HashMap::new();
        self.scan(dir, filenode, "pg_attribute", |row| {
            let parsed = attribute_row(row.data, &l, types);
            if let Some((relid, attnum, attr)) = parsed.filter(|p| p.1 > 0) {
                let next = out.distinct.len() as u32;
                let id = *ids.entry(attr).or_insert_with_key(|a| {
                    out.distinct.push(a.clone());
                    next
                });
                out.by_relation.push((relid, attnum, id));
            }
        });
        out.by_relation.sort_unstable();
        out.by_relation.shrink_to_fit();
        out
    }

    fn read_databases(&mut self) {
        let global = self.datadir.join("global");
        let map = self.map_of(&global);
        let Some(&filenode) = map.get(&oids::PG_DATABASE) else {
            return;
        };
        let layout = self.layouts.pg_database;
        let mut dbs = Vec::new();
        let locale_layout = index_meta::layouts(self.control.major).map(|l| l.pg_database);
        let mut locales = Vec::new();
        self.scan(&global, filenode, "pg_database", |row| {
            let db = database_row(row.data, &layout);
            let locale = locale_layout.and_then(|l| index_meta::database_locale_row(row.data, &l));
            if let (Some(db), Some(locale)) = (&db, locale) {
                locales.push((db.oid, locale));
            }
            dbs.extend(db);
        });
        self.catalog.order.databases.extend(locales);
        for db in dbs {
            self.catalog.databases.insert(db.oid, db);
        }
        let spc_node = map.get(&oids::PG_TABLESPACE).copied();
        self.catalog.tablespaces = self.read_names(&global, spc_node, "pg_tablespace");
    }

    /// The rows of `pg_class` (visible and uncommitted), and whether every page of it could be
    /// used.
    fn read_class_rows(&mut self, dir: &Path, filenode: u32) -> (Vec<ClassRow>, bool) {
        let l = self.layouts.pg_class;
        let mut rows = Vec::new();
        let complete = self.scan_rows(dir, filenode, "pg_class", |row, state| {
            rows.extend(class_row(row.data, &l, state));
        });
        rows.shrink_to_fit();
        (rows, complete)
    }

    /// Reads every page of a catalog for the damage [`Self::scan`] reports, using no row: the
    /// catalogs whose rows a run does not need are still checked the same way.
    fn check_pages(&mut self, dir: &Path, filenode: Option<u32>, what: &str) {
        let ma = self.control.max_align as usize;
        if let Some(filenode) = filenode {
            self.scan_pages(dir, filenode, what, |blkno, page, trouble| {
                usable_page_header(page, blkno, ma, trouble);
            });
        }
    }

    /// `oid -> name` from a catalog whose rows start with `oid, name` (pg_namespace, pg_am).
    fn read_names(
        &mut self,
        dir: &Path,
        filenode: Option<u32>,
        what: &str,
    ) -> HashMap<u32, String> {
        let mut out = HashMap::new();
        let Some(filenode) = filenode else { return out };
        self.scan(dir, filenode, what, |row| {
            out.extend(oid_name_row(row.data));
        });
        out
    }

    fn read_database_relations(&mut self, db: &DatabaseInfo) {
        let dir = self.dir_of(db.oid, db.tablespace);
        if !dir.is_dir() {
            return;
        }
        let local_map = self.map_of(&dir);
        let Some(&class_node) = local_map.get(&oids::PG_CLASS) else {
            return;
        };
        let (rows, complete) = self.read_class_rows(&dir, class_node);
        let (rows, uncommitted): (Vec<ClassRow>, Vec<ClassRow>) =
            rows.into_iter().partition(|r| r.state == RowState::Visible);
        if !complete {
            self.catalog.incomplete_databases.insert(db.oid);
        }
        // A catalog's file: its pg_class.relfilenode, or the map's entry for a mapped catalog.
        let node_of = |oid: u32| {
            rows.iter()
                .find(|r| r.oid == oid)
                .map(|r| r.relfilenode)
                .filter(|&n| n != 0)
                .or_else(|| local_map.get(&oid).copied())
        };
        let namespaces = self.read_names(&dir, node_of(oids::PG_NAMESPACE), "pg_namespace");
        let ams: HashMap<u32, Arc<str>> = self
            .read_names(&dir, node_of(oids::PG_AM), "pg_am")
            .into_iter()
            .map(|(oid, name)| (oid, Arc::from(name)))
            .collect();
        let types = if self.columns {
            self.read_names(&dir, node_of(oids::PG_TYPE), "pg_type")
        } else {
            self.check_pages(&dir, node_of(oids::PG_TYPE), "pg_type");
            HashMap::new()
        };
        let owners = self.owners(&dir, node_of(oids::PG_INDEX), &rows, &namespaces);
        self.read_order_meta(db, &dir, &node_of);
        let global_map = if rows.iter().any(|r| r.relisshared) {
            self.map_of(&self.datadir.join("global"))
        } else {
            HashMap::new()
        };
        let columns = local_map
            .get(&oids::PG_ATTRIBUTE)
            .map(|&n| self.read_attributes(&dir, n, &types))
            .unwrap_or_default();
        drop(types);
        let names = NameSources {
            namespaces: &namespaces,
            ams: &ams,
            local_map: &local_map,
            global_map: &global_map,
        };
        self.catalog.relations.reserve_exact(rows.len());
        let mut taken: HashSet<u32> = HashSet::new();
        for r in rows {
            // A second row with the same oid (a stale one) gets no columns, as before.
            let ids = taken.insert(r.oid).then(|| columns.of(r.oid)).flatten();
            let attrs = complete_columns(ids, r.relnatts)
                .map(|ids| self.column_lists.intern(ids, &columns.distinct));
            let owner = owners.get(&r.oid).map(|o| Box::from(o.as_str()));
            self.add_relation(db, &r, &names, attrs, owner);
        }
        for r in uncommitted {
            self.add_pending(db, &r, &names);
        }
    }

    /// The file key of a `pg_class` row: mapped relations (`relfilenode` 0) through the map.
    fn file_key(db: &DatabaseInfo, r: &ClassRow, names: &NameSources<'_>) -> Option<FileKey> {
        let filenode = match r.relfilenode {
            0 if r.relisshared => names.global_map.get(&r.oid).copied(),
            0 => names.local_map.get(&r.oid).copied(),
            n => Some(n),
        }?;
        Some(if r.relisshared {
            (0, oids::GLOBALTABLESPACE, filenode)
        } else {
            let spc = match r.reltablespace {
                0 => db.tablespace,
                spc => spc,
            };
            (db.oid, spc, filenode)
        })
    }

    fn full_name(r: &ClassRow, names: &NameSources<'_>) -> String {
        let schema = names
            .namespaces
            .get(&r.relnamespace)
            .cloned()
            .unwrap_or_else(|| format!("namespace_{}", r.relnamespace));
        format!("{schema}.{}", r.relname)
    }

    /// Records an uncommitted row, unless a committed row owns the same file.
    fn add_pending(&mut self, db: &DatabaseInfo, r: &ClassRow, names: &NameSources<'_>) {
        let (RowState::Uncommitted(xmin), Some(key)) = (r.state, Self::file_key(db, r, names))
        else {
            return;
        };
        if !r.relkind.has_storage() || self.catalog.relations.contains_key(&key) {
            return;
        }
        let pending = PendingRelation {
            oid: r.oid,
            name: Self::full_name(r, names),
            kind: r.relkind,
            xmin,
        };
        self.catalog.pending.insert(key, pending);
    }

    /// For each index, its table (`pg_index`); for each TOAST table, the table pointing at it
    /// (`reltoastrelid`): oid -> `schema.name`.
    fn owners(
        &mut self,
        dir: &Path,
        pg_index: Option<u32>,
        rows: &[ClassRow],
        namespaces: &HashMap<u32, String>,
    ) -> HashMap<u32, String> {
        let full_name = |r: &ClassRow| {
            let schema = namespaces.get(&r.relnamespace).map_or("?", String::as_str);
            format!("{schema}.{}", r.relname)
        };
        let by_oid: HashMap<u32, &ClassRow> = rows.iter().map(|r| (r.oid, r)).collect();
        let mut owners: HashMap<u32, String> = rows
            .iter()
            .filter(|r| r.reltoastrelid != 0)
            .map(|r| (r.reltoastrelid, full_name(r)))
            .collect();
        let Some(node) = pg_index else { return owners };
        self.scan(dir, node, "pg_index", |row| {
            let Some((index, table)) = index_row(row.data) else {
                return;
            };
            if let Some(t) = by_oid.get(&table) {
                owners.insert(index, full_name(t));
            }
        });
        owners
    }

    fn add_relation(
        &mut self,
        db: &DatabaseInfo,
        r: &ClassRow,
        names: &NameSources<'_>,
        attributes: Option<Arc<[Attribute]>>,
        owner: Option<Box<str>>,
    ) {
        let Some((db_oid, spc, filenode)) = Self::file_key(db, r, names) else {
            return;
        };
        let am = (r.relam != 0)
            .then(|| {
                names
                    .ams
                    .get(&r.relam)
                    .cloned()
                    .or_else(|| builtin_am(r.relam).map(Arc::from))
            })
            .flatten();
        let info = RelationInfo {
            oid: r.oid,
            name: Self::full_name(r, names),
            kind: r.relkind,
            relam: r.relam,
            am,
            relnatts: r.relnatts,
            reltoastrelid: r.reltoastrelid,
            relfrozenxid: r.relfrozenxid,
            relminmxid: r.relminmxid,
            persistence: r.relpersistence,
            is_shared: r.relisshared,
            tablespace: (!matches!(spc, oids::DEFAULTTABLESPACE | oids::GLOBALTABLESPACE))
                .then(|| {
                    self.catalog
                        .tablespaces
                        .get(&spc)
                        .map(|t| Box::from(t.as_str()))
                })
                .flatten(),
            owner,
            attributes,
        };
        self.catalog.relations.insert((db_oid, spc, filenode), info);
    }
}
