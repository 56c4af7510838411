//! What one sound GiST page says about the graph: its flags and rightlink, and on a live
//! internal page the child block of every tuple.

use super::{DOWNLINK_TAG, PAGE_TAG};
use crate::check::extended::graphs::Sink;
use crate::format::bytes::{le_u16, le_u32};
use crate::format::gist::flags;
use crate::format::gist::{GIST_OPAQUE_FLAGS, GIST_OPAQUE_RIGHTLINK};
use crate::format::heap::ItemPointer;
use crate::format::itemid::line_pointers;
use crate::format::page::PageHeader;

/// Writes the graph facts of one sound GiST page: its flags and rightlink, and on a live
/// internal page the child block of every tuple.
pub fn emit(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let Some(h) = PageHeader::parse(page) else {
        return;
    };
    let special = h.pd_special as usize;
    let (Some(page_flags), Some(rightlink)) = (
        le_u16(page, special + GIST_OPAQUE_FLAGS),
        le_u32(page, special + GIST_OPAQUE_RIGHTLINK),
    ) else {
        return;
    };
    sink.push(blkno, |w| {
        w.u8(PAGE_TAG).u16(page_flags).u32(rightlink);
    });
    if page_flags & (flags::F_LEAF | flags::F_DELETED) != 0 {
        return;
    }
    for it in line_pointers(page, &h) {
        if !it.has_storage() {
            continue;
        }
        let at = it.lp_off as usize;
        let Some(tid) = page
            .get(at..at + it.lp_len as usize)
            .and_then(|t| ItemPointer::parse(t, 0))
        else {
            continue;
        };
        sink.push(blkno, |w| {
            w.u8(DOWNLINK_TAG).u32(tid.block).u16(it.offnum);
        });
    }
}
