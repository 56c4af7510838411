//! Ctrl-C (`SIGINT`) and `SIGTERM`: a long command is told to stop cleanly instead of dying
//! mid-report or mid-write.
//!
//! The handler only records the first signal and sets a cancel flag (both atomics). A command
//! installs it one of two ways: [`install_for_reads`] (`verify`: the handler resets itself,
//! so a second Ctrl-C kills at once) or [`install_for_writes`] (`checksums enable|disable`,
//! `corrupt`: every signal only sets the flag, so no write and no `pg_control` update is cut
//! in half and the data directory lock is always removed; `SIGXFSZ` is ignored, so a write
//! past the file-size limit fails with `EFBIG` and is reported instead of killing the run).
//! [`cancel_on_signal`] runs work while a watcher copies a caught signal into the work's own
//! cancel flag; the command then says what state it stopped in and exits with [`exit_code`]
//! (130 for SIGINT, 143 for SIGTERM), as a shell reports a process killed by it.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::thread;
use std::time::Duration;

/// The first signal caught, 0 for none.
static CAUGHT: AtomicI32 = AtomicI32::new(0);
/// Set by the handler; what commands without a progress counter poll.
static CANCEL: AtomicBool = AtomicBool::new(false);

extern "C" fn record(signal: libc::c_int) {
    // Only atomics here: async-signal-safe.
    let _ = CAUGHT.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
    CANCEL.store(true, Ordering::SeqCst);
}

/// Installs the recording handler for a command that only reads: a second signal kills.
pub fn install_for_reads() -> io::Result<()> {
    install(libc::SA_RESETHAND | libc::SA_RESTART)
}

/// Installs the recording handler for a command that writes to a data directory: every
/// signal only sets the flag, and `SIGXFSZ` is ignored.
pub fn install_for_writes() -> io::Result<()> {
    // SAFETY: setting a signal's disposition to SIG_IGN has no other effect.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    install(libc::SA_RESTART)
}

fn install(flags: libc::c_int) -> io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler only touches
        // atomics, which is async-signal-safe; the pointers passed are valid for the call.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = flags;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The signal caught since the handler was installed, if any.
pub fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The flag the handler sets.
pub fn cancel_flag() -> &'static AtomicBool {
    &CANCEL
}

/// `SIGINT` or `SIGTERM` (or `signal N`), for messages and JSON.
pub fn name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}

/// The exit status after `signal`: 128 + its number, as shells report it.
pub fn exit_code(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

/// Runs `work`; when a signal is caught meanwhile, sets `cancel` (e.g. the scan's
/// `Progress::cancel`), so that the work stops after the units under way.
pub fn cancel_on_signal<T>(cancel: &AtomicBool, work: impl FnOnce() -> T) -> T {
    watching(
        || caught().is_some(),
        || cancel.store(true, Ordering::SeqCst),
        work,
    )
}

/// Runs `work` while a thread looks every 20 ms whether `seen()`; the first time it is, the
/// thread calls `then()` and stops looking. The thread is woken when `work` ends rather than
/// at its next look, which the caller would otherwise wait for.
pub fn watching<T>(
    seen: impl Fn() -> bool + Sync,
    then: impl Fn() + Sync,
    work: impl FnOnce() -> T,
) -> T {
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                if seen() {
                    then();
                    return;
                }
                thread::park_timeout(Duration::from_millis(20));
            }
        });
        let result = work();
        done.store(true, Ordering::SeqCst);
        watcher.thread().unpark();
        result
    })
}
