//! What one sound BRIN page says: the metapage its `pagesPerRange` and `lastRevmapPage`, every
//! other page its type, a regular page each normal line pointer's `bt_blkno`, and a revmap
//! page one claim per valid TID, keyed by the block the TID points at.

use super::{page_type, revmap_page_maxitems, tag, BRIN_TUPLE_HEAD};
use crate::check::extended::graphs::Sink;
use crate::format::bytes::{le_u16, le_u32};
use crate::format::heap::ItemPointer;
use crate::format::heap::SIZE_OF_ITEM_POINTER;
use crate::format::itemid::{line_pointers, LpFlags};
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};

/// Writes the graph facts of one sound BRIN page.
pub fn emit(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let Some(h) = PageHeader::parse(page) else {
        return;
    };
    let Some(kind) = le_u16(page, page.len() - 2) else {
        return;
    };
    let contents = SIZE_OF_PAGE_HEADER_DATA;
    match kind {
        page_type::META => {
            let (Some(per_range), Some(last)) =
                (le_u32(page, contents + 8), le_u32(page, contents + 12))
            else {
                return;
            };
            sink.push(blkno, |w| {
                w.u8(tag::META).u32(per_range).u32(last);
            });
        }
        page_type::REVMAP => {
            sink.push(blkno, |w| {
                w.u8(tag::PAGE).u16(kind);
            });
            revmap_claims(page, blkno, sink);
        }
        _ => {
            sink.push(blkno, |w| {
                w.u8(tag::PAGE).u16(kind);
            });
            if kind == page_type::REGULAR {
                regular_tuples(page, &h, blkno, sink);
            }
        }
    }
}

/// One claim per valid TID of a revmap page, keyed by the block it points at.
fn revmap_claims(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let maxitems = revmap_page_maxitems(page.len());
    let first_range = (blkno as u64).saturating_sub(1) * maxitems as u64;
    for k in 0..maxitems {
        let Some(tid) =
            ItemPointer::parse(page, SIZE_OF_PAGE_HEADER_DATA + SIZE_OF_ITEM_POINTER * k)
        else {
            break;
        };
        if tid.offset == 0 {
            continue; // ItemPointerIsValid: an unsummarized range
        }
        sink.push(tid.block, |w| {
            w.u8(tag::CLAIM)
                .u16(tid.offset)
                .u32(blkno)
                .u64(first_range + k as u64);
        });
    }
}

/// The `bt_blkno` of every normal line pointer's tuple on a regular page.
fn regular_tuples(page: &[u8], h: &PageHeader, blkno: u32, sink: &mut Sink<'_>) {
    for it in line_pointers(page, h) {
        if it.lp_flags != LpFlags::Normal {
            continue;
        }
        let (off, len) = (it.lp_off as usize, it.lp_len as usize);
        let bt_blkno = if len >= BRIN_TUPLE_HEAD && off + len <= page.len() {
            le_u32(page, off)
        } else {
            None
        };
        sink.push(blkno, |w| {
            w.u8(tag::TUPLE)
                .u16(it.offnum)
                .u8(bt_blkno.is_some() as u8)
                .u32(bt_blkno.unwrap_or(0));
        });
    }
}
