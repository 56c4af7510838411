//! The metapages (block 0) of hash, GIN, SP-GiST and BRIN indexes: the block numbers they
//! hold must lie inside the index, and their counts must fit its size and each other.
//! The magic numbers and page types are checked in `index.rs` first.

use super::{ClusterFacts, PageFormat, StructureProblem};
use crate::finding::FindingKind as K;
use crate::format::brin::BRIN_MAX_PAGES_PER_RANGE;
use crate::format::bytes::le_u32;
use crate::format::gin::{
    GINM_HEAD, GINM_N_PENDING_PAGES, GINM_TAIL, GINM_VERSION, GIN_CURRENT_VERSION,
};
use crate::format::hash::{
    HASHM_HIGHMASK, HASHM_LOWMASK, HASHM_MAPP, HASHM_MAXBUCKET, HASHM_NMAPS, HASHM_OVFLPOINT,
    HASHM_SPARES, HASHM_VERSION, HASH_MAX_SPLITPOINTS, HASH_VERSION,
};
use crate::format::page::INVALID_BLOCK_NUMBER;
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;
use crate::format::spgist::SPGIST_LAST_FIXED_BLKNO;

/// `SPGIST_CACHED_PAGES` entries of (`blkno`, `freeSpace`) after `magicNumber`.
const SPGIST_CACHED_PAGES: usize = 8;
/// `BRIN_CURRENT_VERSION`.
const BRIN_CURRENT_VERSION: u32 = 1;

/// Checks the metapage of a hash, GIN, SP-GiST or BRIN index.
pub fn check_metapage(
    page: &[u8],
    format: &PageFormat,
    facts: &ClusterFacts,
    fork_blocks: u64,
    out: &mut Vec<StructureProblem>,
) {
    let meta = |at: usize| le_u32(page, SIZE_OF_PAGE_HEADER_DATA + at).unwrap_or(0);
    let problems = match format {
        PageFormat::Hash => hash_meta(&meta, facts, fork_blocks),
        PageFormat::Gin => gin_meta(&meta, fork_blocks),
        PageFormat::SpGist => spgist_meta(&meta, fork_blocks),
        PageFormat::Brin => brin_meta(&meta, fork_blocks),
        _ => Vec::new(),
    };
    for message in problems {
        out.push(StructureProblem::error(K::IndexPageInvalid, message));
    }
}

fn hash_meta(meta: &dyn Fn(usize) -> u32, facts: &ClusterFacts, blocks: u64) -> Vec<String> {
    let mut p = Vec::new();
    let version = meta(HASHM_VERSION);
    if version != HASH_VERSION {
        p.push(format!(
            "hash metapage version {version}, expected {HASH_VERSION}"
        ));
    }
    let (maxbucket, high, low) = (
        meta(HASHM_MAXBUCKET),
        meta(HASHM_HIGHMASK),
        meta(HASHM_LOWMASK),
    );
    if high != (low << 1 | 1) || maxbucket > high {
        p.push(format!(
            "hash metapage masks do not fit: maxbucket {maxbucket}, highmask {high:#x}, lowmask {low:#x}"
        ));
    }
    let ovflpoint = meta(HASHM_OVFLPOINT);
    if ovflpoint as usize >= HASH_MAX_SPLITPOINTS {
        p.push(format!(
            "hash metapage ovflpoint {ovflpoint} is not below {HASH_MAX_SPLITPOINTS}"
        ));
        return p;
    }
    // Block 0, one block per bucket 0..=maxbucket, and every overflow and bitmap page
    // (hashm_spares[ovflpoint] counts all of them) must exist.
    let spares = meta(HASHM_SPARES + 4 * ovflpoint as usize) as u64;
    let needed = 1 + maxbucket as u64 + 1 + spares;
    if needed > blocks {
        p.push(format!(
            "hash metapage needs {needed} blocks (maxbucket {maxbucket}, {spares} overflow and bitmap pages), the index has {blocks}"
        ));
    }
    let max_bitmaps = (facts.blcksz / 8).min(1024) as u32;
    let nmaps = meta(HASHM_NMAPS);
    if nmaps > max_bitmaps {
        p.push(format!(
            "hash metapage has {nmaps} bitmap pages, at most {max_bitmaps} fit"
        ));
        return p;
    }
    for i in 0..nmaps as usize {
        let map = meta(HASHM_MAPP + 4 * i);
        if map == 0 || map as u64 >= blocks {
            p.push(format!(
                "hash bitmap page {i} is block {map}, outside 1..{blocks}"
            ));
        }
    }
    p
}

fn gin_meta(meta: &dyn Fn(usize) -> u32, blocks: u64) -> Vec<String> {
    let mut p = Vec::new();
    let (head, tail) = (meta(GINM_HEAD), meta(GINM_TAIL));
    if (head == INVALID_BLOCK_NUMBER) != (tail == INVALID_BLOCK_NUMBER) {
        p.push(format!(
            "GIN pending list head {head} and tail {tail}: one is set, the other not"
        ));
    }
    for (name, b) in [("head", head), ("tail", tail)] {
        if b != INVALID_BLOCK_NUMBER && (b < 2 || b as u64 >= blocks) {
            p.push(format!(
                "GIN pending list {name} is block {b}, outside 2..{blocks}"
            ));
        }
    }
    let pending = meta(GINM_N_PENDING_PAGES) as u64;
    if pending > blocks {
        p.push(format!(
            "GIN metapage counts {pending} pending-list pages, the index has {blocks} blocks"
        ));
    }
    let version = meta(GINM_VERSION);
    if version > GIN_CURRENT_VERSION {
        p.push(format!(
            "GIN metapage version {version} is above {GIN_CURRENT_VERSION}"
        ));
    }
    if blocks < 2 {
        p.push(format!(
            "GIN index has {blocks} blocks, fewer than metapage and root"
        ));
    }
    p
}

fn spgist_meta(meta: &dyn Fn(usize) -> u32, blocks: u64) -> Vec<String> {
    let mut p = Vec::new();
    if blocks <= u64::from(SPGIST_LAST_FIXED_BLKNO) {
        p.push(format!(
            "SP-GiST index has {blocks} blocks, fewer than metapage, root and nulls root"
        ));
    }
    for i in 0..SPGIST_CACHED_PAGES {
        let b = meta(4 + 8 * i);
        if b != INVALID_BLOCK_NUMBER && (b <= SPGIST_LAST_FIXED_BLKNO || b as u64 >= blocks) {
            p.push(format!(
                "SP-GiST metapage caches block {b} as a last-used page, outside {}..{blocks}",
                SPGIST_LAST_FIXED_BLKNO + 1
            ));
        }
    }
    p
}

fn brin_meta(meta: &dyn Fn(usize) -> u32, blocks: u64) -> Vec<String> {
    let mut p = Vec::new();
    let version = meta(4);
    if version != BRIN_CURRENT_VERSION {
        p.push(format!(
            "BRIN metapage version {version}, expected {BRIN_CURRENT_VERSION}"
        ));
    }
    let per_range = meta(8);
    if !(1..=BRIN_MAX_PAGES_PER_RANGE).contains(&per_range) {
        p.push(format!(
            "BRIN pagesPerRange {per_range} is outside 1..={BRIN_MAX_PAGES_PER_RANGE}"
        ));
    }
    let last_revmap = meta(12) as u64;
    if last_revmap >= blocks {
        p.push(format!(
            "BRIN lastRevmapPage {last_revmap} is beyond the index's {blocks} blocks"
        ));
    }
    p
}
