//! The standard level: the structure inside each page, checked against what the offline catalog
//! says the relation is — heap line pointers, tuple headers and attributes; B-tree special
//! space, metapage and items; the page formats of the other index access methods; sequences;
//! visibility-map and free-space-map pages.
//!
//! Every check runs on one page image that already passed the physical checks, reads only
//! within the page, and reports problems instead of failing.

mod attrs;
pub(crate) use attrs::attribute_span;
pub mod bounds;
pub mod btree;
pub mod btree_keys;
pub mod heap;
pub mod hot;
pub mod index;
pub mod index_meta;
pub mod items;
pub mod maps;
pub mod wal;
pub mod xids;

use std::sync::Arc;

use serde_json::Value;

use crate::catalog::attributes::Attribute;
use crate::catalog::xact::CommitLog;
use crate::catalog::{RelKind, RelationInfo};
use crate::finding::{FindingKind, Severity};
use crate::format::oids::am_oid;
use crate::format::relfile::ForkNumber;

/// What the catalog says about a heap relation, for tuple checks.
#[derive(Debug, Clone)]
pub struct HeapRelation {
    pub relnatts: i16,
    pub attributes: Option<Arc<[Attribute]>>,
    pub reltoastrelid: u32,
    pub relfrozenxid: u32,
    pub relminmxid: u32,
}

/// Which page format a file must hold.
#[derive(Debug, Clone)]
pub enum PageFormat {
    Heap(HeapRelation),
    Sequence(HeapRelation),
    Btree,
    Hash,
    Gist,
    Gin,
    SpGist,
    Brin,
    VisibilityMap,
    FreeSpaceMap,
}

impl PageFormat {
    /// The format of one fork of a catalogued relation; `None` when pgcheckdb has no structure
    /// checks for it (other table access methods, unknown index AMs).
    pub fn for_relation(rel: &RelationInfo, fork: ForkNumber) -> Option<PageFormat> {
        match fork {
            ForkNumber::Vm => return Some(PageFormat::VisibilityMap),
            ForkNumber::Fsm => return Some(PageFormat::FreeSpaceMap),
            ForkNumber::Main | ForkNumber::Init => {}
        }
        let heap = || HeapRelation {
            relnatts: rel.relnatts,
            attributes: rel.attributes.clone(),
            reltoastrelid: rel.reltoastrelid,
            relfrozenxid: rel.relfrozenxid,
            relminmxid: rel.relminmxid,
        };
        match (rel.kind, rel.relam) {
            (RelKind::Sequence, _) => Some(PageFormat::Sequence(heap())),
            (RelKind::Table | RelKind::Toast | RelKind::MaterializedView, am_oid::HEAP) => {
                Some(PageFormat::Heap(heap()))
            }
            (RelKind::Index, am_oid::BTREE) => Some(PageFormat::Btree),
            (RelKind::Index, am_oid::HASH) => Some(PageFormat::Hash),
            (RelKind::Index, am_oid::GIST) => Some(PageFormat::Gist),
            (RelKind::Index, am_oid::GIN) => Some(PageFormat::Gin),
            (RelKind::Index, am_oid::SPGIST) => Some(PageFormat::SpGist),
            (RelKind::Index, am_oid::BRIN) => Some(PageFormat::Brin),
            _ => None,
        }
    }
}

/// Per-file context of the structure checks.
#[derive(Debug, Clone)]
pub struct FileStructure {
    pub format: PageFormat,
    /// Blocks in the whole fork (for links and `t_ctid`).
    pub fork_blocks: u64,
    /// For a B-tree index whose keys have comparators: how they are ordered.
    pub btree_order: Option<crate::check::order::plan::BtreeOrderCheck>,
}

/// Cluster-wide facts the checks compare against (built by `bounds::cluster_facts`).
#[derive(Debug, Clone, Copy)]
pub struct ClusterFacts {
    pub blcksz: usize,
    pub max_align: usize,
    /// The first transaction id the files cannot hold (low 32 bits): `nextXid` of a cleanly
    /// shut-down primary, else the newest id the WAL and `pg_xact` show (see `bounds`).
    pub next_xid: u32,
    /// The same for multixact ids.
    pub next_multi: u32,
    /// `checkPointCopy.oldestXid`: older xids have been frozen away.
    pub oldest_xid: u32,
    /// `checkPointCopy.oldestMulti`.
    pub oldest_multi: u32,
    /// True when `pg_xact` is exact (clean shutdown): an xid it shows in progress is really
    /// in progress (a prepared transaction) or was never committed. Otherwise commit bits may
    /// not have reached disk yet, and "in progress" proves nothing.
    pub clog_exact: bool,
    /// Error for a cleanly shut-down primary, warning otherwise (the bounds then come from
    /// files that may lag behind the data pages).
    pub xid_severity: Severity,
}

/// One structural problem in a page.
#[derive(Debug, Clone, PartialEq)]
pub struct StructureProblem {
    pub kind: FindingKind,
    pub severity: Severity,
    /// Line pointer (1-based).
    pub offset: Option<u16>,
    /// Attribute (1-based).
    pub attnum: Option<u16>,
    pub message: String,
    pub detail: Value,
}

impl StructureProblem {
    /// An error-severity problem.
    pub fn error(kind: FindingKind, message: String) -> StructureProblem {
        StructureProblem {
            kind,
            severity: Severity::Error,
            offset: None,
            attnum: None,
            message,
            detail: Value::Object(Default::default()),
        }
    }

    pub fn at(mut self, offset: u16) -> StructureProblem {
        self.offset = Some(offset);
        self
    }

    pub fn attr(mut self, attnum: usize) -> StructureProblem {
        self.attnum = Some(attnum as u16);
        self
    }

    pub fn severity(mut self, severity: Severity) -> StructureProblem {
        self.severity = severity;
        self
    }

    pub fn detail(mut self, detail: Value) -> StructureProblem {
        self.detail = detail;
        self
    }
}

/// Runs the structure checks of `file` on one page at absolute block `blkno`.
pub fn check_page_structure(
    page: &[u8],
    blkno: u64,
    inputs: &Inputs<'_>,
    scratch: &mut Scratch,
    out: &mut Vec<StructureProblem>,
) {
    // Emptied first: after the checks it holds this page's line pointers or nothing (the
    // extended level reuses them, see `Scratch::items`).
    scratch.items.clear();
    let Some(header) = crate::format::page::PageHeader::parse(page) else {
        return;
    };
    let (file, facts) = (inputs.file, inputs.facts);
    match &file.format {
        PageFormat::Heap(rel) => {
            heap::check_heap_page(page, &header, blkno, rel, inputs, scratch, out)
        }
        PageFormat::Sequence(rel) => {
            heap::check_sequence_page(page, &header, facts, out);
            heap::check_heap_page(page, &header, blkno, rel, inputs, scratch, out);
        }
        PageFormat::Btree => btree::check_btree_page(page, &header, blkno, inputs, scratch, out),
        PageFormat::VisibilityMap => maps::check_vm_page(page, &header, facts, out),
        PageFormat::FreeSpaceMap => maps::check_fsm_page(page, &header, facts, out),
        other => index::check_index_page(page, &header, blkno, other, inputs, scratch, out),
    }
}

/// What the checks of one page read besides the page: the file's context, the cluster's
/// facts and the commit log.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub file: &'a FileStructure,
    pub facts: &'a ClusterFacts,
    pub clog: &'a CommitLog,
}

/// Buffers one worker reuses from page to page, so the checks allocate nothing per page.
#[derive(Debug, Default)]
pub struct Scratch {
    /// The line pointers of the page just checked, when its checks parsed them (heap and
    /// B-tree pages); empty otherwise.
    pub items: Vec<crate::format::itemid::ItemId>,
    /// Item storage ranges `((start, end), offnum)` for the overlap check.
    pub storage: Vec<((usize, usize), u16)>,
    /// Per line pointer of a heap page, for the update-chain checks.
    pub chain: Vec<hot::ChainSlot>,
}

/// True if `off` is a multiple of the power of two `align`.
#[inline]
pub fn is_aligned(off: usize, align: usize) -> bool {
    off & (align.max(1) - 1) == 0
}

/// `MAXALIGN`.
pub fn max_align(len: usize, max_align: usize) -> usize {
    crate::format::bytes::align_up(len, max_align)
}
