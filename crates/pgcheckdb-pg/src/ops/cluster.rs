//! Whether a server (or another pgcheckdb) is using the data directory: `postmaster.pid` (read
//! and parsed here) and the `pg_control` state. The lock pgcheckdb itself takes is in `ops::lock`.

use std::io;
use std::path::Path;

use pgcheckdb_scan::open::read_regular;

use crate::format::control::ControlFile;

/// The lock file's name in the data directory (PostgreSQL's `DIRECTORY_LOCK_FILE`).
pub const LOCK_FILE: &str = "postmaster.pid";

/// What pgcheckdb writes at the start of the status line, to be recognised by a second one.
pub(crate) const HOLDER_MARK: &str = "pgcheckdb";

/// Lines of `postmaster.pid`, 1-based, as PostgreSQL numbers them (`LOCK_FILE_LINE_*`).
pub(crate) const LINE_PID: usize = 1;
pub(crate) const LINE_STATUS: usize = 8;

/// The largest `postmaster.pid` read: the real one is a few hundred bytes.
pub(crate) const MAX_LOCK_FILE_BYTES: u64 = 64 << 10;

/// Who a `postmaster.pid` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockHolder {
    /// A postmaster (or anything that is not pgcheckdb).
    Postmaster { pid: i32 },
    /// A pgcheckdb run, with the command it runs.
    Pgcheckdb { pid: i32, command: String },
}

impl LockHolder {
    pub fn pid(&self) -> i32 {
        match self {
            LockHolder::Postmaster { pid } | LockHolder::Pgcheckdb { pid, .. } => *pid,
        }
    }
}

/// What reading `postmaster.pid` gave.
#[derive(Debug)]
pub enum LockFileState {
    Absent,
    /// Zero bytes: a postmaster between creating and writing it, or one that crashed then.
    Empty,
    /// The first line is not a process id.
    Bogus(String),
    Holder(LockHolder),
    /// Not a regular file, unreadable, ...
    Unreadable(io::Error),
}

/// Reads and parses `postmaster.pid` (only a regular file is opened).
pub fn read_lock_file(datadir: &Path) -> LockFileState {
    match read_regular(&datadir.join(LOCK_FILE), MAX_LOCK_FILE_BYTES) {
        Ok(bytes) => parse_lock_file(&String::from_utf8_lossy(&bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => LockFileState::Absent,
        Err(e) => LockFileState::Unreadable(e),
    }
}

/// Parses the text of a `postmaster.pid`.
pub fn parse_lock_file(text: &str) -> LockFileState {
    if text.is_empty() {
        return LockFileState::Empty;
    }
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.get(LINE_PID - 1).map_or("", |l| l.trim());
    // A postmaster writes a negative pid when it runs as a single-user backend.
    let pid = match first.parse::<i32>() {
        Ok(p) if p != 0 && p != i32::MIN => p.abs(),
        _ => return LockFileState::Bogus(first.chars().take(60).collect()),
    };
    let status = lines.get(LINE_STATUS - 1).map_or("", |l| l.trim());
    LockFileState::Holder(match status.strip_prefix(HOLDER_MARK) {
        Some(command) => LockHolder::Pgcheckdb {
            pid,
            command: command.trim().to_string(),
        },
        None => LockHolder::Postmaster { pid },
    })
}

/// Why pgcheckdb must not treat the cluster as stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunningReason {
    /// `postmaster.pid` names a live process.
    LivePostmaster { pid: i32 },
    /// `pg_control` does not say "shut down" or "shut down in recovery".
    NotShutDown { state: String },
    /// `postmaster.pid` names a live pgcheckdb that holds the data directory lock.
    LockedByPgcheckdb { pid: i32, command: String },
    /// `postmaster.pid` exists but cannot be read (not a regular file, no permission, ...).
    LockFileUnreadable { error: String },
}

impl std::fmt::Display for RunningReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunningReason::LivePostmaster { pid } => {
                write!(f, "a server is running on this data directory (postmaster.pid names live process {pid})")
            }
            RunningReason::NotShutDown { state } => write!(
                f,
                "cluster was not shut down cleanly: pg_control state is \"{state}\" (running, crashed, or a copied base backup)"
            ),
            RunningReason::LockedByPgcheckdb { pid, command } => write!(
                f,
                "another pgcheckdb (pid {pid}, \"{command}\") holds the lock on this data directory ({LOCK_FILE})"
            ),
            RunningReason::LockFileUnreadable { error } => write!(
                f,
                "could not read {LOCK_FILE}: {error}; cannot tell whether a server is using the data directory"
            ),
        }
    }
}

/// PID from the first line of `postmaster.pid`, if the file exists and parses.
pub fn postmaster_pid(datadir: &Path) -> Option<i32> {
    match read_lock_file(datadir) {
        LockFileState::Holder(h) => Some(h.pid()),
        _ => None,
    }
}

/// True if a process with this PID exists (it may belong to another user).
pub fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission; it sends nothing.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Checks that no server (and no other pgcheckdb) uses the data directory and that it was shut
/// down cleanly. The lock this process holds itself does not count.
pub fn check_stopped(datadir: &Path, control: &ControlFile) -> Result<(), RunningReason> {
    match read_lock_file(datadir) {
        LockFileState::Holder(h) if h.pid() == std::process::id() as i32 => {}
        LockFileState::Holder(h) if process_alive(h.pid()) => {
            return Err(match h {
                LockHolder::Postmaster { pid } => RunningReason::LivePostmaster { pid },
                LockHolder::Pgcheckdb { pid, command } => {
                    RunningReason::LockedByPgcheckdb { pid, command }
                }
            })
        }
        LockFileState::Unreadable(e) => {
            return Err(RunningReason::LockFileUnreadable {
                error: e.to_string(),
            })
        }
        // Absent, stale (dead process), empty or unparsable: the pg_control state decides.
        _ => {}
    }
    if !control.state.is_clean_shutdown() {
        return Err(RunningReason::NotShutDown {
            state: control.state.to_string(),
        });
    }
    Ok(())
}
