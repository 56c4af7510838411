//! `numeric` keys: the on-disk short and long formats (base-10000 digits with a weight), the
//! special values NaN and ±Infinity, and their order as `cmp_numerics` defines it (NaN after
//! everything, equal to itself; trailing and leading zero digits and the display scale do not
//! matter).

use std::cmp::Ordering;

use crate::format::bytes::{le_i16, le_i16s, le_u16};

/// `n_header` sign bits.
const NUMERIC_SIGN_MASK: u16 = 0xC000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_SHORT: u16 = 0x8000;
const NUMERIC_SPECIAL: u16 = 0xC000;
const NUMERIC_EXT_SIGN_MASK: u16 = 0xF000;
pub const NUMERIC_NAN: u16 = 0xC000;
pub const NUMERIC_PINF: u16 = 0xD000;
pub const NUMERIC_NINF: u16 = 0xF000;
const NUMERIC_SHORT_SIGN_MASK: u16 = 0x2000;
const NUMERIC_SHORT_WEIGHT_SIGN_MASK: u16 = 0x0040;
const NUMERIC_SHORT_WEIGHT_MASK: u16 = 0x003F;

/// A decoded `numeric`: finite values as sign, weight (of the first base-10000 digit) and
/// digits.
#[derive(Debug, PartialEq, Eq)]
pub enum Numeric {
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
    pub fn parse(p: &[u8]) -> Option<Numeric> {
        let header = le_u16(p, 0)?;
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
                let weight = le_i16(p, 2)? as i32;
                (sign == NUMERIC_NEG, weight, 4)
            }
        };
        let rest = p.get(digits_at..)?;
        if rest.len() % 2 != 0 {
            return None;
        }
        let digits = le_i16s(rest).collect();
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

    /// The order of `cmp_numerics`.
    pub fn order(&self, other: &Numeric) -> Ordering {
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
