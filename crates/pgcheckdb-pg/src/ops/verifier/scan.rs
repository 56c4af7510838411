//! The third step of a run: the structure checks planned ([`plan_structure`]) and the block
//! scan ([`scan`]), from the files in parallel or from a tar archive's stream, while the
//! orphan and missing files are found on a thread of their own.

use pgcheckdb_scan::Progress;

use super::catalogs::Planned;
use super::error::VerifyError;
use super::host::{Event, Host, ScanView};
use super::prepare::Prepared;
use super::tar::{self, Streamed};
use crate::check::agreement::Agreement;
use crate::check::extended::ExtendedPlan;
use crate::check::structure::Structure;
use crate::finding::Finding;
use crate::ops::backup::BackupError;
use crate::verify;
use crate::verify::naming::listing_findings;
use crate::verify::options::Level;
use crate::verify::report::VerifyReport;

/// What the block scan produced.
pub struct Scanned {
    pub report: VerifyReport,
    /// The orphan and missing files, and the catalog's own findings.
    pub listed: Vec<Finding>,
    /// A tar-format backup: what its second pass saw besides the blocks.
    pub streamed: Option<Streamed>,
    /// The scan's counters (how far an interrupted scan got).
    pub progress: Progress,
    /// Bytes the scan was to read.
    pub total: u64,
}

/// The extended level's plan of cross-page facts (and its spill directory).
pub fn extended_plan(
    prepared: &Prepared,
    planned: &Planned,
) -> Result<Option<ExtendedPlan>, VerifyError> {
    let Some(config) = &prepared.extended else {
        return Ok(None);
    };
    let agreement = match &prepared.backup {
        Some(b) => b.agreement(),
        None => Agreement::of_state(planned.plan.control.state),
    };
    ExtendedPlan::build(
        &planned.plan,
        &planned.catalog,
        config,
        prepared.opts.jobs,
        &agreement,
    )
    .map(Some)
    .map_err(|source| VerifyError::Io {
        what: format!(
            "could not create a spill directory in \"{}\"",
            config.temp_dir.display()
        ),
        source,
    })
}

/// The structure checks of every file (standard level and above), told to the host.
pub fn plan_structure<'a>(
    host: &mut dyn Host,
    level: Level,
    planned: &'a Planned,
    extended: Option<&'a ExtendedPlan>,
) -> Option<Structure<'a>> {
    let structure = (level != Level::Physical).then(|| Structure {
        extended,
        ..Structure::from_catalog(&planned.plan, &planned.catalog)
    });
    if let Some(s) = &structure {
        host.event(Event::StructurePlanned {
            structure: s,
            extended,
        });
    }
    structure
}

/// Scans the blocks while the host shows progress. Orphan and missing files come from the
/// catalog and the listing alone: they are found on a thread of their own meanwhile (80,000
/// relations: 12 ms).
pub fn scan(
    host: &mut dyn Host,
    prepared: &mut Prepared,
    planned: &Planned,
    structure: Option<&Structure<'_>>,
) -> Result<Scanned, VerifyError> {
    let (plan, catalog) = (&planned.plan, &planned.catalog);
    let total = plan.scan_bytes();
    let progress = Progress::default();
    let expired = prepared.online.as_ref().and_then(|o| o.pause_expired());
    let view = ScanView {
        plan,
        catalog,
        total,
        progress: &progress,
        stop: expired.as_deref(),
    };
    let (scanned, listed) = std::thread::scope(|s| {
        let listed = s.spawn(|| listing_findings(plan, catalog));
        let mut scanned = None;
        host.watch_scan(&view, &mut || {
            scanned = Some(scan_blocks(prepared, planned, &progress, structure));
        });
        let listed = listed
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (scanned, listed)
    });
    let Some(scanned) = scanned else {
        return Err(VerifyError::Refused("the block scan did not run".into()));
    };
    let (report, mut streamed) = scanned?;
    if let (Some(b), Some(seen)) = (prepared.backup.as_mut(), streamed.as_mut()) {
        b.newer_pages = Some(std::mem::take(&mut seen.newer_pages));
    }
    host.event(Event::Scanned {
        report: &report,
        jobs: prepared.opts.jobs,
    });
    Ok(Scanned {
        report,
        listed,
        streamed,
        progress,
        total,
    })
}

/// The block scan itself: the plan's files in parallel, or a tar archive's stream.
fn scan_blocks(
    prepared: &Prepared,
    planned: &Planned,
    progress: &Progress,
    structure: Option<&Structure<'_>>,
) -> Result<(VerifyReport, Option<Streamed>), BackupError> {
    let (plan, opts) = (&planned.plan, &prepared.opts);
    match &prepared.source.tar {
        None => Ok((verify::run::run(plan, opts, progress, structure), None)),
        Some(t) => {
            let backup = prepared.backup.as_ref();
            tar::scan(t, plan, opts, progress, structure, backup)
                .map(|(report, seen)| (report, Some(seen)))
        }
    }
}
