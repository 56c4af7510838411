//! Synthetic page images shared by the unit tests of the page checks and of checksum enabling.

/// A heap-like 8 KiB page: a sane header (`pd_lower` 32, `pd_upper` 3000, `pd_special` 8192,
/// layout 4), two normal line pointers, and non-zero tuple bytes from `pd_upper` to the end that
/// vary with `seed`. `pd_checksum` is zero, as on a page written while checksums were off.
pub fn heap_like_page(seed: u8) -> Vec<u8> {
    let mut p = vec![0u8; 8192];
    p[12..14].copy_from_slice(&32u16.to_le_bytes());
    p[14..16].copy_from_slice(&3000u16.to_le_bytes());
    p[16..18].copy_from_slice(&8192u16.to_le_bytes());
    p[18..20].copy_from_slice(&0x2004u16.to_le_bytes());
    for (i, b) in p[3000..].iter_mut().enumerate() {
        *b = ((i % 251) as u8).wrapping_add(1).wrapping_add(seed).max(1);
    }
    // Two normal line pointers into those bytes: (6096, 2096) and (3000, 3096).
    let lp = |off: u32, len: u32| (off | (1 << 15) | (len << 17)).to_le_bytes();
    p[24..28].copy_from_slice(&lp(6096, 2096));
    p[28..32].copy_from_slice(&lp(3000, 3096));
    p
}

/// The header fields of one tuple for [`heap_page_with_tuples`].
#[derive(Debug, Clone, Copy)]
pub struct TupleSpec {
    pub xmin: u32,
    pub xmax: u32,
    pub ctid_block: u32,
    pub ctid_offset: u16,
}

impl TupleSpec {
    /// A committed, never updated tuple whose `t_ctid` is (`block`, `offset`).
    pub fn inserted(block: u32, offset: u16) -> TupleSpec {
        TupleSpec {
            xmin: 700,
            xmax: 0,
            ctid_block: block,
            ctid_offset: offset,
        }
    }
}

/// Length of each tuple [`heap_page_with_tuples`] writes: a 24-byte header and 40 data bytes.
pub const TUPLE_LEN: usize = 64;

/// An 8 KiB heap page holding one 64-byte tuple per spec (line pointer `i + 1` for spec `i`,
/// stored downward from the end of the page like PostgreSQL does), `pd_checksum` zero.
pub fn heap_page_with_tuples(specs: &[TupleSpec]) -> Vec<u8> {
    heap_page_with_tuples_of(specs, TUPLE_LEN)
}

/// The same with tuples of `tuple_len` bytes (a multiple of 8, at least 32).
pub fn heap_page_with_tuples_of(specs: &[TupleSpec], tuple_len: usize) -> Vec<u8> {
    let mut p = vec![0u8; 8192];
    let lower = 24 + 4 * specs.len();
    let upper = 8192 - tuple_len * specs.len();
    p[12..14].copy_from_slice(&(lower as u16).to_le_bytes());
    p[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
    p[16..18].copy_from_slice(&8192u16.to_le_bytes());
    p[18..20].copy_from_slice(&0x2004u16.to_le_bytes());
    for (i, s) in specs.iter().enumerate() {
        let off = 8192 - tuple_len * (i + 1);
        let lp = off as u32 | (1 << 15) | ((tuple_len as u32) << 17);
        p[24 + 4 * i..28 + 4 * i].copy_from_slice(&lp.to_le_bytes());
        let t = &mut p[off..off + tuple_len];
        t[0..4].copy_from_slice(&s.xmin.to_le_bytes());
        t[4..8].copy_from_slice(&s.xmax.to_le_bytes());
        t[12..14].copy_from_slice(&((s.ctid_block >> 16) as u16).to_le_bytes());
        t[14..16].copy_from_slice(&(s.ctid_block as u16).to_le_bytes());
        t[16..18].copy_from_slice(&s.ctid_offset.to_le_bytes());
        t[18..20].copy_from_slice(&2u16.to_le_bytes());
        t[20..22].copy_from_slice(&0x0900u16.to_le_bytes());
        t[22] = 24;
        for (j, b) in t[24..].iter_mut().enumerate() {
            *b = (j as u8).wrapping_add(i as u8).wrapping_add(s.xmin as u8) | 1;
        }
    }
    p
}
