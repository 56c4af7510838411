//! The damage ledger (`verify --ledger`, `pgcheckdb ledger`; docs/LEDGER.md): SQL Server's
//! `suspect_pages` for PostgreSQL. This module owns where a ledger lives ([`Location`]: a local
//! SQLite file, by default under the user's state directory and never inside a data
//! directory, or a central PostgreSQL database), its schema, and recording one finished run
//! into it: each damage by relation file, fork, block and kind with first and last seen, new,
//! still open, or repaired (no longer found by a run that checked it: [`model`]). `sqlite`
//! and `central` are the two stores; `list` reads a ledger back for `pgcheckdb ledger`.

pub mod model;

mod central;
mod sqlite;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use pgcheckdb_pg::finding::Finding;

use model::{Observed, RunInfo};

/// Where a ledger lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file.
    File(PathBuf),
    /// A PostgreSQL connection string or URL: the central ledger of a fleet.
    Central(String),
}

impl Location {
    /// The location of `--ledger [FILE|CONNSTR]`: "" (the flag alone) is the default file;
    /// a `postgres://` or `postgresql://` URL, or text starting with `keyword=`, is a
    /// connection string; anything else a file.
    pub fn parse(text: &str) -> anyhow::Result<Location> {
        if text.is_empty() {
            return default_file().map(Location::File);
        }
        if is_connection_string(text) {
            return Ok(Location::Central(text.to_string()));
        }
        Ok(Location::File(PathBuf::from(text)))
    }

    /// How the location is named in messages (a connection string's password is not shown).
    pub fn describe(&self) -> String {
        match self {
            Location::File(p) => format!("the ledger \"{}\"", p.display()),
            Location::Central(_) => "the central ledger".to_string(),
        }
    }

    /// Refuses a ledger file inside `datadir` (where it would be copied by base backups,
    /// examined by pgcheckdb itself and could be removed with the cluster), symbolic links
    /// and `..` resolved.
    pub fn refuse_inside(&self, datadir: &Path) -> anyhow::Result<()> {
        let Location::File(file) = self else {
            return Ok(());
        };
        let Ok(datadir) = datadir.canonicalize() else {
            return Ok(()); // the run itself says why the directory cannot be read
        };
        let resolved = resolve_existing_prefix(file)?;
        if resolved.starts_with(&datadir) {
            bail!(
                "the ledger \"{}\" is inside the data directory \"{}\": pgcheckdb never writes there; choose a file outside it (default: {})",
                file.display(),
                datadir.display(),
                default_file()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "$XDG_STATE_HOME/pgcheckdb/ledger.sqlite".into())
            );
        }
        Ok(())
    }
}

/// `postgres://...`, `postgresql://...` or `keyword=value ...`.
fn is_connection_string(text: &str) -> bool {
    let t = text.trim_start();
    if t.starts_with("postgres://") || t.starts_with("postgresql://") {
        return true;
    }
    match t.split_once('=') {
        Some((word, _)) => {
            let word = word.trim_end();
            !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }
        None => false,
    }
}

/// `$XDG_STATE_HOME/pgcheckdb/ledger.sqlite`, else `~/.local/state/pgcheckdb/ledger.sqlite`.
pub fn default_file() -> anyhow::Result<PathBuf> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let state = match env("XDG_STATE_HOME") {
        Some(dir) => dir,
        None => env("HOME")
            .ok_or_else(|| {
                anyhow!("neither XDG_STATE_HOME nor HOME is set to an absolute path: give --ledger FILE")
            })?
            .join(".local/state"),
    };
    Ok(state.join("pgcheckdb").join("ledger.sqlite"))
}

/// `path` with its longest existing prefix canonicalized (symbolic links and `..` resolved)
/// and the rest appended.
fn resolve_existing_prefix(path: &Path) -> anyhow::Result<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .context("could not read the current directory")?
            .join(path)
    };
    let mut rest = Vec::new();
    let mut cur = absolute.as_path();
    loop {
        if let Ok(real) = cur.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return Ok(out);
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return Ok(absolute),
        }
    }
}

/// What recording a run did, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    pub new: u64,
    pub open: u64,
    pub repaired: u64,
}

/// Records one finished run with its findings.
pub fn record(
    location: &Location,
    run: &RunInfo,
    findings: &[Finding],
) -> anyhow::Result<Recorded> {
    let found: Vec<Observed> = model::observations(findings);
    let result = match location {
        Location::File(path) => sqlite::record(path, run, found),
        Location::Central(conninfo) => central::record(conninfo, run, found),
    };
    result.with_context(|| format!("could not record the run in {}", location.describe()))
}

/// One entry as `pgcheckdb ledger` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub host: String,
    pub system_identifier: String,
    pub file: String,
    pub fork: String,
    pub block: i64,
    pub kind: String,
    pub severity: String,
    pub level: u8,
    pub database: String,
    pub relation: String,
    pub message: String,
    pub count: i64,
    pub first_seen: String,
    pub last_seen: String,
    pub repaired_at: Option<String>,
    pub first_run: i64,
    pub repaired_run: Option<i64>,
}

/// The last run of one cluster on one host.
#[derive(Debug, Clone, PartialEq)]
pub struct LastRun {
    pub id: i64,
    pub host: String,
    pub system_identifier: String,
    pub pgdata: String,
    pub finished_at: String,
    pub level: u8,
    pub scope: String,
    pub complete: bool,
}

/// Everything in a ledger: the last run of each cluster, every entry.
pub fn read(location: &Location) -> anyhow::Result<(Vec<LastRun>, Vec<Row>)> {
    let result = match location {
        Location::File(path) => sqlite::read(path),
        Location::Central(conninfo) => central::read(conninfo),
    };
    result.with_context(|| format!("could not read {}", location.describe()))
}

/// The SQL both stores share, with SQLite's `?N` parameters (the central store turns them
/// into `$N`).
mod sql {
    pub const LAST_RUNS: &str = "SELECT r.id, r.host, r.system_identifier, r.pgdata, r.finished_at, r.level, r.scope, r.complete \
        FROM pgcheckdb_runs r WHERE r.id = (SELECT max(x.id) FROM pgcheckdb_runs x \
        WHERE x.host = r.host AND x.system_identifier = r.system_identifier) \
        ORDER BY r.host, r.system_identifier";
    pub const ROWS: &str = "SELECT host, system_identifier, file, fork, block, kind, severity, level, \
        database_name, relation_name, message, count, first_seen, last_seen, repaired_at, first_run, repaired_run \
        FROM pgcheckdb_damage ORDER BY host, system_identifier, file, fork, block, kind, id";
    pub const OPEN: &str =
        "SELECT id, file, fork, block, kind, level, scope FROM pgcheckdb_damage \
        WHERE host = ?1 AND system_identifier = ?2 AND repaired_run IS NULL";
    pub const INSERT_NEW: &str = "INSERT INTO pgcheckdb_damage (host, system_identifier, file, fork, block, kind, \
        severity, level, scope, database_name, relation_name, message, count, first_seen, last_seen, first_run, last_run) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15, ?15)";
    pub const UPDATE_SEEN: &str = "UPDATE pgcheckdb_damage SET severity = ?2, level = ?3, scope = ?4, \
        database_name = ?5, relation_name = ?6, message = ?7, count = ?8, last_seen = ?9, last_run = ?10 WHERE id = ?1";
    pub const REPAIR: &str =
        "UPDATE pgcheckdb_damage SET repaired_at = ?2, repaired_run = ?3 WHERE id = ?1";
    pub const COUNT_OPEN: &str = "SELECT count(*) FROM pgcheckdb_damage \
        WHERE host = ?1 AND system_identifier = ?2 AND repaired_run IS NULL";
    pub const FINISH_RUN: &str = "UPDATE pgcheckdb_runs SET new_count = ?2, open_count = ?3, repaired_count = ?4 WHERE id = ?1";
}
