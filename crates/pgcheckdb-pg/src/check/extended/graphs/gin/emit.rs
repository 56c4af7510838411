//! What one sound GIN page says about the graph: its own fact, the metapage's pending list,
//! and the links it holds (see [`super`] for the checks that use them).

use super::flags::*;
use super::{pack_tid, LinkKind, PageFact, PageIssue, Tag};
use crate::check::extended::facts::Writer;
use crate::check::extended::graphs::Sink;
use crate::check::extended::tids::decode::gin_data_leaf;
use crate::format::bytes::{le_u16, le_u32};
use crate::format::gin::{
    GINM_HEAD, GINM_TAIL, GIN_DATA_START, GIN_OPAQUE_FLAGS, GIN_OPAQUE_MAXOFF,
    GIN_OPAQUE_RIGHTLINK, GIN_SPECIAL_SIZE, GIN_TREE_POSTING,
};
use crate::format::heap::ItemPointer;
use crate::format::itemid::line_pointers;
use crate::format::page::INVALID_BLOCK_NUMBER;
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};

/// `sizeof(PostingItem)`: `child_blkno` (a `BlockIdData`) and `key` (an `ItemPointerData`).
const POSTING_ITEM_SIZE: usize = 10;

/// One link held by a page, before it is written.
struct Link {
    kind: LinkKind,
    child: u32,
    /// Whether `key` bounds the child's TIDs (not the last item of a rightmost page).
    bounded: bool,
    key: u64,
}

/// Writes the graph facts of one sound GIN page.
pub fn emit(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let Some(h) = PageHeader::parse(page) else {
        return;
    };
    let special = h.pd_special as usize;
    if special + GIN_SPECIAL_SIZE > page.len() {
        return;
    }
    let (Some(rightlink), Some(maxoff), Some(flags)) = (
        le_u32(page, special + GIN_OPAQUE_RIGHTLINK),
        le_u16(page, special + GIN_OPAQUE_MAXOFF),
        le_u16(page, special + GIN_OPAQUE_FLAGS),
    ) else {
        return;
    };
    let mut fact = PageFact {
        flags,
        rightlink,
        ..PageFact::default()
    };
    let mut links = Vec::new();
    if flags & GIN_META != 0 {
        let head =
            le_u32(page, SIZE_OF_PAGE_HEADER_DATA + GINM_HEAD).unwrap_or(INVALID_BLOCK_NUMBER);
        let tail =
            le_u32(page, SIZE_OF_PAGE_HEADER_DATA + GINM_TAIL).unwrap_or(INVALID_BLOCK_NUMBER);
        sink.push(blkno, |w| {
            w.u8(Tag::Meta as u8).u32(head).u32(tail);
        });
    } else if flags & (GIN_DELETED | GIN_LIST) != 0 {
        // A deleted page's contents are left over; a list page holds heap tuples' keys.
    } else if flags & GIN_DATA == 0 {
        entry_links(page, &h, flags & GIN_LEAF != 0, &mut links);
    } else if flags & GIN_LEAF != 0 {
        data_leaf(page, &h, special, flags, &mut fact);
    } else {
        data_internal(page, special, maxoff, &mut fact, &mut links);
    }
    sink.push(blkno, |w| write_fact(w, &fact));
    for l in links {
        sink.push(blkno, |w| {
            w.u8(Tag::Link as u8)
                .u32(l.child)
                .u8(l.kind as u8)
                .u8(l.bounded as u8)
                .u64(l.key);
        });
    }
}

pub(super) fn write_fact(w: &mut Writer<'_>, f: &PageFact) {
    w.u8(Tag::Page as u8)
        .u16(f.flags)
        .u32(f.rightlink)
        .u8(f.issue)
        .u16(f.issue_at)
        .u8(f.has_range as u8)
        .u64(f.lo)
        .u64(f.hi);
}

/// The downlinks of an internal entry page, or the posting-tree roots of an entry leaf: both
/// are the block number in each tuple's `t_tid`.
fn entry_links(page: &[u8], h: &PageHeader, leaf: bool, out: &mut Vec<Link>) {
    for item in line_pointers(page, h) {
        if !item.has_storage() {
            continue;
        }
        let Some(tid) = ItemPointer::parse(page, item.lp_off as usize) else {
            continue;
        };
        let kind = if !leaf {
            LinkKind::EntryDownlink
        } else if tid.offset == GIN_TREE_POSTING {
            LinkKind::PostingRoot
        } else {
            continue;
        };
        out.push(Link {
            kind,
            child: tid.block,
            bounded: false,
            key: 0,
        });
    }
}

/// A posting-tree leaf: its heap TIDs' range, and whether they ascend.
fn data_leaf(page: &[u8], h: &PageHeader, special: usize, flags: u16, fact: &mut PageFact) {
    let mut tids = Vec::new();
    if gin_data_leaf(page, h, special, flags, &mut tids) != 0 || tids.is_empty() {
        return;
    }
    let packed: Vec<u64> = tids.iter().map(|&(b, o)| pack_tid(b, o)).collect();
    if let Some(i) = packed.windows(2).position(|w| w[0] >= w[1]) {
        fact.issue = PageIssue::TidsOutOfOrder as u8;
        fact.issue_at = u16::try_from(i + 1).unwrap_or(u16::MAX);
    }
    fact.has_range = true;
    fact.lo = packed[0];
    fact.hi = packed.iter().copied().max().unwrap_or(0);
}

/// An internal posting-tree page: one link per `PostingItem`. The last item of the rightmost
/// page of a level stands for "everything above" and bounds nothing.
fn data_internal(
    page: &[u8],
    special: usize,
    maxoff: u16,
    fact: &mut PageFact,
    out: &mut Vec<Link>,
) {
    let mut prev: Option<u64> = None;
    for i in 1..=maxoff as usize {
        let at = GIN_DATA_START + (i - 1) * POSTING_ITEM_SIZE;
        if at + POSTING_ITEM_SIZE > special {
            break;
        }
        let (Some(hi), Some(lo), Some(key)) = (
            le_u16(page, at),
            le_u16(page, at + 2),
            ItemPointer::parse(page, at + 4),
        ) else {
            break;
        };
        let key = pack_tid(key.block, key.offset);
        let bounded = !(i == maxoff as usize && fact.rightlink == INVALID_BLOCK_NUMBER);
        if bounded {
            if prev.is_some_and(|p| p > key) && fact.issue == PageIssue::None as u8 {
                fact.issue = PageIssue::KeysOutOfOrder as u8;
                fact.issue_at = i as u16;
            }
            prev = Some(key);
            fact.has_range = true;
            fact.hi = fact.hi.max(key);
        }
        out.push(Link {
            kind: LinkKind::DataDownlink,
            child: ((hi as u32) << 16) | lo as u32,
            bounded,
            key,
        });
    }
}
