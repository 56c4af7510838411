//! Where a heap page belongs, read from the page itself. A heap tuple that has not been updated
//! or deleted keeps in `t_ctid` its own place: (this block, its own offset). A page whose such
//! tuples all name another block B, each at its own offset, is an image of block B that was
//! written at the wrong place (a misdirected write, two swapped pages). This module reads that
//! claim from a page and checks whether the page found at block B corroborates it.
//!
//! What is never taken as a claim, because PostgreSQL writes it on pages that are in place:
//! * a tuple with a non-zero `t_xmax`: an update whose transaction aborted leaves `t_ctid`
//!   pointing at the abandoned new version, on another block, even after `HEAP_XMAX_INVALID`
//!   is set; a delete or a row lock points `t_ctid` at the tuple itself;
//! * the markers kept in `t_ctid` instead of a place: a speculative insertion token and a row
//!   moved to another partition (offsets `SpecTokenOffsetNumber`, `MovedPartitionsOffsetNumber`,
//!   block `InvalidBlockNumber`);
//! * tuples moved by the old (before 9.0) `VACUUM FULL` (`HEAP_MOVED_OFF`, `HEAP_MOVED_IN`).
//!
//! `VACUUM FULL` and `CLUSTER` write every tuple anew with `t_ctid` naming its new place, and
//! `pg_upgrade` copies files block for block, so neither makes a page look misplaced.
//!
//! Freezing may zero the `t_xmax` of a tuple whose updater aborted and keeps its `t_ctid`, so a
//! page whose every tuple was updated by one aborted statement (new versions at the same offsets
//! of one fresh page) and then frozen claims that fresh page. A claim alone therefore is not a
//! finding: the caller needs a second fact, either a data checksum that is right for block B, or
//! the page at block B corroborating ([`corroborates`]).

use crate::format::bytes::le_u32;
use crate::format::heap::{
    infomask as im, HeapTupleHeader, MOVED_PARTITIONS_OFFSET, SIZEOF_HEAP_TUPLE_HEADER,
    T_INFOMASK_OFFSET,
};
use crate::format::itemid::{max_offset_number, ItemId, LpFlags, SIZE_OF_ITEM_ID};
use crate::format::page::INVALID_BLOCK_NUMBER;
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};

/// The lowest of the offsets used as markers in `t_ctid` (`SpecTokenOffsetNumber` is above
/// it); no line pointer has such an offset.
const FIRST_MARKER_OFFSET: u16 = MOVED_PARTITIONS_OFFSET;
/// Byte range of `t_infomask` in a tuple header: hint bits set later may differ between two
/// images of the same tuple.
const T_INFOMASK_RANGE: std::ops::Range<usize> = T_INFOMASK_OFFSET..T_INFOMASK_OFFSET + 2;

/// Fewest tuples that must name the other block: one tuple could be a single coincidence.
pub const MIN_CLAIMING_TUPLES: usize = 2;

/// A page's claim to be an image of another block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementClaim {
    /// The block every not-updated tuple names in `t_ctid`.
    pub claims_block: u32,
    /// How many tuples name it.
    pub tuples: usize,
}

/// What the page found at the claimed block says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corroboration {
    /// Block B claims to be this block: the two pages were swapped.
    Swapped,
    /// Block B holds at least one of this page's claiming tuples, byte for byte (hint bits
    /// aside) at the same offset: block B holds another image of the same page.
    SameTuples,
}

impl Corroboration {
    /// Name used in finding details.
    pub fn name(self) -> &'static str {
        match self {
            Corroboration::Swapped => "swapped",
            Corroboration::SameTuples => "same_tuples",
        }
    }
}

/// What one tuple's `t_ctid` says about the page's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Naming {
    /// `t_ctid` is (this block, own offset).
    Here,
    /// `t_ctid` is (another block, own offset) on a tuple never updated.
    Elsewhere(u32),
    /// A not-updated tuple whose `t_ctid` names another offset: not the pattern of a page image.
    Inconsistent,
    /// Says nothing about the place (updated, deleted, locked, a marker, moved by old VACUUM FULL).
    Silent,
}

/// One normal tuple of a heap-shaped page.
struct Tuple<'p> {
    item: ItemId,
    bytes: &'p [u8],
    header: HeapTupleHeader,
}

/// The block a heap-shaped page claims to be, from its tuples' `t_ctid` alone; `None` when the
/// page does not look like a heap page, any tuple names this very place, the not-updated tuples
/// disagree, or fewer than [`MIN_CLAIMING_TUPLES`] name the other block.
pub fn claimed_block(page: &[u8], blkno: u32, max_align: usize) -> Option<PlacementClaim> {
    let header = heap_shaped(page)?;
    let mut claim: Option<PlacementClaim> = None;
    for i in 0..max_offset_number(&header) {
        let Some(tuple) = normal_tuple(page, &header, i, max_align)? else {
            continue;
        };
        match naming(&tuple, blkno) {
            Naming::Here | Naming::Inconsistent => return None,
            Naming::Silent => {}
            Naming::Elsewhere(b) => match &mut claim {
                None => {
                    claim = Some(PlacementClaim {
                        claims_block: b,
                        tuples: 1,
                    })
                }
                Some(c) if c.claims_block == b => c.tuples += 1,
                Some(_) => return None,
            },
        }
    }
    claim.filter(|c| c.tuples >= MIN_CLAIMING_TUPLES)
}

/// Whether `other`, the page found at block `claim.claims_block`, corroborates the claim of
/// `page` (at block `blkno`).
pub fn corroborates(
    page: &[u8],
    blkno: u32,
    claim: &PlacementClaim,
    other: &[u8],
    max_align: usize,
) -> Option<Corroboration> {
    let b = claim.claims_block;
    if claimed_block(other, b, max_align).is_some_and(|c| c.claims_block == blkno) {
        return Some(Corroboration::Swapped);
    }
    let header = heap_shaped(page)?;
    let other_header = heap_shaped(other)?;
    for i in 0..max_offset_number(&header) {
        let Some(tuple) = normal_tuple(page, &header, i, max_align)? else {
            continue;
        };
        if naming(&tuple, blkno) != Naming::Elsewhere(b) {
            continue;
        }
        if i >= max_offset_number(&other_header) {
            continue;
        }
        if let Some(Some(twin)) = normal_tuple(other, &other_header, i, max_align) {
            if same_tuple(tuple.bytes, twin.bytes) {
                return Some(Corroboration::SameTuples);
            }
        }
    }
    None
}

/// The header of a page shaped like a heap page: no special space, at least one line pointer,
/// tuple storage in use.
fn heap_shaped(page: &[u8]) -> Option<PageHeader> {
    let h = PageHeader::parse(page)?;
    let ok = h.pd_special as usize == page.len()
        && h.pd_lower as usize >= SIZE_OF_PAGE_HEADER_DATA + SIZE_OF_ITEM_ID
        && h.pd_lower <= h.pd_upper
        && h.pd_upper < h.pd_special;
    ok.then_some(h)
}

/// Line pointer `index` (0-based) as a normal tuple: `Some(None)` for a pointer without a tuple
/// (unused, redirect, dead), `None` when the pointer or the tuple header is not what a heap page
/// holds (the page is then not read as a heap page at all).
fn normal_tuple<'p>(
    page: &'p [u8],
    h: &PageHeader,
    index: usize,
    max_align: usize,
) -> Option<Option<Tuple<'p>>> {
    let word = le_u32(page, SIZE_OF_PAGE_HEADER_DATA + index * SIZE_OF_ITEM_ID)?;
    let item = ItemId::from_word(index as u16 + 1, word);
    if item.lp_flags != LpFlags::Normal {
        return Some(None);
    }
    let (off, len) = (item.lp_off as usize, item.lp_len as usize);
    let in_bounds = off >= h.pd_upper as usize
        && off + len <= h.pd_special as usize
        && off.is_multiple_of(max_align.max(1))
        && len > SIZEOF_HEAP_TUPLE_HEADER;
    if !in_bounds {
        return None;
    }
    let bytes = item.storage(page)?;
    let header = HeapTupleHeader::parse(bytes)?;
    let hoff = header.t_hoff as usize;
    let sane_hoff =
        hoff > SIZEOF_HEAP_TUPLE_HEADER && hoff <= len && hoff.is_multiple_of(max_align.max(1));
    sane_hoff.then_some(Some(Tuple {
        item,
        bytes,
        header,
    }))
}

fn naming(tuple: &Tuple<'_>, blkno: u32) -> Naming {
    let (h, offnum) = (&tuple.header, tuple.item.offnum);
    let ctid = h.t_ctid;
    if ctid.block == blkno && ctid.offset == offnum {
        return Naming::Here;
    }
    let moved = h.t_infomask & (im::HEAP_MOVED_OFF | im::HEAP_MOVED_IN) != 0;
    let marker = ctid.offset >= FIRST_MARKER_OFFSET || ctid.block == INVALID_BLOCK_NUMBER;
    if h.t_xmax != 0 || moved || marker {
        return Naming::Silent;
    }
    if ctid.offset == offnum {
        Naming::Elsewhere(ctid.block)
    } else {
        Naming::Inconsistent
    }
}

/// Two images of one tuple: same length, same bytes apart from the hint bits in `t_infomask`.
fn same_tuple(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.get(..T_INFOMASK_RANGE.start) == b.get(..T_INFOMASK_RANGE.start)
        && a.get(T_INFOMASK_RANGE.end..) == b.get(T_INFOMASK_RANGE.end..)
}

/// The `misplaced_page` finding a page earns from its own tuples: its message and detail.
#[derive(Debug, Clone, PartialEq)]
pub struct Misplaced {
    pub message: String,
    pub detail: serde_json::Value,
}

/// Whether the page at block `blkno` of a fork of `fork_blocks` blocks is an image of another
/// block: its tuples name that block in `t_ctid` and the page `read_block` finds there
/// corroborates it. `verify` and `checksums enable` report the same evidence this way.
pub fn misplaced_by_ctid(
    page: &[u8],
    blkno: u64,
    fork_blocks: u64,
    max_align: usize,
    read_block: impl FnOnce(u64) -> Option<Vec<u8>>,
) -> Option<Misplaced> {
    let blk32 = u32::try_from(blkno).ok()?;
    let claim = claimed_block(page, blk32, max_align)?;
    let b = claim.claims_block;
    if b as u64 >= fork_blocks {
        return None;
    }
    let other = read_block(b as u64)?;
    let how = corroborates(page, blk32, &claim, &other, max_align)?;
    let seen = match how {
        Corroboration::Swapped => format!("block {b} holds the image of block {blkno}"),
        Corroboration::SameTuples => format!("block {b} holds the same tuples"),
    };
    Some(Misplaced {
        message: format!(
            "misplaced page: {} tuples name block {b} in t_ctid at their own offsets, and {seen}: block {blkno} holds an image of block {b}",
            claim.tuples
        ),
        detail: serde_json::json!({
            "claims_block": b,
            "evidence": "t_ctid",
            "tuples": claim.tuples,
            "corroboration": how.name(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pages::{heap_page_with_tuples, TupleSpec};

    fn tuples(block: u32, n: u16) -> Vec<TupleSpec> {
        (1..=n).map(|o| TupleSpec::inserted(block, o)).collect()
    }

    #[test]
    fn page_in_place_claims_nothing() {
        let p = heap_page_with_tuples(&tuples(7, 5));
        assert_eq!(claimed_block(&p, 7, 8), None);
    }

    #[test]
    fn image_of_another_block_claims_it() {
        let p = heap_page_with_tuples(&tuples(3, 5));
        assert_eq!(
            claimed_block(&p, 7, 8),
            Some(PlacementClaim {
                claims_block: 3,
                tuples: 5
            })
        );
    }

    #[test]
    fn one_tuple_is_not_enough() {
        let p = heap_page_with_tuples(&tuples(3, 1));
        assert_eq!(claimed_block(&p, 7, 8), None);
    }

    #[test]
    fn aborted_updates_and_markers_are_silent() {
        // Tuple 1 names block 9 at offset 1 after an aborted update (xmax set): silent.
        let mut specs = tuples(7, 3);
        specs[0] = TupleSpec {
            xmax: 1234,
            ..TupleSpec::inserted(9, 1)
        };
        let p = heap_page_with_tuples(&specs);
        assert_eq!(claimed_block(&p, 7, 8), None);
        // All tuples moved to another partition and aborted: markers, silent.
        let moved: Vec<TupleSpec> = (1..=3)
            .map(|_| TupleSpec::inserted(INVALID_BLOCK_NUMBER, FIRST_MARKER_OFFSET))
            .collect();
        assert_eq!(claimed_block(&heap_page_with_tuples(&moved), 7, 8), None);
    }

    #[test]
    fn one_tuple_here_vetoes_the_claim() {
        let mut specs = tuples(3, 4);
        specs[2] = TupleSpec::inserted(7, 3);
        let p = heap_page_with_tuples(&specs);
        assert_eq!(claimed_block(&p, 7, 8), None);
    }

    #[test]
    fn disagreeing_or_shifted_tuples_claim_nothing() {
        let mut specs = tuples(3, 4);
        specs[1] = TupleSpec::inserted(4, 2);
        assert_eq!(claimed_block(&heap_page_with_tuples(&specs), 7, 8), None);
        let mut specs = tuples(3, 4);
        specs[1] = TupleSpec::inserted(3, 1);
        assert_eq!(claimed_block(&heap_page_with_tuples(&specs), 7, 8), None);
    }

    #[test]
    fn index_pages_are_not_read() {
        let mut p = heap_page_with_tuples(&tuples(3, 4));
        // Give it a special space: no longer heap-shaped.
        p[16..18].copy_from_slice(&8176u16.to_le_bytes());
        assert_eq!(claimed_block(&p, 7, 8), None);
    }

    #[test]
    fn swap_and_copy_are_corroborated_a_frozen_aborted_update_is_not() {
        let at_3 = heap_page_with_tuples(&tuples(3, 4));
        let at_7 = heap_page_with_tuples(&tuples(7, 4));
        // at_3's image found at block 7, at_7's at block 3: each names the other.
        let claim = claimed_block(&at_3, 7, 8).expect("claim");
        assert_eq!(
            corroborates(&at_3, 7, &claim, &at_7, 8),
            Some(Corroboration::Swapped)
        );
        // Block 3's image copied over block 7: block 3 holds the same tuples.
        assert_eq!(
            corroborates(&at_3, 7, &claim, &at_3, 8),
            Some(Corroboration::SameTuples)
        );
        // Block 3 holds unrelated tuples of its own (new rows after the aborted versions were
        // pruned): no corroboration.
        let other_rows: Vec<TupleSpec> = (1..=4)
            .map(|o| TupleSpec {
                xmin: 999,
                ..TupleSpec::inserted(3, o)
            })
            .collect();
        assert_eq!(
            corroborates(&at_3, 7, &claim, &heap_page_with_tuples(&other_rows), 8),
            None
        );
        assert_eq!(corroborates(&at_3, 7, &claim, &[0u8; 8192], 8), None);
    }
}
