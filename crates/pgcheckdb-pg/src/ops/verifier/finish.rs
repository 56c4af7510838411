//! The last step of a run ([`finish`]): the findings outside the scope dropped, the
//! per-relation summaries of `-v`, the catalog's tool errors, the time taken, and whether a
//! signal stopped the scan.

use super::catalogs::Planned;
use super::host::Host;
use super::outcome::{Finished, Interrupted};
use super::prepare::Prepared;
use super::request::VerifyRequest;
use super::scan::Scanned;
use crate::check::structure::Structure;
use crate::verify::relstats::{relation_summaries, RelationSummary};

/// The report as it is handed back.
pub fn finish(
    request: &VerifyRequest,
    host: &dyn Host,
    prepared: &Prepared,
    planned: &Planned,
    structure: Option<&Structure<'_>>,
    scanned: Scanned,
    system_identifier: u64,
) -> Finished {
    let Scanned {
        mut report,
        progress,
        total,
        ..
    } = scanned;
    if !request.scope.is_everything() {
        report.findings.retain(|f| planned.scope.keeps_finding(f));
        report.summary.findings = report.findings.len() as u64;
    }
    let relations = request
        .verbose
        .then(|| relations(planned, structure, &report.file_tallies));
    report
        .tool_errors
        .extend(planned.catalog.tool_errors.iter().cloned());
    report.summary.seconds = prepared.started.elapsed().as_secs_f64();
    let interrupted = host.interrupted().map(|signal| Interrupted {
        signal,
        bytes_done: progress
            .bytes_done
            .load(std::sync::atomic::Ordering::Relaxed),
        bytes_total: total,
    });
    report.summary.error = report.error_line();
    Finished {
        report,
        relations,
        shown: prepared.source.shown().to_path_buf(),
        interrupted,
        system_identifier,
    }
}

/// What was read of each relation (`-v`).
fn relations(
    planned: &Planned,
    structure: Option<&Structure<'_>>,
    tallies: &[crate::verify::relstats::FileTally],
) -> Vec<RelationSummary> {
    let formats: Vec<_> = match structure {
        Some(s) => s
            .files
            .iter()
            .map(|f| f.as_ref().map(|x| x.format.clone()))
            .collect(),
        None => Vec::new(),
    };
    relation_summaries(&planned.plan, &formats, tallies, &planned.catalog)
}
