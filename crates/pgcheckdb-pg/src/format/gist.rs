//! GiST pages: the flags of `GISTPageOpaqueData` in the special space.

/// `GISTPageOpaqueData.flags` bits.
pub mod flags {
    /// `F_LEAF`.
    pub const F_LEAF: u16 = 1 << 0;
    /// `F_DELETED`.
    pub const F_DELETED: u16 = 1 << 1;
    /// `F_FOLLOW_RIGHT`: the page to the right has no downlink yet.
    pub const F_FOLLOW_RIGHT: u16 = 1 << 3;
}
