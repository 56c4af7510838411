//! The refusal step of `checksums enable`, before any page is written: everything the server
//! will read with checksums on must be visible to this run. A directory that cannot be listed, a
//! tablespace whose link dangles or loops or whose disk is not mounted, anything but a regular
//! file where a relation file is named, a relation file that cannot be opened for reading and
//! writing, and a cluster file (`PG_VERSION`, `pg_control`, `pg_filenode.map`, `pg_xact/*`) that
//! is not a readable regular file: each is one line naming the path, and any of them makes
//! `enable` refuse with `pg_control` untouched.
//!
//! Then the tablespaces must be this cluster's alone: a `cp -a` copy keeps `pg_tblspc` links to
//! the original's tablespace directories, and stamping pages there while the original's server
//! runs would overwrite what it writes. [`check_tablespaces_unused`] refuses when any running
//! process holds a file open under a tablespace's real directory (`/proc/<pid>/fd`). A process
//! whose descriptors cannot be read is skipped unless it runs as the tablespace directory's
//! owner (the user a server using it runs as): then it is refused too. A server that is stopped,
//! or runs in another PID namespace, is not seen: docs/CHECKSUMS.md says what a copy shares.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use pgcheckdb_scan::open::open_regular;

use super::SwitchError;
use crate::plan::Plan;

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

/// A tablespace of the data directory: its OID, the real directory `pg_tblspc/<oid>` leads to,
/// and that directory's owner (the user a server using it runs as).
struct Tablespace {
    oid: u32,
    dir: PathBuf,
    owner: u32,
}

/// Refuses ([`SwitchError::TablespaceInUse`]) when a running process other than this one holds
/// a file open under the real directory of one of the data directory's tablespaces.
///
/// A process whose descriptors may not be read (another user's, when not root; one with more
/// privileges than ours, even as root) is skipped unless it runs as the owner of a tablespace
/// directory, the user a PostgreSQL server using it runs as: then it is refused
/// ([`SwitchError::ProcessUninspectable`]), since it could hold that tablespace open.
pub(super) fn check_tablespaces_unused(datadir: &Path) -> Result<(), SwitchError> {
    let spaces = tablespaces(datadir);
    if spaces.is_empty() {
        return Ok(());
    }
    let me = std::process::id();
    let procs = fs::read_dir("/proc").map_err(|error| SwitchError::ProcessesUnreadable {
        path: "/proc".into(),
        error,
    })?;
    for entry in procs.filter_map(|e| e.ok()) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != me {
            check_process(pid, &spaces)?;
        }
    }
    Ok(())
}

/// The refusal for process `pid`, if it holds (or may hold) a file of `spaces` open.
fn check_process(pid: u32, spaces: &[Tablespace]) -> Result<(), SwitchError> {
    let files = match open_files(pid) {
        Ok(files) => files,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let owner_of = process_uid(pid).and_then(|uid| spaces.iter().find(|s| s.owner == uid));
            return match owner_of {
                Some(space) => Err(SwitchError::ProcessUninspectable {
                    oid: space.oid,
                    pid,
                    command: command_name(pid),
                    error: e,
                }),
                None => Ok(()),
            };
        }
        Err(error) => {
            return Err(SwitchError::ProcessesUnreadable {
                path: format!("/proc/{pid}/fd").into(),
                error,
            })
        }
    };
    for file in files {
        if let Some(space) = spaces.iter().find(|s| file.starts_with(&s.dir)) {
            return Err(SwitchError::TablespaceInUse {
                oid: space.oid,
                dir: space.dir.clone(),
                pid,
                command: command_name(pid),
                file,
            });
        }
    }
    Ok(())
}

/// The tablespace links of `pg_tblspc/` named by an OID that resolve (one that does not is a
/// blocking problem already), with the owner of each directory.
fn tablespaces(datadir: &Path) -> Vec<Tablespace> {
    crate::ops::confine::tablespace_links(datadir)
        .into_iter()
        .filter_map(|link| {
            let owner = fs::metadata(&link.real).ok()?.uid();
            Some(Tablespace {
                oid: link.oid,
                dir: link.real,
                owner,
            })
        })
        .collect()
}

/// The paths process `pid` holds open (`/proc/<pid>/fd/*`). A process that ended meanwhile, or
/// a descriptor closed meanwhile, holds nothing; a process that may not be inspected is a
/// `PermissionDenied` error.
fn open_files(pid: u32) -> io::Result<Vec<PathBuf>> {
    let gone = |e: &io::Error| {
        e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
    };
    let entries = match fs::read_dir(format!("/proc/{pid}/fd")) {
        Err(e) if gone(&e) => return Ok(Vec::new()),
        other => other?,
    };
    let mut files = Vec::new();
    for entry in entries {
        match entry.and_then(|e| fs::read_link(e.path())) {
            Ok(path) => files.push(path),
            Err(e) if gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(files)
}

/// The effective user id of a process (`Uid:` of `/proc/<pid>/status`, readable by everyone).
fn process_uid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The command name of a process (`/proc/<pid>/comm`), or `?` when it cannot be read.
fn command_name(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tablespace_held_open_by_a_process_is_named() {
        let root = tempfile::tempdir().expect("tempdir");
        let data = root.path().join("data");
        let spc = root.path().join("spc");
        fs::create_dir_all(data.join("pg_tblspc")).unwrap();
        fs::create_dir_all(&spc).unwrap();
        std::os::unix::fs::symlink(&spc, data.join("pg_tblspc/16400")).unwrap();
        // As root, the tablespace belongs to a user no process runs as (as a server's user it
        // would make every process we may not inspect a refusal).
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&spc, Some(65534), Some(65534)).unwrap();
        }
        if let Err(e) = check_tablespaces_unused(&data) {
            panic!("{e}");
        }
        // A child process holding a file of the tablespace open.
        let held = spc.join("16401");
        fs::write(&held, b"x").unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(fs::File::open(&held).unwrap())
            .spawn()
            .expect("spawn sleep");
        let result = check_tablespaces_unused(&data);
        let _ = child.kill();
        let _ = child.wait();
        match result {
            Err(SwitchError::TablespaceInUse {
                oid: 16400,
                pid,
                file,
                ..
            }) => {
                assert_eq!(pid, child.id());
                assert_eq!(file, fs::canonicalize(&held).unwrap());
            }
            other => panic!("{other:?}"),
        }
        // This process's own descriptors do not count.
        let _mine = fs::File::open(&held).unwrap();
        assert!(check_tablespaces_unused(&data).is_ok());
    }
}
