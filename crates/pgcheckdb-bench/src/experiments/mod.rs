//! The experiments, and what they share: options every bench takes, per-trial cluster
//! configuration, progress lines, and turning trial results into groups, bars and ratios.

pub mod checkpoint;
pub mod checksum_overhead;
pub mod verify_scaling;

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::guard::Guarded;
use crate::output::{self, Written};
use crate::report::{Bar, Comparison, Group, Report};
use crate::schedule::{self, TrialResult};
use crate::stats;

/// Options every bench takes.
#[derive(Debug, Clone)]
pub struct CommonOpts {
    /// The PostgreSQL major version (its binaries already chosen by [`crate::pg::choose_binaries`]).
    pub major: u32,
    /// Runs per variant.
    pub runs: usize,
    /// Small sizes for CI.
    pub quick: bool,
    /// Where the CSV, JSON and PNG go.
    pub out: PathBuf,
    /// Print every trial as it finishes.
    pub progress: bool,
}

/// A finished bench: its report and the files written.
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    pub written: Written,
}

/// Writes the report's files and returns the outcome.
pub(crate) fn finish(mut report: Report, opts: &CommonOpts) -> Result<Outcome> {
    report.machine.finish();
    let written = output::write_all(&report, &opts.out)?;
    Ok(Outcome { report, written })
}

/// Sets `shared_buffers` of a stopped cluster for its next start (through
/// `postgresql.auto.conf`, which takes precedence over `postgresql.conf`).
pub(crate) fn set_shared_buffers(cluster: &Guarded, value: &str) -> Result<()> {
    let path = cluster.datadir().join("postgresql.auto.conf");
    fs::write(&path, format!("shared_buffers = '{value}'\n"))
        .with_context(|| format!("could not write {}", path.display()))
}

/// A progress callback printing one line per trial to stderr (when enabled).
pub(crate) fn progress_printer(total: usize, enabled: bool) -> impl FnMut(&TrialResult) {
    let mut done = 0;
    move |r: &TrialResult| {
        done += 1;
        if enabled {
            let values: Vec<String> = r
                .measurement
                .values
                .iter()
                .map(|(n, v)| format!("{n}={}", output::fmt_num(*v)))
                .collect();
            eprintln!(
                "[{done}/{total}] {} run {}: {}",
                r.variant_name,
                r.trial.run + 1,
                values.join(" ")
            );
        }
    }
}

/// One [`Group`] per variant: statistics of every metric.
pub(crate) fn groups(results: &[TrialResult], names: &[String]) -> Vec<Group> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let metric_names: Vec<String> = results
                .iter()
                .find(|r| r.trial.variant == i)
                .map(|r| {
                    r.measurement
                        .values
                        .iter()
                        .map(|(n, _)| n.clone())
                        .collect()
                })
                .unwrap_or_default();
            let metrics = metric_names
                .into_iter()
                .map(|m| {
                    let values = schedule::values_of(results, i, Some(&m));
                    (m, stats::summarize(&values))
                })
                .collect();
            Group {
                name: name.clone(),
                metrics,
            }
        })
        .collect()
}

/// One [`Bar`] per variant of the metric `metric` (the primary one when `None`).
pub(crate) fn bars(results: &[TrialResult], names: &[String], metric: Option<&str>) -> Vec<Bar> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let points = schedule::values_of(results, i, metric);
            Bar {
                label: name.clone(),
                mean: stats::mean(&points),
                points,
            }
        })
        .collect()
}

/// The ratio of the means of `metric` (primary when `None`) between variants `num` and `den`.
pub(crate) fn compare(
    results: &[TrialResult],
    names: &[String],
    label: &str,
    num: usize,
    den: usize,
    metric: Option<&str>,
) -> Comparison {
    let a = schedule::values_of(results, num, metric);
    let b = schedule::values_of(results, den, metric);
    Comparison {
        label: label.to_string(),
        numerator: names[num].clone(),
        denominator: names[den].clone(),
        ratio: stats::ratio_ci(&a, &b),
    }
}

/// "costs 3.4% (95% CI 1.2% to 5.6%)" from a ratio.
pub(crate) fn percent_change(c: &Comparison) -> String {
    let pct = |r: f64| (r - 1.0) * 100.0;
    let r = &c.ratio;
    let ci = match (r.low, r.high) {
        (Some(lo), Some(hi)) => format!("95% CI {:+.1}% to {:+.1}%", pct(lo), pct(hi)),
        _ => "95% CI unbounded".to_string(),
    };
    format!("{:+.1}% ({ci})", pct(r.ratio))
}

/// The mean of `metric` for variant `i`.
pub(crate) fn mean_of(results: &[TrialResult], i: usize, metric: &str) -> f64 {
    stats::mean(&schedule::values_of(results, i, Some(metric)))
}
