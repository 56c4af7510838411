//! A blocked Bloom filter shared by the scan workers: every fingerprint sets [`PROBES`] bits
//! inside one 512-bit block (one cache line), so an insert or a lookup costs one memory access.
//! The block is chosen within a window of [`WINDOW`] blocks that follows the heap block of the
//! entry's TID through the filter: the lookups of one heap page stay in a few kilobytes, and
//! so do the inserts of an index whose order follows the table's, instead of a cache miss each.
//! Bits are set with atomic `fetch_or`, so workers insert the entries of one index at once
//! without a lock. A Bloom filter never forgets: a fingerprint inserted is always found; one
//! never inserted is found by chance with the probability [`Bloom::false_positive_rate`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Words of one block: 8 x 64 bits, one cache line.
const BLOCK_WORDS: usize = 8;
/// Bits set per fingerprint.
pub const PROBES: u32 = 7;
/// Blocks an entry may fall in, given its heap block.
pub const WINDOW: u64 = 64;

/// The filter.
#[derive(Debug)]
pub struct Bloom {
    words: Vec<AtomicU64>,
    blocks: u64,
    /// Blocks of the table the TIDs point into (the window follows them).
    heap_blocks: u64,
}

impl Bloom {
    /// A filter of about `bits` bits (at least one block) for TIDs into a table of
    /// `heap_blocks` blocks.
    pub fn with_bits(bits: u64, heap_blocks: u64) -> Bloom {
        let blocks = (bits / (64 * BLOCK_WORDS as u64)).max(1);
        let words = (0..blocks as usize * BLOCK_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        Bloom {
            words,
            blocks,
            heap_blocks: heap_blocks.max(1),
        }
    }

    /// Bits in the filter.
    pub fn bits(&self) -> u64 {
        self.blocks * 64 * BLOCK_WORDS as u64
    }

    /// The block and the in-block bit positions of a fingerprint of an entry whose TID points
    /// at `heap_block`: the window from the heap block, the block in it from the high bits,
    /// each probe 9 bits of a second mixing of the fingerprint.
    fn positions(&self, fingerprint: u64, heap_block: u32) -> (usize, [u32; PROBES as usize]) {
        let window = WINDOW.min(self.blocks);
        let span = self.blocks - window;
        let base = (u64::from(heap_block).min(self.heap_blocks) as u128 * span as u128
            / self.heap_blocks as u128) as u64;
        let block = (base + (((fingerprint >> 32) * window) >> 32)) as usize;
        let mut h = mix(fingerprint);
        let mut bits = [0u32; PROBES as usize];
        for b in &mut bits {
            *b = (h & 511) as u32;
            h >>= 9;
        }
        (block * BLOCK_WORDS, bits)
    }

    /// Sets the fingerprint's bits: one atomic `fetch_or` per word of the block that gets a
    /// bit (about four of the eight for seven probes), not one per bit.
    pub fn insert(&self, fingerprint: u64, heap_block: u32) {
        let (base, bits) = self.positions(fingerprint, heap_block);
        let mut masks = [0u64; BLOCK_WORDS];
        for bit in bits {
            masks[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        for (word, mask) in self.words[base..base + BLOCK_WORDS].iter().zip(masks) {
            if mask != 0 {
                word.fetch_or(mask, Ordering::Relaxed);
            }
        }
    }

    /// Reads the block a fingerprint falls in, so that a following [`Bloom::insert`] finds
    /// it in the cache.
    pub fn touch(&self, fingerprint: u64, heap_block: u32) {
        let (base, _) = self.positions(fingerprint, heap_block);
        std::hint::black_box(self.words[base].load(Ordering::Relaxed));
    }

    pub fn contains(&self, fingerprint: u64, heap_block: u32) -> bool {
        let (base, bits) = self.positions(fingerprint, heap_block);
        bits.iter().all(|&bit| {
            self.words[base + (bit / 64) as usize].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0
        })
    }

    /// The chance that a fingerprint never inserted is found, after `entries` inserts: the
    /// fraction of set bits to the power of the probes, from the filter's actual fill (a
    /// blocked filter fills unevenly; measuring the fill accounts for it on average).
    pub fn false_positive_rate(&self) -> f64 {
        let set: u64 = self
            .words
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum();
        (set as f64 / self.bits() as f64).powi(PROBES as i32)
    }
}

/// `splitmix64`'s finaliser: spreads every input bit over the output.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_fingerprints_are_always_found_and_others_rarely() {
        // 100,000 entries, 60 per heap block.
        let bloom = Bloom::with_bits(10 * 100_000, 100_000 / 60);
        let block = |i: u64| (i % 100_000 / 60) as u32;
        for i in 0..100_000u64 {
            bloom.insert(mix(i), block(i));
        }
        assert!((0..100_000u64).all(|i| bloom.contains(mix(i), block(i))));
        let false_hits = (1_000_000..1_100_000u64)
            .filter(|&i| bloom.contains(mix(i), block(i)))
            .count();
        // 10 bits per entry, 7 probes in a 512-bit block: about 1 %.
        assert!(false_hits < 3_000, "{false_hits} false hits in 100,000");
        let rate = bloom.false_positive_rate();
        assert!(rate > 0.0001 && rate < 0.03, "{rate}");
    }

    #[test]
    fn an_empty_filter_finds_nothing() {
        let bloom = Bloom::with_bits(0, 0);
        assert_eq!(bloom.bits(), 512);
        assert!(!bloom.contains(12345, 7));
        assert_eq!(bloom.false_positive_rate(), 0.0);
    }
}
