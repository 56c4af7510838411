//! The scan side of heap -> index: a B-tree leaf page puts the fingerprint of each entry into
//! its index's filter (first phase); a heap page looks up the fingerprint each live tuple's
//! entries must have (second phase).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::keys::{deform_into, fingerprint, key_hash, push_value, ValueForm};
use super::{AllIndexed, Lacking};
use crate::btree_order::tuple::{decode_into, KeyTuple};
use crate::catalog::xact::CommitLog;
use crate::extended::heap::for_each_live_chain;
use crate::layout::btree::{BtPageOpaque, P_NONE};
use crate::layout::heap::{HeapTupleHeader, ItemPointer};
use crate::layout::itemid::{ItemId, LpFlags};
use crate::layout::le_u16;

/// `INDEX_ALT_TID_MASK` of `t_info`, and `BT_IS_POSTING` / `BT_OFFSET_MASK` of the offset.
const INDEX_ALT_TID_MASK: u16 = 0x2000;
const BT_IS_POSTING: u16 = 0x2000;
const BT_OFFSET_MASK: u16 = 0x0FFF;
/// Size of an `ItemPointerData`.
const SIZE_OF_ITEM_POINTER: usize = 6;

/// A worker's reused buffers.
#[derive(Default)]
pub struct Scratch {
    key: Vec<u8>,
}

/// The index side normalises a `name` column as the C string it stores.
fn index_form(form: ValueForm) -> ValueForm {
    match form {
        ValueForm::NameAsCString => ValueForm::CString,
        other => other,
    }
}

/// Puts the fingerprint of every entry of a live leaf page into the index's filter. A tuple
/// that cannot be read makes the index incomplete (nothing is then reported from it).
pub fn insert_leaf(
    idx: &AllIndexed,
    page: &[u8],
    opaque: &BtPageOpaque,
    items: &[ItemId],
    max_align: usize,
    scratch: &mut Scratch,
) {
    let first = if opaque.btpo_next == P_NONE { 1 } else { 2 };
    let mut decoded = KeyTuple::EMPTY;
    let mut entries = 0u64;
    for item in items.iter().filter(|i| i.offnum >= first) {
        // Entries the server marked dead point at tuples dead to everyone (amcheck skips
        // them too).
        if item.lp_flags != LpFlags::Normal {
            continue;
        }
        let Some(tuple) =
            page.get(item.lp_off as usize..item.lp_off as usize + item.lp_len as usize)
        else {
            idx.incomplete.store(true, Ordering::Relaxed);
            return;
        };
        match entry_key(idx, tuple, max_align, &mut decoded, &mut scratch.key) {
            Some(kh) => entries += insert_tids(idx, tuple, kh),
            None => {
                idx.incomplete.store(true, Ordering::Relaxed);
                return;
            }
        }
    }
    idx.entries.fetch_add(entries, Ordering::Relaxed);
}

/// The key hash of one leaf tuple.
fn entry_key<'t>(
    idx: &AllIndexed,
    tuple: &'t [u8],
    max_align: usize,
    decoded: &mut KeyTuple<'t>,
    buf: &mut Vec<u8>,
) -> Option<u64> {
    decode_into(tuple, &idx.stored, max_align, decoded)?;
    if decoded.natts() != idx.columns.len() {
        return None;
    }
    buf.clear();
    for (i, col) in idx.columns.iter().enumerate() {
        push_value(buf, decoded.key(i), index_form(col.form)).ok()?;
    }
    Some(key_hash(buf))
}

/// Inserts the fingerprints of a tuple's heap TIDs (its `t_tid`, or each TID of its posting
/// list); returns how many.
fn insert_tids(idx: &AllIndexed, tuple: &[u8], kh: u64) -> u64 {
    let t_info = le_u16(tuple, 6).unwrap_or(0);
    let offset_field = le_u16(tuple, 4).unwrap_or(0);
    let posting = t_info & INDEX_ALT_TID_MASK != 0 && offset_field & BT_IS_POSTING != 0;
    if !posting {
        if let Some(p) = ItemPointer::parse(tuple, 0) {
            idx.bloom
                .insert(fingerprint(kh, p.block, p.offset), p.block);
            return 1;
        }
        return 0;
    }
    let count = (offset_field & BT_OFFSET_MASK) as usize;
    let start = le_u16(tuple, 2).unwrap_or(0) as usize;
    let mut n = 0;
    for i in 0..count {
        if let Some(p) = ItemPointer::parse(tuple, start + i * SIZE_OF_ITEM_POINTER) {
            idx.bloom
                .insert(fingerprint(kh, p.block, p.offset), p.block);
            n += 1;
        }
    }
    n
}

/// Looks up, for every certainly live tuple of a heap page, its entry in each index of the
/// table; records the entries an index lacks.
pub fn probe_heap(
    indexes: &[Arc<AllIndexed>],
    page: &[u8],
    blkno: u32,
    items: &[ItemId],
    clog: &CommitLog,
    scratch: &mut Scratch,
) {
    let Some(upto) = indexes.iter().map(|i| i.upto).max() else {
        return;
    };
    let Some(attrs) = indexes.first().map(|i| i.heap_attrs.clone()) else {
        return;
    };
    let mut values: Vec<Option<&[u8]>> = Vec::new();
    let mut checked = vec![0u64; indexes.len()];
    let mut not_checked = vec![0u64; indexes.len()];
    for_each_live_chain(page, blkno, items, clog, |root, _member, tuple| {
        let Some(h) = HeapTupleHeader::parse(tuple) else {
            return;
        };
        let deformed = deform_into(tuple, &h, &attrs, upto, &mut values);
        for (n, idx) in indexes.iter().enumerate() {
            if deformed.is_err() && idx.upto > values.len() {
                not_checked[n] += 1;
                continue;
            }
            scratch.key.clear();
            let keyed = idx.columns.iter().try_for_each(|c| {
                let v = values.get(c.heap_attnum - 1).copied().flatten();
                push_value(&mut scratch.key, v, c.form)
            });
            if keyed.is_err() {
                not_checked[n] += 1;
                continue;
            }
            checked[n] += 1;
            let fp = fingerprint(key_hash(&scratch.key), blkno, root);
            if !idx.bloom.contains(fp, blkno) {
                idx.record_lacking(Lacking {
                    heap_block: blkno,
                    heap_offset: root,
                });
            }
        }
    });
    for (n, idx) in indexes.iter().enumerate() {
        idx.tuples_checked.fetch_add(checked[n], Ordering::Relaxed);
        idx.tuples_not_checked
            .fetch_add(not_checked[n], Ordering::Relaxed);
    }
}
