//! A tar-format base backup's second pass: the page checks on the blocks of every relation
//! file as the archive streams them ([`scan`]), and what that pass saw compared with
//! `backup_manifest` ([`check_manifest`]). Everything else of a run is the same as for a
//! directory, on the staging directory of the first pass.

use std::collections::HashSet;

use pgcheckdb_scan::Progress;

use crate::check::structure::Structure;
use crate::finding::{Finding, FindingKind, Severity};
use crate::ops::backup::manifest::{self, SeenFiles};
use crate::ops::backup::tar::scan::TarSource;
use crate::ops::backup::tar::TarBackup;
use crate::ops::backup::{self, Backup, BackupError};
use crate::plan::Plan;
use crate::verify;
use crate::verify::options::VerifyOptions;
use crate::verify::report::{BackupSummary, VerifyReport};

/// What the second pass saw besides the blocks.
pub struct Streamed {
    pub seen: SeenFiles,
    pub newer_pages: HashSet<(usize, u64)>,
}

/// The second pass: the page checks on every relation file's blocks, the members' checksums.
pub fn scan(
    tar: &TarBackup,
    plan: &Plan,
    opts: &VerifyOptions,
    progress: &Progress,
    structure: Option<&Structure<'_>>,
    backup: Option<&Backup>,
) -> Result<(VerifyReport, Streamed), BackupError> {
    let manifest =
        manifest::read_manifest(&tar.dir)?.and_then(|b| manifest::parse_manifest(&b).ok());
    let start_lsn = backup.map_or(u64::MAX, |b| b.start_lsn().0);
    let mut source = TarSource::new(tar, plan, manifest.as_ref(), start_lsn, progress);
    let report =
        verify::run::run_source(plan, opts, structure, &mut source).map_err(BackupError::Scan)?;
    Ok((
        report,
        Streamed {
            seen: source.seen,
            newer_pages: source.newer_pages,
        },
    ))
}

/// One finding per member larger than PostgreSQL makes a file of its kind.
fn oversized_findings(tar: &TarBackup) -> Vec<Finding> {
    tar.oversized
        .iter()
        .map(|m| {
            Finding::for_file(
                FindingKind::BackupFileOversized,
                Severity::Error,
                &m.path,
                format!(
                    "{} bytes, more than {} can be ({} bytes): not unpacked, and not read by the checks that need it",
                    m.size, m.what, m.cap
                ),
            )
            .with_detail(serde_json::json!({ "size": m.size, "max_size": m.cap }))
        })
        .collect()
}

/// Compares the members the second pass saw with `backup_manifest` (beside the archives), and
/// reports the needed members the first pass would not unpack.
pub fn check_manifest(
    tar: &TarBackup,
    mut streamed: Streamed,
    report: &mut VerifyReport,
    summary: &mut BackupSummary,
) -> Result<(), BackupError> {
    backup::add_findings(report, oversized_findings(tar));
    let Some(bytes) = manifest::read_manifest(&tar.dir)? else {
        return Ok(());
    };
    let result = manifest::check_against(&bytes, &mut streamed.seen);
    backup::add_manifest_result(report, summary, result);
    Ok(())
}
