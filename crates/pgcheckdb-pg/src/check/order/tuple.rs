//! One B-tree index tuple as the key order sees it: its key attributes (NULL or the stored
//! bytes), how many it has (pivot tuples may be suffix-truncated), and its heap TID key.

use crate::format::btree::{BT_IS_POSTING, BT_OFFSET_MASK, BT_PIVOT_HEAP_TID_ATTR};
use crate::format::bytes::{align_up, le_u16, le_u32};
use crate::format::heap::{ItemPointer, SIZE_OF_ITEM_POINTER};
use crate::format::index_tuple::{
    INDEX_ALT_TID_MASK, INDEX_NULL_MASK, INDEX_SIZE_MASK, SIZE_OF_INDEX_ATTR_BITMAP,
    SIZE_OF_INDEX_TUPLE, T_INFO_OFFSET,
};
use crate::format::toast::VARTAG_1B_E;

/// A heap TID as a sortable pair (block, offset).
pub type Tid = (u32, u16);

/// The heap TID key of a tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapKey {
    /// A pivot whose heap TID was truncated away: minus infinity.
    Truncated,
    /// The lowest and highest TID (the same for a plain tuple; a posting list's range).
    Range(Tid, Tid),
}

/// How a key column is stored: `attlen` and alignment (from the index's `pg_attribute`).
#[derive(Debug, Clone, Copy)]
pub struct StoredAs {
    pub attlen: i16,
    pub align: usize,
}

/// `INDEX_MAX_KEYS`: the most columns an index has (pg_control says the cluster's).
pub use crate::format::control::INDEX_MAX_KEYS;

/// The decoded parts of one index tuple: where each key attribute lies in the item. No
/// allocation and a small copy: this runs for every index item the standard level reads.
#[derive(Debug, Clone, Copy)]
pub struct KeyTuple<'a> {
    item: &'a [u8],
    /// `(start, length)` of each present attribute within `item`.
    spans: [(u16, u16); INDEX_MAX_KEYS],
    /// Bit `i` set: attribute `i` is NULL.
    nulls: u32,
    natts: u8,
    pub heap: HeapKey,
}

impl<'a> KeyTuple<'a> {
    /// No attributes: a slot for [`decode_into`].
    pub const EMPTY: KeyTuple<'static> = KeyTuple {
        item: &[],
        spans: [(0, 0); INDEX_MAX_KEYS],
        nulls: 0,
        natts: 0,
        heap: HeapKey::Truncated,
    };

    /// Key attributes present: fewer than the key columns in a truncated pivot.
    pub fn natts(&self) -> usize {
        self.natts as usize
    }

    /// Attribute `i` (0-based, below [`KeyTuple::natts`]): its stored bytes, `None` for NULL.
    pub fn key(&self, i: usize) -> Option<&'a [u8]> {
        if self.nulls & (1 << i) != 0 {
            return None;
        }
        let (start, len) = self.spans[i];
        self.item.get(start as usize..start as usize + len as usize)
    }
}

/// The heap TID (`ItemPointerData`) at `off`.
fn tid_at(b: &[u8], off: usize) -> Option<Tid> {
    ItemPointer::parse(b, off).map(|tid| (tid.block, tid.offset))
}

/// Decodes the key columns of an index tuple (the whole item). `columns` describes every key
/// column; `max_align` is the cluster's `MAXALIGN`. `None` if the tuple is malformed.
pub fn decode<'a>(item: &'a [u8], columns: &[StoredAs], max_align: usize) -> Option<KeyTuple<'a>> {
    let mut key = KeyTuple::EMPTY;
    decode_into(item, columns, max_align, &mut key)?;
    Some(key)
}

/// [`decode`] into a reused tuple (no copy of the span table: the key order check of every
/// index page runs this for each item). `None`, with `out` unspecified, if malformed.
pub fn decode_into<'a>(
    item: &'a [u8],
    columns: &[StoredAs],
    max_align: usize,
    out: &mut KeyTuple<'a>,
) -> Option<()> {
    let t_info = le_u16(item, T_INFO_OFFSET)?;
    let size = (t_info & INDEX_SIZE_MASK) as usize;
    if size != item.len() || size < SIZE_OF_INDEX_TUPLE {
        return None;
    }
    let offset_field = le_u16(item, 4)?;
    let alt = t_info & INDEX_ALT_TID_MASK != 0;
    let posting = alt && offset_field & BT_IS_POSTING != 0;
    let pivot = alt && !posting;
    if columns.len() > INDEX_MAX_KEYS {
        return None;
    }
    let natts = if pivot {
        ((offset_field & BT_OFFSET_MASK) as usize).min(columns.len())
    } else {
        columns.len()
    };
    let heap = heap_key(item, offset_field, pivot, posting)?;
    let has_nulls = t_info & INDEX_NULL_MASK != 0;
    let bitmap = has_nulls
        .then(|| item.get(SIZE_OF_INDEX_TUPLE..SIZE_OF_INDEX_TUPLE + SIZE_OF_INDEX_ATTR_BITMAP));
    let header = SIZE_OF_INDEX_TUPLE
        + if has_nulls {
            SIZE_OF_INDEX_ATTR_BITMAP
        } else {
            0
        };
    // The key data ends where a posting list or a pivot's heap TID begins.
    let data_end = match heap {
        HeapKey::Range(..) if posting => tid_list_start(item)?,
        HeapKey::Range(..) if pivot => size - SIZE_OF_ITEM_POINTER,
        _ => size,
    };
    let data = item.get(..data_end)?;
    let mut off = align_up(header, max_align);
    let mut nulls = 0u32;
    for (i, col) in columns.iter().take(natts).enumerate() {
        let is_null = match bitmap {
            Some(bits) => bits?[i / 8] & (1 << (i % 8)) == 0,
            None => false,
        };
        if is_null {
            nulls |= 1 << i;
            continue;
        }
        let align = col.align.min(max_align);
        let len = match col.attlen {
            n if n > 0 => {
                off = align_up(off, align);
                n as usize
            }
            -1 => {
                // A short (1-byte) header is never aligned; padding bytes are zero.
                if *data.get(off)? == 0 {
                    off = align_up(off, align);
                }
                varlena_size(data.get(off..)?)?
            }
            -2 => {
                // A cstring (`name_ops` keys): up to and including its NUL.
                off = align_up(off, align);
                data.get(off..)?.iter().position(|&c| c == 0)? + 1
            }
            _ => return None,
        };
        data.get(off..off + len)?;
        out.spans[i] = (u16::try_from(off).ok()?, u16::try_from(len).ok()?);
        off += len;
    }
    out.item = item;
    out.nulls = nulls;
    out.natts = natts as u8;
    out.heap = heap;
    Some(())
}

/// The total size of a stored varlena (header included).
fn varlena_size(b: &[u8]) -> Option<usize> {
    let first = *b.first()?;
    if first == VARTAG_1B_E {
        // External TOAST pointer: tag byte, then a payload whose size depends on the tag.
        return None;
    }
    let len = if first & 0x01 == 0x01 {
        (first >> 1) as usize
    } else {
        (le_u32(b, 0)? >> 2) as usize
    };
    (len >= 1 && len <= b.len()).then_some(len)
}

/// Where a posting list's TIDs start (kept in the block-number field of `t_tid`).
fn tid_list_start(item: &[u8]) -> Option<usize> {
    Some(le_u16(item, 2)? as usize)
}

fn heap_key(item: &[u8], offset_field: u16, pivot: bool, posting: bool) -> Option<HeapKey> {
    if posting {
        let count = (offset_field & BT_OFFSET_MASK) as usize;
        let start = tid_list_start(item)?;
        if count == 0 {
            return None;
        }
        let first = tid_at(item, start)?;
        let last = tid_at(item, start + (count - 1) * SIZE_OF_ITEM_POINTER)?;
        return Some(HeapKey::Range(first, last));
    }
    if pivot {
        if offset_field & BT_PIVOT_HEAP_TID_ATTR == 0 {
            return Some(HeapKey::Truncated);
        }
        let tid = tid_at(item, item.len().checked_sub(SIZE_OF_ITEM_POINTER)?)?;
        return Some(HeapKey::Range(tid, tid));
    }
    let tid = tid_at(item, 0)?;
    Some(HeapKey::Range(tid, tid))
}
