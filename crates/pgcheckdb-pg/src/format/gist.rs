//! GiST pages: `GISTPageOpaqueData` in the special space (`nsn`, `rightlink`, `flags`) and its
//! flags.

/// Byte offsets inside `GISTPageOpaqueData`: `rightlink` after the 8-byte `nsn`, then `flags`.
pub const GIST_OPAQUE_RIGHTLINK: usize = 8;
pub const GIST_OPAQUE_FLAGS: usize = 12;

/// `GISTPageOpaqueData.flags` bits.
pub mod flags {
    /// `F_LEAF`.
    pub const F_LEAF: u16 = 1 << 0;
    /// `F_DELETED`.
    pub const F_DELETED: u16 = 1 << 1;
    /// `F_FOLLOW_RIGHT`: the page to the right has no downlink yet.
    pub const F_FOLLOW_RIGHT: u16 = 1 << 3;
}
