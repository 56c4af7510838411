//! Stored values (datums) of built-in types as heap and index tuples hold them: the
//! fixed-width types, read from the start of their bytes (`None` when too short); the three
//! fields of an `interval`; and the header of the one-dimensional arrays `int2vector` and
//! `oidvector`. Variable-length values start with a varlena header (see [`super::toast`]).

use super::bytes::{le_f32, le_f64, le_i16, le_i32, le_i64, le_u32};

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
}
