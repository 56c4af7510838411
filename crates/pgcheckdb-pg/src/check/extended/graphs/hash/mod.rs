//! The hash graph at the extended level: each bucket's primary page and overflow chain, the
//! overflow bitmap pages, and which bucket each tuple's hash code belongs to.
//!
//! The metapage (block 0) says where everything is: bucket `B`'s primary page is at
//! `BUCKET_TO_BLKNO(B)`, overflow page number `n` (bit `n` of the bitmap pages listed in
//! `hashm_mapp`) is at the block `bitno_to_blkno(n)` gives, both derived from `hashm_spares`
//! ([`Meta`]). [`emit`] writes what each page says of itself (type, bucket, links, and the
//! bitwise AND and OR of its tuples' hash codes); [`check`] keeps about 30 bytes per page of
//! the index, the metapage and the bitmap pages' bytes in memory, then walks every bucket's
//! chain from its primary page in [`GraphCheck::finish`](super::GraphCheck::finish).

mod bitmaps;
mod check;
mod emit;

pub use check::Check;
pub use emit::emit;

use crate::format::bytes::le_u16;
use crate::format::bytes::le_u32;
use crate::format::hash::{
    HASHM_BMSHIFT, HASHM_BMSIZE, HASHM_HIGHMASK, HASHM_LOWMASK, HASHM_MAPP, HASHM_MAXBUCKET,
    HASHM_NMAPS, HASHM_OVFLPOINT, HASHM_SPARES, HASH_MAX_BITMAPS, HASH_MAX_SPLITPOINTS,
    HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE, HASH_SPLITPOINT_PHASE_BITS,
};
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;

pub(crate) use crate::format::hash::{page_type, LH_SPLIT_PENDING};

/// The phase of a split point within its group.
const PHASE_MASK: u32 = (1 << HASH_SPLITPOINT_PHASE_BITS) - 1;

/// The bytes of the metapage's `HashMetaPageData` up to the last used `hashm_mapp` entry.
pub(crate) fn meta_bytes(page: &[u8]) -> &[u8] {
    let contents = page.get(SIZE_OF_PAGE_HEADER_DATA..).unwrap_or(&[]);
    let nmaps = le_u32(contents, HASHM_NMAPS).unwrap_or(0) as usize;
    let end = HASHM_MAPP + 4 * nmaps.min(HASH_MAX_BITMAPS);
    contents.get(..end).unwrap_or(contents)
}

/// The metapage fields the graph needs, checked to be usable (else [`Meta::parse`] gives
/// `None` and nothing of the index is concluded; the standard level reports a bad metapage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Meta {
    pub hashm_maxbucket: u32,
    pub hashm_highmask: u32,
    pub hashm_lowmask: u32,
    pub hashm_ovflpoint: u32,
    /// `hashm_bmshift`: log2 of the bits one bitmap page holds.
    pub hashm_bmshift: u32,
    /// `hashm_spares[0..=hashm_ovflpoint]`.
    pub hashm_spares: Vec<u32>,
    /// `hashm_mapp[0..hashm_nmaps]`.
    pub hashm_mapp: Vec<u32>,
}

impl Meta {
    /// Reads [`meta_bytes`]; `None` when the fields do not fit together.
    pub fn parse(b: &[u8]) -> Option<Meta> {
        let u32_at = |off: usize| le_u32(b, off);
        let (bmsize, bmshift) = (
            le_u16(b, HASHM_BMSIZE)? as u32,
            le_u16(b, HASHM_BMSHIFT)? as u32,
        );
        let (maxbucket, high, low) = (
            u32_at(HASHM_MAXBUCKET)?,
            u32_at(HASHM_HIGHMASK)?,
            u32_at(HASHM_LOWMASK)?,
        );
        let ovflpoint = u32_at(HASHM_OVFLPOINT)?;
        let nmaps = u32_at(HASHM_NMAPS)? as usize;
        let masks_fit = high == (low << 1 | 1) && maxbucket <= high;
        let bitmap_fits = (3..32).contains(&bmshift) && bmsize << 3 == 1 << bmshift;
        if !masks_fit
            || !bitmap_fits
            || ovflpoint as usize >= HASH_MAX_SPLITPOINTS
            || nmaps > HASH_MAX_BITMAPS
        {
            return None;
        }
        let spares = (0..=ovflpoint as usize)
            .map(|i| u32_at(HASHM_SPARES + 4 * i))
            .collect::<Option<Vec<u32>>>()?;
        let mapp = (0..nmaps)
            .map(|i| u32_at(HASHM_MAPP + 4 * i))
            .collect::<Option<Vec<u32>>>()?;
        Some(Meta {
            hashm_maxbucket: maxbucket,
            hashm_highmask: high,
            hashm_lowmask: low,
            hashm_ovflpoint: ovflpoint,
            hashm_bmshift: bmshift,
            hashm_spares: spares,
            hashm_mapp: mapp,
        })
    }

    /// `hashm_spares[i]` (0 past `hashm_ovflpoint`, which the rules below never ask for).
    fn spares(&self, i: u32) -> u64 {
        self.hashm_spares.get(i as usize).copied().unwrap_or(0) as u64
    }

    /// `BUCKET_TO_BLKNO`: the block of bucket `b`'s primary page.
    pub fn bucket_blkno(&self, b: u32) -> u64 {
        let before = if b == 0 {
            0
        } else {
            self.spares(spare_index(b as u64 + 1).saturating_sub(1))
        };
        b as u64 + before + 1
    }

    /// The mask under which exactly the hash codes that map to bucket `b` equal `b`: bucket
    /// `b` holds the codes whose `code & highmask` is `b`, and also those whose
    /// `code & lowmask` is `b` while its split image `b + lowmask + 1` is not in use yet.
    pub fn bucket_mask(&self, b: u32) -> u32 {
        let image = b as u64 | (self.hashm_lowmask as u64 + 1);
        if b > self.hashm_lowmask || image <= self.hashm_maxbucket as u64 {
            self.hashm_highmask
        } else {
            self.hashm_lowmask
        }
    }

    /// The bucket a hash code maps to (`_hash_hashkey2bucket`).
    #[cfg(test)]
    pub fn bucket_of(&self, hash: u32) -> u32 {
        let b = hash & self.hashm_highmask;
        if b > self.hashm_maxbucket {
            b & self.hashm_lowmask
        } else {
            b
        }
    }

    /// How many overflow and bitmap pages exist (`hashm_spares[hashm_ovflpoint]`): the bit
    /// numbers in use are below it.
    pub fn overflow_pages(&self) -> u64 {
        self.spares(self.hashm_ovflpoint)
    }

    /// `bitno_to_blkno`: the block of overflow page number `bit` (0-based).
    pub fn bit_blkno(&self, bit: u64) -> u64 {
        let n = bit + 1;
        let mut i = 1;
        while i < self.hashm_ovflpoint && n > self.spares(i) {
            i += 1;
        }
        total_buckets(i) + n
    }

    /// `_hash_ovflblkno_to_bitno`: the bit number of the overflow page at `blkno`, `None` when
    /// no overflow page can be there.
    pub fn blkno_bit(&self, blkno: u64) -> Option<u64> {
        for i in 1..=self.hashm_ovflpoint {
            let before = total_buckets(i);
            if blkno <= before {
                return None;
            }
            let n = blkno - before;
            if n > self.spares(i - 1) && n <= self.spares(i) {
                return Some(n - 1);
            }
        }
        None
    }

    /// Bits per bitmap page.
    pub fn bits_per_map(&self) -> u64 {
        1 << self.hashm_bmshift
    }
}

/// `pg_ceil_log2_32`.
fn ceil_log2(n: u64) -> u32 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

/// `_hash_spareindex`: the splitpoint phase that holds bucket number `num_bucket - 1`.
fn spare_index(num_bucket: u64) -> u32 {
    let group = ceil_log2(num_bucket);
    if group < HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE {
        return group;
    }
    let phases = HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE
        + ((group - HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE) << HASH_SPLITPOINT_PHASE_BITS);
    phases + (((num_bucket - 1) >> (group - (HASH_SPLITPOINT_PHASE_BITS + 1))) as u32 & PHASE_MASK)
}

/// `_hash_get_totalbuckets`: how many buckets exist once splitpoint phase `phase` is in use.
fn total_buckets(phase: u32) -> u64 {
    if phase < HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE {
        return 1 << phase;
    }
    let group = HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE
        + ((phase - HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE) >> HASH_SPLITPOINT_PHASE_BITS);
    let half = 1u64 << (group - 1);
    let phases_in_group = ((phase - HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE) & PHASE_MASK) as u64 + 1;
    half + (half >> HASH_SPLITPOINT_PHASE_BITS) * phases_in_group
}

/// The bits a tuple's hash code shares with every bucket `b` ever held it in: a hash code
/// lands in `b` only when its lowest `bit_length(b)` bits spell `b`, whatever the masks were
/// then (the masks always cover `b`).
pub(crate) fn lineage_mask(b: u32) -> u32 {
    match 32 - b.leading_zeros() {
        32 => u32::MAX,
        n => (1u32 << n) - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(maxbucket: u32, ovflpoint: u32, spares: Vec<u32>) -> Meta {
        let high = (maxbucket + 1).next_power_of_two() - 1;
        Meta {
            hashm_maxbucket: maxbucket,
            hashm_highmask: high,
            hashm_lowmask: high >> 1,
            hashm_ovflpoint: ovflpoint,
            hashm_bmshift: 15,
            hashm_spares: spares,
            hashm_mapp: vec![],
        }
    }

    #[test]
    fn splitpoint_phases_follow_postgres() {
        // Groups below 10 have one phase each; from 10 on, four phases of a quarter group.
        assert_eq!(
            (0..=9).map(total_buckets).collect::<Vec<_>>(),
            vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        );
        assert_eq!(total_buckets(10), 640);
        assert_eq!(total_buckets(13), 1024);
        assert_eq!(total_buckets(14), 1280);
        assert_eq!((spare_index(1), spare_index(2), spare_index(3)), (0, 1, 2));
        assert_eq!(
            (spare_index(512), spare_index(513), spare_index(640)),
            (9, 10, 10)
        );
        assert_eq!(
            (spare_index(641), spare_index(1024), spare_index(1025)),
            (11, 13, 14)
        );
    }

    #[test]
    fn buckets_and_overflow_pages_interleave() {
        // 4 buckets (blocks 1..=4), the bitmap page at block 5 (bit 0), then two overflow
        // pages added at splitpoint 2 (bits 1, 2 at blocks 6, 7); bucket 4 (splitpoint 3)
        // after them at block 8, and one overflow page at splitpoint 3 (bit 3).
        let m = meta(4, 3, vec![0, 0, 3, 4]);
        let blocks: Vec<u64> = (0..=4).map(|b| m.bucket_blkno(b)).collect();
        assert_eq!(blocks, vec![1, 2, 3, 4, 8]);
        let bits: Vec<u64> = (0..4).map(|n| m.bit_blkno(n)).collect();
        assert_eq!(bits, vec![5, 6, 7, 12]);
        for (n, &b) in bits.iter().enumerate() {
            assert_eq!(m.blkno_bit(b), Some(n as u64));
        }
        for b in [1, 4, 8, 9, 11, 13] {
            assert_eq!(m.blkno_bit(b), None, "block {b}");
        }
        assert_eq!(m.overflow_pages(), 4);
    }

    #[test]
    fn bucket_masks_select_exactly_the_codes_of_a_bucket() {
        // Both mask states PostgreSQL leaves: after a split (highmask just covers maxbucket)
        // and after _hash_init (highmask covers maxbucket + 1).
        let states = (1..40u32).flat_map(|max| {
            let split = meta(max, 0, vec![0]);
            let mut init = split.clone();
            init.hashm_highmask = (max + 2).next_power_of_two() - 1;
            init.hashm_lowmask = init.hashm_highmask >> 1;
            [split, init]
        });
        for m in states {
            let maxbucket = m.hashm_maxbucket;
            for b in 0..=maxbucket {
                let mask = m.bucket_mask(b);
                for code in 0..512u32 {
                    let code = code.wrapping_mul(0x9E37_79B9);
                    assert_eq!(
                        code & mask == b,
                        m.bucket_of(code) == b,
                        "{maxbucket} {b} {code}"
                    );
                    if m.bucket_of(code) == b {
                        assert_eq!(code & lineage_mask(b), b);
                    }
                }
            }
        }
    }

    #[test]
    fn hash_codes_map_to_buckets_and_lineage() {
        let m = meta(5, 3, vec![0, 0, 1, 1]); // buckets 0..=5, highmask 7, lowmask 3
        assert_eq!(m.bucket_of(0b1101), 5);
        assert_eq!(m.bucket_of(0b1110), 2); // 6 > maxbucket: lowmask
        assert_eq!(m.bucket_of(0b0001), 1);
        assert_eq!(lineage_mask(0), 0);
        assert_eq!(lineage_mask(1), 1);
        assert_eq!(lineage_mask(5), 7);
        assert_eq!(lineage_mask(u32::MAX), u32::MAX);
    }
}
