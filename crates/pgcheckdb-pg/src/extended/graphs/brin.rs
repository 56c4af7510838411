//! The BRIN graph at the extended level: the range map (revmap) against the regular pages.
//!
//! Revmap pages `1..=lastRevmapPage` (the metapage's) hold one TID per page range, in range
//! order: entry `k` of revmap block `r` is range `(r - 1) * REVMAP_PAGE_MAXITEMS + k`, whose
//! first heap block is that number times `pagesPerRange`. Every TID that is not invalid
//! (offset 0) must point at a used, normal line pointer of a regular page inside the index,
//! whose BRIN tuple's `bt_blkno` is that first heap block; the blocks of the range map must
//! be revmap pages, and no revmap page may lie past it. PostgreSQL changes a summary tuple and
//! its revmap entry in one WAL record (insert, update, desummarize), and turns a page into a
//! revmap page in the record that advances `lastRevmapPage`.
//!
//! A regular-page tuple that no revmap entry points at is not reported: it is unreachable and
//! harmless, and nothing in the current source proves an index upgraded from older releases
//! cannot hold one.
//!
//! [`emit`] writes each revmap entry as a claim keyed by the block it points at, so that the
//! claims meet that block's own facts (its page type, then its tuples' `bt_blkno`) in the
//! sorted stream: the check keeps only the metapage and the current block's tuples in memory.

use std::collections::HashMap;

use serde_json::json;

use super::{GraphCheck, GraphInfo, GraphProblem, Sink, FIRST_AM_TAG};
use crate::extended::facts::Reader;
use crate::layout::heap::ItemPointer;
use crate::layout::itemid::{line_pointers, LpFlags};
use crate::layout::{le_u16, le_u32};
use crate::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};

/// BRIN page types (`BRIN_PAGETYPE_*`), the last two bytes of the special space.
mod page_type {
    pub const META: u16 = 0xF091;
    pub const REVMAP: u16 = 0xF092;
    pub const REGULAR: u16 = 0xF093;
}

/// Record tags; within a block, records sort by tag, so a block's own facts come before the
/// claims about it.
mod tag {
    use super::FIRST_AM_TAG;
    /// Block 0: `pagesPerRange`, `lastRevmapPage`.
    pub const META: u8 = FIRST_AM_TAG;
    /// Any other page: its type.
    pub const PAGE: u8 = FIRST_AM_TAG + 1;
    /// A regular page's tuple: offset number, readable (1) or not (0), `bt_blkno`.
    pub const TUPLE: u8 = FIRST_AM_TAG + 2;
    /// A revmap entry, keyed by the block it points at: offset number, revmap block, range.
    pub const CLAIM: u8 = FIRST_AM_TAG + 3;
}

/// `sizeof(ItemPointerData)`.
const TID_SIZE: usize = 6;
/// `MAXALIGN(SizeOfPageHeaderData) + MAXALIGN(sizeof(BrinSpecialSpace))`.
const REVMAP_OVERHEAD: usize = 24 + 8;
/// `BRIN_MAX_PAGES_PER_RANGE`.
const BRIN_MAX_PAGES_PER_RANGE: u32 = 131_072;
/// `sizeof(BlockNumber) + sizeof(uint8)`: `bt_blkno` and `bt_info`.
const BRIN_TUPLE_HEAD: usize = 5;

/// `REVMAP_PAGE_MAXITEMS` for pages of `page_len` bytes.
fn revmap_page_maxitems(page_len: usize) -> usize {
    page_len.saturating_sub(REVMAP_OVERHEAD) / TID_SIZE
}

/// Writes the graph facts of one sound BRIN page.
pub fn emit(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let Some(h) = PageHeader::parse(page) else {
        return;
    };
    let Some(kind) = le_u16(page, page.len() - 2) else {
        return;
    };
    let contents = SIZE_OF_PAGE_HEADER_DATA;
    match kind {
        page_type::META => {
            let (Some(per_range), Some(last)) =
                (le_u32(page, contents + 8), le_u32(page, contents + 12))
            else {
                return;
            };
            sink.push(blkno, |w| {
                w.u8(tag::META).u32(per_range).u32(last);
            });
        }
        page_type::REVMAP => {
            sink.push(blkno, |w| {
                w.u8(tag::PAGE).u16(kind);
            });
            revmap_claims(page, blkno, sink);
        }
        _ => {
            sink.push(blkno, |w| {
                w.u8(tag::PAGE).u16(kind);
            });
            if kind == page_type::REGULAR {
                regular_tuples(page, &h, blkno, sink);
            }
        }
    }
}

/// One claim per valid TID of a revmap page, keyed by the block it points at.
fn revmap_claims(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let maxitems = revmap_page_maxitems(page.len());
    let first_range = (blkno as u64).saturating_sub(1) * maxitems as u64;
    for k in 0..maxitems {
        let Some(tid) = ItemPointer::parse(page, SIZE_OF_PAGE_HEADER_DATA + TID_SIZE * k) else {
            break;
        };
        if tid.offset == 0 {
            continue; // ItemPointerIsValid: an unsummarized range
        }
        sink.push(tid.block, |w| {
            w.u8(tag::CLAIM)
                .u16(tid.offset)
                .u32(blkno)
                .u64(first_range + k as u64);
        });
    }
}

/// The `bt_blkno` of every normal line pointer's tuple on a regular page.
fn regular_tuples(page: &[u8], h: &PageHeader, blkno: u32, sink: &mut Sink<'_>) {
    for it in line_pointers(page, h) {
        if it.lp_flags != LpFlags::Normal {
            continue;
        }
        let (off, len) = (it.lp_off as usize, it.lp_len as usize);
        let bt_blkno = if len >= BRIN_TUPLE_HEAD && off + len <= page.len() {
            le_u32(page, off)
        } else {
            None
        };
        sink.push(blkno, |w| {
            w.u8(tag::TUPLE)
                .u16(it.offnum)
                .u8(bt_blkno.is_some() as u8)
                .u32(bt_blkno.unwrap_or(0));
        });
    }
}

/// What is known of the block whose records are being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// No fact of its own (yet): not read, or past the end of the index.
    Unknown,
    Damaged,
    New,
    Page(u16),
}

/// The metapage fields the check needs.
#[derive(Debug, Clone, Copy)]
struct Meta {
    pages_per_range: u32,
    last_revmap_page: u32,
}

/// The cross-page check of one BRIN index: it streams, keeping the metapage and the current
/// block's tuples.
pub struct Check {
    blocks: u64,
    meta: Option<Meta>,
    current: u32,
    state: Block,
    /// The current block's tuples: offset number -> `bt_blkno` (`None`: not readable).
    tuples: HashMap<u16, Option<u32>>,
    out: Vec<GraphProblem>,
}

impl Check {
    pub fn new(info: &GraphInfo) -> Check {
        Check {
            blocks: info.blocks,
            meta: None,
            current: 0,
            state: Block::Unknown,
            tuples: HashMap::new(),
            out: Vec::new(),
        }
    }

    /// Moves on to block `blkno` when its first record arrives.
    fn at(&mut self, blkno: u32) {
        if blkno != self.current {
            self.current = blkno;
            self.state = Block::Unknown;
            self.tuples.clear();
        }
    }

    fn in_range_map(&self, blkno: u32) -> Option<bool> {
        self.meta.map(|m| (1..=m.last_revmap_page).contains(&blkno))
    }

    /// The page's own type against the range map's extent.
    fn page(&mut self, blkno: u32, kind: u16) {
        self.state = Block::Page(kind);
        let Some(m) = self.meta else {
            return;
        };
        let last = m.last_revmap_page;
        if self.in_range_map(blkno) == Some(true) && kind != page_type::REVMAP {
            self.problem(
                blkno as u64,
                format!(
                    "block {blkno} is in the range map (revmap pages 1..={last}) but is a {} page",
                    type_name(kind)
                ),
                json!({"last_revmap_page": last, "page_type": type_name(kind)}),
            );
        } else if blkno > last && kind == page_type::REVMAP {
            self.problem(
                blkno as u64,
                format!("block {blkno} is a revmap page past the range map's last page {last}"),
                json!({"last_revmap_page": last}),
            );
        }
    }

    /// One revmap entry pointing at (`blkno`, `offnum`).
    fn claim(&mut self, blkno: u32, offnum: u16, revmap: u32, range: u64) {
        let Some(m) = self.meta else {
            return;
        };
        if self.in_range_map(revmap) != Some(true) {
            return; // a revmap page past the range map: reported as such
        }
        let heap_blk = range * m.pages_per_range as u64;
        let detail = json!({"range_start": heap_blk, "tid_block": blkno, "tid_offset": offnum});
        let at =
            format!("the range map's entry for heap block {heap_blk} points at ({blkno},{offnum})");
        let message = match self.state {
            Block::Unknown if (blkno as u64) < self.blocks => return, // not read
            Block::Unknown => format!("{at}, past the index's {} blocks", self.blocks),
            Block::Damaged => return,
            Block::New => format!("{at}, an all-zero page"),
            Block::Page(kind) if kind != page_type::REGULAR => {
                format!("{at}, a {} page", type_name(kind))
            }
            Block::Page(_) => match self.tuples.get(&offnum) {
                None => format!("{at}, which is not a normal line pointer"),
                Some(None) => return,
                Some(&Some(bt)) if bt as u64 == heap_blk => return,
                Some(&Some(bt)) => {
                    format!("{at}, whose tuple summarizes the range at heap block {bt}")
                }
            },
        };
        self.problem(revmap as u64, message, detail);
    }

    fn problem(&mut self, blkno: u64, message: String, detail: serde_json::Value) {
        self.out.push(GraphProblem {
            blkno,
            message,
            detail,
        });
    }
}

fn type_name(kind: u16) -> &'static str {
    match kind {
        page_type::META => "meta",
        page_type::REVMAP => "revmap",
        page_type::REGULAR => "regular",
        _ => "unknown",
    }
}

impl GraphCheck for Check {
    fn record(&mut self, blkno: u32, body: &[u8]) {
        self.at(blkno);
        let mut r = Reader::body(body);
        match r.u8() {
            Some(tag::META) => {
                if let (Some(per_range), Some(last)) = (r.u32(), r.u32()) {
                    self.state = Block::Page(page_type::META);
                    if blkno == 0 && (1..=BRIN_MAX_PAGES_PER_RANGE).contains(&per_range) {
                        self.meta = Some(Meta {
                            pages_per_range: per_range,
                            last_revmap_page: last,
                        });
                    }
                }
            }
            Some(tag::PAGE) => {
                if let Some(kind) = r.u16() {
                    self.page(blkno, kind);
                }
            }
            Some(tag::TUPLE) => {
                if let (Some(off), Some(readable), Some(bt)) = (r.u16(), r.u8(), r.u32()) {
                    self.tuples.insert(off, (readable == 1).then_some(bt));
                }
            }
            Some(tag::CLAIM) => {
                if let (Some(off), Some(revmap), Some(range)) = (r.u16(), r.u32(), r.u64()) {
                    self.claim(blkno, off, revmap, range);
                }
            }
            _ => {}
        }
    }

    fn damaged(&mut self, blkno: u32) {
        self.at(blkno);
        self.state = Block::Damaged;
    }

    fn new_page(&mut self, blkno: u32) {
        self.at(blkno);
        self.state = Block::New;
        if self.in_range_map(blkno) == Some(true) {
            let last = self.meta.map_or(0, |m| m.last_revmap_page);
            self.problem(
                blkno as u64,
                format!(
                    "block {blkno} is in the range map (revmap pages 1..={last}) but is all zeros"
                ),
                json!({"last_revmap_page": last, "page_type": "all-zero"}),
            );
        }
    }

    fn finish(self: Box<Self>) -> Vec<GraphProblem> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extended::facts::{Family, Writer};
    use crate::extended::graphs::GraphAm;

    fn body(f: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = Writer::start(&mut buf, 0, Family::IndexGraph, 0);
        f(&mut w);
        buf[9..].to_vec()
    }

    /// An index of 4 blocks (pagesPerRange 4, revmap page 1, regular pages 2 and 3) whose
    /// revmap entries point at `claims` (block, offset, range); regular page 2 holds tuples
    /// for heap blocks 0 and 4 at offsets 1 and 2.
    fn run(claims: &[(u32, u16, u64)], new_block: Option<u32>) -> Vec<GraphProblem> {
        let info = GraphInfo {
            fork: 0,
            am: GraphAm::Brin,
            name: "b".into(),
            blocks: 4,
        };
        let mut c = Box::new(Check::new(&info));
        let mut records: Vec<(u32, Vec<u8>)> = vec![
            (
                0,
                body(|w| {
                    w.u8(tag::META).u32(4).u32(1);
                }),
            ),
            (
                1,
                body(|w| {
                    w.u8(tag::PAGE).u16(page_type::REVMAP);
                }),
            ),
        ];
        if new_block != Some(2) {
            records.push((
                2,
                body(|w| {
                    w.u8(tag::PAGE).u16(page_type::REGULAR);
                }),
            ));
            for (off, bt) in [(1u16, 0u32), (2, 4)] {
                records.push((
                    2,
                    body(|w| {
                        w.u8(tag::TUPLE).u16(off).u8(1).u32(bt);
                    }),
                ));
            }
        }
        for &(blk, off, range) in claims {
            records.push((
                blk,
                body(|w| {
                    w.u8(tag::CLAIM).u16(off).u32(1).u64(range);
                }),
            ));
        }
        records.sort();
        let mut new_done = false;
        for (blk, b) in records {
            if Some(blk) == new_block && !new_done {
                c.new_page(blk);
                new_done = true;
            }
            c.record(blk, &b);
        }
        c.finish()
    }

    #[test]
    fn revmap_entries_must_reach_their_ranges_tuple() {
        assert_eq!(run(&[(2, 1, 0), (2, 2, 1)], None), vec![]);
        let problems = |claims: &[(u32, u16, u64)]| -> Vec<u64> {
            run(claims, None).iter().map(|p| p.blkno).collect()
        };
        // Range 2 (heap block 8) pointing at the tuple of heap block 4.
        assert_eq!(problems(&[(2, 2, 2)]), vec![1]);
        // An offset with no tuple, the metapage, and a block past the index.
        assert_eq!(problems(&[(2, 3, 0)]), vec![1]);
        assert_eq!(problems(&[(0, 1, 0)]), vec![1]);
        assert_eq!(problems(&[(9, 1, 0)]), vec![1]);
        // Block 3 was not read: nothing is concluded.
        assert_eq!(problems(&[(3, 1, 0)]), Vec::<u64>::new());
        // An all-zero target page.
        let r = run(&[(2, 1, 0)], Some(2));
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].message.contains("all-zero"), "{r:?}");
    }

    #[test]
    fn the_range_map_holds_only_revmap_pages() {
        let info = GraphInfo {
            fork: 0,
            am: GraphAm::Brin,
            name: "b".into(),
            blocks: 4,
        };
        let mut c = Box::new(Check::new(&info));
        c.record(
            0,
            &body(|w| {
                w.u8(tag::META).u32(128).u32(2);
            }),
        );
        c.record(
            1,
            &body(|w| {
                w.u8(tag::PAGE).u16(page_type::REVMAP);
            }),
        );
        c.record(
            2,
            &body(|w| {
                w.u8(tag::PAGE).u16(page_type::REGULAR);
            }),
        );
        c.record(
            3,
            &body(|w| {
                w.u8(tag::PAGE).u16(page_type::REVMAP);
            }),
        );
        let got: Vec<u64> = c.finish().iter().map(|p| p.blkno).collect();
        assert_eq!(got, vec![2, 3]);
    }
}
