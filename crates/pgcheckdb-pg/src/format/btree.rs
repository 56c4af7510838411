//! B-tree pages: `BTPageOpaqueData` in the 16-byte special space, `BTMetaPageData` on block 0,
//! and the heap TIDs of a leaf tuple (its `t_tid` or its posting list).

use serde::Serialize;

use super::bytes::{le_u16, le_u32};
use super::heap::{ItemPointer, SIZE_OF_ITEM_POINTER};
use super::index_tuple::{INDEX_ALT_TID_MASK, T_INFO_OFFSET};
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;

/// Size of the B-tree special space.
pub const BT_SPECIAL_SIZE: usize = 16;
/// `BTREE_MAGIC` in the metapage.
pub const BTREE_MAGIC: u32 = 0x053162;
/// `P_NONE`: no sibling.
pub const P_NONE: u32 = 0;
/// `P_HIKEY`: the high key's line pointer on a page that has one.
pub const P_HIKEY: u16 = 1;
/// `BTREE_MIN_VERSION`: the oldest B-tree version the server opens.
pub const BTREE_MIN_VERSION: u32 = 2;
/// `BTREE_VERSION`: the newest B-tree version, the first whose keys end with the heap TID
/// ("heapkeyspace"); a larger number is no version PostgreSQL 14-18 writes.
pub const BTREE_VERSION: u32 = 4;

/// `btpo_flags` bits.
pub mod flags {
    pub const BTP_LEAF: u16 = 0x0001;
    pub const BTP_ROOT: u16 = 0x0002;
    pub const BTP_DELETED: u16 = 0x0004;
    pub const BTP_META: u16 = 0x0008;
    pub const BTP_HALF_DEAD: u16 = 0x0010;
    pub const BTP_SPLIT_END: u16 = 0x0020;
    pub const BTP_HAS_GARBAGE: u16 = 0x0040;
    pub const BTP_INCOMPLETE_SPLIT: u16 = 0x0080;
    pub const BTP_HAS_FULLXID: u16 = 0x0100;

    /// Names of the set bits.
    pub fn names(mask: u16) -> Vec<&'static str> {
        const NAMES: [(u16, &str); 9] = [
            (BTP_LEAF, "LEAF"),
            (BTP_ROOT, "ROOT"),
            (BTP_DELETED, "DELETED"),
            (BTP_META, "META"),
            (BTP_HALF_DEAD, "HALF_DEAD"),
            (BTP_SPLIT_END, "SPLIT_END"),
            (BTP_HAS_GARBAGE, "HAS_GARBAGE"),
            (BTP_INCOMPLETE_SPLIT, "INCOMPLETE_SPLIT"),
            (BTP_HAS_FULLXID, "HAS_FULLXID"),
        ];
        NAMES
            .iter()
            .filter(|(b, _)| mask & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// `BTPageOpaqueData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BtPageOpaque {
    pub btpo_prev: u32,
    pub btpo_next: u32,
    pub btpo_level: u32,
    pub btpo_flags: u16,
    pub btpo_cycleid: u16,
}

impl BtPageOpaque {
    /// Decodes the special space starting at `pd_special`.
    pub fn parse(page: &[u8], pd_special: usize) -> Option<BtPageOpaque> {
        let s = page.get(pd_special..pd_special.checked_add(BT_SPECIAL_SIZE)?)?;
        Some(BtPageOpaque {
            btpo_prev: le_u32(s, 0)?,
            btpo_next: le_u32(s, 4)?,
            btpo_level: le_u32(s, 8)?,
            btpo_flags: le_u16(s, 12)?,
            btpo_cycleid: le_u16(s, 14)?,
        })
    }

    pub fn is_leaf(&self) -> bool {
        self.btpo_flags & flags::BTP_LEAF != 0
    }

    /// A leaf page neither deleted nor half-dead: its tuples are the index's entries.
    pub fn is_live_leaf(&self) -> bool {
        self.is_leaf() && self.btpo_flags & (flags::BTP_DELETED | flags::BTP_HALF_DEAD) == 0
    }
}

/// `BTMetaPageData` (block 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BtMetaPage {
    pub btm_magic: u32,
    pub btm_version: u32,
    pub btm_root: u32,
    pub btm_level: u32,
    pub btm_fastroot: u32,
    pub btm_fastlevel: u32,
}

impl BtMetaPage {
    /// Decodes the metapage contents after the page header.
    pub fn parse(page: &[u8]) -> Option<BtMetaPage> {
        let at = |i: usize| le_u32(page, SIZE_OF_PAGE_HEADER_DATA + 4 * i);
        Some(BtMetaPage {
            btm_magic: at(0)?,
            btm_version: at(1)?,
            btm_root: at(2)?,
            btm_level: at(3)?,
            btm_fastroot: at(4)?,
            btm_fastlevel: at(5)?,
        })
    }
}

/// `BT_IS_POSTING` and `BT_OFFSET_MASK` in the offset field of an ALT-TID tuple's `t_tid`.
pub const BT_IS_POSTING: u16 = 0x2000;
pub const BT_OFFSET_MASK: u16 = 0x0FFF;
/// `BT_PIVOT_HEAP_TID_ATTR`: in a pivot's offset field, the pivot keeps a heap TID at its end.
pub const BT_PIVOT_HEAP_TID_ATTR: u16 = 0x1000;

/// Calls `f` with each heap TID of a non-high-key B-tree leaf tuple: its `t_tid`, or every TID
/// of its posting list (none for a pivot tuple). `None`, before any call, when the tuple does
/// not decode (the posting list runs past its end).
pub fn leaf_tuple_tids(tuple: &[u8], mut f: impl FnMut(ItemPointer)) -> Option<()> {
    let t_info = le_u16(tuple, T_INFO_OFFSET)?;
    let tid = ItemPointer::parse(tuple, 0)?;
    if t_info & INDEX_ALT_TID_MASK == 0 {
        f(tid);
        return Some(());
    }
    if tid.offset & BT_IS_POSTING == 0 {
        return Some(()); // a pivot tuple: no heap TID
    }
    // `BTreeTupleGetPostingOffset`: the posting list's offset is kept in the block number.
    let start = tid.block as usize;
    let n = (tid.offset & BT_OFFSET_MASK) as usize;
    if start.checked_add(n.checked_mul(SIZE_OF_ITEM_POINTER)?)? > tuple.len() {
        return None;
    }
    for i in 0..n {
        f(ItemPointer::parse(tuple, start + SIZE_OF_ITEM_POINTER * i)?);
    }
    Some(())
}
