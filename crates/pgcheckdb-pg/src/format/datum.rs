//! Stored values (datums) of built-in types as heap and index tuples hold them: the
//! fixed-width types, read from the start of their bytes (`None` when too short); the three
//! fields of an `interval`; the header of the one-dimensional arrays `int2vector` and
//! `oidvector`; and the payload of a varlena value behind its short or long header,
//! decompressed when stored compressed inline (pglz, lz4). The header bits are in
//! [`super::toast`].

use std::borrow::Cow;

use super::bytes::{le_f32, le_f64, le_i16, le_i32, le_i64, le_u32};
use super::toast::{
    TOAST_LZ4_COMPRESSION_ID, TOAST_PGLZ_COMPRESSION_ID, VARATT_4B_COMPRESSED,
    VARLENA_EXTSIZE_MASK, VARTAG_1B_E,
};

/// `int2`.
#[inline]
pub fn int2(b: &[u8]) -> Option<i16> {
    le_i16(b, 0)
}

/// `int4`, and `date` (days since 2000-01-01).
#[inline]
pub fn int4(b: &[u8]) -> Option<i32> {
    le_i32(b, 0)
}

/// `int8`, and `time`, `timestamp` and `timestamptz` (microseconds).
#[inline]
pub fn int8(b: &[u8]) -> Option<i64> {
    le_i64(b, 0)
}

/// `oid` (unsigned).
#[inline]
pub fn oid(b: &[u8]) -> Option<u32> {
    le_u32(b, 0)
}

/// `float4`.
#[inline]
pub fn float4(b: &[u8]) -> Option<f32> {
    le_f32(b, 0)
}

/// `float8`.
#[inline]
pub fn float8(b: &[u8]) -> Option<f64> {
    le_f64(b, 0)
}

/// An `interval` (`Interval`): `time` (int64 microseconds), then `day` and `month` (int32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub time: i64,
    pub day: i32,
    pub month: i32,
}

impl Interval {
    /// The 16 bytes of a stored `interval`.
    #[inline]
    pub fn parse(b: &[u8]) -> Option<Interval> {
        Some(Interval {
            time: le_i64(b, 0)?,
            day: le_i32(b, 8)?,
            month: le_i32(b, 12)?,
        })
    }
}

/// Byte offsets of an `int2vector`/`oidvector` payload (after its varlena header), the header
/// of a one-dimensional array without NULLs (`ArrayType`): `ndim`, `dataoffset`, `elemtype`,
/// `dim1`, `lbound1`, then the values at [`VECTOR_HEADER`].
pub const VECTOR_NDIM: usize = 0;
/// `dim1`: the number of values.
pub const VECTOR_DIM1: usize = 12;
/// Where the values start (`ARR_OVERHEAD_NONULLS(1)`).
pub const VECTOR_HEADER: usize = 20;

/// The largest raw size of a compressed key that an index tuple (at most about a third of a
/// page) can hold: lz4 expands at most about 255-fold. Larger claims are damage, and are not
/// decompressed (not comparable) rather than allocated.
const MAX_INDEX_RAW_SIZE: usize = 1 << 20;

/// The payload of a stored varlena value: short and long headers, inline compression (pglz,
/// lz4). `None` for an external TOAST pointer (an index stores none) or a malformed value.
pub fn varlena(b: &[u8]) -> Option<Cow<'_, [u8]>> {
    let first = *b.first()?;
    if first == VARTAG_1B_E {
        return None;
    }
    if first & 0x01 == 0x01 {
        let len = (first >> 1) as usize;
        return b.get(1..len).map(Cow::Borrowed);
    }
    let header = le_u32(b, 0)?;
    let len = (header >> 2) as usize;
    match header & 0x03 {
        0 => b.get(4..len).map(Cow::Borrowed),
        VARATT_4B_COMPRESSED => {
            let tcinfo = le_u32(b, 4)?;
            let raw_size = (tcinfo & VARLENA_EXTSIZE_MASK) as usize;
            if raw_size > MAX_INDEX_RAW_SIZE {
                return None;
            }
            let data = b.get(8..len)?;
            let raw = match tcinfo >> 30 {
                TOAST_PGLZ_COMPRESSION_ID => super::pglz::decompress(data, raw_size)?,
                TOAST_LZ4_COMPRESSION_ID => {
                    let mut out = vec![0u8; raw_size];
                    let n = lz4_flex::block::decompress_into(data, &mut out).ok()?;
                    (n == raw_size).then_some(out)?
                }
                _ => return None,
            };
            Some(Cow::Owned(raw))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_values_and_intervals() {
        assert_eq!(int2(&(-3i16).to_le_bytes()), Some(-3));
        assert_eq!(int2(&[1]), None);
        assert_eq!(int4(&i32::MIN.to_le_bytes()), Some(i32::MIN));
        assert_eq!(int8(&(-1i64).to_le_bytes()), Some(-1));
        assert_eq!(oid(&u32::MAX.to_le_bytes()), Some(u32::MAX));
        assert_eq!(float4(&0.5f32.to_le_bytes()), Some(0.5));
        assert_eq!(float8(&(-0.25f64).to_le_bytes()), Some(-0.25));
        let mut iv = 7i64.to_le_bytes().to_vec();
        iv.extend((-2i32).to_le_bytes());
        iv.extend(3i32.to_le_bytes());
        assert_eq!(
            Interval::parse(&iv),
            Some(Interval {
                time: 7,
                day: -2,
                month: 3
            })
        );
        assert_eq!(Interval::parse(&iv[..15]), None);
    }

    #[test]
    fn compressed_values_are_unpacked_and_external_ones_refused() {
        // pglz: "abc" then a 6-byte back-reference, raw size 9, method bits 0.
        let data = [0b0000_1000u8, b'a', b'b', b'c', 0x03, 0x03];
        let mut v = ((((8 + data.len()) as u32) << 2) | VARATT_4B_COMPRESSED)
            .to_le_bytes()
            .to_vec();
        v.extend(9u32.to_le_bytes());
        v.extend(data);
        assert_eq!(varlena(&v).as_deref(), Some(&b"abcabcabc"[..]));
        // lz4: method bits 01.
        let raw = b"xyzxyzxyzxyzxyzxyzxyzxyz".repeat(4);
        let mut packed = vec![0u8; lz4_flex::block::get_maximum_output_size(raw.len())];
        let n = lz4_flex::block::compress_into(&raw, &mut packed).expect("lz4 compress");
        packed.truncate(n);
        let mut v = ((((8 + packed.len()) as u32) << 2) | VARATT_4B_COMPRESSED)
            .to_le_bytes()
            .to_vec();
        v.extend((raw.len() as u32 | (TOAST_LZ4_COMPRESSION_ID << 30)).to_le_bytes());
        v.extend(&packed);
        assert_eq!(varlena(&v).as_deref(), Some(&raw[..]));
        assert_eq!(varlena(&[VARTAG_1B_E, 18, 0, 0]), None);
    }
}
