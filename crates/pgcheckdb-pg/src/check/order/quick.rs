//! A shortcut of the key order for the commonest B-tree: one key column of a fixed-width
//! integer-like type (`int2`, `int4`, `int8`, `oid`, `date`, `time`, `timestamp`, `uuid`).
//! The key of a plain leaf tuple (no NULL, no posting list, not a pivot) is then read straight
//! from its fixed place in the item as an integer ordered like the column, without decoding
//! the tuple. Two such keys that differ are ordered by the integers alone; equal keys, and
//! every other tuple, go through [`super::IndexOrdering`]'s full comparison (heap TIDs, NULLs,
//! truncated pivots).

use std::cmp::Ordering;

use super::datum::KeyType;
use super::tuple::StoredAs;
use crate::format::bytes::{be_u128, le_i16, le_i32, le_i64, le_u16, le_u32};
use crate::format::index_tuple::{
    INDEX_ALT_TID_MASK, INDEX_NULL_MASK, INDEX_SIZE_MASK, SIZE_OF_INDEX_TUPLE, T_INFO_OFFSET,
};

/// `INDEX_ALT_TID_MASK` and `INDEX_NULL_MASK` of `t_info`: a pivot or posting list, a NULL.
const NOT_PLAIN_MASK: u16 = INDEX_ALT_TID_MASK | INDEX_NULL_MASK;

/// How a key's bytes read as an integer in the column's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    /// Little-endian signed integers of 2, 4 or 8 bytes.
    Signed(usize),
    /// A little-endian `oid`.
    Unsigned32,
    /// 16 bytes in `memcmp` order (`uuid`).
    Bytes16,
}

/// The shortcut of one index: where its single key lies in a plain leaf tuple, and how it reads.
#[derive(Debug, Clone, Copy)]
pub struct QuickKey {
    width: Width,
    /// Offset of the key in the item.
    offset: usize,
    desc: bool,
}

impl QuickKey {
    /// The shortcut for an index of `key_type` stored as `stored`, when it has exactly one key
    /// column of a type it covers.
    pub fn for_column(
        key_type: &KeyType,
        stored: StoredAs,
        desc: bool,
        max_align: usize,
    ) -> Option<QuickKey> {
        let width = match key_type {
            KeyType::Int2 => Width::Signed(2),
            KeyType::Int4 | KeyType::Date => Width::Signed(4),
            KeyType::Int8 | KeyType::Time | KeyType::Timestamp => Width::Signed(8),
            KeyType::Oid => Width::Unsigned32,
            KeyType::Uuid => Width::Bytes16,
            _ => return None,
        };
        if stored.attlen <= 0 || stored.attlen as usize != width.len() {
            return None;
        }
        let offset = plain_key_offset(stored, max_align);
        Some(QuickKey {
            width,
            offset,
            desc,
        })
    }

    /// The key of `item` when it is a plain leaf tuple whose full decoding succeeds (its size
    /// agrees with `t_info` and the key lies inside it); `None` otherwise.
    #[inline]
    pub fn key(&self, item: &[u8]) -> Option<i128> {
        let b = plain_key(item, self.offset, self.width.len())?;
        Some(match self.width {
            Width::Signed(2) => i128::from(le_i16(b, 0)?),
            Width::Signed(4) => i128::from(le_i32(b, 0)?),
            Width::Signed(_) => i128::from(le_i64(b, 0)?),
            Width::Unsigned32 => i128::from(le_u32(b, 0)?),
            // Big-endian bytes order like `memcmp`; flipping the top bit maps that unsigned
            // order onto the signed one.
            Width::Bytes16 => (be_u128(b, 0)? ^ (1 << 127)) as i128,
        })
    }

    /// The order of two keys from [`QuickKey::key`] in the index (DESC inverts it); `None`
    /// when they are equal (the full comparison then decides, by heap TID).
    #[inline]
    pub fn order(&self, a: i128, b: i128) -> Option<Ordering> {
        match a.cmp(&b) {
            Ordering::Equal => None,
            ord if self.desc => Some(ord.reverse()),
            ord => Some(ord),
        }
    }
}

/// Where the first key column of a tuple without NULLs starts: after `IndexTupleData`, at the
/// column's alignment.
pub fn plain_key_offset(stored: StoredAs, max_align: usize) -> usize {
    let align = stored.align.min(max_align).max(1);
    SIZE_OF_INDEX_TUPLE.div_ceil(align) * align
}

/// The `len` bytes at `offset` of `item` when it is a plain leaf tuple (no NULL, not a posting
/// list or pivot) whose size agrees with `t_info` and holds them; `None` for every other tuple.
#[inline]
pub fn plain_key(item: &[u8], offset: usize, len: usize) -> Option<&[u8]> {
    let t_info = le_u16(item, T_INFO_OFFSET)?;
    if t_info & NOT_PLAIN_MASK != 0 || (t_info & INDEX_SIZE_MASK) as usize != item.len() {
        return None;
    }
    item.get(offset..offset + len)
}

impl Width {
    fn len(self) -> usize {
        match self {
            Width::Signed(n) => n,
            Width::Unsigned32 => 4,
            Width::Bytes16 => 16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{IndexOrdering, KeyColumn};
    use super::*;

    fn ordering(key_type: KeyType, attlen: i16, align: usize, desc: bool) -> IndexOrdering {
        let stored = StoredAs { attlen, align };
        IndexOrdering {
            key_columns: 1,
            unique: None,
            columns: vec![KeyColumn {
                name: "k".into(),
                key_type,
                stored,
                desc,
                nulls_first: false,
            }],
            stored: vec![stored],
            max_align: 8,
        }
    }

    /// A plain leaf tuple with heap TID (7, `offset`) and the key bytes `key` (MAXALIGNed).
    fn leaf(offset: u16, key: &[u8]) -> Vec<u8> {
        let mut t = vec![0, 0, 0, 7];
        t.extend(offset.to_le_bytes());
        t.extend([0, 0]);
        t.extend(key);
        t.resize(t.len().div_ceil(8) * 8, 0);
        let info = t.len() as u16;
        t[6..8].copy_from_slice(&info.to_le_bytes());
        t
    }

    /// Every pair of `keys` is ordered by the shortcut as by the full comparison, or left to it
    /// when equal.
    fn agrees(o: &IndexOrdering, keys: &[Vec<u8>]) {
        let q = o.quick_key().expect("a shortcut");
        for (i, a) in keys.iter().enumerate() {
            for (j, b) in keys.iter().enumerate() {
                let (ta, tb) = (leaf(i as u16 + 1, a), leaf(j as u16 + 1, b));
                let full = o.compare(&ta, &tb).expect("decodes");
                let (ka, kb) = (q.key(&ta).expect("plain"), q.key(&tb).expect("plain"));
                match q.order(ka, kb) {
                    Some(ord) => assert_eq!(ord, full, "{a:?} vs {b:?}"),
                    None => assert_eq!(a, b),
                }
            }
        }
    }

    #[test]
    fn integer_keys_order_as_the_full_comparison() {
        let ints: Vec<Vec<u8>> = [i32::MIN, -70_000, -1, 0, 1, 255, 256, 70_000, i32::MAX]
            .iter()
            .map(|v| v.to_le_bytes().to_vec())
            .collect();
        for desc in [false, true] {
            agrees(&ordering(KeyType::Int4, 4, 4, desc), &ints);
            agrees(&ordering(KeyType::Oid, 4, 4, desc), &ints);
            agrees(&ordering(KeyType::Date, 4, 4, desc), &ints);
        }
        let shorts: Vec<Vec<u8>> = [i16::MIN, -300, -1, 0, 1, 300, i16::MAX]
            .iter()
            .map(|v| v.to_le_bytes().to_vec())
            .collect();
        agrees(&ordering(KeyType::Int2, 2, 2, false), &shorts);
        let longs: Vec<Vec<u8>> = [i64::MIN, -(1 << 40), -1, 0, 1 << 33, i64::MAX]
            .iter()
            .map(|v| v.to_le_bytes().to_vec())
            .collect();
        agrees(&ordering(KeyType::Int8, 8, 8, false), &longs);
        agrees(&ordering(KeyType::Timestamp, 8, 8, true), &longs);
    }

    #[test]
    fn uuid_keys_order_as_their_bytes() {
        let uuids: Vec<Vec<u8>> = [[0u8; 16], [0x7F; 16], [0x80; 16], [0xFF; 16]]
            .iter()
            .chain(&[{
                let mut u = [0u8; 16];
                u[15] = 1;
                u
            }])
            .map(|u| u.to_vec())
            .collect();
        agrees(&ordering(KeyType::Uuid, 16, 1, false), &uuids);
        agrees(&ordering(KeyType::Uuid, 16, 1, true), &uuids);
    }

    #[test]
    fn only_plain_tuples_of_the_right_size_have_a_quick_key() {
        let o = ordering(KeyType::Int4, 4, 4, false);
        let q = o.quick_key().expect("a shortcut");
        let plain = leaf(1, &5i32.to_le_bytes());
        assert_eq!(q.key(&plain), Some(5));
        for bit in [0x2000u16, 0x8000] {
            let mut t = plain.clone();
            let info = u16::from_le_bytes([t[6], t[7]]) | bit;
            t[6..8].copy_from_slice(&info.to_le_bytes());
            assert_eq!(q.key(&t), None, "t_info bit {bit:#x}");
        }
        // A size in t_info other than the item's, and an item too short for its key.
        assert_eq!(q.key(&plain[..plain.len() - 4]), None);
        let mut short = plain[..10].to_vec();
        short[6..8].copy_from_slice(&10u16.to_le_bytes());
        assert_eq!(q.key(&short), None);
        assert_eq!(
            o.decode(&short).map(|_| ()),
            None,
            "the full decoding agrees"
        );
        // Not covered: text, several key columns, a stored length other than the type's.
        let text = KeyType::Text(super::super::collate::Collate::Bytes);
        assert!(ordering(text, -1, 4, false).quick_key().is_none());
        assert!(ordering(KeyType::Int4, 8, 8, false).quick_key().is_none());
        let mut two = ordering(KeyType::Int4, 4, 4, false);
        two.columns.push(two.columns[0].clone());
        two.stored.push(two.stored[0]);
        two.key_columns = 2;
        assert!(two.quick_key().is_none());
    }
}
