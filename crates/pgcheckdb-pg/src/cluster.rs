//! Whether a server is using the data directory: `postmaster.pid` and the `pg_control` state.

use pgcheckdb_scan::open::read_regular;
use std::path::Path;

use crate::control::ControlFile;

/// Why pgcheckdb must not treat the cluster as stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunningReason {
    /// `postmaster.pid` names a live process.
    LivePostmaster { pid: i32 },
    /// `pg_control` does not say "shut down" or "shut down in recovery".
    NotShutDown { state: String },
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
        }
    }
}

/// PID from the first line of `postmaster.pid`, if the file exists and parses.
pub fn postmaster_pid(datadir: &Path) -> Option<i32> {
    let bytes = read_regular(&datadir.join("postmaster.pid"), 64 << 10).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    text.lines().next()?.trim().parse().ok()
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

/// Checks that no server uses the data directory and that it was shut down cleanly.
pub fn check_stopped(datadir: &Path, control: &ControlFile) -> Result<(), RunningReason> {
    if let Some(pid) = postmaster_pid(datadir) {
        if process_alive(pid) {
            return Err(RunningReason::LivePostmaster { pid });
        }
    }
    if !control.state.is_clean_shutdown() {
        return Err(RunningReason::NotShutDown {
            state: control.state.to_string(),
        });
    }
    Ok(())
}
