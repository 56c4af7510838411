//! The data directory lock: `postmaster.pid`, held by pgcheckdb while it changes files.
//!
//! A server that starts while `checksums enable` rewrites pages would lose the pages it writes
//! when pgcheckdb writes back its older copy. PostgreSQL's own guard against two processes in
//! one data directory is `postmaster.pid`: a starting postmaster creates it with
//! `O_CREAT | O_EXCL`; when the file already exists it reads the process id on its first line and
//! refuses to start ("lock file \"postmaster.pid\" already exists") while a signal 0 to that
//! process succeeds. It only takes the file for stale when the process is gone (`ESRCH`) or
//! cannot be signalled by it (`EPERM`).
//!
//! [`DataDirLock::acquire`] creates the file as exclusively (a complete draft,
//! `postmaster.pid.pgcheckdb.<pid>`, hard-linked to the name, which fails if it exists, so that
//! no server ever sees a half-written file of ours), with this process's id on the first
//! line, the data directory on the second, the start time on the third and, on the eighth (the
//! line where a postmaster writes its status), `pgcheckdb <command>`, by which a second pgcheckdb
//! recognises the holder. So that the server's signal 0 succeeds:
//!
//! * pgcheckdb must run as the data directory's owner (the server's user) or as root;
//! * as root, the file is handed to the owner (so the server can read it) and the process's
//!   saved set-user-ID becomes the owner's, which lets processes of that user signal it; the
//!   effective user stays root.
//!
//! A `postmaster.pid` that exists already is never removed blindly: a live process keeps it
//! (a server, or another pgcheckdb: both refused by name); an empty or unparsable one is
//! refused; one whose process is gone is replaced only when `pg_control` says the cluster was
//! shut down cleanly ([`check_stopped`]).
//!
//! The lock is removed when the [`DataDirLock`] is dropped (every return path, errors and
//! panics), and only while the file still names this process. Killed with `SIGKILL`, pgcheckdb
//! leaves the file behind naming a dead process: a server then takes it for stale and starts.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use pgcheckdb_scan::open::read_regular;

use crate::format::control::ControlFile;
use crate::ops::cluster::{
    check_stopped, process_alive, read_lock_file, LockFileState, LockHolder, RunningReason,
    HOLDER_MARK, LINE_PID, LINE_STATUS, LOCK_FILE, MAX_LOCK_FILE_BYTES,
};

/// Why the lock could not be taken. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another pgcheckdb (pid {pid}, \"{command}\") holds the lock on this data directory ({LOCK_FILE}); wait until it ends")]
    HeldByPgcheckdb { pid: i32, command: String },
    #[error("{0}; stop the server cleanly (pg_ctl stop -m fast) and try again")]
    Running(RunningReason),
    #[error("\"{0}\" is empty: a server may be starting right now, or one crashed while starting; if no server is running, remove the file and try again")]
    Empty(PathBuf),
    #[error("\"{path}\" does not start with a process id (\"{first_line}\"); if no server is running, remove the file and try again")]
    Bogus { path: PathBuf, first_line: String },
    #[error("could not read \"{path}\": {source}; cannot tell whether a server is using the data directory")]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("could not create the lock file \"{path}\": {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("pgcheckdb runs as user id {euid} but the data directory is owned by user id {owner}: a starting server could not see pgcheckdb's lock ({LOCK_FILE}); run pgcheckdb as the data directory's owner or as root")]
    NotOwner { euid: u32, owner: u32 },
    #[error("the lock file \"{path}\" was changed or removed by someone else while pgcheckdb held it ({now}); nothing more is written")]
    Lost { path: PathBuf, now: String },
}

/// `postmaster.pid`, created by this process. Removed on drop.
#[derive(Debug)]
pub struct DataDirLock {
    path: PathBuf,
    content: String,
}

impl DataDirLock {
    /// Creates `postmaster.pid` for `command` (e.g. `checksums enable`); see the module docs.
    pub fn acquire(datadir: &Path, command: &str) -> Result<DataDirLock, LockError> {
        let owner = fs::metadata(datadir)
            .map_err(|source| LockError::Unreadable {
                path: datadir.to_path_buf(),
                source,
            })?
            .uid();
        // SAFETY: geteuid has no arguments and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 && euid != owner {
            return Err(LockError::NotOwner { euid, owner });
        }
        let path = datadir.join(LOCK_FILE);
        remove_dead_drafts(datadir);
        let content = lock_content(datadir, command);
        let draft = write_draft(datadir, &content, euid, owner)?;
        let linked = link_draft(datadir, &draft, &path);
        // The draft was only the way in: the lock is `postmaster.pid` (or nothing).
        let _ = fs::remove_file(&draft);
        linked?;
        test_hold();
        Ok(DataDirLock { path, content })
    }

    /// Checks that `postmaster.pid` is still the file this process wrote (before a step that
    /// must not happen without the lock, such as switching `pg_control`).
    pub fn check_held(&self) -> Result<(), LockError> {
        let now = match read_regular(&self.path, MAX_LOCK_FILE_BYTES) {
            Ok(bytes) if bytes == self.content.as_bytes() => return Ok(()),
            Ok(bytes) => format!(
                "it now begins \"{}\"",
                String::from_utf8_lossy(&bytes).lines().next().unwrap_or("")
            ),
            Err(e) => e.to_string(),
        };
        Err(LockError::Lost {
            path: self.path.clone(),
            now,
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDirLock {
    fn drop(&mut self) {
        // Only our own file: never one a server wrote after ours was removed by someone else.
        if self.check_held().is_ok() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Test-only: keeps the fresh lock for `PGCHECKDB_TEST_HOLD_LOCK_MS` milliseconds before the
/// command goes on, so that tests can start a server while a short command (`disable`,
/// `corrupt`) holds it.
fn test_hold() {
    if let Some(ms) = std::env::var("PGCHECKDB_TEST_HOLD_LOCK_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The name of this process's draft of the lock file, written in full before it becomes
/// `postmaster.pid`.
fn draft_name(pid: u32) -> String {
    format!("{LOCK_FILE}{DRAFT_SUFFIX}{pid}")
}

/// `postmaster.pid.pgcheckdb.<pid>`: a draft of the lock file.
const DRAFT_SUFFIX: &str = ".pgcheckdb.";

/// Writes the complete lock file under a draft name, owned as the server needs it, and synced.
/// A server never sees a half-written `postmaster.pid` of ours (an empty one would stop it from
/// starting until someone removed it), even if pgcheckdb is killed right then.
fn write_draft(datadir: &Path, content: &str, euid: u32, owner: u32) -> Result<PathBuf, LockError> {
    let draft = datadir.join(draft_name(std::process::id()));
    let _ = fs::remove_file(&draft); // a leftover of a dead process that had our pid
    let written = create_exclusive(&draft).and_then(|mut file| {
        file.write_all(content.as_bytes())?;
        file.sync_all()?;
        hand_to_owner(&file, datadir, euid, owner)
    });
    match written {
        Ok(()) => Ok(draft),
        Err(source) => {
            let _ = fs::remove_file(&draft);
            Err(LockError::Create {
                path: datadir.join(LOCK_FILE),
                source,
            })
        }
    }
}

/// Makes the draft `postmaster.pid` with `link`, which fails when the name exists: the same
/// exclusivity as the server's `O_CREAT | O_EXCL`, with the whole content in place at once. A
/// stale lock file is replaced at most a few times; a race with a starting server ends in the
/// server's file or in ours, never in both.
fn link_draft(datadir: &Path, draft: &Path, path: &Path) -> Result<(), LockError> {
    for _ in 0..3 {
        match fs::hard_link(draft, path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => remove_if_stale(datadir, path)?,
            Err(source) => {
                return Err(LockError::Create {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
    Err(LockError::Create {
        path: path.to_path_buf(),
        source: io::Error::other("it kept reappearing: another process is taking it"),
    })
}

/// Removes drafts left by pgcheckdb processes killed while taking the lock.
fn remove_dead_drafts(datadir: &Path) {
    let Ok(entries) = fs::read_dir(datadir) else {
        return;
    };
    let prefix = format!("{LOCK_FILE}{DRAFT_SUFFIX}");
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if regular && !process_alive(pid) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn create_exclusive(path: &Path) -> io::Result<fs::File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// The lines of `postmaster.pid` in PostgreSQL's layout; the unused ones are empty.
fn lock_content(datadir: &Path, command: &str) -> String {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut lines = vec![String::new(); LINE_STATUS];
    lines[LINE_PID - 1] = std::process::id().to_string();
    lines[1] = datadir.display().to_string();
    lines[2] = started.to_string();
    lines[LINE_STATUS - 1] = format!("{HOLDER_MARK} {command}");
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// As root: gives the lock file to the data directory's owner (the server must be able to read
/// it) and makes the owner's processes able to signal this one (the server's liveness test).
fn hand_to_owner(file: &fs::File, datadir: &Path, euid: u32, owner: u32) -> io::Result<()> {
    if euid != 0 || owner == 0 {
        return Ok(());
    }
    let gid = fs::metadata(datadir)?.gid();
    std::os::unix::fs::fchown(file, Some(owner), Some(gid))?;
    // SAFETY: plain integers; -1 (u32::MAX) leaves the real and effective ids unchanged.
    if unsafe { libc::setresuid(u32::MAX, u32::MAX, owner) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes an existing `postmaster.pid` only if it is stale: its process is gone and
/// `pg_control` says the cluster was shut down cleanly. Anything else is a refusal.
fn remove_if_stale(datadir: &Path, path: &Path) -> Result<(), LockError> {
    let before = read_regular(path, MAX_LOCK_FILE_BYTES);
    let holder = match read_lock_file(datadir) {
        LockFileState::Absent => return Ok(()),
        LockFileState::Empty => return Err(LockError::Empty(path.to_path_buf())),
        LockFileState::Bogus(first_line) => {
            return Err(LockError::Bogus {
                path: path.to_path_buf(),
                first_line,
            })
        }
        LockFileState::Unreadable(source) => {
            return Err(LockError::Unreadable {
                path: path.to_path_buf(),
                source,
            })
        }
        LockFileState::Holder(h) => h,
    };
    if process_alive(holder.pid()) && holder.pid() != std::process::id() as i32 {
        return Err(match holder {
            LockHolder::Pgcheckdb { pid, command } => LockError::HeldByPgcheckdb { pid, command },
            LockHolder::Postmaster { pid } => {
                LockError::Running(RunningReason::LivePostmaster { pid })
            }
        });
    }
    let control = ControlFile::read_from_datadir(datadir).map_err(|e| LockError::Unreadable {
        path: datadir.join("global/pg_control"),
        source: io::Error::other(e.to_string()),
    })?;
    check_stopped(datadir, &control).map_err(LockError::Running)?;
    // Remove exactly the file judged stale: if it changed meanwhile, judge again.
    let again = read_regular(path, MAX_LOCK_FILE_BYTES);
    match (before, again) {
        (Ok(a), Ok(b)) if a == b => match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(LockError::Create {
                path: path.to_path_buf(),
                source,
            }),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::cluster::parse_lock_file;

    fn write_lock(dir: &Path, text: &str) {
        fs::write(dir.join(LOCK_FILE), text).expect("write lock file");
    }

    #[test]
    fn lock_is_created_with_our_pid_and_removed_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = DataDirLock::acquire(dir.path(), "checksums enable").expect("lock");
        let text = fs::read_to_string(dir.path().join(LOCK_FILE)).expect("read");
        assert_eq!(
            text.lines().next(),
            Some(std::process::id().to_string().as_str())
        );
        assert!(lock.check_held().is_ok());
        let leftovers: Vec<_> = fs::read_dir(dir.path()).expect("ls").flatten().collect();
        assert_eq!(
            leftovers.len(),
            1,
            "only postmaster.pid, no draft: {leftovers:?}"
        );
        drop(lock);
        assert!(!dir.path().join(LOCK_FILE).exists());
    }

    #[test]
    fn a_lock_replaced_by_someone_else_is_lost_and_not_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = DataDirLock::acquire(dir.path(), "corrupt").expect("lock");
        write_lock(dir.path(), "1\n");
        assert!(matches!(lock.check_held(), Err(LockError::Lost { .. })));
        drop(lock);
        assert!(
            dir.path().join(LOCK_FILE).exists(),
            "another's file must stay"
        );
    }

    #[test]
    fn live_holders_empty_bogus_and_irregular_lock_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        // pid 1 is always alive.
        write_lock(dir.path(), "1\n/data\n");
        assert!(matches!(
            DataDirLock::acquire(dir.path(), "checksums enable"),
            Err(LockError::Running(RunningReason::LivePostmaster { pid: 1 }))
        ));
        write_lock(dir.path(), "1\n\n\n\n\n\n\npgcheckdb checksums disable\n");
        match DataDirLock::acquire(dir.path(), "checksums enable") {
            Err(e @ LockError::HeldByPgcheckdb { pid: 1, .. }) => {
                assert!(e
                    .to_string()
                    .contains("another pgcheckdb (pid 1, \"checksums disable\")"))
            }
            other => panic!("{other:?}"),
        }
        write_lock(dir.path(), "");
        assert!(matches!(
            DataDirLock::acquire(dir.path(), "x"),
            Err(LockError::Empty(_))
        ));
        write_lock(dir.path(), "garbage\n");
        assert!(matches!(
            DataDirLock::acquire(dir.path(), "x"),
            Err(LockError::Bogus { .. })
        ));
        fs::remove_file(dir.path().join(LOCK_FILE)).expect("rm");
        let c = std::ffi::CString::new(dir.path().join(LOCK_FILE).as_os_str().as_encoded_bytes())
            .expect("path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            DataDirLock::acquire(dir.path(), "x"),
            Err(LockError::Unreadable { .. })
        ));
        // Nothing was left behind by the refused attempts but the files written here.
        let names: Vec<String> = fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![LOCK_FILE.to_string()]);
    }

    #[test]
    fn a_stale_lock_file_is_not_removed_without_a_clean_pg_control() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A pid that cannot be alive (above the kernel's pid_max limit of 2^22).
        write_lock(dir.path(), "2147483000\n");
        assert!(DataDirLock::acquire(dir.path(), "x").is_err());
        assert!(dir.path().join(LOCK_FILE).exists());
    }

    #[test]
    fn postmaster_and_pgcheckdb_lock_files_parse() {
        let pm = "4242\n/data\n1700000000\n5432\n/tmp\nlocalhost\n  5432001  12\nready   \n";
        assert!(matches!(
            parse_lock_file(pm),
            LockFileState::Holder(LockHolder::Postmaster { pid: 4242 })
        ));
        let ours = lock_content(Path::new("/data"), "checksums enable");
        match parse_lock_file(&ours) {
            LockFileState::Holder(LockHolder::Pgcheckdb { pid, command }) => {
                assert_eq!(pid, std::process::id() as i32);
                assert_eq!(command, "checksums enable");
            }
            other => panic!("{other:?}"),
        }
        // The postmaster reads the first line with atoi: our first line must be the bare pid.
        assert_eq!(
            ours.lines().next(),
            Some(std::process::id().to_string().as_str())
        );
        assert!(matches!(parse_lock_file(""), LockFileState::Empty));
        assert!(matches!(parse_lock_file("abc\n"), LockFileState::Bogus(_)));
        assert!(matches!(
            parse_lock_file("-77\n"),
            LockFileState::Holder(LockHolder::Postmaster { pid: 77 })
        ));
    }
}
