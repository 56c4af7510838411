//! `verify`: plans the scan of a data directory (control file, relation files, segment
//! structure), runs the block checks in parallel and merges the findings into one report.

mod checker;
mod plan;
mod runs;

use checker::BlockChecker;
pub use plan::Plan;

use std::time::Instant;

use serde::Serialize;

use pgcheckdb_scan::{plan_units, Progress, ScanOptions};

use crate::btree_order::plan::BtreeOrders;
use crate::btree_order::NotOrderChecked;
use crate::catalog::xact::CommitLog;
use crate::catalog::Catalog;
use crate::finding::{Finding, Severity};
use crate::physical::PageCheckConfig;
use crate::relfile::ForkNumber;
use crate::standard::{ClusterFacts, FileStructure, PageFormat};

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
    /// `verify --online`: the server runs ([`crate::online`]); pages with `pd_lsn` above
    /// `lsn_floor` are noted.
    pub online: Option<crate::online::ScanOptions>,
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
            online: None,
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
    /// Relations with storage in scope that got the physical checks only, because pgcheckdb
    /// knows no page format for their access method (standard level and above). Absent at
    /// the physical level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relations_not_structure_checked: Option<u64>,
    /// Those relations, each with the reason; absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_structure_checked: Option<Vec<NotStructureChecked>>,
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
    /// A base backup: its start, the rule for pages replay rewrites and the manifest check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<crate::backup::BackupSummary>,
    /// `verify --online`: `online: true`, the LSNs used and the re-read counts.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub online: Option<crate::online::OnlineSummary>,
}

/// A relation with storage that only the physical checks covered: pgcheckdb knows no page
/// format for its access method (an index of `bloom`, `rum` or any other extension, a table
/// of another table access method).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotStructureChecked {
    /// Database name (its oid when `pg_database` did not name it).
    pub database: String,
    /// `schema.name`.
    pub relation: String,
    /// `table`, `index`, `toast_table`, `materialized_view`.
    pub kind: String,
    /// The access method's name, when `pg_am` gave one.
    pub access_method: Option<String>,
    pub reason: String,
}

impl NotStructureChecked {
    /// `rel` (of database `db_oid`), when it has storage but no page format pgcheckdb checks.
    fn of(catalog: &Catalog, db_oid: u32, rel: &crate::catalog::RelationInfo) -> Option<Self> {
        if !rel.kind.has_storage() || PageFormat::for_relation(rel, ForkNumber::Main).is_some() {
            return None;
        }
        let am = catalog.access_method(rel).map(str::to_string);
        let what = match rel.kind {
            crate::catalog::RelKind::Index => "index access method",
            _ => "table access method",
        };
        let reason = match &am {
            Some(name) => format!("{what} \"{name}\" unknown to pgcheckdb"),
            None => format!("{what} with oid {} unknown to pgcheckdb", rel.relam),
        };
        let database = match catalog.databases.get(&db_oid) {
            Some(db) => db.name.clone(),
            None if db_oid == 0 => "(shared catalogs)".into(),
            None => format!("database {db_oid}"),
        };
        Some(NotStructureChecked {
            database,
            relation: rel.name.to_string(),
            kind: rel.kind.name(),
            access_method: am,
            reason,
        })
    }
}

/// The relations of the plan's main forks that only the physical checks cover, sorted by
/// database and name.
fn not_structure_checked(plan: &Plan, catalog: &Catalog) -> Vec<NotStructureChecked> {
    let mut out: Vec<NotStructureChecked> = plan
        .forks
        .iter()
        .filter(|fork| fork.fork == ForkNumber::Main)
        .filter_map(|fork| {
            let f = plan.dir.files.get(fork.segments().start)?;
            let rel = catalog.relation_of(f)?;
            NotStructureChecked::of(catalog, f.location.db_oid(), rel)
        })
        .collect();
    out.sort_by(|a, b| (&a.database, &a.relation).cmp(&(&b.database, &b.relation)));
    out
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
    /// `verify --online`: what the scan noted for the re-reads ([`crate::online`]).
    pub online_notes: Option<crate::online::ScanNotes>,
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
    /// Relations in scope with storage that only the physical checks cover.
    pub not_structure_checked: Vec<NotStructureChecked>,
}

impl<'c> Structure<'c> {
    /// Derives every file's page format from the catalog. A large plan is cut, at fork
    /// boundaries, into parts that threads take one after another (80,000 files: 50 ms on one
    /// core, before the scan can start; B-tree indexes cost more than the rest, so the parts
    /// are many and small for the threads to end together).
    pub fn from_catalog(plan: &Plan, catalog: &'c Catalog) -> Structure<'c> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(plan.forks.len() / PARALLEL_STRUCTURE_MIN_FORKS + 1);
        let (files, not_order_checked) = match threads {
            1 => file_structures(plan, catalog, 0..plan.forks.len()),
            _ => file_structures_in_parallel(plan, catalog, threads),
        };
        let facts = crate::standard::bounds::cluster_facts(&plan.control, &plan.datadir);
        Structure {
            files,
            facts,
            clog: &catalog.clog,
            not_order_checked,
            extended: None,
            not_structure_checked: not_structure_checked(plan, catalog),
        }
    }
}

/// [`file_structures`] of every fork, on `threads` threads.
fn file_structures_in_parallel(plan: &Plan, catalog: &Catalog, threads: usize) -> StructurePart {
    let ranges: Vec<_> = fork_ranges(plan.forks.len(), threads * PARTS_PER_THREAD).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut parts: Vec<(usize, StructurePart)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(forks) = ranges.get(i) else {
                            return done;
                        };
                        done.push((i, file_structures(plan, catalog, forks.clone())));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    parts.sort_unstable_by_key(|(i, _)| *i);
    let mut files = Vec::with_capacity(plan.dir.files.len());
    let mut not_order_checked = Vec::new();
    for (_, (part_files, skipped)) in parts {
        files.extend(part_files);
        not_order_checked.extend(skipped);
    }
    (files, not_order_checked)
}

/// A B-tree index whose keys are not order-checked: `(schema.name, database oid, why)`.
type NotOrderCheckedIndex = (String, u32, NotOrderChecked);

/// Forks below which one thread derives the structure of every file.
const PARALLEL_STRUCTURE_MIN_FORKS: usize = 8192;

/// Parts of the plan per thread deriving the structure.
const PARTS_PER_THREAD: usize = 16;

/// The structure of the files of some forks, and the indexes among them not order-checked.
type StructurePart = (Vec<Option<FileStructure>>, Vec<NotOrderCheckedIndex>);

/// `forks` fork indexes cut into `parts` consecutive ranges, in order.
fn fork_ranges(forks: usize, parts: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let parts = parts.max(1);
    (0..parts).map(move |p| forks * p / parts..forks * (p + 1) / parts)
}

/// The structure of every file of the forks `forks`, in file order, and the B-tree indexes
/// among them whose keys are not order-checked.
fn file_structures(plan: &Plan, catalog: &Catalog, forks: std::ops::Range<usize>) -> StructurePart {
    let mut orders = BtreeOrders::new(plan, catalog);
    let files = plan.forks[forks]
        .iter()
        .flat_map(|fork| fork.segments())
        .map(|i| {
            let f = &plan.dir.files[i];
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
    (files, orders.skipped)
}

/// The page checks of `control`'s cluster.
fn page_config(control: &crate::control::ControlFile) -> PageCheckConfig {
    PageCheckConfig {
        blcksz: control.blcksz as usize,
        max_align: control.max_align as usize,
        checksums: control.data_checksum_version == crate::control::ChecksumState::ON_VERSION,
    }
}

/// Checks one page of `file` alone, as the scan does (physical, placement and structure
/// checks): the re-reads of `verify --online` ([`crate::online::recheck`]).
pub(crate) fn check_one_page(
    plan: &Plan,
    structure: Option<&Structure<'_>>,
    file: usize,
    blkno: u64,
    page: &[u8],
) -> Vec<Finding> {
    let mut checker = BlockChecker::new(plan, page_config(&plan.control), structure, false);
    checker.check_block(file, plan.fork_of_file[file], blkno, page, None);
    checker.findings
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
    let cfg = page_config(&plan.control);
    let total_bytes = plan.scan_bytes();
    let unit_bytes = unit_bytes_for(opts.unit_bytes, total_bytes, opts.jobs, cfg.blcksz as u64);
    let extended = structure.and_then(|s| s.extended);
    let phases = scan_phases(plan, extended, unit_bytes, opts.jobs, cfg.blcksz as u64);
    let scan_opts = ScanOptions {
        jobs: opts.jobs,
        chunk_bytes: (opts.chunk_bytes / cfg.blcksz).max(1) * cfg.blcksz,
        block_size: cfg.blcksz,
        write: false,
        max_bytes_per_sec: opts.max_bytes_per_sec,
        keep_cache: opts.online.is_some(),
    };
    let new_checker = || {
        let mut c = BlockChecker::new(plan, cfg, structure, opts.count_tuples);
        c.online = opts.online.map(crate::online::ScanNotes::new);
        c
    };
    let mut merged = new_checker();
    for units in &phases {
        let workers = pgcheckdb_scan::run(plan, units, &scan_opts, new_checker, progress);
        for w in workers {
            merged.absorb(w);
        }
    }
    let facts = merged.facts.take();
    let mut report = merged.finish(plan, opts, started);
    report.summary.keys_not_order_checked = structure.map(|s| s.not_order_checked.len() as u64);
    note_not_structure_checked(structure, &mut report.summary);
    if let (Some(facts), Some(ext), Some(s)) = (facts, extended, structure) {
        // An interrupted scan left facts out: cross-page checks would blame healthy pages.
        if !progress.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            crate::extended::merge_into(plan, ext, facts.finish(), s.clog, &mut report);
        }
    }
    report
}

/// Puts the relations that only the physical checks covered into the summary.
fn note_not_structure_checked(structure: Option<&Structure<'_>>, summary: &mut Summary) {
    let Some(s) = structure else {
        return;
    };
    summary.relations_not_structure_checked = Some(s.not_structure_checked.len() as u64);
    summary.not_structure_checked =
        (!s.not_structure_checked.is_empty()).then(|| s.not_structure_checked.clone());
}

/// Where the blocks of the plan's files come from when they are not read from the files
/// themselves by the parallel scan: a stream (a tar archive's members, [`crate::backup::tar`])
/// that hands each file's whole blocks, in order, in chunks to the visitor, as the scan does.
pub trait BlockSource {
    /// Hands every block of the plan's files to `visitor`; an error when the stream cannot be
    /// read on.
    fn feed(&mut self, visitor: &mut dyn pgcheckdb_scan::Visitor) -> Result<(), String>;
}

/// [`run`] with the blocks from `source` instead of the files: the same checks, on one
/// thread. The extended level (whose phases read files in an order of their own) is not
/// available this way: `structure` must not carry an extended plan.
pub fn run_source(
    plan: &Plan,
    opts: &VerifyOptions,
    structure: Option<&Structure<'_>>,
    source: &mut dyn BlockSource,
) -> Result<VerifyReport, String> {
    let started = Instant::now();
    if structure.is_some_and(|s| s.extended.is_some()) {
        return Err("the extended level cannot read its blocks from a stream".into());
    }
    let control = &plan.control;
    let cfg = PageCheckConfig {
        blcksz: control.blcksz as usize,
        max_align: control.max_align as usize,
        checksums: control.data_checksum_version == crate::control::ChecksumState::ON_VERSION,
    };
    let mut checker = BlockChecker::new(plan, cfg, structure, opts.count_tuples);
    source.feed(&mut checker)?;
    let mut report = checker.finish(plan, opts, started);
    report.summary.keys_not_order_checked = structure.map(|s| s.not_order_checked.len() as u64);
    note_not_structure_checked(structure, &mut report.summary);
    Ok(report)
}

/// The work units of the scan, in phases run one after the other: at the extended level, what
/// heap -> index needs complete before the rest comes first (the tables checked by sums, the
/// indexes checked by filters: [`crate::extended::ExtendedPlan::first_phase`]); otherwise one
/// phase. Each file is in exactly one phase, so it is read once.
fn scan_phases(
    plan: &Plan,
    extended: Option<&crate::extended::ExtendedPlan>,
    unit_bytes: u64,
    jobs: usize,
    blcksz: u64,
) -> Vec<Vec<pgcheckdb_scan::WorkUnit>> {
    let Some(ext) = extended.filter(|e| !e.all_indexed.is_empty()) else {
        return vec![finer_tail(
            plan_units(plan, unit_bytes, blcksz),
            unit_bytes,
            jobs,
            blcksz,
        )];
    };
    let first = PhaseFiles {
        plan,
        keep: &|f| ext.first_phase(f),
    };
    let second = PhaseFiles {
        plan,
        keep: &|f| !ext.first_phase(f),
    };
    vec![
        finer_tail(
            plan_units(&first, unit_bytes, blcksz),
            unit_bytes,
            jobs,
            blcksz,
        ),
        finer_tail(
            plan_units(&second, unit_bytes, blcksz),
            unit_bytes,
            jobs,
            blcksz,
        ),
    ]
}

/// Pieces each block range is cut into near the end of a phase.
const TAIL_SPLIT: u64 = 4;

/// Cuts the block ranges among the last `2 * jobs` units' worth of bytes of a phase into
/// [`TAIL_SPLIT`] pieces: a worker that takes the last big unit no longer keeps the others
/// waiting for the whole of it (a unit of a B-tree with collated text keys takes a twentieth
/// of a second). Batches of small files stay as they are.
fn finer_tail(
    units: Vec<pgcheckdb_scan::WorkUnit>,
    unit_bytes: u64,
    jobs: usize,
    blcksz: u64,
) -> Vec<pgcheckdb_scan::WorkUnit> {
    let total: u64 = units.iter().map(|u| u.len).sum();
    let tail_start = total.saturating_sub(2 * jobs.max(1) as u64 * unit_bytes);
    let mut out = Vec::with_capacity(units.len() + 8 * jobs);
    let mut before = 0u64;
    for u in units {
        let reaches_tail = before + u.len > tail_start;
        before += u.len;
        let piece = (u.len / TAIL_SPLIT / blcksz).max(1) * blcksz;
        if !reaches_tail || u.last_file != u.file || u.len <= piece {
            out.push(u);
            continue;
        }
        let mut offset = u.offset;
        let end = u.offset + u.len;
        while offset < end {
            let mut len = piece.min(end - offset);
            if end - (offset + len) < blcksz {
                // A partial last block stays with the blocks before it.
                len = end - offset;
            }
            out.push(pgcheckdb_scan::WorkUnit { offset, len, ..u });
            offset += len;
        }
    }
    out
}

/// The plan's files as the scan sees them, with the files of other phases left empty.
struct PhaseFiles<'a> {
    plan: &'a Plan,
    keep: &'a (dyn Fn(usize) -> bool + Sync),
}

impl pgcheckdb_scan::FileList for PhaseFiles<'_> {
    fn file_count(&self) -> usize {
        self.plan.file_count()
    }
    fn scan_len(&self, file: usize) -> u64 {
        if (self.keep)(file) {
            self.plan.scan_len(file)
        } else {
            0
        }
    }
    fn path_into(&self, file: usize, path: &mut std::path::PathBuf) {
        self.plan.path_into(file, path);
    }
    fn dir_of(&self, file: usize) -> Option<&std::path::Path> {
        self.plan.dir_of(file)
    }
    fn name_into(&self, file: usize, name: &mut Vec<u8>) {
        self.plan.name_into(file, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_of_a_phase_is_cut_finer() {
        use pgcheckdb_scan::WorkUnit;
        let range = |file, offset, len| WorkUnit {
            file,
            offset,
            len,
            last_file: file,
        };
        // File 0: ten 64 kB units; then a batch of small files 1..=3 (8 kB in all).
        let mut units: Vec<WorkUnit> = (0..10).map(|i| range(0, i * 65536, 65536)).collect();
        units.push(WorkUnit {
            file: 1,
            offset: 0,
            len: 8192,
            last_file: 3,
        });
        let out = finer_tail(units.clone(), 65536, 1, 8192);
        // The last 128 kB (two units of 64 kB): units 8 and 9 reach into it and are cut in
        // four; the batch of small files stays whole.
        assert_eq!(out[..8], units[..8]);
        let pieces: Vec<(u64, u64)> = out[8..16].iter().map(|u| (u.offset, u.len)).collect();
        let expected: Vec<(u64, u64)> = (0..8).map(|i| (8 * 65536 + i * 16384, 16384)).collect();
        assert_eq!(pieces, expected);
        assert_eq!(out[16], units[10]);
        assert_eq!(out.len(), 17);
        // Every byte once, in order.
        let bytes = |v: &[WorkUnit]| v.iter().map(|u| u.len).sum::<u64>();
        assert_eq!(bytes(&out), bytes(&units));
        // A partial last block stays with the last piece.
        let odd = finer_tail(vec![range(0, 0, 5 * 8192 + 100)], 65536, 2, 8192);
        assert_eq!(
            odd.iter().map(|u| (u.offset, u.len)).collect::<Vec<_>>(),
            vec![
                (0, 8192),
                (8192, 8192),
                (16384, 8192),
                (24576, 8192),
                (32768, 8292)
            ]
        );
    }

    #[test]
    fn fork_ranges_cover_every_fork_once_in_order() {
        for (forks, parts) in [(0, 1), (5, 32), (8192, 32), (80_950, 32), (7, 3), (1, 1)] {
            let ranges: Vec<_> = fork_ranges(forks, parts).collect();
            assert_eq!(ranges.len(), parts);
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(forks));
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            let longest = ranges.iter().map(|r| r.len()).max().unwrap_or(0);
            assert!(longest <= forks.div_ceil(parts), "{forks} forks in {parts}");
        }
    }

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
}
