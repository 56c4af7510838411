//! The scan side of the uniqueness check: the runs of byte-equal keys of a unique index's leaf
//! page (first and last runs always, inner runs of two or more heap TIDs), which the merge joins
//! across siblings ([`super::unique`]).

use super::btree::view::{first_data_key, item};
use super::facts::RunPlace;
use super::plan::UniqueSpec;
use crate::format::btree::{BtPageOpaque, BT_IS_POSTING, BT_OFFSET_MASK};
use crate::format::bytes::{align_up, array, le_u16, le_u32};
use crate::format::heap::{ItemPointer, SIZE_OF_ITEM_POINTER};
use crate::format::index_tuple::{
    INDEX_ALT_TID_MASK, INDEX_NULL_MASK, INDEX_SIZE_MASK, SIZE_OF_INDEX_ATTR_BITMAP,
    SIZE_OF_INDEX_TUPLE, T_INFO_OFFSET,
};
use crate::format::itemid::{ItemId, LpFlags};
use crate::format::toast::VARTAG_1B_E;

/// One leaf entry of a unique index, borrowed from the page: its key (null bits of the key
/// columns and key data) and where its heap TIDs are.
struct Entry<'p> {
    offnum: u16,
    nulls: u32,
    key: &'p [u8],
    tuple: &'p [u8],
    /// `(start, count)` of a posting list; `None` for a plain tuple (its TID is `t_tid`).
    posting: Option<(usize, usize)>,
}

impl Entry<'_> {
    fn same_key(&self, other: &Entry<'_>) -> bool {
        self.nulls == other.nulls && same_bytes(self.key, other.key)
    }

    fn tid_count(&self) -> usize {
        self.posting.map_or(1, |(_, n)| n)
    }

    fn push_tids(&self, out: &mut Vec<(u32, u16, u16)>) {
        let at = |off: usize| ItemPointer::parse(self.tuple, off);
        match self.posting {
            None => out.extend(at(0).map(|p| (p.block, p.offset, self.offnum))),
            Some((start, n)) => out.extend(
                (0..n)
                    .filter_map(|i| at(start + SIZE_OF_ITEM_POINTER * i))
                    .map(|p| (p.block, p.offset, self.offnum)),
            ),
        }
    }
}

/// Whether two keys are byte-equal; keys of up to 16 bytes (integers, uuids, short text) are
/// compared with two word loads each instead of a call to `memcmp`.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let n = a.len();
    if !(4..=16).contains(&n) {
        return a == b;
    }
    // Two overlapping loads cover the key: its first and its last 4 or 8 bytes (loads of a
    // fixed width: a width chosen at run time would copy through `memcpy`). Both keys hold
    // them, so no load is `None`.
    if n >= 8 {
        array::<8>(a, 0) == array::<8>(b, 0) && array::<8>(a, n - 8) == array::<8>(b, n - 8)
    } else {
        array::<4>(a, 0) == array::<4>(b, 0) && array::<4>(a, n - 4) == array::<4>(b, n - 4)
    }
}

/// A run found: where it sits, its first entry's offset, its key, its heap TIDs.
type FoundRun = (RunPlace, u16, Vec<u8>, Vec<(u32, u16, u16)>);

/// A group of consecutive entries with byte-equal keys, by line pointer offsets.
#[derive(Clone, Copy)]
struct Group {
    from: u16,
    to: u16,
    tids: usize,
}

/// The runs of byte-equal keys of a unique index's leaf page: the first and last runs always
/// (they may continue on the siblings), inner runs when they hold two or more TIDs. Entries are
/// compared in place, each with the one before it, in one pass; only the runs kept are read
/// again, to copy their key and TIDs.
pub fn unique_runs(
    page: &[u8],
    o: &BtPageOpaque,
    items: &[ItemId],
    spec: &UniqueSpec,
    max_align: usize,
) -> Vec<FoundRun> {
    let entries = |offnums: std::ops::RangeInclusive<u16>| {
        offnums.filter_map(move |offnum| {
            // A killed entry's heap tuples are dead to everyone.
            if items[offnum as usize - 1].lp_flags == LpFlags::Dead {
                return None;
            }
            entry(item(page, items, offnum)?, offnum, spec, max_align)
        })
    };
    let mut runs = Vec::new();
    let mut first: Option<Group> = None;
    let mut current: Option<(Entry<'_>, Group)> = None;
    for e in entries(first_data_key(o)..=items.len() as u16) {
        match &mut current {
            Some((head, g)) if head.same_key(&e) => {
                g.to = e.offnum;
                g.tids += e.tid_count();
            }
            _ => {
                let g = Group {
                    from: e.offnum,
                    to: e.offnum,
                    tids: e.tid_count(),
                };
                if let Some((_, ended)) = current.replace((e, g)) {
                    match first {
                        None => first = Some(ended),
                        Some(_) if ended.tids >= 2 => {
                            runs.push(run_of(ended, RunPlace::Inner, &entries))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    let Some((_, last)) = current else {
        return runs;
    };
    match first {
        None => runs.push(run_of(last, RunPlace::Whole, &entries)),
        Some(f) => {
            runs.insert(0, run_of(f, RunPlace::First, &entries));
            runs.push(run_of(last, RunPlace::Last, &entries));
        }
    }
    runs
}

/// The key and heap TIDs of group `g`, read again from the page's entries.
fn run_of<'p, I: Iterator<Item = Entry<'p>>>(
    g: Group,
    place: RunPlace,
    entries: &impl Fn(std::ops::RangeInclusive<u16>) -> I,
) -> FoundRun {
    let mut key = Vec::new();
    let mut tids = Vec::new();
    for e in entries(g.from..=g.to) {
        if key.is_empty() {
            key.extend_from_slice(&e.nulls.to_le_bytes());
            key.extend_from_slice(e.key);
        }
        e.push_tids(&mut tids);
    }
    (place, g.from, key, tids)
}

/// The comparable key of a non-pivot leaf tuple and where its heap TIDs are; `None` for a pivot
/// tuple, a tuple whose key has a NULL (when NULLs are distinct), or one that cannot be decoded.
fn entry<'p>(t: &'p [u8], offnum: u16, spec: &UniqueSpec, max_align: usize) -> Option<Entry<'p>> {
    let info = le_u16(t, T_INFO_OFFSET)?;
    let size = ((info & INDEX_SIZE_MASK) as usize).min(t.len());
    let tid = ItemPointer::parse(t, 0)?;
    let has_nulls = info & INDEX_NULL_MASK != 0;
    let (key_end, posting) = if info & INDEX_ALT_TID_MASK == 0 {
        (size, None)
    } else if tid.offset & BT_IS_POSTING != 0 {
        let start = tid.block as usize;
        let n = (tid.offset & BT_OFFSET_MASK) as usize;
        if start.checked_add(n * 6)? > t.len() {
            return None;
        }
        (start.min(size), Some((start, n)))
    } else {
        return None; // a pivot tuple
    };
    let data_off = if has_nulls {
        crate::check::standard::max_align(
            SIZE_OF_INDEX_TUPLE + SIZE_OF_INDEX_ATTR_BITMAP,
            max_align,
        )
    } else {
        crate::check::standard::max_align(SIZE_OF_INDEX_TUPLE, max_align)
    };
    // Bit i set: key column i is NULL (the bitmap stores "not null" bits).
    let nkeys = spec.nkeyatts.min(32);
    let key_mask = if nkeys == 32 {
        u32::MAX
    } else {
        (1u32 << nkeys) - 1
    };
    let nulls = if has_nulls {
        // `IndexAttributeBitMapData`: SIZE_OF_INDEX_ATTR_BITMAP bytes after the header.
        !le_u32(t, SIZE_OF_INDEX_TUPLE)? & key_mask
    } else {
        0
    };
    if nulls != 0 && !spec.nulls_not_distinct {
        return None;
    }
    let key_end = if spec.natts > spec.nkeyatts {
        key_columns_end(t, data_off, key_end, nulls, spec)?
    } else {
        key_end
    };
    Some(Entry {
        offnum,
        nulls,
        key: t.get(data_off..key_end)?,
        tuple: t,
        posting,
    })
}

/// Where the key columns end, before the INCLUDE columns: walks the key attributes with their
/// length and alignment. `None` when the index's columns are not known.
fn key_columns_end(
    t: &[u8],
    data_off: usize,
    limit: usize,
    nulls: u32,
    spec: &UniqueSpec,
) -> Option<usize> {
    let attrs = spec.attributes.as_ref()?;
    let mut off = data_off;
    for (i, att) in attrs.iter().take(spec.nkeyatts).enumerate() {
        if i < 32 && nulls & (1 << i) != 0 {
            continue;
        }
        let len = match att.attlen {
            n if n > 0 => {
                off = align_up(off - data_off, att.align) + data_off;
                n as usize
            }
            -1 => {
                let first = *t.get(off)?;
                if first & 0x01 == 0 {
                    // 4-byte header: aligned, length in the upper 30 bits.
                    off = align_up(off - data_off, att.align) + data_off;
                    let w = le_u32(t, off)?;
                    (w >> 2) as usize
                } else if first == VARTAG_1B_E {
                    return None; // an external TOAST pointer never sits in an index tuple
                } else {
                    (first >> 1) as usize
                }
            }
            -2 => t.get(off..limit)?.iter().position(|&b| b == 0)? + 1,
            _ => return None,
        };
        off = off.checked_add(len)?;
    }
    (off <= limit).then_some(off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::attributes::Attribute;
    use std::sync::Arc;

    fn attr(name: &str, attlen: i16, align: usize) -> Attribute {
        Attribute {
            name: name.into(),
            type_name: None,
            attlen,
            align,
            dropped: false,
        }
    }

    /// `(id int4) INCLUDE (note text)`: TID (5, off), key `id`, a 1-byte-header text.
    fn tuple(off: u16, id: i32, note: &[u8]) -> Vec<u8> {
        let mut t = vec![0, 0, 5, 0];
        t.extend_from_slice(&off.to_le_bytes());
        t.extend_from_slice(&[0, 0]); // t_info, set below
        t.extend_from_slice(&id.to_le_bytes());
        t.push(((note.len() as u8 + 1) << 1) | 1);
        t.extend_from_slice(note);
        t.resize(t.len().div_ceil(8) * 8, 0);
        let size = t.len() as u16;
        t[6..8].copy_from_slice(&size.to_le_bytes());
        t
    }

    fn spec(nulls_not_distinct: bool) -> UniqueSpec {
        UniqueSpec {
            heap_fork: 0,
            nkeyatts: 1,
            natts: 2,
            nulls_not_distinct,
            attributes: Some(Arc::from(vec![attr("id", 4, 4), attr("note", -1, 4)])),
        }
    }

    #[test]
    fn include_columns_are_not_part_of_the_key() {
        let (a, b, c) = (
            tuple(1, 42, b"ab"),
            tuple(2, 42, b"cdef"),
            tuple(3, 43, b"ab"),
        );
        let s = spec(false);
        let ea = entry(&a, 1, &s, 8).unwrap();
        let eb = entry(&b, 2, &s, 8).unwrap();
        let ec = entry(&c, 3, &s, 8).unwrap();
        assert!(ea.same_key(&eb));
        assert!(!ea.same_key(&ec));
        let mut tids = Vec::new();
        eb.push_tids(&mut tids);
        assert_eq!(tids, vec![(5, 2, 2)]);
    }

    #[test]
    fn null_keys_are_distinct_unless_nulls_not_distinct() {
        // t_info with INDEX_NULL_MASK and a bitmap whose bit 0 (the key column) is clear.
        let mut t = vec![0, 0, 5, 0, 1, 0, 0, 0, 0b10, 0, 0, 0, 0, 0, 0, 0];
        t.extend_from_slice(&[(3 << 1) | 1, b'a', b'b', 0, 0, 0, 0, 0]);
        let info = INDEX_NULL_MASK | t.len() as u16;
        t[6..8].copy_from_slice(&info.to_le_bytes());
        assert!(entry(&t, 1, &spec(false), 8).is_none());
        let e = entry(&t, 1, &spec(true), 8).unwrap();
        assert_eq!(e.nulls, 1);
        // A pivot tuple (ALT_TID without BT_IS_POSTING) is never an entry.
        let mut pivot = tuple(1, 42, b"ab");
        pivot[7] |= (INDEX_ALT_TID_MASK >> 8) as u8;
        assert!(entry(&pivot, 1, &spec(false), 8).is_none());
    }

    #[test]
    fn keys_compare_by_every_byte() {
        for n in 0..=20usize {
            let a: Vec<u8> = (0..n as u8).collect();
            assert!(same_bytes(&a, &a.clone()));
            for i in 0..n {
                let mut b = a.clone();
                b[i] ^= 0x80;
                assert!(!same_bytes(&a, &b), "length {n}, byte {i}");
            }
            assert!(!same_bytes(&a, &[a.as_slice(), &[0]].concat()));
        }
    }
}
