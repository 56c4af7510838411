//! The merge phase: after the scan, each index's facts are merged from the sorted runs and
//! checked, each table's heap TIDs held by its indexes are checked (`tids`), and each table's
//! visibility map and hint bits (`vm`), all of them as tasks of one pool (as many threads as
//! scan jobs); then each table behind a unique index gives the liveness of the heap tuples its
//! duplicate-key groups name; then the heap -> index filters report what they lacked and the
//! TOAST values are checked against their chunks (`toast`). The findings are placed at their
//! files and blocks and added to the report.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::btree::problem::Problem;
use super::btree::IndexCheck;
use super::plan::{ExtendedPlan, IndexInfo};
use super::report::block_finding;
use super::spill::Runs;
use super::tids::merge::{check_heap_tids, parts, ChunkRange, TidOutcome};
use super::tids::TidNotChecked;
use super::toast::merge::{check_toasts, unread_forks};
use super::unique::{collect_live, needed_blocks, violations, Group};
use super::{lock, unlocked, ExtendedSummary, NotOrderCheckedIndex};
use crate::catalog::xact::CommitLog;
use crate::finding::Finding;
use crate::plan::Plan;

/// What the merge of one index gave.
struct IndexResult {
    fork: usize,
    problems: Vec<Problem>,
    not_order_checked: Option<String>,
    groups: Vec<Group>,
}

/// What the merge found: its findings (not yet sorted with the scan's), the errors that left
/// parts of it unchecked, and the extended summary.
pub struct MergeOutcome {
    pub findings: Vec<Finding>,
    pub tool_errors: Vec<String>,
    pub summary: ExtendedSummary,
}

/// Merges the facts of `runs` and checks every planned index, table map and TOAST relation.
/// `scan_findings` are the block scan's: pages found damaged there are not judged again.
pub fn merge(
    plan: &Plan,
    ext: &ExtendedPlan,
    runs: Runs,
    clog: &CommitLog,
    scan_findings: &[Finding],
) -> MergeOutcome {
    let started = Instant::now();
    let mut forks: Vec<usize> = ext.indexes.keys().copied().collect();
    forks.sort_unstable();
    let errors: Mutex<Vec<String>> = Mutex::new(runs.errors.clone());
    let PoolOutcome {
        results,
        tids,
        vm,
        miss_chances,
        graphs,
    } = run_pool(plan, ext, &runs, &forks, &errors);
    let mut summary = ExtendedSummary {
        facts: runs.stats.records,
        spilled_bytes: runs.stats.spilled_bytes,
        spill_files: runs.stats.spill_files,
        indexes_checked: results.len() as u64,
        ..ExtendedSummary::default()
    };
    let (mut findings, mut not_checked) =
        index_findings(plan, ext, &runs, results, &mut summary, &errors);
    let mut diagnosis_errors = Vec::new();
    findings.extend(super::allindexed::report::findings(
        plan,
        ext,
        scan_findings,
        &mut summary,
        &miss_chances,
        clog,
        &mut diagnosis_errors,
    ));
    lock(&errors).extend(diagnosis_errors);
    findings.extend(tids.findings);
    note_tids(ext, tids.tids_checked, tids.tids_not_checked, &mut summary);
    let unread = unread_forks(plan, scan_findings);
    let (toast_findings, toast) =
        check_toasts(plan, &ext.toasts, &runs, &unread, ext.jobs, &errors);
    findings.extend(toast_findings);
    summary.toast_relations_checked = toast.relations;
    summary.toast_values_checked = toast.values;
    summary.toast_chunks_unreferenced = toast.unreferenced_chunks;
    summary.toast_values_presence_unchecked = toast.presence_unchecked;
    findings.extend(super::vm::merge::in_table_order(vm));
    findings.extend(super::vm::merge::in_table_order(graphs));
    note_graphs_and_maps(ext, &mut summary);
    summary.keys_not_order_checked = not_checked.len() as u64;
    if ext.config.verbose {
        not_checked.sort_by(|a, b| a.index.cmp(&b.index));
        summary.not_order_checked = Some(not_checked);
    }
    summary.merge_seconds = started.elapsed().as_secs_f64();
    MergeOutcome {
        findings,
        tool_errors: errors.into_inner().unwrap_or_default(),
        summary,
    }
}

/// The findings of every index's merge and of the unique indexes' duplicate groups, and the
/// B-tree indexes whose keys were not order-checked.
fn index_findings(
    plan: &Plan,
    ext: &ExtendedPlan,
    runs: &Runs,
    results: Vec<IndexResult>,
    summary: &mut ExtendedSummary,
    errors: &Mutex<Vec<String>>,
) -> (Vec<Finding>, Vec<NotOrderCheckedIndex>) {
    let mut not_checked = Vec::new();
    let mut findings: Vec<Finding> = Vec::new();
    let mut by_heap: HashMap<usize, Vec<(usize, Vec<Group>)>> = HashMap::new();
    for r in results {
        let info = &ext.indexes[&r.fork];
        if let Some(why) = r.not_order_checked {
            not_checked.push(NotOrderCheckedIndex {
                index: info.name.clone(),
                reason: why,
            });
        }
        if let Some(u) = &info.unique {
            summary.unique_indexes_checked += 1;
            if !r.groups.is_empty() {
                by_heap
                    .entry(u.heap_fork)
                    .or_default()
                    .push((r.fork, r.groups));
            }
        }
        findings.extend(r.problems.into_iter().map(|p| place(plan, r.fork, p)));
    }
    for (heap, groups) in by_heap {
        findings.extend(unique_findings(plan, runs, heap, &groups, errors));
    }
    (findings, not_checked)
}

/// The summary's TID check fields.
fn note_tids(ext: &ExtendedPlan, checked: u64, not_checked: u64, summary: &mut ExtendedSummary) {
    summary.tid_indexes_checked = ext.tids.indexes.len() as u64;
    summary.tid_indexes_not_checked = ext.tids.not_checked.len() as u64;
    // TIDs found to name a live root where they were read (heap -> index by sums) are
    // valid without a fact.
    summary.tids_checked = checked + tids_confirmed(ext);
    summary.tids_not_checked = not_checked;
    if ext.config.verbose {
        summary.tids_not_checked_indexes = Some(listed(&ext.tids.not_checked));
    }
}

/// The summary's index graph, hint bit and visibility map fields.
fn note_graphs_and_maps(ext: &ExtendedPlan, summary: &mut ExtendedSummary) {
    summary.index_graphs_checked = ext.graphs.indexes.len() as u64;
    summary.index_graphs_not_checked = ext.graphs.not_checked.len() as u64;
    if ext.config.verbose {
        summary.index_graphs_not_checked_indexes = Some(listed(&ext.graphs.not_checked));
    }
    summary.hint_bits_tables_checked = ext.vm.tables.len() as u64;
    summary.visibility_maps_checked = ext.vm.maps.len() as u64;
    summary.visibility_maps_not_checked = ext.vm.not_checked.clone();
    if let Some(forks) = ext.forks_in_flux {
        summary.forks_in_flux = Some(forks);
        summary.btree_indexes_in_flux = Some(ext.btree_in_flux.len() as u64);
        summary.visibility_maps_in_flux = Some(ext.vm.in_flux);
        if ext.config.verbose {
            summary.btree_in_flux_indexes = Some(ext.btree_in_flux.clone());
        }
    }
}

/// TIDs of the TID check confirmed during the scan, over its planned indexes.
fn tids_confirmed(ext: &ExtendedPlan) -> u64 {
    ext.all_indexed
        .iter()
        .filter(|a| ext.tids.indexes.contains_key(&a.index_fork))
        .map(|a| a.tids_confirmed.load(Ordering::Relaxed))
        .sum()
}

/// One task of the first merge pool.
#[derive(Debug, Clone, Copy)]
enum Task {
    /// The facts of the B-tree index at this fork.
    Index(usize),
    /// The heap TIDs the indexes of the table at this heap fork hold, in one part of its
    /// chunks (a big table's TIDs are merged in parts, in parallel).
    Tids(usize, ChunkRange),
    /// The visibility map and hint bits of the table at this heap fork.
    Vm(usize),
    /// The miss chance of every heap -> index filter (a pass over each filter's words).
    Filters,
    /// The graph of the hash, GiST, SP-GiST, GIN or BRIN index at this fork.
    Graph(usize),
}

/// What the first pool's tasks gave.
struct PoolOutcome {
    results: Vec<IndexResult>,
    tids: TidOutcome,
    /// Per table, its visibility-map and hint-bit findings (tables without any left out).
    vm: Vec<(usize, Vec<Finding>)>,
    /// The miss chance of each filter of `ext.all_indexed`, in its order.
    miss_chances: Vec<f64>,
    /// Per index, its graph findings.
    graphs: Vec<(usize, Vec<Finding>)>,
}

/// The indexes a check left out, with the reason, as the verbose summary lists them.
fn listed(not_checked: &[TidNotChecked]) -> Vec<NotOrderCheckedIndex> {
    not_checked
        .iter()
        .map(|n| NotOrderCheckedIndex {
            index: n.index.clone(),
            reason: n.reason.to_string(),
        })
        .collect()
}

/// Bytes of a fork's files: how long its merge task takes, roughly (a TID task: its
/// indexes' bytes).
fn fork_bytes(plan: &Plan, fork: usize) -> u64 {
    plan.forks[fork]
        .segments()
        .map(|i| plan.dir.files[i].size)
        .sum()
}

/// A stable order among tasks of the same size.
fn task_order(task: Task) -> (u8, usize, u32) {
    match task {
        Task::Index(f) => (0, f, 0),
        Task::Tids(h, part) => (1, h, part.first),
        Task::Vm(h) => (2, h, 0),
        Task::Filters => (3, 0, 0),
        Task::Graph(f) => (4, f, 0),
    }
}

/// Checks every index, every table's TIDs and every table's visibility map, `ext.jobs` tasks
/// at a time: the TIDs of one big table are one task, which runs while the other threads
/// check indexes and visibility instead of after them.
fn run_pool(
    plan: &Plan,
    ext: &ExtendedPlan,
    runs: &Runs,
    forks: &[usize],
    errors: &Mutex<Vec<String>>,
) -> PoolOutcome {
    let mut tasks: Vec<(u64, Task)> = forks
        .iter()
        .map(|&f| (fork_bytes(plan, f), Task::Index(f)))
        .collect();
    let mut tid_bytes: HashMap<usize, u64> = HashMap::new();
    for i in ext.tids.indexes.values() {
        *tid_bytes.entry(i.heap_fork).or_default() += fork_bytes(plan, i.fork);
    }
    for (heap, bytes) in tid_bytes {
        let parts = parts(plan.fork_blocks[heap], ext.jobs);
        let share = bytes / parts.len() as u64;
        tasks.extend(parts.into_iter().map(|p| (share, Task::Tids(heap, p))));
    }
    tasks.extend(
        ext.graphs
            .indexes
            .keys()
            .map(|&f| (fork_bytes(plan, f), Task::Graph(f))),
    );
    tasks.extend(
        ext.vm
            .tables
            .iter()
            .map(|&h| (fork_bytes(plan, h), Task::Vm(h))),
    );
    let filter_bytes: u64 = ext
        .all_indexed
        .iter()
        .filter_map(|i| i.bloom())
        .map(|b| b.bits() / 8)
        .sum();
    tasks.push((filter_bytes, Task::Filters));
    // The biggest first, so that no long task starts last while the other threads idle.
    tasks.sort_by_key(|&(bytes, task)| (std::cmp::Reverse(bytes), task_order(task)));
    let tasks: Vec<Task> = tasks.into_iter().map(|(_, t)| t).collect();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<IndexResult>> = Mutex::new(Vec::new());
    let tids: Mutex<Vec<(usize, u32, TidOutcome)>> = Mutex::new(Vec::new());
    let vm: Mutex<Vec<(usize, Vec<Finding>)>> = Mutex::new(Vec::new());
    let miss_chances: Mutex<Vec<f64>> = Mutex::new(Vec::new());
    let graphs: Mutex<Vec<(usize, Vec<Finding>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..ext.jobs.min(tasks.len()).max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                match tasks.get(i) {
                    None => break,
                    Some(&Task::Index(fork)) => {
                        let info = &ext.indexes[&fork];
                        match check_one(runs, info, ext.next_full_xid) {
                            Ok(r) => lock(&results).push(r),
                            Err(e) => lock(errors).push(format!(
                                "could not read the facts of index {}: {e}",
                                info.name
                            )),
                        }
                    }
                    Some(&Task::Tids(heap, part)) => {
                        let out = check_heap_tids(plan, ext, runs, heap, part, errors);
                        lock(&tids).push((heap, part.first, out));
                    }
                    Some(&Task::Vm(heap)) => {
                        match super::vm::merge::check_table(plan, ext, runs, heap) {
                            Ok(out) if out.is_empty() => {}
                            Ok(out) => lock(&vm).push((heap, out)),
                            Err(e) => lock(errors).push(e),
                        }
                    }
                    Some(&Task::Graph(fork)) => {
                        let info = &ext.graphs.indexes[&fork];
                        match super::graphs::merge::check_index(plan, runs, info) {
                            Ok(out) => lock(&graphs).push((fork, out)),
                            Err(e) => lock(errors).push(e),
                        }
                    }
                    Some(&Task::Filters) => {
                        let chances = ext.all_indexed.iter().map(|i| i.miss_chance()).collect();
                        *lock(&miss_chances) = chances;
                    }
                }
            });
        }
    });
    let mut out = unlocked(results);
    out.sort_by_key(|r| r.fork);
    // The parts' findings in table and chunk order, whichever part ended first.
    let mut tid_parts = unlocked(tids);
    tid_parts.sort_by_key(|&(heap, first, _)| (heap, first));
    let mut tid_outcome = TidOutcome::default();
    for (_, _, out) in tid_parts {
        tid_outcome.absorb(out);
    }
    PoolOutcome {
        results: out,
        tids: tid_outcome,
        vm: unlocked(vm),
        miss_chances: unlocked(miss_chances),
        graphs: unlocked(graphs),
    }
}

fn check_one(
    runs: &Runs,
    info: &IndexInfo,
    next_full_xid: Option<u64>,
) -> std::io::Result<IndexResult> {
    let mut check = IndexCheck::new(info, next_full_xid);
    runs.for_each_in_unit(info.fork as u32, |r| check.add(r))?;
    let outcome = check.finish();
    Ok(IndexResult {
        fork: info.fork,
        problems: outcome.problems,
        not_order_checked: outcome.not_order_checked,
        groups: outcome.groups,
    })
}

/// Joins the duplicate-key groups of the unique indexes of one table with its heap's liveness.
fn unique_findings(
    plan: &Plan,
    runs: &Runs,
    heap: usize,
    groups: &[(usize, Vec<Group>)],
    errors: &Mutex<Vec<String>>,
) -> Vec<Finding> {
    let all: Vec<Group> = groups.iter().flat_map(|(_, g)| g.iter().cloned()).collect();
    let needed: HashSet<u32> = needed_blocks(&all);
    let mut live = HashMap::new();
    if let Err(e) = runs.for_each_in_unit(heap as u32, |r| collect_live(r, &needed, &mut live)) {
        lock(errors).push(format!("could not read the heap facts: {e}"));
        return Vec::new();
    }
    let mut out = Vec::new();
    for (fork, g) in groups {
        for p in violations(g, &live) {
            out.push(place(plan, *fork, p));
        }
    }
    out
}

/// The finding of a problem of the index at `fork`.
fn place(plan: &Plan, fork: usize, p: Problem) -> Finding {
    block_finding(plan, fork, p.blkno as u64, p.kind, p.message, p.detail)
}
