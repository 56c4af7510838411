//! The fourth step of a run, after the scan ([`settle_and_name`], [`judge_backup`]): the pages
//! that failed on a running server read again, the findings named (and, online, kept only
//! when a second read shows them too), and a base backup's rule for the blocks replay rewrites
//! and its manifest applied.

use super::catalogs::Planned;
use super::error::VerifyError;
use super::host::{Event, Host};
use super::prepare::Prepared;
use super::scan::Scanned;
use super::tar;
use crate::ops::backup;
use crate::verify::naming::name_findings_with;
use crate::verify::options::Level;

/// The re-reads of a running server, then the names of every finding.
pub fn settle_and_name(
    host: &mut dyn Host,
    level: Level,
    prepared: &mut Prepared,
    planned: &Planned,
    scanned: &mut Scanned,
) -> Result<(), VerifyError> {
    let (plan, catalog) = (&planned.plan, &planned.catalog);
    let report = &mut scanned.report;
    if let Some(online) = prepared.online.as_mut() {
        online.settle(plan, catalog, level, report)?;
        host.event(Event::Rechecked {
            online: &online.summary,
        });
    }
    let before_naming = prepared.online.as_ref().map(|_| report.findings.clone());
    name_findings_with(report, catalog, std::mem::take(&mut scanned.listed));
    if let (Some(online), Some(before)) = (prepared.online.as_mut(), before_naming) {
        let datadir = &prepared.source.datadir;
        online.keep_lasting(report, &before, datadir, &planned.scope)?;
        online.end_pause(report)?;
        report.summary.online = Some(online.summary.clone());
    }
    host.event(Event::Named);
    Ok(())
}

/// A base backup: the findings about blocks replay rewrites set aside, the files compared
/// with `backup_manifest`; a failed comparison is a tool error. A crashed cluster: the
/// findings about blocks crash recovery rewrites set aside.
pub fn judge_backup(
    host: &mut dyn Host,
    prepared: &Prepared,
    planned: &Planned,
    scanned: &mut Scanned,
) {
    let Some(b) = &prepared.backup else {
        return;
    };
    let report = &mut scanned.report;
    let (summary, aside) = backup::set_aside(report, &planned.plan, b);
    host.event(Event::SetAside { findings: &aside });
    let mut summary = match summary {
        backup::ReplaySummary::Backup(s) => s,
        backup::ReplaySummary::Crash(crash) => {
            if let Err(e) = backup::crash::check_still(&prepared.source.datadir, b) {
                report.tool_errors.push(e);
            }
            host.event(Event::CrashChecked { crash: &crash });
            report.summary.crash_recovery = Some(crash);
            return;
        }
    };
    let checked = match (&prepared.source.tar, scanned.streamed.take()) {
        (Some(t), Some(seen)) => tar::check_manifest(t, seen, report, &mut summary),
        _ => backup::check_manifest(&prepared.source.datadir, report, &mut summary),
    };
    if let Err(e) = checked {
        report.tool_errors.push(e.to_string());
    }
    host.event(Event::BackupChecked { backup: &summary });
    report.summary.backup = Some(summary);
}
