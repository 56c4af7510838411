//! `bench checksum-overhead`: two clusters, data checksums on and off, same version and
//! settings (PostgreSQL's defaults apart from `shared_buffers`).
//!
//! - Workload A (insert + update): `(increment int, random_guid uuid, random_value int,
//!   big_col char(1000) default 'a')` with a unique index on `increment`; N single-row INSERTs
//!   in one transaction, then one UPDATE of `random_value` per row in one transaction (both as
//!   PL/pgSQL loops), then a timed CHECKPOINT.
//! - Workload B (worst case): `char(2000)` rows, four to a page; one INSERT of M rows, a timed
//!   CHECKPOINT (so the first scan sets hint bits on clean pages: with checksums that is
//!   `wal_log_hints` at work, full-page images in WAL), then S sequential scans. Run with
//!   `shared_buffers = 128kB` (every page read is a buffer miss, so its checksum is verified)
//!   and with a setting large enough to hold the table.
//!
//! Every trial starts the cluster with that trial's `shared_buffers`, creates the table afresh,
//! runs the phases (each timed by the wall clock around one psql), reads the counters, drops the
//! table and stops the cluster. Variants run interleaved: A on, A off, B on, B off, … per run.

use anyhow::Result;
use pgcheckdb_cluster::ClusterOptions;
use serde_json::json;

use super::{bars, compare, finish, groups, mean_of, percent_change, progress_printer};
use super::{set_shared_buffers, CommonOpts, Outcome};
use crate::guard::Guarded;
use crate::output::fmt_bytes;
use crate::pg::{self, timed_psql};
use crate::report::{Chart, Machine, Report};
use crate::schedule::{self, Executor, Measurement, Trial};
use crate::workloads as w;

/// `shared_buffers` for the worst case.
pub const TINY_SHARED_BUFFERS: &str = "128kB";

/// Parameters of the experiment.
#[derive(Debug, Clone)]
pub struct Params {
    /// Rows of workload A (N).
    pub rows_a: u64,
    /// Rows of workload B.
    pub rows_b: u64,
    /// Sequential scans per workload B trial.
    pub scans: u32,
    /// The "normal" `shared_buffers`, large enough for workload B's table.
    pub shared_buffers: String,
}

impl Params {
    /// Defaults, or the `--quick` sizes.
    pub fn defaults(quick: bool) -> Params {
        if quick {
            Params {
                rows_a: 2_000,
                rows_b: 2_000,
                scans: 3,
                shared_buffers: "128MB".into(),
            }
        } else {
            Params {
                rows_a: 1_000_000,
                rows_b: 100_000,
                scans: 20,
                shared_buffers: "1GB".into(),
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    A,
    B,
}

/// One variant: a workload on the cluster with or without checksums, with a `shared_buffers`.
#[derive(Debug, Clone)]
struct Variant {
    workload: Workload,
    checksums: bool,
    shared_buffers: String,
}

impl Variant {
    fn name(&self) -> String {
        let sum = if self.checksums { "on" } else { "off" };
        match self.workload {
            Workload::A => format!("A {sum}"),
            Workload::B => format!("B sb={} {sum}", self.shared_buffers),
        }
    }
}

/// The six variants, in the order one run executes them.
fn variants(p: &Params) -> Vec<Variant> {
    let mut v = Vec::new();
    for (workload, sb) in [
        (Workload::A, p.shared_buffers.as_str()),
        (Workload::B, p.shared_buffers.as_str()),
        (Workload::B, TINY_SHARED_BUFFERS),
    ] {
        for checksums in [true, false] {
            v.push(Variant {
                workload,
                checksums,
                shared_buffers: sb.to_string(),
            });
        }
    }
    v
}

/// Runs trials on the two clusters (index 0: checksums on, 1: off).
struct Exec {
    clusters: [Guarded; 2],
    variants: Vec<Variant>,
    params: Params,
}

impl Executor for Exec {
    fn run(&mut self, trial: &Trial) -> Result<Measurement> {
        let v = self.variants[trial.variant].clone();
        let cluster = &mut self.clusters[usize::from(!v.checksums)];
        set_shared_buffers(cluster, &v.shared_buffers)?;
        cluster.start()?;
        let result = match v.workload {
            Workload::A => run_a(cluster, &self.params),
            Workload::B => run_b(cluster, &self.params),
        };
        cluster.stop()?;
        result
    }
}

/// Workload A on a started cluster.
fn run_a(c: &Guarded, p: &Params) -> Result<Measurement> {
    c.psql("postgres", &w::a_create())?;
    c.psql("postgres", &w::checkpoint())?;
    let before = pg::snapshot(c)?;
    let insert = timed_psql(c, &w::a_insert(p.rows_a))?;
    let update = timed_psql(c, &w::a_update(p.rows_a))?;
    let ckpt = timed_psql(c, &w::checkpoint())?;
    let delta = pg::settled_snapshot(c)?.since(&before);
    c.psql("postgres", &w::drop_table(w::TABLE_A))?;
    Ok(with_counters(
        Measurement::seconds(insert + update)
            .with("insert_s", insert)
            .with("update_s", update)
            .with("checkpoint_s", ckpt),
        &delta,
    ))
}

/// Workload B on a started cluster.
fn run_b(c: &Guarded, p: &Params) -> Result<Measurement> {
    c.psql("postgres", &w::b_create())?;
    c.psql("postgres", &w::checkpoint())?;
    let before = pg::snapshot(c)?;
    let insert = timed_psql(c, &w::b_insert(p.rows_b))?;
    let ckpt = timed_psql(c, &w::checkpoint())?;
    let select = timed_psql(c, &w::b_selects(p.scans))?;
    let delta = pg::settled_snapshot(c)?.since(&before);
    c.psql("postgres", &w::drop_table(w::TABLE_B))?;
    Ok(with_counters(
        Measurement::seconds(insert + select)
            .with("insert_s", insert)
            .with("select_s", select)
            .with("checkpoint_s", ckpt),
        &delta,
    ))
}

/// Adds WAL and checkpoint counters to a measurement.
fn with_counters(m: Measurement, d: &pg::Delta) -> Measurement {
    let m = m
        .with("wal_bytes", d.wal_bytes)
        .with("wal_fpi", d.wal_fpi)
        .with("checkpoint_buffers", d.checkpoint_buffers);
    match d.io_checkpointer_writes {
        Some(w) => m.with("io_checkpointer_writes", w),
        None => m,
    }
}

/// Runs the experiment.
pub fn run(opts: &CommonOpts, params: &Params) -> Result<Outcome> {
    let machine = Machine::start();
    let clusters = [
        Guarded::init(&ClusterOptions::new(opts.major, true))?,
        Guarded::init(&ClusterOptions::new(opts.major, false))?,
    ];
    let variants = variants(params);
    let names: Vec<String> = variants.iter().map(Variant::name).collect();
    let plan = schedule::interleaved(variants.len(), opts.runs);
    let mut exec = Exec {
        clusters,
        variants,
        params: params.clone(),
    };
    let mut progress = progress_printer(plan.len(), opts.progress);
    let results = schedule::execute(&plan, &names, &mut exec, &mut progress)?;
    drop(exec);
    let report = build_report(opts, params, machine, results, &names);
    finish(report, opts)
}

/// Turns the results into the report: statistics, ratios on/off, conclusions, chart.
fn build_report(
    opts: &CommonOpts,
    p: &Params,
    machine: Machine,
    results: Vec<schedule::TrialResult>,
    names: &[String],
) -> Report {
    let pairs = [
        (0, 1, format!("workload A (N = {})", p.rows_a)),
        (
            2,
            3,
            format!("workload B, shared_buffers {}", p.shared_buffers),
        ),
        (
            4,
            5,
            format!("workload B, shared_buffers {TINY_SHARED_BUFFERS}"),
        ),
    ];
    let mut comparisons = Vec::new();
    let mut conclusions = Vec::new();
    for (on, off, label) in &pairs {
        let time = compare(&results, names, &format!("{label}: time"), *on, *off, None);
        let wal = compare(
            &results,
            names,
            &format!("{label}: WAL bytes"),
            *on,
            *off,
            Some("wal_bytes"),
        );
        conclusions.push(format!(
            "{label}: checksums on vs off changes the time by {}; WAL per run {} vs {} ({:.2}×), full-page images {:.0} vs {:.0}",
            percent_change(&time),
            fmt_bytes(mean_of(&results, *on, "wal_bytes")),
            fmt_bytes(mean_of(&results, *off, "wal_bytes")),
            wal.ratio.ratio,
            mean_of(&results, *on, "wal_fpi"),
            mean_of(&results, *off, "wal_fpi"),
        ));
        comparisons.push(time);
        comparisons.push(wal);
    }
    for (on, off, label) in &pairs[1..] {
        let sel = compare(
            &results,
            names,
            &format!("{label}: select phase"),
            *on,
            *off,
            Some("select_s"),
        );
        conclusions.push(format!(
            "{label}: the {} scans alone change by {}",
            p.scans,
            percent_change(&sel)
        ));
        comparisons.push(sel);
    }
    Report {
        experiment: "checksum-overhead".into(),
        title: format!(
            "Data checksums on vs off, PostgreSQL {} (A: N = {}, B: {} rows)",
            opts.major, p.rows_a, p.rows_b
        ),
        settings: json!({
            "postgres_major": opts.major,
            "runs": opts.runs,
            "quick": opts.quick,
            "rows_a": p.rows_a,
            "rows_b": p.rows_b,
            "scans_b": p.scans,
            "shared_buffers": [p.shared_buffers, TINY_SHARED_BUFFERS],
            "timing": "wall clock around one psql per phase (psql start, a few ms, included); seconds = insert + update (A) or insert + selects (B); checkpoint_s is reported apart",
            "row_by_row": "workload A's INSERTs and UPDATEs are PL/pgSQL DO loops: one statement per row, one transaction per loop, no client round trip per row",
            "schedule": "variants interleaved run by run; each trial starts its cluster with its shared_buffers, creates the table afresh, and stops the cluster afterwards",
            "server_settings": "PostgreSQL defaults (fsync on, wal_level replica, full_page_writes on) except shared_buffers; max_parallel_workers_per_gather = 0 for the scans",
            "ci": "ratio of means with Fieller's 95% interval, Welch-Satterthwaite degrees of freedom",
        }),
        machine,
        groups: groups(&results, names),
        chart: Chart::Bars {
            y_label: "seconds per run (insert+update / insert+scans)".into(),
            bars: bars(&results, names, None),
        },
        trials: results,
        comparisons,
        conclusions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_variants_pair_on_with_off() {
        let v = variants(&Params::defaults(false));
        assert_eq!(v.len(), 6);
        for pair in v.chunks(2) {
            assert!(pair[0].checksums && !pair[1].checksums);
            assert_eq!(pair[0].workload, pair[1].workload);
            assert_eq!(pair[0].shared_buffers, pair[1].shared_buffers);
        }
        assert_eq!(v[4].name(), "B sb=128kB on");
        assert_eq!(v[1].name(), "A off");
    }
}
