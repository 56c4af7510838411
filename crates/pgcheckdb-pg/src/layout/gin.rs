//! GIN pages: the flags of `GinPageOpaqueData` in the special space (`ginblock.h`).

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
