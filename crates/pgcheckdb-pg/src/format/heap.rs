//! `HeapTupleHeaderData`: the 23-byte header of every heap tuple (`t_xmin`, `t_xmax`, `t_ctid`,
//! `t_infomask2`, `t_infomask`, `t_hoff`) and its null bitmap.

use serde::Serialize;

use super::bytes::{le_u16, le_u32};

/// `SizeofHeapTupleHeader`.
pub const SIZEOF_HEAP_TUPLE_HEADER: usize = 23;
/// Byte offset of `t_infomask` (2 bytes) in the header.
pub const T_INFOMASK_OFFSET: usize = 20;
/// Byte offset of `t_hoff` (1 byte), the header's last field.
pub const T_HOFF_OFFSET: usize = 22;
/// `SpecTokenOffsetNumber`: the `t_ctid` offset of a speculatively inserted tuple.
pub const SPEC_TOKEN_OFFSET: u16 = 0xFFFE;
/// `MovedPartitionsOffsetNumber`: the `t_ctid` offset of a row moved to another partition,
/// the lowest of the offsets used as markers; no line pointer has such an offset.
pub const MOVED_PARTITIONS_OFFSET: u16 = 0xFFFD;
/// `HEAP_NATTS_MASK` in `t_infomask2`.
pub const HEAP_NATTS_MASK: u16 = 0x07FF;

/// `t_infomask` bits, with PostgreSQL's names.
pub mod infomask {
    pub const HEAP_HASNULL: u16 = 0x0001;
    pub const HEAP_HASVARWIDTH: u16 = 0x0002;
    pub const HEAP_HASEXTERNAL: u16 = 0x0004;
    pub const HEAP_HASOID_OLD: u16 = 0x0008;
    pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
    pub const HEAP_COMBOCID: u16 = 0x0020;
    pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
    pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
    pub const HEAP_XMIN_COMMITTED: u16 = 0x0100;
    pub const HEAP_XMIN_INVALID: u16 = 0x0200;
    pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
    pub const HEAP_XMAX_INVALID: u16 = 0x0800;
    pub const HEAP_XMAX_IS_MULTI: u16 = 0x1000;
    pub const HEAP_UPDATED: u16 = 0x2000;
    pub const HEAP_MOVED_OFF: u16 = 0x4000;
    pub const HEAP_MOVED_IN: u16 = 0x8000;
    /// `HEAP_LOCK_MASK`: the lock-strength bits of an xmax that only locked.
    pub const HEAP_LOCK_MASK: u16 = HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
    /// `HEAP_MOVED`: moved by a pre-9.0 `VACUUM FULL`; the hint bits then describe `xvac`.
    pub const HEAP_MOVED: u16 = HEAP_MOVED_OFF | HEAP_MOVED_IN;

    /// Names of the bits set in `mask`, in bit order.
    pub fn names(mask: u16) -> Vec<&'static str> {
        const NAMES: [(u16, &str); 16] = [
            (HEAP_HASNULL, "HASNULL"),
            (HEAP_HASVARWIDTH, "HASVARWIDTH"),
            (HEAP_HASEXTERNAL, "HASEXTERNAL"),
            (HEAP_HASOID_OLD, "HASOID_OLD"),
            (HEAP_XMAX_KEYSHR_LOCK, "XMAX_KEYSHR_LOCK"),
            (HEAP_COMBOCID, "COMBOCID"),
            (HEAP_XMAX_EXCL_LOCK, "XMAX_EXCL_LOCK"),
            (HEAP_XMAX_LOCK_ONLY, "XMAX_LOCK_ONLY"),
            (HEAP_XMIN_COMMITTED, "XMIN_COMMITTED"),
            (HEAP_XMIN_INVALID, "XMIN_INVALID"),
            (HEAP_XMAX_COMMITTED, "XMAX_COMMITTED"),
            (HEAP_XMAX_INVALID, "XMAX_INVALID"),
            (HEAP_XMAX_IS_MULTI, "XMAX_IS_MULTI"),
            (HEAP_UPDATED, "UPDATED"),
            (HEAP_MOVED_OFF, "MOVED_OFF"),
            (HEAP_MOVED_IN, "MOVED_IN"),
        ];
        NAMES
            .iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// `t_infomask2` flag bits.
pub mod infomask2 {
    pub const HEAP_KEYS_UPDATED: u16 = 0x2000;
    pub const HEAP_HOT_UPDATED: u16 = 0x4000;
    pub const HEAP_ONLY_TUPLE: u16 = 0x8000;

    /// Names of the flag bits set in `mask`.
    pub fn names(mask: u16) -> Vec<&'static str> {
        [
            (HEAP_KEYS_UPDATED, "KEYS_UPDATED"),
            (HEAP_HOT_UPDATED, "HOT_UPDATED"),
            (HEAP_ONLY_TUPLE, "HEAP_ONLY_TUPLE"),
        ]
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, n)| *n)
        .collect()
    }
}

/// `ItemPointerData`: a (block, offset) tuple identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ItemPointer {
    pub block: u32,
    pub offset: u16,
}

impl ItemPointer {
    /// Decodes the 6 bytes at `off` (`bi_hi`, `bi_lo`, `ip_posid`).
    pub fn parse(b: &[u8], off: usize) -> Option<ItemPointer> {
        let hi = le_u16(b, off)? as u32;
        let lo = le_u16(b, off + 2)? as u32;
        Some(ItemPointer {
            block: (hi << 16) | lo,
            offset: le_u16(b, off + 4)?,
        })
    }
}

/// `sizeof(ItemPointerData)`: the 6 bytes of a tuple identifier.
pub const SIZE_OF_ITEM_POINTER: usize = 6;

/// A decoded heap tuple header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeapTupleHeader {
    pub t_xmin: u32,
    pub t_xmax: u32,
    /// `t_cid` or `t_xvac`.
    pub t_field3: u32,
    pub t_ctid: ItemPointer,
    pub t_infomask2: u16,
    pub t_infomask: u16,
    pub t_hoff: u8,
}

impl HeapTupleHeader {
    /// Decodes the header of the tuple that starts at the beginning of `tuple`.
    pub fn parse(tuple: &[u8]) -> Option<HeapTupleHeader> {
        if tuple.len() < SIZEOF_HEAP_TUPLE_HEADER {
            return None;
        }
        Some(HeapTupleHeader {
            t_xmin: le_u32(tuple, 0)?,
            t_xmax: le_u32(tuple, 4)?,
            t_field3: le_u32(tuple, 8)?,
            t_ctid: ItemPointer::parse(tuple, 12)?,
            t_infomask2: le_u16(tuple, 18)?,
            t_infomask: le_u16(tuple, T_INFOMASK_OFFSET)?,
            t_hoff: *tuple.get(T_HOFF_OFFSET)?,
        })
    }

    /// `HeapTupleHeaderGetNatts`.
    pub fn natts(&self) -> u16 {
        self.t_infomask2 & HEAP_NATTS_MASK
    }

    pub fn has_nulls(&self) -> bool {
        self.t_infomask & infomask::HEAP_HASNULL != 0
    }

    /// The `t_hoff` PostgreSQL would compute: MAXALIGN(23 + null bitmap bytes).
    pub fn expected_hoff(&self, max_align: usize) -> usize {
        let bitmap = if self.has_nulls() {
            (self.natts() as usize).div_ceil(8)
        } else {
            0
        };
        let mask = max_align.max(1) - 1;
        (SIZEOF_HEAP_TUPLE_HEADER + bitmap + mask) & !mask
    }

    /// Whether attribute `attnum` (1-based) is null according to the bitmap in `tuple`.
    pub fn att_is_null(&self, tuple: &[u8], attnum: usize) -> bool {
        if !self.has_nulls() || attnum == 0 {
            return false;
        }
        let i = attnum - 1;
        tuple
            .get(SIZEOF_HEAP_TUPLE_HEADER + i / 8)
            .is_some_and(|byte| byte & (1 << (i % 8)) == 0)
    }
}

#[cfg(test)]
impl HeapTupleHeader {
    /// A header for unit tests: `t_xmin`, `t_xmax` and `t_infomask` as given, `t_ctid`
    /// (0,1), no attributes counted in `t_infomask2`, a 24-byte `t_hoff`.
    pub(crate) fn for_tests(xmin: u32, xmax: u32, mask: u16) -> HeapTupleHeader {
        HeapTupleHeader {
            t_xmin: xmin,
            t_xmax: xmax,
            t_field3: 0,
            t_ctid: ItemPointer {
                block: 0,
                offset: 1,
            },
            t_infomask2: 0,
            t_infomask: mask,
            t_hoff: 24,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_tuple_header() {
        let mut t = vec![0u8; 32];
        t[0..4].copy_from_slice(&750u32.to_le_bytes());
        t[12..14].copy_from_slice(&0u16.to_le_bytes());
        t[14..16].copy_from_slice(&3u16.to_le_bytes());
        t[16..18].copy_from_slice(&7u16.to_le_bytes());
        t[18..20].copy_from_slice(&(2u16 | infomask2::HEAP_HOT_UPDATED).to_le_bytes());
        t[20..22].copy_from_slice(
            &(infomask::HEAP_XMIN_COMMITTED | infomask::HEAP_XMAX_INVALID).to_le_bytes(),
        );
        t[22] = 24;
        let h = HeapTupleHeader::parse(&t).expect("header");
        assert_eq!(h.t_xmin, 750);
        assert_eq!(
            h.t_ctid,
            ItemPointer {
                block: 3,
                offset: 7
            }
        );
        assert_eq!(h.natts(), 2);
        assert_eq!(h.expected_hoff(8), 24);
        assert_eq!(
            infomask::names(h.t_infomask),
            vec!["XMIN_COMMITTED", "XMAX_INVALID"]
        );
        assert_eq!(infomask2::names(h.t_infomask2), vec!["HOT_UPDATED"]);
        assert!(HeapTupleHeader::parse(&t[..20]).is_none());
    }
}
