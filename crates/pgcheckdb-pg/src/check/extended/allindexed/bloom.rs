//! A blocked Bloom filter shared by the scan workers: every fingerprint sets [`PROBES`] bits
//! inside one 64-bit word, so an insert is one atomic `fetch_or` and a lookup one load. The
//! word is chosen within a window of [`WINDOW`] cache lines that follows the heap block of the
//! entry's TID through the filter: the lookups of one heap page stay in a few kilobytes, and
//! so do the inserts of an index whose order follows the table's, instead of a cache miss each.
//! Workers insert a whole leaf page's entries under the filter's lock, each with a plain load
//! and store: one locked instruction per page instead of one `fetch_or` (a locked
//! read-modify-write, about half of an insert's time) per entry. A Bloom filter never
//! forgets: a fingerprint inserted is always found; one never inserted is found by chance with
//! the probability [`Bloom::false_positive_rate`]. One word per fingerprint fills less evenly
//! than a whole cache line, so it takes more bits per entry ([`super::BITS_PER_ENTRY`]) for the same
//! chance; it halves the time of an insert (one word written instead of about four).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::check::extended::lock;
use crate::check::extended::prefetch::prefetch_ptr;

/// Words of one cache line.
const LINE_WORDS: usize = 8;
/// Bits set per fingerprint, all in one word.
pub const PROBES: u32 = 5;
/// Cache lines an entry may fall in, given its heap block.
pub const WINDOW: u64 = 64;

/// The filter.
#[derive(Debug)]
pub struct Bloom {
    words: Vec<AtomicU64>,
    /// Held by the one thread writing words: every write is a read-modify-write of a whole
    /// word, which another writer's must not interleave with (a bit would be lost).
    writer: Mutex<()>,
    lines: u64,
    /// Blocks of the table the TIDs point into (the window follows them).
    heap_blocks: u64,
    /// Lines the window can start at, per heap block, as a 32.32 fixed-point number: the
    /// window of a heap block is found with a multiplication instead of a division.
    lines_per_block: u64,
}

/// Where one fingerprint lives in the filter: a word and the bits it sets there. Computed once
/// per entry, then prefetched and inserted or looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    word: usize,
    mask: u64,
}

impl Bloom {
    /// A filter of about `bits` bits (at least one cache line) for TIDs into a table of
    /// `heap_blocks` blocks.
    pub fn with_bits(bits: u64, heap_blocks: u64) -> Bloom {
        let lines = (bits / (64 * LINE_WORDS as u64)).max(1);
        let words = (0..lines as usize * LINE_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        let heap_blocks = heap_blocks.max(1);
        let span = lines - WINDOW.min(lines);
        Bloom {
            words,
            writer: Mutex::new(()),
            lines,
            heap_blocks,
            lines_per_block: ((u128::from(span) << 32) / u128::from(heap_blocks)) as u64,
        }
    }

    /// Bits in the filter.
    pub fn bits(&self) -> u64 {
        self.lines * 64 * LINE_WORDS as u64
    }

    /// The slot of a fingerprint of an entry whose TID points at `heap_block`: the window
    /// from the heap block, the cache line in it from the fingerprint's high 32 bits, the word
    /// in the line from bits 29-31, each of the [`PROBES`] bits from 6 of bits 0-28 and 32-33
    /// (the fingerprint is already a mixed hash: its bits are independent).
    pub fn slot(&self, fingerprint: u64, heap_block: u32) -> Slot {
        let window = WINDOW.min(self.lines);
        let block = u64::from(heap_block).min(self.heap_blocks);
        let base = ((u128::from(block) * u128::from(self.lines_per_block)) >> 32) as u64;
        let line = (base + (((fingerprint >> 32) * window) >> 32)) as usize;
        let word = ((fingerprint >> 29) & (LINE_WORDS as u64 - 1)) as usize;
        let probes = (fingerprint & 0x1FFF_FFFF) | ((fingerprint >> 3) & 0x6000_0000);
        let mut mask = 0u64;
        for i in 0..PROBES {
            mask |= 1 << ((probes >> (6 * i)) & 63);
        }
        Slot {
            word: line * LINE_WORDS + word,
            mask,
        }
    }

    /// Sets the bits of every slot, under the writer lock.
    pub fn insert_all(&self, slots: &[Slot]) {
        let _only_writer = lock(&self.writer);
        for &slot in slots {
            let word = &self.words[slot.word];
            word.store(word.load(Ordering::Relaxed) | slot.mask, Ordering::Relaxed);
        }
    }

    /// Asks for the slot's word to be brought into the cache, so that a following
    /// [`Bloom::insert_all`] or [`Bloom::contains`] finds it there (a hint: the loads of many
    /// fingerprints overlap instead of waiting one after another).
    pub fn prefetch(&self, slot: Slot) {
        prefetch_ptr(&self.words[slot.word]);
    }

    pub fn contains(&self, slot: Slot) -> bool {
        self.words[slot.word].load(Ordering::Relaxed) & slot.mask == slot.mask
    }

    /// The chance that a fingerprint never inserted is found, after the inserts so far: the
    /// mean over the words of the fraction of the word's bits set, to the power of the probes
    /// (a lookup lands in one word; counting each word's own fill accounts for words that
    /// filled more than others).
    pub fn false_positive_rate(&self) -> f64 {
        // How many words have each count of bits set, then one power per count.
        let mut words_with = [0u64; 65];
        for w in &self.words {
            words_with[w.load(Ordering::Relaxed).count_ones() as usize] += 1;
        }
        let sum: f64 = words_with
            .iter()
            .enumerate()
            .map(|(set, &n)| n as f64 * (set as f64 / 64.0).powi(PROBES as i32))
            .sum();
        sum / self.words.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `splitmix64`'s finaliser: spreads every input bit over the output.
    pub fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn inserted_fingerprints_are_always_found_and_others_rarely() {
        // 100,000 entries, 60 per heap block.
        let bloom = Bloom::with_bits(12 * 100_000, 100_000 / 60);
        let block = |i: u64| (i % 100_000 / 60) as u32;
        let slot = |i: u64| bloom.slot(mix(i), block(i));
        let slots: Vec<Slot> = (0..100_000u64).map(slot).collect();
        bloom.insert_all(&slots);
        assert!((0..100_000u64).all(|i| bloom.contains(slot(i))));
        let false_hits = (1_000_000..1_100_000u64)
            .filter(|&i| bloom.contains(slot(i)))
            .count();
        // 12 bits per entry, 5 probes in one word: about 1 %.
        assert!(false_hits < 3_000, "{false_hits} false hits in 100,000");
        let rate = bloom.false_positive_rate();
        assert!(rate > 0.0001 && rate < 0.03, "{rate}");
    }

    #[test]
    fn a_page_waits_for_the_writer_before_it() {
        // Writes are plain loads and stores: another thread's page must not be written while
        // one holds the filter, or a bit set in between would be lost.
        let bloom = Bloom::with_bits(0, 0);
        let slot = Slot { word: 3, mask: 1 };
        std::thread::scope(|s| {
            let held = lock(&bloom.writer);
            let writer = s.spawn(|| bloom.insert_all(&[slot]));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(
                !bloom.contains(slot),
                "written while another writer held the filter"
            );
            drop(held);
            writer.join().expect("the writer");
        });
        assert!(bloom.contains(slot));
    }

    #[test]
    fn an_empty_filter_finds_nothing() {
        let bloom = Bloom::with_bits(0, 0);
        assert_eq!(bloom.bits(), 512);
        assert!(!bloom.contains(bloom.slot(12345, 7)));
        assert_eq!(bloom.false_positive_rate(), 0.0);
    }
}
