//! The comparators: how two stored values of one key column are ordered, for the default
//! B-tree operator classes of the built-in types (their support function 1), from the on-disk
//! formats. Variable-length values are unpacked first (short headers, inline compression).

use std::borrow::Cow;
use std::cmp::Ordering;

use super::collate::Collate;
use super::pglz;

/// `NAMEDATALEN`.
const NAMEDATALEN: usize = 64;
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
            | KeyType::BpcharPattern => -1,
        }
    }

    /// Orders two stored values; `None` if either cannot be decoded.
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Option<Ordering> {
        match self {
            KeyType::Int2 => Some(i16_of(a)?.cmp(&i16_of(b)?)),
            KeyType::Int4 | KeyType::Date => Some(i32_of(a)?.cmp(&i32_of(b)?)),
            KeyType::Int8 | KeyType::Time | KeyType::Timestamp => Some(i64_of(a)?.cmp(&i64_of(b)?)),
            KeyType::Oid => Some(u32_of(a)?.cmp(&u32_of(b)?)),
            KeyType::Bool | KeyType::Char => Some(a.first()?.cmp(b.first()?)),
            KeyType::Float4 => Some(float_cmp(
                f32::from_bits(u32_of(a)?) as f64,
                f32::from_bits(u32_of(b)?) as f64,
            )),
            KeyType::Float8 => Some(float_cmp(
                f64::from_bits(i64_of(a)? as u64),
                f64::from_bits(i64_of(b)? as u64),
            )),
            KeyType::Interval => Some(interval_span(a)?.cmp(&interval_span(b)?)),
            KeyType::Uuid => Some(a.get(..16)?.cmp(b.get(..16)?)),
            KeyType::Name(c) => c.compare(name_str(a)?, name_str(b)?),
            KeyType::Numeric => {
                Some(Numeric::parse(&varlena(a)?)?.cmp(&Numeric::parse(&varlena(b)?)?))
            }
            KeyType::Bytea | KeyType::TextPattern => Some(varlena(a)?.cmp(&varlena(b)?)),
            KeyType::Text(c) => c.compare(&varlena(a)?, &varlena(b)?),
            KeyType::Bpchar(c) => c.compare(trim_blanks(&varlena(a)?), trim_blanks(&varlena(b)?)),
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

fn i16_of(b: &[u8]) -> Option<i16> {
    Some(i16::from_le_bytes(b.get(..2)?.try_into().ok()?))
}
fn i32_of(b: &[u8]) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(..4)?.try_into().ok()?))
}
fn u32_of(b: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(..4)?.try_into().ok()?))
}
fn i64_of(b: &[u8]) -> Option<i64> {
    Some(i64::from_le_bytes(b.get(..8)?.try_into().ok()?))
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

/// `interval_cmp_value`: `time + (month * 30 + day) * USECS_PER_DAY`, in 128 bits. The
/// stored struct is `time` (int64), `day` (int32), `month` (int32).
fn interval_span(b: &[u8]) -> Option<i128> {
    let time = i64_of(b)? as i128;
    let day = i32_of(b.get(8..)?)? as i128;
    let month = i32_of(b.get(12..)?)? as i128;
    Some(time + (month * DAYS_PER_MONTH + day) * USECS_PER_DAY)
}

/// The characters of a `name` (64 bytes) or of the `cstring` an index stores for it: up to
/// the first NUL.
fn name_str(b: &[u8]) -> Option<&[u8]> {
    let b = &b[..b.len().min(NAMEDATALEN)];
    Some(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())])
}

/// `bpchar` compares without trailing blanks.
fn trim_blanks(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&c| c != b' ').map_or(0, |p| p + 1);
    &b[..end]
}

/// `VARATT_IS_1B_E`: the first byte of an external TOAST pointer.
const VARTAG_1B_E: u8 = 0x01;
/// Low bits of a 4-byte header: `00` plain, `10` compressed inline.
const VARATT_4B_COMPRESSED: u32 = 0x02;
/// `VARLENA_EXTSIZE_BITS`: the raw size in `va_tcinfo`; the top two bits are the method.
const VARLENA_EXTSIZE_MASK: u32 = 0x3FFF_FFFF;
const TOAST_PGLZ_COMPRESSION_ID: u32 = 0;
const TOAST_LZ4_COMPRESSION_ID: u32 = 1;

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
    let header = u32_of(b)?;
    let len = (header >> 2) as usize;
    match header & 0x03 {
        0 => b.get(4..len).map(Cow::Borrowed),
        VARATT_4B_COMPRESSED => {
            let tcinfo = u32_of(b.get(4..)?)?;
            let raw_size = (tcinfo & VARLENA_EXTSIZE_MASK) as usize;
            let data = b.get(8..len)?;
            let raw = match tcinfo >> 30 {
                TOAST_PGLZ_COMPRESSION_ID => pglz::decompress(data, raw_size)?,
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

/// `n_header` sign bits.
const NUMERIC_SIGN_MASK: u16 = 0xC000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_SHORT: u16 = 0x8000;
const NUMERIC_SPECIAL: u16 = 0xC000;
const NUMERIC_EXT_SIGN_MASK: u16 = 0xF000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;
const NUMERIC_SHORT_SIGN_MASK: u16 = 0x2000;
const NUMERIC_SHORT_WEIGHT_SIGN_MASK: u16 = 0x0040;
const NUMERIC_SHORT_WEIGHT_MASK: u16 = 0x003F;

/// A decoded `numeric`: finite values as sign, weight (of the first base-10000 digit) and
/// digits.
#[derive(Debug, PartialEq, Eq)]
enum Numeric {
    NegInf,
    Finite {
        negative: bool,
        weight: i32,
        digits: Vec<i16>,
    },
    PosInf,
    NaN,
}

impl Numeric {
    /// From the payload (after the varlena header): the short or long format.
    fn parse(p: &[u8]) -> Option<Numeric> {
        let header = u16::from_le_bytes(p.get(..2)?.try_into().ok()?);
        let (negative, weight, digits_at) = match header & NUMERIC_SIGN_MASK {
            NUMERIC_SPECIAL => {
                return match header & NUMERIC_EXT_SIGN_MASK {
                    NUMERIC_NAN => Some(Numeric::NaN),
                    NUMERIC_PINF => Some(Numeric::PosInf),
                    NUMERIC_NINF => Some(Numeric::NegInf),
                    _ => None,
                }
            }
            NUMERIC_SHORT => {
                let magnitude = (header & NUMERIC_SHORT_WEIGHT_MASK) as i32;
                let weight = if header & NUMERIC_SHORT_WEIGHT_SIGN_MASK != 0 {
                    magnitude - (NUMERIC_SHORT_WEIGHT_MASK as i32 + 1)
                } else {
                    magnitude
                };
                (header & NUMERIC_SHORT_SIGN_MASK != 0, weight, 2)
            }
            sign => {
                let weight = i16::from_le_bytes(p.get(2..4)?.try_into().ok()?) as i32;
                (sign == NUMERIC_NEG, weight, 4)
            }
        };
        let rest = p.get(digits_at..)?;
        if rest.len() % 2 != 0 {
            return None;
        }
        let digits = rest
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect();
        Some(Numeric::Finite {
            negative,
            weight,
            digits,
        })
    }

    fn rank(&self) -> u8 {
        match self {
            Numeric::NegInf => 0,
            Numeric::Finite { .. } => 1,
            Numeric::PosInf => 2,
            Numeric::NaN => 3,
        }
    }

    fn cmp(&self, other: &Numeric) -> Ordering {
        match (self, other) {
            (
                Numeric::Finite {
                    negative: n1,
                    weight: w1,
                    digits: d1,
                },
                Numeric::Finite {
                    negative: n2,
                    weight: w2,
                    digits: d2,
                },
            ) => {
                let zero1 = d1.iter().all(|&d| d == 0);
                let zero2 = d2.iter().all(|&d| d == 0);
                let sign = |zero: bool, neg: bool| match (zero, neg) {
                    (true, _) => 0i8,
                    (false, true) => -1,
                    (false, false) => 1,
                };
                let (s1, s2) = (sign(zero1, *n1), sign(zero2, *n2));
                if s1 != s2 || s1 == 0 {
                    return s1.cmp(&s2);
                }
                let abs = cmp_abs(*w1, d1, *w2, d2);
                if s1 < 0 {
                    abs.reverse()
                } else {
                    abs
                }
            }
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// Compares two magnitudes digit by digit, aligned by weight.
fn cmp_abs(w1: i32, d1: &[i16], w2: i32, d2: &[i16]) -> Ordering {
    let digit = |w: i32, d: &[i16], pos: i32| -> i16 {
        let i = w - pos;
        if i < 0 {
            0
        } else {
            d.get(i as usize).copied().unwrap_or(0)
        }
    };
    let high = w1.max(w2);
    let low = (w1 - d1.len() as i32 + 1).min(w2 - d2.len() as i32 + 1);
    let mut pos = high;
    while pos >= low {
        match digit(w1, d1, pos).cmp(&digit(w2, d2, pos)) {
            Ordering::Equal => pos -= 1,
            other => return other,
        }
    }
    Ordering::Equal
}
