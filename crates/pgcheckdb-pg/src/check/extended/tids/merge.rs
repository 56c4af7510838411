//! The TID check's merge: each table's `Tids` records stream in chunk order, each chunk's heap
//! page summaries before the index groups naming it, so one pass with one chunk's summaries
//! in memory checks every TID. Tables are merged in parallel, alongside the index checks
//! (`extended::merge`). Findings: `index_tid_invalid` at
//! the index page holding a TID that names nothing an index may name, and `lost_write`
//! (evidence "index") at a heap page that is all zero, or past the end of the table, while
//! index entries point into it.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::record::{
    self, chunk_of, target_in, Group, LpTarget, PageState, TidRecord, CHUNK_BLOCKS,
};
use super::TidIndexInfo;
use crate::check::extended::facts::{Family, Reader, Writer};
use crate::check::extended::plan::ExtendedPlan;
use crate::check::extended::report::block_finding;
use crate::check::extended::spill::Runs;
use crate::finding::{Finding, FindingKind};
use crate::plan::Plan;

/// Index pages listed in a lost write's detail (the count is always given).
const MAX_LISTED_PAGES: usize = 20;

/// What the TID merge found and counted.
#[derive(Debug, Default)]
pub struct TidOutcome {
    pub findings: Vec<Finding>,
    /// TIDs compared with their heap page's line pointers (or found past the table's end).
    pub tids_checked: u64,
    /// TIDs into heap pages that were damaged or not read, and index entries that did not
    /// decode.
    pub tids_not_checked: u64,
}

impl TidOutcome {
    pub fn absorb(&mut self, other: TidOutcome) {
        self.findings.extend(other.findings);
        self.tids_checked += other.tids_checked;
        self.tids_not_checked += other.tids_not_checked;
    }
}

/// Checks the TIDs the indexes of one table hold (`heap`: the table's main fork, the
/// `heap_fork` of its [`super::TidIndexInfo`]s) in the chunks of `part` (see [`parts`]);
/// errors reading its facts go to `errors`.
pub fn check_heap_tids(
    plan: &Plan,
    ext: &ExtendedPlan,
    runs: &Runs,
    heap: usize,
    part: ChunkRange,
    errors: &Mutex<Vec<String>>,
) -> TidOutcome {
    let mut m = HeapMerge::new(plan, &ext.tids.indexes, heap);
    let unit = heap as u32;
    // The start of the records of a chunk: the key prefix they are written with.
    let bound = |chunk: u32| {
        let mut key = Vec::new();
        Writer::start(&mut key, unit, Family::Tids, chunk);
        key
    };
    let from = bound(part.first);
    let to = part.end.map(bound);
    let result = runs.for_each_between(unit, &from, to.as_deref(), |r| m.record(r));
    m.finish_chunk();
    if let Err(e) = result {
        crate::check::extended::lock(errors)
            .push(format!("could not read the TID facts of a table: {e}"));
    }
    m.out
}

/// The chunks of one part of a table's TID merge: from chunk `first` up to `end`
/// (exclusive; `None`: every chunk after, the records past the table's end included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRange {
    pub first: u32,
    pub end: Option<u32>,
}

/// A table of `nblocks` blocks cut into at most `n` parts of whole chunks, which merge
/// independently: a chunk's heap summaries and the index groups naming it are all in its
/// records, and what lies past the table's end (a lost tail is judged across chunks) falls
/// in the last part.
pub fn parts(nblocks: u64, n: usize) -> Vec<ChunkRange> {
    let chunks = nblocks.div_ceil(u64::from(CHUNK_BLOCKS)).max(1);
    let n = (n as u64).clamp(1, chunks);
    (0..n)
        .map(|i| ChunkRange {
            first: if i == 0 { 0 } else { (chunks * i / n) as u32 },
            end: (i + 1 < n).then(|| (chunks * (i + 1) / n) as u32),
        })
        .collect()
}

/// A heap page's summary, as the chunk in hand holds it.
#[derive(Debug, Clone)]
struct Summary {
    state: PageState,
    nlines: u16,
    /// The page's 2-bit target map in [`Chunk::maps`].
    map: std::ops::Range<usize>,
}

/// The summaries of the heap pages of the chunk in hand.
#[derive(Debug, Default)]
struct Chunk {
    number: u32,
    /// By block within the chunk; `None` for a page that was not read.
    pages: Vec<Option<Summary>>,
    maps: Vec<u8>,
}

impl Chunk {
    fn start(&mut self, number: u32) {
        self.number = number;
        self.pages.clear();
        self.maps.clear();
    }

    /// Holds the summary of block `blkno` of the chunk (grown up to the blocks seen, so that
    /// a small table costs a small table).
    fn insert(&mut self, blkno: u32, state: PageState, nlines: u16, map: &[u8]) {
        let i = (blkno % CHUNK_BLOCKS) as usize;
        if self.pages.len() <= i {
            self.pages.resize(i + 1, None);
        }
        let start = self.maps.len();
        self.maps.extend_from_slice(map);
        self.pages[i] = Some(Summary {
            state,
            nlines,
            map: start..self.maps.len(),
        });
    }

    fn summary(&self, blkno: u32) -> Option<(&Summary, &[u8])> {
        if chunk_of(blkno) != self.number {
            return None;
        }
        let s = self.pages.get((blkno % CHUNK_BLOCKS) as usize)?.as_ref()?;
        Some((s, &self.maps[s.map.clone()]))
    }
}

/// Index entries into a page that is all zero or past the table's end, set aside until the
/// chunk is done so that they are judged in heap block order.
#[derive(Debug)]
struct LostRef {
    blkno: u32,
    index_fork: u32,
    index_block: u32,
    tids: u64,
    /// The offsets, kept only past the table's end (a lone far block reports each TID).
    offsets: Vec<u16>,
}

/// A heap page some index entries point into while it is all zero or past the table's end.
struct Lost {
    blkno: u32,
    beyond_end: bool,
    tids: u64,
    pages: Vec<(u32, u32, u64)>,
}

/// The merge of one table.
struct HeapMerge<'a> {
    plan: &'a Plan,
    indexes: &'a HashMap<usize, std::sync::Arc<TidIndexInfo>>,
    heap_fork: usize,
    nblocks: u64,
    chunk: Chunk,
    lost_refs: Vec<LostRef>,
    /// Reused for decoding a group's offsets.
    offsets: Vec<u16>,
    lost: Option<Lost>,
    /// The next block past the end that continues a lost tail (blocks past the end named
    /// one after another from the end on are a lost tail; a lone far block is a bad TID).
    next_tail: u64,
    out: TidOutcome,
}

impl<'a> HeapMerge<'a> {
    fn new(
        plan: &'a Plan,
        indexes: &'a HashMap<usize, std::sync::Arc<TidIndexInfo>>,
        heap_fork: usize,
    ) -> Self {
        let nblocks = plan.fork_blocks[heap_fork];
        HeapMerge {
            plan,
            indexes,
            heap_fork,
            nblocks,
            chunk: Chunk {
                number: u32::MAX,
                ..Chunk::default()
            },
            lost_refs: Vec::new(),
            offsets: Vec::new(),
            lost: None,
            next_tail: nblocks,
            out: TidOutcome::default(),
        }
    }

    fn record(&mut self, r: &[u8]) {
        let Some((head, mut reader)) = Reader::open(r) else {
            return;
        };
        if head.family != Family::Tids {
            return;
        }
        let Some(rec) = record::read(head.blkno, &mut reader) else {
            return;
        };
        if head.blkno != self.chunk.number {
            self.finish_chunk();
            self.chunk.start(head.blkno);
        }
        match rec {
            TidRecord::Heap(h) => self.chunk.insert(h.blkno, h.state, h.nlines, h.map()),
            TidRecord::Index(g) => self.group(&g),
            TidRecord::Undecoded(n) => self.out.tids_not_checked += n,
        }
    }

    /// Checks the TIDs of one index group against the chunk's summaries; TIDs into all-zero
    /// pages or past the end wait for [`HeapMerge::finish_chunk`].
    fn group(&mut self, g: &Group<'_>) {
        let mut offsets = std::mem::take(&mut self.offsets);
        let mut bad: Vec<(u32, u16, &'static str, Option<u16>)> = Vec::new();
        g.for_each_block(&mut offsets, |blkno, offs| {
            let n = offs.len() as u64;
            let beyond_end = blkno as u64 >= self.nblocks;
            let lost = |refs: &mut Vec<LostRef>| {
                refs.push(LostRef {
                    blkno,
                    index_fork: g.index_fork,
                    index_block: g.index_block,
                    tids: n,
                    offsets: if beyond_end {
                        offs.to_vec()
                    } else {
                        Vec::new()
                    },
                })
            };
            if beyond_end {
                lost(&mut self.lost_refs);
                return;
            }
            let Some((page, map)) = self.chunk.summary(blkno) else {
                self.out.tids_not_checked += n; // the heap page was not read
                return;
            };
            match page.state {
                PageState::Damaged => self.out.tids_not_checked += n,
                PageState::New => lost(&mut self.lost_refs),
                PageState::Sound => {
                    self.out.tids_checked += n;
                    // A page whose line pointers are all valid targets (no map): only an
                    // offset beyond them is bad, and usually none is.
                    if map.is_empty() && offs.iter().all(|&o| o != 0 && o <= page.nlines) {
                        return;
                    }
                    for &off in offs {
                        match target_in(page.nlines, map, off) {
                            None => {
                                bad.push((blkno, off, "beyond_line_pointers", Some(page.nlines)))
                            }
                            Some(LpTarget::Valid) => {}
                            Some(t) => bad.push((blkno, off, t.name(), Some(page.nlines))),
                        }
                    }
                }
            }
        });
        self.offsets = offsets;
        for (blkno, off, what, nlines) in bad {
            self.invalid(blkno, off, g.index_fork, g.index_block, what, nlines);
        }
    }

    /// Judges the entries into all-zero pages and past the end, in heap block order: a page
    /// past the end that continues the table (one after another from its end on) is a lost
    /// write like an all-zero page; a lone far block is a bad TID.
    fn finish_chunk(&mut self) {
        let mut refs = std::mem::take(&mut self.lost_refs);
        refs.sort_unstable_by_key(|r| (r.blkno, r.index_fork, r.index_block));
        for r in &refs {
            if self.lost.as_ref().is_some_and(|l| l.blkno != r.blkno) {
                self.flush_lost();
            }
            let n = r.tids;
            self.out.tids_checked += n;
            if (r.blkno as u64) < self.nblocks {
                self.note_lost(r, false, n);
            } else if r.blkno as u64 == self.next_tail || r.blkno as u64 + 1 == self.next_tail {
                self.next_tail = r.blkno as u64 + 1;
                self.note_lost(r, true, n);
            } else {
                for &off in &r.offsets {
                    self.invalid(
                        r.blkno,
                        off,
                        r.index_fork,
                        r.index_block,
                        "beyond_table",
                        None,
                    );
                }
            }
        }
        self.flush_lost();
        refs.clear();
        self.lost_refs = refs;
    }

    fn note_lost(&mut self, r: &LostRef, beyond_end: bool, n: u64) {
        let lost = self.lost.get_or_insert_with(|| Lost {
            blkno: r.blkno,
            beyond_end,
            tids: 0,
            pages: Vec::new(),
        });
        lost.tids += n;
        lost.pages.push((r.index_fork, r.index_block, n));
    }

    /// A finding at block `index_block` of index fork `index_fork`: its TID (`blkno`, `off`)
    /// names `what` (on a heap page of `nlines` line pointers, when it was read).
    fn invalid(
        &mut self,
        blkno: u32,
        off: u16,
        index_fork: u32,
        index_block: u32,
        what: &str,
        nlines: Option<u16>,
    ) {
        let index = self.indexes.get(&(index_fork as usize));
        let table = index.map_or("", |i| i.table.as_str());
        let text = match what {
            "beyond_table" => format!("beyond the table's {} blocks", self.nblocks),
            "beyond_line_pointers" => format!(
                "beyond the page's {} line pointers",
                nlines.unwrap_or_default()
            ),
            "unused" => "an unused line pointer (LP_UNUSED)".to_string(),
            _ => "a heap-only tuple (HEAP_ONLY_TUPLE), which no index entry may name".to_string(),
        };
        let message =
            format!("index entry points at heap TID ({blkno},{off}) of table {table}: {text}");
        let detail = json!({
            "heap": self.heap_ref(),
            "heap_block": blkno,
            "heap_offset": off,
            "line_pointer": what,
            "heap_line_pointers": nlines,
            "table_blocks": self.nblocks,
        });
        self.out.findings.push(block_finding(
            self.plan,
            index_fork as usize,
            index_block as u64,
            FindingKind::IndexTidInvalid,
            message,
            detail,
        ));
    }

    fn heap_ref(&self) -> Value {
        let f = &self.plan.forks[self.heap_fork];
        let table = self
            .indexes
            .values()
            .find(|i| i.heap_fork == self.heap_fork)
            .map(|i| i.table.clone());
        let file = self.plan.dir.files[f.segments().start].rel_path();
        json!({"table": table, "filenode": f.relfilenode, "file": file})
    }

    /// Reports the lost write in hand, if any.
    fn flush_lost(&mut self) {
        let Some(lost) = self.lost.take() else {
            return;
        };
        let mut listed = Vec::new();
        let mut pages = lost.pages;
        pages.sort_unstable();
        for &(fork, blk, n) in pages.iter().take(MAX_LISTED_PAGES) {
            let name = self.indexes.get(&(fork as usize)).map(|i| i.name.clone());
            let file = &self.plan.dir.files[self.plan.forks[fork as usize].segments().start];
            listed.push(json!({"index": name, "file": file.rel_path(), "block": blk, "tids": n}));
        }
        let npages = pages.len();
        let state = if lost.beyond_end {
            format!("is past the end of the table ({} blocks)", self.nblocks)
        } else {
            "is all zero".to_string()
        };
        let message = format!(
            "heap page {} {state} but {} index entr{} on {npages} index page{} point into it: a lost write",
            lost.blkno,
            lost.tids,
            if lost.tids == 1 { "y" } else { "ies" },
            if npages == 1 { "" } else { "s" },
        );
        let detail = json!({
            "evidence": "index",
            "page": if lost.beyond_end { "beyond_end" } else { "all_zero" },
            "table_blocks": self.nblocks,
            "tids": lost.tids,
            "index_pages": listed,
            "index_page_count": npages,
        });
        self.out.findings.push(block_finding(
            self.plan,
            self.heap_fork,
            lost.blkno as u64,
            FindingKind::LostWrite,
            message,
            detail,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_every_chunk_once_and_the_last_one_runs_to_the_end() {
        let c = u64::from(CHUNK_BLOCKS);
        let range = |first, end| ChunkRange { first, end };
        assert_eq!(parts(0, 2), vec![range(0, None)]);
        assert_eq!(parts(c, 2), vec![range(0, None)]);
        assert_eq!(parts(4 * c, 1), vec![range(0, None)]);
        assert_eq!(parts(4 * c, 2), vec![range(0, Some(2)), range(2, None)]);
        assert_eq!(
            parts(3 * c + 1, 3),
            vec![range(0, Some(1)), range(1, Some(2)), range(2, None)]
        );
        assert_eq!(parts(2 * c, 8), vec![range(0, Some(1)), range(1, None)]);
    }
}
