//! Base backups (`pg_basebackup -Fp`): a copy of a running cluster, taken file by file while
//! the server kept writing. Its `backup_label` says where recovery starts; until recovery has
//! replayed the WAL from there, a page the server wrote during the copy may be torn or stale
//! in the copy, and that is not corruption.
//!
//! The flow: [`label`] reads `backup_label`; [`wal`] decodes the backup's own WAL into the set
//! of blocks replay rewrites ([`prepare`]); after the ordinary scan, [`set_aside`] takes the
//! findings about those blocks out of the report and counts them; [`manifest`] compares the
//! files with `backup_manifest`.
//!
//! The rule for a finding on a block:
//! * with the WAL from the start LSN on (`-X stream`, `-X fetch`): set aside exactly when the
//!   block has a block reference in a record from the start LSN to the end of the WAL present;
//!   if that WAL does not reach the backup's end, also when its `pd_lsn` is past the start LSN;
//! * without it (`-X none`): set aside when the page's `pd_lsn` is past the start LSN. A torn
//!   page whose first sector (which holds `pd_lsn`) is still the old one then shows an old LSN
//!   and is reported: without the WAL nothing tells it from real damage.

pub mod crash;
pub mod digest;
pub mod label;
pub mod manifest;
pub mod tar;
pub mod wal;

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;

use crate::check::agreement::{unlogged_relations, Agreement, InFlux};
use crate::finding::Finding;
use crate::format::control::ControlFile;
use crate::format::lsn::Lsn;
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;
use crate::verify::report::{corrupt_block_count, VerifyReport};
use crate::verify::report::{BackupSummary, CrashSummary, ManifestSummary};
use label::{BackupLabel, LabelError, BACKUP_LABEL_FILE, MAX_LABEL_BYTES};
use manifest::ManifestError;
use wal::{BlockRef, RelFileLocator, ReplaySet};

/// Why a base backup's own files (`backup_label`, `backup_manifest`, the tar archives) cannot
/// be used.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// `backup_label` exists but could not be read.
    #[error("could not read \"{file}\": {0}", file = BACKUP_LABEL_FILE)]
    ReadLabel(#[source] io::Error),
    #[error(transparent)]
    Label(#[from] LabelError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Tar(#[from] tar::TarError),
    /// The streamed block scan of a tar-format backup stopped (its reason as the scan says it).
    #[error("{0}")]
    Scan(String),
}

/// Reads `backup_label` if the data directory has one.
pub fn read_label(datadir: &Path) -> Result<Option<BackupLabel>, BackupError> {
    match pgcheckdb_scan::open::read_regular(&datadir.join(BACKUP_LABEL_FILE), MAX_LABEL_BYTES) {
        Ok(bytes) => Ok(Some(label::parse_label(&String::from_utf8_lossy(&bytes))?)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(BackupError::ReadLabel(e)),
    }
}

/// What decides that a failing page may be one replay rewrites.
#[derive(Debug)]
pub enum ReplayBasis {
    /// The backup's WAL, decoded from the start LSN.
    Wal {
        set: Box<ReplaySet>,
        /// The WAL reaches the backup's end: the set holds every block changed during the copy.
        complete: bool,
    },
    /// No WAL from the start LSN in `pg_wal`: the page's own LSN.
    PageLsn,
}

impl ReplayBasis {
    /// The WAL read, when there was one.
    fn wal(&self) -> Option<&ReplaySet> {
        match self {
            ReplayBasis::Wal { set, .. } => Some(set),
            ReplayBasis::PageLsn => None,
        }
    }

    /// What the summaries say of the WAL read: its end, records and distinct blocks.
    fn wal_counts(&self) -> (Option<Lsn>, u64, u64) {
        self.wal().map_or((None, 0, 0), |set| {
            (Some(set.end_lsn), set.records, set.blocks.len() as u64)
        })
    }
}

/// Where WAL replay of the files being verified starts.
#[derive(Debug)]
pub enum Origin {
    /// A base backup: its `backup_label` (the start LSN).
    BaseBackup(BackupLabel),
    /// A cluster that was not shut down (crashed, or copied while it ran without backup
    /// mode): crash recovery starts at the redo point of `pg_control`'s last checkpoint.
    Crash(crash::CrashPoint),
}

/// A base backup or a crashed cluster being verified: the files as WAL replay will find them.
#[derive(Debug)]
pub struct Backup {
    pub origin: Origin,
    pub basis: ReplayBasis,
    /// `End-LSN` of the manifest's WAL ranges, when there is a manifest.
    pub manifest_wal_end: Option<Lsn>,
    /// For a backup read as a stream (tar format): `(fork, block)` of every page whose
    /// `pd_lsn` is past the start LSN, noted as the page went by, since it cannot be read
    /// again afterwards. `None`: the page is read from the file when asked.
    pub newer_pages: Option<HashSet<(usize, u64)>>,
}

/// Reads the backup's WAL (when it has it) into the set of blocks replay rewrites.
pub fn prepare(datadir: &Path, control: &ControlFile, label: BackupLabel) -> Backup {
    let manifest_wal_end = manifest_wal_end(datadir);
    let basis = match wal::collect(datadir, wal_format(control), label.start_lsn) {
        Some(set) => {
            let complete = set.decode_error.is_none()
                && (set.reaches_backup_end || manifest_wal_end.is_some_and(|e| set.end_lsn >= e));
            ReplayBasis::Wal {
                set: Box::new(set),
                complete,
            }
        }
        None => ReplayBasis::PageLsn,
    };
    Backup {
        origin: Origin::BaseBackup(label),
        basis,
        manifest_wal_end,
        newer_pages: None,
    }
}

/// What the WAL reader needs from `pg_control`.
fn wal_format(control: &ControlFile) -> wal::WalFormat {
    wal::WalFormat {
        seg_size: control.xlog_seg_size as u64,
        blcksz: control.blcksz,
        major: control.major.unwrap_or(18),
    }
}

impl Backup {
    /// Where replay starts: the backup's start LSN, or the crashed cluster's redo point.
    pub fn start_lsn(&self) -> Lsn {
        match &self.origin {
            Origin::BaseBackup(label) => label.start_lsn,
            Origin::Crash(point) => point.redo,
        }
    }

    /// Which pages agree with each other: with every record replay will apply decoded, all
    /// but those of the relations (and databases) it names.
    pub fn agreement(&self) -> Agreement {
        match &self.basis {
            ReplayBasis::Wal {
                set,
                complete: true,
            } => Agreement::AllBut(InFlux {
                relations: set
                    .relations
                    .iter()
                    .map(|r| (r.spc_oid, r.db_oid, r.rel_number))
                    .collect(),
                databases: set.databases.clone(),
            }),
            ReplayBasis::Wal { .. } => Agreement::Unknown(WAL_SHORT),
            ReplayBasis::PageLsn => Agreement::Unknown(NO_WAL),
        }
    }
}

/// Why nothing is judged across pages when the WAL does not say what replay rewrites.
const WAL_SHORT: &str =
    "the WAL present does not reach the end of what replay must apply: pages it does not name may still change";
const NO_WAL: &str = "no WAL from the start of replay: nothing says which pages replay rewrites";

fn manifest_wal_end(datadir: &Path) -> Option<Lsn> {
    let bytes = manifest::read_manifest(datadir).ok()??;
    manifest::parse_manifest(&bytes).ok()?.wal_end
}

/// The note stated with each rule.
const NOTE_WAL: &str = "pages with a block reference in the backup's WAL are rewritten by replay and were not verified; every other page was";
const NOTE_WAL_SHORT: &str = "the WAL in the backup ends before the backup's end: pages changed after it are judged by their pd_lsn, and a torn page whose first sector is old can be reported";
const NOTE_LSN: &str = "no WAL in the backup: a failing page is set aside only when its pd_lsn is past the start LSN; a page torn while copied whose first sector (holding pd_lsn) is still the old one shows an old LSN and is reported as damage, since without the WAL nothing tells it apart";

/// Takes the findings about blocks (and files) replay rewrites out of `report`, counting
/// them; recomputes the summary's counts; returns the `backup` summary and the findings set
/// aside (for `--verbose`).
pub fn set_aside(
    report: &mut VerifyReport,
    plan: &Plan,
    backup: &Backup,
) -> (ReplaySummary, Vec<Finding>) {
    let files = files_by_path(plan);
    let judge = Judge {
        plan,
        backup,
        files: &files,
        lsn_cache: Default::default(),
        reset: match backup.origin {
            Origin::Crash(_) => unlogged_relations(plan),
            Origin::BaseBackup(_) => HashSet::new(),
        },
    };
    let mut unverified: HashSet<(String, u64)> = HashSet::new();
    let mut aside = Vec::new();
    let findings = std::mem::take(&mut report.findings);
    for f in findings {
        if judge.replayed(&f) {
            if let Some(block) = f.block {
                unverified.insert((f.file.clone(), block));
            }
            aside.push(f);
        } else {
            report.findings.push(f);
        }
    }
    recount(report);
    let summary = summary_of(backup, unverified.len() as u64, aside.len() as u64);
    (summary, aside)
}

/// Decides, finding by finding, whether replay rewrites what it is about.
struct Judge<'a> {
    plan: &'a Plan,
    backup: &'a Backup,
    files: &'a HashMap<String, usize>,
    lsn_cache: std::cell::RefCell<HashMap<(usize, u64), Option<u64>>>,
    /// A crashed cluster: the unlogged relations, which recovery resets to their init fork.
    reset: HashSet<(crate::datadir::Location, u32)>,
}

impl Judge<'_> {
    fn replayed(&self, f: &Finding) -> bool {
        let Some(&file) = self.files.get(&f.file) else {
            return self.relation_replayed(f);
        };
        let rf = &self.plan.dir.files[file];
        if self.rewritten_whole(rf) {
            return true;
        }
        let rel = RelFileLocator {
            spc_oid: rf.location.tablespace_oid(),
            db_oid: rf.location.db_oid(),
            rel_number: rf.name.relfilenode,
        };
        let Some(block) = f.block else {
            return match &self.backup.basis {
                ReplayBasis::Wal { set, .. } => set.relations.contains(&rel),
                ReplayBasis::PageLsn => false,
            };
        };
        match &self.backup.basis {
            ReplayBasis::Wal { set, complete } => {
                let key = BlockRef {
                    rel,
                    fork: rf.name.fork as u8,
                    block: u32::try_from(block).unwrap_or(u32::MAX),
                };
                set.blocks.contains(&key) || (!complete && self.page_newer(file, block))
            }
            ReplayBasis::PageLsn => self.page_newer(file, block),
        }
    }

    /// A crashed cluster's files that recovery rewrites whatever the WAL says: the forks of an
    /// unlogged relation but its init fork (reset from it), and free space maps, which are
    /// written without WAL (a torn one is rebuilt, never read as damage, by the server).
    fn rewritten_whole(&self, rf: &crate::datadir::RelationFile) -> bool {
        let Origin::Crash(_) = self.backup.origin else {
            return false;
        };
        let fork = rf.name.fork;
        fork == ForkNumber::Fsm
            || (fork != ForkNumber::Init
                && self.reset.contains(&(rf.location, rf.name.relfilenode)))
    }

    /// A finding about a file that is not in the listing (a missing one, say): set aside when
    /// the WAL creates, truncates or changes blocks of its relation.
    fn relation_replayed(&self, f: &Finding) -> bool {
        let ReplayBasis::Wal { set, .. } = &self.backup.basis else {
            return false;
        };
        let (Some(db), Some(node)) = (
            f.database.as_ref().and_then(|d| d.oid),
            f.relation.as_ref().and_then(|r| r.filenode),
        ) else {
            return false;
        };
        set.relations
            .iter()
            .any(|r| r.db_oid == db && r.rel_number == node)
    }

    /// Whether the page's `pd_lsn` is past the backup's start LSN.
    fn page_newer(&self, file: usize, block: u64) -> bool {
        let fork = self.plan.fork_of_file[file];
        if let Some(newer) = &self.backup.newer_pages {
            return newer.contains(&(fork, block));
        }
        let lsn = *self
            .lsn_cache
            .borrow_mut()
            .entry((fork, block))
            .or_insert_with(|| {
                let page = self.plan.read_fork_block(fork, block)?;
                let hi = crate::format::bytes::le_u32(&page, 0)?;
                let lo = crate::format::bytes::le_u32(&page, 4)?;
                Some((u64::from(hi) << 32) | u64::from(lo))
            });
        lsn.is_some_and(|l| l > self.backup.start_lsn().0)
    }
}

/// The summary's finding and corrupt-block counts after findings were taken out.
fn recount(report: &mut VerifyReport) {
    report.summary.corrupt_blocks = corrupt_block_count(&report.findings);
    report.summary.findings = report.findings.len() as u64;
}

/// What [`set_aside`] reports: a base backup's summary or a crashed cluster's.
pub enum ReplaySummary {
    Backup(BackupSummary),
    Crash(CrashSummary),
}

fn summary_of(backup: &Backup, unverified: u64, set_aside: u64) -> ReplaySummary {
    let l = match &backup.origin {
        Origin::BaseBackup(label) => label,
        Origin::Crash(point) => {
            return ReplaySummary::Crash(crash::summary(point, backup, unverified, set_aside))
        }
    };
    let (rule, note) = match &backup.basis {
        ReplayBasis::Wal { complete: true, .. } => ("wal_block_set", NOTE_WAL),
        ReplayBasis::Wal { .. } => ("wal_block_set_and_page_lsn", NOTE_WAL_SHORT),
        ReplayBasis::PageLsn => ("page_lsn", NOTE_LSN),
    };
    let (wal_end, records, blocks) = backup.basis.wal_counts();
    ReplaySummary::Backup(BackupSummary {
        start_lsn: l.start_lsn,
        checkpoint_lsn: l.checkpoint_lsn,
        start_timeline: l.start_timeline,
        backup_from: l.backup_from.name().to_string(),
        label: l.label.clone(),
        start_time: l.start_time.clone(),
        rule: rule.to_string(),
        wal_end_lsn: wal_end,
        wal_records: records,
        wal_blocks: blocks,
        replayed_blocks_unverified: unverified,
        replayed_findings_set_aside: set_aside,
        note: note.to_string(),
        manifest: None,
    })
}

/// Adds the findings and summary of a manifest check (`check_manifest`, or a tar backup's
/// comparison of what its scan saw).
pub fn add_manifest_result(
    report: &mut VerifyReport,
    summary: &mut BackupSummary,
    (m, findings): (ManifestSummary, Vec<Finding>),
) {
    summary.manifest = Some(m);
    add_findings(report, findings);
}

/// Adds findings made outside the page checks, in the report's order, and counts them.
pub fn add_findings(report: &mut VerifyReport, findings: Vec<Finding>) {
    report.findings.extend(findings);
    report
        .findings
        .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    recount(report);
}

/// The plan's files by their path relative to the data directory.
pub fn files_by_path(plan: &Plan) -> HashMap<String, usize> {
    plan.dir
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.rel_path(), i))
        .collect()
}

/// Adds the manifest check's findings and summary (when the backup has a manifest).
pub fn check_manifest(
    datadir: &Path,
    report: &mut VerifyReport,
    summary: &mut BackupSummary,
) -> Result<(), BackupError> {
    if let Some(result) = manifest::check(datadir)? {
        add_manifest_result(report, summary, result);
    }
    Ok(())
}

#[cfg(test)]
mod error_tests {
    use super::*;

    #[test]
    fn messages_are_the_old_texts() {
        assert_eq!(
            BackupError::ReadLabel(io::Error::other("boom")).to_string(),
            "could not read \"backup_label\": boom"
        );
        let label = LabelError::Missing("START WAL LOCATION");
        assert_eq!(
            BackupError::from(label.clone()).to_string(),
            label.to_string()
        );
        assert_eq!(
            BackupError::from(ManifestError::NoFiles).to_string(),
            "no Files list"
        );
        assert_eq!(
            BackupError::from(tar::TarError::NoBase { dir: "/b".into() }).to_string(),
            "\"/b\" has no base.tar"
        );
        assert_eq!(
            BackupError::Scan("the extended level cannot read its blocks from a stream".into())
                .to_string(),
            "the extended level cannot read its blocks from a stream"
        );
    }
}
