//! The merge side of the TOAST check: one TOAST relation's facts arrive in order (damaged
//! marks, then per value id its live pointers and its chunks by `chunk_seq`), and
//! [`ValueChecker`] (in [`super::value`]) judges one value at a time. Relations are checked in
//! parallel, and each problem is placed at its page as a finding.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;

pub use super::value::{Place, ToastOutcome, ToastProblem, ValueChecker};
use super::ToastInfo;
use crate::check::extended::report::block_finding;
use crate::check::extended::spill::Runs;
use crate::check::extended::{lock, unlocked};
use crate::finding::{Finding, FindingKind as K, Severity};
use crate::plan::Plan;

/// The forks with blocks the scan could not read whole (`read_error`, `partial_block`): their
/// pages gave no facts, so chunks on them would look missing.
pub fn unread_forks(plan: &Plan, findings: &[Finding]) -> HashSet<usize> {
    let files: HashSet<&str> = findings
        .iter()
        .filter(|f| matches!(f.kind, K::ReadError | K::PartialBlock))
        .map(|f| f.file.as_str())
        .collect();
    plan.dir
        .files
        .iter()
        .enumerate()
        .filter(|(_, f)| files.contains(f.rel_path().as_str()))
        .filter_map(|(i, _)| plan.fork_of_file.get(i).copied())
        .collect()
}

/// Checks every planned TOAST relation, `jobs` at a time; returns the findings and totals.
/// `unread` are forks whose pages were not all read ([`unread_forks`]).
pub fn check_toasts(
    plan: &Plan,
    toasts: &HashMap<usize, Arc<ToastInfo>>,
    runs: &Runs,
    unread: &HashSet<usize>,
    jobs: usize,
    errors: &Mutex<Vec<String>>,
) -> (Vec<Finding>, ToastTotals) {
    let mut forks: Vec<usize> = toasts.keys().copied().collect();
    forks.sort_unstable();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, ToastOutcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(forks.len()).max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&fork) = forks.get(i) else { break };
                let info = &toasts[&fork];
                let mut checker = ValueChecker::new(info.max_chunk, &info.main_name);
                checker.damaged = unread.contains(&fork);
                match runs.for_each_in_unit(fork as u32, |r| checker.add(r)) {
                    Ok(()) => lock(&results).push((fork, checker.finish())),
                    Err(e) => lock(errors).push(format!(
                        "could not read the TOAST facts of {}: {e}",
                        info.main_name
                    )),
                }
            });
        }
    });
    let mut results = unlocked(results);
    results.sort_by_key(|r| r.0);
    let mut totals = ToastTotals::default();
    let mut findings = Vec::new();
    for (fork, outcome) in results {
        let info = &toasts[&fork];
        totals.relations += 1;
        totals.values += outcome.values_checked;
        totals.unreferenced_chunks += outcome.unreferenced_chunks;
        totals.presence_unchecked += outcome.presence_unchecked;
        findings.extend(place_outcome(plan, info, outcome));
    }
    (findings, totals)
}

/// Counters for the summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct ToastTotals {
    pub relations: u64,
    pub values: u64,
    pub unreferenced_chunks: u64,
    pub presence_unchecked: u64,
}

/// The findings of one TOAST relation.
fn place_outcome(plan: &Plan, info: &ToastInfo, outcome: ToastOutcome) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in outcome.problems {
        let (fork, block, offset, attnum) = match p.place {
            Place::Toast { block, offset } => (info.toast_fork, block, offset, None),
            Place::Main {
                block,
                offset,
                attnum,
            } => (info.main_fork, block, offset, Some(attnum)),
        };
        let mut detail = p.detail;
        detail["table"] = json!(info.main_name);
        let message = format!("{} of {}", p.message, info.main_name);
        let mut f = block_finding(
            plan,
            fork,
            block as u64,
            K::ToastValueInvalid,
            message,
            detail,
        );
        f.offset = Some(offset);
        f.attnum = attnum;
        out.push(f);
    }
    if outcome.unreferenced_chunks > 0 {
        let block = outcome.first_unreferenced_block.unwrap_or(0);
        let message = format!(
            "{} chunks ({} of them deleted) of {} TOAST values that no live row of {} points at (deleted values keep their chunks until VACUUM); the first at this block",
            outcome.unreferenced_chunks, outcome.unreferenced_dead, outcome.unreferenced_values, info.main_name
        );
        let detail = json!({
            "chunks": outcome.unreferenced_chunks,
            "deleted_chunks": outcome.unreferenced_dead,
            "values": outcome.unreferenced_values,
            "table": info.main_name,
        });
        let mut f = block_finding(
            plan,
            info.toast_fork,
            block as u64,
            K::ToastChunksUnreferenced,
            message,
            detail,
        );
        f.severity = Severity::Info;
        out.push(f);
    }
    out
}
