//! `verify --online`: the steps around the block scan of a running cluster. Without a
//! connection: the redo point of `pg_control` (re-read until its CRC verifies) and the re-reads
//! of pages that failed. With `--dbname`: the end of WAL (pages beyond it are corrupt), a
//! `CHECKPOINT` (or the wait for the next one) after which in-flux pages are read once more.
//! The rules themselves are in `pgcheckdb_pg::online`.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use pgcheckdb_pg::catalog::xact::{CommitLog, XidStatus, FIRST_NORMAL_TRANSACTION_ID};
use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::cluster::{check_stopped, RunningReason};
use pgcheckdb_pg::control::ControlFile;
use pgcheckdb_pg::finding::{Finding, FindingKind};
use pgcheckdb_pg::naming::name_findings;
use pgcheckdb_pg::online::recheck::{Rechecker, LISTING_KINDS};
use pgcheckdb_pg::online::{
    keep_lasting, lsn_text, parse_lsn, read_control_settled, OnlineSummary, ScanOptions,
};
use pgcheckdb_pg::scope::Scope;
use pgcheckdb_pg::standard::bounds::cluster_facts;
use pgcheckdb_pg::verify::{Level, Plan, Structure, VerifyReport};

use crate::cli::VerifyArgs;

/// Times the catalog is read while its pages do not parse (torn by concurrent writes).
const CATALOG_READS: usize = 3;

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

/// The newest transaction ids whose status is asked of the server when the commit log on disk
/// does not record it (the server writes `pg_xact` pages out at checkpoints).
const MAX_XIDS_ASKED: u64 = 4_000_000;

/// Transaction ids asked per query.
const XIDS_PER_QUERY: usize = 100_000;

/// A connection to the running server.
pub struct Server {
    client: postgres::Client,
    /// To reach the other databases of the cluster.
    config: postgres::Config,
}

impl Server {
    /// Connects with a connection string or URL; `PGHOST`, `PGPORT`, `PGUSER` and `PGDATABASE`
    /// fill in what it leaves out, as libpq does.
    pub fn connect(conninfo: &str) -> anyhow::Result<Server> {
        let mut config = if conninfo.trim().is_empty() {
            postgres::Config::new()
        } else {
            postgres::Config::from_str(conninfo)
                .map_err(|e| anyhow!("invalid --dbname connection string: {e}"))?
        };
        fill_from_environment(&mut config);
        config.connect_timeout(Duration::from_secs(10));
        config.application_name("pgcheckdb verify --online");
        let client = config
            .connect(postgres::NoTls)
            .map_err(|e| anyhow!("could not connect to the server: {}", pg_error(&e)))?;
        Ok(Server { client, config })
    }

    /// Refuses a server that does not run the cluster of `datadir`: its end of WAL, checkpoints,
    /// catalog and commit statuses would be another cluster's. The system identifier must be
    /// `pg_control`'s; the server's `data_directory`, when the role may read it, must be this
    /// directory.
    fn check_same_cluster(&mut self, control: &ControlFile, datadir: &Path) -> anyhow::Result<()> {
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
        let id = row.get::<_, i64>(0) as u64;
        if id != control.system_identifier {
            bail!(
                "the server reached with --dbname runs another cluster (system identifier {id}; \"{}\" has {})",
                datadir.display(),
                control.system_identifier
            );
        }
        // Only superusers and members of pg_read_all_settings may read it.
        let Ok(row) = self.client.query_one("SHOW data_directory", &[]) else {
            return Ok(());
        };
        let theirs: String = row.get(0);
        if let (Ok(a), Ok(b)) = (
            std::fs::canonicalize(&theirs),
            std::fs::canonicalize(datadir),
        ) {
            if a != b {
                bail!(
                    "the server reached with --dbname runs the data directory \"{}\", not \"{}\" (a copy of the same cluster)",
                    a.display(),
                    b.display()
                );
            }
        }
        Ok(())
    }

    /// The file number database `db` gives relation `oid` now, `None` when the relation is gone.
    fn filenode_in(&mut self, db: &str, oid: u32) -> anyhow::Result<Option<u32>> {
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

    /// The end of WAL now.
    pub fn end_of_wal(&mut self) -> anyhow::Result<u64> {
        let row = self.client.query_one(END_OF_WAL_SQL, &[]).map_err(|e| {
            anyhow!(
                "could not ask the server for the end of WAL: {}",
                pg_error(&e)
            )
        })?;
        let text: Option<String> = row.get(0);
        let text = text.context("the server does not know its end of WAL (a standby that has neither received nor replayed WAL)")?;
        parse_lsn(&text).with_context(|| format!("the server sent an unreadable LSN \"{text}\""))
    }

    /// The first transaction id not yet completed, as a full (epoch-extended) id: every id
    /// below it has either ended or is running, so the server can say which.
    fn next_completed_xid(&mut self) -> anyhow::Result<u64> {
        let row = self.client.query_one(SNAPSHOT_XMAX_SQL, &[]).map_err(|e| {
            anyhow!(
                "could not ask the server for its snapshot: {}",
                pg_error(&e)
            )
        })?;
        let xmax: i64 = row.get(0);
        u64::try_from(xmax).map_err(|_| anyhow!("the server sent a negative transaction id {xmax}"))
    }

    /// The ids of `xids` (full ids) that have committed (`true`) or aborted (`false`); ids
    /// still running and ids older than the server's commit log are left out.
    fn ended_xacts(&mut self, xids: &[i64]) -> anyhow::Result<Vec<(u64, bool)>> {
        let rows = self.client.query(XACT_STATUS_SQL, &[&xids]).map_err(|e| {
            anyhow!(
                "could not ask the server for transaction status: {}",
                pg_error(&e)
            )
        })?;
        rows.iter()
            .map(|r| {
                let xid: i64 = r.get(0);
                let committed: bool = r.get(1);
                Ok((u64::try_from(xid)?, committed))
            })
            .collect()
    }

    /// Runs `CHECKPOINT` (a restartpoint on a standby).
    pub fn checkpoint(&mut self) -> anyhow::Result<()> {
        self.client
            .batch_execute("CHECKPOINT")
            .map_err(|e| anyhow!("CHECKPOINT failed: {}", pg_error(&e)))
    }

    /// `checkpoint_timeout`: the longest wait for the next checkpoint.
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
}

/// A client error with the server's own message, when it sent one (the error's `Display` says
/// only "db error").
fn pg_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

fn fill_from_environment(config: &mut postgres::Config) {
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

/// The state of one online run.
pub struct Online {
    server: Option<Server>,
    checkpoint_allowed: bool,
    start_redo: u64,
    /// The end of WAL before the scan: pages above it are noted for the end-of-WAL check.
    start_end: Option<u64>,
    pub summary: OnlineSummary,
    /// Findings from the listing and the catalog, to be confirmed by a second read.
    doubtful: Vec<Finding>,
}

impl Online {
    /// Refuses what is not supported online, connects if asked and notes the start. `None`:
    /// no server runs on a cleanly stopped cluster, which is then checked offline (strictly).
    pub fn start(
        args: &VerifyArgs,
        level: Level,
        datadir: &Path,
        control: &ControlFile,
    ) -> anyhow::Result<Option<Online>> {
        if level == Level::Extended {
            bail!("--online checks the physical and standard levels; the extended level needs a stopped cluster or a copy");
        }
        match check_stopped(datadir, control) {
            Ok(()) => {
                eprintln!(
                    "pgcheckdb: no server is running on \"{}\": checking it offline",
                    datadir.display()
                );
                return Ok(None);
            }
            Err(RunningReason::LivePostmaster { .. }) => {}
            Err(reason) => bail!(
                "--online checks a cluster whose server is running; \"{}\": {reason}",
                datadir.display()
            ),
        }
        let mut server = args.dbname.as_deref().map(Server::connect).transpose()?;
        if let Some(s) = server.as_mut() {
            s.check_same_cluster(control, datadir)?;
        }
        let start_end = server.as_mut().map(Server::end_of_wal).transpose()?;
        Ok(Some(Online {
            checkpoint_allowed: !args.no_checkpoint,
            start_redo: control.redo,
            start_end,
            summary: OnlineSummary {
                online: true,
                start_redo_lsn: lsn_text(control.redo),
                connection: server.is_some(),
                ..OnlineSummary::default()
            },
            server,
            doubtful: Vec::new(),
        }))
    }

    /// With a connection, at the standard level: the status of every transaction the commit
    /// log on disk does not show as ended (its pages lag behind the server's memory until the
    /// next checkpoint) is asked of the server, among the newest [`MAX_XIDS_ASKED`] ids, and
    /// recorded in `clog`. Ids that end during the scan stay unknown to the checks.
    pub fn fill_commit_log(&mut self, clog: &mut CommitLog) -> anyhow::Result<()> {
        let Some(server) = self.server.as_mut() else {
            return Ok(());
        };
        let next = server.next_completed_xid()?;
        let first = next.saturating_sub(MAX_XIDS_ASKED);
        let lagging: Vec<i64> = (first..next)
            .filter(|&x| x as u32 >= FIRST_NORMAL_TRANSACTION_ID)
            .filter(|&x| {
                !matches!(
                    clog.status(x as u32),
                    XidStatus::Committed | XidStatus::Aborted
                )
            })
            .filter_map(|x| i64::try_from(x).ok())
            .collect();
        let mut recorded = 0;
        for batch in lagging.chunks(XIDS_PER_QUERY) {
            for (xid, committed) in server.ended_xacts(batch)? {
                let status = match committed {
                    true => XidStatus::Committed,
                    false => XidStatus::Aborted,
                };
                clog.record(xid as u32, status);
                recorded += 1;
            }
        }
        self.summary.xact_statuses_from_server = Some(recorded);
        Ok(())
    }

    /// What the block scan notes.
    pub fn scan_options(&self) -> ScanOptions {
        ScanOptions {
            lsn_floor: self.start_end.unwrap_or(u64::MAX),
        }
    }

    /// Reads the catalog again while it reports pages it could not parse (torn by a write).
    pub fn read_catalog(datadir: &Path, control: &ControlFile, columns: bool) -> Catalog {
        let mut catalog = Catalog::read_with(datadir, control, columns);
        for _ in 1..CATALOG_READS {
            if catalog.tool_errors.is_empty() && catalog.findings.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            catalog = Catalog::read_with(datadir, control, columns);
        }
        catalog
    }

    /// After the scan: the re-reads, the end-of-WAL check and the checkpoint.
    pub fn settle(
        &mut self,
        plan: &Plan,
        catalog: &Catalog,
        level: Level,
        report: &mut VerifyReport,
    ) -> anyhow::Result<()> {
        self.doubtful = plan.findings.clone();
        let control_now = read_control_settled(&plan.datadir)?;
        // Pages are judged again against the files as they are now: a relation that grew
        // during the scan has pages naming blocks the first listing did not have.
        let plan_now = plan.with_current_sizes();
        let plan = &plan_now;
        let mut structure =
            (level != Level::Physical).then(|| Structure::from_catalog(plan, catalog));
        if let Some(s) = structure.as_mut() {
            // Ids written during the scan are newer than the bounds taken before it.
            s.facts = cluster_facts(&control_now, &plan.datadir);
        }
        let checks = Rechecker {
            plan,
            structure: structure.as_ref(),
        };
        let mut settled = checks.failed_pages(&mut report.findings, self.start_redo);
        if let (Some(server), Some(_)) = (self.server.as_mut(), self.start_end) {
            let end = server.end_of_wal()?;
            self.summary.end_of_wal_lsn = Some(lsn_text(end));
            let newer = report
                .online_notes
                .as_ref()
                .map_or(&[][..], |n| n.newer.as_slice());
            let mut asked = Ok(());
            checks.lsn_beyond_end(
                newer,
                &mut settled,
                end,
                || match server.end_of_wal() {
                    Ok(l) => Some(l),
                    Err(e) => {
                        asked = Err(e);
                        None
                    }
                },
                &mut report.findings,
            );
            asked?;
        }
        if !settled.in_flux.is_empty() {
            if let Some(redo) = self.next_checkpoint(&plan.datadir)? {
                self.summary.checkpoint_redo_lsn = Some(lsn_text(redo));
                let in_flux = std::mem::take(&mut settled.in_flux);
                checks.in_flux_pages(in_flux, redo, &mut report.findings, &mut settled);
            }
        }
        self.summary.rechecked_blocks = settled.rechecked;
        self.summary.in_flux_blocks = settled.in_flux.len() as u64;
        Ok(())
    }

    /// With a connection: the redo point of a checkpoint that began after the scan (asked for,
    /// or waited for with `--no-checkpoint`); `None` without a connection or when none came.
    fn next_checkpoint(&mut self, datadir: &Path) -> anyhow::Result<Option<u64>> {
        let Some(server) = self.server.as_mut() else {
            return Ok(None);
        };
        let before = read_control_settled(datadir)?;
        if self.checkpoint_allowed {
            server.checkpoint()?;
            return Ok(Some(read_control_settled(datadir)?.redo));
        }
        let deadline = Instant::now() + server.checkpoint_timeout() + Duration::from_secs(10);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(1));
            let now = read_control_settled(datadir)?;
            if now.checkpoint != before.checkpoint {
                return Ok(Some(now.redo));
            }
        }
        Ok(None)
    }

    /// With a connection, a `missing_file` finding of a relation is asked of the server (its
    /// catalog is exact where the files may lag): it stands, as an error, only when the server
    /// still gives the relation that file number and the file is still missing.
    fn confirm_missing_files(
        &mut self,
        report: &mut VerifyReport,
        datadir: &Path,
    ) -> anyhow::Result<()> {
        let Some(server) = self.server.as_mut() else {
            return Ok(());
        };
        let mut kept = Vec::with_capacity(report.findings.len());
        for mut f in std::mem::take(&mut report.findings) {
            let asked = match (f.kind, &f.database, &f.relation) {
                (FindingKind::MissingFile, Some(db), Some(rel)) => {
                    match (db.name.as_deref(), rel.oid, rel.filenode) {
                        (Some(name), Some(oid), Some(node)) => Some((name.to_string(), oid, node)),
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some((db, oid, node)) = asked {
                let now = server.filenode_in(&db, oid)?;
                if now != Some(node) || datadir.join(&f.file).exists() {
                    continue;
                }
                f.severity = pgcheckdb_pg::finding::Severity::Error;
            }
            kept.push(f);
        }
        report.findings = kept;
        Ok(())
    }

    /// Keeps the findings of the listing and the catalog only when a second listing and
    /// catalog read after the scan show them too. `before` is the report's findings before
    /// `name_findings` added the catalog's.
    pub fn keep_lasting(
        &mut self,
        report: &mut VerifyReport,
        before: &[Finding],
        datadir: &Path,
        scope: &Scope,
    ) -> anyhow::Result<()> {
        let mut doubtful = std::mem::take(&mut self.doubtful);
        let key = |f: &Finding| (f.kind, f.file.clone(), f.block);
        let earlier: std::collections::HashSet<_> = before.iter().map(key).collect();
        doubtful.extend(
            report
                .findings
                .iter()
                .filter(|f| !earlier.contains(&key(f)) || LISTING_KINDS.contains(&f.kind))
                .cloned(),
        );
        let control = read_control_settled(datadir)?;
        let catalog = Online::read_catalog(datadir, &control, false);
        let fresh_plan = Plan::from_listing(
            datadir,
            control.clone(),
            Plan::list(datadir, &control),
            |f| scope.keeps_file(f),
        );
        let mut fresh = VerifyReport {
            findings: fresh_plan.findings.clone(),
            ..VerifyReport::default()
        };
        name_findings(&mut fresh, &fresh_plan, &catalog);
        keep_lasting(&mut report.findings, &doubtful, &fresh.findings);
        self.confirm_missing_files(report, datadir)?;
        report.summary.findings = report.findings.len() as u64;
        report.summary.corrupt_blocks = corrupt_blocks(&report.findings);
        Ok(())
    }
}

/// Blocks with an error finding (the scan's count included pages the re-reads cleared).
fn corrupt_blocks(findings: &[Finding]) -> u64 {
    let blocks: std::collections::HashSet<(&str, u64)> = findings
        .iter()
        .filter(|f| {
            f.severity == pgcheckdb_pg::finding::Severity::Error
                && f.kind != pgcheckdb_pg::finding::FindingKind::PartialBlock
        })
        .filter_map(|f| Some((f.file.as_str(), f.block?)))
        .collect();
    blocks.len() as u64
}
