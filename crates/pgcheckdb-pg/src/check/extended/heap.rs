//! Heap tuple liveness for the uniqueness check: which line pointers of a heap page start a
//! HOT chain (an index entry's TID names the chain's root) that holds a tuple that is certainly
//! live — inserted by a committed transaction and not deleted or updated by one that committed
//! or may still commit. Anything uncertain (in-progress or unknown transactions, multixact
//! updaters, pre-9.0 `VACUUM FULL` moves) counts as not live: a duplicate is reported only
//! when both rows are surely live. The rules are those of a cleanly shut-down cluster's
//! snapshot, as in the catalog reader: hint bits first, then `pg_xact`.

use crate::catalog::xact::{CommitLog, XidStatus};
use crate::format::heap::{infomask as im, infomask2 as im2, HeapTupleHeader};
use crate::format::itemid::{ItemId, LpFlags};

/// `HEAP_XMAX_IS_LOCKED_ONLY`: the xmax only locked the row.
pub fn xmax_locked_only(mask: u16) -> bool {
    mask & im::HEAP_XMAX_LOCK_ONLY != 0
        || mask & (im::HEAP_XMAX_IS_MULTI | im::HEAP_LOCK_MASK) == im::HEAP_XMAX_EXCL_LOCK
}

/// The tuple is certainly live (see the module comment).
pub fn certainly_live(h: &HeapTupleHeader, clog: &CommitLog) -> bool {
    let mask = h.t_infomask;
    if mask & im::HEAP_MOVED != 0 {
        return false;
    }
    let inserted = if mask & im::HEAP_XMIN_COMMITTED != 0 {
        true
    } else if mask & im::HEAP_XMIN_INVALID != 0 {
        false
    } else {
        clog.status(h.t_xmin) == XidStatus::Committed
    };
    if !inserted {
        return false;
    }
    if mask & im::HEAP_XMAX_INVALID != 0 || h.t_xmax == 0 || xmax_locked_only(mask) {
        return true;
    }
    if mask & (im::HEAP_XMAX_IS_MULTI | im::HEAP_XMAX_COMMITTED) != 0 {
        return false;
    }
    clog.status(h.t_xmax) == XidStatus::Aborted
}

/// One sound heap page as the extended level's checks walk it: the page, its block number and
/// its line pointers.
#[derive(Clone, Copy)]
pub struct HeapTuples<'p> {
    pub page: &'p [u8],
    pub blkno: u32,
    pub items: &'p [ItemId],
}

impl<'p> HeapTuples<'p> {
    /// The tuple of line pointer `offnum` and its header, when it is `LP_NORMAL` with one.
    /// (Parsing a header again is cheaper than keeping every header of the page.)
    #[inline]
    pub fn tuple(&self, offnum: u16) -> Option<(&'p [u8], HeapTupleHeader)> {
        let item = self.items.get((offnum as usize).checked_sub(1)?)?;
        let tuple = tuple_bytes(self.page, item)?;
        Some((tuple, HeapTupleHeader::parse(tuple)?))
    }
}

/// The bytes of an `LP_NORMAL` line pointer's tuple.
#[inline]
fn tuple_bytes<'p>(page: &'p [u8], item: &ItemId) -> Option<&'p [u8]> {
    if item.lp_flags != LpFlags::Normal {
        return None;
    }
    let (off, len) = (item.lp_off as usize, item.lp_len as usize);
    page.get(off..off + len)
}

/// A bitmap (bit `offnum - 1`) of the root line pointers of the page whose HOT chain holds a
/// certainly live tuple, into `bits` (cleared first).
pub fn live_roots(tuples: &HeapTuples<'_>, clog: &CommitLog, bits: &mut Vec<u8>) {
    bits.clear();
    bits.resize(tuples.items.len().div_ceil(8), 0);
    for_each_live_chain(tuples, clog, |root, _, _, _| set_live(bits, root));
}

/// Sets bit `root - 1` of a [`live_roots`] bitmap (sized for the page's line pointers).
pub fn set_live(bits: &mut [u8], root: u16) {
    let i = root as usize - 1;
    bits[i / 8] |= 1 << (i % 8);
}

/// Calls `f(root, member, tuple, header)` for every root line pointer of the page (an index
/// entry's TID names it) whose HOT chain holds a certainly live tuple: `member` is that tuple's
/// offset, `tuple` its bytes and `header` its header.
pub fn for_each_live_chain<'p>(
    tuples: &HeapTuples<'p>,
    clog: &CommitLog,
    mut f: impl FnMut(u16, u16, &'p [u8], &HeapTupleHeader),
) {
    for item in tuples.items {
        // The chain's first tuple, parsed once: its header also says whether it is a root.
        let (start, first) = match item.lp_flags {
            LpFlags::Redirect => (item.lp_off, tuples.tuple(item.lp_off)),
            LpFlags::Normal => match tuples.tuple(item.offnum) {
                Some((t, h)) if h.t_infomask2 & im2::HEAP_ONLY_TUPLE == 0 => {
                    (item.offnum, Some((t, h)))
                }
                _ => continue,
            },
            _ => continue,
        };
        let live = first.and_then(|first| live_member(start, first, tuples, clog));
        if let Some((member, tuple, h)) = live {
            f(item.offnum, member, tuple, &h);
        }
    }
}

/// Follows a HOT chain within the page from `start` (whose tuple and header are `first`), at
/// most one step per line pointer, to its certainly live tuple.
#[inline(always)]
fn live_member<'p>(
    start: u16,
    first: (&'p [u8], HeapTupleHeader),
    tuples: &HeapTuples<'p>,
    clog: &CommitLog,
) -> Option<(u16, &'p [u8], HeapTupleHeader)> {
    let mut at = start;
    let (mut tuple, mut h) = first;
    for _ in 0..=tuples.items.len() {
        if certainly_live(&h, clog) {
            return Some((at, tuple, h));
        }
        let next = h.t_ctid;
        if h.t_infomask2 & im2::HEAP_HOT_UPDATED == 0
            || next.block != tuples.blkno
            || next.offset == at
        {
            return None;
        }
        at = next.offset;
        (tuple, h) = tuples.tuple(at)?;
    }
    None
}

/// Whether bit `offnum - 1` is set in a [`live_roots`] bitmap.
pub fn is_live(bits: &[u8], offnum: u16) -> bool {
    let Some(i) = (offnum as usize).checked_sub(1) else {
        return false;
    };
    bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(xmin: u32, xmax: u32, mask: u16) -> HeapTupleHeader {
        HeapTupleHeader::for_tests(xmin, xmax, mask)
    }

    #[test]
    fn only_surely_live_tuples_count() {
        let clog = CommitLog::default(); // knows no xid: every status is Unknown
        let live = header(100, 0, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID);
        assert!(certainly_live(&live, &clog));
        // Unknown inserter, unknown deleter, committed deleter, multixact: not surely live.
        assert!(!certainly_live(&header(100, 0, 0), &clog));
        assert!(!certainly_live(
            &header(100, 200, im::HEAP_XMIN_COMMITTED),
            &clog
        ));
        assert!(!certainly_live(
            &header(100, 200, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_COMMITTED),
            &clog
        ));
        assert!(!certainly_live(
            &header(100, 200, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_IS_MULTI),
            &clog
        ));
        // A row only locked is live.
        assert!(certainly_live(
            &header(100, 200, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_LOCK_ONLY),
            &clog
        ));
        assert!(is_live(&[0b0000_0100], 3));
        assert!(!is_live(&[0b0000_0100], 2));
        assert!(!is_live(&[0b0000_0100], 0));
        assert!(!is_live(&[0b0000_0100], 90));
    }
}
