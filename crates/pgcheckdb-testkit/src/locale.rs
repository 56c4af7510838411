//! The libc locale the B-tree order tests need: `en_US.UTF-8`, whose collation orders text
//! differently from byte order. Compiled with `localedef` when the machine lacks it.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::process::Command;

/// Makes sure the `en_US.UTF-8` libc locale exists (compiling it with `localedef` from the
/// `locales` package's definitions when it does not): the B-tree order tests need a collation
/// whose order differs from byte order. Fails loudly when it cannot.
///
/// Tests run in parallel threads and test binaries in parallel processes; two `localedef`s
/// writing the one locale archive at once leave it corrupt (every program using the locale
/// then crashes), so the check and the compilation hold an exclusive lock on a file beside the
/// archive's directory, across processes.
pub fn ensure_libc_locale() {
    let _lock = lock();
    if have_locale() {
        return;
    }
    let out = Command::new("localedef")
        .args(["-i", "en_US", "-f", "UTF-8", "en_US.UTF-8"])
        .output()
        .expect("run localedef (the test needs the en_US.UTF-8 locale)");
    assert!(
        out.status.success(),
        "localedef en_US.UTF-8 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lock file, locked exclusively; the lock is released when it is closed.
fn lock() -> File {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("pgcheckdb-tests-localedef.lock"))
        .expect("open the localedef lock file");
    // SAFETY: a valid descriptor; the lock is released when `lock` is closed.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "lock the localedef lock file");
    lock
}

/// Whether `locale -a` lists `en_US.utf8`.
fn have_locale() -> bool {
    let listed = Command::new("locale")
        .arg("-a")
        .output()
        .expect("run locale -a");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l.eq_ignore_ascii_case("en_US.utf8") || l == "en_US.UTF-8")
}
