//! What a verification produced: the findings, the tool errors and the summary (the last
//! line of the JSON output), with a section per source and level that ran.

use serde::Serialize;

use crate::check::extended::merge::MergeOutcome;
use crate::check::structure::NotStructureChecked;
use crate::finding::{Finding, FindingKind, Severity};
use crate::format::lsn::Lsn;

/// The run's totals: the last line of the JSON output.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub level: String,
    pub postgres_version: Option<u32>,
    pub checksums: String,
    pub block_size: u32,
    pub segment_blocks: u32,
    pub files: u64,
    pub blocks: u64,
    pub bytes: u64,
    pub new_pages: u64,
    pub interior_zero_pages: u64,
    pub skipped_blocks: u64,
    pub skipped_files: u64,
    pub corrupt_blocks: u64,
    pub findings: u64,
    /// B-tree indexes whose keys could not be order-checked (standard level and above): no
    /// comparator for a key column's type, operator class or collation. Absent at the
    /// physical level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_not_order_checked: Option<u64>,
    /// Relations with storage in scope that got the physical checks only, because pgcheckdb
    /// knows no page format for their access method (standard level and above). Absent at
    /// the physical level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relations_not_structure_checked: Option<u64>,
    /// Those relations, each with the reason; absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_structure_checked: Option<Vec<NotStructureChecked>>,
    pub seconds: f64,
    /// When the run started and finished (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Why the run is incomplete or did not happen (exit 1 or interrupted): the first tool
    /// error, a refusal, or the signal that stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The extended level's facts and merge (only at that level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extended: Option<crate::check::extended::ExtendedSummary>,
    /// A base backup: its start, the rule for pages replay rewrites and the manifest check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSummary>,
    /// A cluster that was not shut down: where crash recovery starts and what it rewrites.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_recovery: Option<CrashSummary>,
    /// `verify --online`: `online: true`, the LSNs used and the re-read counts.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub online: Option<crate::verify::online::OnlineSummary>,
    /// `verify --ledger`: what recording the run in the damage ledger changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerCounts>,
}

/// The damage ledger after a run was recorded (docs/LEDGER.md): entries found for the first
/// time, entries open (still damaged, the new ones included), entries repaired by this run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LedgerCounts {
    pub new: u64,
    pub open: u64,
    pub repaired: u64,
}

/// The blocks with at least one error finding, each counted once (a partial block at a file's
/// end is no corrupt page): the summary's `corrupt_blocks`.
pub fn corrupt_block_count(findings: &[Finding]) -> u64 {
    let mut corrupt: Vec<(&str, u64)> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error && f.block.is_some())
        .filter(|f| f.kind != FindingKind::PartialBlock)
        .map(|f| (f.file.as_str(), f.block.unwrap_or(0)))
        .collect();
    corrupt.sort_unstable();
    corrupt.dedup();
    corrupt.len() as u64
}

/// Everything a verification produced.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Sorted by file, block and kind: the same for any thread count.
    pub findings: Vec<Finding>,
    pub summary: Summary,
    /// Problems on pgcheckdb's side (permission denied, unlistable directory): the run is incomplete.
    pub tool_errors: Vec<String>,
    /// Pages and tuples per file of the plan ([`crate::verify::relstats`]).
    pub file_tallies: Vec<crate::verify::relstats::FileTally>,
    /// `verify --online`: what the scan noted for the re-reads ([`crate::verify::online`]).
    pub online_notes: Option<crate::verify::online::ScanNotes>,
}

impl VerifyReport {
    /// Adds what the extended level's merge found: its findings among the scan's (sorted
    /// again), its errors, the corrupt-block and finding counts recomputed, its summary.
    pub fn add_extended(&mut self, outcome: MergeOutcome) {
        self.findings.extend(outcome.findings);
        self.findings
            .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        self.tool_errors.extend(outcome.tool_errors);
        self.summary.corrupt_blocks = corrupt_block_count(&self.findings);
        self.summary.findings = self.findings.len() as u64;
        self.summary.extended = Some(outcome.summary);
    }

    /// The summary's `error`: the first tool error, with how many more there are.
    pub fn error_line(&self) -> Option<String> {
        self.tool_errors
            .first()
            .map(|first| match self.tool_errors.len() {
                1 => first.clone(),
                n => format!("{first} (and {} more error(s))", n - 1),
            })
    }

    /// Findings of error severity.
    pub fn error_count(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }
}

/// The summary's `backup` object.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BackupSummary {
    pub start_lsn: Lsn,
    pub checkpoint_lsn: Lsn,
    pub start_timeline: u32,
    pub backup_from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// `wal_block_set`, `wal_block_set_and_page_lsn` (the WAL ends before the backup does) or
    /// `page_lsn` (no WAL in the backup).
    pub rule: String,
    /// The end of the valid WAL read from the start LSN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal_end_lsn: Option<Lsn>,
    pub wal_records: u64,
    /// Distinct blocks with a block reference in that WAL.
    pub wal_blocks: u64,
    /// Blocks that failed a check but that replay rewrites: counted, not reported.
    pub replayed_blocks_unverified: u64,
    /// The findings about them (and about files replay creates or truncates), not reported.
    pub replayed_findings_set_aside: u64,
    /// What the rule cannot prove, in words.
    pub note: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<ManifestSummary>,
}

impl BackupSummary {
    /// The one line of the text format.
    pub fn text_line(&self) -> String {
        let wal = match &self.wal_end_lsn {
            Some(end) => format!(
                "WAL {} to {end} read ({} records, {} blocks)",
                self.start_lsn, self.wal_records, self.wal_blocks
            ),
            None => "no WAL in the backup".to_string(),
        };
        let manifest = match &self.manifest {
            Some(m) => format!(
                "; backup_manifest: {} files, {} checksums verified, {} mismatched, {} missing, {} unexpected",
                m.files, m.checksums_verified, m.mismatched, m.missing, m.unexpected
            ),
            None => "; no backup_manifest".to_string(),
        };
        format!(
            "base backup from {} (start LSN {}, timeline {}); {wal}; rule {}: {} failing block(s) rewritten by replay not verified{manifest}",
            self.backup_from,
            self.start_lsn,
            self.start_timeline,
            self.rule,
            self.replayed_blocks_unverified
        )
    }
}

/// The summary's `crash_recovery` object: a cluster that was not shut down, checked as crash
/// recovery will find it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CrashSummary {
    /// A running standby whose replay the run paused (`--pause-replay`), not a crash.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paused_standby: bool,
    /// `pg_control`'s state (`in production`, `in crash recovery`, ...).
    pub state: String,
    /// The redo point of the last checkpoint: recovery replays the WAL from here.
    pub redo_lsn: Lsn,
    pub checkpoint_lsn: Lsn,
    /// `wal_block_set` (the WAL was read to its end), or `page_lsn` (it was not: only pages
    /// newer than the redo point are set aside, and nothing is judged across pages).
    pub rule: String,
    /// The end of the valid WAL read from the redo point: where recovery would stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal_end_lsn: Option<Lsn>,
    pub wal_records: u64,
    /// Distinct blocks with a block reference in that WAL.
    pub wal_blocks: u64,
    /// Relations (and databases) that WAL names: their cross-page facts are not judged.
    pub wal_relations: u64,
    /// Blocks that failed a check but that recovery rewrites: counted, not reported.
    pub replayed_blocks_unverified: u64,
    /// The findings about them, not reported (`--verbose` prints them).
    pub replayed_findings_set_aside: u64,
    /// What the rule cannot prove, in words.
    pub note: String,
}

impl CrashSummary {
    /// The one line of the text format.
    pub fn text_line(&self) -> String {
        let wal = match &self.wal_end_lsn {
            Some(end) => format!(
                "WAL {} to {end} read ({} records, {} blocks, {} relations)",
                self.redo_lsn, self.wal_records, self.wal_blocks, self.wal_relations
            ),
            None => "no WAL from the redo point in pg_wal".to_string(),
        };
        let what = match self.paused_standby {
            true => "standby with replay paused, checked as its files stand".to_string(),
            false => format!(
                "cluster not shut down (pg_control: {}), checked as crash recovery will find it",
                self.state
            ),
        };
        format!(
            "{what}: redo point {}; {wal}; rule {}: {} failing block(s) rewritten by recovery not verified",
            self.redo_lsn, self.rule, self.replayed_blocks_unverified
        )
    }
}

/// What the manifest check did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ManifestSummary {
    pub version: u64,
    /// Files the manifest lists.
    pub files: u64,
    /// Files whose size and checksum were compared.
    pub checksums_verified: u64,
    /// Files listed without a checksum (`NONE`): size only.
    pub size_only: u64,
    /// Files whose checksum could not be verified (always 0 now that every algorithm is
    /// computed; kept for the output's stability).
    pub checksums_not_verified: u64,
    pub mismatched: u64,
    pub missing: u64,
    pub unexpected: u64,
    pub manifest_checksum_ok: bool,
}
