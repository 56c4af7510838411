//! The refusal step of `checksums enable`, before any page is written: everything the server
//! will read with checksums on must be visible to this run. A directory that cannot be listed, a
//! tablespace whose link dangles or loops or whose disk is not mounted, anything but a regular
//! file where a relation file is named, a relation file that cannot be opened for reading and
//! writing, and a cluster file (`PG_VERSION`, `pg_control`, `pg_filenode.map`, `pg_xact/*`) that
//! is not a readable regular file: each is one line naming the path, and any of them makes
//! `enable` refuse with `pg_control` untouched.

use std::fs;
use std::path::Path;

use pgcheckdb_scan::open::open_regular;

use crate::verify::Plan;

/// Every reason, one line each, why `enable` must not run on this plan; empty when it may.
/// `write` also requires each relation file to open for writing.
pub(super) fn blocking_problems(plan: &Plan, write: bool) -> Vec<String> {
    let mut problems = plan.dir.blocking_problems();
    problems.extend(cluster_file_problems(&plan.datadir));
    problems.extend(unopenable_relation_files(plan, write));
    problems
}

/// Relation files that cannot be opened the way the scan will open them.
fn unopenable_relation_files(plan: &Plan, write: bool) -> Vec<String> {
    let how = if write {
        "for reading and writing"
    } else {
        "for reading"
    };
    plan.dir
        .files
        .iter()
        .filter_map(|f| {
            open_regular(&f.path(), write)
                .err()
                .map(|e| format!("could not open \"{}\" {how}: {e}", f.rel_path()))
        })
        .collect()
}

/// Files the server reads at start or on first access of a database that must be regular files.
fn cluster_file_problems(datadir: &Path) -> Vec<String> {
    let mut rels: Vec<String> = vec![
        "PG_VERSION".into(),
        "global/pg_control".into(),
        "global/pg_filenode.map".into(),
    ];
    for db in subdirectory_names(datadir, "base") {
        rels.push(format!("base/{db}/PG_VERSION"));
        rels.push(format!("base/{db}/pg_filenode.map"));
    }
    let mut problems = Vec::new();
    match fs::read_dir(datadir.join("pg_xact")) {
        Ok(entries) => {
            for entry in entries {
                match entry {
                    Ok(e) => rels.push(format!("pg_xact/{}", e.file_name().to_string_lossy())),
                    Err(e) => problems.push(format!("could not read \"pg_xact\": {e}")),
                }
            }
        }
        Err(e) => problems.push(format!("could not read \"pg_xact\": {e}")),
    }
    for rel in rels {
        let path = datadir.join(&rel);
        match fs::symlink_metadata(&path) {
            // A database directory without one of its files is not this step's concern.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && rel.starts_with("base/") => {}
            _ => {
                if let Err(e) = open_regular(&path, false) {
                    problems.push(format!("could not read \"{rel}\": {e}"));
                }
            }
        }
    }
    problems
}

/// Names of the numbered subdirectories of `rel` (databases); listing errors are reported by
/// the relation-file listing already.
fn subdirectory_names(datadir: &Path, rel: &str) -> Vec<String> {
    let Ok(entries) = fs::read_dir(datadir.join(rel)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .filter(|n| datadir.join(rel).join(n).is_dir())
        .collect();
    names.sort();
    names
}
