//! Pages of the other index access methods — hash, GiST, GIN, SP-GiST, BRIN: the special
//! space must have the method's size and page id, fixed blocks must have the right type,
//! sibling links must stay inside the index, the pages that hold index tuples must have sane
//! line pointers, and the metapage's block numbers and counts must fit the index
//! (`index_meta.rs`).

use super::{index_meta, items, Inputs, PageFormat, Scratch, StructureProblem};
use crate::finding::FindingKind as K;
use crate::format::bytes::{le_u16, le_u32};
use crate::format::gin::flags::{GIN_DATA, GIN_DELETED, GIN_META};
use crate::format::gin::{GIN_OPAQUE_FLAGS, GIN_OPAQUE_RIGHTLINK, GIN_SPECIAL_SIZE};
use crate::format::gist::flags::F_DELETED;
use crate::format::gist::{GIST_OPAQUE_FLAGS, GIST_OPAQUE_RIGHTLINK};
use crate::format::hash::{page_type, HASHO_FLAG, HASH_MAGIC, HASH_SPECIAL_SIZE};
use crate::format::page::INVALID_BLOCK_NUMBER;
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};
use crate::format::special::{BRIN_PAGE_TYPES, GIST_PAGE_ID, HASHO_PAGE_ID, SPGIST_PAGE_ID};
use crate::format::spgist::flags::{SPGIST_DELETED, SPGIST_META};

/// `SPGIST_MAGIC_NUMBER`.
const SPGIST_MAGIC_NUMBER: u32 = 0xBA0B_ABEE;
/// `BRIN_META_MAGIC`.
const BRIN_META_MAGIC: u32 = 0xA810_9CFA;

/// GIN page flags that mean "no line pointers here": `GIN_DATA` (posting lists or posting
/// items), `GIN_DELETED`, `GIN_META`.
const GIN_NO_ITEMS: u16 = GIN_DATA | GIN_DELETED | GIN_META;
/// SP-GiST `SPGIST_META` and `SPGIST_DELETED` flags.
const SPGIST_NO_ITEMS: u16 = SPGIST_META | SPGIST_DELETED;
/// Hash page types that hold index tuples: `LH_OVERFLOW_PAGE`, `LH_BUCKET_PAGE`.
const LH_TUPLE_PAGES: [u16; 2] = [page_type::OVERFLOW, page_type::BUCKET];

/// Checks one page of a hash, GiST, GIN, SP-GiST or BRIN index.
pub fn check_index_page(
    page: &[u8],
    h: &PageHeader,
    blkno: u64,
    format: &PageFormat,
    inputs: &Inputs<'_>,
    scratch: &mut Scratch,
    out: &mut Vec<StructureProblem>,
) {
    let fork_blocks = inputs.file.fork_blocks;
    if check_special(page, h, blkno, format, fork_blocks, out) {
        if blkno == 0 {
            index_meta::check_metapage(page, format, inputs.facts, fork_blocks, out);
        }
        if holds_index_tuples(page, h, blkno, format) {
            items::check_index_items(page, h, inputs.facts, scratch, out);
        }
    }
}

/// True for the pages whose line pointers point at index tuples.
fn holds_index_tuples(page: &[u8], h: &PageHeader, blkno: u64, format: &PageFormat) -> bool {
    let special = h.pd_special as usize;
    match format {
        PageFormat::Hash => LH_TUPLE_PAGES
            .contains(&(le_u16(page, special + HASHO_FLAG).unwrap_or(0) & page_type::MASK)),
        PageFormat::Gist => le_u16(page, special + GIST_OPAQUE_FLAGS).unwrap_or(0) & F_DELETED == 0,
        PageFormat::Gin => {
            le_u16(page, special + GIN_OPAQUE_FLAGS).unwrap_or(0) & GIN_NO_ITEMS == 0
        }
        PageFormat::SpGist => {
            blkno != 0 && le_u16(page, special).unwrap_or(0) & SPGIST_NO_ITEMS == 0
        }
        _ => false,
    }
}

/// The special space, page id and links; true when they are sane enough to read further.
fn check_special(
    page: &[u8],
    h: &PageHeader,
    blkno: u64,
    format: &PageFormat,
    fork_blocks: u64,
    out: &mut Vec<StructureProblem>,
) -> bool {
    let special = h.pd_special as usize;
    let size = page.len() - special;
    let last = le_u16(page, page.len() - 2).unwrap_or(0);
    let result = match format {
        PageFormat::Hash => hash(page, special, size, last, blkno),
        PageFormat::Gist => gist(page, special, size, last, fork_blocks),
        PageFormat::Gin => gin(page, special, size, blkno, fork_blocks),
        PageFormat::SpGist => spgist(page, size, last, blkno),
        PageFormat::Brin => brin(page, size, last, blkno),
        _ => Ok(()),
    };
    match result {
        Ok(()) => true,
        Err(message) => {
            out.push(StructureProblem::error(K::IndexPageInvalid, message));
            false
        }
    }
}

fn expect_special(am: &str, size: usize, expected: usize) -> Result<(), String> {
    if size != expected {
        return Err(format!(
            "special space is {size} bytes, a {am} page has {expected}"
        ));
    }
    Ok(())
}

fn hash(page: &[u8], special: usize, size: usize, last: u16, blkno: u64) -> Result<(), String> {
    expect_special("hash", size, HASH_SPECIAL_SIZE)?;
    if last != HASHO_PAGE_ID {
        return Err(format!(
            "hash page id {last:#06x}, expected {HASHO_PAGE_ID:#06x}"
        ));
    }
    let flag = le_u16(page, special + HASHO_FLAG).unwrap_or(0) & page_type::MASK;
    if !matches!(flag, 0 | 1 | 2 | 4 | 8) {
        return Err(format!(
            "hash page type {flag:#x} is not one of overflow, bucket, bitmap, meta"
        ));
    }
    if (blkno == 0) != (flag == page_type::META) {
        return Err(format!(
            "block {blkno} has hash page type {flag:#x}; only block 0 is the metapage"
        ));
    }
    if blkno == 0 && le_u32(page, SIZE_OF_PAGE_HEADER_DATA) != Some(HASH_MAGIC) {
        return Err("hash metapage has the wrong magic number".into());
    }
    Ok(())
}

fn gist(
    page: &[u8],
    special: usize,
    size: usize,
    last: u16,
    fork_blocks: u64,
) -> Result<(), String> {
    expect_special("GiST", size, 16)?;
    if last != GIST_PAGE_ID {
        return Err(format!(
            "GiST page id {last:#06x}, expected {GIST_PAGE_ID:#06x}"
        ));
    }
    let right = le_u32(page, special + GIST_OPAQUE_RIGHTLINK).unwrap_or(INVALID_BLOCK_NUMBER);
    if right != INVALID_BLOCK_NUMBER && right as u64 >= fork_blocks {
        return Err(format!(
            "GiST rightlink {right} beyond the index's {fork_blocks} blocks"
        ));
    }
    Ok(())
}

fn gin(
    page: &[u8],
    special: usize,
    size: usize,
    blkno: u64,
    fork_blocks: u64,
) -> Result<(), String> {
    expect_special("GIN", size, GIN_SPECIAL_SIZE)?;
    let flags = le_u16(page, special + GIN_OPAQUE_FLAGS).unwrap_or(0);
    if flags > 0xFF {
        return Err(format!("GIN flags {flags:#06x} have unknown bits"));
    }
    if (blkno == 0) != (flags & GIN_META != 0) {
        return Err(format!(
            "block {blkno} has GIN flags {flags:#04x}; only block 0 is the metapage"
        ));
    }
    let right = le_u32(page, special + GIN_OPAQUE_RIGHTLINK).unwrap_or(INVALID_BLOCK_NUMBER);
    if blkno != 0 && right != INVALID_BLOCK_NUMBER && right as u64 >= fork_blocks {
        return Err(format!(
            "GIN rightlink {right} beyond the index's {fork_blocks} blocks"
        ));
    }
    Ok(())
}

fn spgist(page: &[u8], size: usize, last: u16, blkno: u64) -> Result<(), String> {
    expect_special("SP-GiST", size, 8)?;
    if last != SPGIST_PAGE_ID {
        return Err(format!(
            "SP-GiST page id {last:#06x}, expected {SPGIST_PAGE_ID:#06x}"
        ));
    }
    if blkno == 0 && le_u32(page, SIZE_OF_PAGE_HEADER_DATA) != Some(SPGIST_MAGIC_NUMBER) {
        return Err("SP-GiST metapage has the wrong magic number".into());
    }
    Ok(())
}

fn brin(page: &[u8], size: usize, last: u16, blkno: u64) -> Result<(), String> {
    expect_special("BRIN", size, 8)?;
    if !BRIN_PAGE_TYPES.contains(&last) {
        return Err(format!(
            "BRIN page type {last:#06x} is not meta, revmap or regular"
        ));
    }
    if (blkno == 0) != (last == BRIN_PAGE_TYPES[0]) {
        return Err(format!(
            "block {blkno} has BRIN page type {last:#06x}; only block 0 is the metapage"
        ));
    }
    if blkno == 0 && le_u32(page, SIZE_OF_PAGE_HEADER_DATA) != Some(BRIN_META_MAGIC) {
        return Err("BRIN metapage has the wrong magic number".into());
    }
    Ok(())
}
