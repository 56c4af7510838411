//! The block scan's per-worker visitor: the physical check of every block, the standard
//! level's structure checks and the extended level's fact emission for pages that pass, and
//! the findings, counters and runs each worker keeps until they are merged once.

use std::io;
use std::time::Instant;

use serde_json::json;

use pgcheckdb_scan::{DirtyRange, Visitor};

use super::options::VerifyOptions;
use super::report::{corrupt_block_count, Summary, VerifyReport};
use super::runs::*;
use crate::check::physical::{
    check_page_with_sum, ChecksumPair, MisplacedBasis, MisplacedEvidence, PageCheckConfig,
    PageProblem, PageVerdict,
};
use crate::check::placement::misplaced_by_ctid;
use crate::check::standard::{check_page_structure, Inputs, Scratch, StructureProblem};
use crate::check::structure::{placement_applies, Structure};
use crate::finding::{Finding, FindingKind, Severity};
use crate::format::checksum::raw_block_sums;
use crate::plan::attach_names;
use crate::plan::Plan;

/// Per-worker state of the physical scan.
pub(super) struct BlockChecker<'a> {
    pub(super) plan: &'a Plan,
    pub(super) cfg: PageCheckConfig,
    pub(super) structure: Option<&'a Structure<'a>>,
    /// Scratch list of structure problems of the current page.
    pub(super) problems: Vec<StructureProblem>,
    /// Buffers the structure checks reuse from page to page.
    pub(super) scratch: Scratch,
    pub(super) findings: Vec<Finding>,
    pub(super) tool_errors: Vec<String>,
    pub(super) blocks: u64,
    pub(super) new_pages: u64,
    pub(super) skipped_blocks: u64,
    /// Runs of new pages: one entry per run of consecutive all-zero blocks, so that a huge
    /// sparse file costs one entry, not one per page.
    pub(super) new_runs: Vec<BlockRun>,
    /// Unreadable blocks, as runs.
    pub(super) read_errors: ReadErrorRuns,
    /// Highest non-new block per fork.
    pub(super) last_used: LastUsed,
    /// Raw block sums of the current chunk, reused across chunks.
    pub(super) sums: Vec<u32>,
    /// Pages and tuples per file.
    pub(super) tally: crate::verify::relstats::Tally,
    /// The extended level's fact writer.
    pub(super) facts: Option<crate::check::extended::emit::Emitter<'a>>,
    /// `verify --online`: files may vanish or shrink while they are read (not findings), and
    /// pages whose `pd_lsn` is above this floor are noted for the check against the end of
    /// WAL ([`crate::verify::online`]).
    pub(super) online: Option<crate::verify::online::ScanNotes>,
}

impl<'a> BlockChecker<'a> {
    pub(super) fn new(
        plan: &'a Plan,
        cfg: PageCheckConfig,
        structure: Option<&'a Structure<'a>>,
        count_tuples: bool,
    ) -> Self {
        BlockChecker {
            plan,
            cfg,
            structure,
            problems: Vec::new(),
            scratch: Scratch::default(),
            findings: Vec::new(),
            tool_errors: Vec::new(),
            blocks: 0,
            new_pages: 0,
            skipped_blocks: 0,
            new_runs: Vec::new(),
            read_errors: ReadErrorRuns::default(),
            last_used: LastUsed::default(),
            sums: Vec::new(),
            tally: crate::verify::relstats::Tally::new(plan.dir.files.len(), count_tuples),
            facts: structure.and_then(|s| {
                s.extended
                    .map(|e| crate::check::extended::emit::Emitter::new(e, s.clog, &s.facts))
            }),
            online: None,
        }
    }

    pub(super) fn absorb(&mut self, other: BlockChecker<'a>) {
        self.findings.extend(other.findings);
        self.tool_errors.extend(other.tool_errors);
        self.blocks += other.blocks;
        self.new_pages += other.new_pages;
        self.skipped_blocks += other.skipped_blocks;
        self.new_runs.extend(other.new_runs);
        self.read_errors.absorb(other.read_errors);
        self.tally.absorb(other.tally);
        self.last_used.absorb(other.last_used);
        if let (Some(mine), Some(theirs)) = (self.facts.as_mut(), other.facts) {
            mine.absorb(theirs);
        }
        if let (Some(mine), Some(theirs)) = (self.online.as_mut(), other.online) {
            mine.absorb(theirs);
        }
    }

    pub(super) fn block_finding(
        &self,
        file: usize,
        blkno: u64,
        kind: FindingKind,
        severity: Severity,
        message: String,
        detail: serde_json::Value,
    ) -> Finding {
        let f = &self.plan.dir.files[file];
        let mut finding = Finding::for_file(kind, severity, &f.rel_path(), message)
            .with_detail(detail)
            .at_segment(f.name.segno);
        finding.fork = Some(f.name.fork);
        finding.block = Some(blkno);
        attach_names(&mut finding, f.location.db_oid(), f.name.relfilenode);
        finding
    }

    /// Checks one block given its raw block sum (if checksums are on); returns whether the
    /// block is in use (not a new page).
    pub(super) fn check_block(
        &mut self,
        file: usize,
        fork: usize,
        blkno: u64,
        page: &[u8],
        raw: Option<u32>,
    ) -> bool {
        self.blocks += 1;
        if let Some(notes) = self.online.as_mut() {
            notes.page(file, blkno, page);
        }
        let raw_sum = || raw.unwrap_or_else(|| crate::format::checksum::raw_block_sum(page));
        let verdict = check_page_with_sum(&self.cfg, page, blkno as u32, raw_sum);
        let format = self
            .structure
            .and_then(|s| s.files.get(file))
            .and_then(Option::as_ref)
            .map(|fs| &fs.format);
        self.tally
            .page(file, format, page, matches!(verdict, PageVerdict::Valid));
        match verdict {
            PageVerdict::Valid => {
                let before = self.findings.len();
                if let Some(finding) = self.placement_finding(file, fork, blkno, page) {
                    self.findings.push(finding);
                }
                self.check_structure(file, blkno, page);
                let sound = self.findings.len() == before;
                if let Some(facts) = self.facts.as_mut() {
                    facts.page(file, blkno, page, sound, &self.scratch.items);
                }
                true
            }
            PageVerdict::New => {
                self.new_pages += 1;
                self.note_new(fork, blkno);
                if let Some(facts) = self.facts.as_mut() {
                    facts.new_page(file, blkno);
                }
                false
            }
            PageVerdict::Problem(problem) => {
                let finding = self.problem_finding(file, fork, blkno, page, problem);
                self.findings.push(finding);
                if let Some(facts) = self.facts.as_mut() {
                    facts.page(file, blkno, page, false, &[]);
                }
                true
            }
        }
    }

    /// The standard level's checks of a physically valid page.
    pub(super) fn check_structure(&mut self, file: usize, blkno: u64, page: &[u8]) {
        let Some(structure) = self.structure else {
            return;
        };
        let Some(fs) = structure.files.get(file).and_then(Option::as_ref) else {
            return;
        };
        let mut problems = std::mem::take(&mut self.problems);
        let inputs = Inputs {
            file: fs,
            facts: &structure.facts,
            clog: structure.clog,
        };
        check_page_structure(page, blkno, &inputs, &mut self.scratch, &mut problems);
        for p in problems.drain(..) {
            let mut finding =
                self.block_finding(file, blkno, p.kind, p.severity, p.message, p.detail);
            finding.offset = p.offset;
            finding.attnum = p.attnum;
            self.findings.push(finding);
        }
        self.problems = problems;
    }

    /// Adds a new page to the runs, extending the last run when it is the next block.
    pub(super) fn note_new(&mut self, fork: usize, blkno: u64) {
        match self.new_runs.last_mut() {
            Some(run) if run.fork == fork && run.last + 1 == blkno => run.last = blkno,
            _ => self.new_runs.push(BlockRun {
                fork,
                first: blkno,
                last: blkno,
            }),
        }
    }

    pub(super) fn note_used(&mut self, fork: usize, blkno: u64) {
        self.last_used.note(fork, blkno);
    }

    pub(super) fn problem_finding(
        &self,
        file: usize,
        fork: usize,
        blkno: u64,
        page: &[u8],
        problem: PageProblem,
    ) -> Finding {
        use FindingKind as K;
        let (kind, severity, message, detail) = match problem {
            PageProblem::NonzeroNewPage { zero_prefix } => (
                K::NonzeroNewPage,
                Severity::Error,
                format!("pd_upper is 0 but the page is not all zero (first non-zero byte at offset {zero_prefix})"),
                json!({"zero_prefix": zero_prefix, "sector_aligned": zero_prefix > 0 && zero_prefix % crate::format::page::SECTOR_SIZE == 0}),
            ),
            PageProblem::InvalidHeader { rule, text, checksum } => (
                K::InvalidHeader,
                Severity::Error,
                format!("invalid page header: {text}"),
                with_checksum(json!({"rule": rule.name()}), checksum),
            ),
            PageProblem::SuspiciousHeader { rule, text } => (
                K::SuspiciousHeader,
                Severity::Warning,
                format!("unusual page header: {text}"),
                json!({"rule": rule.name()}),
            ),
            PageProblem::TornPage { zero_from, pd_upper, checksum } => (
                K::TornPage,
                if checksum.is_some() { Severity::Error } else { Severity::Warning },
                format!("torn page: zero from byte {zero_from} to the end, but tuple data starts at pd_upper {pd_upper}"),
                with_checksum(json!({"zero_from": zero_from, "pd_upper": pd_upper}), checksum),
            ),
            PageProblem::ChecksumMismatch { checksum } => return self.mismatch_finding(file, fork, blkno, page, checksum),
        };
        self.block_finding(file, blkno, kind, severity, message, detail)
    }

    pub(super) fn mismatch_finding(
        &self,
        file: usize,
        fork: usize,
        blkno: u64,
        page: &[u8],
        c: ChecksumPair,
    ) -> Finding {
        let fork_blocks = u32::try_from(self.plan.fork_blocks[fork]).unwrap_or(u32::MAX);
        let evidence = MisplacedEvidence::gather(
            page,
            &c,
            blkno as u32,
            fork_blocks,
            self.cfg.max_align,
            |b| self.plan.read_fork_block(fork, b as u64),
        );
        let mut detail = json!({"expected": c.stored, "calculated": c.calculated});
        if c.stored == 0 {
            detail["hint"] =
                json!("pd_checksum is 0: the page was probably written while checksums were off");
        }
        if let Some(basis) = evidence.basis() {
            merge(&mut detail, evidence.detail());
            let at = basis.block();
            let why = match basis {
                MisplacedBasis::IdenticalCopy(_) => format!("block {at} holds an identical copy"),
                MisplacedBasis::Ctid(_) => {
                    format!("the page's tuples name block {at} in t_ctid")
                }
                MisplacedBasis::Checksum(_) => format!(
                    "{:.6} chance matches expected among {fork_blocks} blocks",
                    evidence.expected_false_matches
                ),
            };
            let right_for = if evidence.candidates.contains(&at) {
                format!(" but right for block {at}")
            } else {
                String::new()
            };
            let message = format!(
                "misplaced page: stored checksum {} is wrong for block {blkno} (calculated {}){right_for}; {why}",
                c.stored, c.calculated
            );
            return self.block_finding(
                file,
                blkno,
                FindingKind::MisplacedPage,
                Severity::Error,
                message,
                detail,
            );
        }
        if let Some(more) = evidence.mismatch_detail() {
            merge(&mut detail, more);
        }
        let message = format!(
            "page verification failed, calculated checksum {} but expected {}",
            c.calculated, c.stored
        );
        self.block_finding(
            file,
            blkno,
            FindingKind::ChecksumMismatch,
            Severity::Error,
            message,
            detail,
        )
    }

    /// Without data checksums, a valid heap page whose tuples name another block in `t_ctid`
    /// is an image of that block written at the wrong place — when the page found at that
    /// block corroborates it ([`crate::check::placement`]).
    pub(super) fn placement_finding(
        &self,
        file: usize,
        fork: usize,
        blkno: u64,
        page: &[u8],
    ) -> Option<Finding> {
        if self.cfg.checksums || !self.placement_applies(file, fork) {
            return None;
        }
        let fork_blocks = self.plan.fork_blocks[fork];
        let evidence = misplaced_by_ctid(page, blkno, fork_blocks, self.cfg.max_align, |b| {
            self.plan.read_fork_block(fork, b)
        })?;
        let (message, detail) = (evidence.message, evidence.detail);
        Some(self.block_finding(
            file,
            blkno,
            FindingKind::MisplacedPage,
            Severity::Error,
            message,
            detail,
        ))
    }

    /// Main forks of heap relations, or of relations the catalog does not describe (the
    /// physical level: the page's shape decides).
    pub(super) fn placement_applies(&self, file: usize, fork: usize) -> bool {
        placement_applies(self.plan, self.structure, file, fork)
    }

    pub(super) fn finish(
        mut self,
        plan: &Plan,
        opts: &VerifyOptions,
        started: Instant,
    ) -> VerifyReport {
        self.findings.extend(plan.findings.iter().cloned());
        let interior = self.interior_zero_findings();
        let interior_count = interior
            .iter()
            .map(|f| f.detail["count"].as_u64().unwrap_or(0))
            .sum();
        self.findings.extend(interior);
        let read_errors = std::mem::take(&mut self.read_errors).into_runs();
        for run in read_errors {
            let finding = self.read_error_finding(&run);
            self.findings.push(finding);
        }
        self.findings
            .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        for (rel, e) in &plan.dir.errors {
            self.tool_errors
                .push(format!("could not read \"{rel}\": {e}"));
        }
        let control = &plan.control;
        let summary = Summary {
            level: opts.level.name().to_string(),
            postgres_version: control.major,
            checksums: control.checksum_state().name(),
            block_size: control.blcksz,
            segment_blocks: control.relseg_size,
            files: plan.dir.files.len() as u64,
            blocks: self.blocks,
            bytes: self.blocks * control.blcksz as u64,
            new_pages: self.new_pages,
            interior_zero_pages: interior_count,
            skipped_blocks: self.skipped_blocks,
            skipped_files: plan.dir.skipped_temp_files as u64,
            corrupt_blocks: corrupt_block_count(&self.findings),
            findings: self.findings.len() as u64,
            keys_not_order_checked: None,
            seconds: started.elapsed().as_secs_f64(),
            error: None,
            ..Summary::default()
        };
        VerifyReport {
            findings: self.findings,
            summary,
            tool_errors: self.tool_errors,
            file_tallies: self.tally.into_files(),
            online_notes: self.online,
        }
    }

    /// One info finding per fork that has all-zero pages before its last used page.
    /// Only main forks count: free-space-map pages are written lazily and upper levels stay
    /// zero until needed, so zero pages inside an FSM fork are normal. A hash index's bucket
    /// pages allocated ahead of use are zero too and are left out.
    pub(super) fn interior_zero_findings(&mut self) -> Vec<Finding> {
        let forks = &self.plan.forks;
        self.new_runs
            .retain(|r| forks[r.fork].fork == crate::format::relfile::ForkNumber::Main);
        self.new_runs.sort_unstable_by_key(|r| (r.fork, r.first));
        self.last_used.settle();
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.new_runs.len() {
            let fork = self.new_runs[i].fork;
            let end = self.new_runs[i..]
                .iter()
                .position(|r| r.fork != fork)
                .map_or(self.new_runs.len(), |n| i + n);
            if let Some(last) = self.last_used.get(fork) {
                let first_new = self.new_runs[i].first;
                let spare = (first_new < last)
                    .then(|| self.plan.read_fork_block(fork, 0))
                    .flatten()
                    .and_then(|meta| crate::format::hash_buckets::unused_bucket_blocks(&meta));
                let interior = InteriorZeros::of(&self.new_runs[i..end], last, spare);
                if interior.count > 0 {
                    out.push(self.interior_finding(fork, &interior));
                }
            }
            i = end;
        }
        out
    }

    pub(super) fn interior_finding(&self, fork: usize, interior: &InteriorZeros) -> Finding {
        let relseg = self.plan.control.relseg_size as u64;
        let f = &self.plan.forks[fork];
        let first = interior.shown[0];
        let seg = (first / relseg) as u32;
        let index = f
            .segments()
            .find(|&i| self.plan.dir.files[i].name.segno == seg)
            .unwrap_or(f.segments().start);
        self.block_finding(
            index,
            first,
            FindingKind::InteriorZeroPages,
            Severity::Info,
            format!("{} all-zero page(s) before the last used page of the fork (a lost write looks like this)", interior.count),
            json!({"count": interior.count, "blocks": interior.shown}),
        )
    }

    /// One `read_error` finding for a run of unreadable blocks of one file.
    pub(super) fn read_error_finding(&self, run: &ReadErrorRun) -> Finding {
        let count = run.last - run.first + 1;
        let what = if count == 1 {
            format!("could not read block {}", run.first)
        } else {
            format!(
                "could not read blocks {} to {} ({count} blocks)",
                run.first, run.last
            )
        };
        self.block_finding(
            run.file,
            run.first,
            FindingKind::ReadError,
            Severity::Error,
            format!("{what}: {}", run.error),
            json!({"first_block": run.first, "last_block": run.last, "count": count, "os_error": run.os_error}),
        )
    }
}

pub(super) fn with_checksum(
    mut detail: serde_json::Value,
    checksum: Option<ChecksumPair>,
) -> serde_json::Value {
    if let Some(c) = checksum {
        detail["expected"] = json!(c.stored);
        detail["calculated"] = json!(c.calculated);
    }
    detail
}

pub(super) fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

impl Visitor for BlockChecker<'_> {
    fn chunk(&mut self, file: usize, offset: u64, data: &mut [u8]) -> Vec<DirtyRange> {
        let bs = self.cfg.blcksz;
        let first = self
            .plan
            .absolute_block(&self.plan.dir.files[file], offset / bs as u64);
        let fork = self.plan.fork_of_file[file];
        // All checksums of the chunk first, two pages at a time (see `raw_block_sums`).
        let mut sums = std::mem::take(&mut self.sums);
        if self.cfg.checksums {
            raw_block_sums(&data[..data.len() / bs * bs], bs, &mut sums);
        }
        let mut last_used = None;
        for (i, page) in data.chunks_exact(bs).enumerate() {
            let blkno = first + i as u64;
            if self.check_block(file, fork, blkno, page, sums.get(i).copied()) {
                last_used = Some(blkno);
            }
        }
        self.sums = sums;
        if let Some(blkno) = last_used {
            self.note_used(fork, blkno);
        }
        Vec::new()
    }

    fn read_failed(&mut self, file: usize, offset: u64, err: &io::Error) {
        self.skipped_blocks += 1;
        let f = &self.plan.dir.files[file];
        let blkno = self.plan.absolute_block(f, offset / self.cfg.blcksz as u64);
        self.read_errors.push(file, blkno, err);
        if let Some(facts) = self.facts.as_mut() {
            facts.page(file, blkno, &[], false, &[]);
        }
    }

    fn open_failed(&mut self, file: usize, err: &io::Error) {
        let f = &self.plan.dir.files[file];
        if self.online.is_some() && err.kind() == io::ErrorKind::NotFound {
            // Dropped or truncated away while the server runs: nothing left to check.
            return;
        }
        self.skipped_blocks += f.size / self.cfg.blcksz as u64;
        if matches!(err.kind(), io::ErrorKind::PermissionDenied) {
            self.tool_errors
                .push(format!("could not open file \"{}\": {err}", f.rel_path()));
            return;
        }
        let mut finding = Finding::for_file(
            FindingKind::ReadError,
            Severity::Error,
            &f.rel_path(),
            format!("could not open file: {err}"),
        )
        .with_detail(json!({"os_error": err.raw_os_error()}))
        .at_segment(f.name.segno);
        finding.fork = Some(f.name.fork);
        attach_names(&mut finding, f.location.db_oid(), f.name.relfilenode);
        self.findings.push(finding);
    }

    fn short_file(&mut self, file: usize, offset: u64) {
        let f = &self.plan.dir.files[file];
        if self.online.is_some() {
            // TRUNCATE, VACUUM or DROP shortened it while the server runs.
            return;
        }
        self.tool_errors.push(format!(
            "file \"{}\" shrank to {offset} bytes during the scan",
            f.rel_path()
        ));
    }

    fn write_failed(&mut self, _file: usize, _offset: u64, _err: &io::Error) {}

    /// Sorts this worker's facts in its own thread, not in the one that absorbs the workers
    /// one after another.
    fn done(&mut self) {
        if let Some(facts) = self.facts.as_mut() {
            facts.seal();
        }
    }
}
