//! Ctrl-C and SIGTERM: a long command is told to stop cleanly instead of dying mid-report.
//!
//! [`install`] replaces the default action of SIGINT and SIGTERM with a handler that only
//! records the signal (the handler resets itself, so a second Ctrl-C kills at once).
//! [`cancel_on_signal`] runs work while a watcher sets [`Progress::cancel`] once a signal was
//! caught; the command then reports what state it stopped in and exits with
//! [`exit_code`] (130 for SIGINT, 143 for SIGTERM).

use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::Duration;

use pgcheckdb_scan::Progress;

/// The signal caught, 0 for none.
static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    CAUGHT.store(signal, Ordering::SeqCst);
}

/// Installs the recording handler for SIGINT and SIGTERM.
pub fn install() -> std::io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler only stores to an
        // atomic, which is async-signal-safe; the pointers passed are valid for the call.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The signal caught since [`install`], if any.
pub fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// `SIGINT` or `SIGTERM` (or `signal N`).
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

/// Runs `work`; when a signal is caught meanwhile, sets `progress.cancel` so that the scan
/// stops after the work units under way.
pub fn cancel_on_signal<T>(progress: &Progress, work: impl FnOnce() -> T) -> T {
    watching(
        || caught().is_some(),
        || progress.cancel.store(true, Ordering::Relaxed),
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
    let done = std::sync::atomic::AtomicBool::new(false);
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
