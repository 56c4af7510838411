//! The TID check's merge: each table's `Tids` records stream in heap-block order, each heap
//! page's summary before the index groups naming it, so one pass with one page's summary in
//! memory checks every TID. Tables are merged in parallel. Findings: `index_tid_invalid` at
//! the index page holding a TID that names nothing an index may name, and `lost_write`
//! (evidence "index") at a heap page that is all zero, or past the end of the table, while
//! index entries point into it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};

use super::record::{self, target_in, Group, LpTarget, PageState, TidRecord};
use super::TidIndexInfo;
use crate::extended::facts::{Family, Reader};
use crate::extended::plan::ExtendedPlan;
use crate::extended::report::block_finding;
use crate::extended::spill::Runs;
use crate::finding::{Finding, FindingKind};
use crate::verify::Plan;

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
    fn absorb(&mut self, other: TidOutcome) {
        self.findings.extend(other.findings);
        self.tids_checked += other.tids_checked;
        self.tids_not_checked += other.tids_not_checked;
    }
}

/// Checks the TIDs of every planned table, `ext.jobs` tables at a time.
pub fn check_tids(
    plan: &Plan,
    ext: &ExtendedPlan,
    runs: &Runs,
    errors: &Mutex<Vec<String>>,
) -> TidOutcome {
    let heaps = ext.tids.heap_forks();
    let next = AtomicUsize::new(0);
    let total = Mutex::new(TidOutcome::default());
    std::thread::scope(|s| {
        for _ in 0..ext.jobs.min(heaps.len()).max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&heap) = heaps.get(i) else { break };
                let mut m = HeapMerge::new(plan, &ext.tids.indexes, heap);
                let result = runs.for_each_in_unit(heap as u32, |r| m.record(r));
                m.flush_lost();
                if let Err(e) = result {
                    errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("could not read the TID facts of a table: {e}"));
                }
                total
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .absorb(m.out);
            });
        }
    });
    total.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// The heap page summary in hand.
struct Current {
    blkno: u32,
    state: PageState,
    nlines: u16,
    map: Vec<u8>,
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
    current: Option<Current>,
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
            current: None,
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
        let Some(rec) = record::read(&mut reader) else {
            return;
        };
        if self.lost.as_ref().is_some_and(|l| l.blkno != head.blkno) {
            self.flush_lost();
        }
        match rec {
            TidRecord::Heap(h) => {
                let mut map = self.current.take().map(|c| c.map).unwrap_or_default();
                map.clear();
                map.extend_from_slice(h.map());
                self.current = Some(Current {
                    blkno: head.blkno,
                    state: h.state,
                    nlines: h.nlines,
                    map,
                });
            }
            TidRecord::Index(g) => self.group(head.blkno, &g),
            TidRecord::Undecoded(n) => self.out.tids_not_checked += n,
        }
    }

    fn group(&mut self, blkno: u32, g: &Group<'_>) {
        let n = g.count();
        if blkno as u64 >= self.nblocks {
            self.out.tids_checked += n;
            if blkno as u64 == self.next_tail || blkno as u64 + 1 == self.next_tail {
                self.next_tail = blkno as u64 + 1;
                self.note_lost(blkno, true, g, n);
            } else {
                for off in g.offsets() {
                    self.invalid(blkno, off, g, "beyond_table");
                }
            }
            return;
        }
        let Some(c) = self.current.as_ref().filter(|c| c.blkno == blkno) else {
            self.out.tids_not_checked += n; // the heap page was not read
            return;
        };
        match c.state {
            PageState::Damaged => self.out.tids_not_checked += n,
            PageState::New => {
                self.out.tids_checked += n;
                self.note_lost(blkno, false, g, n);
            }
            PageState::Sound => {
                self.out.tids_checked += n;
                let bad: Vec<(u16, &'static str)> = g
                    .offsets()
                    .into_iter()
                    .filter_map(|off| match target_in(c.nlines, &c.map, off) {
                        None => Some((off, "beyond_line_pointers")),
                        Some(LpTarget::Valid) => None,
                        Some(t) => Some((off, t.name())),
                    })
                    .collect();
                for (off, what) in bad {
                    self.invalid(blkno, off, g, what);
                }
            }
        }
    }

    fn note_lost(&mut self, blkno: u32, beyond_end: bool, g: &Group<'_>, n: u64) {
        let lost = self.lost.get_or_insert_with(|| Lost {
            blkno,
            beyond_end,
            tids: 0,
            pages: Vec::new(),
        });
        lost.tids += n;
        lost.pages.push((g.index_fork, g.index_block, n));
    }

    /// A finding at the index page of `g`: its TID (`blkno`, `off`) names `what`.
    fn invalid(&mut self, blkno: u32, off: u16, g: &Group<'_>, what: &str) {
        let index = self.indexes.get(&(g.index_fork as usize));
        let table = index.map_or("", |i| i.table.as_str());
        let nlines = self
            .current
            .as_ref()
            .filter(|c| c.blkno == blkno)
            .map(|c| c.nlines);
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
            g.index_fork as usize,
            g.index_block as u64,
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
        let file = self.plan.dir.files[f.segments.start].rel_path();
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
            let file = &self.plan.dir.files[self.plan.forks[fork as usize].segments.start];
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
