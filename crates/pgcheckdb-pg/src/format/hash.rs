//! The hash index's on-disk constants (`access/hash.h`): the page types of `hasho_flag` and the
//! byte offsets of `HashMetaPageData` in the metapage's contents. The standard level checks
//! the metapage alone (`standard/index_meta.rs`); the extended level follows its block rules
//! through the whole index (`extended/graphs/hash`).

/// `hasho_flag`'s page type bits (`LH_PAGE_TYPE`) and their values.
pub mod page_type {
    pub const MASK: u16 = 0x000F;
    pub const UNUSED: u16 = 0;
    pub const OVERFLOW: u16 = 1 << 0;
    pub const BUCKET: u16 = 1 << 1;
    pub const BITMAP: u16 = 1 << 2;
    pub const META: u16 = 1 << 3;
}

/// `LH_BUCKET_BEING_SPLIT` and `LH_BUCKET_NEEDS_SPLIT_CLEANUP`: a primary bucket page whose
/// chain may still hold tuples that now belong to the bucket split from it.
pub const LH_SPLIT_PENDING: u16 = (1 << 5) | (1 << 6);

/// `sizeof(HashPageOpaqueData)`: the special space of every hash page.
pub const HASH_SPECIAL_SIZE: usize = 16;
/// Byte offsets inside `HashPageOpaqueData` (from the start of the special space).
pub const HASHO_PREVBLKNO: usize = 0;
pub const HASHO_NEXTBLKNO: usize = 4;
pub const HASHO_BUCKET: usize = 8;
pub const HASHO_FLAG: usize = 12;
/// `HASH_MAGIC`: `hashm_magic`, the first field of the metapage's contents.
pub const HASH_MAGIC: u32 = 0x0644_0640;
/// `HASH_VERSION`.
pub const HASH_VERSION: u32 = 4;
/// `HASH_SPLITPOINT_PHASE_BITS`: log2 of the phases of each split-point group past the first.
pub const HASH_SPLITPOINT_PHASE_BITS: u32 = 2;
/// `HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE`: the first groups allocate their buckets at once.
pub const HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE: u32 = 10;
/// `HASH_MAX_SPLITPOINTS`: the length of `hashm_spares`.
pub const HASH_MAX_SPLITPOINTS: usize = 98;
/// The most bitmap pages a metapage lists (`HASH_MAX_BITMAPS` for 8 kB and larger pages).
pub const HASH_MAX_BITMAPS: usize = 1024;

/// Byte offsets inside `HashMetaPageData` (from the start of the metapage's contents).
pub const HASHM_VERSION: usize = 4;
pub const HASHM_BMSIZE: usize = 20;
pub const HASHM_BMSHIFT: usize = 22;
pub const HASHM_MAXBUCKET: usize = 24;
pub const HASHM_HIGHMASK: usize = 28;
pub const HASHM_LOWMASK: usize = 32;
pub const HASHM_OVFLPOINT: usize = 36;
pub const HASHM_NMAPS: usize = 44;
pub const HASHM_SPARES: usize = 52;
pub const HASHM_MAPP: usize = HASHM_SPARES + 4 * HASH_MAX_SPLITPOINTS;
