//! Little-endian fields of a page as the tests read and bend them, by byte offset: integers,
//! block numbers (`BlockIdData`: high half, then low half) and item pointers (`ItemPointerData`,
//! a TID: block number, then offset number). The caller knows the layout; an offset past the
//! page is a bug in the test and panics.

/// A change to one page's bytes, kept to be applied (and undone) later.
pub type Edit = Box<dyn Fn(&mut [u8])>;

/// The `u16` at byte `at`.
pub fn u16_at(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}

/// The `u32` at byte `at`.
pub fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

/// Writes `v` at byte `at`.
pub fn put_u16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at byte `at`.
pub fn put_u32(p: &mut [u8], at: usize, v: u32) {
    p[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The block number stored as `BlockIdData` at byte `at`.
pub fn block_id_at(p: &[u8], at: usize) -> u32 {
    ((u16_at(p, at) as u32) << 16) | u16_at(p, at + 2) as u32
}

/// Writes block number `block` as `BlockIdData` at byte `at`.
pub fn put_block_id(p: &mut [u8], at: usize, block: u32) {
    put_u16(p, at, (block >> 16) as u16);
    put_u16(p, at + 2, block as u16);
}

/// The TID (block, offset number) stored at byte `at`.
pub fn tid_at(p: &[u8], at: usize) -> (u32, u16) {
    (block_id_at(p, at), u16_at(p, at + 4))
}

/// Writes TID (`block`, `offset`) at byte `at`.
pub fn put_tid(p: &mut [u8], at: usize, block: u32, offset: u16) {
    put_block_id(p, at, block);
    put_u16(p, at + 4, offset);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tids_round_trip_high_half_first() {
        let mut p = [0u8; 8];
        put_tid(&mut p, 1, 0x0001_0002, 7);
        assert_eq!(p, [0, 1, 0, 2, 0, 7, 0, 0]);
        assert_eq!(tid_at(&p, 1), (0x0001_0002, 7));
        assert_eq!(u32_at(&p, 0), u32::from_le_bytes([0, 1, 0, 2]));
    }
}
