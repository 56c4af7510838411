//! The comparators: how two stored values of one key column are ordered, for the default
//! B-tree operator classes of the built-in types (their support function 1), from the on-disk
//! formats. Variable-length values are unpacked first (short headers, inline compression).

use std::cmp::Ordering;

use super::collate::Collate;
use super::numeric::Numeric;
use crate::catalog::layouts::NAMEDATALEN;
use crate::format::bytes::{le_u32, le_u32s, until_nul};
use crate::format::datum::{
    float4, float8, int2, int4, int8, oid, varlena, Interval, VECTOR_DIM1, VECTOR_HEADER,
    VECTOR_NDIM,
};

/// `USECS_PER_DAY`.
const USECS_PER_DAY: i128 = 86_400_000_000;
/// `DAYS_PER_MONTH` as `interval_cmp_value` counts a month.
const DAYS_PER_MONTH: i128 = 30;

/// The comparator of one key column, named after the operator class it stands for.
#[derive(Debug, Clone)]
pub enum KeyType {
    Int2,
    Int4,
    Int8,
    Oid,
    Bool,
    /// `"char"`: unsigned byte order.
    Char,
    Float4,
    Float8,
    Numeric,
    Date,
    Time,
    /// `timestamp` and `timestamptz`: the same int64 microseconds.
    Timestamp,
    Interval,
    Uuid,
    Bytea,
    Name(Collate),
    /// `text` and `varchar` (`text_ops`, `varchar_ops`).
    Text(Collate),
    Bpchar(Collate),
    /// `text_pattern_ops`, `varchar_pattern_ops`: byte order.
    TextPattern,
    /// `bpchar_pattern_ops`: byte order without trailing blanks.
    BpcharPattern,
    /// `oidvector_ops`: shorter vectors first, then element by element (the system catalogs'
    /// `proargtypes` keys).
    OidVector,
}

impl KeyType {
    /// Whether a key column stored with `attlen` holds values of this type. `name_ops` stores
    /// its keys as `cstring` (`opckeytype`, attlen -2) since PostgreSQL 12, as `name` before.
    pub fn fits(&self, attlen: i16) -> bool {
        match self {
            KeyType::Name(_) => attlen == -2 || attlen == NAMEDATALEN as i16,
            other => other.attlen() == attlen,
        }
    }

    /// The `attlen` a stored value of this type has (-1: variable length).
    pub fn attlen(&self) -> i16 {
        match self {
            KeyType::Bool | KeyType::Char => 1,
            KeyType::Int2 => 2,
            KeyType::Int4 | KeyType::Oid | KeyType::Float4 | KeyType::Date => 4,
            KeyType::Int8 | KeyType::Float8 | KeyType::Time | KeyType::Timestamp => 8,
            KeyType::Interval | KeyType::Uuid => 16,
            KeyType::Name(_) => NAMEDATALEN as i16,
            KeyType::Numeric
            | KeyType::Bytea
            | KeyType::Text(_)
            | KeyType::Bpchar(_)
            | KeyType::TextPattern
            | KeyType::BpcharPattern
            | KeyType::OidVector => -1,
        }
    }

    /// Orders two stored values; `None` if either cannot be decoded.
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Option<Ordering> {
        match self {
            KeyType::Int2 => Some(int2(a)?.cmp(&int2(b)?)),
            KeyType::Int4 | KeyType::Date => Some(int4(a)?.cmp(&int4(b)?)),
            KeyType::Int8 | KeyType::Time | KeyType::Timestamp => Some(int8(a)?.cmp(&int8(b)?)),
            KeyType::Oid => Some(oid(a)?.cmp(&oid(b)?)),
            KeyType::Bool | KeyType::Char => Some(a.first()?.cmp(b.first()?)),
            KeyType::Float4 => Some(float_cmp(float4(a)? as f64, float4(b)? as f64)),
            KeyType::Float8 => Some(float_cmp(float8(a)?, float8(b)?)),
            KeyType::Interval => Some(interval_span(a)?.cmp(&interval_span(b)?)),
            KeyType::Uuid => Some(a.get(..16)?.cmp(b.get(..16)?)),
            KeyType::Name(c) => c.compare(name_str(a)?, name_str(b)?),
            KeyType::Numeric => {
                Some(Numeric::parse(&varlena(a)?)?.order(&Numeric::parse(&varlena(b)?)?))
            }
            KeyType::Bytea | KeyType::TextPattern => Some(varlena(a)?.cmp(&varlena(b)?)),
            KeyType::Text(c) => c.compare(&varlena(a)?, &varlena(b)?),
            KeyType::Bpchar(c) => c.compare(trim_blanks(&varlena(a)?), trim_blanks(&varlena(b)?)),
            KeyType::OidVector => Some(oid_vector(&varlena(a)?)?.cmp(&oid_vector(&varlena(b)?)?)),
            KeyType::BpcharPattern => {
                Some(trim_blanks(&varlena(a)?).cmp(trim_blanks(&varlena(b)?)))
            }
        }
    }

    /// The type's name for messages.
    pub fn describe(&self) -> String {
        let collated = |t: &str, c: &Collate| format!("{t} ({})", c.describe());
        match self {
            KeyType::Name(c) => collated("name", c),
            KeyType::Text(c) => collated("text", c),
            KeyType::Bpchar(c) => collated("bpchar", c),
            other => format!("{other:?}").to_lowercase(),
        }
    }
}

/// `float8_cmp_internal`: NaN equals NaN and sorts after everything; -0 equals 0.
fn float_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// `interval_cmp_value`: `time + (month * 30 + day) * USECS_PER_DAY`, in 128 bits.
fn interval_span(b: &[u8]) -> Option<i128> {
    let Interval { time, day, month } = Interval::parse(b)?;
    let (time, day, month) = (time as i128, day as i128, month as i128);
    Some(time + (month * DAYS_PER_MONTH + day) * USECS_PER_DAY)
}

/// The characters of a `name` (64 bytes) or of the `cstring` an index stores for it: up to
/// the first NUL.
fn name_str(b: &[u8]) -> Option<&[u8]> {
    Some(until_nul(b.get(..NAMEDATALEN).unwrap_or(b)))
}

/// The `oidvector` payload: `ndim`, `dataoffset`, `elemtype`, `dim1`, `lbound1`, then the
/// OIDs; as a sort key `(length, elements)`.
fn oid_vector(p: &[u8]) -> Option<(usize, Vec<u32>)> {
    let ndim = le_u32(p, VECTOR_NDIM)?;
    let len = match ndim {
        0 => 0,
        _ => le_u32(p, VECTOR_DIM1)? as usize,
    };
    let oids = p.get(VECTOR_HEADER..VECTOR_HEADER.checked_add(len.checked_mul(4)?)?)?;
    Some((len, le_u32s(oids).collect()))
}

/// `bpchar` compares without trailing blanks.
fn trim_blanks(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&c| c != b' ').map_or(0, |p| p + 1);
    b.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::numeric::{NUMERIC_NAN, NUMERIC_NINF, NUMERIC_PINF};
    use super::*;
    use Ordering::{Equal, Greater, Less};

    /// A value with a 1-byte varlena header.
    fn short(payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(((payload.len() + 1) << 1) | 1) as u8];
        v.extend_from_slice(payload);
        v
    }

    /// A value with a 4-byte varlena header.
    fn long(payload: &[u8]) -> Vec<u8> {
        let mut v = (((payload.len() + 4) as u32) << 2).to_le_bytes().to_vec();
        v.extend_from_slice(payload);
        v
    }

    fn numeric(header: &[u16], digits: &[i16]) -> Vec<u8> {
        let mut p: Vec<u8> = header.iter().flat_map(|h| h.to_le_bytes()).collect();
        p.extend(digits.iter().flat_map(|d| d.to_le_bytes()));
        short(&p)
    }

    /// Asserts that `values` are strictly ascending under `t` (and each equal to itself).
    fn ascending(t: &KeyType, values: &[Vec<u8>]) {
        for (i, a) in values.iter().enumerate() {
            assert_eq!(t.compare(a, a), Some(Equal), "{t:?} value {i} vs itself");
            for (j, b) in values.iter().enumerate().skip(i + 1) {
                assert_eq!(t.compare(a, b), Some(Less), "{t:?} value {i} vs {j}");
                assert_eq!(t.compare(b, a), Some(Greater), "{t:?} value {j} vs {i}");
            }
        }
    }

    #[test]
    fn floats_nan_last_and_signed_zero_equal() {
        let f8 = |x: f64| x.to_bits().to_le_bytes().to_vec();
        let vals = [
            f64::NEG_INFINITY,
            -1.5,
            0.0,
            1e-300,
            f64::INFINITY,
            f64::NAN,
        ];
        ascending(&KeyType::Float8, &vals.map(f8));
        assert_eq!(KeyType::Float8.compare(&f8(-0.0), &f8(0.0)), Some(Equal));
        let f4 = |x: f32| x.to_bits().to_le_bytes().to_vec();
        assert_eq!(
            KeyType::Float4.compare(&f4(f32::NAN), &f4(f32::NAN)),
            Some(Equal)
        );
        ascending(&KeyType::Float4, &[f4(-3.0), f4(2.0), f4(f32::NAN)]);
    }

    #[test]
    fn integers_signed_oid_unsigned_char_unsigned() {
        let i4 = |x: i32| x.to_le_bytes().to_vec();
        ascending(&KeyType::Int4, &[i4(i32::MIN), i4(-1), i4(0), i4(i32::MAX)]);
        let oid = |x: u32| x.to_le_bytes().to_vec();
        ascending(
            &KeyType::Oid,
            &[oid(0), oid(1), oid(0x8000_0000), oid(u32::MAX)],
        );
        ascending(
            &KeyType::Char,
            &[vec![b'0'], vec![b'a'], vec![0x80], vec![0xff]],
        );
    }

    #[test]
    fn numeric_short_long_and_special() {
        let t = KeyType::Numeric;
        let ninf = numeric(&[NUMERIC_NINF], &[]);
        let neg_big = numeric(&[0x4000 | 3, 1], &[1, 2345, 6780]); // long: -12345.678
        let neg_one = numeric(&[0xA000], &[1]); // short: -1
        let zero = numeric(&[0x8000], &[]);
        let small = numeric(&[0x8000 | (4 << 7) | 0x7F], &[1]); // 0.0001, weight -1
        let one = numeric(&[0x8000], &[1]);
        let one_long = numeric(&[0x0002, 0], &[1]); // long format 1.00 (no trailing zeros)
        let big = numeric(&[0x8000 | (3 << 7) | 1], &[1, 2345, 6780]); // 12345.678
        let pinf = numeric(&[NUMERIC_PINF], &[]);
        let nan = numeric(&[NUMERIC_NAN], &[]);
        ascending(
            &t,
            &[
                ninf,
                neg_big,
                neg_one,
                zero.clone(),
                small,
                one.clone(),
                big,
                pinf,
                nan,
            ],
        );
        assert_eq!(t.compare(&one, &one_long), Some(Equal));
        let zero_scaled = numeric(&[0x0003, 0], &[]);
        assert_eq!(t.compare(&zero, &zero_scaled), Some(Equal));
    }

    #[test]
    fn interval_compares_spans_with_30_day_months() {
        let iv = |time: i64, day: i32, month: i32| {
            let mut v = time.to_le_bytes().to_vec();
            v.extend(day.to_le_bytes());
            v.extend(month.to_le_bytes());
            v
        };
        let day_us = 86_400_000_000i64;
        assert_eq!(
            KeyType::Interval.compare(&iv(0, 0, 1), &iv(0, 30, 0)),
            Some(Equal)
        );
        assert_eq!(
            KeyType::Interval.compare(&iv(30 * day_us, 0, 0), &iv(0, 0, 1)),
            Some(Equal)
        );
        ascending(
            &KeyType::Interval,
            &[
                iv(0, 0, -12),
                iv(-1, 0, 0),
                iv(0, 29, 0),
                iv(1, 0, 1),
                iv(i64::MAX, i32::MAX, i32::MAX),
            ],
        );
    }

    #[test]
    fn strings_bytea_bpchar_and_name() {
        ascending(
            &KeyType::Bytea,
            &[
                short(b""),
                short(b"\x00"),
                short(b"\x00\x00"),
                long(b"\x01"),
                short(b"\xff"),
            ],
        );
        let t = KeyType::Text(Collate::Bytes);
        ascending(
            &t,
            &[
                short(b""),
                short(b"B"),
                long(b"a"),
                short(b"ab"),
                short(b"b"),
            ],
        );
        let bp = KeyType::Bpchar(Collate::Bytes);
        assert_eq!(bp.compare(&short(b"a  "), &long(b"a")), Some(Equal));
        ascending(
            &bp,
            &[short(b"   "), short(b"a   "), short(b"a b"), short(b"ab")],
        );
        assert_eq!(
            KeyType::BpcharPattern.compare(&short(b"a "), &short(b"a")),
            Some(Equal)
        );
        let name = KeyType::Name(Collate::Bytes);
        let mut fixed = vec![0u8; NAMEDATALEN];
        fixed[..2].copy_from_slice(b"ab");
        assert_eq!(name.compare(&fixed, b"ab\0"), Some(Equal));
        ascending(&name, &[b"\0".to_vec(), b"a\0".to_vec(), b"ab\0".to_vec()]);
    }
}
