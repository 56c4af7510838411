//! A B-tree page as the fact records see it: the bytes of its items, the first data item, and
//! a borrowed view of the opaque data, high key, first and last items and downlinks
//! ([`PageView`]) that [`super::records`] writes at the blocks the facts are about.

use super::records::{DownlinkView, PageView};
use crate::format::btree::{flags as bf, BtPageOpaque, P_HIKEY, P_NONE};
use crate::format::bytes::le_u64;
use crate::format::heap::ItemPointer;
use crate::format::itemid::ItemId;
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;

/// The bytes of item `offnum` (1-based), if its line pointer has storage on the page.
pub fn item<'p>(page: &'p [u8], items: &[ItemId], offnum: u16) -> Option<&'p [u8]> {
    let it = items.get((offnum as usize).checked_sub(1)?)?;
    if !it.has_storage() {
        return None;
    }
    page.get(it.lp_off as usize..it.lp_off as usize + it.lp_len as usize)
}

/// `P_FIRSTDATAKEY`: 1 on the rightmost page of a level, else 2 (1 holds the high key).
pub fn first_data_key(o: &BtPageOpaque) -> u16 {
    if o.btpo_next == P_NONE {
        1
    } else {
        2
    }
}

/// What the facts need of a page: opaque data, high key, first and last data items,
/// downlinks, all borrowed from the page.
pub fn page_view<'p>(page: &'p [u8], o: &BtPageOpaque, items: &[ItemId]) -> PageView<'p> {
    let mut f = PageView {
        btpo_prev: o.btpo_prev,
        btpo_next: o.btpo_next,
        btpo_level: o.btpo_level,
        btpo_flags: o.btpo_flags,
        ..PageView::default()
    };
    if o.btpo_flags & bf::BTP_DELETED != 0 {
        if o.btpo_flags & bf::BTP_HAS_FULLXID != 0 {
            // BTDeletedPageData: the safexid right after the page header.
            f.safexid = le_u64(page, SIZE_OF_PAGE_HEADER_DATA);
        }
        return f;
    }
    if o.btpo_next != P_NONE {
        f.high_key = item(page, items, P_HIKEY).unwrap_or_default();
        if o.btpo_flags & bf::BTP_HALF_DEAD != 0 {
            f.top_parent = ItemPointer::parse(f.high_key, 0).map(|p| p.block);
        }
    }
    let first = first_data_key(o);
    let last = items.len() as u16;
    if last >= first {
        f.first_item = item(page, items, first).unwrap_or_default();
        f.last_item = item(page, items, last).unwrap_or_default();
    }
    if !o.is_leaf() {
        for offnum in first..=last {
            let Some(t) = item(page, items, offnum) else {
                continue;
            };
            if let Some(p) = ItemPointer::parse(t, 0) {
                f.downlinks.push(DownlinkView {
                    offnum,
                    child: p.block,
                    item: t,
                });
            }
        }
    }
    f
}
