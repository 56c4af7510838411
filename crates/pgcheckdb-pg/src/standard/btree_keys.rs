//! The key order inside one B-tree page: each item's key sorts at or after the previous one
//! (the first data item of an internal page is "minus infinity" and has no key), and on every
//! page but the rightmost of its level no item sorts after the high key. Keys are compared with
//! the index's operator classes and collations ([`crate::btree_order`]); heap TIDs take part
//! as the last key in version 4 indexes only.

use std::cmp::Ordering;

use serde_json::json;

use super::StructureProblem;
use crate::btree_order::plan::BtreeOrderCheck;
use crate::btree_order::tuple::KeyTuple;
use crate::finding::FindingKind as K;
use crate::layout::btree::{BtPageOpaque, P_NONE};
use crate::layout::itemid::{ItemId, LpFlags};
use crate::layout::le_u16;
use crate::page::PageHeader;

/// `INDEX_SIZE_MASK` of `t_info`.
const INDEX_SIZE_MASK: u16 = 0x1FFF;
/// `P_HIKEY`: the high key's line pointer on a page that has one.
const P_HIKEY: u16 = 1;

/// The bytes of an item whose line pointer and `t_info` agree, `None` otherwise (such items
/// are reported by the item checks and left out of the order check).
fn item_bytes<'p>(page: &'p [u8], h: &PageHeader, item: &ItemId) -> Option<&'p [u8]> {
    if !matches!(item.lp_flags, LpFlags::Normal | LpFlags::Dead) || item.lp_len == 0 {
        return None;
    }
    let (off, len) = (item.lp_off as usize, item.lp_len as usize);
    if off < h.pd_upper as usize || off + len > h.pd_special as usize {
        return None;
    }
    let tuple = page.get(off..off + len)?;
    let size = (le_u16(tuple, 6)? & INDEX_SIZE_MASK) as usize;
    (size == len).then_some(tuple)
}

/// Checks the key order of one live B-tree page.
pub fn check_key_order(
    page: &[u8],
    h: &PageHeader,
    o: &BtPageOpaque,
    items: &[ItemId],
    order: &BtreeOrderCheck,
    out: &mut Vec<StructureProblem>,
) {
    let has_high_key = o.btpo_next != P_NONE;
    let first_data = if has_high_key { 2 } else { 1 };
    // An internal page's first data item is the "minus infinity" downlink.
    let first_key = if o.is_leaf() {
        first_data
    } else {
        first_data + 1
    };
    let decode = |item: &ItemId| item_bytes(page, h, item).and_then(|b| order.ordering.decode(b));
    let high_key = has_high_key
        .then(|| {
            items
                .first()
                .filter(|i| i.offnum == P_HIKEY)
                .and_then(decode)
        })
        .flatten();
    let keyed = || {
        items
            .iter()
            .filter(|i| i.offnum >= first_key)
            .filter_map(|i| decode(i).map(|k| (i.offnum, k)))
    };
    // Two reused slots, the previous key and the current one, so no key is copied.
    let mut slots = [KeyTuple::EMPTY; 2];
    let mut current = 0;
    let mut previous: Option<u16> = None;
    let mut in_order = true;
    for item in items.iter().filter(|i| i.offnum >= first_key) {
        let Some(bytes) = item_bytes(page, h, item) else {
            continue;
        };
        let [a, b] = &mut slots;
        let (prev, cur) = if current == 0 { (&*b, a) } else { (&*a, b) };
        if order.ordering.decode_into(bytes, cur).is_none() {
            continue;
        }
        if let Some(prev_off) = previous {
            if compare(order, prev, cur) == Some(Ordering::Greater) {
                out.push(out_of_order(item.offnum, prev_off, "the previous item"));
                in_order = false;
            }
        }
        previous = Some(item.offnum);
        current = 1 - current;
    }
    let last = previous.map(|_| &slots[1 - current]);
    let Some(hk) = high_key else { return };
    // Items in order are all at or below the high key when the last one is.
    let last_ok = last.is_none_or(|last| compare(order, last, &hk) != Some(Ordering::Greater));
    if in_order && last_ok {
        return;
    }
    for (offnum, key) in keyed() {
        if compare(order, &key, &hk) == Some(Ordering::Greater) {
            out.push(out_of_order(offnum, P_HIKEY, "the page's high key"));
        }
    }
}

fn compare(order: &BtreeOrderCheck, a: &KeyTuple<'_>, b: &KeyTuple<'_>) -> Option<Ordering> {
    order
        .ordering
        .compare_decoded_lazy(a, b, || order.version.heapkeyspace())
}

fn out_of_order(offnum: u16, other: u16, what: &str) -> StructureProblem {
    let message = if other == P_HIKEY {
        format!("key at offset {offnum} sorts after {what} (offset {other})")
    } else {
        format!("key at offset {offnum} sorts before {what} (offset {other})")
    };
    StructureProblem::error(K::BtreeOrderInvalid, message)
        .at(offnum)
        .detail(json!({"other_offset": other}))
}
