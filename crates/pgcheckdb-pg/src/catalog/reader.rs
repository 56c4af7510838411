//! Reading one cluster's catalogs from their files: the relation maps, `pg_database`,
//! `pg_tablespace`, and per database `pg_class`, `pg_namespace`, `pg_am`, `pg_attribute`,
//! `pg_type` and `pg_index`, each page checked for damage, rows picked by visibility.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::rows::*;
use super::*;
use crate::finding::{FindingKind, Severity};
use crate::format::control::ControlFile;
use crate::format::oids;
use attributes::{attribute_layout, Attribute};
use heapscan::{for_each_page, rows_of_page, Row, RowState, ScanTrouble};
use layouts::CatalogLayouts;
use pgcheckdb_scan::open::not_regular;

/// Context for reading one cluster's catalogs.
pub(super) struct Reader<'a> {
    pub(super) datadir: &'a Path,
    pub(super) control: &'a ControlFile,
    pub(super) layouts: CatalogLayouts,
    /// The commit log that decides which catalog rows are visible; it goes into `catalog`
    /// when every catalog has been read, and is shared meanwhile with a reader on another
    /// thread ([`Reader::beside`]).
    pub(super) clog: &'a CommitLog,
    pub(super) catalog: Catalog,
    /// Column lists already seen: relations with the same columns (the tables of a
    /// multi-tenant cluster's schemas, every TOAST table) share one list.
    pub(super) column_lists: ColumnLists,
    /// Whether to read `pg_attribute` (the structure checks need it; names do not).
    pub(super) columns: bool,
}

/// Interned column lists.
#[derive(Default)]
pub(super) struct ColumnLists(HashSet<Arc<[Attribute]>>);

impl ColumnLists {
    /// The shared list of the columns `ids` (indexes into `distinct`).
    pub(super) fn intern(&mut self, ids: Vec<u32>, distinct: &[Attribute]) -> Arc<[Attribute]> {
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
pub(super) struct RelationColumns {
    /// Every distinct column.
    pub(super) distinct: Vec<Attribute>,
    /// `(attrelid, attnum, index into distinct)`, sorted.
    pub(super) by_relation: Vec<(u32, i16, u32)>,
}

impl RelationColumns {
    /// `(attnum, index into distinct)` of the columns of `relid`, or `None` if it has none.
    pub(super) fn of(&self, relid: u32) -> Option<Vec<(i16, u32)>> {
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

/// What one database's catalogs give for naming its relations.
pub(super) struct NameSources<'a> {
    pub(super) relnames: &'a RelNames,
    pub(super) namespaces: &'a HashMap<u32, String>,
    pub(super) ams: &'a HashMap<u32, String>,
    pub(super) local_map: &'a HashMap<u32, u32>,
    pub(super) global_map: &'a HashMap<u32, u32>,
}

impl<'a> Reader<'a> {
    pub(super) fn dir_of(&self, db_oid: u32, spc: u32) -> PathBuf {
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

    /// A reader of the same cluster for another thread: what it finds goes into its own
    /// (otherwise empty) catalog, for this reader to take in.
    pub(super) fn beside(&self) -> Reader<'a> {
        Reader {
            datadir: self.datadir,
            control: self.control,
            layouts: self.layouts,
            clog: self.clog,
            catalog: Catalog::default(),
            column_lists: ColumnLists::default(),
            columns: self.columns,
        }
    }

    pub(super) fn shown(&self, dir: &Path, filenode: u32) -> String {
        let rel = dir.strip_prefix(self.datadir).unwrap_or(dir);
        format!("{}/{filenode}", rel.display())
    }

    /// Reads the visible rows of the relation `filenode` in `dir` page by page, reporting
    /// trouble; false if the file could not be read whole.
    pub(super) fn scan(
        &mut self,
        dir: &Path,
        filenode: u32,
        what: &str,
        mut f: impl FnMut(Row<'_>),
    ) -> bool {
        self.scan_rows(dir, filenode, what, |row, state| {
            if state == RowState::Visible {
                f(row);
            }
        })
    }

    /// [`Self::scan`], also passing the rows of transactions that did not commit.
    pub(super) fn scan_rows(
        &mut self,
        dir: &Path,
        filenode: u32,
        what: &str,
        mut f: impl FnMut(Row<'_>, RowState),
    ) -> bool {
        let ma = self.control.max_align as usize;
        let clog = self.clog;
        self.scan_pages(dir, filenode, what, |blkno, page, trouble| {
            rows_of_page(page, blkno, ma, clog, trouble, &mut f)
        })
    }

    /// Reads every page of the catalog `filenode` in `dir`, handing each to `visit`, and reports
    /// the pages `visit` notes as damaged and a file that cannot be read; false if the file
    /// could not be used whole.
    pub(super) fn scan_pages(
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
            let blocks: Vec<String> = trouble.bad_blocks.iter().map(|b| b.to_string()).collect();
            let msg = format!(
                "{what} has {} damaged page(s) (block(s) {}){more}; rows on them are not used for names",
                trouble.bad_count,
                blocks.join(", ")
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
    pub(super) fn read_failed(&mut self, shown: &str, what: &str, e: &std::io::Error) {
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

    pub(super) fn map_of(&mut self, dir: &Path) -> HashMap<u32, u32> {
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
    pub(super) fn read_attributes(
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

    pub(super) fn read_databases(&mut self) {
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
    pub(super) fn read_class_rows(
        &mut self,
        dir: &Path,
        filenode: u32,
    ) -> (Vec<ClassRow>, RelNames, bool) {
        let l = self.layouts.pg_class;
        let mut rows = Vec::new();
        let mut names = RelNames::default();
        let complete = self.scan_rows(dir, filenode, "pg_class", |row, state| {
            rows.extend(class_row(row.data, &l, state, &mut names));
        });
        rows.shrink_to_fit();
        names.shrink_to_fit();
        (rows, names, complete)
    }

    /// `oid -> name` from a catalog whose rows start with `oid, name` (pg_namespace, pg_am).
    pub(super) fn read_names(
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

    pub(super) fn read_database_relations(&mut self, db: &DatabaseInfo) {
        let dir = self.dir_of(db.oid, db.tablespace);
        if !dir.is_dir() {
            return;
        }
        let local_map = self.map_of(&dir);
        let Some(&class_node) = local_map.get(&oids::PG_CLASS) else {
            return;
        };
        let (mut rows, relnames, complete) = self.read_class_rows(&dir, class_node);
        let uncommitted = split_off_uncommitted(&mut rows);
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
        let ams = self.read_names(&dir, node_of(oids::PG_AM), "pg_am");
        // The physical level reads no column, type or operator class: those catalogs' pages
        // are checked by its scan like every other page, and a damaged one costs no name.
        let types = if self.columns {
            self.read_names(&dir, node_of(oids::PG_TYPE), "pg_type")
        } else {
            HashMap::new()
        };
        // pg_attribute, the largest catalog, is read on a thread of its own meanwhile.
        let (owners, global_map, columns) = std::thread::scope(|s| {
            let attributes = local_map.get(&oids::PG_ATTRIBUTE).filter(|_| self.columns);
            let columns = attributes.map(|&n| {
                let mut beside = self.beside();
                let (dir, types) = (&dir, &types);
                s.spawn(move || (beside.read_attributes(dir, n, types), beside.catalog))
            });
            let owners = self.owners(&dir, node_of(oids::PG_INDEX), &rows);
            if self.columns {
                self.read_order_meta(db, &dir, &node_of);
            }
            let global_map = if rows.iter().any(|r| r.relisshared) {
                self.map_of(&self.datadir.join("global"))
            } else {
                HashMap::new()
            };
            let columns = columns.map(|h| {
                let (columns, found) = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                self.catalog.findings.extend(found.findings);
                self.catalog.tool_errors.extend(found.tool_errors);
                columns
            });
            (owners, global_map, columns.unwrap_or_default())
        });
        drop(types);
        let names = NameSources {
            relnames: &relnames,
            namespaces: &namespaces,
            ams: &ams,
            local_map: &local_map,
            global_map: &global_map,
        };
        // One `schema.name` per row, shared with the indexes and TOAST table it owns.
        let full_names: Vec<Arc<str>> = rows
            .iter()
            .map(|r| Arc::from(Self::full_name(r, &names)))
            .collect();
        self.catalog.relations.reserve_exact(rows.len());
        let mut taken: HashSet<u32> = HashSet::new();
        for (r, name) in rows.iter().zip(&full_names) {
            // A second row with the same oid (a stale one) gets no columns, as before.
            let ids = taken.insert(r.oid).then(|| columns.of(r.oid)).flatten();
            let attrs = complete_columns(ids, r.relnatts)
                .map(|ids| self.column_lists.intern(ids, &columns.distinct));
            let owner = owners
                .get(&r.oid)
                .and_then(|&i| full_names.get(i as usize))
                .map(Arc::clone);
            self.add_relation(db, r, &names, Arc::clone(name), attrs, owner);
        }
        for r in uncommitted {
            self.add_pending(db, &r, &names);
        }
    }

    /// The file key of a `pg_class` row: mapped relations (`relfilenode` 0) through the map.
    pub(super) fn file_key(
        db: &DatabaseInfo,
        r: &ClassRow,
        names: &NameSources<'_>,
    ) -> Option<FileKey> {
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

    pub(super) fn full_name(r: &ClassRow, names: &NameSources<'_>) -> String {
        let schema = names
            .namespaces
            .get(&r.relnamespace)
            .cloned()
            .unwrap_or_else(|| format!("namespace_{}", r.relnamespace));
        format!("{schema}.{}", names.relnames.get(r.relname))
    }

    /// Records an uncommitted row, unless a committed row owns the same file.
    pub(super) fn add_pending(&mut self, db: &DatabaseInfo, r: &ClassRow, names: &NameSources<'_>) {
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
    /// (`reltoastrelid`): oid -> the owner's position in `rows` (of its last row, if a stale
    /// one shares its oid).
    pub(super) fn owners(
        &mut self,
        dir: &Path,
        pg_index: Option<u32>,
        rows: &[ClassRow],
    ) -> HashMap<u32, u32> {
        let position = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let by_oid: HashMap<u32, u32> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.oid, position(i)))
            .collect();
        let mut owners: HashMap<u32, u32> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.reltoastrelid != 0)
            .map(|(i, r)| (r.reltoastrelid, position(i)))
            .collect();
        let Some(node) = pg_index else { return owners };
        self.scan(dir, node, "pg_index", |row| {
            let Some((index, table)) = index_row(row.data) else {
                return;
            };
            if let Some(&t) = by_oid.get(&table) {
                owners.insert(index, t);
            }
        });
        owners
    }

    pub(super) fn add_relation(
        &mut self,
        db: &DatabaseInfo,
        r: &ClassRow,
        names: &NameSources<'_>,
        name: Arc<str>,
        attributes: Option<Arc<[Attribute]>>,
        owner: Option<Arc<str>>,
    ) {
        let Some((db_oid, spc, filenode)) = Self::file_key(db, r, names) else {
            return;
        };
        let shared = &mut self.catalog.shared_names;
        let am = (r.relam != 0)
            .then(|| match names.ams.get(&r.relam) {
                Some(name) => shared.intern(name),
                None => builtin_am(r.relam).and_then(|name| shared.intern(name)),
            })
            .flatten();
        let tablespace = (!matches!(spc, oids::DEFAULTTABLESPACE | oids::GLOBALTABLESPACE))
            .then(|| {
                let name = self.catalog.tablespaces.get(&spc)?;
                self.catalog.shared_names.intern(name)
            })
            .flatten();
        let info = RelationInfo {
            oid: r.oid,
            name,
            kind: r.relkind,
            relam: r.relam,
            am,
            relnatts: r.relnatts,
            reltoastrelid: r.reltoastrelid,
            relfrozenxid: r.relfrozenxid,
            relminmxid: r.relminmxid,
            relpages: r.relpages,
            reltuples: r.reltuples,
            persistence: r.relpersistence,
            is_shared: r.relisshared,
            tablespace,
            owner,
            attributes,
        };
        self.catalog.relations.insert((db_oid, spc, filenode), info);
    }
}

/// Moves the rows that are not visible (inserted by transactions that did not commit) out of
/// `rows`, both parts in page order, without a second vector of every row (a multi-tenant
/// database has hundreds of thousands of them; the uncommitted ones are few).
fn split_off_uncommitted(rows: &mut Vec<ClassRow>) -> Vec<ClassRow> {
    let uncommitted = rows
        .iter()
        .filter(|r| r.state != RowState::Visible)
        .cloned()
        .collect();
    rows.retain(|r| r.state == RowState::Visible);
    uncommitted
}
