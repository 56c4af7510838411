//! The data page checksum (`pd_checksum`), bit-exact with PostgreSQL's `pg_checksum_page`.
//!
//! The page is read as rows of 32 native-endian `u32` words; each of the 32 lanes runs an FNV-1a
//! style round (`t = s ^ v; s = t * FNV_PRIME ^ (t >> 17)`) over its column, then two rounds with
//! zero, the lanes are XOR-folded, the block number is XORed in and the result is reduced to
//! `1..=65535`. The 32 lanes are independent, so the loop vectorises; hot variants are compiled
//! for AVX2 and SSE4.1 and picked at run time.
//!
//! Each lane is a dependent chain of multiplies, so one page leaves the multiplier idle most of
//! the time. [`raw_block_sums`] therefore sums two pages at once with AVX2 (two independent sets
//! of lanes in flight): about 2× the single-page rate on cache-resident data. With SSE4.1 the
//! 16 XMM registers cannot hold both states, so there pages go one at a time.

use std::sync::OnceLock;

use crate::format::page::PD_CHECKSUM_OFFSET;

/// Number of independent lanes; part of the algorithm, not a tuning knob.
pub const N_SUMS: usize = 32;
const FNV_PRIME: u32 = 16_777_619;

/// Per-lane starting values ("offset basis").
const CHECKSUM_BASE_OFFSETS: [u32; N_SUMS] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E, 0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];

/// One mixing round of a lane.
#[inline(always)]
fn round(sum: u32, value: u32) -> u32 {
    let t = sum ^ value;
    t.wrapping_mul(FNV_PRIME) ^ (t >> 17)
}

/// The lane loop, written so that LLVM keeps the 32 lanes in vector registers.
///
/// `page.len()` must be a multiple of `4 * N_SUMS` (every PostgreSQL block size is). The two
/// bytes of `pd_checksum` are treated as zero without copying the page.
#[inline(always)]
fn block_sum_generic(page: &[u8]) -> u32 {
    let mut sums = CHECKSUM_BASE_OFFSETS;
    for (row_index, row) in page.chunks_exact(4 * N_SUMS).enumerate() {
        mix_row(&mut sums, row, row_index);
    }
    finish_sums(sums)
}

/// [`block_sum_generic`] of two pages of the same length, interleaved row by row so that the
/// two independent dependency chains overlap.
#[inline(always)]
fn block_sum_pair_generic(a: &[u8], b: &[u8]) -> [u32; 2] {
    let mut sums_a = CHECKSUM_BASE_OFFSETS;
    let mut sums_b = CHECKSUM_BASE_OFFSETS;
    let rows = a.chunks_exact(4 * N_SUMS).zip(b.chunks_exact(4 * N_SUMS));
    for (row_index, (row_a, row_b)) in rows.enumerate() {
        mix_row(&mut sums_a, row_a, row_index);
        mix_row(&mut sums_b, row_b, row_index);
    }
    [finish_sums(sums_a), finish_sums(sums_b)]
}

/// One row of 32 words into the 32 lanes; row 0 has `pd_checksum` masked out.
#[inline(always)]
fn mix_row(sums: &mut [u32; N_SUMS], row: &[u8], row_index: usize) {
    let mut words = [0u32; N_SUMS];
    for (word, bytes) in words.iter_mut().zip(row.chunks_exact(4)) {
        *word = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    if row_index == 0 {
        words[PD_CHECKSUM_OFFSET / 4] &= checksum_field_mask();
    }
    for (sum, word) in sums.iter_mut().zip(words) {
        *sum = round(*sum, word);
    }
}

/// Two rounds with zero, then the lanes XOR-folded.
#[inline(always)]
fn finish_sums(mut sums: [u32; N_SUMS]) -> u32 {
    for _ in 0..2 {
        for sum in sums.iter_mut() {
            *sum = round(*sum, 0);
        }
    }
    sums.iter().fold(0, |acc, s| acc ^ s)
}

/// Mask that clears the two `pd_checksum` bytes inside the third native-endian word.
#[inline(always)]
const fn checksum_field_mask() -> u32 {
    if cfg!(target_endian = "little") {
        0xFFFF_0000
    } else {
        0x0000_FFFF
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_sum_avx2(page: &[u8]) -> u32 {
    block_sum_generic(page)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_sum_pair_avx2(a: &[u8], b: &[u8]) -> [u32; 2] {
    block_sum_pair_generic(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
unsafe fn block_sum_sse41(page: &[u8]) -> u32 {
    block_sum_generic(page)
}

fn block_sum_portable(page: &[u8]) -> u32 {
    block_sum_generic(page)
}

type BlockSumFn = fn(&[u8]) -> u32;
type BlockSumPairFn = fn(&[u8], &[u8]) -> [u32; 2];

/// The kernels for this CPU: one page, and two pages of equal length at once.
#[derive(Clone, Copy)]
struct Kernel {
    single: BlockSumFn,
    pair: BlockSumPairFn,
}

/// The best kernels for this CPU, chosen once.
fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(select_kernel)
}

fn select_kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY (both closures): the CPU was just checked for AVX2.
            return Kernel {
                single: |page| unsafe { block_sum_avx2(page) },
                pair: |a, b| unsafe { block_sum_pair_avx2(a, b) },
            };
        }
        if std::is_x86_feature_detected!("sse4.1") {
            // SAFETY (both closures): the CPU was just checked for SSE4.1.
            return Kernel {
                single: |page| unsafe { block_sum_sse41(page) },
                pair: |a, b| unsafe { [block_sum_sse41(a), block_sum_sse41(b)] },
            };
        }
    }
    Kernel {
        single: block_sum_portable,
        pair: |a, b| [block_sum_portable(a), block_sum_portable(b)],
    }
}

/// Name of the kernel in use, for `--verbose` output and benchmarks.
pub fn kernel_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            return "avx2";
        }
        if std::is_x86_feature_detected!("sse4.1") {
            return "sse4.1";
        }
    }
    "portable"
}

/// The raw 32-bit block sum (before the block number is mixed in), with `pd_checksum` as zero.
///
/// Panics if `page.len()` is not a positive multiple of 128; callers pass whole blocks whose size
/// came from a validated `pg_control`.
pub fn raw_block_sum(page: &[u8]) -> u32 {
    assert_block_size(page.len());
    (kernel().single)(page)
}

/// The raw block sum of every `block_size` block of `blocks`, in order, into `out` (cleared
/// first; reused by the caller so the hot loop does not allocate). Pages are summed two at a
/// time where the CPU gains from it. Equal to [`raw_block_sum`] of each block.
///
/// Panics if `block_size` is not a positive multiple of 128 or `blocks.len()` not a multiple of it.
pub fn raw_block_sums(blocks: &[u8], block_size: usize, out: &mut Vec<u32>) {
    assert_block_size(block_size);
    assert!(
        blocks.len().is_multiple_of(block_size),
        "{} bytes are not whole blocks of {block_size}",
        blocks.len()
    );
    let k = kernel();
    out.clear();
    let mut pairs = blocks.chunks_exact(2 * block_size);
    for pair in pairs.by_ref() {
        let (a, b) = pair.split_at(block_size);
        out.extend_from_slice(&(k.pair)(a, b));
    }
    if !pairs.remainder().is_empty() {
        out.push((k.single)(pairs.remainder()));
    }
}

fn assert_block_size(len: usize) {
    assert!(
        len != 0 && len.is_multiple_of(4 * N_SUMS),
        "page length {len} is not a block size"
    );
}

/// Mixes a block number into a raw sum and reduces it to PostgreSQL's 16-bit checksum.
#[inline]
pub fn checksum_from_raw(raw: u32, blkno: u32) -> u16 {
    (((raw ^ blkno) % 65535) + 1) as u16
}

/// `pg_checksum_page`: the checksum PostgreSQL stores in `pd_checksum` for this page at the
/// absolute block number `blkno` of its fork.
pub fn pg_checksum_page(page: &[u8], blkno: u32) -> u16 {
    checksum_from_raw(raw_block_sum(page), blkno)
}

/// Every block number in `0..nblocks` (other than `except`) for which the page's raw sum yields
/// `stored`; used to recognise a page written at the wrong place.
pub fn matching_block_numbers(raw: u32, stored: u16, nblocks: u32, except: u32) -> Vec<u32> {
    (0..nblocks)
        .filter(|&b| b != except && checksum_from_raw(raw, b) == stored)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::page::DEFAULT_BLCKSZ as BLCKSZ;

    fn page_filled(byte: u8) -> Vec<u8> {
        vec![byte; BLCKSZ]
    }

    fn page_empty_heap() -> Vec<u8> {
        let mut p = vec![0u8; BLCKSZ];
        p[12..20].copy_from_slice(&[0x18, 0x00, 0x00, 0x20, 0x00, 0x20, 0x04, 0x20]);
        p
    }

    fn page_pattern() -> Vec<u8> {
        (0..BLCKSZ).map(|i| (i & 0xFF) as u8).collect()
    }

    /// Values confirmed by `pg_checksums` 15.18 and 18.6 on crafted relation files
    /// (research notes, pg-physical §1.5 and §8).
    #[test]
    fn known_answers_from_pg_checksums() {
        let a = page_filled(0x01);
        assert_eq!(pg_checksum_page(&a, 0), 0x0497);
        assert_eq!(pg_checksum_page(&a, 1), 0x0498);
        assert_eq!(pg_checksum_page(&a, 2), 0x0499);
        assert_eq!(pg_checksum_page(&a, 4), 0x0493);
        assert_eq!(pg_checksum_page(&a, 5), 0x0494);
        assert_eq!(pg_checksum_page(&a, 131_072), 0x0499);
        assert_eq!(pg_checksum_page(&a, 131_077), 0x0496);
        let e = page_empty_heap();
        assert_eq!(pg_checksum_page(&e, 0), 0x6560);
        assert_eq!(pg_checksum_page(&e, 4), 0x655C);
        assert_eq!(pg_checksum_page(&page_pattern(), 1), 0xE707);
        assert_eq!(pg_checksum_page(&page_filled(0xFF), 2), 0x0E1E);
    }

    #[test]
    fn raw_sums_match_reference() {
        assert_eq!(raw_block_sum(&page_filled(0x01)), 0xCFC9_34CC);
        assert_eq!(raw_block_sum(&page_empty_heap()), 0x0302_625D);
        assert_eq!(raw_block_sum(&page_pattern()), 0xC4FD_2208);
        assert_eq!(raw_block_sum(&page_filled(0xFF)), 0x0C7B_01A0);
        assert_eq!(raw_block_sum(&page_filled(0x00)), 0x54AF_71FA);
    }

    #[test]
    fn stored_checksum_is_ignored_but_flags_are_not() {
        let mut p = page_pattern();
        p[8] = 0x12;
        p[9] = 0x34;
        assert_eq!(pg_checksum_page(&p, 0), 0xE706);
        let mut a = page_filled(0x01);
        a[10] = 0;
        a[11] = 0;
        assert_eq!(pg_checksum_page(&a, 0), 0x4235);
    }

    #[test]
    fn every_kernel_agrees_with_portable() {
        let pages = [page_filled(0x01), page_pattern(), page_empty_heap()];
        for page in &pages {
            let expected = block_sum_portable(page);
            assert_eq!((kernel().single)(page), expected);
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx2") {
                    assert_eq!(unsafe { block_sum_avx2(page) }, expected);
                }
                if std::is_x86_feature_detected!("sse4.1") {
                    assert_eq!(unsafe { block_sum_sse41(page) }, expected);
                }
            }
        }
    }

    #[test]
    fn pair_kernels_agree_with_single_page() {
        let pages = [
            page_filled(0x01),
            page_pattern(),
            page_empty_heap(),
            page_filled(0xFF),
        ];
        for a in &pages {
            for b in &pages {
                let expected = [block_sum_portable(a), block_sum_portable(b)];
                assert_eq!(block_sum_pair_generic(a, b), expected);
                assert_eq!((kernel().pair)(a, b), expected);
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") {
                    assert_eq!(unsafe { block_sum_pair_avx2(a, b) }, expected);
                }
            }
        }
    }

    #[test]
    fn bulk_sums_cover_odd_and_even_block_counts() {
        let pages = [
            page_filled(0x01),
            page_pattern(),
            page_empty_heap(),
            page_filled(0xFF),
            page_filled(0x00),
        ];
        let mut out = vec![7];
        for n in 0..=pages.len() {
            let blocks: Vec<u8> = pages[..n].concat();
            raw_block_sums(&blocks, BLCKSZ, &mut out);
            let expected: Vec<u32> = pages[..n].iter().map(|p| raw_block_sum(p)).collect();
            assert_eq!(out, expected, "{n} blocks");
        }
    }

    #[test]
    fn other_block_sizes_from_reference() {
        assert_eq!(pg_checksum_page(&vec![1u8; 1024], 0), 0x72B6);
        assert_eq!(pg_checksum_page(&vec![1u8; 4096], 0), 0x483F);
        assert_eq!(pg_checksum_page(&vec![1u8; 16384], 0), 0x2B66);
        assert_eq!(pg_checksum_page(&vec![1u8; 32768], 0), 0x65AC);
    }

    #[test]
    fn misplaced_candidates_include_the_true_block() {
        let page = page_pattern();
        let stored = pg_checksum_page(&page, 7);
        let raw = raw_block_sum(&page);
        let found = matching_block_numbers(raw, stored, 100, 9);
        assert!(found.contains(&7), "{found:?}");
    }
}
