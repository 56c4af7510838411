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

mod reader;
mod rows;

use crate::format::bytes::{le_i16, le_u32};
use reader::{ColumnLists, Reader};
use rows::name_at;

#[doc(hidden)]
pub mod fuzzing;

use foldhash::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::format::control::ControlFile;
use crate::format::enums::byte_enum;
use crate::format::oids;
use attributes::Attribute;
use layouts::layouts_for;
use twophase::PreparedXact;
use xact::CommitLog;

byte_enum! {
    /// `pg_class.relkind`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RelKind {
        Table = b'r',
        Index = b'i',
        Sequence = b'S',
        Toast = b't',
        View = b'v',
        MaterializedView = b'm',
        CompositeType = b'c',
        ForeignTable = b'f',
        PartitionedTable = b'p',
        PartitionedIndex = b'I',
        _ => Other(u8),
    }
}

impl RelKind {
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

/// `FirstNormalObjectId`: OIDs (and file numbers) below it are assigned by initdb to the
/// objects that come with PostgreSQL.
pub const FIRST_NORMAL_OBJECT_ID: u32 = 16384;

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
    pub name: Arc<str>,
    pub kind: RelKind,
    pub relam: u32,
    /// Access method name (`heap`, `btree`, ...), if it has one: [`Catalog::access_method`].
    pub am: Option<SharedName>,
    pub relnatts: i16,
    pub reltoastrelid: u32,
    pub relfrozenxid: u32,
    pub relminmxid: u32,
    /// `relpages` and `reltuples`: the pages and rows the last VACUUM, ANALYZE or CREATE
    /// INDEX counted (`reltuples` -1: never).
    pub relpages: u32,
    pub reltuples: f32,
    pub persistence: u8,
    pub is_shared: bool,
    /// Tablespace name, when not the database's default: [`Catalog::tablespace_of`].
    pub tablespace: Option<SharedName>,
    /// For an index, its table; for a TOAST table, the table whose values it holds.
    /// Shared with the owner's own [`RelationInfo::name`].
    pub owner: Option<Arc<str>>,
    /// Columns 1..=relnatts, if `pg_attribute` described them completely.
    pub attributes: Option<Arc<[Attribute]>>,
}

/// A name many relations share (an access method's, a tablespace's), held once in
/// [`Catalog::shared_names`]: a relation keeps two bytes instead of a pointer and a length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedName(u16);

/// The distinct access method and tablespace names of the catalogs.
#[derive(Debug, Default)]
pub struct SharedNames {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, SharedName>,
}

impl SharedNames {
    /// The id of `name`, adding it if new; `None` past 65,536 distinct names.
    pub fn intern(&mut self, name: &str) -> Option<SharedName> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        let id = SharedName(u16::try_from(self.names.len()).ok()?);
        let name: Arc<str> = Arc::from(name);
        self.names.push(Arc::clone(&name));
        self.ids.insert(name, id);
        Some(id)
    }

    pub fn get(&self, id: SharedName) -> &str {
        self.names.get(id.0 as usize).map_or("", |n| n)
    }
}

/// Key of a relation's files: database oid (0 for shared), tablespace oid, file number.
pub type FileKey = (u32, u32, u32);

/// The relations of the catalogs by file key, held compactly: the descriptions in one vector
/// (grown per database to its exact size) and a hash index of 4-byte positions into it, instead
/// of a hash table whose empty slots are each as large as a description. Iteration order is
/// unspecified, as with a hash map.
#[derive(Debug, Default)]
pub struct RelationMap {
    entries: Vec<(FileKey, RelationInfo)>,
    index: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl RelationMap {
    fn hash(&self, key: &FileKey) -> u64 {
        hash_key(&self.hasher, key)
    }

    fn position(&self, key: &FileKey) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(self.hash(key), |&i| entries[i as usize].0 == *key)
            .map(|&i| i as usize)
    }

    /// Inserts or replaces the relation of `key`; returns the one it replaced.
    pub fn insert(&mut self, key: FileKey, info: RelationInfo) -> Option<RelationInfo> {
        if let Some(i) = self.position(&key) {
            return Some(std::mem::replace(&mut self.entries[i].1, info));
        }
        let i = u32::try_from(self.entries.len()).expect("fewer than 2^32 relations");
        let hash = self.hash(&key);
        self.entries.push((key, info));
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index
            .insert_unique(hash, i, |&j| hash_key(hasher, &entries[j as usize].0));
        None
    }

    /// Room for `n` more relations, exactly.
    pub fn reserve_exact(&mut self, n: usize) {
        self.entries.reserve_exact(n);
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index
            .reserve(n, |&j| hash_key(hasher, &entries[j as usize].0));
    }

    pub fn get(&self, key: &FileKey) -> Option<&RelationInfo> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    pub fn contains_key(&self, key: &FileKey) -> bool {
        self.position(key).is_some()
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

fn hash_key(hasher: &foldhash::fast::RandomState, key: &FileKey) -> u64 {
    use std::hash::BuildHasher;
    hasher.hash_one(key)
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
    /// Access method and tablespace names of [`RelationInfo`]s.
    pub shared_names: SharedNames,
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
            clog: &clog,
            catalog: Catalog {
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
        let catalog = reader.catalog;
        Catalog { clog, ..catalog }
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

    /// The access method name of `rel` (`heap`, `btree`, ...), if it has one.
    pub fn access_method(&self, rel: &RelationInfo) -> Option<&str> {
        rel.am.map(|id| self.shared_names.get(id))
    }

    /// The tablespace name of `rel`, when not its database's default.
    pub fn tablespace_of(&self, rel: &RelationInfo) -> Option<&str> {
        rel.tablespace.map(|id| self.shared_names.get(id))
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
                name: Some(rel.name.to_string()),
                kind: Some(rel.kind.name()),
            });
            if let Some(obj) = f.detail.as_object_mut() {
                let extra = [
                    ("access_method", self.access_method(rel)),
                    ("table", rel.owner.as_deref()),
                    ("tablespace", self.tablespace_of(rel)),
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

/// Why [`Catalog::find_relation`] found no one relation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindRelationError {
    /// Nothing of that name (in the database, when one was given).
    #[error("no relation \"{name}\" found in the catalogs{}", database.as_ref().map(|d| format!(" of database \"{d}\"")).unwrap_or_default())]
    NotFound {
        name: String,
        database: Option<String>,
    },
    /// A name found in several schemas or databases: the message lists where, and the remedy.
    #[error("\"{name}\" names {count} relations ({}); add the schema or --database", places.join("; "))]
    Ambiguous {
        name: String,
        count: usize,
        /// `schema.name in database "a", "b"`, one entry per relation name.
        places: Vec<String>,
    },
}

impl Catalog {
    /// Finds a relation by `schema.name` (or a bare name, if unique) in the database called
    /// `database`, or in any database when `None`. Returns its file key and description.
    pub fn find_relation(
        &self,
        name: &str,
        database: Option<&str>,
    ) -> Result<(FileKey, &RelationInfo), FindRelationError> {
        let wanted_db = |db_oid: u32| match database {
            None => true,
            Some(d) => db_oid == 0 || self.databases.get(&db_oid).is_some_and(|db| db.name == d),
        };
        let matches_name = |rel: &RelationInfo| {
            *rel.name == *name
                || (!name.contains('.')
                    && rel.name.rsplit_once('.').is_some_and(|(_, n)| n == name))
        };
        let mut found: Vec<(FileKey, &RelationInfo)> = self
            .relations
            .iter()
            .filter(|(k, r)| wanted_db(k.0) && matches_name(r))
            .map(|(k, r)| (*k, r))
            .collect();
        // One relation may have several file keys; a catalog such as pg_class has the same oid
        // in every database, and each database's copy is another relation.
        found.sort_by_key(|(k, r)| (if r.is_shared { 0 } else { k.0 }, r.oid, r.is_shared, *k));
        found.dedup_by_key(|(k, r)| (if r.is_shared { 0 } else { k.0 }, r.oid, r.is_shared));
        match found.len() {
            0 => Err(FindRelationError::NotFound {
                name: name.to_string(),
                database: database.map(str::to_string),
            }),
            1 => Ok(found[0]),
            count => Err(FindRelationError::Ambiguous {
                name: name.to_string(),
                count,
                places: self.places(&found),
            }),
        }
    }

    /// `schema.name in database "a", "b"` for each name among `found`, sorted.
    fn places(&self, found: &[(FileKey, &RelationInfo)]) -> Vec<String> {
        let mut by_name: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for (key, rel) in found {
            let db = match (rel.is_shared, self.databases.get(&key.0)) {
                (true, _) => "(shared catalogs)".to_string(),
                (false, Some(db)) => format!("\"{}\"", db.name),
                (false, None) => format!("oid {}", key.0),
            };
            by_name.entry(&rel.name).or_default().push(db);
        }
        by_name
            .into_iter()
            .map(|(name, mut dbs)| {
                dbs.sort();
                let what = if dbs.len() == 1 {
                    "database"
                } else {
                    "databases"
                };
                format!("{name} in {what} {}", dbs.join(", "))
            })
            .collect()
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

#[cfg(test)]
mod error_tests {
    use super::FindRelationError;

    #[test]
    fn messages_are_the_old_texts() {
        let not_found = |database: Option<&str>| {
            FindRelationError::NotFound {
                name: "t".into(),
                database: database.map(str::to_string),
            }
            .to_string()
        };
        assert_eq!(not_found(None), "no relation \"t\" found in the catalogs");
        assert_eq!(
            not_found(Some("db")),
            "no relation \"t\" found in the catalogs of database \"db\""
        );
        assert_eq!(
            FindRelationError::Ambiguous {
                name: "t".into(),
                count: 2,
                places: vec!["a.t in database \"x\"".into(), "b.t in database \"x\"".into()],
            }
            .to_string(),
            "\"t\" names 2 relations (a.t in database \"x\"; b.t in database \"x\"); add the schema or --database"
        );
    }
}
