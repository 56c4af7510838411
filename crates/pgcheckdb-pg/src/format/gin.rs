//! GIN pages: the flags of `GinPageOpaqueData` in the special space, and what an entry leaf
//! tuple's `t_tid` says about where its heap TIDs are (`ginblock.h`); where a data page's
//! contents start; and the fields of the metapage the checks read.

use super::page::SIZE_OF_PAGE_HEADER_DATA;

/// `GinPageOpaqueData.flags` bits.
pub mod flags {
    pub const GIN_DATA: u16 = 0x01;
    pub const GIN_LEAF: u16 = 0x02;
    pub const GIN_DELETED: u16 = 0x04;
    pub const GIN_META: u16 = 0x08;
    pub const GIN_LIST: u16 = 0x10;
    pub const GIN_INCOMPLETE_SPLIT: u16 = 0x40;
    pub const GIN_COMPRESSED: u16 = 0x80;
}

/// `sizeof(GinPageOpaqueData)`: `rightlink`, `maxoff`, `flags`.
pub const GIN_SPECIAL_SIZE: usize = 8;
/// Byte offsets inside `GinPageOpaqueData` (from the start of the special space).
pub const GIN_OPAQUE_RIGHTLINK: usize = 0;
pub const GIN_OPAQUE_MAXOFF: usize = 4;
pub const GIN_OPAQUE_FLAGS: usize = 6;

/// `GinDataPageGetData`: a data (posting-tree) page's contents start after the page header
/// and its right bound (an `ItemPointerData`, `MAXALIGN`ed to 8).
pub const GIN_DATA_START: usize = SIZE_OF_PAGE_HEADER_DATA + 8;

/// `GIN_CURRENT_VERSION`: `ginVersion` of the metapage.
pub const GIN_CURRENT_VERSION: u32 = 2;
/// Byte offsets inside `GinMetaPageData` (from the start of the metapage's contents, after the
/// page header): the pending list's `head` and `tail`, `nPendingPages`, `ginVersion`.
pub const GINM_HEAD: usize = 0;
pub const GINM_TAIL: usize = 4;
pub const GINM_N_PENDING_PAGES: usize = 12;
pub const GINM_VERSION: usize = 48;

/// `GIN_TREE_POSTING`: the offset of an entry leaf tuple's `t_tid` when the block names the
/// root of a posting tree.
pub const GIN_TREE_POSTING: u16 = 0xFFFF;
/// `GIN_ITUP_COMPRESSED`: in the block number of an entry leaf tuple's `t_tid`, its posting
/// list is compressed.
pub const GIN_ITUP_COMPRESSED: u32 = 1 << 31;
