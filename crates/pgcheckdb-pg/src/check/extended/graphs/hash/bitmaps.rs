//! The overflow bitmap pages of one hash index against its bucket chains: the pages
//! `hashm_mapp` lists must be bitmap pages, and bit `n` (overflow page number `n`, at the
//! block [`Meta::bit_blkno`] gives) must be set exactly for the overflow pages in a chain and
//! for the bitmap pages themselves.

use serde_json::json;

use super::check::{type_name, Slot, Walk};
use super::Meta;

impl Walk<'_> {
    /// Checks the bitmap pages and the bits of every page the chains reached.
    pub(super) fn bitmaps(&mut self) {
        let maps = self.map_pages();
        let meta: &Meta = self.meta;
        let bit_set = |bit: u64| -> Option<bool> {
            let page = maps.get((bit >> meta.hashm_bmshift) as usize)?.as_ref()?;
            let n = bit & (meta.bits_per_map() - 1);
            // The bitmap is an array of uint32 words: bit n is bit n % 32 of word n / 32,
            // which on a little-endian machine is bit n % 8 of byte n / 8.
            let byte = page.get((n / 8) as usize)?;
            Some(byte & (1 << (n % 8)) != 0)
        };
        let owners: Vec<(u64, u32)> = self.owner.iter().map(|(&k, &v)| (k, v)).collect();
        for (blkno, b) in owners {
            match meta.blkno_bit(blkno) {
                None => self.problem(
                    blkno,
                    format!("overflow page in bucket {b}'s chain lies where the metapage's hashm_spares puts no overflow page"),
                    json!({"bucket": b}),
                ),
                Some(bit) if bit_set(bit) == Some(false) => {
                    let map = self.map_of(bit);
                    self.problem(
                        map,
                        format!("bitmap page marks overflow page {bit} (block {blkno}) free, but bucket {b}'s chain holds it"),
                        json!({"bit": bit, "overflow_page": blkno, "bucket": b}),
                    );
                }
                Some(_) => {}
            }
        }
        for (i, &blkno) in meta.hashm_mapp.iter().enumerate() {
            if let Some(bit) = meta.blkno_bit(blkno as u64) {
                if bit_set(bit) == Some(false) {
                    let map = self.map_of(bit);
                    self.problem(
                        map,
                        format!("bitmap page marks overflow page {bit} (block {blkno}, bitmap page {i} itself) free"),
                        json!({"bit": bit, "bitmap_page": blkno}),
                    );
                }
            }
        }
        if self.complete && maps.iter().all(Option::is_some) {
            self.leaked(&bit_set);
        }
    }

    /// Bits set for overflow pages that no chain holds and that are not bitmap pages.
    fn leaked(&mut self, bit_set: &dyn Fn(u64) -> Option<bool>) {
        let meta = self.meta;
        for bit in 0..meta.overflow_pages() {
            if bit_set(bit) != Some(true) {
                continue;
            }
            let blkno = meta.bit_blkno(bit);
            if self.owner.contains_key(&blkno)
                || meta.hashm_mapp.iter().any(|&m| m as u64 == blkno)
                || blkno >= self.check.blocks
                || matches!(self.check.slot(blkno), Slot::NotRead | Slot::Damaged)
            {
                continue;
            }
            let map = self.map_of(bit);
            let kind = type_name(self.check.slot(blkno));
            self.problem(
                map,
                format!("bitmap page marks overflow page {bit} (block {blkno}, a {kind} page) in use, but no bucket chain holds it"),
                json!({"bit": bit, "overflow_page": blkno, "page_type": kind}),
            );
        }
    }

    /// The block of the bitmap page that holds `bit`.
    fn map_of(&self, bit: u64) -> u64 {
        let i = (bit >> self.meta.hashm_bmshift) as usize;
        self.meta.hashm_mapp.get(i).map_or(0, |&b| b as u64)
    }

    /// The bytes of each bitmap page `hashm_mapp` lists, or `None` when it could not be read;
    /// a listed page that is not a bitmap page is a problem.
    fn map_pages(&mut self) -> Vec<Option<Vec<u8>>> {
        let mut maps = Vec::new();
        for (i, &blkno) in self.meta.hashm_mapp.clone().iter().enumerate() {
            let at = blkno as u64;
            if at == 0 || at >= self.check.blocks {
                // The standard level reports a hashm_mapp entry outside the index.
                maps.push(None);
                continue;
            }
            let slot = self.check.slot(at);
            match slot {
                Slot::Bitmap => maps.push(self.check.bitmaps.get(&blkno).cloned()),
                Slot::NotRead | Slot::Damaged => maps.push(None),
                _ => {
                    let kind = type_name(slot);
                    self.problem(
                        at,
                        format!("the metapage lists block {at} as bitmap page {i}, but it is a {kind} page"),
                        json!({"bitmap_page": i, "page_type": kind}),
                    );
                    maps.push(None);
                }
            }
        }
        maps
    }
}
