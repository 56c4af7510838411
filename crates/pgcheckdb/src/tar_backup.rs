//! `verify --backup DIR` on a tar-format base backup: opens it (the first pass, which stages
//! the control file, catalogs and WAL, [`pgcheckdb_pg::ops::backup::tar`]), runs the page checks on
//! the blocks of the second pass and compares what that pass saw with `backup_manifest`.
//! The rest of `verify` (catalogs, scope, naming, the backup rule, output) is the same as
//! for a directory, run on the staging directory.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{anyhow, bail};
use pgcheckdb_pg::check::structure::Structure;
use pgcheckdb_pg::finding::{Finding, FindingKind, Severity};
use pgcheckdb_pg::ops::backup::manifest::{self, SeenFiles};
use pgcheckdb_pg::ops::backup::tar::scan::TarSource;
use pgcheckdb_pg::ops::backup::tar::{is_tar_backup, TarBackup};
use pgcheckdb_pg::ops::backup::{self, Backup};
use pgcheckdb_pg::plan::Plan;
use pgcheckdb_pg::verify::options::Level;
use pgcheckdb_pg::verify::options::VerifyOptions;
use pgcheckdb_pg::verify::report::BackupSummary;
use pgcheckdb_pg::verify::report::VerifyReport;
use pgcheckdb_pg::verify::{self};
use pgcheckdb_scan::Progress;

use crate::cli::VerifyArgs;

/// The tar-format backup of `--backup`, after its first pass; `None` for a plain backup or
/// `-D`.
pub fn open(args: &VerifyArgs) -> anyhow::Result<Option<TarBackup>> {
    let Some(dir) = &args.backup else {
        return Ok(None);
    };
    if !dir.is_dir() {
        bail!("\"{}\" is not a directory", dir.display());
    }
    if !is_tar_backup(dir) {
        return Ok(None);
    }
    if crate::verify_cmd::requested_level(args) == Level::Extended {
        bail!(
            "the extended level is not available on a tar-format backup (its phases read the files in an order of their own, a stream has one); use --level standard, or unpack the backup and use -D"
        );
    }
    if args.estimate {
        bail!("--estimate samples the files of a data directory; it does not apply to a tar-format backup");
    }
    let cancelled = || crate::signals::caught().is_some();
    TarBackup::open(dir, &cancelled)
        .map(Some)
        .map_err(|e| anyhow!(e))
}

/// `-D`'s data directory, with a hint when it is a tar-format backup.
pub fn resolve_datadir_or_hint(pgdata: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = pgdata.filter(|d| is_tar_backup(d)) {
        bail!(
            "\"{}\" is a tar-format base backup: verify it with --backup {}",
            dir.display(),
            dir.display()
        );
    }
    crate::verify_cmd::resolve_datadir(pgdata)
}

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
) -> Result<(VerifyReport, Streamed), String> {
    let manifest =
        manifest::read_manifest(&tar.dir)?.and_then(|b| manifest::parse_manifest(&b).ok());
    let start_lsn = backup.map_or(u64::MAX, |b| b.label.start_lsn.0);
    let mut source = TarSource::new(tar, plan, manifest.as_ref(), start_lsn, progress);
    let report = verify::run::run_source(plan, opts, structure, &mut source)?;
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
) -> Result<(), String> {
    backup::add_findings(report, oversized_findings(tar));
    let Some(bytes) = manifest::read_manifest(&tar.dir)? else {
        return Ok(());
    };
    let result = manifest::check_against(&bytes, &mut streamed.seen);
    backup::add_manifest_result(report, summary, result);
    Ok(())
}
