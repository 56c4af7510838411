//! The cross-page rules of one hash index, checked once every page's facts are in:
//!
//! * bucket `B`'s primary page (`BUCKET_TO_BLKNO`) is an `LH_BUCKET_PAGE` of bucket `B`;
//! * its overflow chain (`hasho_nextblkno`) stays inside the index, has no cycle, holds only
//!   `LH_OVERFLOW_PAGE`s of bucket `B` each naming the page before it in `hasho_prevblkno`,
//!   and shares no page with another chain;
//! * every tuple's hash code has the low bits of `B` (any bucket that ever held it does), and
//!   when the primary page has no split pending (`LH_BUCKET_BEING_SPLIT`,
//!   `LH_BUCKET_NEEDS_SPLIT_CLEANUP`) maps to `B` under the metapage's masks;
//! * every page `hashm_mapp` lists is a bitmap page; every chain page and bitmap page is
//!   marked in use in the bitmaps; and, when every chain and bitmap page could be read, no
//!   other overflow page is marked in use (allocating an overflow page links it into a chain
//!   and sets its bit in one WAL record, freeing one unlinks it and clears the bit in one).
//!
//! Pages that were not read or are damaged end a walk without a conclusion; pages no chain
//! reaches (freed `LH_UNUSED_PAGE`s, pages allocated for buckets not yet in use) are not
//! judged.

use crate::format::page::INVALID_BLOCK_NUMBER;
use std::collections::{BTreeMap, HashMap};

use serde_json::json;

use super::emit::{tag, HashDigest};
use super::{lineage_mask, page_type, Meta, LH_SPLIT_PENDING};
use crate::check::extended::facts::Reader;
use crate::check::extended::graphs::{GraphCheck, GraphInfo, GraphProblem};

/// What a bucket, overflow or unused page says of itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageFact {
    pub hasho_flag: u16,
    pub hasho_bucket: u32,
    pub hasho_prevblkno: u32,
    pub hasho_nextblkno: u32,
    pub digest: HashDigest,
}

/// What is known of one block.
#[derive(Debug, Clone, Copy)]
pub(super) enum Slot {
    NotRead,
    Damaged,
    New,
    Meta,
    Bitmap,
    Page(PageFact),
}

/// The cross-page check of one hash index: about 30 bytes per block, plus the bitmap pages.
pub struct Check {
    pub(super) blocks: u64,
    meta: Option<Meta>,
    slots: Vec<Slot>,
    /// Bitmap pages' bytes, by block.
    pub(super) bitmaps: HashMap<u32, Vec<u8>>,
}

impl Check {
    pub fn new(info: &GraphInfo) -> Check {
        Check {
            blocks: info.blocks,
            meta: None,
            slots: Vec::new(),
            bitmaps: HashMap::new(),
        }
    }

    fn set(&mut self, blkno: u32, slot: Slot) {
        let i = blkno as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, Slot::NotRead);
        }
        self.slots[i] = slot;
    }

    pub(super) fn slot(&self, blkno: u64) -> Slot {
        self.slots
            .get(blkno as usize)
            .copied()
            .unwrap_or(Slot::NotRead)
    }
}

impl GraphCheck for Check {
    fn record(&mut self, blkno: u32, body: &[u8]) {
        let mut r = Reader::body(body);
        match r.u8() {
            Some(tag::META) => {
                self.meta = r.bytes().and_then(Meta::parse);
                self.set(blkno, Slot::Meta);
            }
            Some(tag::BITMAP) => {
                if let Some(bits) = r.bytes() {
                    self.bitmaps.insert(blkno, bits.to_vec());
                    self.set(blkno, Slot::Bitmap);
                }
            }
            Some(tag::PAGE) => {
                if let Some(f) = read_page(&mut r) {
                    self.set(blkno, Slot::Page(f));
                }
            }
            _ => {}
        }
    }

    fn damaged(&mut self, blkno: u32) {
        self.set(blkno, Slot::Damaged);
    }

    fn new_page(&mut self, blkno: u32) {
        self.set(blkno, Slot::New);
    }

    fn finish(self: Box<Self>) -> Vec<GraphProblem> {
        let Some(meta) = self.meta.clone() else {
            return Vec::new();
        };
        let mut walk = Walk {
            check: &self,
            meta: &meta,
            owner: BTreeMap::new(),
            complete: true,
            out: Vec::new(),
        };
        for b in 0..=meta.hashm_maxbucket {
            let blkno = meta.bucket_blkno(b);
            if blkno >= self.blocks {
                // The standard level reports a metapage that needs more blocks than exist.
                walk.complete = false;
                break;
            }
            walk.bucket(b, blkno);
        }
        walk.bitmaps();
        walk.out
    }
}

fn read_page(r: &mut Reader<'_>) -> Option<PageFact> {
    Some(PageFact {
        hasho_flag: r.u16()?,
        hasho_bucket: r.u32()?,
        hasho_prevblkno: r.u32()?,
        hasho_nextblkno: r.u32()?,
        digest: HashDigest {
            tuples: r.u16()?,
            and: r.u32()?,
            or: r.u32()?,
        },
    })
}

/// The walk over the buckets and bitmaps, with what it found.
pub(super) struct Walk<'a> {
    pub(super) check: &'a Check,
    pub(super) meta: &'a Meta,
    /// Every overflow page reached, with the bucket whose chain holds it.
    pub(super) owner: BTreeMap<u64, u32>,
    /// False once some chain or bitmap page could not be followed to the end.
    pub(super) complete: bool,
    out: Vec<GraphProblem>,
}

pub(super) fn type_name(slot: Slot) -> &'static str {
    match slot {
        Slot::NotRead | Slot::Damaged => "unknown",
        Slot::New => "all-zero",
        Slot::Meta => "metapage",
        Slot::Bitmap => "bitmap",
        Slot::Page(f) => match f.hasho_flag & page_type::MASK {
            page_type::UNUSED => "unused",
            page_type::OVERFLOW => "overflow",
            page_type::BUCKET => "bucket",
            _ => "unknown",
        },
    }
}

impl Walk<'_> {
    pub(super) fn problem(&mut self, blkno: u64, message: String, detail: serde_json::Value) {
        self.out.push(GraphProblem::new(blkno, message, detail));
    }

    /// Checks bucket `b`'s primary page at `blkno` and walks its overflow chain.
    fn bucket(&mut self, b: u32, blkno: u64) {
        let slot = self.check.slot(blkno);
        let primary = match slot {
            Slot::NotRead | Slot::Damaged => {
                self.complete = false;
                return;
            }
            Slot::Page(f) if f.hasho_flag & page_type::MASK == page_type::BUCKET => f,
            _ => {
                self.complete = false;
                let bucket = match slot {
                    Slot::Page(f) => json!(f.hasho_bucket),
                    _ => json!(null),
                };
                let kind = type_name(slot);
                return self.problem(
                    blkno,
                    format!("block {blkno} is bucket {b}'s primary page (BUCKET_TO_BLKNO), but it is a {kind} page"),
                    json!({"bucket": b, "page_type": kind, "hasho_bucket": bucket}),
                );
            }
        };
        if primary.hasho_bucket != b {
            self.complete = false;
            let got = primary.hasho_bucket;
            return self.problem(
                blkno,
                format!("block {blkno} is bucket {b}'s primary page (BUCKET_TO_BLKNO), but its hasho_bucket is {got}"),
                json!({"bucket": b, "hasho_bucket": got}),
            );
        }
        let split_pending = primary.hasho_flag & LH_SPLIT_PENDING != 0;
        self.tuples(b, blkno, &primary, split_pending);
        self.chain(b, blkno, primary.hasho_nextblkno, split_pending);
    }

    /// Follows bucket `b`'s chain from the primary page at `blkno`.
    fn chain(&mut self, b: u32, blkno: u64, first: u32, split_pending: bool) {
        let (mut prev, mut next) = (blkno, first);
        while next != INVALID_BLOCK_NUMBER {
            let at = next as u64;
            let link = json!({"bucket": b, "next": at});
            if at == 0 || at >= self.check.blocks {
                let blocks = self.check.blocks;
                return self.end_with(prev, format!("bucket {b}'s chain: hasho_nextblkno {at} is outside the index's {blocks} blocks"), link);
            }
            if let Some(&other) = self.owner.get(&at) {
                let message = if other == b {
                    format!("bucket {b}'s chain links back to block {at}, already in it: a cycle")
                } else {
                    format!("bucket {b}'s chain links to block {at}, which is in bucket {other}'s chain")
                };
                return self.end_with(prev, message, link);
            }
            let slot = self.check.slot(at);
            let page = match slot {
                Slot::NotRead | Slot::Damaged => {
                    self.complete = false;
                    return;
                }
                Slot::Page(f) if f.hasho_flag & page_type::MASK == page_type::OVERFLOW => f,
                _ => {
                    let kind = type_name(slot);
                    return self.end_with(prev, format!("bucket {b}'s chain links to block {at}, a {kind} page, not an overflow page"), link);
                }
            };
            self.owner.insert(at, b);
            if page.hasho_bucket != b {
                let got = page.hasho_bucket;
                return self.end_with(
                    at,
                    format!("overflow page in bucket {b}'s chain has hasho_bucket {got}"),
                    json!({"bucket": b, "hasho_bucket": got, "prev": prev}),
                );
            }
            if page.hasho_prevblkno as u64 != prev {
                let got = page.hasho_prevblkno;
                self.problem(
                    at,
                    format!("overflow page in bucket {b}'s chain has hasho_prevblkno {got}, but block {prev} links to it"),
                    json!({"bucket": b, "hasho_prevblkno": got, "prev": prev}),
                );
            }
            self.tuples(b, at, &page, split_pending);
            prev = at;
            next = page.hasho_nextblkno;
        }
    }

    /// A problem that ends a chain walk: what follows is not known.
    fn end_with(&mut self, blkno: u64, message: String, detail: serde_json::Value) {
        self.complete = false;
        self.problem(blkno, message, detail);
    }

    /// The hash codes of the tuples of a page in bucket `b`'s chain.
    fn tuples(&mut self, b: u32, blkno: u64, page: &PageFact, split_pending: bool) {
        let d = page.digest;
        if d.tuples == 0 {
            return;
        }
        let agree = |mask: u32| d.and & mask == b & mask && d.or & mask == b & mask;
        let m = self.meta;
        let detail = json!({
            "bucket": b, "tuples": d.tuples, "hashm_maxbucket": m.hashm_maxbucket,
            "hashm_highmask": m.hashm_highmask, "hashm_lowmask": m.hashm_lowmask,
        });
        if !agree(lineage_mask(b)) {
            return self.problem(
                blkno,
                format!("a tuple in bucket {b}'s chain has a hash code no bucket {b} can hold (its low bits differ)"),
                detail,
            );
        }
        if split_pending {
            return;
        }
        let mask = m.bucket_mask(b);
        if !agree(mask) {
            self.problem(
                blkno,
                format!("a tuple in bucket {b}'s chain has a hash code that maps to another bucket, and no split of bucket {b} is pending"),
                detail,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::extended::graphs::testing::{body, info};
    use crate::check::extended::graphs::GraphAm;

    /// `HashMetaPageData` bytes: 4 buckets (blocks 1..=4, masks 7/3), splitpoint 2 with
    /// `spares` overflow pages (the bitmap page at block 5 is the first), one bitmap page.
    fn meta_bytes(spares2: u32) -> Vec<u8> {
        let mut m = vec![0u8; 52 + 4 * 98 + 4];
        let put =
            |m: &mut Vec<u8>, at: usize, v: u32| m[at..at + 4].copy_from_slice(&v.to_le_bytes());
        m[20..22].copy_from_slice(&4096u16.to_le_bytes());
        m[22..24].copy_from_slice(&15u16.to_le_bytes());
        put(&mut m, 24, 3);
        put(&mut m, 28, 7);
        put(&mut m, 32, 3);
        put(&mut m, 36, 2);
        put(&mut m, 44, 1);
        put(&mut m, 52 + 8, spares2);
        put(&mut m, 52 + 4 * 98, 5);
        m
    }

    struct Page {
        flag: u16,
        bucket: u32,
        prev: u32,
        next: u32,
        codes: Vec<u32>,
    }

    impl Page {
        fn hasho_flag_or(&mut self, flag: u16) {
            self.flag |= flag;
        }
    }

    fn page_body(p: &Page) -> Vec<u8> {
        let and = p.codes.iter().fold(u32::MAX, |a, c| a & c);
        let or = p.codes.iter().fold(0, |a, c| a | c);
        body(|w| {
            w.u8(tag::PAGE)
                .u16(p.flag)
                .u32(p.bucket)
                .u32(p.prev)
                .u32(p.next)
                .u16(p.codes.len() as u16)
                .u32(and)
                .u32(or);
        })
    }

    /// A healthy index of 8 blocks: buckets 0..=3, the bitmap page (bit 0) at 5, bucket 1's
    /// overflow page (bit 1) at 6, a freed page (bit 2) at 7; `change` edits it first.
    fn run(change: impl FnOnce(&mut Vec<Page>, &mut Vec<u8>)) -> Vec<GraphProblem> {
        let bucket = |b: u32, next: u32, codes: Vec<u32>| Page {
            flag: page_type::BUCKET,
            bucket: b,
            prev: 3,
            next,
            codes,
        };
        let mut pages = vec![
            bucket(0, INVALID_BLOCK_NUMBER, vec![0, 4, 8, 12]),
            bucket(1, 6, vec![1, 5, 13]),
            bucket(2, INVALID_BLOCK_NUMBER, vec![]),
            bucket(3, INVALID_BLOCK_NUMBER, vec![3, 7]),
            Page {
                flag: page_type::BITMAP,
                bucket: 0,
                prev: 0,
                next: 0,
                codes: vec![],
            },
            Page {
                flag: page_type::OVERFLOW,
                bucket: 1,
                prev: 2,
                next: INVALID_BLOCK_NUMBER,
                codes: vec![9],
            },
            Page {
                flag: page_type::UNUSED,
                bucket: u32::MAX,
                prev: INVALID_BLOCK_NUMBER,
                next: INVALID_BLOCK_NUMBER,
                codes: vec![],
            },
        ];
        let mut bitmap = vec![0xFFu8; 4096];
        bitmap[0] = 0b1111_1011; // bit 2 (block 7) free
        change(&mut pages, &mut bitmap);
        let info = info(GraphAm::Hash, 8);
        let mut c = Box::new(Check::new(&info));
        c.record(
            0,
            &body(|w| {
                w.u8(tag::META).bytes(&meta_bytes(3));
            }),
        );
        for (i, p) in pages.iter().enumerate() {
            let blkno = i as u32 + 1;
            if p.flag == page_type::BITMAP {
                c.record(
                    blkno,
                    &body(|w| {
                        w.u8(tag::BITMAP).bytes(&bitmap);
                    }),
                );
            } else {
                c.record(blkno, &page_body(p));
            }
        }
        c.finish()
    }

    fn blocks(problems: &[GraphProblem]) -> Vec<u64> {
        problems.iter().map(|p| p.blkno).collect()
    }

    #[test]
    fn a_healthy_index_has_no_problem() {
        assert_eq!(run(|_, _| {}), vec![]);
    }

    #[test]
    fn wrong_pages_links_and_bits_are_found_where_they_are() {
        // Bucket 2's primary page claims bucket 3.
        assert_eq!(blocks(&run(|p, _| p[2].bucket = 3)), vec![3]);
        // The overflow page names the wrong previous page.
        assert_eq!(blocks(&run(|p, _| p[5].prev = 4)), vec![6]);
        // The overflow page links to itself: a cycle.
        let r = run(|p, _| p[5].next = 6);
        assert_eq!(blocks(&r), vec![6]);
        assert!(r[0].message.contains("cycle"), "{r:?}");
        // Bucket 3 links into bucket 1's chain.
        assert_eq!(blocks(&run(|p, _| p[3].next = 6)), vec![4]);
        // A chain ends at an unused page.
        assert_eq!(blocks(&run(|p, _| p[5].next = 7)), vec![6]);
        // The chain page's bit is clear: found at the bitmap page.
        assert_eq!(blocks(&run(|_, b| b[0] = 0b1111_1001)), vec![5]);
        // The freed page's bit is set: leaked, found at the bitmap page.
        assert_eq!(blocks(&run(|_, b| b[0] = 0xFF)), vec![5]);
        // Hash code 2 does not belong in bucket 1 (nor ever did).
        assert_eq!(blocks(&run(|p, _| p[5].codes.push(2))), vec![6]);
    }

    #[test]
    fn a_pending_split_allows_codes_of_the_buckets_split_from_it() {
        // Under masks 7/3 and maxbucket 3, code 5 is bucket 1's, code 7 bucket 3's; a bucket
        // being split or awaiting cleanup may still hold any code with its low bits (odd
        // codes for bucket 1), never another (code 2).
        assert_eq!(run(|p, _| p[1].codes.push(5)), vec![]);
        let with = |flag: u16, code: u32| {
            blocks(&run(|p, _| {
                p[1].hasho_flag_or(flag);
                p[1].codes.push(code);
            }))
        };
        assert_eq!(with(0, 7), vec![2]);
        assert_eq!(with(1 << 5, 7), Vec::<u64>::new());
        assert_eq!(with(1 << 6, 7), Vec::<u64>::new());
        assert_eq!(with(1 << 6, 2), vec![2]);
    }

    #[test]
    fn unread_and_damaged_pages_conclude_nothing() {
        let info = info(GraphAm::Hash, 8);
        let mut c = Box::new(Check::new(&info));
        c.record(
            0,
            &body(|w| {
                w.u8(tag::META).bytes(&meta_bytes(3));
            }),
        );
        c.damaged(2);
        // Bucket 0 is an all-zero page: a problem; the rest was not read.
        c.new_page(1);
        assert_eq!(blocks(&c.finish()), vec![1]);
    }
}
