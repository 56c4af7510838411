//! SP-GiST pages: the flags of `SpGistPageOpaqueData` in the special space, the fixed blocks,
//! and the states of a tuple (`tupstate`).

/// `SpGistPageOpaqueData.flags` bits.
pub mod flags {
    /// `SPGIST_META`.
    pub const SPGIST_META: u16 = 1 << 0;
    /// `SPGIST_DELETED` (never set by current versions).
    pub const SPGIST_DELETED: u16 = 1 << 1;
    /// `SPGIST_LEAF`.
    pub const SPGIST_LEAF: u16 = 1 << 2;
    /// `SPGIST_NULLS`.
    pub const SPGIST_NULLS: u16 = 1 << 3;
}

/// `SPGIST_ROOT_BLKNO`: the root of the tree of non-null values.
pub const SPGIST_ROOT_BLKNO: u32 = 1;
/// `SPGIST_NULL_BLKNO`: the root of the tree of nulls.
pub const SPGIST_NULL_BLKNO: u32 = 2;
/// `SPGIST_LAST_FIXED_BLKNO`: the metapage and the two roots come first.
pub const SPGIST_LAST_FIXED_BLKNO: u32 = SPGIST_NULL_BLKNO;

/// `tupstate` values: `SPGIST_LIVE`, `SPGIST_REDIRECT`, `SPGIST_DEAD`.
pub const SPGIST_LIVE: u32 = 0;
pub const SPGIST_REDIRECT: u32 = 1;
pub const SPGIST_DEAD: u32 = 2;
