//! The key order inside one B-tree page: each item's key sorts at or after the previous one
//! (the first data item of an internal page is "minus infinity" and has no key), and on every
//! page but the rightmost of its level no item sorts after the high key. Keys are compared with
//! the index's operator classes and collations ([`crate::check::order`]); heap TIDs take part
//! as the last key in version 4 indexes only.

use std::cmp::Ordering;

use serde_json::json;

use super::StructureProblem;
use crate::check::order::plan::BtreeOrderCheck;
use crate::check::order::tuple::KeyTuple;
use crate::finding::FindingKind as K;
use crate::format::btree::{BtPageOpaque, P_HIKEY, P_NONE};
use crate::format::bytes::le_u16;
use crate::format::index_tuple::{INDEX_SIZE_MASK, T_INFO_OFFSET};
use crate::format::itemid::{ItemId, LpFlags};
use crate::format::page::PageHeader;

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
    let size = (le_u16(tuple, T_INFO_OFFSET)? & INDEX_SIZE_MASK) as usize;
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
    // Two reused slots, the previous key and the current one, so no key is copied. A slot is
    // filled only when the full comparison needs it: keys the shortcut orders (see
    // `btree_order::quick`) are never decoded.
    let quick = order.ordering.quick_key();
    let mut slots = [KeyTuple::EMPTY; 2];
    let mut decoded = [false; 2];
    let mut current = 0;
    let mut previous: Option<(u16, &[u8], Option<i128>)> = None;
    let mut in_order = true;
    for item in items.iter().filter(|i| i.offnum >= first_key) {
        let Some(bytes) = item_bytes(page, h, item) else {
            continue;
        };
        // A quick key exists only for items the full decoding accepts too.
        let quick_key = quick.and_then(|q| q.key(bytes));
        decoded[current] = false;
        if quick_key.is_none() {
            if order
                .ordering
                .decode_into(bytes, &mut slots[current])
                .is_none()
            {
                continue;
            }
            decoded[current] = true;
        }
        if let Some((prev_off, prev_bytes, prev_key)) = previous {
            let quick_order = match (quick, prev_key, quick_key) {
                (Some(q), Some(a), Some(b)) => q.order(a, b),
                _ => None,
            };
            let ord = quick_order.or_else(|| {
                let prev = 1 - current;
                decode_slot(order, prev_bytes, &mut slots, &mut decoded, prev)?;
                decode_slot(order, bytes, &mut slots, &mut decoded, current)?;
                compare(order, &slots[prev], &slots[current])
            });
            if ord == Some(Ordering::Greater) {
                out.push(out_of_order(item.offnum, prev_off, "the previous item"));
                in_order = false;
            }
        }
        previous = Some((item.offnum, bytes, quick_key));
        current = 1 - current;
    }
    let Some(hk) = high_key else { return };
    let last = match previous {
        Some((_, bytes, _)) => {
            let slot = 1 - current;
            decode_slot(order, bytes, &mut slots, &mut decoded, slot).map(|()| &slots[slot])
        }
        None => None,
    };
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

/// Decodes `bytes` into slot `i` unless it holds them already.
fn decode_slot<'p>(
    order: &BtreeOrderCheck,
    bytes: &'p [u8],
    slots: &mut [KeyTuple<'p>; 2],
    decoded: &mut [bool; 2],
    i: usize,
) -> Option<()> {
    if !decoded[i] {
        order.ordering.decode_into(bytes, &mut slots[i])?;
        decoded[i] = true;
    }
    Some(())
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
