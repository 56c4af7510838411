//! The central ledger of a fleet: two tables in a PostgreSQL database every host writes into.
//! The schema is created on first use under a transaction-level advisory lock (two hosts
//! starting at once do not race on `CREATE TABLE`); each run is recorded in one transaction
//! holding an advisory lock on its host and cluster, so two runs of one cluster take turns
//! while other clusters write at the same time; a partial unique index keeps one open entry
//! per host, cluster, file, fork, block and kind whatever happens.

use std::str::FromStr;
use std::time::Duration;

use anyhow::anyhow;
use postgres::{Client, Transaction};

use super::model::{self, Key, Observed, Open, RunInfo};
use super::{sql, LastRun, Recorded, Row};
use crate::verify_cmd::server::{fill_from_environment, pg_error};

/// The first key of pgcheckdb's advisory locks ("pgcd").
const LOCK_CLASS: i32 = 0x7067_6364;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pgcheckdb_runs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host text NOT NULL,
    system_identifier text NOT NULL,
    pgdata text NOT NULL,
    started_at text NOT NULL,
    finished_at text NOT NULL,
    level bigint NOT NULL,
    scope text NOT NULL,
    complete boolean NOT NULL,
    findings bigint NOT NULL,
    new_count bigint,
    open_count bigint,
    repaired_count bigint
);
CREATE TABLE IF NOT EXISTS pgcheckdb_damage (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host text NOT NULL,
    system_identifier text NOT NULL,
    file text NOT NULL,
    fork text NOT NULL,
    block bigint NOT NULL,
    kind text NOT NULL,
    severity text NOT NULL,
    level bigint NOT NULL,
    scope text NOT NULL,
    database_name text NOT NULL,
    relation_name text NOT NULL,
    message text NOT NULL,
    count bigint NOT NULL,
    first_seen text NOT NULL,
    last_seen text NOT NULL,
    first_run bigint NOT NULL REFERENCES pgcheckdb_runs (id),
    last_run bigint NOT NULL REFERENCES pgcheckdb_runs (id),
    repaired_at text,
    repaired_run bigint REFERENCES pgcheckdb_runs (id)
);
CREATE UNIQUE INDEX IF NOT EXISTS pgcheckdb_damage_open
    ON pgcheckdb_damage (host, system_identifier, file, fork, block, kind) WHERE repaired_run IS NULL;
";

/// SQLite's `?N` parameters as PostgreSQL's `$N`.
fn pg(sql: &str) -> String {
    sql.replace('?', "$")
}

/// Connects and creates the schema if it is missing.
fn connect(conninfo: &str) -> anyhow::Result<Client> {
    let mut config = postgres::Config::from_str(conninfo)
        .map_err(|e| anyhow!("invalid connection string: {e}"))?;
    fill_from_environment(&mut config);
    config.connect_timeout(Duration::from_secs(10));
    config.application_name("pgcheckdb ledger");
    let mut client = config
        .connect(postgres::NoTls)
        .map_err(|e| anyhow!("could not connect: {}", pg_error(&e)))?;
    let mut tx = client.transaction().map_err(err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_CLASS])
        .map_err(err)?;
    tx.batch_execute(SCHEMA).map_err(err)?;
    tx.commit().map_err(err)?;
    Ok(client)
}

fn err(e: postgres::Error) -> anyhow::Error {
    anyhow!("{}", pg_error(&e))
}

/// Records `run` with what it found.
pub fn record(conninfo: &str, run: &RunInfo, found: Vec<Observed>) -> anyhow::Result<Recorded> {
    let mut client = connect(conninfo)?;
    let mut tx = client.transaction().map_err(err)?;
    let cluster = format!("{} {}", run.host, run.system_identifier);
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&LOCK_CLASS, &cluster],
    )
    .map_err(err)?;
    let recorded = record_in(&mut tx, run, found).map_err(err)?;
    tx.commit().map_err(err)?;
    Ok(recorded)
}

fn record_in(
    tx: &mut Transaction<'_>,
    run: &RunInfo,
    found: Vec<Observed>,
) -> Result<Recorded, postgres::Error> {
    let level = i64::from(run.level);
    let run_id: i64 = tx
        .query_one(
            "INSERT INTO pgcheckdb_runs (host, system_identifier, pgdata, started_at, finished_at, level, scope, complete, findings) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
            &[
                &run.host,
                &run.system_identifier,
                &run.pgdata,
                &run.started_at,
                &run.finished_at,
                &level,
                &run.scope,
                &run.complete,
                &(found.len() as i64),
            ],
        )?
        .get(0);
    let open: Vec<Open> = tx
        .query(&pg(sql::OPEN), &[&run.host, &run.system_identifier])?
        .iter()
        .map(|r| Open {
            id: r.get(0),
            key: Key {
                file: r.get(1),
                fork: r.get(2),
                block: r.get(3),
                kind: r.get(4),
            },
            level: r.get::<_, i64>(5) as u8,
            scope: r.get(6),
        })
        .collect();
    let changes = model::diff(&open, found, run);
    let insert = tx.prepare(&pg(sql::INSERT_NEW))?;
    for o in &changes.new {
        tx.execute(
            &insert,
            &[
                &run.host,
                &run.system_identifier,
                &o.key.file,
                &o.key.fork,
                &o.key.block,
                &o.key.kind,
                &o.severity,
                &level,
                &run.scope,
                &o.database,
                &o.relation,
                &o.message,
                &o.count,
                &run.finished_at,
                &run_id,
            ],
        )?;
    }
    let update = tx.prepare(&pg(sql::UPDATE_SEEN))?;
    for (id, seen_level, o) in &changes.seen {
        tx.execute(
            &update,
            &[
                id,
                &o.severity,
                &i64::from(*seen_level),
                &run.scope,
                &o.database,
                &o.relation,
                &o.message,
                &o.count,
                &run.finished_at,
                &run_id,
            ],
        )?;
    }
    for id in &changes.repaired {
        tx.execute(&pg(sql::REPAIR), &[id, &run.finished_at, &run_id])?;
    }
    let open_now: i64 = tx
        .query_one(&pg(sql::COUNT_OPEN), &[&run.host, &run.system_identifier])?
        .get(0);
    let recorded = Recorded {
        new: changes.new.len() as u64,
        open: open_now as u64,
        repaired: changes.repaired.len() as u64,
    };
    tx.execute(
        &pg(sql::FINISH_RUN),
        &[
            &run_id,
            &(recorded.new as i64),
            &open_now,
            &(recorded.repaired as i64),
        ],
    )?;
    Ok(recorded)
}

/// Every cluster's last run and every entry, across hosts.
pub fn read(conninfo: &str) -> anyhow::Result<(Vec<LastRun>, Vec<Row>)> {
    let mut client = connect(conninfo)?;
    let runs = client
        .query(sql::LAST_RUNS, &[])
        .map_err(err)?
        .iter()
        .map(|r| LastRun {
            id: r.get(0),
            host: r.get(1),
            system_identifier: r.get(2),
            pgdata: r.get(3),
            finished_at: r.get(4),
            level: r.get::<_, i64>(5) as u8,
            scope: r.get(6),
            complete: r.get(7),
        })
        .collect();
    let rows = client
        .query(sql::ROWS, &[])
        .map_err(err)?
        .iter()
        .map(|r| Row {
            host: r.get(0),
            system_identifier: r.get(1),
            file: r.get(2),
            fork: r.get(3),
            block: r.get(4),
            kind: r.get(5),
            severity: r.get(6),
            level: r.get::<_, i64>(7) as u8,
            database: r.get(8),
            relation: r.get(9),
            message: r.get(10),
            count: r.get(11),
            first_seen: r.get(12),
            last_seen: r.get(13),
            repaired_at: r.get(14),
            first_run: r.get(15),
            repaired_run: r.get(16),
        })
        .collect();
    Ok((runs, rows))
}
