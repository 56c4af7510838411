//! The local ledger: one SQLite file, private to its owner. pgcheckdb creates the file itself
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600; missing directories 0700), never opens one
//! through a symbolic link or one that is not a regular file, and writes each run in one
//! `BEGIN IMMEDIATE` transaction, so concurrent runs on one machine take turns.

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};

use super::model::{self, Key, Observed, Open, RunInfo};
use super::{sql, LastRun, Recorded, Row};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pgcheckdb_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    host TEXT NOT NULL,
    system_identifier TEXT NOT NULL,
    pgdata TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    level INTEGER NOT NULL,
    scope TEXT NOT NULL,
    complete INTEGER NOT NULL,
    findings INTEGER NOT NULL,
    new_count INTEGER,
    open_count INTEGER,
    repaired_count INTEGER
);
CREATE TABLE IF NOT EXISTS pgcheckdb_damage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    host TEXT NOT NULL,
    system_identifier TEXT NOT NULL,
    file TEXT NOT NULL,
    fork TEXT NOT NULL,
    block INTEGER NOT NULL,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    level INTEGER NOT NULL,
    scope TEXT NOT NULL,
    database_name TEXT NOT NULL,
    relation_name TEXT NOT NULL,
    message TEXT NOT NULL,
    count INTEGER NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    first_run INTEGER NOT NULL REFERENCES pgcheckdb_runs (id),
    last_run INTEGER NOT NULL REFERENCES pgcheckdb_runs (id),
    repaired_at TEXT,
    repaired_run INTEGER REFERENCES pgcheckdb_runs (id)
);
CREATE UNIQUE INDEX IF NOT EXISTS pgcheckdb_damage_open
    ON pgcheckdb_damage (host, system_identifier, file, fork, block, kind) WHERE repaired_run IS NULL;
";

/// Refuses an existing ledger that is a symbolic link, not a regular file, or another user's.
fn check_existing(meta: &std::fs::Metadata) -> anyhow::Result<()> {
    if meta.file_type().is_symlink() {
        bail!("it is a symbolic link; pgcheckdb does not follow one to its ledger");
    }
    if !meta.file_type().is_file() {
        bail!("it is not a regular file");
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        bail!(
            "it belongs to user id {}, not to the user running pgcheckdb",
            meta.uid()
        );
    }
    Ok(())
}

/// Opens the ledger at `path`, creating it (and its directories) when `create`.
fn open(path: &Path, create: bool) -> anyhow::Result<Connection> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => check_existing(&meta)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .with_context(|| format!("could not create \"{}\"", dir.display()))?;
            }
            let created = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path);
            match created {
                Ok(_) => {}
                // Another run created it first: the same checks as for any existing ledger.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    check_existing(&std::fs::symlink_metadata(path)?)?
                }
                Err(e) => return Err(e).context("could not create it"),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("it does not exist (no run has recorded into it yet)")
        }
        Err(e) => return Err(e).context("could not examine it"),
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

/// Records `run` with what it found.
pub fn record(path: &Path, run: &RunInfo, found: Vec<Observed>) -> anyhow::Result<Recorded> {
    let mut conn = open(path, true)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO pgcheckdb_runs (host, system_identifier, pgdata, started_at, finished_at, level, scope, complete, findings) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            run.host,
            run.system_identifier,
            run.pgdata,
            run.started_at,
            run.finished_at,
            run.level,
            run.scope,
            run.complete,
            found.len() as i64
        ],
    )?;
    let run_id = tx.last_insert_rowid();
    let open: Vec<Open> = {
        let mut stmt = tx.prepare(sql::OPEN)?;
        let rows = stmt.query_map(params![run.host, run.system_identifier], |r| {
            Ok(Open {
                id: r.get(0)?,
                key: Key {
                    file: r.get(1)?,
                    fork: r.get(2)?,
                    block: r.get(3)?,
                    kind: r.get(4)?,
                },
                level: r.get(5)?,
                scope: r.get(6)?,
            })
        })?;
        rows.collect::<Result<_, _>>()?
    };
    let changes = model::diff(&open, found, run);
    for o in &changes.new {
        tx.execute(
            sql::INSERT_NEW,
            params![
                run.host,
                run.system_identifier,
                o.key.file,
                o.key.fork,
                o.key.block,
                o.key.kind,
                o.severity,
                run.level,
                run.scope,
                o.database,
                o.relation,
                o.message,
                o.count,
                run.finished_at,
                run_id
            ],
        )?;
    }
    for (id, level, o) in &changes.seen {
        tx.execute(
            sql::UPDATE_SEEN,
            params![
                id,
                o.severity,
                level,
                run.scope,
                o.database,
                o.relation,
                o.message,
                o.count,
                run.finished_at,
                run_id
            ],
        )?;
    }
    for id in &changes.repaired {
        tx.execute(sql::REPAIR, params![id, run.finished_at, run_id])?;
    }
    let open_now: i64 = tx.query_row(
        sql::COUNT_OPEN,
        params![run.host, run.system_identifier],
        |r| r.get(0),
    )?;
    let recorded = Recorded {
        new: changes.new.len() as u64,
        open: open_now as u64,
        repaired: changes.repaired.len() as u64,
    };
    tx.execute(
        sql::FINISH_RUN,
        params![
            run_id,
            recorded.new as i64,
            open_now,
            recorded.repaired as i64
        ],
    )?;
    tx.commit()?;
    Ok(recorded)
}

/// Every cluster's last run and every entry.
pub fn read(path: &Path) -> anyhow::Result<(Vec<LastRun>, Vec<Row>)> {
    let conn = open(path, false)?;
    let mut stmt = conn.prepare(sql::LAST_RUNS)?;
    let runs = stmt
        .query_map([], |r| {
            Ok(LastRun {
                id: r.get(0)?,
                host: r.get(1)?,
                system_identifier: r.get(2)?,
                pgdata: r.get(3)?,
                finished_at: r.get(4)?,
                level: r.get(5)?,
                scope: r.get(6)?,
                complete: r.get(7)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut stmt = conn.prepare(sql::ROWS)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(Row {
                host: r.get(0)?,
                system_identifier: r.get(1)?,
                file: r.get(2)?,
                fork: r.get(3)?,
                block: r.get(4)?,
                kind: r.get(5)?,
                severity: r.get(6)?,
                level: r.get(7)?,
                database: r.get(8)?,
                relation: r.get(9)?,
                message: r.get(10)?,
                count: r.get(11)?,
                first_seen: r.get(12)?,
                last_seen: r.get(13)?,
                repaired_at: r.get(14)?,
                first_run: r.get(15)?,
                repaired_run: r.get(16)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok((runs, rows))
}
