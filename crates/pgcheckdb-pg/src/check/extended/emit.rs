//! The scan side of the extended level: one [`Emitter`] per worker turns each page of a planned
//! relation into fact records right after the page's physical and standard checks, so the
//! block scan stays the only reader of the data files.

use std::sync::atomic::Ordering;

use super::allindexed::probe::{insert_leaf, probe_heap, LeafPage, Scratch};
use super::btree::records::{
    damaged_record, inner_run_record, page_records, run_record, Rec, RunRec,
};
use super::btree::view::page_view;
use super::facts::{Family, MetaFact, RunPlace, Writer};
use super::graphs::{self, Sink};
use super::heap::{live_roots, HeapTuples};
use super::plan::{ExtendedPlan, HeapInfo, IndexInfo, Role};
use super::spill::{RunBuilder, Runs};
use super::tids::decode::page_tids;
use super::tids::record::{
    target_map, write_heap_lines, write_page_tids, write_undecoded, PageState,
};
use super::tids::{IndexAm, TidIndexInfo};
use super::toast;
use super::unique_scan::unique_runs;
use crate::catalog::xact::CommitLog;
use crate::check::standard::ClusterFacts;
use crate::format::btree::{BtMetaPage, BtPageOpaque, P_NONE};
use crate::format::itemid::{line_pointers_into, ItemId};
use crate::format::page::PageHeader;

/// The line pointers of a page: `parsed` when the standard checks parsed them, else parsed
/// here into `own`.
fn line_pointers<'i>(
    page: &[u8],
    h: &PageHeader,
    parsed: &'i [ItemId],
    own: &'i mut Vec<ItemId>,
) -> &'i [ItemId] {
    if parsed.is_empty() {
        line_pointers_into(page, h, own);
        own
    } else {
        parsed
    }
}

/// One worker's fact writer.
pub struct Emitter<'a> {
    plan: &'a ExtendedPlan,
    clog: &'a CommitLog,
    runs: RunBuilder,
    buf: Vec<u8>,
    items: Vec<ItemId>,
    /// The live-root bitmap of the current heap page.
    bits: Vec<u8>,
    /// Buffers of the heap -> index check.
    all_indexed: Scratch<'a>,
    /// The heap TIDs of the current index page, and a heap page's line-pointer target map.
    tids: Vec<(u32, u16)>,
    /// The cluster's xid bounds (which xids `pg_xact` answers for).
    facts: &'a ClusterFacts,
    /// Visibility-map and hint-bit records.
    vm: super::vm::emit::VmEmitter,
}

impl<'a> Emitter<'a> {
    pub fn new(
        plan: &'a ExtendedPlan,
        clog: &'a CommitLog,
        facts: &'a ClusterFacts,
    ) -> Emitter<'a> {
        Emitter {
            plan,
            clog,
            runs: RunBuilder::new(plan.worker_budget, plan.spill.clone()),
            buf: Vec::new(),
            items: Vec::new(),
            bits: Vec::new(),
            all_indexed: Scratch::default(),
            tids: Vec::new(),
            facts,
            vm: Default::default(),
        }
    }

    /// The facts of one page at absolute block `blkno` of file `file`; `sound` says whether it
    /// passed the physical and standard checks; `parsed` is its line pointers when those
    /// checks parsed them (else empty: they are parsed here).
    pub fn page(&mut self, file: usize, blkno: u64, page: &[u8], sound: bool, parsed: &[ItemId]) {
        let plan: &'a ExtendedPlan = self.plan;
        let Some(role) = plan.roles.get(file).and_then(Option::as_ref) else {
            return;
        };
        let Ok(blkno) = u32::try_from(blkno) else {
            return;
        };
        match role {
            Role::Btree(info) => {
                if let (Some(a), false) = (&info.all_indexed, sound) {
                    a.incomplete.store(true, Ordering::Relaxed);
                }
                if sound {
                    self.btree_page(info, blkno, page, parsed);
                } else {
                    damaged_record(info.fork as u32, blkno, &mut self.buf);
                    self.runs.push(&self.buf);
                }
            }
            Role::Heap(info) => {
                if sound {
                    self.heap_page(info, blkno, page, parsed);
                } else {
                    self.damaged_heap_page(info, blkno);
                }
            }
            Role::OtherIndex { tids, graph } => {
                if let (Some(info), true) = (tids, sound) {
                    self.index_tids(info, blkno, page, None);
                }
                if let Some(info) = graph {
                    let mut sink = Sink::new(info.fork as u32, &mut self.buf, &mut self.runs);
                    if sound {
                        graphs::emit(info, blkno, page, &mut sink);
                    } else {
                        sink.damaged(blkno);
                    }
                }
            }
            Role::Vm(info) => {
                if sound {
                    let blcksz = self.facts.blcksz;
                    let (buf, runs) = (&mut self.buf, &mut self.runs);
                    self.vm.map_page(info, blkno, page, blcksz, buf, runs);
                }
            }
        }
    }

    /// The marks of a heap page that failed its checks: the checks that need the page learn
    /// that they may not conclude anything from its absence.
    fn damaged_heap_page(&mut self, info: &HeapInfo, blkno: u32) {
        if info.tids {
            let unit = info.fork as u32;
            write_heap_lines(&mut self.buf, unit, blkno, PageState::Damaged, 0, &[]);
            self.runs.push(&self.buf);
        }
        if info.toast_chunks {
            toast::emit::damaged_fact(info.fork as u32, blkno, &mut self.buf, &mut self.runs);
        }
    }

    /// An all-zero page at absolute block `blkno` of file `file` (the physical check calls
    /// it `New`): a heap page the TID and visibility-map checks must know is empty, or a page
    /// of an index whose graph is checked.
    pub fn new_page(&mut self, file: usize, blkno: u64) {
        let Ok(blkno) = u32::try_from(blkno) else {
            return;
        };
        let info = match self.plan.roles.get(file).and_then(Option::as_ref) {
            Some(Role::Heap(info)) => info,
            Some(Role::OtherIndex {
                graph: Some(info), ..
            }) => {
                Sink::new(info.fork as u32, &mut self.buf, &mut self.runs).new_page(blkno);
                return;
            }
            _ => return,
        };
        if info.tids {
            let unit = info.fork as u32;
            write_heap_lines(&mut self.buf, unit, blkno, PageState::New, 0, &[]);
            self.runs.push(&self.buf);
        }
        self.vm
            .zero_heap_page(info, blkno, &mut self.buf, &mut self.runs);
    }

    /// The heap TIDs of a sound index page, one record per chunk of heap blocks they name.
    /// `collected`: the page's TIDs are already in `self.tids`, with this many entries that
    /// did not decode (heap -> index collected them).
    fn index_tids(&mut self, info: &TidIndexInfo, blkno: u32, page: &[u8], collected: Option<u64>) {
        let undecoded = match collected {
            Some(undecoded) => undecoded,
            None => {
                let Some(h) = PageHeader::parse(page) else {
                    return;
                };
                if info.am != IndexAm::Btree {
                    line_pointers_into(page, &h, &mut self.items);
                }
                self.tids.clear();
                page_tids(info.am, page, &h, &self.items, &mut self.tids)
            }
        };
        let place = (info.heap_fork as u32, info.fork as u32, blkno);
        let runs = &mut self.runs;
        write_page_tids(&mut self.buf, place, &mut self.tids, |r| runs.push(r));
        if undecoded > 0 {
            write_undecoded(&mut self.buf, place.0, undecoded);
            self.runs.push(&self.buf);
        }
    }

    /// Moves another worker's runs into this one.
    pub fn absorb(&mut self, other: Emitter<'a>) {
        self.runs.adopt(other.finish());
    }

    /// Sorts the facts gathered so far into a run (see [`RunBuilder::seal`]).
    pub fn seal(&mut self) {
        self.runs.seal();
    }

    pub fn finish(mut self) -> Runs {
        self.all_indexed.flush();
        self.runs.finish()
    }

    fn heap_page(&mut self, info: &'a HeapInfo, blkno: u32, page: &[u8], parsed: &[ItemId]) {
        let Some(h) = PageHeader::parse(page) else {
            return;
        };
        if h.is_new() {
            return;
        }
        let mut own = std::mem::take(&mut self.items);
        let items = line_pointers(page, &h, parsed, &mut own);
        let tuples = HeapTuples { page, blkno, items };
        self.heap_tuples(info, &tuples, h.pd_flags);
        self.items = own;
    }

    /// The facts of a sound heap page, from its parsed tuples.
    fn heap_tuples(&mut self, info: &'a HeapInfo, tuples: &HeapTuples<'_>, pd_flags: u16) {
        let blkno = tuples.blkno;
        if !info.all_indexed.is_empty() {
            // The walk of the page's live HOT chains gives the uniqueness check its roots too.
            probe_heap(
                &info.all_indexed,
                tuples,
                self.clog,
                &mut self.all_indexed,
                info.live_roots.then_some(&mut self.bits),
            );
        } else if info.live_roots {
            live_roots(tuples, self.clog, &mut self.bits);
        }
        if info.live_roots {
            self.live_roots_fact(info.fork as u32, blkno);
        }
        if info.tids {
            target_map(tuples, &mut self.bits);
            let nlines = tuples.items.len() as u16;
            let unit = info.fork as u32;
            write_heap_lines(
                &mut self.buf,
                unit,
                blkno,
                PageState::Sound,
                nlines,
                &self.bits,
            );
            self.runs.push(&self.buf);
        }
        if let Some(target) = &info.toast_pointers {
            toast::emit::pointer_facts(target, tuples, self.clog, &mut self.buf, &mut self.runs);
        }
        if info.toast_chunks {
            toast::emit::chunk_facts(
                info.fork as u32,
                blkno,
                tuples.page,
                tuples.items,
                self.clog,
                &mut self.buf,
                &mut self.runs,
            );
        }
        if info.hints || info.visibility {
            self.vm.heap_page(
                info,
                tuples,
                pd_flags,
                self.clog,
                self.facts,
                &mut self.buf,
                &mut self.runs,
            );
        }
    }

    /// The live HOT-chain roots of a heap page (the bitmap in `bits`, from [`live_roots`]),
    /// for the uniqueness check.
    fn live_roots_fact(&mut self, unit: u32, blkno: u32) {
        if self.bits.iter().all(|&b| b == 0) {
            return;
        }
        Writer::start(&mut self.buf, unit, Family::HeapLive, blkno).bytes(&self.bits);
        self.runs.push(&self.buf);
    }

    fn btree_page(&mut self, info: &'a IndexInfo, blkno: u32, page: &[u8], parsed: &[ItemId]) {
        let unit = info.fork as u32;
        let Some(h) = PageHeader::parse(page) else {
            return;
        };
        let Some(opaque) = BtPageOpaque::parse(page, h.pd_special as usize) else {
            return;
        };
        if blkno == 0 {
            if let Some(m) = BtMetaPage::parse(page) {
                let fact = MetaFact {
                    root: m.btm_root,
                    level: m.btm_level,
                    fastroot: m.btm_fastroot,
                    fastlevel: m.btm_fastlevel,
                    version: m.btm_version,
                };
                fact.write(&mut Writer::start(
                    &mut self.buf,
                    unit,
                    Family::BtreeMeta,
                    0,
                ));
                self.runs.push(&self.buf);
            }
            return;
        }
        if parsed.is_empty() {
            line_pointers_into(page, &h, &mut self.items);
        } else {
            self.items.clear();
            self.items.extend_from_slice(parsed);
        }
        let view = page_view(page, &opaque, &self.items);
        let runs = &mut self.runs;
        let keys = info.ordering.is_ok();
        page_records(unit, blkno, &view, keys, &mut self.buf, |r| runs.push(r));
        let live_leaf = opaque.is_live_leaf();
        let tid_info = live_leaf
            .then(|| self.plan.tids.indexes.get(&info.fork))
            .flatten();
        // Heap -> index walks the entries anyway: it collects their TIDs for the TID check.
        let mut collected = None;
        if let (Some(a), true) = (&info.all_indexed, live_leaf) {
            let leaf = LeafPage {
                page,
                opaque: &opaque,
                items: &self.items,
                max_align: self.plan.max_align,
            };
            self.tids.clear();
            let tids = tid_info.is_some().then_some(&mut self.tids);
            collected = insert_leaf(a, leaf, &mut self.all_indexed, tids);
        }
        if let Some(tid_info) = tid_info {
            self.index_tids(tid_info, blkno, page, collected);
        }
        if let (Some(spec), true) = (&info.unique, live_leaf) {
            let found = unique_runs(page, &opaque, &self.items, spec, self.plan.max_align);
            for (place, offnum, key, tids) in found {
                let run = RunRec {
                    blkno,
                    level: opaque.btpo_level,
                    place,
                    offnum,
                    key: &key,
                    tids,
                };
                self.push_run(unit, &run, opaque.btpo_next);
            }
        }
    }

    /// A unique index's run: its first run at its own block, its last run at its right
    /// sibling's (to meet that page's first run), an inner one on its own.
    fn push_run(&mut self, unit: u32, run: &RunRec<'_>, next: u32) {
        let (first, last) = match run.place {
            RunPlace::Inner => {
                inner_run_record(unit, run, &mut self.buf);
                self.runs.push(&self.buf);
                return;
            }
            RunPlace::First => (true, false),
            RunPlace::Last => (false, true),
            RunPlace::Whole => (true, next != P_NONE),
        };
        if first {
            run_record(unit, run.blkno, Rec::FirstRun, run, &mut self.buf);
            self.runs.push(&self.buf);
        }
        if last {
            let at = if next == P_NONE { run.blkno } else { next };
            run_record(unit, at, Rec::LastRun, run, &mut self.buf);
            self.runs.push(&self.buf);
        }
    }
}
