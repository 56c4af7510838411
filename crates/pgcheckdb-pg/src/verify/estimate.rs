//! `verify --estimate` (CHECKDB's ESTIMATEONLY): what a run would read — files, blocks and bytes
//! — and how long each level would take, from a short timed sample of the plan ([`estimate`]).
//! Nothing is reported about the pages: the sample's findings are dropped.
//!
//! The sample: two disjoint sets of files spread over the plan (every other file of an evenly
//! strided pick), each up to [`SAMPLE_BYTES`] and [`SAMPLE_TIME`]; the first is read at the
//! physical level, the second at the standard level, both cold, with the run's `-j`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use pgcheckdb_scan::Progress;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::check::structure::Structure;
use crate::plan::Plan;
use crate::scope::Scope;
use crate::verify::options::{Level, VerifyOptions};
use crate::verify::report::Summary;

/// Most bytes read per level for the sample.
pub const SAMPLE_BYTES: u64 = 128 << 20;
/// Longest time spent reading per level for the sample.
pub const SAMPLE_TIME: Duration = Duration::from_secs(1);

/// The estimate of one level.
#[derive(Debug, Serialize)]
pub struct LevelEstimate {
    pub level: &'static str,
    pub bytes: u64,
    /// Bytes of the sample read at this level and the time it took.
    pub sample_bytes: u64,
    pub sample_seconds: f64,
    /// Expected duration of a full run, in seconds: reading the catalogs and listing the files
    /// (as timed in this run) plus the scan at the sample's rate.
    pub seconds: f64,
    /// `seconds` is only a lower bound: part of the level's work is not in the sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_least: Option<&'static str>,
}

/// Why the extended level's estimate is a lower bound.
const EXTENDED_NOT_SAMPLED: &str =
    "the cross-page checks (facts sorted and merged after the scan, \
heap -> index lookups) are not sampled: measured at 3-10x the standard level, most with indexes \
not in table order";

/// The `estimate` JSON line.
#[derive(Debug, Serialize)]
pub struct Estimate {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub files: u64,
    pub blocks: u64,
    pub bytes: u64,
    pub jobs: usize,
    pub max_bytes_per_sec: Option<u64>,
    pub levels: Vec<LevelEstimate>,
    pub scoped: bool,
}

/// Times the samples and estimates each level; never checks the cluster. `setup` is the time
/// already spent reading the catalogs and listing the files, which a real run spends too. The
/// summary has no timestamps: the caller, which keeps the clock, sets them.
pub fn estimate(
    plan: &Plan,
    catalog: &Catalog,
    opts: &VerifyOptions,
    scope: &Scope,
    setup: Duration,
) -> (Estimate, Summary) {
    let started = Instant::now();
    let bytes: u64 = plan.scan_bytes();
    let (first, second) = sample_sets(plan);
    let physical = time_sample(plan, catalog, scope, opts, Level::Physical, &first);
    let standard = time_sample(plan, catalog, scope, opts, Level::Standard, &second);
    let level = |name, sample: (u64, f64)| LevelEstimate {
        level: name,
        bytes,
        sample_bytes: sample.0,
        sample_seconds: sample.1,
        seconds: expected_seconds(bytes, sample, opts.max_bytes_per_sec, setup),
        at_least: None,
    };
    let estimate = Estimate {
        kind: "estimate",
        files: plan.dir.files.len() as u64,
        blocks: bytes / plan.control.blcksz as u64,
        bytes,
        jobs: opts.jobs,
        max_bytes_per_sec: opts.max_bytes_per_sec,
        // The extended level reads and checks pages as the standard one does; its cross-page
        // work is not sampled, so its estimate is a lower bound.
        levels: vec![
            level("physical", physical),
            level("standard", standard),
            LevelEstimate {
                at_least: Some(EXTENDED_NOT_SAMPLED),
                ..level("extended", standard)
            },
        ],
        scoped: !scope.is_everything(),
    };
    let summary = Summary {
        level: opts.level.name().to_string(),
        postgres_version: plan.control.major,
        checksums: plan.control.checksum_state().name(),
        block_size: plan.control.blcksz,
        segment_blocks: plan.control.relseg_size,
        seconds: started.elapsed().as_secs_f64(),
        ..Summary::default()
    };
    (estimate, summary)
}

/// Seconds a full run of `bytes` takes at the sample's rate (`(bytes read, seconds)`), or at
/// `--max-rate` when that is slower, plus the `setup`.
fn expected_seconds(
    bytes: u64,
    (sample_bytes, secs): (u64, f64),
    max_bytes_per_sec: Option<u64>,
    setup: Duration,
) -> f64 {
    let by_sample = if sample_bytes > 0 && secs > 0.0 {
        bytes as f64 * secs / sample_bytes as f64
    } else {
        0.0
    };
    let by_limit = max_bytes_per_sec.map_or(0.0, |r| bytes as f64 / r as f64);
    setup.as_secs_f64() + by_sample.max(by_limit)
}

/// Two disjoint sets of file paths, each spread over the whole plan and about
/// [`SAMPLE_BYTES`] large.
fn sample_sets(plan: &Plan) -> (Vec<String>, Vec<String>) {
    let files = &plan.dir.files;
    let total: u64 = files.iter().map(|f| f.size).sum();
    // Take every n-th file so that the picks add up to about twice the sample size.
    let step = if total == 0 {
        1
    } else {
        ((total / (2 * SAMPLE_BYTES)) as usize).clamp(1, files.len().max(1))
    };
    let (mut a, mut b) = ((Vec::new(), 0u64), (Vec::new(), 0u64));
    for (n, f) in files.iter().step_by(step).enumerate() {
        let set = if n % 2 == 0 { &mut a } else { &mut b };
        if set.1 < SAMPLE_BYTES {
            set.0.push(f.rel_path());
            set.1 += f.size;
        }
    }
    (a.0, b.0)
}

/// Reads the sample files at `level` for at most [`SAMPLE_TIME`]; returns bytes read and
/// seconds taken.
fn time_sample(
    plan: &Plan,
    catalog: &Catalog,
    scope: &Scope,
    opts: &VerifyOptions,
    level: Level,
    paths: &[String],
) -> (u64, f64) {
    if paths.is_empty() {
        return (0, 0.0);
    }
    let wanted: std::collections::HashSet<&str> = paths.iter().map(String::as_str).collect();
    let sample = Plan::build_scoped(&plan.datadir, plan.control.clone(), |f| {
        scope.keeps_file(f) && wanted.contains(f.rel_path().as_str())
    });
    let structure = (level != Level::Physical).then(|| Structure::from_catalog(&sample, catalog));
    let sample_opts = VerifyOptions {
        level,
        max_bytes_per_sec: None,
        count_tuples: false,
        ..opts.clone()
    };
    let progress = Progress::default();
    let started = Instant::now();
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if started.elapsed() >= SAMPLE_TIME {
                    progress.cancel.store(true, Ordering::Relaxed);
                    return;
                }
                thread::sleep(Duration::from_millis(10));
            }
        });
        let _ = crate::verify::run::run(&sample, &sample_opts, &progress, structure.as_ref());
        done.store(true, Ordering::Relaxed);
    });
    (
        progress.bytes_done.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
    )
}
