//! Hash index bucket pages allocated ahead of use. When a hash index starts a new split-point
//! phase it extends the file past all the phase's bucket pages at once and writes only the
//! last one; the pages of buckets above `hashm_maxbucket` stay all zero until a split uses them.
//! Those zero pages are expected and are no sign of a lost write. The range is read from the
//! metapage (block 0): `hashm_maxbucket`, `hashm_ovflpoint` and `hashm_spares`.

use std::ops::RangeInclusive;

use crate::format::bytes::{le_u16, le_u32};
use crate::format::hash::{
    page_type, HASHM_MAXBUCKET, HASHM_OVFLPOINT, HASHM_SPARES, HASHO_FLAG, HASH_MAGIC,
    HASH_MAX_SPLITPOINTS, HASH_SPECIAL_SIZE, HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE,
    HASH_SPLITPOINT_PHASE_BITS,
};
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};
use crate::format::special::HASHO_PAGE_ID;

/// Offsets in the metapage: `HashMetaPageData` starts after the 24-byte page header.
const MAXBUCKET_OFFSET: usize = SIZE_OF_PAGE_HEADER_DATA + HASHM_MAXBUCKET;
const OVFLPOINT_OFFSET: usize = SIZE_OF_PAGE_HEADER_DATA + HASHM_OVFLPOINT;
const SPARES_OFFSET: usize = SIZE_OF_PAGE_HEADER_DATA + HASHM_SPARES;

/// Buckets that exist once split-point phase `phase` is allocated (`_hash_get_totalbuckets`).
fn total_buckets(phase: u32) -> u64 {
    if phase < HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE {
        return 1 << phase;
    }
    let past_single = phase - HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE;
    let group = HASH_SPLITPOINT_GROUPS_WITH_ONE_PHASE + (past_single >> HASH_SPLITPOINT_PHASE_BITS);
    let before = 1u64 << (group - 1);
    let phases_done = (past_single & ((1 << HASH_SPLITPOINT_PHASE_BITS) - 1)) + 1;
    before + (before >> HASH_SPLITPOINT_PHASE_BITS) * phases_done as u64
}

/// The blocks of allocated but unused buckets, if `metapage` is a hash index metapage.
pub fn unused_bucket_blocks(metapage: &[u8]) -> Option<RangeInclusive<u64>> {
    let header = PageHeader::parse(metapage)?;
    let special = header.pd_special as usize;
    if special + HASH_SPECIAL_SIZE != metapage.len()
        || le_u16(metapage, metapage.len() - 2)? != HASHO_PAGE_ID
        || le_u16(metapage, special + HASHO_FLAG)? & page_type::META == 0
        || le_u32(metapage, SIZE_OF_PAGE_HEADER_DATA)? != HASH_MAGIC
    {
        return None;
    }
    let maxbucket = le_u32(metapage, MAXBUCKET_OFFSET)? as u64;
    let ovflpoint = le_u32(metapage, OVFLPOINT_OFFSET)?;
    if ovflpoint == 0 || ovflpoint as usize >= HASH_MAX_SPLITPOINTS {
        return None;
    }
    // Every bucket of the current phase maps to `bucket + spares[phase - 1] + 1`.
    let spares = le_u32(metapage, SPARES_OFFSET + 4 * (ovflpoint as usize - 1))? as u64;
    let last_bucket = total_buckets(ovflpoint).checked_sub(1)?;
    let first_unused = maxbucket + 1;
    (first_unused <= last_bucket).then(|| first_unused + spares + 1..=last_bucket + spares + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_buckets_per_phase() {
        // One phase per group up to 512 buckets, then four phases per doubling.
        assert_eq!(total_buckets(1), 2);
        assert_eq!(total_buckets(9), 512);
        assert_eq!(total_buckets(10), 640);
        assert_eq!(total_buckets(13), 1024);
        assert_eq!(total_buckets(14), 1280);
    }

    fn metapage(maxbucket: u32, ovflpoint: u32, spares: &[u32]) -> Vec<u8> {
        let mut p = vec![0u8; 8192];
        p[12..14].copy_from_slice(&(24u16 + 640).to_le_bytes()); // pd_lower
        p[14..16].copy_from_slice(&8176u16.to_le_bytes()); // pd_upper
        p[16..18].copy_from_slice(&8176u16.to_le_bytes()); // pd_special
        p[18..20].copy_from_slice(&(8192u16 | 4).to_le_bytes()); // size and version
        p[24..28].copy_from_slice(&HASH_MAGIC.to_le_bytes());
        p[MAXBUCKET_OFFSET..MAXBUCKET_OFFSET + 4].copy_from_slice(&maxbucket.to_le_bytes());
        p[OVFLPOINT_OFFSET..OVFLPOINT_OFFSET + 4].copy_from_slice(&ovflpoint.to_le_bytes());
        for (i, s) in spares.iter().enumerate() {
            let o = SPARES_OFFSET + 4 * i;
            p[o..o + 4].copy_from_slice(&s.to_le_bytes());
        }
        p[8176 + 12..8176 + 14].copy_from_slice(&page_type::META.to_le_bytes());
        p[8190..8192].copy_from_slice(&HASHO_PAGE_ID.to_le_bytes());
        p
    }

    #[test]
    fn unused_buckets_of_the_current_phase() {
        // 10 buckets in use out of 16 (phase 4), 3 overflow pages before phase 4.
        let page = metapage(9, 4, &[0, 0, 0, 3, 3]);
        assert_eq!(unused_bucket_blocks(&page), Some(14..=19));
        // Every bucket of the phase in use: nothing is expected to be zero.
        assert_eq!(
            unused_bucket_blocks(&metapage(15, 4, &[0, 0, 0, 3, 3])),
            None
        );
        // Not a hash metapage.
        let mut heap = page.clone();
        heap[8190] = 0;
        assert_eq!(unused_bucket_blocks(&heap), None);
    }
}
