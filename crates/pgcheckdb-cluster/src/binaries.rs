//! Finding the programs of one PostgreSQL major version.
//!
//! Search order: the directory in `PGCHECKDB_PG<major>_BIN`; the cache filled by
//! `scripts/install-postgres.sh` (`$PGCHECKDB_CACHE/postgres/<major>/bin`, default
//! `/var/cache/pgcheckdb`); Debian's `/usr/lib/postgresql/<major>/bin`; `pg_config --bindir` of
//! the `pg_config` on `PATH`. A directory counts when it has `initdb`, `pg_ctl`, `postgres` and
//! `psql` and `postgres --version` names the requested major version.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// What to tell someone whose machine lacks a PostgreSQL version.
pub const INSTALL_HINT: &str =
    "run `bash scripts/install-postgres.sh` (as root) to install PostgreSQL 14-19 into /var/cache/pgcheckdb/postgres, \
     or set PGCHECKDB_PG<major>_BIN to a bin directory";

/// Programs a cluster directory must hold to be used.
const REQUIRED_PROGRAMS: [&str; 4] = ["initdb", "pg_ctl", "postgres", "psql"];

/// Default root of the binary cache written by `scripts/install-postgres.sh`.
const DEFAULT_CACHE: &str = "/var/cache/pgcheckdb";

/// The `bin` directory of one PostgreSQL installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    /// The major version (14, 15, ...).
    pub major: u32,
    /// The directory holding `initdb`, `postgres`, `psql`, ...
    pub bindir: PathBuf,
    /// `postgres --version` output, e.g. `postgres (PostgreSQL) 15.18`.
    pub version: String,
}

impl PgBinaries {
    /// Finds the binaries of `major`, or explains where it looked.
    pub fn find(major: u32) -> Result<PgBinaries> {
        let env_name = format!("PGCHECKDB_PG{major}_BIN");
        if let Some(dir) = env::var_os(&env_name) {
            return PgBinaries::at(major, Path::new(&dir));
        }
        let mut searched = Vec::new();
        for dir in candidate_dirs(major) {
            searched.push(dir.display().to_string());
            if let Ok(found) = PgBinaries::at(major, &dir) {
                return Ok(found);
            }
        }
        searched.push("pg_config on PATH".to_string());
        if let Some(found) = pg_config_bindir().and_then(|dir| PgBinaries::at(major, &dir).ok()) {
            return Ok(found);
        }
        Err(Error::BinariesNotFound {
            major,
            searched: searched.join(", "),
            hint: INSTALL_HINT,
        })
    }

    /// Uses `dir` as the binaries of `major`, checking the programs and the version.
    pub fn at(major: u32, dir: &Path) -> Result<PgBinaries> {
        if let Some(missing) = REQUIRED_PROGRAMS.iter().find(|p| !dir.join(p).is_file()) {
            return Err(Error::BinariesNotFound {
                major,
                searched: format!("{} (no {missing})", dir.display()),
                hint: INSTALL_HINT,
            });
        }
        let version = program_version(&dir.join("postgres"))?;
        if parse_major(&version) != Some(major) {
            return Err(Error::WrongVersion {
                major,
                found: version,
                dir: dir.to_path_buf(),
            });
        }
        Ok(PgBinaries {
            major,
            bindir: dir.to_path_buf(),
            version,
        })
    }

    /// The path of one program, e.g. `pg_checksums`.
    pub fn program(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }

    /// True if the installation has the program.
    pub fn has(&self, name: &str) -> bool {
        self.program(name).is_file()
    }
}

/// The fixed places to look, in order.
fn candidate_dirs(major: u32) -> Vec<PathBuf> {
    let cache =
        env::var_os("PGCHECKDB_CACHE").map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from);
    vec![
        cache.join("postgres").join(major.to_string()).join("bin"),
        PathBuf::from(format!("/usr/lib/postgresql/{major}/bin")),
    ]
}

/// `pg_config --bindir`, if a `pg_config` is on `PATH`.
fn pg_config_bindir() -> Option<PathBuf> {
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let dir = text.trim();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// The first line of `<program> --version`.
fn program_version(program: &Path) -> Result<String> {
    let out = Command::new(program)
        .arg("--version")
        .output()
        .map_err(crate::error::io_context(format!(
            "could not run {} --version",
            program.display()
        )))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().unwrap_or_default().trim().to_string())
}

/// The major version in `postgres (PostgreSQL) 15.18 (Debian ...)` or `... 18.6`.
pub(crate) fn parse_major(version: &str) -> Option<u32> {
    let rest = version.split("(PostgreSQL)").nth(1)?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::parse_major;

    #[test]
    fn parses_version_lines() {
        assert_eq!(
            parse_major("postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"),
            Some(15)
        );
        assert_eq!(parse_major("postgres (PostgreSQL) 18.6"), Some(18));
        assert_eq!(parse_major("postgres (PostgreSQL) 19devel"), Some(19));
        assert_eq!(parse_major("something else"), None);
    }
}
