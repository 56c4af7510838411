//! `verify --online`: the steps around the block scan of a running cluster ([`Online`]).
//! Without a connection: the redo point of `pg_control` (re-read until its CRC verifies) and
//! the re-reads of pages that failed. With `--dbname` (a [`Server`] the host connects to): the
//! end of WAL (pages beyond it are corrupt), a `CHECKPOINT` (or the wait for the next one)
//! after which in-flux pages are read once more, and, at the standard level, the commit status
//! of transactions `pg_xact` on disk does not show yet. The rules themselves are in
//! `verify::online` and `verify::recheck`.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::error::VerifyError;
use super::host::{Event, Host, Server};
use super::pause::ReplayPause;
use super::request::OnlineRequest;
use crate::catalog::xact::{CommitLog, XidStatus, FIRST_NORMAL_TRANSACTION_ID};
use crate::catalog::Catalog;
use crate::check::standard::bounds::cluster_facts;
use crate::check::structure::Structure;
use crate::finding::{Finding, FindingKind, Severity};
use crate::format::control::ControlFile;
use crate::ops::cluster::{check_stopped, RunningReason};
use crate::plan::Plan;
use crate::scope::Scope;
use crate::verify::naming::name_findings;
use crate::verify::online::{
    keep_lasting, lsn_text, read_control_settled, OnlineSummary, ScanOptions,
};
use crate::verify::options::Level;
use crate::verify::recheck::{Rechecker, Settled, LISTING_KINDS};
use crate::verify::report::VerifyReport;

/// Times the catalog is read while its pages do not parse (torn by concurrent writes).
const CATALOG_READS: usize = 3;

/// The newest transaction ids whose status is asked of the server when the commit log on disk
/// does not record it (the server writes `pg_xact` pages out at checkpoints).
const MAX_XIDS_ASKED: u64 = 4_000_000;

/// Transaction ids asked per query.
const XIDS_PER_QUERY: usize = 100_000;

/// The state of one online run.
pub struct Online {
    server: Option<Box<dyn Server>>,
    checkpoint_allowed: bool,
    start_redo: u64,
    /// The end of WAL before the scan: pages above it are noted for the end-of-WAL check.
    start_end: Option<u64>,
    pub summary: OnlineSummary,
    /// Findings from the listing and the catalog, to be confirmed by a second read.
    doubtful: Vec<Finding>,
    /// `--pause-replay`: the standby's replay, paused for the run.
    pause: Option<ReplayPause>,
    max_pause: Duration,
}

impl Online {
    /// Refuses what is not supported online, connects if asked and notes the start. `None`:
    /// no server runs on a cleanly stopped cluster, which is then checked offline (strictly).
    pub fn start(
        request: &OnlineRequest,
        level: Level,
        datadir: &Path,
        control: &ControlFile,
        host: &mut dyn Host,
    ) -> Result<Option<Online>, VerifyError> {
        if level == Level::Extended && !request.pause_replay {
            return Err(VerifyError::Refused("--online checks the physical and standard levels; the extended level needs a stopped cluster, a copy, or a standby with --pause-replay".into()));
        }
        match check_stopped(datadir, control) {
            Ok(()) => {
                host.event(Event::NoServerRunning { datadir });
                return Ok(None);
            }
            Err(RunningReason::LivePostmaster { .. }) => {}
            Err(reason) => {
                return Err(VerifyError::Refused(format!(
                    "--online checks a cluster whose server is running; \"{}\": {reason}",
                    datadir.display()
                )))
            }
        }
        let (mut server, start_end) = match request.dbname.as_deref() {
            Some(conninfo) => {
                let (server, end) = connect(conninfo, control, datadir, host)?;
                (Some(server), Some(end))
            }
            None => (None, None),
        };
        let (pause, start_redo) = match (request.pause_replay, server.as_mut()) {
            (true, Some(server)) => {
                let conninfo = request.dbname.as_deref().unwrap_or_default();
                let guard = host.connect(conninfo)?;
                let pause = ReplayPause::start(server.as_mut(), guard, request.max_pause)?;
                // A restartpoint writes what replay changed; then pg_control's redo point.
                if request.checkpoint_allowed {
                    server.checkpoint()?;
                }
                let redo = read_control_settled(datadir).map_or(control.redo, |c| c.redo);
                (Some(pause), redo)
            }
            (true, None) => {
                return Err(VerifyError::Refused(
                    "--pause-replay needs --dbname (the standby to pause)".into(),
                ))
            }
            (false, _) => (None, control.redo),
        };
        Ok(Some(Online {
            checkpoint_allowed: request.checkpoint_allowed,
            start_redo,
            start_end,
            summary: OnlineSummary {
                online: true,
                start_redo_lsn: lsn_text(start_redo),
                connection: server.is_some(),
                replay_paused_at_lsn: pause.as_ref().map(|p| lsn_text(p.replay_lsn)),
                replay_lag_bytes: pause.as_ref().map(|p| {
                    p.receive_lsn
                        .unwrap_or(p.replay_lsn)
                        .saturating_sub(p.replay_lsn)
                }),
                ..OnlineSummary::default()
            },
            server,
            doubtful: Vec::new(),
            pause,
            max_pause: request.max_pause,
        }))
    }

    /// Set once `--max-pause` ran out and replay was resumed: the scan must end.
    pub fn pause_expired(&self) -> Option<std::sync::Arc<std::sync::atomic::AtomicBool>> {
        self.pause.as_ref().map(ReplayPause::expired)
    }

    /// Where the replay this run paused (`--pause-replay`) stands: the files stand still
    /// there. `None` when no replay was paused.
    pub fn paused_at(&self) -> Option<crate::format::lsn::Lsn> {
        self.pause
            .as_ref()
            .map(|p| crate::format::lsn::Lsn(p.replay_lsn))
    }

    /// `--pause-replay`, once every file was read: replay must still stand where it was
    /// paused (else a tool error), then it is resumed and the pause's length noted.
    pub fn end_pause(&mut self, report: &mut VerifyReport) -> Result<(), VerifyError> {
        let (Some(pause), Some(server)) = (self.pause.as_mut(), self.server.as_mut()) else {
            return Ok(());
        };
        if let Err(e) = pause.check_still(server.as_mut(), self.max_pause) {
            report.tool_errors.push(e);
        }
        self.summary.pause_seconds = Some(pause.paused_for().as_secs_f64());
        pause.resume(server.as_mut())?;
        self.pause = None;
        Ok(())
    }

    /// With a connection, at the standard level: the status of every transaction the commit
    /// log on disk does not show as ended (its pages lag behind the server's memory until the
    /// next checkpoint) is asked of the server, among the newest [`MAX_XIDS_ASKED`] ids, and
    /// recorded in `clog`. Ids that end during the scan stay unknown to the checks.
    pub fn fill_commit_log(&mut self, clog: &mut CommitLog) -> Result<(), VerifyError> {
        let Some(server) = self.server.as_mut() else {
            return Ok(());
        };
        let next = server.next_completed_xid()?;
        let lagging = lagging_xids(clog, next);
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
    ) -> Result<(), VerifyError> {
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
        self.beyond_end_of_wal(&checks, &mut settled, report)?;
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

    /// With a connection: the pages whose `pd_lsn` lies beyond the end of WAL are corrupt.
    fn beyond_end_of_wal(
        &mut self,
        checks: &Rechecker<'_>,
        settled: &mut Settled,
        report: &mut VerifyReport,
    ) -> Result<(), VerifyError> {
        let (Some(server), Some(_)) = (self.server.as_mut(), self.start_end) else {
            return Ok(());
        };
        let end = server.end_of_wal()?;
        self.summary.end_of_wal_lsn = Some(lsn_text(end));
        let newer = report
            .online_notes
            .as_ref()
            .map_or(&[][..], |n| n.newer.as_slice());
        let mut asked = Ok(());
        checks.lsn_beyond_end(
            newer,
            settled,
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
        Ok(asked?)
    }

    /// With a connection: the redo point of a checkpoint that began after the scan (asked for,
    /// or waited for with `--no-checkpoint`); `None` without a connection or when none came.
    fn next_checkpoint(&mut self, datadir: &Path) -> Result<Option<u64>, VerifyError> {
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
    ) -> Result<(), VerifyError> {
        let Some(server) = self.server.as_mut() else {
            return Ok(());
        };
        let mut kept = Vec::with_capacity(report.findings.len());
        for mut f in std::mem::take(&mut report.findings) {
            if let Some((db, oid, node)) = missing_relation_file(&f) {
                let now = server.filenode_in(&db, oid)?;
                if now != Some(node) || datadir.join(&f.file).exists() {
                    continue;
                }
                f.severity = Severity::Error;
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
    ) -> Result<(), VerifyError> {
        let mut doubtful = std::mem::take(&mut self.doubtful);
        let key = |f: &Finding| (f.kind, f.file.clone(), f.block);
        let earlier: HashSet<_> = before.iter().map(key).collect();
        doubtful.extend(
            report
                .findings
                .iter()
                .filter(|f| !earlier.contains(&key(f)) || LISTING_KINDS.contains(&f.kind))
                .cloned(),
        );
        let fresh = fresh_findings(datadir, scope)?;
        keep_lasting(&mut report.findings, &doubtful, &fresh);
        self.confirm_missing_files(report, datadir)?;
        report.summary.findings = report.findings.len() as u64;
        report.summary.corrupt_blocks = corrupt_blocks(&report.findings);
        Ok(())
    }
}

/// Connects with `conninfo`, checks that the server runs the cluster of `datadir` and asks
/// for its end of WAL, which must not be behind the redo point of `control`.
fn connect(
    conninfo: &str,
    control: &ControlFile,
    datadir: &Path,
    host: &mut dyn Host,
) -> Result<(Box<dyn Server>, u64), VerifyError> {
    let mut server = host.connect(conninfo)?;
    check_same_cluster(server.as_mut(), control, datadir)?;
    let end = server.end_of_wal()?;
    check_end_not_behind(end, control, datadir)?;
    Ok((server, end))
}

/// Refuses a server that does not run the cluster of `datadir`: its end of WAL, checkpoints,
/// catalog and commit statuses would be another cluster's. The system identifier must be
/// `pg_control`'s; the server's `data_directory`, when the role may read it, must be this
/// directory.
fn check_same_cluster(
    server: &mut dyn Server,
    control: &ControlFile,
    datadir: &Path,
) -> Result<(), VerifyError> {
    let id = server.system_identifier()?;
    if id != control.system_identifier {
        return Err(VerifyError::Refused(format!(
            "the server reached with --dbname runs another cluster (system identifier {id}; \"{}\" has {})",
            datadir.display(),
            control.system_identifier
        )));
    }
    let Some(theirs) = server.data_directory() else {
        return Ok(());
    };
    if let (Ok(a), Ok(b)) = (
        std::fs::canonicalize(&theirs),
        std::fs::canonicalize(datadir),
    ) {
        if a != b {
            return Err(VerifyError::Refused(format!(
                "the server reached with --dbname runs the data directory \"{}\", not \"{}\" (a copy of the same cluster)",
                a.display(),
                b.display()
            )));
        }
    }
    Ok(())
}

/// The server that runs `datadir` has written its WAL at least up to the redo point its
/// `pg_control` records: an end of WAL before it is another server, a copy of the cluster
/// (same system identifier) whose `data_directory` the role may not read. Judging the files by
/// that server's WAL would call every recent page "in the future".
fn check_end_not_behind(
    end: u64,
    control: &ControlFile,
    datadir: &Path,
) -> Result<(), VerifyError> {
    if end >= control.redo {
        return Ok(());
    }
    Err(VerifyError::Refused(format!(
        "the server reached with --dbname does not run \"{}\": its end of WAL {} is before the redo point {} in the directory's pg_control, which its own server has passed (a copy of the cluster?)",
        datadir.display(),
        lsn_text(end),
        lsn_text(control.redo)
    )))
}

/// The normal transaction ids among the [`MAX_XIDS_ASKED`] before `next` that `clog` does not
/// show as ended, as full ids.
fn lagging_xids(clog: &CommitLog, next: u64) -> Vec<i64> {
    let first = next.saturating_sub(MAX_XIDS_ASKED);
    (first..next)
        .filter(|&x| x as u32 >= FIRST_NORMAL_TRANSACTION_ID)
        .filter(|&x| {
            !matches!(
                clog.status(x as u32),
                XidStatus::Committed | XidStatus::Aborted
            )
        })
        .filter_map(|x| i64::try_from(x).ok())
        .collect()
}

/// `(database name, relation oid, file number)` of a `missing_file` finding of a named
/// relation.
fn missing_relation_file(f: &Finding) -> Option<(String, u32, u32)> {
    match (f.kind, &f.database, &f.relation) {
        (FindingKind::MissingFile, Some(db), Some(rel)) => {
            match (db.name.as_deref(), rel.oid, rel.filenode) {
                (Some(name), Some(oid), Some(node)) => Some((name.to_string(), oid, node)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The findings of a second listing and catalog read, named, after the scan.
fn fresh_findings(datadir: &Path, scope: &Scope) -> Result<Vec<Finding>, VerifyError> {
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
    Ok(fresh.findings)
}

/// Blocks with an error finding (the scan's count included pages the re-reads cleared).
fn corrupt_blocks(findings: &[Finding]) -> u64 {
    let blocks: HashSet<(&str, u64)> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error && f.kind != FindingKind::PartialBlock)
        .filter_map(|f| Some((f.file.as_str(), f.block?)))
        .collect();
    blocks.len() as u64
}
