//! The merge side: one table's visibility and hint-bit records, streamed in block order, become
//! findings at the heap page. A map run's record sorts before the heap pages it covers, so one
//! pass keeps only the current run in memory; hint-bit records of one page are grouped into
//! one finding.

use std::ops::Range;

use serde_json::json;

use super::scan::{heapblocks_per_page, HintProblem, MapRun, PageSummary, Tag};
use crate::catalog::xact::xact_page;
use crate::check::extended::facts::{Family, Reader};
use crate::check::extended::plan::ExtendedPlan;
use crate::check::extended::report::block_finding;
use crate::check::extended::spill::Runs;
use crate::finding::{Finding, FindingKind as K};
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;
use crate::format::vm::{VM_ALL_FROZEN, VM_ALL_VISIBLE};
use crate::plan::Plan;

/// Offsets listed in a hint-bit finding's `detail` at most.
const MAX_LISTED_OFFSETS: usize = 20;

/// Checks one planned heap table (its main fork `fork`): its findings, or why its facts could
/// not be read. The merge runs it as a task of its first pool (`extended::merge`).
pub fn check_table(
    plan: &Plan,
    ext: &ExtendedPlan,
    runs: &Runs,
    fork: usize,
) -> Result<Vec<Finding>, String> {
    let mut table = Table::new(plan, fork, ext.vm.maps.contains_key(&fork));
    match runs.for_each_in_unit(fork as u32, |r| table.record(r)) {
        Ok(()) => Ok(table.finish()),
        Err(e) => Err(format!(
            "could not read the visibility facts of {}: {e}",
            plan.dir.files[plan.forks[fork].segments().start].rel_path()
        )),
    }
}

/// The findings of the tables checked, `(fork, findings)` in any order, sorted by table.
pub fn in_table_order(mut found: Vec<(usize, Vec<Finding>)>) -> Vec<Finding> {
    found.sort_by_key(|(fork, _)| *fork);
    found.into_iter().flat_map(|(_, f)| f).collect()
}

/// The streaming state of one table's merge.
struct Table<'p> {
    plan: &'p Plan,
    fork: usize,
    /// Whether the table's visibility map is compared.
    map: bool,
    /// Absolute block ranges of the heap segment files that exist.
    present: Vec<Range<u64>>,
    heapblocks_per_page: u64,
    /// The last map run read: it covers the heap pages that follow it up to its end.
    run: Option<MapRun>,
    /// Hint-bit problems of the current heap page.
    hints: Vec<HintProblem>,
    hints_block: u32,
    findings: Vec<Finding>,
}

impl<'p> Table<'p> {
    fn new(plan: &'p Plan, fork: usize, map: bool) -> Table<'p> {
        let relseg = plan.control.relseg_size.max(1) as u64;
        let bs = plan.control.blcksz as u64;
        let present = plan.forks[fork]
            .segments()
            .map(|i| {
                let f = &plan.dir.files[i];
                let start = f.name.segno as u64 * relseg;
                start..start + f.size / bs
            })
            .collect();
        Table {
            plan,
            fork,
            map,
            present,
            heapblocks_per_page: heapblocks_per_page(plan.control.blcksz as usize),
            run: None,
            hints: Vec::new(),
            hints_block: 0,
            findings: Vec::new(),
        }
    }

    fn record(&mut self, record: &[u8]) {
        let Some((head, mut r)) = Reader::open(record) else {
            return;
        };
        match head.family {
            Family::Visibility if self.map => match r.u8().and_then(Tag::from_byte) {
                Some(Tag::MapRun) => {
                    if let Some(run) = MapRun::read(head.blkno, &mut r) {
                        self.map_run(run);
                    }
                }
                Some(Tag::HeapPage) => {
                    if let Some(s) = PageSummary::read(&mut r) {
                        self.heap_page(head.blkno, &s);
                    }
                }
                _ => {}
            },
            Family::HintBit => {
                if let Some(p) = HintProblem::read(&mut r) {
                    if !self.hints.is_empty() && self.hints_block != head.blkno {
                        self.flush_hints();
                    }
                    self.hints_block = head.blkno;
                    self.hints.push(p);
                }
            }
            _ => {}
        }
    }

    fn finish(mut self) -> Vec<Finding> {
        self.flush_hints();
        self.findings
    }

    /// A run of set bits: the blocks it marks that no heap segment holds are lost writes.
    fn map_run(&mut self, run: MapRun) {
        let (mut at, end) = (run.start as u64, run.end as u64);
        while at < end {
            match self.present.iter().find(|r| r.contains(&at)) {
                Some(r) => at = r.end.min(end),
                None => {
                    let next = self
                        .present
                        .iter()
                        .map(|r| r.start)
                        .filter(|&s| s > at)
                        .min()
                        .unwrap_or(end)
                        .min(end);
                    self.lost_past_end(at, next, run.bits);
                    at = next;
                }
            }
        }
        self.run = Some(run);
    }

    fn lost_past_end(&mut self, first: u64, end: u64, bits: u8) {
        let blocks: u64 = self.present.iter().map(|r| r.end - r.start).sum();
        let count = end - first;
        let which = if count == 1 {
            format!("heap block {first}")
        } else {
            format!("heap blocks {first} to {}", end - 1)
        };
        let message = format!(
            "lost write: the visibility map marks {which} {} but the table's files end before it ({blocks} blocks)",
            marks(bits)
        );
        let mut detail = self.map_detail(first as u32, bits);
        detail["reason"] = json!("beyond_end");
        detail["evidence"] = json!("visibility_map");
        detail["blocks"] = json!(count);
        self.push_kind(K::LostWrite, first, message, detail, None);
    }

    /// A heap page's summary against the current run's bits, when the run covers it. The
    /// finding's words and `detail` are built only for a page that has one (almost every page
    /// agrees with its bits).
    fn heap_page(&mut self, blkno: u32, s: &PageSummary) {
        let Some(run) = self.run.filter(|r| r.start <= blkno && blkno < r.end) else {
            return;
        };
        let bits = run.bits;
        if s.all_zero {
            let mut detail = self.map_detail(blkno, bits);
            detail["reason"] = json!("all_zero");
            detail["evidence"] = json!("visibility_map");
            let message = format!(
                "lost write: the visibility map marks this heap page {} but the page is all zero",
                marks(bits)
            );
            self.push_kind(K::LostWrite, blkno as u64, message, detail, None);
            return;
        }
        let flag_clear = bits & VM_ALL_VISIBLE != 0 && !s.pd_all_visible;
        let visible = s.not_visible.filter(|_| bits & VM_ALL_VISIBLE != 0);
        let frozen = s.not_frozen.filter(|_| bits & VM_ALL_FROZEN != 0);
        if !flag_clear && visible.is_none() && frozen.is_none() {
            return;
        }
        let mut detail = self.map_detail(blkno, bits);
        detail["pd_all_visible"] = json!(s.pd_all_visible);
        let mut reasons = Vec::new();
        let mut offset = None;
        if flag_clear {
            reasons.push("PD_ALL_VISIBLE is clear on the page".to_string());
        }
        if let Some(o) = visible {
            reasons.push(format!(
                "line pointer {} is not visible to everyone: it {}",
                o.offnum,
                o.why.describe(o.xid)
            ));
            offset = Some(o.offnum);
            detail["not_visible_offset"] = json!(o.offnum);
        }
        if let Some(o) = frozen.filter(|f| visible.is_none_or(|v| v.offnum != f.offnum)) {
            reasons.push(format!(
                "line pointer {} still needs freezing: it {}",
                o.offnum,
                o.why.describe(o.xid)
            ));
            offset = offset.or(Some(o.offnum));
        }
        if let Some(o) = frozen {
            detail["not_frozen_offset"] = json!(o.offnum);
        }
        let message = format!(
            "the visibility map marks this heap page {} but {}",
            marks(bits),
            reasons.join("; ")
        );
        self.push(blkno as u64, message, detail, offset);
    }

    /// Where heap block `blkno`'s bits are in the map.
    fn map_detail(&self, blkno: u32, bits: u8) -> serde_json::Value {
        let slot = blkno as u64 % self.heapblocks_per_page;
        json!({
            "vm_block": blkno as u64 / self.heapblocks_per_page,
            "vm_byte": SIZE_OF_PAGE_HEADER_DATA as u64 + slot / 4,
            "vm_bit": 2 * (slot % 4),
            "all_visible": bits & VM_ALL_VISIBLE != 0,
            "all_frozen": bits & VM_ALL_FROZEN != 0,
        })
    }

    fn flush_hints(&mut self) {
        let Some(&first) = self.hints.first() else {
            return;
        };
        let n = self.hints.len();
        let more = if n > 1 {
            format!(" ({} more tuples on this page)", n - 1)
        } else {
            String::new()
        };
        // An in-progress conflict names the commit-log page that lost the commit.
        let xact_page = first
            .conflict
            .in_progress()
            .then(|| xact_page(first.xid, self.plan.control.blcksz))
            .flatten();
        let at_page = match &xact_page {
            Some((file, page)) => format!(" ({file} page {page})"),
            None => String::new(),
        };
        let message = format!(
            "line pointer {}: {}{at_page}{more}",
            first.offnum,
            first.conflict.describe(first.xid)
        );
        let offsets: Vec<u16> = self
            .hints
            .iter()
            .map(|p| p.offnum)
            .take(MAX_LISTED_OFFSETS)
            .collect();
        let mut detail = json!({
            "hint": first.conflict.hint(),
            "xid": first.xid,
            "xact_status": first.conflict.xact_status(),
            "tuples": n,
            "offsets": offsets,
        });
        if let (Some((file, page)), Some(obj)) = (xact_page, detail.as_object_mut()) {
            obj.insert("pg_xact_file".into(), json!(file));
            obj.insert("pg_xact_page".into(), json!(page));
        }
        let mut f = block_finding(
            self.plan,
            self.fork,
            self.hints_block as u64,
            K::HintBitInvalid,
            message,
            detail,
        );
        f.offset = Some(first.offnum);
        self.findings.push(f);
        self.hints.clear();
    }

    fn push(
        &mut self,
        blkno: u64,
        message: String,
        detail: serde_json::Value,
        offset: Option<u16>,
    ) {
        self.push_kind(K::VisibilityMapWrong, blkno, message, detail, offset);
    }

    fn push_kind(
        &mut self,
        kind: K,
        blkno: u64,
        message: String,
        detail: serde_json::Value,
        offset: Option<u16>,
    ) {
        let mut f = block_finding(self.plan, self.fork, blkno, kind, message, detail);
        f.offset = offset;
        self.findings.push(f);
    }
}

/// The bits a run sets, in words.
fn marks(bits: u8) -> &'static str {
    match bits & (VM_ALL_VISIBLE | VM_ALL_FROZEN) {
        b if b == VM_ALL_VISIBLE | VM_ALL_FROZEN => "all-visible and all-frozen",
        VM_ALL_VISIBLE => "all-visible",
        _ => "all-frozen",
    }
}
