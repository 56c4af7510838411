//! Runs the `pgcheckdb` binary under a watchdog, for the tests of what must never hang: a run
//! that outlives its limit is killed and fails the test. A run may also be given an address
//! space cap, a signal after a delay, a piped stdin (written and closed, or held open and
//! silent), another user, or a hook that sees its pid before the binary starts.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pgcheckdb_cluster::RunAs;

use crate::run::{self, Run};

/// How one guarded run is started; the default is a plain run with stdin from `/dev/null`.
#[derive(Default, Clone, Copy)]
pub struct Guard<'a> {
    /// Run as this user (from `/`).
    pub user: Option<&'a RunAs>,
    /// RLIMIT_AS in bytes.
    pub address_space: Option<u64>,
    /// Send this signal after this long.
    pub signal: Option<(i32, Duration)>,
    /// Bytes written on stdin (a pipe), which is then closed.
    pub stdin: Option<&'a [u8]>,
    /// Keep stdin an open pipe nobody writes to (a reader would wait forever).
    pub stdin_held_open: bool,
    /// Called with the pid while the process is stopped just before it starts pgcheckdb.
    pub before_exec: Option<&'a dyn Fn(u32)>,
}

/// Runs `bin` with `args` (`PGDATA` unset) as `guard` says, and parses every stdout line that
/// is JSON; kills it and fails the test if it runs longer than `hang`.
pub fn run(bin: &Path, args: &[&str], hang: Duration, guard: Guard<'_>) -> Run {
    let mut child = command(bin, args, &guard)
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", bin.display()));
    let pid = child.id() as i32;
    if let Some(before) = guard.before_exec {
        release_stopped(pid, before);
    }
    let held = feed_stdin(&mut child, &guard);
    let watcher = watch(pid, hang, guard.signal);
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("could not wait for {}: {e}", bin.display()));
    drop(held);
    let hung = watcher.join().unwrap_or(false);
    let run = run::parse_lenient(out);
    assert!(
        !hung,
        "pgcheckdb {args:?} hung (killed after {hang:?})\n{run}"
    );
    run
}

/// The command: `bin args`, or with a `before_exec` hook a shell that stops itself, then
/// execs `bin` under the same pid (so that the pid is known, and acted on, before it runs).
fn command(bin: &Path, args: &[&str], guard: &Guard<'_>) -> Command {
    let mut cmd = match guard.before_exec {
        Some(_) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c")
                .arg("kill -STOP $$; exec \"$0\" \"$@\"")
                .arg(bin)
                .args(args);
            c
        }
        None => {
            let mut c = Command::new(bin);
            c.args(args);
            c
        }
    };
    let piped_stdin = guard.stdin.is_some() || guard.stdin_held_open;
    cmd.env_remove("PGDATA")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if piped_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    if let Some(user) = guard.user {
        user.apply(&mut cmd);
        cmd.current_dir("/");
    }
    if let Some(bytes) = guard.address_space {
        limit_address_space(&mut cmd, bytes);
    }
    cmd
}

/// Caps the child's address space (RLIMIT_AS) at `bytes`.
fn limit_address_space(cmd: &mut Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe and only touches the child's own limits.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Waits for the shell that stopped itself, calls `before` with its pid, and lets it go on.
fn release_stopped(pid: i32, before: &dyn Fn(u32)) {
    let mut status = 0;
    // SAFETY: waiting (without reaping) for our own child to stop.
    let waited = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
    assert!(
        waited == pid && libc::WIFSTOPPED(status),
        "the shell did not stop"
    );
    before(pid as u32);
    // SAFETY: continuing our own child.
    unsafe { libc::kill(pid, libc::SIGCONT) };
}

/// Writes `guard.stdin` and closes the pipe, or returns the pipe to hold open.
fn feed_stdin(child: &mut Child, guard: &Guard<'_>) -> Option<ChildStdin> {
    match (guard.stdin, guard.stdin_held_open) {
        (Some(bytes), _) => {
            let mut stdin = child.stdin.take()?;
            // A pgcheckdb that exits without reading closes the pipe first (EPIPE here), as
            // `echo yes |` would see.
            let _ = stdin.write_all(bytes);
            None
        }
        (None, true) => child.stdin.take(),
        (None, false) => None,
    }
}

/// A thread that sends `signal` when due and kills the child after `hang`; it returns
/// whether it had to kill it.
fn watch(pid: i32, hang: Duration, signal: Option<(i32, Duration)>) -> JoinHandle<bool> {
    let started = Instant::now();
    std::thread::spawn(move || {
        let mut signalled = false;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: kill with signal 0 only probes; the pid is our child until it is reaped.
            if unsafe { libc::kill(pid, 0) } != 0 {
                return false;
            }
            if let Some((sig, after)) = signal {
                if !signalled && started.elapsed() >= after {
                    // SAFETY: signalling our own child.
                    unsafe { libc::kill(pid, sig) };
                    signalled = true;
                }
            }
            if started.elapsed() > hang {
                // SAFETY: killing our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return true;
            }
        }
    })
}

/// Makes a FIFO at `path` (mode 0600): where a file is expected, what a reader that does not
/// check would wait on forever.
pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path and a mode.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {path:?}"
    );
}
