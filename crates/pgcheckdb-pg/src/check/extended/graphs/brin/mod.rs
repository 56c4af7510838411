//! The BRIN graph at the extended level: the range map (revmap) against the regular pages.
//!
//! Revmap pages `1..=lastRevmapPage` (the metapage's) hold one TID per page range, in range
//! order: entry `k` of revmap block `r` is range `(r - 1) * REVMAP_PAGE_MAXITEMS + k`, whose
//! first heap block is that number times `pagesPerRange`. Every TID that is not invalid
//! (offset 0) must point at a used, normal line pointer of a regular page inside the index,
//! whose BRIN tuple's `bt_blkno` is that first heap block; the blocks of the range map must
//! be revmap pages, and no revmap page may lie past it. PostgreSQL changes a summary tuple and
//! its revmap entry in one WAL record (insert, update, desummarize), and turns a page into a
//! revmap page in the record that advances `lastRevmapPage`.
//!
//! A regular-page tuple that no revmap entry points at is not reported: it is unreachable and
//! harmless, and nothing in the current source proves an index upgraded from older releases
//! cannot hold one.
//!
//! [`emit`](emit::emit) writes each revmap entry as a claim keyed by the block it points at, so that the
//! claims meet that block's own facts (its page type, then its tuples' `bt_blkno`) in the
//! sorted stream: the check keeps only the metapage and the current block's tuples in memory.

mod check;
mod emit;

pub use check::Check;
pub use emit::emit;

use super::FIRST_AM_TAG;
use crate::format::heap::SIZE_OF_ITEM_POINTER;
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;

pub(crate) use crate::format::brin::{page_type, BRIN_MAX_PAGES_PER_RANGE};

/// Record tags; within a block, records sort by tag, so a block's own facts come before the
/// claims about it.
pub(crate) mod tag {
    use super::FIRST_AM_TAG;
    /// Block 0: `pagesPerRange`, `lastRevmapPage`.
    pub const META: u8 = FIRST_AM_TAG;
    /// Any other page: its type.
    pub const PAGE: u8 = FIRST_AM_TAG + 1;
    /// A regular page's tuple: offset number, readable (1) or not (0), `bt_blkno`.
    pub const TUPLE: u8 = FIRST_AM_TAG + 2;
    /// A revmap entry, keyed by the block it points at: offset number, revmap block, range.
    pub const CLAIM: u8 = FIRST_AM_TAG + 3;
}

/// `MAXALIGN(SizeOfPageHeaderData) + MAXALIGN(sizeof(BrinSpecialSpace))`.
pub(crate) const REVMAP_OVERHEAD: usize = SIZE_OF_PAGE_HEADER_DATA + 8;
/// `sizeof(BlockNumber) + sizeof(uint8)`: `bt_blkno` and `bt_info`.
pub(crate) const BRIN_TUPLE_HEAD: usize = 5;

/// `REVMAP_PAGE_MAXITEMS` for pages of `page_len` bytes.
pub(crate) fn revmap_page_maxitems(page_len: usize) -> usize {
    page_len.saturating_sub(REVMAP_OVERHEAD) / SIZE_OF_ITEM_POINTER
}
