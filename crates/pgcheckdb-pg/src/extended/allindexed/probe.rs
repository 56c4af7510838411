//! The scan side of heap -> index: a B-tree leaf page puts the fingerprint of each entry into
//! its index's filter (first phase); a heap page looks up the fingerprint each live tuple's
//! entries must have (second phase).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::bloom::{Bloom, Slot};
use super::keys::{deform_into, fingerprint, small_word, KeyHasher, Span, ValueForm};
use super::{AllIndexed, Lacking};
use crate::btree_order::quick::{plain_key, plain_key_offset};
use crate::btree_order::tuple::{decode_into, KeyTuple, StoredAs};
use crate::catalog::xact::CommitLog;
use crate::extended::heap::{for_each_live_chain, set_live, HeapTuples};
use crate::extended::tids::decode::btree_entry_tids;
use crate::layout::btree::{leaf_tuple_tids, BtPageOpaque, P_NONE};
use crate::layout::heap::{HeapTupleHeader, ItemPointer};
use crate::layout::itemid::{ItemId, LpFlags};

/// One worker's counts for one index, added to the index's shared counters once, when the
/// worker finishes ([`Scratch::flush`]): counters updated by every worker on every page would
/// bounce their cache line between the cores.
#[derive(Default)]
struct Counts {
    entries: u64,
    tuples_checked: u64,
    tuples_not_checked: u64,
}

/// A worker's reused buffers (where the current heap tuple's attributes lie, ...) and counts.
#[derive(Default)]
pub struct Scratch<'a> {
    /// By the address of the index's shared state.
    counts: HashMap<usize, (&'a AllIndexed, Counts)>,
    values: Vec<Option<Span>>,
    /// A heap page's lookups: (index number, slot, root line pointer).
    lookups: Vec<(usize, Slot, u16)>,
    /// A leaf page's inserts.
    inserts: Vec<Slot>,
    /// Per index of the table: tuples of the page checked, and not checked.
    checked: Vec<u64>,
    not_checked: Vec<u64>,
}

impl<'a> Scratch<'a> {
    fn counts(&mut self, idx: &'a AllIndexed) -> &mut Counts {
        &mut self
            .counts
            .entry(idx as *const AllIndexed as usize)
            .or_insert_with(|| (idx, Counts::default()))
            .1
    }

    /// Adds this worker's counts to the indexes' shared counters.
    pub fn flush(&mut self) {
        for (_, (idx, c)) in self.counts.drain() {
            idx.entries.fetch_add(c.entries, Ordering::Relaxed);
            idx.tuples_checked
                .fetch_add(c.tuples_checked, Ordering::Relaxed);
            idx.tuples_not_checked
                .fetch_add(c.tuples_not_checked, Ordering::Relaxed);
        }
    }
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
///
/// With `tids`, also collects the heap TIDs of the page's entries in the page's order, dead
/// ones too, as the TID check reads them ([`crate::extended::tids::decode::page_tids`]), from
/// the same walk: `Some(count of entries that did not decode)` when every entry was walked,
/// `None` when the walk stopped early (then `tids` holds only part of the page).
pub fn insert_leaf<'a>(
    idx: &'a AllIndexed,
    leaf: LeafPage<'_>,
    scratch: &mut Scratch<'a>,
    mut tids: Option<&mut Vec<(u32, u16)>>,
) -> Option<u64> {
    let LeafPage {
        page,
        opaque,
        items,
        max_align,
    } = leaf;
    let first = if opaque.btpo_next == P_NONE { 1 } else { 2 };
    let word_key = word_key(idx, max_align);
    let mut decoded = KeyTuple::EMPTY;
    let (mut entries, mut undecoded) = (0u64, 0u64);
    let pending = &mut scratch.inserts;
    pending.clear();
    for item in items.iter().filter(|i| i.offnum >= first) {
        // Entries the server marked dead point at tuples dead to everyone (amcheck skips
        // them too); the TID check still reads their TIDs.
        if item.lp_flags != LpFlags::Normal {
            if let Some(out) = tids.as_deref_mut() {
                undecoded += u64::from(btree_entry_tids(page, item, out).is_none());
            }
            continue;
        }
        let Some(tuple) =
            page.get(item.lp_off as usize..item.lp_off as usize + item.lp_len as usize)
        else {
            idx.incomplete.store(true, Ordering::Relaxed);
            return None;
        };
        if let Some((slot, tid)) = word_key.and_then(|wk| plain_word_slot(&idx.bloom, tuple, wk)) {
            pending.push(slot);
            if let Some(out) = tids.as_deref_mut() {
                out.push((tid.block, tid.offset));
            }
            entries += 1;
            continue;
        }
        match entry_key(idx, tuple, max_align, &mut decoded)
            .and_then(|kh| insert_tids(&idx.bloom, tuple, kh, pending, tids.as_deref_mut()))
        {
            Some(n) => entries += n,
            None => {
                idx.incomplete.store(true, Ordering::Relaxed);
                return None;
            }
        }
    }
    insert_pending(&idx.bloom, pending);
    scratch.counts(idx).entries += entries;
    Some(undecoded)
}

/// A live B-tree leaf page, as [`insert_leaf`] reads it.
#[derive(Clone, Copy)]
pub struct LeafPage<'p> {
    pub page: &'p [u8],
    pub opaque: &'p BtPageOpaque,
    /// The page's line pointers, in offset order.
    pub items: &'p [ItemId],
    pub max_align: usize,
}

/// Where the key of a plain leaf tuple lies, `(offset, length)`, when the index has one
/// fixed-width column of up to 8 bytes (an integer, a date, a timestamp, an oid...).
fn word_key(idx: &AllIndexed, max_align: usize) -> Option<(usize, usize)> {
    let ([column], [stored]) = (&idx.columns[..], &idx.stored[..]) else {
        return None;
    };
    let len = usize::try_from(stored.attlen)
        .ok()
        .filter(|n| (1..=8).contains(n))?;
    (column.form == ValueForm::Fixed).then(|| (plain_key_offset(*stored, max_align), len))
}

/// The slot of a plain leaf tuple (one heap TID, no NULL) of an index with a [`word_key`],
/// and its TID: the key read in place as one word, hashed as [`entry_key`] hashes it. `None`
/// for every other tuple.
#[inline]
fn plain_word_slot(
    bloom: &Bloom,
    tuple: &[u8],
    (offset, len): (usize, usize),
) -> Option<(Slot, ItemPointer)> {
    let word = small_word(plain_key(tuple, offset, len)?)?;
    let mut h = KeyHasher::default();
    h.push_word(word, len);
    let tid = ItemPointer::parse(tuple, 0)?;
    let slot = bloom.slot(fingerprint(h.finish(), tid.block, tid.offset), tid.block);
    Some((slot, tid))
}

/// The key hash of one leaf tuple.
fn entry_key<'t>(
    idx: &AllIndexed,
    tuple: &'t [u8],
    max_align: usize,
    decoded: &mut KeyTuple<'t>,
) -> Option<u64> {
    let fixed = idx.columns.iter().all(|c| c.form == ValueForm::Fixed);
    if let Some(key) = plain_fixed_key(&idx.stored, tuple, max_align).filter(|_| fixed) {
        let mut h = KeyHasher::default();
        h.push(Some(key), ValueForm::Fixed).ok()?;
        return Some(h.finish());
    }
    decode_into(tuple, &idx.stored, max_align, decoded)?;
    if decoded.natts() != idx.columns.len() {
        return None;
    }
    let mut h = KeyHasher::default();
    for (i, col) in idx.columns.iter().enumerate() {
        h.push(decoded.key(i), index_form(col.form)).ok()?;
    }
    Some(h.finish())
}

/// The key of a plain leaf tuple (no NULL, no posting list) of an index with one fixed-width
/// column, read in place: the bytes [`decode_into`] finds, without walking the tuple (most
/// entries of an index on an integer, a timestamp or a uuid). `None` for every other tuple,
/// which is decoded in full.
fn plain_fixed_key<'t>(stored: &[StoredAs], tuple: &'t [u8], max_align: usize) -> Option<&'t [u8]> {
    let [stored] = stored else {
        return None;
    };
    let len = usize::try_from(stored.attlen).ok().filter(|&n| n > 0)?;
    plain_key(tuple, plain_key_offset(*stored, max_align), len)
}

/// Queues the slots of the fingerprints of a tuple's heap TIDs (its `t_tid`, or each TID of
/// its posting list), and the TIDs onto `tids` if given; returns how many, `None` when the
/// tuple does not decode (nothing queued then).
fn insert_tids(
    bloom: &Bloom,
    tuple: &[u8],
    kh: u64,
    pending: &mut Vec<Slot>,
    mut tids: Option<&mut Vec<(u32, u16)>>,
) -> Option<u64> {
    let mut n = 0;
    leaf_tuple_tids(tuple, |p| {
        pending.push(bloom.slot(fingerprint(kh, p.block, p.offset), p.block));
        if let Some(out) = tids.as_deref_mut() {
            out.push((p.block, p.offset));
        }
        n += 1;
    })?;
    Some(n)
}

/// Sets a page's fingerprints: first asks for every word they fall in (the loads overlap,
/// where one insert after another would wait for each cache miss of an index not in table
/// order), then sets the bits (under the filter's lock, once for the page).
fn insert_pending(bloom: &Bloom, pending: &[Slot]) {
    for &slot in pending {
        bloom.prefetch(slot);
    }
    bloom.insert_all(pending);
}

/// The key hash of a heap tuple without NULLs that has attribute `attnum`, read at the
/// index's [`super::heap_word`] place `(offset, len)`: what the walk of the tuple would find
/// there, hashed alike. `None` for every other tuple.
#[inline]
fn heap_word_key(
    tuple: &[u8],
    h: &HeapTupleHeader,
    attnum: usize,
    (offset, len): (usize, usize),
) -> Option<u64> {
    if h.has_nulls() || usize::from(h.natts()) < attnum {
        return None;
    }
    let start = usize::from(h.t_hoff) + offset;
    let word = small_word(tuple.get(start..start + len)?)?;
    let mut k = KeyHasher::default();
    k.push_word(word, len);
    Some(k.finish())
}

/// Looks up, for every certainly live tuple of a heap page, its entry in each index of the
/// table; records the entries an index lacks. The page's fingerprints are computed first and
/// looked up after, so that their cache misses overlap. With `live`, also the page's live-root
/// bitmap, as [`crate::extended::heap::live_roots`] makes it (from the same walk).
pub fn probe_heap<'a>(
    indexes: &'a [Arc<AllIndexed>],
    tuples: &HeapTuples<'_>,
    clog: &CommitLog,
    scratch: &mut Scratch<'a>,
    mut live: Option<&mut Vec<u8>>,
) {
    if let Some(bits) = live.as_deref_mut() {
        bits.clear();
        bits.resize(tuples.items.len().div_ceil(8), 0);
    }
    let blkno = tuples.blkno;
    let Some(upto) = indexes.iter().map(|i| i.upto).max() else {
        return;
    };
    let Some(attrs) = indexes.first().map(|i| &i.heap_attrs) else {
        return;
    };
    let Scratch {
        values,
        lookups,
        checked,
        not_checked,
        ..
    } = &mut *scratch;
    lookups.clear();
    checked.clear();
    checked.resize(indexes.len(), 0);
    not_checked.clear();
    not_checked.resize(indexes.len(), 0);
    for_each_live_chain(tuples, clog, |root, _member, tuple, h| {
        if let Some(bits) = live.as_deref_mut() {
            set_live(bits, root);
        }
        // The tuple is walked only for an index whose key has no fixed place.
        let mut deformed = None;
        for (n, idx) in indexes.iter().enumerate() {
            let fixed = idx
                .heap_word
                .and_then(|w| heap_word_key(tuple, h, idx.upto, w));
            let key = match fixed {
                Some(key) => key,
                None => {
                    let walked =
                        *deformed.get_or_insert_with(|| deform_into(tuple, h, attrs, upto, values));
                    if walked.is_err() && idx.upto > values.len() {
                        not_checked[n] += 1;
                        continue;
                    }
                    let mut k = KeyHasher::default();
                    let keyed = idx.columns.iter().try_for_each(|c| {
                        let v = values.get(c.heap_attnum - 1).copied().flatten();
                        k.push(v.and_then(|s| s.of(tuple)), c.form)
                    });
                    if keyed.is_err() {
                        not_checked[n] += 1;
                        continue;
                    }
                    k.finish()
                }
            };
            checked[n] += 1;
            let slot = idx.bloom.slot(fingerprint(key, blkno, root), blkno);
            idx.bloom.prefetch(slot);
            lookups.push((n, slot, root));
        }
    });
    for &(n, slot, root) in lookups.iter() {
        let idx = &indexes[n];
        if !idx.bloom.contains(slot) {
            idx.record_lacking(Lacking {
                heap_block: blkno,
                heap_offset: root,
            });
        }
    }
    for (n, idx) in indexes.iter().enumerate() {
        let (page_checked, page_not_checked) = (scratch.checked[n], scratch.not_checked[n]);
        let counts = scratch.counts(idx);
        counts.tuples_checked += page_checked;
        counts.tuples_not_checked += page_not_checked;
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
