//! What a verification produced: the findings, the tool errors and the summary (the last
//! line of the JSON output), with a section per source and level that ran.

use serde::Serialize;

use crate::check::structure::NotStructureChecked;
use crate::finding::{Finding, Severity};

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
    pub backup: Option<crate::ops::backup::BackupSummary>,
    /// `verify --online`: `online: true`, the LSNs used and the re-read counts.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub online: Option<crate::verify::online::OnlineSummary>,
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
    /// Findings of error severity.
    pub fn error_count(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }
}
