//! The findings and the summary of heap -> index, after the scan: each live heap tuple an
//! index lacks is an `index_entry_missing` finding at the heap page (the tuple is there to
//! `inspect`; the index is named, `REINDEX` rebuilds it). An index checked by sums first has
//! its unbalanced blocks named ([`super::diagnose`]); an entry that names a live tuple but
//! holds a key the tuple does not have, besides the tuple's own entry, is an
//! `index_entry_extra` finding at the index page.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use serde_json::json;

use super::diagnose::{diagnose, Extra};
use super::{AllIndexed, REPORTED_PER_INDEX};
use crate::catalog::xact::CommitLog;
use crate::check::extended::report::block_finding;
use crate::check::extended::{
    ExtendedPlan, ExtendedSummary, NotOrderCheckedIndex, WeakFilter, USELESS_MISS_CHANCE,
};
use crate::finding::{Finding, FindingKind as K, Severity};
use crate::plan::Plan;

/// Unbalanced heap blocks of one index read again to name their tuples; past them only the
/// count is reported (an index whose every block is off needs no more than a few names).
const DIAGNOSED_BLOCKS: usize = 1000;

/// A miss chance worth naming the index for: the check ran weakened (in the summary, and in
/// the text's closing sentence).
const WEAK_MISS_CHANCE: f64 = 0.02;

/// The findings of every index checked; fills the heap -> index part of `summary`.
/// `existing` are the findings of the scan: an index with one of its own is not judged.
/// `miss_chances` are the filters' [`super::bloom::Bloom::false_positive_rate`], in the order
/// of `ext.all_indexed`, when already computed (the merge pool does it alongside its other
/// tasks); a missing one is computed here. Pages that cannot be read again for a diagnosis
/// are tool errors, onto `errors`.
pub fn findings(
    plan: &Plan,
    ext: &ExtendedPlan,
    existing: &[Finding],
    summary: &mut ExtendedSummary,
    miss_chances: &[f64],
    clog: &CommitLog,
    errors: &mut Vec<String>,
) -> Vec<Finding> {
    let damaged_files: HashSet<&str> = existing
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .map(|f| f.file.as_str())
        .collect();
    let mut skipped = ext.all_indexed_skipped.clone();
    let mut weak = Vec::new();
    let mut out = Vec::new();
    for (i, idx) in ext.all_indexed.iter().enumerate() {
        if idx.incomplete.load(Ordering::Relaxed) || has_findings(plan, idx, &damaged_files) {
            skipped.push((
                idx.name.clone(),
                "a page of the index failed its own checks".into(),
            ));
            continue;
        }
        let chance = miss_chances
            .get(i)
            .copied()
            .unwrap_or_else(|| idx.miss_chance());
        if let Some(bloom) = idx.bloom().filter(|_| chance > WEAK_MISS_CHANCE) {
            weak.push(WeakFilter {
                index: idx.name.clone(),
                miss_chance: chance,
                entries: idx.entries.load(Ordering::Relaxed),
                bits: bloom.bits(),
            });
        }
        if chance >= USELESS_MISS_CHANCE {
            // What the filter says is lacking is lacking, but it passes most of what is:
            // not a check of the index. Its findings stand.
            skipped.push((
                idx.name.clone(),
                format!("the Bloom filter --memory leaves is too small for its table (a lacking entry missed with chance {chance:.2}); raise --memory"),
            ));
            out.extend(lacking_findings(plan, idx, None));
            continue;
        }
        summary.all_indexed_checked += 1;
        summary.all_indexed_tuples += idx.tuples_checked.load(Ordering::Relaxed);
        summary.all_indexed_tuples_not_checked += idx.tuples_not_checked.load(Ordering::Relaxed);
        summary.all_indexed_miss_chance = summary.all_indexed_miss_chance.max(chance);
        let mut unbalanced = None;
        if let Some((_, sums)) = idx.exact() {
            summary.all_indexed_exact += 1;
            let blocks = sums.unbalanced();
            if !blocks.is_empty() {
                let read = &blocks[..blocks.len().min(DIAGNOSED_BLOCKS)];
                unbalanced = Some((blocks.len(), read.len()));
                let named_before = idx.lacking_count.load(Ordering::Relaxed);
                match diagnose(plan, idx, clog, ext.max_align, read) {
                    Ok(extras) if extras.is_empty()
                        && idx.lacking_count.load(Ordering::Relaxed) == named_before =>
                    {
                        errors.push(format!(
                            "heap -> index of {}: {} heap blocks did not balance in the scan, but read again every live tuple has its entry (did the files change?)",
                            idx.name,
                            blocks.len()
                        ))
                    }
                    Ok(extras) => out.extend(extra_findings(plan, idx, &extras)),
                    Err(e) => errors.push(format!(
                        "heap -> index of {}: {} heap blocks do not balance, and {e}",
                        idx.name,
                        blocks.len()
                    )),
                }
            }
        }
        out.extend(lacking_findings(plan, idx, unbalanced));
    }
    summary.all_indexed_not_checked = skipped.len() as u64;
    weak.sort_by(|a, b| a.index.cmp(&b.index));
    summary.all_indexed_weak = Some(weak);
    if ext.config.verbose {
        skipped.sort();
        summary.all_indexed_skipped = Some(
            skipped
                .into_iter()
                .map(|(index, reason)| NotOrderCheckedIndex { index, reason })
                .collect(),
        );
    }
    out
}

/// Whether a segment of the index has a finding of its own.
fn has_findings(plan: &Plan, idx: &AllIndexed, damaged_files: &HashSet<&str>) -> bool {
    plan.forks[idx.index_fork]
        .segments()
        .any(|i| damaged_files.contains(plan.dir.files[i].rel_path().as_str()))
}

/// An `index_entry_extra` finding at the index page of each entry in `extras`.
fn extra_findings(plan: &Plan, idx: &AllIndexed, extras: &[Extra]) -> Vec<Finding> {
    let name = &idx.name;
    extras
        .iter()
        .take(REPORTED_PER_INDEX)
        .map(|e| {
            block_finding(
                plan,
                idx.index_fork,
                u64::from(e.index_block),
                K::IndexEntryExtra,
                format!(
                    "an entry of index {name} names live tuple ({},{}), which has its own entry there, with a key the tuple does not have",
                    e.heap_block, e.heap_offset
                ),
                json!({"index": name, "heap_block": e.heap_block, "heap_offset": e.heap_offset, "extra_in_index": extras.len()}),
            )
        })
        .collect()
}

/// `unbalanced`: by sums, how many heap blocks did not balance and how many of them were read
/// again to name their tuples.
fn lacking_findings(
    plan: &Plan,
    idx: &AllIndexed,
    unbalanced: Option<(usize, usize)>,
) -> Vec<Finding> {
    let mut lacking = crate::check::extended::lock(&idx.lacking).clone();
    lacking.sort_by_key(|l| (l.heap_block, l.heap_offset));
    let total = idx.lacking_count.load(Ordering::Relaxed);
    let name = &idx.name;
    let last = lacking.len().saturating_sub(1);
    lacking
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut more = if i == last && total > REPORTED_PER_INDEX as u64 {
                format!(
                    " ({} tuples in all lack an entry; the first {REPORTED_PER_INDEX} are listed)",
                    total
                )
            } else {
                String::new()
            };
            if let Some((all, read)) = unbalanced.filter(|&(all, read)| i == last && all > read) {
                more.push_str(&format!(
                    " (the entries of {all} heap blocks do not match their live tuples; the first {read} were read again to name them)"
                ));
            }
            block_finding(
                plan,
                idx.heap_fork,
                u64::from(l.heap_block),
                K::IndexEntryMissing,
                format!(
                    "live tuple ({},{}) has no entry in index {name}{more}",
                    l.heap_block, l.heap_offset
                ),
                match l.other_key_at {
                    None => json!({"index": name, "heap_offset": l.heap_offset, "lacking_in_index": total}),
                    Some(b) => json!({"index": name, "heap_offset": l.heap_offset, "lacking_in_index": total,
                        "entry_with_other_key": {"index_block": b}}),
                },
            )
        })
        .collect()
}
