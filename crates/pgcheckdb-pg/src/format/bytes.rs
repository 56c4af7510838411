//! The one checked byte reader of the on-disk formats: integers at an offset, fixed-size arrays
//! and ranges of bytes, `None` instead of reading out of bounds; the NUL-padded strings of
//! `name` and `char[]` fields; and PostgreSQL's alignment rule (`MAXALIGN`).
//!
//! PostgreSQL writes its pages, control file and WAL in the machine's byte order, which is
//! little-endian on every platform pgcheckdb reads (`le_*`); pgcheckdb's own fact records are
//! big-endian so that they sort as bytes (`be_*`). The readers are `#[inline]`: they run for every tuple and every key. Where the
//! caller has already proven the bytes are there (a `[u8; N]` read from a file, a chunk of a
//! known length) the `*_of` functions take the array itself.

/// `MAXIMUM_ALIGNOF` (`MAXALIGN`) of every 64-bit platform PostgreSQL 14–18 runs on; a
/// cluster's own is `maxAlign` in pg_control.
pub const MAXIMUM_ALIGNOF: usize = 8;

/// Rounds `len` up to a multiple of `align` (`TYPEALIGN`; `MAXALIGN` with the cluster's
/// `maxAlign`). Alignments are powers of two (pg_control's `maxAlign` is validated to be 4 or
/// 8, `attalign` is 1, 2, 4 or 8): a mask, not a division, as this runs for every attribute.
/// Any other value is still rounded correctly, and 0 counts as 1.
#[inline]
pub fn align_up(len: usize, align: usize) -> usize {
    if align.is_power_of_two() {
        let mask = align - 1;
        (len + mask) & !mask
    } else {
        let a = align.max(1);
        len.div_ceil(a) * a
    }
}

/// The `len` bytes at `off`, if in bounds.
#[inline]
pub fn range(b: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    b.get(off..off.checked_add(len)?)
}

/// The `N` bytes at `off` as an array, if in bounds.
#[inline]
pub fn array<const N: usize>(b: &[u8], off: usize) -> Option<&[u8; N]> {
    range(b, off, N)?.try_into().ok()
}

/// Defines, for each integer type, the reader at an offset (`None` out of bounds) and the
/// reader of an array already read.
macro_rules! readers {
    ($($t:ty, $n:literal, $from:ident: $at:ident, $of:ident, $order:literal;)*) => {$(
        #[doc = concat!($order, " `", stringify!($t), "` at `off`, if in bounds.")]
        #[inline]
        pub fn $at(b: &[u8], off: usize) -> Option<$t> {
            array::<$n>(b, off).map($of)
        }

        #[doc = concat!($order, " `", stringify!($t), "` of ", stringify!($n), " bytes already read.")]
        #[inline]
        pub fn $of(b: &[u8; $n]) -> $t {
            <$t>::$from(*b)
        }
    )*};
}

readers! {
    u16, 2, from_le_bytes: le_u16, le_u16_of, "Little-endian";
    u32, 4, from_le_bytes: le_u32, le_u32_of, "Little-endian";
    u64, 8, from_le_bytes: le_u64, le_u64_of, "Little-endian";
    i16, 2, from_le_bytes: le_i16, le_i16_of, "Little-endian";
    i32, 4, from_le_bytes: le_i32, le_i32_of, "Little-endian";
    i64, 8, from_le_bytes: le_i64, le_i64_of, "Little-endian";
    u16, 2, from_be_bytes: be_u16, be_u16_of, "Big-endian";
    u32, 4, from_be_bytes: be_u32, be_u32_of, "Big-endian";
    u64, 8, from_be_bytes: be_u64, be_u64_of, "Big-endian";
    u128, 16, from_be_bytes: be_u128, be_u128_of, "Big-endian";
}

/// Little-endian `f32` (`float4`) at `off`, if in bounds.
#[inline]
pub fn le_f32(b: &[u8], off: usize) -> Option<f32> {
    le_u32(b, off).map(f32::from_bits)
}

/// Little-endian `f64` (`float8`) at `off`, if in bounds.
#[inline]
pub fn le_f64(b: &[u8], off: usize) -> Option<f64> {
    le_u64(b, off).map(f64::from_bits)
}

/// The little-endian `i16`s of `b`, two bytes at a time; an odd last byte is not read.
#[inline]
pub fn le_i16s(b: &[u8]) -> impl Iterator<Item = i16> + '_ {
    b.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]))
}

/// The little-endian `u32`s of `b`, four bytes at a time; a shorter tail is not read.
#[inline]
pub fn le_u32s(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// The little-endian 64-bit words of `b`, eight bytes at a time, and the bytes left after the
/// last whole word: for tests that look at a word at a time.
#[inline]
pub fn le_u64_words(b: &[u8]) -> (impl Iterator<Item = u64> + '_, &[u8]) {
    let words = b.chunks_exact(8);
    let rest = words.remainder();
    let words = words.map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    (words, rest)
}

/// Up to 8 bytes as a little-endian word, zero-padded; `None` when longer. Built from whole
/// loads, not copied into a buffer and read back: the read-back of a short copy cannot be
/// forwarded from the store and stalls (this runs for every key the heap -> index check
/// hashes).
#[inline]
pub fn le_u64_padded(p: &[u8]) -> Option<u64> {
    Some(match *p {
        [a, b, c, d, e, f, g, h] => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
        [a, b, c, d] => u64::from(u32::from_le_bytes([a, b, c, d])),
        [a, b] => u64::from(u16::from_le_bytes([a, b])),
        _ if p.len() <= 8 => p
            .iter()
            .rev()
            .fold(0u64, |w, &byte| (w << 8) | u64::from(byte)),
        _ => return None,
    })
}

/// The first 16 bytes of `b` as a big-endian number, zero-padded when shorter: orders like
/// the bytes themselves.
#[inline]
pub fn be_u128_prefix(b: &[u8]) -> u128 {
    let mut a = [0u8; 16];
    let n = b.len().min(16);
    a[..n].copy_from_slice(&b[..n]);
    u128::from_be_bytes(a)
}

/// The bytes of a NUL-padded or NUL-terminated string field (`name`, `char[]`): up to the
/// first NUL, or all of `b` when it has none.
#[inline]
pub fn until_nul(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(end) => &b[..end],
        None => b,
    }
}

/// Writes `v` little-endian at `off`; `None` (and nothing written) if out of bounds.
#[inline]
pub fn put_le_u16(b: &mut [u8], off: usize, v: u16) -> Option<()> {
    b.get_mut(off..off.checked_add(2)?)?
        .copy_from_slice(&v.to_le_bytes());
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_stop_at_the_end_and_read_both_orders() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(le_u16(&b, 0), Some(0x0201));
        assert_eq!(be_u16(&b, 0), Some(0x0102));
        assert_eq!(le_u32(&b, 5), Some(0x0908_0706));
        assert_eq!(le_u32(&b, 6), None);
        assert_eq!(le_u16(&b, usize::MAX), None);
        assert_eq!(le_u64(&b, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(be_u64(&b, 0), Some(0x0102_0304_0506_0708));
        assert_eq!(le_i16(&[0xFE, 0xFF], 0), Some(-2));
        assert_eq!(le_i32(&(-7i32).to_le_bytes(), 0), Some(-7));
        assert_eq!(le_i64(&i64::MIN.to_le_bytes(), 0), Some(i64::MIN));
        assert_eq!(le_f64(&1.5f64.to_le_bytes(), 0), Some(1.5));
        assert_eq!(le_f32(&(-2.0f32).to_le_bytes(), 0), Some(-2.0));
        let mut u = [0u8; 16];
        u[15] = 1;
        assert_eq!(be_u128(&u, 0), Some(1));
        assert_eq!(be_u128(&u[1..], 0), None);
        assert_eq!(array::<3>(&b, 6), Some(&[7, 8, 9]));
        assert_eq!(array::<3>(&b, 7), None);
        assert_eq!(range(&b, 9, 0), Some(&[][..]));
        assert_eq!(range(&b, 9, 1), None);
    }

    #[test]
    fn words_padded_prefixes_and_strings() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        for n in 0..=8 {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&b[..n]);
            assert_eq!(le_u64_padded(&b[..n]), Some(u64::from_le_bytes(w)), "{n}");
        }
        assert_eq!(le_u64_padded(&b), None);
        let (mut words, rest) = le_u64_words(&b);
        assert_eq!(words.next(), Some(0x0807_0605_0403_0201));
        assert_eq!(words.next(), None);
        assert_eq!(rest, &[9]);
        assert_eq!(be_u128_prefix(&[0x80]), 0x80 << 120);
        assert_eq!(le_i16s(&[1, 0, 0xFF, 0xFF, 7]).collect::<Vec<_>>(), [1, -1]);
        assert_eq!(le_u32s(&[1, 0, 0, 0, 2]).collect::<Vec<_>>(), [1]);
        assert_eq!(until_nul(b"ab\0c"), b"ab");
        assert_eq!(until_nul(b"abc"), b"abc");
        let mut p = [0u8; 3];
        assert_eq!(put_le_u16(&mut p, 1, 0x0102), Some(()));
        assert_eq!(p, [0, 2, 1]);
        assert_eq!(put_le_u16(&mut p, 2, 7), None);
        assert_eq!(p, [0, 2, 1]);
    }
}
