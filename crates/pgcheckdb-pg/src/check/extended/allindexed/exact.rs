//! Heap -> index by exact sums, for the tables whose state fits in memory: the table's heap
//! is read in the first phase of the scan, its B-tree indexes in the second.
//!
//! * The heap side keeps, per heap block, which root line pointers start a HOT chain with a
//!   certainly live tuple ([`LiveMap`]), and adds, per index, the fingerprints of those
//!   tuples' entries into the block's sum ([`Sums`]).
//! * The index side subtracts the fingerprint of every entry whose TID names such a root:
//!   other entries (dead tuples, aborted inserts) are not the check's business.
//!
//! A block whose sum is not zero afterwards lacks an entry, holds one with another key, or
//! holds one twice. The sums are exact: a lacking entry goes unseen only when the
//! fingerprints of a block's differences add up to zero modulo 2^64, a chance of 2^-64 per
//! block, where a Bloom filter misses about one in a hundred. Blocks that are not zero are read
//! again after the scan (`allindexed::diagnose`) to name the tuples.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::check::extended::lock;
use crate::check::extended::prefetch::prefetch_ptr;
use crate::format::bytes::le_u64_padded;
use crate::format::heap::SIZEOF_HEAP_TUPLE_HEADER;
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;

/// The most line pointers a heap page of `blcksz` bytes has: the server's
/// `MaxHeapTuplesPerPage` with the tuple header unaligned (23 bytes), so that it bounds the
/// count for every `MAXALIGN` (291 at 8 kB with 8-byte alignment, 302 here).
pub fn max_heap_tuples(blcksz: u64) -> u64 {
    let per_tuple = (SIZEOF_HEAP_TUPLE_HEADER + std::mem::size_of::<u32>()) as u64;
    blcksz.saturating_sub(SIZE_OF_PAGE_HEADER_DATA as u64) / per_tuple
}

/// The live roots of every block of one table, as 64-bit words per block (bit `offnum - 1`).
/// Each block is written by the one worker that reads its page, in the first phase; the
/// second phase only reads.
#[derive(Debug)]
pub struct LiveMap {
    words: Vec<AtomicU64>,
    words_per_block: usize,
}

impl LiveMap {
    /// 64-bit words of one block's bitmap.
    fn words_per_block(blcksz: u64) -> usize {
        max_heap_tuples(blcksz).div_ceil(64) as usize
    }

    /// Bytes a map of `blocks` blocks of `blcksz` bytes takes.
    pub fn bytes(blocks: u64, blcksz: u64) -> u64 {
        blocks * LiveMap::words_per_block(blcksz) as u64 * 8
    }

    pub fn new(blocks: u64, blcksz: u64) -> LiveMap {
        let words_per_block = LiveMap::words_per_block(blcksz);
        LiveMap {
            words: (0..blocks as usize * words_per_block)
                .map(|_| AtomicU64::new(0))
                .collect(),
            words_per_block,
        }
    }

    /// Line pointers a block's bitmap can hold.
    pub fn capacity(&self) -> usize {
        self.words_per_block * 64
    }

    /// Stores block `blkno`'s live-root bitmap (`bits`, bit `offnum - 1` as
    /// [`crate::check::extended::heap::live_roots`] makes it); a block past the map is ignored.
    pub fn store(&self, blkno: u32, bits: &[u8]) {
        let start = blkno as usize * self.words_per_block;
        let Some(words) = self.words.get(start..start + self.words_per_block) else {
            return;
        };
        for (word, chunk) in words.iter().zip(bits.chunks(8)) {
            // A chunk holds at most 8 bytes: never `None`.
            word.store(le_u64_padded(chunk).unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// The word holding the bit of TID (`blkno`, `offset`) and the bit's mask; `None` past
    /// the map or for offset 0.
    fn word(&self, blkno: u32, offset: u16) -> Option<(&AtomicU64, u64)> {
        let i = usize::from(offset).checked_sub(1)?;
        if i / 64 >= self.words_per_block {
            return None;
        }
        let word = self
            .words
            .get(blkno as usize * self.words_per_block + i / 64)?;
        Some((word, 1 << (i % 64)))
    }

    /// Whether TID (`blkno`, `offset`) names the root of a chain with a certainly live tuple.
    #[inline]
    pub fn is_live(&self, blkno: u32, offset: u16) -> bool {
        self.word(blkno, offset)
            .is_some_and(|(w, mask)| w.load(Ordering::Relaxed) & mask != 0)
    }

    /// Asks for the word of TID (`blkno`, `offset`) to be brought into the cache.
    #[inline]
    pub fn prefetch(&self, blkno: u32, offset: u16) {
        if let Some((w, _)) = self.word(blkno, offset) {
            prefetch_ptr(w);
        }
    }
}

/// One index's sums per heap block: the heap's fingerprints minus the index's (wrapping).
#[derive(Debug)]
pub struct Sums {
    sums: Vec<AtomicU64>,
    /// One bit per block whose live tuples the heap side could not all fingerprint (a key
    /// in TOAST or missing from the tuple): its sum says nothing.
    set_aside: Vec<AtomicU64>,
    /// Held by the one thread subtracting an index page's fingerprints: each subtraction is
    /// a load and a store, which another writer's must not interleave with.
    writer: Mutex<()>,
}

impl Sums {
    /// Bytes the sums of `blocks` blocks take.
    pub fn bytes(blocks: u64) -> u64 {
        blocks * 8 + blocks.div_ceil(64) * 8
    }

    pub fn new(blocks: u64) -> Sums {
        Sums {
            sums: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
            set_aside: (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            writer: Mutex::new(()),
        }
    }

    /// The heap side's sum of block `blkno` (first phase: one writer per block).
    pub fn store_heap(&self, blkno: u32, sum: u64) {
        if let Some(s) = self.sums.get(blkno as usize) {
            s.store(sum, Ordering::Relaxed);
        }
    }

    /// Block `blkno` has a live tuple the heap side could not fingerprint.
    pub fn set_aside(&self, blkno: u32) {
        if let Some(w) = self.set_aside.get(blkno as usize / 64) {
            w.fetch_or(1 << (blkno % 64), Ordering::Relaxed);
        }
    }

    fn is_set_aside(&self, blkno: usize) -> bool {
        self.set_aside
            .get(blkno / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (blkno % 64)) != 0)
    }

    /// Asks for the sum of block `blkno` to be brought into the cache.
    #[inline]
    pub fn prefetch(&self, blkno: u32) {
        if let Some(s) = self.sums.get(blkno as usize) {
            prefetch_ptr(s);
        }
    }

    /// Subtracts an index page's fingerprints `(heap block, fingerprint)`, under the writer
    /// lock.
    pub fn subtract_all(&self, entries: &[(u32, u64)]) {
        let _only_writer = lock(&self.writer);
        for &(blkno, fp) in entries {
            if let Some(s) = self.sums.get(blkno as usize) {
                s.store(
                    s.load(Ordering::Relaxed).wrapping_sub(fp),
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// The blocks whose sums are not zero, except those set aside.
    pub fn unbalanced(&self) -> Vec<u32> {
        self.sums
            .iter()
            .enumerate()
            .filter(|(i, s)| s.load(Ordering::Relaxed) != 0 && !self.is_set_aside(*i))
            .map(|(i, _)| i as u32)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_map_answers_for_the_bits_stored() {
        assert_eq!(max_heap_tuples(8192), 302);
        let map = LiveMap::new(3, 8192);
        assert_eq!(LiveMap::bytes(3, 8192), 3 * 5 * 8);
        // Offsets 1, 9 and 291 of block 1.
        let mut bits = vec![0u8; 291usize.div_ceil(8)];
        for off in [1usize, 9, 291] {
            bits[(off - 1) / 8] |= 1 << ((off - 1) % 8);
        }
        map.store(1, &bits);
        map.store(7, &bits); // past the map: ignored
        for off in 0..=300u16 {
            assert_eq!(map.is_live(1, off), [1, 9, 291].contains(&off), "{off}");
            assert!(!map.is_live(0, off) && !map.is_live(2, off) && !map.is_live(9, off));
        }
    }

    #[test]
    fn sums_balance_and_name_the_blocks_that_do_not() {
        let sums = Sums::new(130);
        for b in [0u32, 5, 64, 129] {
            sums.store_heap(b, 1000 + u64::from(b));
        }
        sums.subtract_all(&[(0, 600), (0, 400), (5, 1005), (64, 1064)]);
        sums.subtract_all(&[(129, 7), (200, 1)]);
        assert_eq!(sums.unbalanced(), vec![129]);
        sums.set_aside(129);
        assert!(sums.unbalanced().is_empty());
        // Wrapping: an index fingerprint larger than the heap's sum.
        sums.subtract_all(&[(3, u64::MAX)]);
        assert_eq!(sums.unbalanced(), vec![3]);
        sums.subtract_all(&[(3, 1)]);
        assert!(sums.unbalanced().is_empty());
    }
}
