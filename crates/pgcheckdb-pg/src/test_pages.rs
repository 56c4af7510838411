//! Synthetic page images shared by the unit tests of the page checks and of checksum enabling.

/// A heap-like 8 KiB page: a sane header (`pd_lower` 32, `pd_upper` 3000, `pd_special` 8192,
/// layout 4), a first line pointer byte, and non-zero tuple bytes from `pd_upper` to the end that
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
    p[24] = 0x58;
    p
}
