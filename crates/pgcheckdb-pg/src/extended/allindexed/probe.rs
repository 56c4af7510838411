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
                undecoded += u64::from(dead_entry_tids(page, item, out).is_none());
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

/// The TIDs of an entry the server marked dead, onto `out`, when it has storage; `None` when
/// it does not decode.
fn dead_entry_tids(page: &[u8], item: &ItemId, out: &mut Vec<(u32, u16)>) -> Option<()> {
    if !item.has_storage() {
        return Some(());
    }
    let Some(tuple) = page.get(item.lp_off as usize..item.lp_off as usize + item.lp_len as usize)
    else {
        return Some(()); // not on the page: the TID check skips it too
    };
    leaf_tuple_tids(tuple, |p| out.push((p.block, p.offset)))
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
mod tests {
    use super::*;

    /// A leaf tuple with heap TID (1, 2), `t_info` flags `flags` and data `data` after the
    /// 8-byte header.
    fn tuple(flags: u16, data: &[u8]) -> Vec<u8> {
        let mut t = vec![0, 0, 1, 0, 2, 0, 0, 0];
        t.extend(data);
        let info = t.len() as u16 | flags;
        t[6..8].copy_from_slice(&info.to_le_bytes());
        t
    }

    #[test]
    fn a_plain_fixed_key_is_what_the_full_decoding_finds() {
        for (attlen, align) in [(4i16, 4usize), (8, 8), (16, 1), (2, 2)] {
            let stored = [StoredAs { attlen, align }];
            let data: Vec<u8> = (1..=attlen as u8).collect();
            let t = tuple(0, &data);
            let mut decoded = KeyTuple::EMPTY;
            decode_into(&t, &stored, 8, &mut decoded).expect("decodes");
            assert_eq!(plain_fixed_key(&stored, &t, 8), decoded.key(0));
            assert_eq!(plain_fixed_key(&stored, &t, 8), Some(&data[..]));
        }
        let int4 = [StoredAs {
            attlen: 4,
            align: 4,
        }];
        // NULL bitmap, posting list or pivot, a size that disagrees, a key past the end, two
        // columns, a variable-length column: decoded in full instead.
        assert_eq!(plain_fixed_key(&int4, &tuple(0x8000, &[0; 8]), 8), None);
        assert_eq!(plain_fixed_key(&int4, &tuple(0x2000, &[0; 8]), 8), None);
        let mut wrong_size = tuple(0, &[0; 4]);
        wrong_size.push(0);
        assert_eq!(plain_fixed_key(&int4, &wrong_size, 8), None);
        assert_eq!(plain_fixed_key(&int4, &tuple(0, &[0; 2]), 8), None);
        assert_eq!(plain_fixed_key(&[int4[0]; 2], &tuple(0, &[0; 8]), 8), None);
        let text = [StoredAs {
            attlen: -1,
            align: 4,
        }];
        assert_eq!(
            plain_fixed_key(&text, &tuple(0, &[5 << 1 | 1, 1, 2, 3, 4]), 8),
            None
        );
    }

    /// A B-tree leaf tuple with heap TID `tid` (or a posting list's place and size), `t_info`
    /// flags `flags` and data `data` after the 8-byte header.
    fn leaf_tuple(tid: (u32, u16), flags: u16, data: &[u8]) -> Vec<u8> {
        let mut t = (tid.0 as u16).to_le_bytes().to_vec();
        t.splice(0..0, ((tid.0 >> 16) as u16).to_le_bytes());
        t.extend(tid.1.to_le_bytes());
        t.extend([0, 0]);
        t.extend(data);
        let info = t.len() as u16 | flags;
        t[6..8].copy_from_slice(&info.to_le_bytes());
        t
    }

    /// A rightmost leaf page holding `tuples` with line pointer flags, and its line pointers.
    fn leaf_page(tuples: &[(LpFlags, Vec<u8>)]) -> (Vec<u8>, Vec<ItemId>) {
        let special = 8192 - 16;
        let mut page = vec![0u8; 8192];
        let mut upper = special;
        let mut items = Vec::new();
        for (i, (flags, t)) in tuples.iter().enumerate() {
            upper -= t.len().next_multiple_of(8);
            page[upper..upper + t.len()].copy_from_slice(t);
            let item = ItemId {
                offnum: i as u16 + 1,
                lp_off: upper as u16,
                lp_flags: *flags,
                lp_len: t.len() as u16,
            };
            let word =
                u32::from(item.lp_off) | (*flags as u32) << 15 | u32::from(item.lp_len) << 17;
            page[24 + 4 * i..28 + 4 * i].copy_from_slice(&word.to_le_bytes());
            items.push(item);
        }
        page[12..14].copy_from_slice(&((24 + 4 * tuples.len()) as u16).to_le_bytes());
        page[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
        page[16..18].copy_from_slice(&(special as u16).to_le_bytes());
        page[special + 12] = crate::layout::btree::flags::BTP_LEAF as u8;
        (page, items)
    }

    /// An int4 index of table column 1, for heap -> index.
    fn int4_index(columns: usize) -> AllIndexed {
        use super::super::keys::KeyColumn;
        let stored = StoredAs {
            attlen: 4,
            align: 4,
        };
        let column = |n| KeyColumn {
            heap_attnum: n,
            form: ValueForm::Fixed,
        };
        AllIndexed {
            name: "i".into(),
            heap_fork: 0,
            index_fork: 1,
            columns: (1..=columns).map(column).collect(),
            stored: vec![stored; columns],
            heap_attrs: vec![attr(4, 4); columns].into(),
            upto: columns,
            heap_word: None,
            bloom: Bloom::with_bits(1 << 16, 16),
            incomplete: std::sync::atomic::AtomicBool::new(false),
            entries: Default::default(),
            tuples_checked: Default::default(),
            tuples_not_checked: Default::default(),
            lacking: Default::default(),
            lacking_count: Default::default(),
        }
    }

    #[test]
    fn the_leaf_walk_collects_the_tids_the_tid_check_reads() {
        use crate::extended::tids::decode::page_tids;
        use crate::extended::tids::IndexAm;
        use crate::layout::btree::{BT_IS_POSTING, INDEX_ALT_TID_MASK};
        use crate::page::PageHeader;
        let key = |k: i32, more: usize| k.to_le_bytes().repeat(more + 1);
        let posting = |more: usize| {
            // Posting list after the 8-byte header and the key (MAXALIGNed), two TIDs.
            let at = (8 + 4 * (more + 1)).next_multiple_of(8) as u32;
            let mut data = key(9, more);
            data.resize(at as usize - 8, 0);
            data.extend([0, 0, 5, 0, 1, 0, 0, 0, 5, 0, 3, 0]);
            leaf_tuple((at, BT_IS_POSTING | 2), INDEX_ALT_TID_MASK, &data)
        };
        for more in [0, 1] {
            let idx = int4_index(more + 1);
            let mut broken = posting(more);
            broken.truncate(broken.len() - 6); // its list runs past its end
            let (page, items) = leaf_page(&[
                (LpFlags::Normal, leaf_tuple((3, 4), 0, &key(7, more))),
                (LpFlags::Normal, posting(more)),
                (LpFlags::Dead, leaf_tuple((8, 2), 0, &key(1, more))),
                (LpFlags::Dead, broken),
                (LpFlags::Normal, leaf_tuple((1 << 17, 1), 0, &key(2, more))),
            ]);
            let h = PageHeader::parse(&page).expect("header");
            let opaque = BtPageOpaque::parse(&page, h.pd_special as usize).expect("opaque");
            let mut expected = Vec::new();
            let undecoded = page_tids(IndexAm::Btree, &page, &h, &items, &mut expected);
            let leaf = LeafPage {
                page: &page,
                opaque: &opaque,
                items: &items,
                max_align: 8,
            };
            let mut got = Vec::new();
            let walked = insert_leaf(&idx, leaf, &mut Scratch::default(), Some(&mut got));
            assert_eq!(walked, Some(undecoded), "{more} more columns");
            assert_eq!(undecoded, 1);
            assert_eq!(got, expected);
            assert_eq!(got, [(3, 4), (5, 1), (5, 3), (8, 2), (1 << 17, 1)]);
            assert!(!idx.incomplete.load(Ordering::Relaxed));
            // A live entry that does not decode stops the walk: the caller decodes the page again.
            let mut bad = posting(more);
            bad.truncate(bad.len() - 6);
            let (page, items) = leaf_page(&[(LpFlags::Normal, bad)]);
            let leaf = LeafPage {
                page: &page,
                items: &items,
                ..leaf
            };
            assert_eq!(
                insert_leaf(&idx, leaf, &mut Scratch::default(), Some(&mut got)),
                None
            );
            assert!(idx.incomplete.load(Ordering::Relaxed));
        }
    }

    fn attr(attlen: i16, align: usize) -> crate::catalog::attributes::Attribute {
        crate::catalog::attributes::Attribute {
            name: "c".into(),
            type_name: None,
            attlen,
            align,
            dropped: false,
        }
    }

    /// A heap tuple of `natts` attributes with `data` after a 24-byte header (`t_hoff` 24).
    fn heap_tuple(natts: u16, infomask: u16, data: &[u8]) -> Vec<u8> {
        let mut t = vec![0u8; 24];
        t[18..20].copy_from_slice(&natts.to_le_bytes());
        t[20..22].copy_from_slice(&infomask.to_le_bytes());
        t[22] = 24;
        t.extend(data);
        t
    }

    #[test]
    fn a_key_at_its_fixed_place_hashes_as_the_walked_tuple() {
        use super::super::keys::KeyColumn;
        // (a int4, b int8, c text, d int8, e uuid): b sits at 8, after a and its padding; d
        // follows a varlena (no fixed place); e is longer than a word.
        let attrs = [attr(4, 4), attr(8, 8), attr(-1, 4), attr(8, 8), attr(16, 1)];
        let col = |heap_attnum, form| KeyColumn { heap_attnum, form };
        assert_eq!(
            super::super::heap_word(&[col(2, ValueForm::Fixed)], &attrs),
            Some((8, 8))
        );
        assert_eq!(
            super::super::heap_word(&[col(1, ValueForm::Fixed)], &attrs),
            Some((0, 4))
        );
        assert_eq!(
            super::super::heap_word(&[col(4, ValueForm::Fixed)], &attrs),
            None
        );
        assert_eq!(
            super::super::heap_word(&[col(5, ValueForm::Fixed)], &attrs),
            None
        );
        let two = [col(1, ValueForm::Fixed), col(2, ValueForm::Fixed)];
        assert_eq!(super::super::heap_word(&two, &attrs), None);

        let mut data = 7i32.to_le_bytes().to_vec();
        data.extend([0; 4]);
        data.extend(0x0102_0304_0506_0708i64.to_le_bytes());
        data.extend([3 << 1 | 1, b'x', b'y']);
        let t = heap_tuple(3, 0, &data);
        let h = HeapTupleHeader::parse(&t).expect("header");
        let mut spans = Vec::new();
        deform_into(&t, &h, &attrs, 2, &mut spans).expect("walks");
        let mut walked = KeyHasher::default();
        walked
            .push(spans[1].and_then(|s| s.of(&t)), ValueForm::Fixed)
            .expect("keyed");
        assert_eq!(heap_word_key(&t, &h, 2, (8, 8)), Some(walked.finish()));
        // A tuple with NULLs, or one without the attribute (added later): walked instead.
        let with_nulls = heap_tuple(3, 0x0001, &data);
        let h = HeapTupleHeader::parse(&with_nulls).expect("header");
        assert_eq!(heap_word_key(&with_nulls, &h, 2, (8, 8)), None);
        let short = heap_tuple(1, 0, &data[..4]);
        let h = HeapTupleHeader::parse(&short).expect("header");
        assert_eq!(heap_word_key(&short, &h, 2, (8, 8)), None);
    }
}
