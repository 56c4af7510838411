//! Reading the heap TIDs out of index pages, per access method. Only entries that name heap
//! tuples count: B-tree leaf tuples (plain `t_tid` and each TID of a posting list; not pivot
//! tuples such as the high key, nothing of deleted or half-dead pages), hash bucket and
//! overflow tuples, GiST leaf tuples, live SP-GiST leaf tuples, and GIN entry posting lists,
//! posting-tree leaf pages and pending-list tuples. Internal pages hold block numbers of the
//! index itself and give nothing.

use super::IndexAm;
use crate::format::btree::{leaf_tuple_tids, BtPageOpaque, P_NONE};
use crate::format::bytes::{le_u16, le_u32};
use crate::format::gin::flags::{
    GIN_COMPRESSED, GIN_DATA, GIN_DELETED, GIN_LEAF, GIN_LIST, GIN_META,
};
use crate::format::gin::{
    GIN_DATA_START, GIN_ITUP_COMPRESSED, GIN_OPAQUE_FLAGS, GIN_OPAQUE_MAXOFF, GIN_TREE_POSTING,
};
use crate::format::gist::flags::{F_DELETED, F_LEAF};
use crate::format::gist::GIST_OPAQUE_FLAGS;
use crate::format::hash::{page_type, HASHO_FLAG};
use crate::format::heap::ItemPointer;
use crate::format::itemid::ItemId;
use crate::format::page::PageHeader;
use crate::format::spgist::flags::{SPGIST_DELETED, SPGIST_LEAF, SPGIST_META};
use crate::format::spgist::SPGIST_LIVE;

/// GIN entry and posting-list constants.
mod gin {
    /// `MaxHeapTuplesPerPageBits`: a TID packs as `block << 11 | offset`.
    pub const OFFSET_BITS: u32 = 11;
    /// `offsetof(GinPostingList, bytes)`: `first` (6 bytes) and `nbytes` (2).
    pub const POSTING_LIST_HEADER: usize = 8;
}

/// Appends the heap TIDs of one sound index page to `out` as (block, offset); returns the
/// number of entries that could not be decoded (counted as not checked).
pub fn page_tids(
    am: IndexAm,
    page: &[u8],
    h: &PageHeader,
    items: &[ItemId],
    out: &mut Vec<(u32, u16)>,
) -> u64 {
    let special = h.pd_special as usize;
    match am {
        IndexAm::Btree => btree_leaf(page, special, items, out),
        IndexAm::Hash => {
            let flag = le_u16(page, special + HASHO_FLAG).unwrap_or(0) & page_type::MASK;
            // The page types that hold index tuples.
            if flag == page_type::BUCKET || flag == page_type::OVERFLOW {
                plain_tuples(page, items, 1, out)
            } else {
                0
            }
        }
        IndexAm::Gist => {
            let flags = le_u16(page, special + GIST_OPAQUE_FLAGS).unwrap_or(0);
            if flags & F_LEAF != 0 && flags & F_DELETED == 0 {
                plain_tuples(page, items, 1, out)
            } else {
                0
            }
        }
        IndexAm::SpGist => {
            let flags = le_u16(page, special).unwrap_or(0);
            if flags & SPGIST_LEAF != 0 && flags & (SPGIST_META | SPGIST_DELETED) == 0 {
                spgist_leaf(page, items, out)
            } else {
                0
            }
        }
        IndexAm::Gin => gin_page(page, h, special, items, out),
    }
}

/// The bytes of the item at `it`, if it has storage on the page.
fn item_bytes<'p>(page: &'p [u8], it: &ItemId) -> Option<&'p [u8]> {
    if !it.has_storage() {
        return None;
    }
    page.get(it.lp_off as usize..it.lp_off as usize + it.lp_len as usize)
}

/// `t_tid` of every index tuple from offset number `first` on.
fn plain_tuples(page: &[u8], items: &[ItemId], first: usize, out: &mut Vec<(u32, u16)>) -> u64 {
    let mut undecoded = 0;
    for it in items.iter().skip(first - 1) {
        match item_bytes(page, it).and_then(|t| ItemPointer::parse(t, 0)) {
            Some(p) => out.push((p.block, p.offset)),
            None if it.has_storage() => undecoded += 1,
            None => {}
        }
    }
    undecoded
}

/// A live B-tree leaf page's TIDs (deleted and half-dead pages hold none that count).
fn btree_leaf(page: &[u8], special: usize, items: &[ItemId], out: &mut Vec<(u32, u16)>) -> u64 {
    let Some(o) = BtPageOpaque::parse(page, special) else {
        return 0;
    };
    if !o.is_live_leaf() {
        return 0;
    }
    // P_FIRSTDATAKEY: offset 1 is the high key (a pivot) unless the page is rightmost.
    let first = if o.btpo_next == P_NONE { 1 } else { 2 };
    let mut undecoded = 0;
    for it in items.iter().skip(first - 1) {
        if btree_entry_tids(page, it, out).is_none() {
            undecoded += 1;
        }
    }
    undecoded
}

/// The TIDs of the B-tree leaf entry at `it` onto `out`: none for an entry without storage on
/// the page; `None` when it does not decode.
pub(crate) fn btree_entry_tids(page: &[u8], it: &ItemId, out: &mut Vec<(u32, u16)>) -> Option<()> {
    match item_bytes(page, it) {
        Some(t) => btree_tuple(t, out),
        None => Some(()),
    }
}

/// One B-tree leaf tuple's TIDs; `None` when it does not decode.
fn btree_tuple(t: &[u8], out: &mut Vec<(u32, u16)>) -> Option<()> {
    leaf_tuple_tids(t, |p| out.push((p.block, p.offset)))
}

/// Live SP-GiST leaf tuples: `heapPtr` after `tupstate:2,size:30` and `t_info`.
fn spgist_leaf(page: &[u8], items: &[ItemId], out: &mut Vec<(u32, u16)>) -> u64 {
    let mut undecoded = 0;
    for it in items {
        let Some(t) = item_bytes(page, it) else {
            continue;
        };
        let Some(head) = le_u32(t, 0) else {
            undecoded += 1;
            continue;
        };
        if head & 0x3 != SPGIST_LIVE {
            continue; // redirect, dead or placeholder: no heap tuple
        }
        match ItemPointer::parse(t, 6) {
            Some(p) => out.push((p.block, p.offset)),
            None => undecoded += 1,
        }
    }
    undecoded
}

/// A GIN page: entry-tree leaf tuples (posting lists), posting-tree leaf pages, and pending
/// list pages (plain tuples).
fn gin_page(
    page: &[u8],
    h: &PageHeader,
    special: usize,
    items: &[ItemId],
    out: &mut Vec<(u32, u16)>,
) -> u64 {
    let flags = le_u16(page, special + GIN_OPAQUE_FLAGS).unwrap_or(0);
    if flags & (GIN_DELETED | GIN_META) != 0 || flags & GIN_LEAF == 0 && flags & GIN_LIST == 0 {
        return 0;
    }
    if flags & GIN_LIST != 0 {
        return plain_tuples(page, items, 1, out);
    }
    if flags & GIN_DATA != 0 {
        return gin_data_leaf(page, h, special, flags, out);
    }
    let mut undecoded = 0;
    for it in items {
        let Some(t) = item_bytes(page, it) else {
            continue;
        };
        if gin_entry(t, out).is_none() {
            undecoded += 1;
        }
    }
    undecoded
}

/// One entry-tree leaf tuple: its posting list (compressed or a plain TID array); a posting
/// tree root holds no TIDs here.
fn gin_entry(t: &[u8], out: &mut Vec<(u32, u16)>) -> Option<()> {
    let tid = ItemPointer::parse(t, 0)?;
    let n = tid.offset;
    if n == GIN_TREE_POSTING || n == 0 {
        return Some(());
    }
    let at = (tid.block & !GIN_ITUP_COMPRESSED) as usize;
    if tid.block & GIN_ITUP_COMPRESSED != 0 {
        let before = out.len();
        decode_posting_list(t.get(at..)?, out)?;
        (out.len() - before == n as usize).then_some(())
    } else {
        for i in 0..n as usize {
            let p = ItemPointer::parse(t, at + 6 * i)?;
            out.push((p.block, p.offset));
        }
        Some(())
    }
}

/// A posting-tree leaf page: compressed segments from after the right bound up to
/// `pd_lower`, or (before `GIN_COMPRESSED`) an array of `maxoff` TIDs.
pub(crate) fn gin_data_leaf(
    page: &[u8],
    h: &PageHeader,
    special: usize,
    flags: u16,
    out: &mut Vec<(u32, u16)>,
) -> u64 {
    let start = GIN_DATA_START;
    if flags & GIN_COMPRESSED == 0 {
        let maxoff = le_u16(page, special + GIN_OPAQUE_MAXOFF).unwrap_or(0) as usize;
        for i in 0..maxoff {
            match ItemPointer::parse(page, start + 6 * i) {
                Some(p) if start + 6 * (i + 1) <= special => out.push((p.block, p.offset)),
                _ => return (maxoff - i) as u64,
            }
        }
        return 0;
    }
    let end = (h.pd_lower as usize).min(special);
    let mut at = start;
    let mut undecoded = 0;
    while at + gin::POSTING_LIST_HEADER <= end {
        let nbytes = le_u16(page, at + 6).unwrap_or(0) as usize;
        let size = gin::POSTING_LIST_HEADER + nbytes.next_multiple_of(2);
        match page.get(at..(at + size).min(end)) {
            Some(seg) if at + size <= end => {
                if decode_posting_list(seg, out).is_none() {
                    undecoded += 1;
                }
            }
            _ => {
                undecoded += 1;
                break;
            }
        }
        at += size;
    }
    undecoded
}

/// Decodes one `GinPostingList` (`first`, `nbytes`, varbyte deltas of TIDs packed as
/// `block << 11 | offset`) at the start of `b`.
fn decode_posting_list(b: &[u8], out: &mut Vec<(u32, u16)>) -> Option<()> {
    let first = ItemPointer::parse(b, 0)?;
    let nbytes = le_u16(b, 6)? as usize;
    let bytes = b.get(gin::POSTING_LIST_HEADER..gin::POSTING_LIST_HEADER + nbytes)?;
    out.push((first.block, first.offset));
    let mut val = ((first.block as u64) << gin::OFFSET_BITS) | first.offset as u64;
    let mut pos = 0;
    while pos < bytes.len() {
        let (delta, used) = varbyte(bytes.get(pos..)?)?;
        pos += used;
        val = val.checked_add(delta)?;
        let block = u32::try_from(val >> gin::OFFSET_BITS).ok()?;
        let offset = (val & ((1 << gin::OFFSET_BITS) - 1)) as u16;
        out.push((block, offset));
    }
    Some(())
}

/// One varbyte integer: 7 bits a byte with a continuation bit, the 7th byte whole.
fn varbyte(b: &[u8]) -> Option<(u64, usize)> {
    let mut val = 0u64;
    for i in 0..7 {
        let c = *b.get(i)? as u64;
        if i == 6 {
            return Some((val | (c << 42), 7));
        }
        val |= (c & 0x7F) << (7 * i);
        if c & 0x80 == 0 {
            return Some((val, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::btree::BT_IS_POSTING;
    use crate::format::index_tuple::INDEX_ALT_TID_MASK;

    fn encode(v: u64, out: &mut Vec<u8>) {
        let mut v = v;
        for _ in 0..6 {
            if v < 0x80 {
                out.push(v as u8);
                return;
            }
            out.push((v as u8 & 0x7F) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    #[test]
    fn gin_posting_lists_decode_to_their_tids() {
        let tids: [(u32, u16); 4] = [(3, 7), (3, 9), (400, 1), (1 << 30, 2)];
        let pack = |(b, o): (u32, u16)| ((b as u64) << 11) | o as u64;
        let mut bytes = Vec::new();
        for w in tids.windows(2) {
            encode(pack(w[1]) - pack(w[0]), &mut bytes);
        }
        let mut list = vec![0, 0, 3, 0, 7, 0];
        list.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        list.extend_from_slice(&bytes);
        let mut out = Vec::new();
        decode_posting_list(&list, &mut out).unwrap();
        assert_eq!(out, tids.to_vec());
        // A list cut short does not decode.
        out.clear();
        assert!(decode_posting_list(&list[..list.len() - 1], &mut out).is_none());
    }

    #[test]
    fn btree_posting_tuples_give_each_tid_and_pivots_none() {
        // A posting tuple: t_tid = (posting offset 16, BT_IS_POSTING | 2 TIDs), ALT_TID.
        let mut t = vec![0, 0, 16, 0];
        t.extend_from_slice(&(BT_IS_POSTING | 2).to_le_bytes());
        t.extend_from_slice(&(INDEX_ALT_TID_MASK | 28).to_le_bytes());
        t.extend_from_slice(&[0; 8]); // key
        t.extend_from_slice(&[0, 0, 5, 0, 1, 0, 0, 0, 5, 0, 3, 0]);
        let mut out = Vec::new();
        btree_tuple(&t, &mut out).unwrap();
        assert_eq!(out, vec![(5, 1), (5, 3)]);
        // A pivot: ALT_TID without BT_IS_POSTING.
        t[4..6].copy_from_slice(&1u16.to_le_bytes());
        out.clear();
        btree_tuple(&t, &mut out).unwrap();
        assert!(out.is_empty());
    }
}
