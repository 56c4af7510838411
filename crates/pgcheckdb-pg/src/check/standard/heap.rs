//! Heap pages: line pointers (bounds, alignment, overlap, redirects), tuple headers (`t_hoff`,
//! `natts`, illegal infomask combinations, `t_ctid`, xids against the cluster's bounds and
//! `relfrozenxid`); then the attribute walk (`attrs.rs`) and the update chains (`hot.rs`).

use serde_json::json;

use super::xids::{self, in_future, precedes};
use super::{
    hot, is_aligned, items, max_align, ClusterFacts, HeapRelation, Inputs, Scratch,
    StructureProblem,
};
use crate::catalog::xact::{CommitLog, XidStatus};
use crate::finding::{FindingKind as K, Severity};
use crate::format::bytes::le_u32;
use crate::format::heap::{
    infomask as im, infomask2 as im2, HeapTupleHeader, MOVED_PARTITIONS_OFFSET,
    SIZEOF_HEAP_TUPLE_HEADER, SPEC_TOKEN_OFFSET,
};
use crate::format::itemid::{line_pointers_into, max_offset_number, ItemId, LpFlags};
use crate::format::page::{PageHeader, INVALID_BLOCK_NUMBER, SIZE_OF_PAGE_HEADER_DATA};
use crate::format::special::SEQ_MAGIC;

/// `MaxHeapTuplesPerPage` for this block size.
fn max_heap_tuples_per_page(facts: &ClusterFacts) -> usize {
    (facts.blcksz - SIZE_OF_PAGE_HEADER_DATA)
        / (max_align(SIZEOF_HEAP_TUPLE_HEADER, facts.max_align) + 4)
}

/// All checks of one heap page.
pub fn check_heap_page(
    page: &[u8],
    h: &PageHeader,
    blkno: u64,
    rel: &HeapRelation,
    inputs: &Inputs<'_>,
    scratch: &mut Scratch,
    out: &mut Vec<StructureProblem>,
) {
    let (facts, clog, fork_blocks) = (inputs.facts, inputs.clog, inputs.file.fork_blocks);
    let Scratch {
        items,
        storage,
        chain,
    } = scratch;
    line_pointers_into(page, h, items);
    storage.clear();
    if !page_level_ok(h, items, facts, out) {
        return;
    }
    for item in items.iter() {
        match item.lp_flags {
            LpFlags::Unused => items::check_unused(item, out),
            LpFlags::Redirect => check_redirect(page, h, item, items, facts, out),
            LpFlags::Dead if item.lp_len == 0 => {}
            LpFlags::Normal | LpFlags::Dead => {
                let min_len = max_align(SIZEOF_HEAP_TUPLE_HEADER, facts.max_align);
                if let Some(range) = items::check_item_bounds(h, item, min_len, facts, out) {
                    storage.push((range, item.offnum));
                    // Bounds checked just above: the storage is on the page.
                    if let (LpFlags::Normal, Some(tuple)) = (item.lp_flags, item.storage(page)) {
                        TupleCheck {
                            tuple,
                            offnum: item.offnum,
                            rel,
                            fork_blocks,
                            facts,
                            clog,
                            out,
                        }
                        .run();
                    }
                }
            }
        }
    }
    items::check_overlap(storage, out);
    let chain_page = hot::HeapPage {
        page,
        header: h,
        items,
        blkno,
    };
    hot::check_chains(&chain_page, rel, inputs, chain, out);
}

/// `pd_lower` must end the line-pointer array and the array must be of legal size.
fn page_level_ok(
    h: &PageHeader,
    items: &[ItemId],
    facts: &ClusterFacts,
    out: &mut Vec<StructureProblem>,
) -> bool {
    let lower = h.pd_lower as usize;
    if lower < SIZE_OF_PAGE_HEADER_DATA || !(lower - SIZE_OF_PAGE_HEADER_DATA).is_multiple_of(4) {
        out.push(StructureProblem::error(
            K::LinePointerInvalid,
            format!("pd_lower {lower} does not end a line pointer array"),
        ));
        return false;
    }
    let limit = max_heap_tuples_per_page(facts);
    if items.len() > limit {
        out.push(StructureProblem::error(
            K::LinePointerInvalid,
            format!(
                "{} line pointers, more than MaxHeapTuplesPerPage {limit}",
                items.len()
            ),
        ));
        return false;
    }
    true
}

fn check_redirect(
    page: &[u8],
    h: &PageHeader,
    item: &ItemId,
    items: &[ItemId],
    facts: &ClusterFacts,
    out: &mut Vec<StructureProblem>,
) {
    let target = item.lp_off as usize;
    let problem = if target < 1 || target > items.len() {
        Some(format!(
            "redirect to offset {target} outside 1..{}",
            items.len()
        ))
    } else {
        let t = &items[target - 1];
        match t.lp_flags {
            LpFlags::Unused => Some(format!("redirect to unused line pointer {target}")),
            LpFlags::Dead => Some(format!("redirect to dead line pointer {target}")),
            LpFlags::Redirect => Some(format!("redirect to another redirect at {target}")),
            LpFlags::Normal => redirect_target_problem(page, h, t, facts),
        }
    };
    if let Some(message) = problem {
        out.push(
            StructureProblem::error(K::RedirectInvalid, message)
                .at(item.offnum)
                .detail(json!({"target": target})),
        );
    }
}

/// A redirect must lead to a heap-only tuple.
fn redirect_target_problem(
    page: &[u8],
    h: &PageHeader,
    t: &ItemId,
    facts: &ClusterFacts,
) -> Option<String> {
    let (start, end) = (t.lp_off as usize, t.lp_off as usize + t.lp_len as usize);
    if start < h.pd_upper as usize
        || end > h.pd_special as usize
        || !is_aligned(start, facts.max_align)
    {
        return None; // reported at the target itself
    }
    let target = HeapTupleHeader::parse(t.storage(page)?)?;
    (target.t_infomask2 & im2::HEAP_ONLY_TUPLE == 0).then(|| {
        format!(
            "redirect to offset {} which is not a heap-only tuple",
            t.offnum
        )
    })
}

/// The checks of one `LP_NORMAL` heap tuple (the attribute walk is in `attrs.rs`).
pub(super) struct TupleCheck<'a> {
    pub(super) tuple: &'a [u8],
    pub(super) offnum: u16,
    pub(super) rel: &'a HeapRelation,
    pub(super) fork_blocks: u64,
    pub(super) facts: &'a ClusterFacts,
    pub(super) clog: &'a CommitLog,
    pub(super) out: &'a mut Vec<StructureProblem>,
}

impl TupleCheck<'_> {
    fn push(&mut self, kind: K, message: String) {
        self.out
            .push(StructureProblem::error(kind, message).at(self.offnum));
    }

    fn run(mut self) {
        let Some(h) = HeapTupleHeader::parse(self.tuple) else {
            return;
        };
        if !self.header_ok(&h) {
            return;
        }
        let committed = self.xmin_committed(&h);
        self.check_xids(&h, committed);
        if !committed {
            return; // an aborted or unknown inserter's tuple may follow another layout
        }
        let natts = h.natts() as usize;
        if self.rel.relnatts > 0 && natts > self.rel.relnatts as usize {
            self.push(
                K::TupleNattsInvalid,
                format!(
                    "tuple has {natts} attributes, relation has {}",
                    self.rel.relnatts
                ),
            );
            return;
        }
        // Borrow through the `&HeapRelation` (not `self`): cloning the shared `Arc` for every
        // tuple made the workers fight over its reference count.
        let rel = self.rel;
        if let Some(attrs) = rel.attributes.as_deref() {
            self.walk_attributes(&h, &attrs[..natts.min(attrs.len())]);
        }
    }

    /// `t_hoff`, infomask combinations, `t_ctid`; false if the tuple cannot be walked.
    fn header_ok(&mut self, h: &HeapTupleHeader) -> bool {
        let hoff = h.t_hoff as usize;
        if hoff > self.tuple.len() {
            self.push(
                K::TupleHeaderInvalid,
                format!("t_hoff {hoff} is beyond lp_len {}", self.tuple.len()),
            );
            return false;
        }
        let expected = h.expected_hoff(self.facts.max_align);
        if hoff != expected {
            let nulls = if h.has_nulls() {
                "has nulls"
            } else {
                "no nulls"
            };
            self.push(
                K::TupleHeaderInvalid,
                format!(
                    "t_hoff is {hoff} but should be {expected} ({} attributes, {nulls})",
                    h.natts()
                ),
            );
            return false;
        }
        let mask = h.t_infomask;
        if mask & im::HEAP_XMAX_COMMITTED != 0 && mask & im::HEAP_XMAX_IS_MULTI != 0 {
            self.push(
                K::TupleHeaderInvalid,
                "xmax is marked both committed and a multixact".into(),
            );
        }
        let hot_updated = h.t_infomask2 & im2::HEAP_HOT_UPDATED != 0
            && mask & (im::HEAP_XMAX_INVALID | im::HEAP_XMIN_INVALID) == 0;
        if hot_updated && mask & im::HEAP_XMAX_IS_MULTI == 0 && h.t_xmax == 0 {
            self.push(
                K::HotChainInvalid,
                "tuple is marked HOT-updated but its xmax is 0".into(),
            );
        }
        if h.t_infomask2 & im2::HEAP_ONLY_TUPLE != 0 && mask & im::HEAP_UPDATED == 0 {
            self.push(
                K::TupleHeaderInvalid,
                "heap-only tuple is not marked HEAP_UPDATED".into(),
            );
        }
        self.check_ctid(h);
        true
    }

    fn check_ctid(&mut self, h: &HeapTupleHeader) {
        let ctid = h.t_ctid;
        let special = ctid.offset == SPEC_TOKEN_OFFSET
            || (ctid.block == INVALID_BLOCK_NUMBER && ctid.offset == MOVED_PARTITIONS_OFFSET);
        if special {
            return;
        }
        // PostgreSQL follows t_ctid only when the xmax is a committed update: an aborted
        // UPDATE's new version may be gone with the blocks VACUUM truncated.
        let beyond = ctid.block as u64 >= self.fork_blocks
            && xids::xmax_committed_update(h, self.facts, self.clog);
        if ctid.offset == 0 || beyond {
            self.out.push(
                StructureProblem::error(
                    K::TupleHeaderInvalid,
                    format!(
                        "t_ctid ({},{}) is outside the relation ({} blocks)",
                        ctid.block, ctid.offset, self.fork_blocks
                    ),
                )
                .severity(Severity::Warning)
                .at(self.offnum),
            );
        }
    }

    fn in_future(&self, xid: u32) -> bool {
        in_future(xid, self.facts)
    }

    fn xid_problem(&mut self, message: String) {
        let severity = self.facts.xid_severity;
        self.out.push(
            StructureProblem::error(K::XidInvalid, message)
                .severity(severity)
                .at(self.offnum),
        );
    }

    fn check_xids(&mut self, h: &HeapTupleHeader, xmin_committed: bool) {
        let mask = h.t_infomask;
        let frozen = xids::xmin_frozen(mask);
        if !frozen && self.in_future(h.t_xmin) {
            self.xid_problem(format!(
                "xmin {} is not older than the newest xid the cluster's files allow (next {})",
                h.t_xmin, self.facts.next_xid
            ));
        }
        let frozenxid = self.rel.relfrozenxid;
        if !frozen && precedes(h.t_xmin, frozenxid) {
            self.xid_problem(format!(
                "xmin {} precedes relfrozenxid {frozenxid} but the tuple is not frozen",
                h.t_xmin
            ));
        }
        if mask & im::HEAP_XMAX_INVALID != 0 {
            return;
        }
        if mask & im::HEAP_XMAX_IS_MULTI != 0 {
            self.check_multi_xmax(h.t_xmax, xmin_committed);
        } else if self.in_future(h.t_xmax) {
            self.xid_problem(format!(
                "xmax {} is not older than the newest xid the cluster's files allow (next {})",
                h.t_xmax, self.facts.next_xid
            ));
        } else if xmin_committed && !xids::xmax_is_locked_only(mask) {
            // As verify_heapam: an update or delete of a committed tuple older than the
            // relation's (or cluster's) oldest valid xid would have been frozen or pruned.
            let oldest = xids::oldest_valid_xid(self.rel, self.facts);
            if precedes(h.t_xmax, oldest) {
                self.xid_problem(format!(
                    "xmax {} precedes the oldest valid transaction id {oldest}",
                    h.t_xmax
                ));
            }
        }
    }

    fn check_multi_xmax(&mut self, m: u32, xmin_committed: bool) {
        if m == 0 || (m.wrapping_sub(self.facts.next_multi) as i32) >= 0 {
            self.xid_problem(format!(
                "multixact xmax {m} is invalid or not older than the newest multixact the cluster's files allow (next {})",
                self.facts.next_multi
            ));
            return;
        }
        let oldest = xids::oldest_valid_multi(self.rel, self.facts);
        if xmin_committed && oldest != 0 && (m.wrapping_sub(oldest) as i32) < 0 {
            self.xid_problem(format!(
                "multixact xmax {m} precedes the oldest valid multixact {oldest}"
            ));
        }
    }

    fn xmin_committed(&self, h: &HeapTupleHeader) -> bool {
        let mask = h.t_infomask;
        if mask & im::HEAP_XMIN_COMMITTED != 0 {
            return true;
        }
        if mask & im::HEAP_XMIN_INVALID != 0 || self.in_future(h.t_xmin) {
            return false;
        }
        self.clog.status(h.t_xmin) == XidStatus::Committed
    }
}

/// A sequence page: 8-byte special space with `SEQ_MAGIC` and exactly one tuple.
pub fn check_sequence_page(
    page: &[u8],
    h: &PageHeader,
    facts: &ClusterFacts,
    out: &mut Vec<StructureProblem>,
) {
    let special = h.pd_special as usize;
    let magic = le_u32(page, special);
    if facts.blcksz - special != 8 || magic != Some(SEQ_MAGIC) {
        out.push(StructureProblem::error(
            K::SequencePageInvalid,
            format!("special space of {} bytes with magic {magic:?}, expected 8 bytes with {SEQ_MAGIC:#x}", facts.blcksz - special),
        ));
    }
    let n = max_offset_number(h);
    if n != 1 {
        out.push(StructureProblem::error(
            K::SequencePageInvalid,
            format!("sequence page has {n} line pointers, expected 1"),
        ));
    }
}
