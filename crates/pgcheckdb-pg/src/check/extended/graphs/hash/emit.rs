//! What one sound hash page says of itself: the metapage its `HashMetaPageData`, a bitmap
//! page its bits, every other page its `HashPageOpaqueData` and a digest of its tuples' hash
//! codes (their bitwise AND and OR: all codes agree on a bit exactly when AND and OR do).

use super::{meta_bytes, page_type};
use crate::check::extended::graphs::{Sink, FIRST_AM_TAG};
use crate::format::bytes::{le_u16, le_u32};
use crate::format::hash::{HASHO_BUCKET, HASHO_FLAG, HASHO_NEXTBLKNO, HASHO_PREVBLKNO};
use crate::format::index_tuple::{INDEX_NULL_MASK, SIZE_OF_INDEX_TUPLE};
use crate::format::itemid::{line_pointers, LpFlags};
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};

/// Record tags (the first body byte).
pub(crate) mod tag {
    use super::FIRST_AM_TAG;
    /// Block 0: the bytes of `HashMetaPageData` up to the last `hashm_mapp` entry used.
    pub const META: u8 = FIRST_AM_TAG;
    /// Any other page: [`PageFact`](super::super::check::PageFact)'s fields.
    pub const PAGE: u8 = FIRST_AM_TAG + 1;
    /// A bitmap page: its bytes from the end of the page header to the special space.
    pub const BITMAP: u8 = FIRST_AM_TAG + 2;
}

/// Where a hash index tuple's hash code starts: after `IndexTupleData` (8 bytes, already
/// `MAXALIGN`ed). Hash indexes store no nulls; a tuple with `INDEX_NULL_MASK` set has its hash
/// code left unread.
const HASH_CODE_OFFSET: usize = SIZE_OF_INDEX_TUPLE;

/// The digest of a page's tuples' hash codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HashDigest {
    pub tuples: u16,
    pub and: u32,
    pub or: u32,
}

/// Writes the graph facts of one sound hash page.
pub fn emit(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let Some(h) = PageHeader::parse(page) else {
        return;
    };
    let special = h.pd_special as usize;
    let (Some(prev), Some(next), Some(bucket), Some(flag)) = (
        le_u32(page, special + HASHO_PREVBLKNO),
        le_u32(page, special + HASHO_NEXTBLKNO),
        le_u32(page, special + HASHO_BUCKET),
        le_u16(page, special + HASHO_FLAG),
    ) else {
        return;
    };
    match flag & page_type::MASK {
        page_type::META => sink.push(blkno, |w| {
            w.u8(tag::META).bytes(meta_bytes(page));
        }),
        page_type::BITMAP => {
            let bits = page.get(SIZE_OF_PAGE_HEADER_DATA..special).unwrap_or(&[]);
            sink.push(blkno, |w| {
                w.u8(tag::BITMAP).bytes(bits);
            });
        }
        _ => {
            let d = digest(page, &h);
            sink.push(blkno, |w| {
                w.u8(tag::PAGE)
                    .u16(flag)
                    .u32(bucket)
                    .u32(prev)
                    .u32(next)
                    .u16(d.tuples)
                    .u32(d.and)
                    .u32(d.or);
            });
        }
    }
}

/// The AND and OR of the hash codes of every tuple with storage (live or `LP_DEAD`).
pub(crate) fn digest(page: &[u8], h: &PageHeader) -> HashDigest {
    let mut d = HashDigest {
        tuples: 0,
        and: u32::MAX,
        or: 0,
    };
    for it in line_pointers(page, h) {
        if !matches!(it.lp_flags, LpFlags::Normal | LpFlags::Dead) {
            continue;
        }
        let (off, len) = (it.lp_off as usize, it.lp_len as usize);
        if len < HASH_CODE_OFFSET + 4 || off + len > page.len() {
            continue;
        }
        let t_info = le_u16(page, off + 6).unwrap_or(INDEX_NULL_MASK);
        let Some(code) = le_u32(page, off + HASH_CODE_OFFSET) else {
            continue;
        };
        if t_info & INDEX_NULL_MASK != 0 {
            continue;
        }
        d.tuples += 1;
        d.and &= code;
        d.or |= code;
    }
    d
}
