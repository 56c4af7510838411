//! The one checked byte reader of the on-disk formats: little-endian integers at an offset,
//! `None` instead of reading out of bounds, and PostgreSQL's alignment rule (`MAXALIGN`).

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

/// Little-endian `u16` at `off`, if in bounds.
pub(crate) fn le_u16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

/// Little-endian `u32` at `off`, if in bounds.
pub(crate) fn le_u32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}
