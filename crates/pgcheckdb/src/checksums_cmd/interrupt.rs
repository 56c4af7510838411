//! Ctrl-C (`SIGINT`) and `SIGTERM` while a command changes a data directory (`checksums
//! enable|disable`, `corrupt`): the signal only sets a flag, so no write and no `pg_control`
//! update is cut in half and the data directory lock is always removed. The command checks the
//! flag between steps, stops, says in one line what state the cluster is in and exits with
//! 128 + the signal number (130, 143), as a shell reports a process killed by it.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The first signal received, 0 for none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Set by the handler; what commands without a progress counter poll.
static CANCEL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only atomics here: both are async-signal-safe.
    let _ = SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
    CANCEL.store(true, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM from now on (call before taking the lock), and ignores SIGXFSZ:
/// a write past the file-size limit then fails with `EFBIG` and is reported as an error,
/// instead of killing the process in the middle of the run.
pub fn install() -> io::Result<()> {
    // SAFETY: setting a signal's disposition to SIG_IGN has no other effect.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only touches atomics; sigemptyset and
        // sigaction get valid pointers.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The signal received so far, if any.
pub fn received() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The flag the handler sets.
pub fn cancel_flag() -> &'static AtomicBool {
    &CANCEL
}

/// Exit status for a run stopped by `signal`: 128 + its number.
pub fn exit_code(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

/// Name of a caught signal, for messages and JSON.
pub fn name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// Runs `work` while a thread copies a received signal into `cancel` (e.g. the scan's
/// `Progress::cancel`).
pub fn forwarding_to<T>(cancel: &AtomicBool, work: impl FnOnce() -> T) -> T {
    crate::signals::watching(
        || CANCEL.load(Ordering::SeqCst),
        || cancel.store(true, Ordering::SeqCst),
        work,
    )
}
