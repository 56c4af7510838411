//! `verify`: plans the scan of a data directory (control file, relation files, segment
//! structure), runs the block checks in parallel and merges the findings into one report.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use pgcheckdb_scan::open::open_regular;
use pgcheckdb_scan::{plan_units, DirtyRange, FileList, Progress, ScanFile, ScanOptions, Visitor};

use crate::btree_order::plan::BtreeOrders;
use crate::btree_order::NotOrderChecked;
use crate::catalog::xact::CommitLog;
use crate::catalog::Catalog;
use crate::checksum::raw_block_sums;
use crate::control::ControlFile;
use crate::datadir::{
    check_segments, group_forks, list_relation_files, DataDirectory, ForkFiles, RelationFile,
};
use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::physical::{
    check_page_with_sum, ChecksumPair, MisplacedBasis, MisplacedEvidence, PageCheckConfig,
    PageProblem, PageVerdict,
};
use crate::placement::misplaced_by_ctid;
use crate::relfile::ForkNumber;
use crate::standard::{
    check_page_structure, ClusterFacts, FileStructure, Inputs, PageFormat, Scratch,
    StructureProblem,
};

/// Check level (DESIGN.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Physical,
    Standard,
    Extended,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Physical => "physical",
            Level::Standard => "standard",
            Level::Extended => "extended",
        }
    }
}

/// How to run a verification.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    pub jobs: usize,
    pub level: Level,
    pub max_bytes_per_sec: Option<u64>,
    /// Largest work unit (a block range of one segment file), in bytes. Units are made smaller
    /// on small clusters so that every worker gets at least [`MIN_UNITS_PER_JOB`] of them.
    pub unit_bytes: u64,
    /// Bytes per read.
    pub chunk_bytes: usize,
    /// Count tuples per relation for the verbose summary ([`crate::relstats`]).
    pub count_tuples: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            jobs: 1,
            level: Level::Physical,
            max_bytes_per_sec: None,
            // 32 MiB rather than 8: with cold caches each worker's reads stay sequential for
            // longer (2.4 GB cluster, -j 2: 3-9 % less time; warm: no change), see
            // docs/PERFORMANCE.md.
            unit_bytes: 32 << 20,
            chunk_bytes: 256 << 10,
            count_tuples: false,
        }
    }
}

/// Fewest work units per worker: the last units of a scan then leave at most a small fraction
/// of the work to a single worker.
pub const MIN_UNITS_PER_JOB: u64 = 16;

/// The work unit size for `total_bytes` scanned by `jobs` workers: `max_unit`, made smaller on
/// small clusters (never below one block).
fn unit_bytes_for(max_unit: u64, total_bytes: u64, jobs: usize, block_size: u64) -> u64 {
    let balanced = total_bytes / (MIN_UNITS_PER_JOB * jobs.max(1) as u64);
    max_unit.min(balanced).max(block_size)
}

/// The run's totals: the last line of the JSON output.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub level: String,
    pub postgres_version: Option<u32>,
    pub checksums: String,
    pub block_size: u32,
    pub segment_blocks: u32,
    pub files: u64,
    pub blocks: u64,
    pub bytes: u64,
    pub new_pages: u64,
    pub interior_zero_pages: u64,
    pub skipped_blocks: u64,
    pub skipped_files: u64,
    pub corrupt_blocks: u64,
    pub findings: u64,
    /// B-tree indexes whose keys could not be order-checked (standard level and above): no
    /// comparator for a key column's type, operator class or collation. Absent at the
    /// physical level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_not_order_checked: Option<u64>,
    pub seconds: f64,
    /// When the run started and finished (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Why the run is incomplete or did not happen (exit 1 or interrupted): the first tool
    /// error, a refusal, or the signal that stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The extended level's facts and merge (only at that level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extended: Option<crate::extended::ExtendedSummary>,
}

/// Everything a verification produced.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Sorted by file, block and kind: the same for any thread count.
    pub findings: Vec<Finding>,
    pub summary: Summary,
    /// Problems on pgcheckdb's side (permission denied, unlistable directory): the run is incomplete.
    pub tool_errors: Vec<String>,
    /// Pages and tuples per file of the plan ([`crate::relstats`]).
    pub file_tallies: Vec<crate::relstats::FileTally>,
}

impl VerifyReport {
    /// Findings of error severity.
    pub fn error_count(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }
}

/// The scan plan: which files, how they group into forks, what was found before reading.
pub struct Plan {
    pub datadir: PathBuf,
    pub control: ControlFile,
    pub dir: DataDirectory,
    pub forks: Vec<ForkFiles>,
    /// For each file, the index of its fork in `forks`.
    pub fork_of_file: Vec<usize>,
    /// For each fork, its total number of whole blocks.
    pub fork_blocks: Vec<u64>,
    pub findings: Vec<Finding>,
}

impl Plan {
    /// Lists the data directory and checks file sizes and the segment structure.
    pub fn build(datadir: &Path, control: ControlFile) -> Plan {
        Plan::build_scoped(datadir, control, |_| true)
    }

    /// The same for only the relation files `keep` accepts (a scoped run, [`crate::scope`]).
    pub fn build_scoped(
        datadir: &Path,
        control: ControlFile,
        keep: impl Fn(&RelationFile) -> bool,
    ) -> Plan {
        let listing = Plan::list(datadir, &control);
        Plan::from_listing(datadir, control, listing, keep)
    }

    /// Lists the relation files of the data directory: the first step of a plan, which can
    /// run while the catalogs are read.
    pub fn list(datadir: &Path, control: &ControlFile) -> DataDirectory {
        let version_dir = control.tablespace_version_directory();
        list_relation_files(datadir, version_dir.as_deref())
    }

    /// The plan of a listing ([`Plan::list`]) for the relation files `keep` accepts.
    pub fn from_listing(
        datadir: &Path,
        control: ControlFile,
        mut dir: DataDirectory,
        keep: impl Fn(&RelationFile) -> bool,
    ) -> Plan {
        dir.remove_impossible_segments(control.relseg_size as u64);
        dir.files.retain(|f| keep(f));
        let forks = group_forks(&dir.files);
        let bs = control.blcksz as u64;
        let mut fork_of_file = vec![0; dir.files.len()];
        let mut fork_blocks = vec![0u64; forks.len()];
        let mut findings = dir.findings.clone();
        for (fi, fork) in forks.iter().enumerate() {
            for i in fork.segments.clone() {
                fork_of_file[i] = fi;
                fork_blocks[fi] += dir.files[i].size / bs;
            }
            for mut f in check_segments(fork, &dir.files, bs, control.relseg_size as u64) {
                attach_names(&mut f, fork.location.db_oid(), fork.relfilenode);
                findings.push(f);
            }
        }
        for file in &dir.files {
            if file.size % bs != 0 {
                findings.push(partial_block_finding(datadir, file, &control));
            }
        }
        Plan {
            datadir: datadir.to_path_buf(),
            control,
            dir,
            forks,
            fork_of_file,
            fork_blocks,
            findings,
        }
    }

    /// The files and lengths (whole blocks only) to scan, each with its path. The scan of
    /// `verify` takes the plan itself ([`FileList`]) and builds no such list.
    pub fn scan_files(&self) -> Vec<ScanFile> {
        (0..self.dir.files.len())
            .map(|i| ScanFile {
                path: self.dir.files[i].path(),
                len: self.scan_len(i),
            })
            .collect()
    }

    /// Bytes the scan reads: the whole blocks of every file.
    pub fn scan_bytes(&self) -> u64 {
        (0..self.dir.files.len()).map(|i| self.scan_len(i)).sum()
    }

    /// Absolute block number of block `index` of `file`.
    pub fn absolute_block(&self, file: &RelationFile, index: u64) -> u64 {
        file.name.segno as u64 * self.control.relseg_size as u64 + index
    }

    /// Reads one absolute block of a fork, if it exists.
    pub(crate) fn read_fork_block(&self, fork: usize, blkno: u64) -> Option<Vec<u8>> {
        let relseg = self.control.relseg_size as u64;
        let bs = self.control.blcksz as u64;
        let segno = u32::try_from(blkno / relseg).ok()?;
        let i = self.forks[fork]
            .segments
            .clone()
            .find(|&i| self.dir.files[i].name.segno == segno)?;
        let mut buf = vec![0u8; bs as usize];
        let file = open_regular(&self.dir.files[i].path(), false).ok()?;
        file.read_exact_at(&mut buf, (blkno % relseg) * bs).ok()?;
        Some(buf)
    }
}

impl FileList for Plan {
    fn file_count(&self) -> usize {
        self.dir.files.len()
    }

    /// The whole blocks of the file.
    fn scan_len(&self, file: usize) -> u64 {
        let bs = self.control.blcksz as u64;
        self.dir.files[file].size / bs * bs
    }

    fn path_into(&self, file: usize, path: &mut PathBuf) {
        self.dir.files[file].path_into(path);
    }
}

fn attach_names(f: &mut Finding, db_oid: u32, relfilenode: u32) {
    f.database = Some(DatabaseRef {
        oid: Some(db_oid),
        name: None,
    });
    f.relation = Some(RelationRef {
        filenode: Some(relfilenode),
        ..Default::default()
    });
}

fn partial_block_finding(datadir: &Path, file: &RelationFile, control: &ControlFile) -> Finding {
    let bs = control.blcksz as u64;
    let whole = file.size / bs;
    let remainder = file.size % bs;
    let tail_looks_like_header = read_tail_header(datadir, file, whole * bs, remainder);
    let block = file.name.segno as u64 * control.relseg_size as u64 + whole;
    let mut f = Finding::for_file(
        FindingKind::PartialBlock,
        Severity::Error,
        &file.rel_path(),
        format!(
            "file size {} is not a multiple of the block size {bs}: {remainder} trailing bytes after block {block} are ignored by the server",
            file.size
        ),
    )
    .with_detail(json!({"size": file.size, "remainder": remainder, "tail_looks_like_page_header": tail_looks_like_header}))
    .at_segment(file.name.segno);
    f.fork = Some(file.name.fork);
    f.block = Some(block);
    attach_names(&mut f, file.location.db_oid(), file.name.relfilenode);
    f
}

/// Whether the trailing fragment starts with something shaped like a page header.
fn read_tail_header(_datadir: &Path, file: &RelationFile, offset: u64, len: u64) -> bool {
    if len < crate::page::SIZE_OF_PAGE_HEADER_DATA as u64 {
        return false;
    }
    let mut buf = [0u8; crate::page::SIZE_OF_PAGE_HEADER_DATA];
    let Ok(f) = open_regular(&file.path(), false) else {
        return false;
    };
    if f.read_exact_at(&mut buf, offset).is_err() {
        return false;
    }
    crate::page::PageHeader::parse(&buf)
        .is_some_and(|h| !h.is_new() && h.pd_lower <= h.pd_upper && h.pd_upper <= h.pd_special)
}

/// Whether the `t_ctid` placement evidence applies to `file` (of fork `fork`): main forks of
/// heap relations, or of relations the catalog does not describe (the page's shape decides).
pub(crate) fn placement_applies(
    plan: &Plan,
    structure: Option<&Structure<'_>>,
    file: usize,
    fork: usize,
) -> bool {
    if plan.forks[fork].fork != crate::relfile::ForkNumber::Main {
        return false;
    }
    let format = structure
        .and_then(|s| s.files.get(file))
        .and_then(Option::as_ref)
        .map(|fs| &fs.format);
    matches!(format, None | Some(PageFormat::Heap(_)))
}

/// Inputs of the standard level: what each file must hold, and the cluster facts.
pub struct Structure<'c> {
    /// Per file of the plan: its page format, or `None` when it has no structure checks.
    pub files: Vec<Option<FileStructure>>,
    pub facts: ClusterFacts,
    pub clog: &'c CommitLog,
    /// B-tree indexes whose keys are not order-checked: `(schema.name, database oid, why)`.
    pub not_order_checked: Vec<(String, u32, NotOrderChecked)>,
    /// The extended level's plan: its facts are emitted during the scan and merged after it.
    pub extended: Option<&'c crate::extended::ExtendedPlan>,
}

impl<'c> Structure<'c> {
    /// Derives every file's page format from the catalog.
    pub fn from_catalog(plan: &Plan, catalog: &'c Catalog) -> Structure<'c> {
        let control = &plan.control;
        let mut orders = BtreeOrders::new(plan, catalog);
        let files = plan
            .dir
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let rel = catalog.relation_of(f)?;
                let format = PageFormat::for_relation(rel, f.name.fork)?;
                let btree_order = match format {
                    PageFormat::Btree if f.name.fork == ForkNumber::Main => {
                        orders.of(plan.fork_of_file[i], f.location.db_oid(), rel)
                    }
                    _ => None,
                };
                Some(FileStructure {
                    format,
                    fork_blocks: plan.fork_blocks[plan.fork_of_file[i]],
                    btree_order,
                })
            })
            .collect();
        let facts = crate::standard::bounds::cluster_facts(control, &plan.datadir);
        Structure {
            files,
            facts,
            clog: &catalog.clog,
            not_order_checked: orders.skipped,
            extended: None,
        }
    }
}

/// Runs the physical check of every block in the plan, and the structure checks of the
/// standard level when `structure` is given.
pub fn run(
    plan: &Plan,
    opts: &VerifyOptions,
    progress: &Progress,
    structure: Option<&Structure<'_>>,
) -> VerifyReport {
    let started = Instant::now();
    let control = &plan.control;
    let cfg = PageCheckConfig {
        blcksz: control.blcksz as usize,
        max_align: control.max_align as usize,
        checksums: control.data_checksum_version == crate::control::ChecksumState::ON_VERSION,
    };
    let total_bytes = plan.scan_bytes();
    let unit_bytes = unit_bytes_for(opts.unit_bytes, total_bytes, opts.jobs, cfg.blcksz as u64);
    let units = plan_units(plan, unit_bytes, cfg.blcksz as u64);
    let scan_opts = ScanOptions {
        jobs: opts.jobs,
        chunk_bytes: (opts.chunk_bytes / cfg.blcksz).max(1) * cfg.blcksz,
        block_size: cfg.blcksz,
        write: false,
        max_bytes_per_sec: opts.max_bytes_per_sec,
    };
    let workers = pgcheckdb_scan::run(
        plan,
        &units,
        &scan_opts,
        || BlockChecker::new(plan, cfg, structure, opts.count_tuples),
        progress,
    );
    let mut merged = BlockChecker::new(plan, cfg, structure, opts.count_tuples);
    for w in workers {
        merged.absorb(w);
    }
    let facts = merged.facts.take();
    let mut report = merged.finish(plan, opts, started);
    report.summary.keys_not_order_checked = structure.map(|s| s.not_order_checked.len() as u64);
    let extended = structure.and_then(|s| s.extended);
    if let (Some(facts), Some(ext)) = (facts, extended) {
        // An interrupted scan left facts out: cross-page checks would blame healthy pages.
        if !progress.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            crate::extended::merge_into(plan, ext, facts.finish(), &mut report);
        }
    }
    report
}

/// Per-worker state of the physical scan.
struct BlockChecker<'a> {
    plan: &'a Plan,
    cfg: PageCheckConfig,
    structure: Option<&'a Structure<'a>>,
    /// Scratch list of structure problems of the current page.
    problems: Vec<StructureProblem>,
    /// Buffers the structure checks reuse from page to page.
    scratch: Scratch,
    findings: Vec<Finding>,
    tool_errors: Vec<String>,
    blocks: u64,
    new_pages: u64,
    skipped_blocks: u64,
    /// Runs of new pages: one entry per run of consecutive all-zero blocks, so that a huge
    /// sparse file costs one entry, not one per page.
    new_runs: Vec<BlockRun>,
    /// Unreadable blocks, as runs.
    read_errors: ReadErrorRuns,
    /// Highest non-new block per fork.
    last_used: LastUsed,
    /// Raw block sums of the current chunk, reused across chunks.
    sums: Vec<u32>,
    /// Pages and tuples per file.
    tally: crate::relstats::Tally,
    /// The extended level's fact writer.
    facts: Option<crate::extended::emit::Emitter<'a>>,
}

impl<'a> BlockChecker<'a> {
    fn new(
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
            tally: crate::relstats::Tally::new(plan.dir.files.len(), count_tuples),
            facts: structure.and_then(|s| {
                s.extended
                    .map(|e| crate::extended::emit::Emitter::new(e, s.clog))
            }),
        }
    }

    fn absorb(&mut self, other: BlockChecker<'a>) {
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
    }

    fn block_finding(
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
    fn check_block(
        &mut self,
        file: usize,
        fork: usize,
        blkno: u64,
        page: &[u8],
        raw: Option<u32>,
    ) -> bool {
        self.blocks += 1;
        let raw_sum = || raw.unwrap_or_else(|| crate::checksum::raw_block_sum(page));
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
                    facts.page(file, blkno, page, sound);
                }
                true
            }
            PageVerdict::New => {
                self.new_pages += 1;
                self.note_new(fork, blkno);
                false
            }
            PageVerdict::Problem(problem) => {
                let finding = self.problem_finding(file, fork, blkno, page, problem);
                self.findings.push(finding);
                if let Some(facts) = self.facts.as_mut() {
                    facts.page(file, blkno, page, false);
                }
                true
            }
        }
    }

    /// The standard level's checks of a physically valid page.
    fn check_structure(&mut self, file: usize, blkno: u64, page: &[u8]) {
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
    fn note_new(&mut self, fork: usize, blkno: u64) {
        match self.new_runs.last_mut() {
            Some(run) if run.fork == fork && run.last + 1 == blkno => run.last = blkno,
            _ => self.new_runs.push(BlockRun {
                fork,
                first: blkno,
                last: blkno,
            }),
        }
    }

    fn note_used(&mut self, fork: usize, blkno: u64) {
        self.last_used.note(fork, blkno);
    }

    fn problem_finding(
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
                json!({"zero_prefix": zero_prefix, "sector_aligned": zero_prefix > 0 && zero_prefix % crate::page::SECTOR_SIZE == 0}),
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

    fn mismatch_finding(
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
    /// block corroborates it ([`crate::placement`]).
    fn placement_finding(
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
    fn placement_applies(&self, file: usize, fork: usize) -> bool {
        placement_applies(self.plan, self.structure, file, fork)
    }

    fn finish(mut self, plan: &Plan, opts: &VerifyOptions, started: Instant) -> VerifyReport {
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
        let mut corrupt: Vec<(&str, u64)> = self
            .findings
            .iter()
            .filter(|f| {
                f.severity == Severity::Error
                    && f.block.is_some()
                    && f.kind != FindingKind::PartialBlock
            })
            .map(|f| (f.file.as_str(), f.block.unwrap_or(0)))
            .collect();
        corrupt.dedup();
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
            corrupt_blocks: corrupt.len() as u64,
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
        }
    }

    /// One info finding per fork that has all-zero pages before its last used page.
    /// Only main forks count: free-space-map pages are written lazily and upper levels stay
    /// zero until needed, so zero pages inside an FSM fork are normal. A hash index's bucket
    /// pages allocated ahead of use are zero too and are left out.
    fn interior_zero_findings(&mut self) -> Vec<Finding> {
        let forks = &self.plan.forks;
        self.new_runs
            .retain(|r| forks[r.fork].fork == crate::relfile::ForkNumber::Main);
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
                    .and_then(|meta| crate::hash_buckets::unused_bucket_blocks(&meta));
                let interior = InteriorZeros::of(&self.new_runs[i..end], last, spare);
                if interior.count > 0 {
                    out.push(self.interior_finding(fork, &interior));
                }
            }
            i = end;
        }
        out
    }

    fn interior_finding(&self, fork: usize, interior: &InteriorZeros) -> Finding {
        let relseg = self.plan.control.relseg_size as u64;
        let f = &self.plan.forks[fork];
        let first = interior.shown[0];
        let seg = (first / relseg) as u32;
        let index = f
            .segments
            .clone()
            .find(|&i| self.plan.dir.files[i].name.segno == seg)
            .unwrap_or(f.segments.start);
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
    fn read_error_finding(&self, run: &ReadErrorRun) -> Finding {
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

/// The highest used (not new) block of each fork a worker scanned, as `(fork, block)` pairs in
/// scan order: one pair per stretch of one fork, no hash table per worker. After
/// [`LastUsed::settle`] they are sorted with one pair per fork.
#[derive(Debug, Default)]
struct LastUsed {
    entries: Vec<(usize, u64)>,
}

impl LastUsed {
    fn note(&mut self, fork: usize, blkno: u64) {
        match self.entries.last_mut() {
            Some(e) if e.0 == fork => e.1 = e.1.max(blkno),
            _ => self.entries.push((fork, blkno)),
        }
    }

    fn absorb(&mut self, other: LastUsed) {
        self.entries.extend(other.entries);
    }

    /// Sorts by fork and keeps the highest block of each.
    fn settle(&mut self) {
        self.entries.sort_unstable();
        self.entries.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.max(later.1);
            }
            same
        });
    }

    /// The highest used block of `fork` (after [`Self::settle`]).
    fn get(&self, fork: usize) -> Option<u64> {
        self.entries
            .binary_search_by_key(&fork, |e| e.0)
            .ok()
            .map(|i| self.entries[i].1)
    }
}

/// A run of consecutive absolute blocks `first..=last` of one fork.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockRun {
    fork: usize,
    first: u64,
    last: u64,
}

/// The interior all-zero pages of one fork: how many, and the first few block numbers.
struct InteriorZeros {
    count: u64,
    shown: Vec<u64>,
}

impl InteriorZeros {
    /// Block numbers listed in a finding's detail.
    const SHOWN: usize = 20;

    /// The new pages of `runs` (one fork, sorted) before the last used block `last_used`,
    /// leaving out the blocks of `spare` (a hash index's bucket pages allocated ahead of use).
    fn of(
        runs: &[BlockRun],
        last_used: u64,
        spare: Option<std::ops::RangeInclusive<u64>>,
    ) -> InteriorZeros {
        let mut out = InteriorZeros {
            count: 0,
            shown: Vec::new(),
        };
        for r in runs.iter().filter(|r| r.first < last_used) {
            let last = r.last.min(last_used - 1);
            for (first, last) in without(r.first, last, spare.as_ref()) {
                out.count += last - first + 1;
                let room = Self::SHOWN - out.shown.len();
                out.shown.extend((first..=last).take(room));
            }
        }
        out
    }
}

/// The parts of `first..=last` outside `spare`: none, one or two ranges.
fn without(
    first: u64,
    last: u64,
    spare: Option<&std::ops::RangeInclusive<u64>>,
) -> Vec<(u64, u64)> {
    let Some(spare) = spare.filter(|s| !s.is_empty()) else {
        return vec![(first, last)];
    };
    let (s0, s1) = (*spare.start(), *spare.end());
    if s1 < first || s0 > last {
        return vec![(first, last)];
    }
    let mut parts = Vec::new();
    if first < s0 {
        parts.push((first, s0 - 1));
    }
    if s1 < last {
        parts.push((s1 + 1, last));
    }
    parts
}

/// A run of unreadable blocks `first..=last` of one file that failed with the same error.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReadErrorRun {
    file: usize,
    first: u64,
    last: u64,
    os_error: Option<i32>,
    error: String,
}

/// Unreadable blocks, gathered into runs: a failing disk area gives one finding per run,
/// not one per block.
#[derive(Debug, Default)]
struct ReadErrorRuns {
    runs: Vec<ReadErrorRun>,
}

impl ReadErrorRuns {
    /// Adds one unreadable block; blocks arrive in order within a work unit.
    fn push(&mut self, file: usize, blkno: u64, err: &io::Error) {
        let os_error = err.raw_os_error();
        match self.runs.last_mut() {
            Some(r) if r.file == file && r.last + 1 == blkno && r.os_error == os_error => {
                r.last = blkno
            }
            _ => self.runs.push(ReadErrorRun {
                file,
                first: blkno,
                last: blkno,
                os_error,
                error: err.to_string(),
            }),
        }
    }

    fn absorb(&mut self, other: ReadErrorRuns) {
        self.runs.extend(other.runs);
    }

    /// The runs sorted by file and block, adjacent runs of different workers joined.
    fn into_runs(mut self) -> Vec<ReadErrorRun> {
        self.runs.sort_by_key(|r| (r.file, r.first));
        let mut out: Vec<ReadErrorRun> = Vec::with_capacity(self.runs.len());
        for r in self.runs {
            match out.last_mut() {
                Some(prev)
                    if prev.file == r.file
                        && prev.last + 1 == r.first
                        && prev.os_error == r.os_error =>
                {
                    prev.last = r.last
                }
                _ => out.push(r),
            }
        }
        out
    }
}

fn with_checksum(
    mut detail: serde_json::Value,
    checksum: Option<ChecksumPair>,
) -> serde_json::Value {
    if let Some(c) = checksum {
        detail["expected"] = json!(c.stored);
        detail["calculated"] = json!(c.calculated);
    }
    detail
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
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
            facts.page(file, blkno, &[], false);
        }
    }

    fn open_failed(&mut self, file: usize, err: &io::Error) {
        let f = &self.plan.dir.files[file];
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
        self.tool_errors.push(format!(
            "file \"{}\" shrank to {offset} bytes during the scan",
            f.rel_path()
        ));
    }

    fn write_failed(&mut self, _file: usize, _offset: u64, _err: &io::Error) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_size_is_capped_and_shrinks_on_small_clusters() {
        let mib = 1 << 20;
        // 2.4 GB on 2 workers: the cap.
        assert_eq!(unit_bytes_for(32 * mib, 2_400_000_000, 2, 8192), 32 * mib);
        // 64 MiB on 2 workers: 32 units of 2 MiB.
        assert_eq!(unit_bytes_for(32 * mib, 64 * mib, 2, 8192), 2 * mib);
        // Tiny cluster: never below one block.
        assert_eq!(unit_bytes_for(32 * mib, 8192, 4, 8192), 8192);
        assert_eq!(unit_bytes_for(32 * mib, 0, 0, 8192), 8192);
    }

    fn eio() -> io::Error {
        io::Error::from_raw_os_error(libc::EIO)
    }

    #[test]
    fn unreadable_blocks_become_runs_across_workers() {
        // Two workers each saw half of a failing area of file 0 (blocks 100..=299), one also a
        // lone bad block 400 and an EACCES block right after the area.
        let mut a = ReadErrorRuns::default();
        let mut b = ReadErrorRuns::default();
        for blkno in 100..200 {
            a.push(0, blkno, &eio());
        }
        a.push(0, 400, &eio());
        for blkno in 200..300 {
            b.push(0, blkno, &eio());
        }
        b.push(0, 300, &io::Error::from_raw_os_error(libc::EACCES));
        b.push(1, 301, &eio());
        b.absorb(a);
        let runs = b.into_runs();
        let shape: Vec<(usize, u64, u64, Option<i32>)> = runs
            .iter()
            .map(|r| (r.file, r.first, r.last, r.os_error))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, 100, 299, Some(libc::EIO)),
                (0, 300, 300, Some(libc::EACCES)),
                (0, 400, 400, Some(libc::EIO)),
                (1, 301, 301, Some(libc::EIO)),
            ]
        );
    }

    #[test]
    fn last_used_blocks_of_all_workers_settle_to_the_highest_per_fork() {
        let mut a = LastUsed::default();
        for (fork, blk) in [(3, 5), (3, 9), (7, 1), (3, 2)] {
            a.note(fork, blk);
        }
        let mut b = LastUsed::default();
        b.note(7, 4);
        b.note(1, 0);
        a.absorb(b);
        a.settle();
        assert_eq!(a.entries, vec![(1, 0), (3, 9), (7, 4)]);
        assert_eq!(a.get(3), Some(9));
        assert_eq!(a.get(2), None);
    }

    #[test]
    fn interior_zero_runs_are_clipped_and_counted_without_a_list() {
        let runs = [
            BlockRun {
                fork: 0,
                first: 2,
                last: 4,
            },
            BlockRun {
                fork: 0,
                first: 10,
                last: 1 << 40,
            },
        ];
        let z = InteriorZeros::of(&runs, 1 << 30, None);
        assert_eq!(z.count, 3 + ((1 << 30) - 10));
        assert_eq!(z.shown.len(), InteriorZeros::SHOWN);
        assert_eq!(&z.shown[..4], &[2, 3, 4, 10]);
        assert_eq!(InteriorZeros::of(&runs, 2, None).count, 0);
    }

    #[test]
    fn spare_hash_bucket_blocks_are_cut_out_of_interior_runs() {
        assert_eq!(without(5, 9, None), vec![(5, 9)]);
        assert_eq!(without(5, 9, Some(&(7..=7))), vec![(5, 6), (8, 9)]);
        assert_eq!(without(5, 9, Some(&(1..=20))), vec![]);
        assert_eq!(without(5, 9, Some(&(9..=12))), vec![(5, 8)]);
        assert_eq!(without(5, 9, Some(&(10..=12))), vec![(5, 9)]);
    }
}
