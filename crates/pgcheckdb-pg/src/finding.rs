//! Findings: what pgcheckdb reports about a cluster, one object per problem, with the
//! stable `kind` names of the JSON Lines contract (DESIGN.md §3).

use serde::Serialize;
use serde_json::Value;

use crate::relfile::ForkNumber;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Corruption: the server would fail or silently lose data.
    Error,
    /// Suspicious, not proven.
    Warning,
    /// Worth knowing; not damage.
    Info,
}

/// The stable finding kinds. Names are part of the output contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Header sane, stored checksum differs from the calculated one.
    ChecksumMismatch,
    /// The stored checksum is right for another block number of the same fork.
    MisplacedPage,
    /// Header sane, page zero from a sector boundary to the end where data should be.
    TornPage,
    /// The page header breaks a rule the server checks on read.
    InvalidHeader,
    /// The header passes the server's checks but breaks a rule PostgreSQL never breaks.
    SuspiciousHeader,
    /// `pd_upper == 0` but the page is not all zero.
    NonzeroNewPage,
    /// File size is not a multiple of the block size; the server ignores the tail.
    PartialBlock,
    /// A missing or short middle segment hides the data of later segments.
    SegmentGap,
    /// A segment longer than `relseg_size` blocks.
    SegmentTooBig,
    /// The operating system could not read (part of) a file.
    ReadError,
    /// All-zero pages followed by non-zero pages in the same fork (a lost write looks like this).
    InteriorZeroPages,
    /// A file in a relation directory that is not a relation file.
    UnexpectedFile,
    /// A tablespace version directory of another PostgreSQL version.
    ForeignVersionDirectory,
    /// A non-empty relation file that no catalog row owns (left behind by a crash).
    OrphanFile,
    /// A system catalog could not be read (fully); findings may be unnamed.
    CatalogUnreadable,
    /// A relation map file (`pg_filenode.map`) has a wrong size, magic or CRC.
    BadRelmap,
}

impl FindingKind {
    /// The snake_case name used in output.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::ChecksumMismatch => "checksum_mismatch",
            FindingKind::MisplacedPage => "misplaced_page",
            FindingKind::TornPage => "torn_page",
            FindingKind::InvalidHeader => "invalid_header",
            FindingKind::SuspiciousHeader => "suspicious_header",
            FindingKind::NonzeroNewPage => "nonzero_new_page",
            FindingKind::PartialBlock => "partial_block",
            FindingKind::SegmentGap => "segment_gap",
            FindingKind::SegmentTooBig => "segment_too_big",
            FindingKind::ReadError => "read_error",
            FindingKind::InteriorZeroPages => "interior_zero_pages",
            FindingKind::UnexpectedFile => "unexpected_file",
            FindingKind::ForeignVersionDirectory => "foreign_version_directory",
            FindingKind::OrphanFile => "orphan_file",
            FindingKind::CatalogUnreadable => "catalog_unreadable",
            FindingKind::BadRelmap => "bad_relmap",
        }
    }

    /// Every kind, for documentation tables and tests.
    pub const ALL: [FindingKind; 16] = [
        FindingKind::ChecksumMismatch,
        FindingKind::MisplacedPage,
        FindingKind::TornPage,
        FindingKind::InvalidHeader,
        FindingKind::SuspiciousHeader,
        FindingKind::NonzeroNewPage,
        FindingKind::PartialBlock,
        FindingKind::SegmentGap,
        FindingKind::SegmentTooBig,
        FindingKind::ReadError,
        FindingKind::InteriorZeroPages,
        FindingKind::UnexpectedFile,
        FindingKind::ForeignVersionDirectory,
        FindingKind::OrphanFile,
        FindingKind::CatalogUnreadable,
        FindingKind::BadRelmap,
    ];
}

/// The database a finding belongs to; fields are `null` when not known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DatabaseRef {
    pub oid: Option<u32>,
    pub name: Option<String>,
}

/// The relation a finding belongs to; fields are `null` when not known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RelationRef {
    pub filenode: Option<u32>,
    pub oid: Option<u32>,
    pub name: Option<String>,
    pub kind: Option<String>,
}

/// One problem found in the cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    /// Path relative to the data directory (`base/5/16384.1`, `pg_tblspc/16390/PG_15_.../5/16391`).
    pub file: String,
    pub fork: Option<ForkNumber>,
    pub segment: Option<u32>,
    /// Absolute block number in the fork (segment × blocks per segment + block in file).
    pub block: Option<u64>,
    pub database: Option<DatabaseRef>,
    pub relation: Option<RelationRef>,
    pub detail: Value,
    pub message: String,
}

impl Finding {
    /// A finding about a file as a whole (no block).
    pub fn for_file(kind: FindingKind, severity: Severity, file: &str, message: String) -> Finding {
        Finding {
            kind,
            severity,
            file: file.to_string(),
            fork: None,
            segment: None,
            block: None,
            database: None,
            relation: None,
            detail: Value::Object(Default::default()),
            message,
        }
    }

    /// Sets `segment`.
    pub fn at_segment(mut self, segno: u32) -> Finding {
        self.segment = Some(segno);
        self
    }

    /// Sets `detail`.
    pub fn with_detail(mut self, detail: Value) -> Finding {
        self.detail = detail;
        self
    }

    /// Ordering key that makes output independent of the thread count.
    pub fn sort_key(&self) -> (&str, u64, FindingKind) {
        (&self.file, self.block.unwrap_or(0), self.kind)
    }
}
