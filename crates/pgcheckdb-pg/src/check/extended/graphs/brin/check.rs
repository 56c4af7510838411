//! The cross-page check of one BRIN index, streaming: each block's own facts arrive before
//! the revmap claims about it, so only the metapage and the current block's tuples are kept.

use std::collections::HashMap;

use serde_json::json;

use super::{page_type, tag, BRIN_MAX_PAGES_PER_RANGE};
use crate::check::extended::facts::Reader;
use crate::check::extended::graphs::{GraphCheck, GraphInfo, GraphProblem};

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
        self.out.push(GraphProblem::new(blkno, message, detail));
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
    use crate::check::extended::graphs::testing::{body, info};
    use crate::check::extended::graphs::GraphAm;

    /// An index of 4 blocks (pagesPerRange 4, revmap page 1, regular pages 2 and 3) whose
    /// revmap entries point at `claims` (block, offset, range); regular page 2 holds tuples
    /// for heap blocks 0 and 4 at offsets 1 and 2.
    fn run(claims: &[(u32, u16, u64)], new_block: Option<u32>) -> Vec<GraphProblem> {
        let info = info(GraphAm::Brin, 4);
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
        let info = info(GraphAm::Brin, 4);
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
