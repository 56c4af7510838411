//! The block scan of a verification: the work units and phases, the parallel scan of the
//! plan's files (or a stream of blocks from a [`BlockSource`]), and the merge of the workers'
//! findings into one [`VerifyReport`].

use std::time::Instant;

use pgcheckdb_scan::{plan_units, Progress, ScanOptions};

use super::checker::BlockChecker;
use super::options::{VerifyOptions, MIN_UNITS_PER_JOB};
use super::report::{Summary, VerifyReport};
use crate::check::physical::PageCheckConfig;
use crate::check::structure::Structure;
use crate::finding::Finding;
use crate::plan::Plan;

/// The work unit size for `total_bytes` scanned by `jobs` workers: `max_unit`, made smaller on
/// small clusters (never below one block).
fn unit_bytes_for(max_unit: u64, total_bytes: u64, jobs: usize, block_size: u64) -> u64 {
    let balanced = total_bytes / (MIN_UNITS_PER_JOB * jobs.max(1) as u64);
    max_unit.min(balanced).max(block_size)
}

/// The page checks of `control`'s cluster.
fn page_config(control: &crate::format::control::ControlFile) -> PageCheckConfig {
    PageCheckConfig {
        blcksz: control.blcksz as usize,
        max_align: control.max_align as usize,
        checksums: control.data_checksum_version
            == crate::format::control::ChecksumState::ON_VERSION,
    }
}

/// Checks one page of `file` alone, as the scan does (physical, placement and structure
/// checks): the re-reads of `verify --online` (`verify::recheck`).
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
        c.online = opts.online.map(crate::verify::online::ScanNotes::new);
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
            let outcome = crate::check::extended::merge::merge(
                plan,
                ext,
                facts.finish(),
                s.clog,
                &report.findings,
            );
            report.add_extended(outcome);
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
/// themselves by the parallel scan: a stream (a tar archive's members: the tar backup source of `ops::backup::tar`)
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
        checksums: control.data_checksum_version
            == crate::format::control::ChecksumState::ON_VERSION,
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
/// indexes checked by filters: [`crate::check::extended::ExtendedPlan::first_phase`]); otherwise one
/// phase. Each file is in exactly one phase, so it is read once.
fn scan_phases(
    plan: &Plan,
    extended: Option<&crate::check::extended::ExtendedPlan>,
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
