//! The scan side of heap -> index: a B-tree leaf page fingerprints each entry, a heap page each
//! live tuple's entries. By [`Method::Exact`], the heap page (first phase) stores its live
//! roots and adds its fingerprints into its block's sums, and the leaf page (second phase)
//! subtracts those of its entries that name a live root. By [`Method::Filter`], the leaf page
//! (first phase) puts its fingerprints into the index's filter and the heap page (second phase)
//! looks its own up.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::bloom::{Bloom, Slot};
use super::exact::{LiveMap, Sums};
use super::keys::{deform_into, fingerprint, small_word, KeyHasher, Span, Unkeyable, ValueForm};
use super::{AllIndexed, Lacking, Method};
use crate::catalog::attributes::Attribute;
use crate::catalog::xact::CommitLog;
use crate::check::extended::heap::{for_each_live_chain, set_live, HeapTuples};
use crate::check::extended::tids::decode::btree_entry_tids;
use crate::check::order::quick::{plain_key, plain_key_offset};
use crate::check::order::tuple::{decode_into, KeyTuple, StoredAs};
use crate::format::btree::{leaf_tuple_tids, BtPageOpaque, P_NONE};
use crate::format::heap::{HeapTupleHeader, ItemPointer};
use crate::format::itemid::{ItemId, LpFlags};

/// One worker's counts for one index, added to the index's shared counters once, when the
/// worker finishes ([`Scratch::flush`]): counters updated by every worker on every page would
/// bounce their cache line between the cores.
#[derive(Default)]
struct Counts {
    entries: u64,
    tids_confirmed: u64,
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
    /// A leaf page's entries, then their filter slots or the live ones' `(block,
    /// fingerprint)`.
    entries: Vec<Entry>,
    slots: Vec<Slot>,
    live_entries: Vec<(u32, u64)>,
    /// Per index of the table: tuples of the page checked, and not checked, and the sum of
    /// its fingerprints.
    checked: Vec<u64>,
    not_checked: Vec<u64>,
    page_sums: Vec<u64>,
    /// A heap page's live-root bitmap when no other check asked for it.
    bits: Vec<u8>,
}

/// One fingerprinted entry of a leaf page and its heap TID.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub fingerprint: u64,
    pub block: u32,
    pub offset: u16,
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
            idx.tids_confirmed
                .fetch_add(c.tids_confirmed, Ordering::Relaxed);
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

/// Fingerprints every entry of a live leaf page into the index's filter or sums. A tuple
/// that cannot be read makes the index incomplete (nothing is then reported from it).
///
/// With `tids`, also collects the heap TIDs of the page's entries in the page's order, dead
/// ones too, as the TID check reads them ([`crate::check::extended::tids::decode::page_tids`]), from
/// the same walk: `Some(count of entries that did not decode)` when every entry was walked,
/// `None` when the walk stopped early (then `tids` holds only part of the page). By sums, the
/// TIDs that name a live root are valid and left out of `tids` (counted as confirmed).
pub fn insert_leaf<'a>(
    idx: &'a AllIndexed,
    leaf: LeafPage<'_>,
    scratch: &mut Scratch<'a>,
    mut tids: Option<&mut Vec<(u32, u16)>>,
) -> Option<u64> {
    let Some((entries, undecoded)) =
        walk_leaf(idx, leaf, &mut scratch.entries, tids.as_deref_mut())
    else {
        idx.incomplete.store(true, Ordering::Relaxed);
        return None;
    };
    let confirmed = match &idx.method {
        Method::Filter(bloom) => {
            insert_pending(bloom, &scratch.entries, &mut scratch.slots);
            0
        }
        Method::Exact { live, sums } => {
            subtract_live(live, sums, &scratch.entries, &mut scratch.live_entries);
            tids.map_or(0, |t| confirm_live(live, t))
        }
    };
    let counts = scratch.counts(idx);
    counts.entries += entries;
    counts.tids_confirmed += confirmed;
    Some(undecoded)
}

/// The fingerprints of a live leaf page's entries onto `pending` (cleared first), and with
/// `tids` their TIDs as [`insert_leaf`] says; returns how many entries and how many did not
/// decode among those the server marked dead, `None` when a live entry does not decode.
pub(super) fn walk_leaf(
    idx: &AllIndexed,
    leaf: LeafPage<'_>,
    pending: &mut Vec<Entry>,
    mut tids: Option<&mut Vec<(u32, u16)>>,
) -> Option<(u64, u64)> {
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
        let tuple = page.get(item.lp_off as usize..item.lp_off as usize + item.lp_len as usize)?;
        if let Some(entry) = word_key.and_then(|wk| plain_word_entry(tuple, wk)) {
            pending.push(entry);
            if let Some(out) = tids.as_deref_mut() {
                out.push((entry.block, entry.offset));
            }
            entries += 1;
            continue;
        }
        entries += entry_key(idx, tuple, max_align, &mut decoded)
            .and_then(|kh| entry_tids(tuple, kh, pending, tids.as_deref_mut()))?;
    }
    Some((entries, undecoded))
}

/// Subtracts from their blocks' sums the fingerprints of the entries that name a live root:
/// first asks for every live-map word, then for the sums of the live ones (the loads overlap),
/// then subtracts them under the sums' lock.
fn subtract_live(live: &LiveMap, sums: &Sums, entries: &[Entry], out: &mut Vec<(u32, u64)>) {
    for e in entries {
        live.prefetch(e.block, e.offset);
    }
    out.clear();
    for e in entries.iter().filter(|e| live.is_live(e.block, e.offset)) {
        sums.prefetch(e.block);
        out.push((e.block, e.fingerprint));
    }
    sums.subtract_all(out);
}

/// Drops from `tids` those that name a live root (a valid target: nothing for the TID check's
/// merge to do) and returns how many.
fn confirm_live(live: &LiveMap, tids: &mut Vec<(u32, u16)>) -> u64 {
    let before = tids.len();
    tids.retain(|&(block, offset)| !live.is_live(block, offset));
    (before - tids.len()) as u64
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

/// The fingerprint of a plain leaf tuple (one heap TID, no NULL) of an index with a
/// [`word_key`], and its TID: the key read in place as one word, hashed as [`entry_key`]
/// hashes it. `None` for every other tuple.
#[inline]
fn plain_word_entry(tuple: &[u8], (offset, len): (usize, usize)) -> Option<Entry> {
    let word = small_word(plain_key(tuple, offset, len)?)?;
    let mut h = KeyHasher::default();
    h.push_word(word, len);
    let tid = ItemPointer::parse(tuple, 0)?;
    Some(Entry {
        fingerprint: fingerprint(h.finish(), tid.block, tid.offset),
        block: tid.block,
        offset: tid.offset,
    })
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

/// Queues the fingerprints of a tuple's heap TIDs (its `t_tid`, or each TID of its posting
/// list), and the TIDs onto `tids` if given; returns how many, `None` when the tuple does not
/// decode (nothing queued then).
fn entry_tids(
    tuple: &[u8],
    kh: u64,
    pending: &mut Vec<Entry>,
    mut tids: Option<&mut Vec<(u32, u16)>>,
) -> Option<u64> {
    let mut n = 0;
    leaf_tuple_tids(tuple, |p| {
        pending.push(Entry {
            fingerprint: fingerprint(kh, p.block, p.offset),
            block: p.block,
            offset: p.offset,
        });
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
fn insert_pending(bloom: &Bloom, entries: &[Entry], slots: &mut Vec<Slot>) {
    slots.clear();
    for e in entries {
        let slot = bloom.slot(e.fingerprint, e.block);
        bloom.prefetch(slot);
        slots.push(slot);
    }
    bloom.insert_all(slots);
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

/// The key hash of a heap tuple for index `idx`, from where its attributes lie (`values`,
/// as [`deform_into`] found them); `None` when a key column's value cannot be hashed (in
/// TOAST, or missing).
fn values_key(idx: &AllIndexed, tuple: &[u8], values: &[Option<Span>]) -> Option<u64> {
    let mut k = KeyHasher::default();
    let keyed = idx.columns.iter().try_for_each(|c| {
        let v = values.get(c.heap_attnum - 1).copied().flatten();
        k.push(v.and_then(|s| s.of(tuple)), c.form)
    });
    keyed.ok().map(|()| k.finish())
}

/// One heap tuple's key hashes for the indexes of its table: a key with a fixed place is read
/// there, the others from one walk of the tuple (up to `upto`, the highest attribute any of
/// the indexes needs), made on the first key that needs it.
pub(super) struct TupleKeys<'t, 'v> {
    tuple: &'t [u8],
    h: &'t HeapTupleHeader,
    attrs: &'t [Attribute],
    upto: usize,
    values: &'v mut Vec<Option<Span>>,
    walked: Option<Result<(), Unkeyable>>,
}

impl<'t, 'v> TupleKeys<'t, 'v> {
    #[inline]
    pub(super) fn new(
        tuple: &'t [u8],
        h: &'t HeapTupleHeader,
        attrs: &'t [Attribute],
        upto: usize,
        values: &'v mut Vec<Option<Span>>,
    ) -> Self {
        TupleKeys {
            tuple,
            h,
            attrs,
            upto,
            values,
            walked: None,
        }
    }

    /// The key hash for index `idx`; `None` when a key column's value cannot be hashed (in
    /// TOAST, or missing from the tuple).
    #[inline]
    pub(super) fn key(&mut self, idx: &AllIndexed) -> Option<u64> {
        let fixed = idx
            .heap_word
            .and_then(|w| heap_word_key(self.tuple, self.h, idx.upto, w));
        if fixed.is_some() {
            return fixed;
        }
        let (tuple, h, attrs, upto) = (self.tuple, self.h, self.attrs, self.upto);
        let values = &mut *self.values;
        let walked = *self
            .walked
            .get_or_insert_with(|| deform_into(tuple, h, attrs, upto, values));
        if walked.is_err() && idx.upto > self.values.len() {
            return None;
        }
        values_key(idx, self.tuple, self.values)
    }
}

/// Fingerprints, for every certainly live tuple of a heap page, its entry in each index of
/// the table: by sums, adds them into the block's sums and stores the page's live roots; by
/// filters, looks them up and records the entries an index lacks (the page's fingerprints are
/// computed first and looked up after, so that their cache misses overlap). With `live`, also
/// the page's live-root bitmap, as [`crate::check::extended::heap::live_roots`] makes it (from the
/// same walk).
pub fn probe_heap<'a>(
    indexes: &'a [Arc<AllIndexed>],
    tuples: &HeapTuples<'_>,
    clog: &CommitLog,
    scratch: &mut Scratch<'a>,
    live: Option<&mut Vec<u8>>,
) {
    let blkno = tuples.blkno;
    let Some(upto) = indexes.iter().map(|i| i.upto).max() else {
        return;
    };
    let Some(first) = indexes.first() else {
        return;
    };
    // The table's indexes share one method; by sums the live roots are always kept.
    let live_map = first.exact().map(|(map, _)| map);
    let mut own_bits = std::mem::take(&mut scratch.bits);
    let mut bits = match live {
        Some(bits) => Some(bits),
        None => live_map.is_some().then_some(&mut own_bits),
    };
    if let Some(b) = bits.as_deref_mut() {
        b.clear();
        b.resize(tuples.items.len().div_ceil(8), 0);
    }
    let attrs = &first.heap_attrs;
    let Scratch {
        values,
        lookups,
        checked,
        not_checked,
        page_sums,
        ..
    } = &mut *scratch;
    lookups.clear();
    for v in [&mut *checked, &mut *not_checked, &mut *page_sums] {
        v.clear();
        v.resize(indexes.len(), 0);
    }
    for_each_live_chain(tuples, clog, |root, _member, tuple, h| {
        if let Some(bits) = bits.as_deref_mut() {
            set_live(bits, root);
        }
        let mut keys = TupleKeys::new(tuple, h, attrs, upto, values);
        for (n, idx) in indexes.iter().enumerate() {
            let Some(key) = keys.key(idx) else {
                not_checked[n] += 1;
                continue;
            };
            checked[n] += 1;
            let fp = fingerprint(key, blkno, root);
            match &idx.method {
                Method::Exact { .. } => page_sums[n] = page_sums[n].wrapping_add(fp),
                Method::Filter(bloom) => {
                    let slot = bloom.slot(fp, blkno);
                    bloom.prefetch(slot);
                    lookups.push((n, slot, root));
                }
            }
        }
    });
    // By sums, a block with a tuple not fingerprinted is set aside whole, and so is a page with
    // more line pointers than its map holds (the standard checks let no such page through).
    let overflow = live_map.is_some_and(|map| tuples.items.len() > map.capacity());
    let aside = |not_checked: u64| overflow || not_checked > 0;
    if let (Some(map), Some(bits)) = (live_map, bits.as_deref()) {
        map.store(blkno, bits);
        for (n, idx) in indexes.iter().enumerate() {
            if let Some((_, sums)) = idx.exact() {
                sums.store_heap(blkno, scratch.page_sums[n]);
                if aside(scratch.not_checked[n]) {
                    sums.set_aside(blkno);
                }
            }
        }
    }
    scratch.bits = own_bits;
    for &(n, slot, root) in scratch.lookups.iter() {
        let idx = &indexes[n];
        if idx.bloom().is_some_and(|b| !b.contains(slot)) {
            idx.record_lacking(Lacking {
                heap_block: blkno,
                heap_offset: root,
                other_key_at: None,
            });
        }
    }
    for (n, idx) in indexes.iter().enumerate() {
        let (mut page_checked, mut page_not_checked) = (scratch.checked[n], scratch.not_checked[n]);
        if idx.exact().is_some() && aside(page_not_checked) {
            page_not_checked += std::mem::take(&mut page_checked);
        }
        let counts = scratch.counts(idx);
        counts.tuples_checked += page_checked;
        counts.tuples_not_checked += page_not_checked;
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
