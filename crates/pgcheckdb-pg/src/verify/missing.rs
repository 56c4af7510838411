//! Missing relation files: every relation `pg_class` lists with storage (tables, indexes,
//! sequences, TOAST tables, materialized views) must have the first segment of its main fork,
//! and an unlogged one also its `_init` fork; every database of `pg_database` its directory. A missing file is found by comparing the catalog
//! with the listing of the data directory; the server only fails when it opens the relation.
//!
//! Not checked: temporary relations (their files vanish at shutdown), relations of a table
//! access method other than heap (the method decides whether files exist), databases whose
//! `pg_class` could not be read whole or that an interrupted `DROP DATABASE` left invalid,
//! and directories that could not be listed (a tool error already). Missing middle segments
//! are `segment_gap` findings of the plan.

use std::collections::HashSet;

use serde_json::json;

use crate::catalog::{persistence, Catalog, FileKey, RelationInfo};
use crate::datadir::Location;
use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::format::control::DbState;
use crate::format::oids::am_oid;
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;

/// What one relation needs and the listing holds.
struct Files<'a> {
    /// The listed files, looked up through its forks (sorted: a binary search, and no copy
    /// or hash of every file of a large cluster).
    plan: &'a Plan,
    unreadable: Vec<&'a str>,
    version_dir: String,
    in_recovery: bool,
    backup: bool,
}

/// One finding per missing main fork (segment 0) or `_init` fork of a relation with storage.
pub fn missing_files(plan: &Plan, catalog: &Catalog) -> Vec<Finding> {
    let files = Files {
        plan,
        unreadable: plan.dir.errors.iter().map(|(p, _)| p.as_str()).collect(),
        version_dir: plan
            .control
            .tablespace_version_directory()
            .unwrap_or_default(),
        // A standby, stopped or running (`verify --online`): replay removes files before the
        // catalog rows that dropped them reach the disk.
        in_recovery: matches!(
            plan.control.state,
            DbState::ShutdownedInRecovery | DbState::InArchiveRecovery
        ),
        // A base backup's pg_control is in production or in archive recovery (a running or
        // crashed cluster is refused before): pg_basebackup copies only the init fork of an
        // unlogged relation.
        backup: crate::format::control::state_of_a_backup(plan.control.state),
    };
    // The relations whose first main segment or init fork is not listed, in no order: on a
    // healthy cluster none, so nothing is sorted or collected for every relation.
    let mut absent: Vec<(&FileKey, &RelationInfo, ForkNumber)> = Vec::new();
    for (key, rel) in catalog.relations.iter() {
        if !expects_files(key, rel, catalog) {
            continue;
        }
        let unlogged = rel.persistence == persistence::UNLOGGED;
        // A standby removes the main forks of unlogged relations and a base backup leaves them
        // out; only the init fork remains.
        let main_needed = !(unlogged && (files.in_recovery || files.backup));
        if main_needed && !files.has(key, ForkNumber::Main, 0) {
            absent.push((key, rel, ForkNumber::Main));
        }
        if unlogged && !files.has(key, ForkNumber::Init, 0) {
            absent.push((key, rel, ForkNumber::Init));
        }
    }
    absent.sort_by_key(|&(key, _, fork)| (*key, fork));
    // A relation seen with two visible rows (a stale one) counts as present if either has files.
    let with_main: HashSet<(u32, u32)> = if absent.is_empty() {
        HashSet::new()
    } else {
        catalog
            .relations
            .iter()
            .filter(|(k, r)| {
                expects_files(k, r, catalog) && files.has_any_segment(k, ForkNumber::Main)
            })
            .map(|(k, r)| (k.0, r.oid))
            .collect()
    };
    let mut out = missing_database_dirs(plan, catalog, &files);
    for (key, rel, fork) in absent {
        let dir = Catalog::relation_dir(*key, &files.version_dir);
        if files.unreadable.iter().any(|e| under(&dir, e)) {
            continue;
        }
        let later = match fork {
            ForkNumber::Main => files.later_segments(key),
            _ => Vec::new(),
        };
        if fork == ForkNumber::Main && later.is_empty() && with_main.contains(&(key.0, rel.oid)) {
            continue;
        }
        out.push(files.finding(key, rel, &dir, fork, later));
    }
    out
}

/// One finding per valid database of `pg_database` whose directory does not exist: none of its
/// relations are then compared one by one.
fn missing_database_dirs(plan: &Plan, catalog: &Catalog, files: &Files<'_>) -> Vec<Finding> {
    let mut dbs: Vec<_> = catalog.databases.values().filter(|d| !d.invalid).collect();
    dbs.sort_by_key(|d| d.oid);
    let mut out = Vec::new();
    for db in dbs {
        let dir = Catalog::relation_dir((db.oid, db.tablespace, 0), &files.version_dir);
        if plan.datadir.join(&dir).is_dir() || files.unreadable.iter().any(|e| under(&dir, e)) {
            continue;
        }
        let mut message = format!(
            "the directory of database \"{}\" is missing; the server cannot connect to it",
            db.name
        );
        let severity = files.downgrade(&mut message);
        let mut f = Finding::for_file(FindingKind::MissingFile, severity, &dir, message)
            .with_detail(json!({"directory": true}));
        f.database = Some(DatabaseRef {
            oid: Some(db.oid),
            name: Some(db.name.clone()),
        });
        out.push(f);
    }
    out
}

/// Whether the catalog promises files for this relation.
fn expects_files(key: &FileKey, rel: &RelationInfo, catalog: &Catalog) -> bool {
    let table_am = matches!(
        rel.kind,
        crate::catalog::RelKind::Table
            | crate::catalog::RelKind::Toast
            | crate::catalog::RelKind::MaterializedView
    );
    let db_ok = key.0 == 0
        || (!catalog.incomplete_databases.contains(&key.0)
            && catalog.databases.get(&key.0).is_some_and(|d| !d.invalid));
    rel.kind.has_storage()
        && rel.persistence != persistence::TEMP
        && !(table_am && rel.relam != am_oid::HEAP)
        && db_ok
}

/// The relation directory of a catalog file key's database and tablespace.
fn location_of(key: &FileKey) -> Location {
    use crate::format::oids;
    match (key.0, key.1) {
        (0, oids::GLOBALTABLESPACE) => Location::Global,
        (db_oid, oids::DEFAULTTABLESPACE) => Location::Database { db_oid },
        (db_oid, spc_oid) => Location::Tablespace { spc_oid, db_oid },
    }
}

/// Whether the directory `dir` is the one that could not be listed, inside it, or holds it.
fn under(dir: &str, unreadable: &str) -> bool {
    dir == unreadable
        || dir.starts_with(&format!("{unreadable}/"))
        || unreadable.starts_with(&format!("{dir}/"))
}

impl Files<'_> {
    /// Error, or on a standby (shut down in recovery or running) a warning with the reason: its catalog
    /// pages may be older than the file operations WAL replay already did.
    fn downgrade(&self, message: &mut String) -> Severity {
        if !self.in_recovery {
            return Severity::Error;
        }
        message.push_str(
            " (standby in recovery: its catalog rows may not be flushed yet, so the object may have been dropped or rewritten since)",
        );
        Severity::Warning
    }

    /// The listed segment numbers of one fork of the relation `key`, in order.
    fn segments(&self, key: &FileKey, fork: ForkNumber) -> impl Iterator<Item = u32> + '_ {
        let wanted = (location_of(key), key.2, fork);
        let forks = &self.plan.forks;
        let found = forks
            .binary_search_by(|f| (f.location, f.relfilenode, f.fork).cmp(&wanted))
            .ok();
        let files = found.map_or(0..0, |i| forks[i].segments());
        self.plan.dir.files[files].iter().map(|f| f.name.segno)
    }

    fn has(&self, key: &FileKey, fork: ForkNumber, segno: u32) -> bool {
        self.segments(key, fork).any(|s| s == segno)
    }

    fn has_any_segment(&self, key: &FileKey, fork: ForkNumber) -> bool {
        self.segments(key, fork).next().is_some()
    }

    /// Segments after 0 of the main fork that exist.
    fn later_segments(&self, key: &FileKey) -> Vec<u32> {
        self.segments(key, ForkNumber::Main)
            .filter(|&s| s > 0)
            .collect()
    }

    fn finding(
        &self,
        key: &FileKey,
        rel: &RelationInfo,
        dir: &str,
        fork: ForkNumber,
        later: Vec<u32>,
    ) -> Finding {
        let path = match fork {
            ForkNumber::Init => format!("{dir}/{}_init", key.2),
            _ => format!("{dir}/{}", key.2),
        };
        let what = format!("{} {}", rel.kind.name().replace('_', " "), rel.name);
        let mut message = match fork {
            ForkNumber::Init => format!(
                "the init fork of unlogged {what} is missing; after a crash the server cannot reset the relation"
            ),
            _ if !later.is_empty() => format!(
                "the first segment of {what} is missing although segment {} exists; the server fails when it opens the relation",
                later[0]
            ),
            _ => format!("the file of {what} is missing; the server fails when it opens the relation"),
        };
        let severity = self.downgrade(&mut message);
        let mut f = Finding::for_file(FindingKind::MissingFile, severity, &path, message)
            .with_detail(json!({"later_segments": later}))
            .at_segment(0);
        f.fork = Some(fork);
        f.database = Some(DatabaseRef {
            oid: Some(key.0),
            name: None,
        });
        f.relation = Some(RelationRef {
            filenode: Some(key.2),
            oid: Some(rel.oid),
            name: Some(rel.name.to_string()),
            kind: Some(rel.kind.name()),
        });
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_directories_cover_their_contents_and_parents() {
        assert!(under("base/5", "base/5"));
        assert!(under("base/5", "base"));
        assert!(under(
            "pg_tblspc/16384/PG_16_202307071/5",
            "pg_tblspc/16384"
        ));
        assert!(!under("base/5", "base/50"));
        assert!(!under("base/50", "base/5"));
    }
}
