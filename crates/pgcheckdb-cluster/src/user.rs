//! The user PostgreSQL runs as. `initdb` and `postgres` refuse to run as root, so when we are
//! root every PostgreSQL program (and every directory it needs) belongs to an unprivileged user:
//! `$PGCHECKDB_PG_USER`, else `postgres` (created with `useradd` if it does not exist).

use std::env;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::error::{io_context, Error, Result};

/// An unprivileged user to run PostgreSQL programs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The default user, as Debian's packages create it.
const DEFAULT_USER: &str = "postgres";

impl RunAs {
    /// `None` when we are not root (PostgreSQL runs as ourselves); otherwise the user to switch to.
    pub fn detect() -> Result<Option<RunAs>> {
        if !running_as_root() {
            return Ok(None);
        }
        let name = env::var("PGCHECKDB_PG_USER").unwrap_or_else(|_| DEFAULT_USER.to_string());
        if let Some(user) = RunAs::lookup(&name) {
            return Ok(Some(user));
        }
        if name != DEFAULT_USER {
            return Err(Error::NoUser(format!(
                "user \"{name}\" from PGCHECKDB_PG_USER does not exist"
            )));
        }
        create_user(&name)?;
        RunAs::lookup(&name)
            .map(Some)
            .ok_or_else(|| Error::NoUser(format!("useradd {name} ran but the user does not exist")))
    }

    /// Looks a user up by name with `id`.
    pub fn lookup(name: &str) -> Option<RunAs> {
        let uid = id_field(name, "-u")?;
        let gid = id_field(name, "-g")?;
        if uid == 0 {
            return None;
        }
        Some(RunAs {
            name: name.to_string(),
            uid,
            gid,
        })
    }

    /// Makes `cmd` run as this user. When we are root, std drops the supplementary groups
    /// (`setgroups(0)`) before switching, so only the user's primary group remains.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.uid(self.uid).gid(self.gid);
    }

    /// Gives `path` (not recursively) to this user.
    pub fn chown(&self, path: &Path) -> Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)).map_err(io_context(format!(
            "could not chown \"{}\" to {}",
            path.display(),
            self.name
        )))
    }
}

/// True when the effective user is root.
pub fn running_as_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn id_field(name: &str, flag: &str) -> Option<u32> {
    let out = Command::new("id").arg(flag).arg(name).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

fn create_user(name: &str) -> Result<()> {
    let out = Command::new("useradd")
        .args([
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ])
        .output()
        .map_err(io_context(format!(
            "could not run useradd to create user \"{name}\""
        )))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::NoUser(format!(
        "useradd {name} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}
