//! The connection of `verify --online --dbname` ([`Connection`]): what the library's online
//! steps ask of the running server (the end of WAL, a checkpoint, transaction status, a
//! relation's file number, the cluster it runs), asked in SQL with the `postgres` crate.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, Context};
use pgcheckdb_pg::ops::verifier::{HostError, Server};
use pgcheckdb_pg::verify::online::parse_lsn;

/// The end of WAL: the insert position of a primary, the received or replayed position of a
/// standby (whichever is further).
const END_OF_WAL_SQL: &str = "SELECT (CASE WHEN pg_is_in_recovery() \
     THEN greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) \
     ELSE pg_current_wal_insert_lsn() END)::text";

/// The first transaction id not yet completed (the `xmax` of a fresh snapshot; also on a
/// standby), as a full id.
const SNAPSHOT_XMAX_SQL: &str = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint";

/// The final status of each id of an array of full ids: only the ended ones
/// (`pg_xact_status` says `NULL` for ids older than the commit log, `in progress` for running
/// ones).
const XACT_STATUS_SQL: &str = "SELECT x, s = 'committed' FROM \
     (SELECT x, pg_xact_status(x::text::xid8) AS s FROM unnest($1::bigint[]) AS x) q \
     WHERE s IN ('committed', 'aborted')";

/// A connection to the running server.
pub struct Connection {
    client: postgres::Client,
    /// To reach the other databases of the cluster.
    config: postgres::Config,
}

impl Connection {
    /// Connects as psql's `--dbname` does: a connection string (`key=value ...`) or URL
    /// (`postgresql://...`), else a bare database name; `PGHOST`, `PGPORT`, `PGUSER` and
    /// `PGDATABASE` fill in what it leaves out, as libpq does. A failure says where it tried
    /// (the socket file, or host and port) and why.
    pub fn connect(conninfo: &str) -> anyhow::Result<Connection> {
        let mut config = parse_dbname(conninfo)?;
        fill_from_environment(&mut config);
        config.connect_timeout(Duration::from_secs(10));
        config.application_name("pgcheckdb verify --online");
        let client = config.connect(postgres::NoTls).map_err(|e| {
            anyhow!(
                "could not connect to the server: {}",
                connect_error(&config, &e)
            )
        })?;
        Ok(Connection { client, config })
    }
}

impl Server for Connection {
    fn system_identifier(&mut self) -> Result<u64, HostError> {
        let row = self
            .client
            .query_one("SELECT system_identifier FROM pg_control_system()", &[])
            .map_err(|e| {
                anyhow!(
                    "could not ask the server for its system identifier: {}",
                    pg_error(&e)
                )
            })?;
        // A bigint on the server: identifiers past 2^63 arrive negative.
        let id = row
            .try_get::<_, i64>(0)
            .map_err(|e| anyhow!("the server sent no system identifier: {e}"))?;
        Ok(id as u64)
    }

    fn data_directory(&mut self) -> Option<String> {
        // Only superusers and members of pg_read_all_settings may read it.
        let row = self.client.query_one("SHOW data_directory", &[]).ok()?;
        row.try_get::<_, String>(0).ok()
    }

    fn filenode_in(&mut self, db: &str, oid: u32) -> Result<Option<u32>, HostError> {
        let mut config = self.config.clone();
        config.dbname(db);
        let mut client = config
            .connect(postgres::NoTls)
            .map_err(|e| anyhow!("could not connect to database \"{db}\": {}", pg_error(&e)))?;
        let row = client
            .query_one(
                "SELECT pg_relation_filenode(c.oid)::bigint FROM pg_class c WHERE c.oid = $1::bigint::oid \
                 UNION ALL SELECT NULL LIMIT 1",
                &[&(oid as i64)],
            )
            .map_err(|e| anyhow!("could not look relation {oid} up in database \"{db}\": {}", pg_error(&e)))?;
        let node: Option<i64> = row.get(0);
        Ok(node.and_then(|n| u32::try_from(n).ok()))
    }

    fn end_of_wal(&mut self) -> Result<u64, HostError> {
        let row = self.client.query_one(END_OF_WAL_SQL, &[]).map_err(|e| {
            anyhow!(
                "could not ask the server for the end of WAL: {}",
                pg_error(&e)
            )
        })?;
        let text: Option<String> = row.get(0);
        let text = text.context("the server does not know its end of WAL (a standby that has neither received nor replayed WAL)")?;
        Ok(parse_lsn(&text)
            .with_context(|| format!("the server sent an unreadable LSN \"{text}\""))?)
    }

    fn next_completed_xid(&mut self) -> Result<u64, HostError> {
        let row = self.client.query_one(SNAPSHOT_XMAX_SQL, &[]).map_err(|e| {
            anyhow!(
                "could not ask the server for its snapshot: {}",
                pg_error(&e)
            )
        })?;
        let xmax: i64 = row.get(0);
        Ok(u64::try_from(xmax)
            .map_err(|_| anyhow!("the server sent a negative transaction id {xmax}"))?)
    }

    fn ended_xacts(&mut self, xids: &[i64]) -> Result<Vec<(u64, bool)>, HostError> {
        let rows = self.client.query(XACT_STATUS_SQL, &[&xids]).map_err(|e| {
            anyhow!(
                "could not ask the server for transaction status: {}",
                pg_error(&e)
            )
        })?;
        let ended: anyhow::Result<Vec<(u64, bool)>> = rows
            .iter()
            .map(|r| {
                let xid: i64 = r.get(0);
                let committed: bool = r.get(1);
                Ok((u64::try_from(xid)?, committed))
            })
            .collect();
        Ok(ended?)
    }

    fn checkpoint(&mut self) -> Result<(), HostError> {
        self.client
            .batch_execute("CHECKPOINT")
            .map_err(|e| anyhow!("CHECKPOINT failed: {}", pg_error(&e)).into())
    }

    fn checkpoint_timeout(&mut self) -> Duration {
        let secs = self
            .client
            .query_one(
                "SELECT setting::bigint FROM pg_settings WHERE name = 'checkpoint_timeout'",
                &[],
            )
            .ok()
            .and_then(|r| r.try_get::<_, i64>(0).ok())
            .unwrap_or(300);
        Duration::from_secs(secs.max(1) as u64)
    }

    fn in_recovery(&mut self) -> Result<bool, HostError> {
        let row = self
            .client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .map_err(|e| {
                anyhow!(
                    "could not ask whether the server is a standby: {}",
                    pg_error(&e)
                )
            })?;
        Ok(row.get(0))
    }

    fn pause_replay(&mut self) -> Result<(), HostError> {
        self.client
            .batch_execute("SELECT pg_wal_replay_pause()")
            .map_err(|e| anyhow!("could not pause WAL replay: {}", pg_error(&e)).into())
    }

    fn resume_replay(&mut self) -> Result<(), HostError> {
        self.client
            .batch_execute("SELECT pg_wal_replay_resume()")
            .map_err(|e| anyhow!("could not resume WAL replay: {}", pg_error(&e)).into())
    }

    fn replay_paused(&mut self) -> Result<bool, HostError> {
        let row = self
            .client
            .query_one("SELECT pg_get_wal_replay_pause_state() = 'paused'", &[])
            .map_err(|e| {
                anyhow!(
                    "could not ask whether WAL replay is paused: {}",
                    pg_error(&e)
                )
            })?;
        Ok(row.get(0))
    }

    fn replay_position(&mut self) -> Result<(u64, Option<u64>), HostError> {
        let row = self
            .client
            .query_one(
                "SELECT pg_last_wal_replay_lsn()::text, pg_last_wal_receive_lsn()::text",
                &[],
            )
            .map_err(|e| anyhow!("could not ask for the replay position: {}", pg_error(&e)))?;
        let replay: Option<String> = row.get(0);
        let receive: Option<String> = row.get(1);
        let replay = replay.context("the standby has replayed no WAL")?;
        let replay = parse_lsn(&replay)
            .with_context(|| format!("the server sent an unreadable LSN \"{replay}\""))?;
        Ok((replay, receive.as_deref().and_then(parse_lsn)))
    }
}

/// A client error with the server's own message, when it sent one (the error's `Display` says
/// only "db error").
pub(crate) fn pg_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

/// `--dbname` as psql reads it: a connection string when it holds `=` or starts with
/// `postgres://` or `postgresql://`, else the name of a database ("" names none).
fn parse_dbname(conninfo: &str) -> anyhow::Result<postgres::Config> {
    let text = conninfo.trim();
    if text.is_empty() {
        return Ok(postgres::Config::new());
    }
    if is_connection_string(text) {
        return postgres::Config::from_str(text)
            .map_err(|e| anyhow!("invalid --dbname connection string: {e}"));
    }
    let mut config = postgres::Config::new();
    config.dbname(conninfo);
    Ok(config)
}

/// libpq's rule (`recognized_connection_string`): a URI prefix, or a `=` anywhere.
fn is_connection_string(text: &str) -> bool {
    text.starts_with("postgresql://") || text.starts_with("postgres://") || text.contains('=')
}

/// A connection failure as libpq words it: `connection to server on socket "/tmp/.s.PGSQL.5432"
/// failed: No such file or directory`, or `at "host", port 5432`, with every place tried.
fn connect_error(config: &postgres::Config, e: &postgres::Error) -> String {
    let ports = config.get_ports();
    let port_of = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let places: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            postgres::config::Host::Unix(dir) => format!(
                "on socket \"{}\"",
                dir.join(format!(".s.PGSQL.{}", port_of(i))).display()
            ),
            postgres::config::Host::Tcp(name) => {
                format!("at \"{name}\", port {}", port_of(i))
            }
        })
        .collect();
    // The server's own message, else the client's with its causes (the OS error).
    let mut why = pg_error(e);
    let mut source = std::error::Error::source(e);
    while let (None, Some(s)) = (e.as_db_error(), source) {
        let text = s.to_string();
        if !why.contains(&text) {
            why = format!("{why}: {text}");
        }
        source = s.source();
    }
    match places.as_slice() {
        [] => why,
        _ => format!(
            "connection to server {} failed: {why}",
            places.join(" and ")
        ),
    }
}

pub(crate) fn fill_from_environment(config: &mut postgres::Config) {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if config.get_hosts().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(default_socket_dir);
        for h in hosts.split(',') {
            config.host(h);
        }
    }
    if config.get_ports().is_empty() {
        if let Some(port) = env("PGPORT").and_then(|p| p.parse().ok()) {
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        if let Some(user) = env("PGUSER").or_else(|| env("USER")) {
            config.user(&user);
        }
    }
    if config.get_dbname().is_none() {
        if let Some(db) = env("PGDATABASE") {
            config.dbname(&db);
        }
    }
}

/// libpq's usual Unix socket directories.
fn default_socket_dir() -> String {
    ["/var/run/postgresql", "/tmp"]
        .into_iter()
        .find(|d| Path::new(d).is_dir())
        .unwrap_or("/tmp")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dbname_is_a_database_name_unless_it_is_a_connection_string() {
        let bare = parse_dbname("postgres").expect("a name");
        assert_eq!(bare.get_dbname(), Some("postgres"));
        assert!(bare.get_hosts().is_empty());
        let with_space = parse_dbname("my db").expect("a name");
        assert_eq!(with_space.get_dbname(), Some("my db"));
        let conninfo = parse_dbname("host=/tmp dbname=shop").expect("conninfo");
        assert_eq!(conninfo.get_dbname(), Some("shop"));
        let url = parse_dbname("postgresql://u@localhost/shop").expect("url");
        assert_eq!(url.get_dbname(), Some("shop"));
        assert!(parse_dbname("host='unterminated").is_err());
        assert!(parse_dbname("").expect("empty").get_dbname().is_none());
    }
}
