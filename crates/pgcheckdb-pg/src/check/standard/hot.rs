//! Update chains inside one heap page (HOT chains and same-page updates): which line pointer
//! leads to which, by redirects and by `t_ctid` where the predecessor's update xid is the
//! successor's `t_xmin`, and the rules every chain obeys:
//!
//! * no line pointer is reached twice (chains do not merge);
//! * an update marked `HEAP_HOT_UPDATED` produced a `HEAP_ONLY_TUPLE` and an update that is
//!   not produced a tuple that is not;
//! * a successor's inserter cannot have committed when its predecessor's inserter aborted or
//!   is still in progress (nor be in progress after an aborted predecessor);
//! * a HOT update whose xmax committed has its new version on the page, with that xmin;
//! * a heap-only tuple whose inserter committed (or is in progress) is reached from a root.
//!
//! Problems are reported at the line pointer whose link is wrong, as `verify_heapam` (16+)
//! reports them.

use serde_json::json;

use super::xids::{self, Commit};
use super::{max_align, HeapRelation, Inputs, StructureProblem};
use crate::finding::FindingKind as K;
use crate::format::heap::{
    infomask as im, infomask2 as im2, HeapTupleHeader, SIZEOF_HEAP_TUPLE_HEADER,
};
use crate::format::itemid::{ItemId, LpFlags};
use crate::format::page::PageHeader;

/// What the chain checks know about one line pointer.
#[derive(Debug, Clone, Default)]
pub struct ChainSlot {
    /// The header of an `LP_NORMAL` item whose storage is sane.
    header: Option<HeapTupleHeader>,
    /// A redirect whose target is an `LP_NORMAL` item.
    redirect_ok: bool,
    /// The line pointer this one leads to (0: none).
    successor: u16,
    /// The line pointer that leads here (0: none).
    predecessor: u16,
    /// A predecessor whose update xid is hidden in a multixact may lead here.
    maybe_reached: bool,
    xmin: Option<Commit>,
}

/// One heap page as the chain checks read it.
pub struct HeapPage<'a> {
    pub page: &'a [u8],
    pub header: &'a PageHeader,
    pub items: &'a [ItemId],
    pub blkno: u64,
}

/// Checks the update chains of one heap page; `slots` is reused scratch.
pub fn check_chains(
    p: &HeapPage<'_>,
    rel: &HeapRelation,
    inputs: &Inputs<'_>,
    slots: &mut Vec<ChainSlot>,
    out: &mut Vec<StructureProblem>,
) {
    collect(p, rel, inputs, slots);
    link(p.items, slots, inputs, out);
    check_roots(p.items, slots, out);
}

/// Fills one slot per line pointer (index `offnum - 1`).
fn collect(p: &HeapPage<'_>, rel: &HeapRelation, inputs: &Inputs<'_>, slots: &mut Vec<ChainSlot>) {
    let (page, h, items, blkno) = (p.page, p.header, p.items, p.blkno);
    slots.clear();
    slots.resize(items.len(), ChainSlot::default());
    let n = items.len();
    for (slot, item) in slots.iter_mut().zip(items) {
        match item.lp_flags {
            LpFlags::Redirect => {
                let target = item.lp_off as usize;
                if (1..=n).contains(&target) && items[target - 1].lp_flags == LpFlags::Normal {
                    slot.redirect_ok = true;
                    slot.successor = target as u16;
                }
            }
            LpFlags::Normal => {
                let Some(header) = tuple_header(page, h, item, inputs) else {
                    continue;
                };
                let ctid = header.t_ctid;
                if ctid.block as u64 == blkno
                    && ctid.offset != item.offnum
                    && (1..=n).contains(&(ctid.offset as usize))
                {
                    slot.successor = ctid.offset;
                }
                slot.xmin = xids::xmin_status(&header, rel, inputs.facts, inputs.clog);
                slot.header = Some(header);
            }
            LpFlags::Unused | LpFlags::Dead => {}
        }
    }
}

/// The header of an `LP_NORMAL` item whose storage passes the line pointer checks.
fn tuple_header(
    page: &[u8],
    h: &PageHeader,
    item: &ItemId,
    inputs: &Inputs<'_>,
) -> Option<HeapTupleHeader> {
    let max_align_ = inputs.facts.max_align;
    let (off, len) = (item.lp_off as usize, item.lp_len as usize);
    let sane = super::is_aligned(off, max_align_)
        && len >= max_align(SIZEOF_HEAP_TUPLE_HEADER, max_align_)
        && off >= h.pd_upper as usize
        && off + len <= h.pd_special as usize;
    if !sane {
        return None;
    }
    HeapTupleHeader::parse(page.get(off..off + len)?)
}

fn problem(offnum: u16, message: String, successor: u16) -> StructureProblem {
    StructureProblem::error(K::HotChainInvalid, message)
        .at(offnum)
        .detail(json!({ "successor": successor }))
}

/// Links each line pointer to its successor and checks each link.
fn link(
    items: &[ItemId],
    slots: &mut [ChainSlot],
    inputs: &Inputs<'_>,
    out: &mut Vec<StructureProblem>,
) {
    for i in 0..slots.len() {
        let offnum = items[i].offnum;
        let next = slots[i].successor;
        if next == 0 {
            continue;
        }
        let j = next as usize - 1;
        if slots[i].redirect_ok {
            if slots[j].header.is_none() {
                continue;
            }
            match slots[j].predecessor {
                0 => slots[j].predecessor = offnum,
                other => out.push(problem(
                    offnum,
                    format!("redirect leads to offset {next}, which offset {other} also leads to"),
                    next,
                )),
            }
            continue;
        }
        let Some(cur) = slots[i].header.clone() else {
            continue;
        };
        committed_hot_update_lost(&cur, offnum, next, &slots[j], inputs, out);
        let Some(succ) = slots[j].header.clone() else {
            continue;
        };
        if cur.t_infomask & im::HEAP_XMAX_IS_MULTI != 0 {
            // The update xid lives in pg_multixact/members, which is not read: the link
            // cannot be proven, nor ruled out.
            slots[j].maybe_reached = true;
            continue;
        }
        if cur.t_xmax == 0 || cur.t_xmax != succ.t_xmin {
            continue; // not this tuple's new version (its update aborted, the slot reused)
        }
        if slots[j].predecessor != 0 {
            let other = slots[j].predecessor;
            out.push(problem(
                offnum,
                format!("update leads to offset {next}, which offset {other} also leads to"),
                next,
            ));
            continue;
        }
        slots[j].predecessor = offnum;
        check_link(
            &cur,
            &succ,
            offnum,
            next,
            (slots[i].xmin, slots[j].xmin),
            out,
        );
    }
}

/// The flags and commit statuses of one linked pair.
fn check_link(
    cur: &HeapTupleHeader,
    succ: &HeapTupleHeader,
    offnum: u16,
    next: u16,
    status: (Option<Commit>, Option<Commit>),
    out: &mut Vec<StructureProblem>,
) {
    let hot_updated = cur.t_infomask2 & im2::HEAP_HOT_UPDATED != 0;
    let heap_only = succ.t_infomask2 & im2::HEAP_ONLY_TUPLE != 0;
    if hot_updated && !heap_only {
        out.push(problem(
            offnum,
            format!("HOT-updated tuple's new version at offset {next} is not heap-only"),
            next,
        ));
    } else if !hot_updated && heap_only {
        out.push(problem(
            offnum,
            format!("tuple not HOT-updated has a heap-only new version at offset {next}"),
            next,
        ));
    }
    let contradiction = match status {
        (Some(Commit::InProgress), Some(Commit::Committed)) => Some(("in progress", "committed")),
        (Some(Commit::Aborted), Some(Commit::Committed)) => Some(("aborted", "committed")),
        (Some(Commit::Aborted), Some(Commit::InProgress)) => Some(("aborted", "in progress")),
        _ => None,
    };
    if let Some((was, now)) = contradiction {
        out.push(problem(
            offnum,
            format!(
                "tuple with {was} xmin {} was updated to a tuple at offset {next} with {now} xmin {}",
                cur.t_xmin, succ.t_xmin
            ),
            next,
        ));
    }
}

/// A HOT update whose updater committed keeps its new version on the page: a dead new version
/// would have taken the older one with it when the chain was pruned.
fn committed_hot_update_lost(
    cur: &HeapTupleHeader,
    offnum: u16,
    next: u16,
    succ: &ChainSlot,
    inputs: &Inputs<'_>,
    out: &mut Vec<StructureProblem>,
) {
    if cur.t_infomask2 & im2::HEAP_HOT_UPDATED == 0
        || !xids::xmax_committed_update(cur, inputs.facts, inputs.clog)
    {
        return;
    }
    let found = match succ.header.as_ref() {
        Some(s) if s.t_xmin == cur.t_xmax => return,
        Some(s) => format!("a tuple with xmin {}", s.t_xmin),
        None if succ.redirect_ok => "a redirect".to_string(),
        None => "no tuple".to_string(),
    };
    out.push(problem(
        offnum,
        format!(
            "HOT-updated by committed xmax {} but offset {next} holds {found}",
            cur.t_xmax
        ),
        next,
    ));
}

/// A chain starts at a redirect or a tuple that is not heap-only.
fn check_roots(items: &[ItemId], slots: &[ChainSlot], out: &mut Vec<StructureProblem>) {
    for (slot, item) in slots.iter().zip(items) {
        let Some(h) = slot.header.as_ref() else {
            continue;
        };
        let live = matches!(slot.xmin, Some(Commit::Committed | Commit::InProgress));
        if live
            && slot.predecessor == 0
            && !slot.maybe_reached
            && h.t_infomask2 & im2::HEAP_ONLY_TUPLE != 0
        {
            out.push(
                StructureProblem::error(
                    K::HotChainInvalid,
                    "heap-only tuple is the root of its chain: no redirect or update leads to it"
                        .into(),
                )
                .at(item.offnum),
            );
        }
    }
}
