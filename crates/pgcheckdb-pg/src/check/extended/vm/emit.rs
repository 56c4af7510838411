//! Writes the visibility and hint-bit records of one page into a worker's runs (called by
//! the extended level's `Emitter` (`extended::emit`) for heap and `_vm` pages).

use super::scan::{heap_page, map_runs, HeapPageWork, HintProblem, MapRun, PageSummary};
use super::xids::XidWindow;
use super::VmInfo;
use crate::catalog::xact::CommitLog;
use crate::check::extended::facts::{Family, Writer};
use crate::check::extended::heap::HeapTuples;
use crate::check::extended::plan::HeapInfo;
use crate::check::extended::spill::RunBuilder;
use crate::check::standard::ClusterFacts;

/// One worker's buffers for these records, reused from page to page.
#[derive(Debug, Default)]
pub struct VmEmitter {
    summary: PageSummary,
    hints: Vec<HintProblem>,
    runs: Vec<MapRun>,
}

impl VmEmitter {
    /// A heap page that passed the physical and standard checks: its summary (when a map bit
    /// could be wrong about it) and its hint-bit conflicts.
    #[allow(clippy::too_many_arguments)]
    pub fn heap_page(
        &mut self,
        info: &HeapInfo,
        tuples: &HeapTuples<'_>,
        pd_flags: u16,
        clog: &CommitLog,
        facts: &ClusterFacts,
        buf: &mut Vec<u8>,
        out: &mut RunBuilder,
    ) {
        let work = HeapPageWork {
            summary: info.visibility,
            hints: info.hints,
            window: XidWindow::new(info.relfrozenxid, facts),
            clog,
        };
        let blkno = tuples.blkno;
        heap_page(tuples, pd_flags, &work, &mut self.summary, &mut self.hints);
        let unit = info.fork as u32;
        if info.visibility && self.summary.matters() {
            self.summary
                .write(&mut Writer::start(buf, unit, Family::Visibility, blkno));
            out.push(buf);
        }
        for p in &self.hints {
            p.write(&mut Writer::start(buf, unit, Family::HintBit, blkno));
            out.push(buf);
        }
    }

    /// An all-zero heap page: a set map bit for it is a lost write.
    pub fn zero_heap_page(
        &mut self,
        info: &HeapInfo,
        blkno: u32,
        buf: &mut Vec<u8>,
        out: &mut RunBuilder,
    ) {
        if !info.visibility {
            return;
        }
        let s = PageSummary {
            all_zero: true,
            ..PageSummary::default()
        };
        s.write(&mut Writer::start(
            buf,
            info.fork as u32,
            Family::Visibility,
            blkno,
        ));
        out.push(buf);
    }

    /// A visibility-map page that passed the checks: its runs of set bits, at heap blocks.
    pub fn map_page(
        &mut self,
        info: &VmInfo,
        vm_block: u32,
        page: &[u8],
        blcksz: usize,
        buf: &mut Vec<u8>,
        out: &mut RunBuilder,
    ) {
        map_runs(page, vm_block, blcksz, &mut self.runs);
        for r in &self.runs {
            r.write(&mut Writer::start(
                buf,
                info.heap_fork as u32,
                Family::Visibility,
                r.start,
            ));
            out.push(buf);
        }
    }
}
