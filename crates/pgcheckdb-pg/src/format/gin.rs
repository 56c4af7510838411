//! GIN pages: the flags of `GinPageOpaqueData` in the special space, and what an entry leaf
//! tuple's `t_tid` says about where its heap TIDs are (`ginblock.h`).

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

/// `GIN_TREE_POSTING`: the offset of an entry leaf tuple's `t_tid` when the block names the
/// root of a posting tree.
pub const GIN_TREE_POSTING: u16 = 0xFFFF;
/// `GIN_ITUP_COMPRESSED`: in the block number of an entry leaf tuple's `t_tid`, its posting
/// list is compressed.
pub const GIN_ITUP_COMPRESSED: u32 = 1 << 31;
