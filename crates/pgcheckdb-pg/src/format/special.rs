//! Which access method wrote a page, guessed from its special space (`pd_special`): size and the
//! page-id words that hash, GiST, SP-GiST and BRIN keep in their last two bytes. Used to make
//! output friendlier; validity is decided with the catalog's `relam`, never with this guess.

use serde::Serialize;

use super::brin;
use super::bytes::{le_u16, le_u32};
use crate::format::page::PageHeader;

/// `HASHO_PAGE_ID`.
pub const HASHO_PAGE_ID: u16 = 0xFF80;
/// `GIST_PAGE_ID`.
pub const GIST_PAGE_ID: u16 = 0xFF81;
/// `SPGIST_PAGE_ID`.
pub const SPGIST_PAGE_ID: u16 = 0xFF82;
/// BRIN page types `BRIN_PAGETYPE_META`, `_REVMAP`, `_REGULAR`.
pub const BRIN_PAGE_TYPES: [u16; 3] = [
    brin::page_type::META,
    brin::page_type::REVMAP,
    brin::page_type::REGULAR,
];
/// `SEQ_MAGIC` at the start of a sequence page's special space.
pub const SEQ_MAGIC: u32 = 0x1717;
/// Largest `btpo_cycleid` a B-tree writes (`MAX_BT_CYCLE_ID`).
pub const MAX_BT_CYCLE_ID: u16 = 0xFF7F;

/// The page's apparent kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PageKind {
    /// No special space: heap, visibility map or free space map page.
    HeapLike,
    Btree,
    Hash,
    Gist,
    SpGist,
    Brin,
    Gin,
    Sequence,
    Unknown,
}

/// Guesses the access method from the special space.
pub fn guess_page_kind(page: &[u8], header: &PageHeader) -> PageKind {
    let blcksz = page.len();
    let special = header.pd_special as usize;
    if special > blcksz {
        return PageKind::Unknown;
    }
    let size = blcksz - special;
    let last = le_u16(page, blcksz.saturating_sub(2)).unwrap_or(0);
    match size {
        0 => PageKind::HeapLike,
        16 if last == HASHO_PAGE_ID => PageKind::Hash,
        16 if last == GIST_PAGE_ID => PageKind::Gist,
        16 if last <= MAX_BT_CYCLE_ID => PageKind::Btree,
        8 if last == SPGIST_PAGE_ID => PageKind::SpGist,
        8 if BRIN_PAGE_TYPES.contains(&last) => PageKind::Brin,
        8 if le_u32(page, special) == Some(SEQ_MAGIC) => PageKind::Sequence,
        8 => PageKind::Gin,
        _ => PageKind::Unknown,
    }
}
