//! Whether a server (or another pgcheckdb) is using the data directory: `postmaster.pid` and
//! the `pg_control` state. The lock pgcheckdb itself takes is in [`crate::ops::lock`].

use std::path::Path;

use crate::format::control::ControlFile;
use crate::ops::lock::{read_lock_file, LockFileState, LockHolder, LOCK_FILE};

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
