//! The scan side of the extended level: one [`Emitter`] per worker turns each page of a planned
//! relation into fact records right after the page's physical and standard checks, so the
//! block scan stays the only reader of the data files.

use std::sync::atomic::Ordering;

use super::allindexed::probe::{insert_leaf, probe_heap, Scratch};
use super::btree::records::{
    damaged_record, inner_run_record, page_records, run_record, DownlinkView, PageView, Rec, RunRec,
};
use super::facts::{Family, MetaFact, RunPlace, Writer};
use super::heap::live_roots;
use super::plan::{ExtendedPlan, HeapInfo, IndexInfo, Role, UniqueSpec};
use super::spill::{RunBuilder, Runs};
use super::tids::decode::page_tids;
use super::tids::record::{
    for_each_block_group, target_map, write_group, write_heap_lines, write_undecoded, PageState,
};
use super::tids::{IndexAm, TidIndexInfo};
use super::toast;
use crate::catalog::xact::CommitLog;
use crate::layout::btree::{flags as bf, BtMetaPage, BtPageOpaque, P_NONE};
use crate::layout::heap::ItemPointer;
use crate::layout::itemid::{line_pointers_into, ItemId, LpFlags};
use crate::layout::le_u16;
use crate::page::PageHeader;
use crate::standard::ClusterFacts;

/// `t_info` bits of an index tuple.
pub mod t_info {
    pub const INDEX_SIZE_MASK: u16 = 0x1FFF;
    pub const INDEX_ALT_TID_MASK: u16 = 0x2000;
    pub const INDEX_NULL_MASK: u16 = 0x8000;
}
/// `BT_IS_POSTING` and `BT_OFFSET_MASK` in the offset field of an ALT-TID tuple.
const BT_IS_POSTING: u16 = 0x2000;
const BT_OFFSET_MASK: u16 = 0x0FFF;
/// `sizeof(IndexTupleData)` and `sizeof(IndexAttributeBitMapData)`.
const SIZE_OF_INDEX_TUPLE: usize = 8;
const SIZE_OF_NULL_BITMAP: usize = 4;
/// `P_HIKEY`.
const P_HIKEY: u16 = 1;

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
    all_indexed: Scratch,
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
    /// passed the physical and standard checks.
    pub fn page(&mut self, file: usize, blkno: u64, page: &[u8], sound: bool) {
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
                    self.btree_page(info, blkno, page);
                } else {
                    damaged_record(info.fork as u32, blkno, &mut self.buf);
                    self.runs.push(&self.buf);
                }
            }
            Role::Heap(info) => {
                if sound {
                    self.heap_page(info, blkno, page);
                } else {
                    self.damaged_heap_page(info, blkno);
                }
            }
            Role::TidIndex(info) => {
                if sound {
                    self.index_tids(info, blkno, page);
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
    /// it `New`): a heap page the TID and visibility-map checks must know is empty.
    pub fn new_page(&mut self, file: usize, blkno: u64) {
        let Some(Role::Heap(info)) = self.plan.roles.get(file).and_then(Option::as_ref) else {
            return;
        };
        let Ok(blkno) = u32::try_from(blkno) else {
            return;
        };
        if info.tids {
            let unit = info.fork as u32;
            write_heap_lines(&mut self.buf, unit, blkno, PageState::New, 0, &[]);
            self.runs.push(&self.buf);
        }
        self.vm
            .zero_heap_page(info, blkno, &mut self.buf, &mut self.runs);
    }

    /// The heap TIDs of a sound index page, one record per heap block they name.
    fn index_tids(&mut self, info: &TidIndexInfo, blkno: u32, page: &[u8]) {
        let Some(h) = PageHeader::parse(page) else {
            return;
        };
        if info.am != IndexAm::Btree {
            line_pointers_into(page, &h, &mut self.items);
        }
        self.tids.clear();
        let undecoded = page_tids(info.am, page, &h, &self.items, &mut self.tids);
        let (unit, index_fork) = (info.heap_fork as u32, info.fork as u32);
        let (buf, runs) = (&mut self.buf, &mut self.runs);
        for_each_block_group(&mut self.tids, |heap_block, offsets| {
            write_group(buf, unit, heap_block, index_fork, blkno, offsets);
            runs.push(buf);
        });
        if undecoded > 0 {
            write_undecoded(&mut self.buf, unit, undecoded);
            self.runs.push(&self.buf);
        }
    }

    /// Moves another worker's runs into this one.
    pub fn absorb(&mut self, other: Emitter<'a>) {
        self.runs.adopt(other.finish());
    }

    pub fn finish(self) -> Runs {
        self.runs.finish()
    }

    fn heap_page(&mut self, info: &HeapInfo, blkno: u32, page: &[u8]) {
        let Some(h) = PageHeader::parse(page) else {
            return;
        };
        if h.is_new() {
            return;
        }
        line_pointers_into(page, &h, &mut self.items);
        if info.live_roots {
            self.live_roots_fact(info.fork as u32, blkno, page);
        }
        if !info.all_indexed.is_empty() {
            probe_heap(
                &info.all_indexed,
                page,
                blkno,
                &self.items,
                self.clog,
                &mut self.all_indexed,
            );
        }
        if info.tids {
            target_map(page, &self.items, &mut self.bits);
            let nlines = self.items.len() as u16;
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
            toast::emit::pointer_facts(
                target,
                blkno,
                page,
                &self.items,
                self.clog,
                &mut self.buf,
                &mut self.runs,
            );
        }
        if info.toast_chunks {
            toast::emit::chunk_facts(
                info.fork as u32,
                blkno,
                page,
                &self.items,
                self.clog,
                &mut self.buf,
                &mut self.runs,
            );
        }
        if info.hints || info.visibility {
            self.vm.heap_page(
                info,
                blkno,
                page,
                h.pd_flags,
                &self.items,
                self.clog,
                self.facts,
                &mut self.buf,
                &mut self.runs,
            );
        }
    }

    /// The live HOT-chain roots of a heap page, for the uniqueness check.
    fn live_roots_fact(&mut self, unit: u32, blkno: u32, page: &[u8]) {
        live_roots(page, blkno, &self.items, self.clog, &mut self.bits);
        if self.bits.iter().all(|&b| b == 0) {
            return;
        }
        Writer::start(&mut self.buf, unit, Family::HeapLive, blkno).bytes(&self.bits);
        self.runs.push(&self.buf);
    }

    fn btree_page(&mut self, info: &IndexInfo, blkno: u32, page: &[u8]) {
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
        line_pointers_into(page, &h, &mut self.items);
        let view = page_view(page, &opaque, &self.items);
        let runs = &mut self.runs;
        let keys = info.ordering.is_ok();
        page_records(unit, blkno, &view, keys, &mut self.buf, |r| runs.push(r));
        let live_leaf =
            opaque.is_leaf() && opaque.btpo_flags & (bf::BTP_DELETED | bf::BTP_HALF_DEAD) == 0;
        if let (Some(a), true) = (&info.all_indexed, live_leaf) {
            insert_leaf(a, page, &opaque, &self.items, self.plan.max_align);
        }
        if live_leaf {
            if let Some(tid_info) = self.plan.tids.indexes.get(&info.fork) {
                self.index_tids(tid_info, blkno, page);
            }
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

/// The bytes of item `offnum` (1-based), if its line pointer has storage on the page.
pub fn item<'p>(page: &'p [u8], items: &[ItemId], offnum: u16) -> Option<&'p [u8]> {
    let it = items.get((offnum as usize).checked_sub(1)?)?;
    if !it.has_storage() {
        return None;
    }
    page.get(it.lp_off as usize..it.lp_off as usize + it.lp_len as usize)
}

/// `P_FIRSTDATAKEY`: 1 on the rightmost page of a level, else 2 (1 holds the high key).
fn first_data_key(o: &BtPageOpaque) -> u16 {
    if o.btpo_next == P_NONE {
        1
    } else {
        2
    }
}

/// What the facts need of a page: opaque data, high key, first and last data items,
/// downlinks, all borrowed from the page.
fn page_view<'p>(page: &'p [u8], o: &BtPageOpaque, items: &[ItemId]) -> PageView<'p> {
    let mut f = PageView {
        btpo_prev: o.btpo_prev,
        btpo_next: o.btpo_next,
        btpo_level: o.btpo_level,
        btpo_flags: o.btpo_flags,
        ..PageView::default()
    };
    if o.btpo_flags & bf::BTP_DELETED != 0 {
        if o.btpo_flags & bf::BTP_HAS_FULLXID != 0 {
            // BTDeletedPageData: the safexid right after the page header.
            let at = crate::page::SIZE_OF_PAGE_HEADER_DATA;
            f.safexid = page
                .get(at..at + 8)
                .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])));
        }
        return f;
    }
    if o.btpo_next != P_NONE {
        f.high_key = item(page, items, P_HIKEY).unwrap_or_default();
        if o.btpo_flags & bf::BTP_HALF_DEAD != 0 {
            f.top_parent = ItemPointer::parse(f.high_key, 0).map(|p| p.block);
        }
    }
    let first = first_data_key(o);
    let last = items.len() as u16;
    if last >= first {
        f.first_item = item(page, items, first).unwrap_or_default();
        f.last_item = item(page, items, last).unwrap_or_default();
    }
    if !o.is_leaf() {
        for offnum in first..=last {
            let Some(t) = item(page, items, offnum) else {
                continue;
            };
            if let Some(p) = ItemPointer::parse(t, 0) {
                f.downlinks.push(DownlinkView {
                    offnum,
                    child: p.block,
                    item: t,
                });
            }
        }
    }
    f
}

/// One leaf entry of a unique index, borrowed from the page: its key (null bits of the key
/// columns and key data) and where its heap TIDs are.
struct Entry<'p> {
    offnum: u16,
    nulls: u32,
    key: &'p [u8],
    tuple: &'p [u8],
    /// `(start, count)` of a posting list; `None` for a plain tuple (its TID is `t_tid`).
    posting: Option<(usize, usize)>,
}

impl Entry<'_> {
    fn same_key(&self, other: &Entry<'_>) -> bool {
        self.nulls == other.nulls && self.key == other.key
    }

    fn tid_count(&self) -> usize {
        self.posting.map_or(1, |(_, n)| n)
    }

    fn push_tids(&self, out: &mut Vec<(u32, u16, u16)>) {
        let at = |off: usize| ItemPointer::parse(self.tuple, off);
        match self.posting {
            None => out.extend(at(0).map(|p| (p.block, p.offset, self.offnum))),
            Some((start, n)) => out.extend(
                (0..n)
                    .filter_map(|i| at(start + 6 * i))
                    .map(|p| (p.block, p.offset, self.offnum)),
            ),
        }
    }
}

/// The runs of byte-equal keys of a unique index's leaf page: the first and last runs always
/// (they may continue on the siblings), inner runs when they hold two or more TIDs. Entries are
/// compared in place; only the runs kept are copied.
/// A run found: where it sits, its first entry's offset, its key, its heap TIDs.
type FoundRun = (RunPlace, u16, Vec<u8>, Vec<(u32, u16, u16)>);

fn unique_runs(
    page: &[u8],
    o: &BtPageOpaque,
    items: &[ItemId],
    spec: &UniqueSpec,
    max_align: usize,
) -> Vec<FoundRun> {
    let mut entries: Vec<Entry<'_>> = Vec::new();
    for offnum in first_data_key(o)..=items.len() as u16 {
        if items[offnum as usize - 1].lp_flags == LpFlags::Dead {
            continue; // killed: its heap tuples are dead to everyone
        }
        let Some(t) = item(page, items, offnum) else {
            continue;
        };
        if let Some(e) = entry(t, offnum, spec, max_align) {
            entries.push(e);
        }
    }
    // Groups of consecutive equal keys, as index ranges.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for i in 0..entries.len() {
        match groups.last_mut() {
            Some(g) if entries[g.0].same_key(&entries[i]) => g.1 = i + 1,
            _ => groups.push((i, i + 1)),
        }
    }
    let n = groups.len();
    let mut runs = Vec::new();
    for (gi, &(from, to)) in groups.iter().enumerate() {
        let place = match (gi == 0, gi + 1 == n) {
            (true, true) => RunPlace::Whole,
            (true, false) => RunPlace::First,
            (false, true) => RunPlace::Last,
            (false, false) => RunPlace::Inner,
        };
        let group = &entries[from..to];
        if place == RunPlace::Inner && group.iter().map(Entry::tid_count).sum::<usize>() < 2 {
            continue;
        }
        let mut key = group[0].nulls.to_le_bytes().to_vec();
        key.extend_from_slice(group[0].key);
        let mut tids = Vec::new();
        for e in group {
            e.push_tids(&mut tids);
        }
        runs.push((place, group[0].offnum, key, tids));
    }
    runs
}

/// The comparable key of a non-pivot leaf tuple and where its heap TIDs are; `None` for a pivot
/// tuple, a tuple whose key has a NULL (when NULLs are distinct), or one that cannot be decoded.
fn entry<'p>(t: &'p [u8], offnum: u16, spec: &UniqueSpec, max_align: usize) -> Option<Entry<'p>> {
    let info = le_u16(t, 6)?;
    let size = ((info & t_info::INDEX_SIZE_MASK) as usize).min(t.len());
    let tid = ItemPointer::parse(t, 0)?;
    let has_nulls = info & t_info::INDEX_NULL_MASK != 0;
    let (key_end, posting) = if info & t_info::INDEX_ALT_TID_MASK == 0 {
        (size, None)
    } else if tid.offset & BT_IS_POSTING != 0 {
        let start = tid.block as usize;
        let n = (tid.offset & BT_OFFSET_MASK) as usize;
        if start.checked_add(n * 6)? > t.len() {
            return None;
        }
        (start.min(size), Some((start, n)))
    } else {
        return None; // a pivot tuple
    };
    let data_off = if has_nulls {
        crate::standard::max_align(SIZE_OF_INDEX_TUPLE + SIZE_OF_NULL_BITMAP, max_align)
    } else {
        crate::standard::max_align(SIZE_OF_INDEX_TUPLE, max_align)
    };
    // Bit i set: key column i is NULL (the bitmap stores "not null" bits).
    let nkeys = spec.nkeyatts.min(32);
    let key_mask = if nkeys == 32 {
        u32::MAX
    } else {
        (1u32 << nkeys) - 1
    };
    let nulls = if has_nulls {
        let b = t.get(SIZE_OF_INDEX_TUPLE..SIZE_OF_INDEX_TUPLE + SIZE_OF_NULL_BITMAP)?;
        !u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & key_mask
    } else {
        0
    };
    if nulls != 0 && !spec.nulls_not_distinct {
        return None;
    }
    let key_end = if spec.natts > spec.nkeyatts {
        key_columns_end(t, data_off, key_end, nulls, spec)?
    } else {
        key_end
    };
    Some(Entry {
        offnum,
        nulls,
        key: t.get(data_off..key_end)?,
        tuple: t,
        posting,
    })
}

/// Where the key columns end, before the INCLUDE columns: walks the key attributes with their
/// length and alignment. `None` when the index's columns are not known.
fn key_columns_end(
    t: &[u8],
    data_off: usize,
    limit: usize,
    nulls: u32,
    spec: &UniqueSpec,
) -> Option<usize> {
    let attrs = spec.attributes.as_ref()?;
    let mut off = data_off;
    for (i, att) in attrs.iter().take(spec.nkeyatts).enumerate() {
        if i < 32 && nulls & (1 << i) != 0 {
            continue;
        }
        let len = match att.attlen {
            n if n > 0 => {
                off = crate::standard::align_up(off - data_off, att.align) + data_off;
                n as usize
            }
            -1 => {
                let first = *t.get(off)?;
                if first & 0x01 == 0 {
                    // 4-byte header: aligned, length in the upper 30 bits.
                    off = crate::standard::align_up(off - data_off, att.align) + data_off;
                    let w = u32::from_le_bytes(t.get(off..off + 4)?.try_into().ok()?);
                    (w >> 2) as usize
                } else if first == 0x01 {
                    return None; // an external TOAST pointer never sits in an index tuple
                } else {
                    (first >> 1) as usize
                }
            }
            -2 => t.get(off..limit)?.iter().position(|&b| b == 0)? + 1,
            _ => return None,
        };
        off = off.checked_add(len)?;
    }
    (off <= limit).then_some(off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::attributes::Attribute;
    use std::sync::Arc;

    fn attr(name: &str, attlen: i16, align: usize) -> Attribute {
        Attribute {
            name: name.into(),
            type_name: None,
            attlen,
            align,
            dropped: false,
        }
    }

    /// `(id int4) INCLUDE (note text)`: TID (5, off), key `id`, a 1-byte-header text.
    fn tuple(off: u16, id: i32, note: &[u8]) -> Vec<u8> {
        let mut t = vec![0, 0, 5, 0];
        t.extend_from_slice(&off.to_le_bytes());
        t.extend_from_slice(&[0, 0]); // t_info, set below
        t.extend_from_slice(&id.to_le_bytes());
        t.push(((note.len() as u8 + 1) << 1) | 1);
        t.extend_from_slice(note);
        t.resize(t.len().div_ceil(8) * 8, 0);
        let size = t.len() as u16;
        t[6..8].copy_from_slice(&size.to_le_bytes());
        t
    }

    fn spec(nulls_not_distinct: bool) -> UniqueSpec {
        UniqueSpec {
            heap_fork: 0,
            nkeyatts: 1,
            natts: 2,
            nulls_not_distinct,
            attributes: Some(Arc::from(vec![attr("id", 4, 4), attr("note", -1, 4)])),
        }
    }

    #[test]
    fn include_columns_are_not_part_of_the_key() {
        let (a, b, c) = (
            tuple(1, 42, b"ab"),
            tuple(2, 42, b"cdef"),
            tuple(3, 43, b"ab"),
        );
        let s = spec(false);
        let ea = entry(&a, 1, &s, 8).unwrap();
        let eb = entry(&b, 2, &s, 8).unwrap();
        let ec = entry(&c, 3, &s, 8).unwrap();
        assert!(ea.same_key(&eb));
        assert!(!ea.same_key(&ec));
        let mut tids = Vec::new();
        eb.push_tids(&mut tids);
        assert_eq!(tids, vec![(5, 2, 2)]);
    }

    #[test]
    fn null_keys_are_distinct_unless_nulls_not_distinct() {
        // t_info with INDEX_NULL_MASK and a bitmap whose bit 0 (the key column) is clear.
        let mut t = vec![0, 0, 5, 0, 1, 0, 0, 0, 0b10, 0, 0, 0, 0, 0, 0, 0];
        t.extend_from_slice(&[(3 << 1) | 1, b'a', b'b', 0, 0, 0, 0, 0]);
        let info = t_info::INDEX_NULL_MASK | t.len() as u16;
        t[6..8].copy_from_slice(&info.to_le_bytes());
        assert!(entry(&t, 1, &spec(false), 8).is_none());
        let e = entry(&t, 1, &spec(true), 8).unwrap();
        assert_eq!(e.nulls, 1);
        // A pivot tuple (ALT_TID without BT_IS_POSTING) is never an entry.
        let mut pivot = tuple(1, 42, b"ab");
        pivot[7] |= (t_info::INDEX_ALT_TID_MASK >> 8) as u8;
        assert!(entry(&pivot, 1, &spec(false), 8).is_none());
    }
}
