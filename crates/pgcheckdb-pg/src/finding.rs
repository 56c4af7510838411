//! Findings: what pgcheckdb reports about a cluster, one object per problem, with the
//! stable `kind` names of the JSON Lines contract (docs/OUTPUT.md, "Finding kinds").

use serde::Serialize;
use serde_json::Value;

use crate::format::relfile::ForkNumber;

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
    /// A line pointer's offset, length or flags are impossible.
    LinePointerInvalid,
    /// Two items' storage overlaps.
    LinePointerOverlap,
    /// A HOT redirect points nowhere valid.
    RedirectInvalid,
    /// A heap tuple header is inconsistent (`t_hoff`, infomask bits).
    TupleHeaderInvalid,
    /// A tuple has more attributes than its relation.
    TupleNattsInvalid,
    /// A transaction or multixact id is outside the cluster's or relation's bounds.
    XidInvalid,
    /// An attribute runs past the tuple or has a bad varlena header.
    AttributeInvalid,
    /// A TOAST pointer is malformed or points at another relation.
    ToastPointerInvalid,
    /// A B-tree page's special space, flags, level, links or metapage are wrong.
    BtreePageInvalid,
    /// A B-tree index tuple has a bad size or posting list.
    BtreeItemInvalid,
    /// A hash, GiST, GIN, SP-GiST or BRIN page does not look like one.
    IndexPageInvalid,
    /// A sequence page lacks its magic or its single tuple.
    SequencePageInvalid,
    /// A visibility-map page has an impossible format or bit pattern.
    VisibilityMapInvalid,
    /// A free-space-map page has an impossible format (warning: the server rebuilds it).
    FreeSpaceMapInvalid,
    /// Something that is not a regular file (directory, FIFO, socket, device) where a relation
    /// file is named.
    IrregularFile,
    /// A tablespace link in `pg_tblspc/` whose target is missing, loops or is not a directory.
    TablespaceMissing,
    /// A directory every data directory has (`pg_tblspc`, `pg_xact`, ...) is missing.
    MissingDirectory,
    /// A file named like a relation segment whose blocks would lie past `MaxBlockNumber`: no
    /// relation can have it, the server never reads it.
    ImpossibleSegment,
    /// A relation with storage in `pg_class` whose main fork (or unlogged `_init` fork) file is
    /// missing.
    MissingFile,
    /// A heap page's update chain is broken: a line pointer reached twice, HOT flags that
    /// disagree along a chain, contradicting commit status, a lost or rootless heap-only tuple.
    HotChainInvalid,
    /// B-tree keys out of the order of the index's operator classes and collations: within a
    /// page, against the page's high key (standard level), or across pages (extended level).
    BtreeOrderInvalid,
    /// B-tree sibling links disagree, a level is not one chain, or a link or the metapage's
    /// root points at a page that is not what it must be (extended level).
    BtreeLinkInvalid,
    /// A B-tree downlink is missing, duplicated, points at the wrong child or at a page not in
    /// use; a half-dead page's top parent link breaks the deletion rules (extended level).
    BtreeDownlinkInvalid,
    /// A B-tree page's level differs from its parent's minus one or the metapage's (extended).
    BtreeLevelInvalid,
    /// A unique B-tree index holds equal keys for two live heap tuples (extended level).
    BtreeUniqueViolation,
    /// A live heap tuple has no entry in one of its table's B-tree indexes.
    IndexEntryMissing,
    /// A B-tree index holds an entry that names a live heap tuple but holds a key the tuple
    /// does not have, besides the tuple's own entry (extended).
    IndexEntryExtra,
    /// An index entry's heap TID names nothing an index may name: past the table's end or
    /// the page's line pointers, an unused line pointer or a heap-only tuple (extended).
    IndexTidInvalid,
    /// A heap page is all zero or past the table's end while other evidence (`detail.evidence`:
    /// index entries) says it held tuples: a write that never reached the disk (extended).
    LostWrite,
    /// A live row's TOAST value is missing chunks, has duplicate live chunks, chunks of the
    /// wrong size or beyond its last chunk (extended level).
    ToastValueInvalid,
    /// TOAST chunks that no live row points at, counted once per TOAST relation (info:
    /// deleted values keep their chunks until VACUUM) (extended level).
    ToastChunksUnreferenced,
    /// The visibility map marks a heap page all-visible or all-frozen that is not: a tuple not
    /// visible to everyone or not frozen, `PD_ALL_VISIBLE` clear, or the heap page all zero or
    /// past the end of the table (a lost write) (extended level).
    VisibilityMapWrong,
    /// A tuple's commit hint bit contradicts `pg_xact`: committed while the transaction
    /// aborted, or invalid while it committed (extended level).
    HintBitInvalid,
    /// A base backup's file differs from `backup_manifest`: size or CRC-32C checksum.
    BackupManifestMismatch,
    /// A file `backup_manifest` lists is missing from the backup (or cannot be opened).
    BackupFileMissing,
    /// A file in the backup that `backup_manifest` does not list.
    BackupFileUnexpected,
    /// `backup_manifest` cannot be parsed or its own checksum does not match its text.
    BackupManifestInvalid,
    /// A tar-format backup's member that the checks need is larger than PostgreSQL ever makes
    /// a file of its kind (a `pg_xact` segment of gigabytes): not unpacked.
    BackupFileOversized,
    /// `verify --online` with a connection: a page's `pd_lsn` is beyond the end of the WAL the
    /// server has written (a standby: received or replayed), re-read after the end was asked.
    PageLsnInFuture,
    /// Extended level: the pages of a hash, GiST, SP-GiST, GIN or BRIN index do not link up
    /// the way the access method builds them (a chain, a child page or a range map entry
    /// that points at the wrong page, a page no path reaches, ...).
    IndexGraphInvalid,
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
            FindingKind::LinePointerInvalid => "line_pointer_invalid",
            FindingKind::LinePointerOverlap => "line_pointer_overlap",
            FindingKind::RedirectInvalid => "redirect_invalid",
            FindingKind::TupleHeaderInvalid => "tuple_header_invalid",
            FindingKind::TupleNattsInvalid => "tuple_natts_invalid",
            FindingKind::XidInvalid => "xid_invalid",
            FindingKind::AttributeInvalid => "attribute_invalid",
            FindingKind::ToastPointerInvalid => "toast_pointer_invalid",
            FindingKind::BtreePageInvalid => "btree_page_invalid",
            FindingKind::BtreeItemInvalid => "btree_item_invalid",
            FindingKind::IndexPageInvalid => "index_page_invalid",
            FindingKind::SequencePageInvalid => "sequence_page_invalid",
            FindingKind::VisibilityMapInvalid => "visibility_map_invalid",
            FindingKind::FreeSpaceMapInvalid => "free_space_map_invalid",
            FindingKind::IrregularFile => "irregular_file",
            FindingKind::TablespaceMissing => "tablespace_missing",
            FindingKind::MissingDirectory => "missing_directory",
            FindingKind::ImpossibleSegment => "impossible_segment",
            FindingKind::MissingFile => "missing_file",
            FindingKind::HotChainInvalid => "hot_chain_invalid",
            FindingKind::BtreeOrderInvalid => "btree_order_invalid",
            FindingKind::BtreeLinkInvalid => "btree_link_invalid",
            FindingKind::BtreeDownlinkInvalid => "btree_downlink_invalid",
            FindingKind::BtreeLevelInvalid => "btree_level_invalid",
            FindingKind::BtreeUniqueViolation => "btree_unique_violation",
            FindingKind::IndexEntryMissing => "index_entry_missing",
            FindingKind::IndexEntryExtra => "index_entry_extra",
            FindingKind::IndexTidInvalid => "index_tid_invalid",
            FindingKind::LostWrite => "lost_write",
            FindingKind::ToastValueInvalid => "toast_value_invalid",
            FindingKind::ToastChunksUnreferenced => "toast_chunks_unreferenced",
            FindingKind::VisibilityMapWrong => "visibility_map_wrong",
            FindingKind::HintBitInvalid => "hint_bit_invalid",
            FindingKind::BackupManifestMismatch => "backup_manifest_mismatch",
            FindingKind::BackupFileMissing => "backup_file_missing",
            FindingKind::BackupFileUnexpected => "backup_file_unexpected",
            FindingKind::BackupManifestInvalid => "backup_manifest_invalid",
            FindingKind::BackupFileOversized => "backup_file_oversized",
            FindingKind::PageLsnInFuture => "page_lsn_in_future",
            FindingKind::IndexGraphInvalid => "index_graph_invalid",
        }
    }

    /// Every kind, for documentation tables and tests.
    pub const ALL: &'static [FindingKind] = &[
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
        FindingKind::LinePointerInvalid,
        FindingKind::LinePointerOverlap,
        FindingKind::RedirectInvalid,
        FindingKind::TupleHeaderInvalid,
        FindingKind::TupleNattsInvalid,
        FindingKind::XidInvalid,
        FindingKind::AttributeInvalid,
        FindingKind::ToastPointerInvalid,
        FindingKind::BtreePageInvalid,
        FindingKind::BtreeItemInvalid,
        FindingKind::IndexPageInvalid,
        FindingKind::SequencePageInvalid,
        FindingKind::VisibilityMapInvalid,
        FindingKind::FreeSpaceMapInvalid,
        FindingKind::IrregularFile,
        FindingKind::TablespaceMissing,
        FindingKind::MissingDirectory,
        FindingKind::ImpossibleSegment,
        FindingKind::MissingFile,
        FindingKind::HotChainInvalid,
        FindingKind::BtreeOrderInvalid,
        FindingKind::BtreeLinkInvalid,
        FindingKind::BtreeDownlinkInvalid,
        FindingKind::BtreeLevelInvalid,
        FindingKind::BtreeUniqueViolation,
        FindingKind::IndexEntryMissing,
        FindingKind::IndexEntryExtra,
        FindingKind::IndexTidInvalid,
        FindingKind::LostWrite,
        FindingKind::ToastValueInvalid,
        FindingKind::ToastChunksUnreferenced,
        FindingKind::VisibilityMapWrong,
        FindingKind::HintBitInvalid,
        FindingKind::BackupManifestMismatch,
        FindingKind::BackupFileMissing,
        FindingKind::BackupFileUnexpected,
        FindingKind::BackupManifestInvalid,
        FindingKind::BackupFileOversized,
        FindingKind::PageLsnInFuture,
        FindingKind::IndexGraphInvalid,
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
    /// Line pointer (1-based offset number) inside the page, where it applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u16>,
    /// Attribute number (1-based), where it applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attnum: Option<u16>,
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
            offset: None,
            attnum: None,
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
    pub fn sort_key(&self) -> (&str, u64, u16, u16, FindingKind) {
        (
            &self.file,
            self.block.unwrap_or(0),
            self.offset.unwrap_or(0),
            self.attnum.unwrap_or(0),
            self.kind,
        )
    }
}
