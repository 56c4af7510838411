//! Running PostgreSQL programs: as the cluster's user, with a clean environment, and with their
//! output kept for the error message when they fail.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::error::{io_context, Error, Result};
use crate::user::RunAs;

/// Environment variables that would redirect libpq or the server tools.
const CLEARED_ENV: [&str; 10] = [
    "PGDATA",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGSERVICE",
    "PGOPTIONS",
    "PSQLRC",
];

/// A command for `program`, run as `user` (if any) from `cwd` with `HOME=cwd`.
pub fn command(program: &Path, user: Option<&RunAs>, cwd: &Path) -> Command {
    let mut cmd = Command::new(program);
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("HOME", cwd).env("LC_ALL", "C").current_dir(cwd);
    if let Some(user) = user {
        user.apply(&mut cmd);
    }
    cmd
}

/// Runs `cmd` with `stdin` as its input and fails with its output if it exits non-zero.
pub fn run(mut cmd: Command, what: &str, stdin: Option<&str>) -> Result<Output> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(io_context(format!("could not start {what}")))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A write error means the program exited early; its status and stderr say why.
        let _ = pipe.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(io_context(format!("could not wait for {what}")))?;
    if out.status.success() {
        return Ok(out);
    }
    Err(Error::Command {
        what: what.to_string(),
        status: out.status.to_string(),
        output: describe_output(&out),
    })
}

/// The program's stderr and stdout, indented, for an error message.
fn describe_output(out: &Output) -> String {
    let mut text = String::new();
    for (name, bytes) in [("stderr", &out.stderr), ("stdout", &out.stdout)] {
        let s = String::from_utf8_lossy(bytes);
        let s = s.trim();
        if !s.is_empty() {
            text.push_str(&format!("\n--- {name} ---\n{}", tail(s, 60)));
        }
    }
    text
}

/// The last `lines` lines of `s`.
pub fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
