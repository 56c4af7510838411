//! `bench verify-scaling`: GB/s of `pgcheckdb verify` at `-j 1..cores` for the physical,
//! standard and extended levels, beside `pg_checksums --check` (single-threaded) and `pg_amcheck` (at the
//! same `-j` values), all on one cluster with data checksums on.
//!
//! The cluster gets one table of about `--size-mb` MB (int, md5 text, 200-byte pad) with a
//! B-tree index, vacuumed, then is shut down cleanly. pgcheckdb and pg_checksums read the
//! stopped data directory; pg_amcheck needs the server, so its trials run afterwards with the
//! cluster started. Each tool is a child process timed by the wall clock (process start
//! included). A warm-up run of each comes first, untimed, so all read from a warm page cache.
//! GB/s = bytes of relation files (from pgcheckdb's JSON summary) / seconds, for every tool, so
//! the rates are comparable; pg_amcheck reads somewhat less (tables and B-trees only).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use pgcheckdb_cluster::ClusterOptions;
use serde_json::json;

use super::{finish, groups, progress_printer, CommonOpts, Outcome};
use crate::guard::Guarded;
use crate::output::fmt_bytes;
use crate::report::{Chart, Machine, Report, Series};
use crate::schedule::{self, Executor, Measurement, Trial, TrialResult};

/// Parameters of the experiment.
#[derive(Debug, Clone)]
pub struct Params {
    /// The pgcheckdb executable to run.
    pub exe: PathBuf,
    /// Approximate size of the data to check, MB.
    pub size_mb: u64,
    /// Highest `-j` (default: the number of cores).
    pub max_jobs: u32,
}

impl Params {
    /// Defaults, or the `--quick` sizes.
    pub fn defaults(quick: bool, exe: PathBuf) -> Params {
        Params {
            exe,
            size_mb: if quick { 48 } else { 2048 },
            max_jobs: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        }
    }
}

/// A tool and its setting.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tool {
    Pgcheckdb { level: &'static str, jobs: u32 },
    PgChecksums,
    PgAmcheck { jobs: u32 },
}

impl Tool {
    fn name(&self) -> String {
        match self {
            Tool::Pgcheckdb { level, jobs } => format!("pgcheckdb {level} -j {jobs}"),
            Tool::PgChecksums => "pg_checksums --check".into(),
            Tool::PgAmcheck { jobs } => format!("pg_amcheck -j {jobs}"),
        }
    }

    fn series(&self) -> String {
        match self {
            Tool::Pgcheckdb { level, .. } => format!("pgcheckdb {level}"),
            Tool::PgChecksums => "pg_checksums --check".into(),
            Tool::PgAmcheck { .. } => "pg_amcheck".into(),
        }
    }

    fn jobs(&self) -> u32 {
        match self {
            Tool::Pgcheckdb { jobs, .. } | Tool::PgAmcheck { jobs } => *jobs,
            Tool::PgChecksums => 1,
        }
    }
}

/// The offline tools (cluster stopped), then the online ones.
fn tools(max_jobs: u32) -> (Vec<Tool>, Vec<Tool>) {
    let mut offline = Vec::new();
    for level in ["physical", "standard", "extended"] {
        for jobs in 1..=max_jobs {
            offline.push(Tool::Pgcheckdb { level, jobs });
        }
    }
    offline.push(Tool::PgChecksums);
    let online = (1..=max_jobs)
        .map(|jobs| Tool::PgAmcheck { jobs })
        .collect();
    (offline, online)
}

struct Exec {
    cluster: Guarded,
    tools: Vec<Tool>,
    exe: PathBuf,
    bytes: f64,
}

impl Executor for Exec {
    fn run(&mut self, trial: &Trial) -> Result<Measurement> {
        let tool = &self.tools[trial.variant];
        let secs = run_tool(&self.cluster, &self.exe, tool)?.0;
        Ok(Measurement::seconds(secs)
            .with("gb_per_s", self.bytes / secs / 1e9)
            .with("jobs", f64::from(tool.jobs())))
    }
}

/// Runs one tool to completion; returns wall seconds and its stdout.
fn run_tool(c: &Guarded, exe: &Path, tool: &Tool) -> Result<(f64, String)> {
    let mut cmd = match tool {
        Tool::Pgcheckdb { level, jobs } => {
            let mut cmd = Command::new(exe);
            cmd.args(["verify", "--level", level, "-j", &jobs.to_string()])
                .args(["--format", "json", "--no-progress", "-D"])
                .arg(c.datadir());
            cmd
        }
        Tool::PgChecksums => {
            let mut cmd = c.command("pg_checksums");
            cmd.arg("--check").arg("-D").arg(c.datadir());
            cmd
        }
        Tool::PgAmcheck { jobs } => {
            let mut cmd = c.command("pg_amcheck");
            cmd.arg("-h")
                .arg(c.work_dir().join("sock"))
                .args(["-p", "5432", "-U", "postgres", "--all", "--install-missing"])
                .args(["-j", &jobs.to_string()]);
            cmd
        }
    };
    cmd.stdin(Stdio::null());
    let start = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("could not run {}", tool.name()))?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}{}",
            tool.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok((secs, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// The `bytes` of the summary line of `verify --format json` output.
pub fn summary_bytes(stdout: &str) -> Result<f64> {
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .context("verify printed nothing")?;
    let v: serde_json::Value = serde_json::from_str(last).context("verify summary is not JSON")?;
    if v["type"] != "summary" {
        bail!("last verify line is not a summary: {last}");
    }
    v["bytes"].as_f64().context("summary has no bytes")
}

/// SQL filling the cluster with about `size_mb` MB.
fn load_sql(size_mb: u64) -> String {
    // About 290 bytes per row (tuple header, int, md5 text, 200-byte pad, line pointer) plus a
    // B-tree entry of about 20 bytes.
    let rows = size_mb * 1024 * 1024 / 310;
    format!(
        "CREATE TABLE scaling (id int, t text, pad text);\n\
         INSERT INTO scaling SELECT i, md5(i::text), repeat('x', 200) FROM generate_series(1, {rows}) AS i;\n\
         CREATE INDEX scaling_id ON scaling (id);\n\
         VACUUM ANALYZE scaling;\n\
         CHECKPOINT;\n"
    )
}

/// Runs the experiment.
pub fn run(opts: &CommonOpts, params: &Params) -> Result<Outcome> {
    let machine = Machine::start();
    let mut cluster = Guarded::init(&ClusterOptions::new(opts.major, true))?;
    cluster.start()?;
    cluster.psql("postgres", &load_sql(params.size_mb))?;
    cluster.stop()?;
    let (offline, online) = tools(params.max_jobs.max(1));
    // Warm-up (untimed) and the byte count every rate divides.
    let physical = Tool::Pgcheckdb {
        level: "physical",
        jobs: params.max_jobs.max(1),
    };
    let bytes = summary_bytes(&run_tool(&cluster, &params.exe, &physical)?.1)?;
    run_tool(&cluster, &params.exe, &Tool::PgChecksums)?;
    let mut exec = Exec {
        cluster,
        tools: offline.clone(),
        exe: params.exe.clone(),
        bytes,
    };
    let mut results = run_plan(opts, &mut exec, 0)?;
    exec.cluster.start()?;
    exec.tools = online.clone();
    run_tool(&exec.cluster, &params.exe, &online[0])?;
    results.extend(run_plan(opts, &mut exec, offline.len())?);
    exec.cluster.stop()?;
    drop(exec);
    let all: Vec<Tool> = offline.into_iter().chain(online).collect();
    let report = build_report(opts, params, machine, results, &all, bytes);
    finish(report, opts)
}

/// Runs every tool in `exec.tools` `opts.runs` times, interleaved; variant numbers start at
/// `first` so the two plans share one numbering.
fn run_plan(opts: &CommonOpts, exec: &mut Exec, first: usize) -> Result<Vec<TrialResult>> {
    let names: Vec<String> = exec.tools.iter().map(Tool::name).collect();
    let plan = schedule::interleaved(names.len(), opts.runs);
    let mut progress = progress_printer(plan.len(), opts.progress);
    let mut results = schedule::execute(&plan, &names, exec, &mut progress)?;
    for r in &mut results {
        r.trial.variant += first;
    }
    Ok(results)
}

fn build_report(
    opts: &CommonOpts,
    params: &Params,
    machine: Machine,
    results: Vec<TrialResult>,
    tools: &[Tool],
    bytes: f64,
) -> Report {
    let names: Vec<String> = tools.iter().map(Tool::name).collect();
    let groups = groups(&results, &names);
    let median_rate = |i: usize| {
        groups[i]
            .metrics
            .iter()
            .find(|(n, _)| n == "gb_per_s")
            .map_or(f64::NAN, |(_, s)| s.median)
    };
    let mut series: Vec<Series> = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let point = (f64::from(tool.jobs()), median_rate(i));
        match series.iter_mut().find(|s| s.name == tool.series()) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                name: tool.series(),
                points: vec![point],
            }),
        }
    }
    let conclusions = series
        .iter()
        .map(|s| {
            let first = s.points.first().copied().unwrap_or((1.0, f64::NAN));
            let last = s.points.last().copied().unwrap_or(first);
            if s.points.len() > 1 {
                format!(
                    "{}: {:.2} GB/s at -j {:.0}, {:.2} GB/s at -j {:.0} ({:.2}× the single-job rate)",
                    s.name, first.1, first.0, last.1, last.0, last.1 / first.1
                )
            } else {
                format!("{}: {:.2} GB/s (single-threaded)", s.name, first.1)
            }
        })
        .collect();
    Report {
        experiment: "verify-scaling".into(),
        title: format!(
            "Checking {} (PostgreSQL {}): GB/s per tool and -j",
            fmt_bytes(bytes),
            opts.major
        ),
        settings: json!({
            "postgres_major": opts.major,
            "runs": opts.runs,
            "quick": opts.quick,
            "data": format!("one table of about {} MB (int, md5 text, 200-byte pad) + B-tree index, vacuumed; data checksums on", params.size_mb),
            "bytes_checked": bytes,
            "timing": "wall clock around each tool's process (start-up included); warm page cache (one untimed warm-up run first)",
            "rate": "GB/s = relation-file bytes from pgcheckdb's summary / seconds, the same divisor for every tool (pg_amcheck reads tables and B-trees only)",
            "pg_amcheck": "--all --install-missing -j N against the running cluster (heap and B-tree checks, no heapallindexed)",
            "table_value": "median of the runs",
        }),
        machine,
        groups,
        chart: Chart::Lines {
            x_label: "-j (jobs)".into(),
            y_label: "GB/s (median)".into(),
            series,
        },
        trials: results,
        comparisons: Vec::new(),
        conclusions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_cover_levels_jobs_and_peers() {
        let (offline, online) = tools(2);
        let names: Vec<String> = offline.iter().map(Tool::name).collect();
        assert_eq!(
            names,
            vec![
                "pgcheckdb physical -j 1",
                "pgcheckdb physical -j 2",
                "pgcheckdb standard -j 1",
                "pgcheckdb standard -j 2",
                "pgcheckdb extended -j 1",
                "pgcheckdb extended -j 2",
                "pg_checksums --check",
            ]
        );
        assert_eq!(
            online,
            vec![Tool::PgAmcheck { jobs: 1 }, Tool::PgAmcheck { jobs: 2 }]
        );
    }

    #[test]
    fn reads_bytes_from_the_summary_line() {
        let out = "{\"type\":\"finding\"}\n{\"type\":\"summary\",\"bytes\":8192,\"seconds\":0.1}\n";
        assert_eq!(summary_bytes(out).unwrap(), 8192.0);
        assert!(summary_bytes("{\"type\":\"finding\"}\n").is_err());
        assert!(summary_bytes("").is_err());
    }
}
