//! Byte layouts of what lives inside a page: line pointers (`ItemIdData`), heap tuple headers
//! (`HeapTupleHeaderData`), index tuples, and the special spaces of the index access methods.
//! Every decoder takes untrusted bytes and returns `None` instead of reading out of bounds.

pub mod brin;
pub mod btree;
pub mod gin;
pub mod gist;
pub mod hash;
pub mod heap;
pub mod index_tuple;
pub mod itemid;
pub mod special;
pub mod spgist;
pub mod toast;
pub mod vm;

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
