//! `pgcheckdb bench <experiment>`: flags, choice of the PostgreSQL installation, output
//! directory, Ctrl-C handling, and printing the report (text table, or JSON with `--format json`).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use pgcheckdb_bench::experiments::{checkpoint, checksum_overhead, verify_scaling};
use pgcheckdb_bench::{guard, output, pg, CommonOpts, Outcome};

use crate::cli::{Common, OutputFormat};
use crate::EXIT_OK;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub experiment: Experiment,
}

/// Flags every experiment takes.
#[derive(Debug, Args)]
pub struct BenchCommon {
    /// PostgreSQL major version (default: the newest installed).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(14..=18))]
    pub pg_version: Option<u32>,
    /// Directory holding initdb, pg_ctl, postgres and psql.
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<PathBuf>,
    /// Runs per variant (default: 10; verify-scaling 3; --quick 2, verify-scaling 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub runs: Option<u64>,
    /// Small sizes and few runs, for CI (well under a minute).
    #[arg(long)]
    pub quick: bool,
    /// Output directory for CSV, JSON and PNG (default: bench-out/<experiment>-<timestamp>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Experiment {
    /// Data checksums on vs off: insert + update (A) and the sequential-scan worst case (B).
    ChecksumOverhead(ChecksumOverheadArgs),
    /// A CHECKPOINT every K rows vs automatic checkpoints.
    Checkpoint(CheckpointArgs),
    /// pgcheckdb verify GB/s at -j 1..cores per level, beside pg_checksums and pg_amcheck.
    VerifyScaling(VerifyScalingArgs),
}

#[derive(Debug, Args)]
pub struct ChecksumOverheadArgs {
    #[command(flatten)]
    pub common: BenchCommon,
    /// Rows of workload A, N (default 1000000; --quick 2000).
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub rows: Option<u64>,
    /// Rows of workload B, char(2000) each (default 100000; --quick 2000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub rows_b: Option<u64>,
    /// Sequential scans per workload B run (default 20; --quick 3).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub scans: Option<u32>,
    /// The normal shared_buffers of workload B (and of A), big enough for B's table.
    #[arg(long)]
    pub shared_buffers: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    #[command(flatten)]
    pub common: BenchCommon,
    /// Rows of char(8000) per run (default 16000; --quick 480).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub rows: Option<u64>,
    /// Commit and CHECKPOINT every K rows.
    #[arg(long, short = 'k', default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub every: u64,
}

#[derive(Debug, Args)]
pub struct VerifyScalingArgs {
    #[command(flatten)]
    pub common: BenchCommon,
    /// Approximate data size in MB (default 2048; --quick 48).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub size_mb: Option<u64>,
    /// Highest -j tried (default: the number of cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_jobs: Option<u32>,
}

/// Runs one experiment and prints its report.
pub fn run(common: &Common, args: &BenchArgs) -> Result<u8> {
    let (bc, name) = match &args.experiment {
        Experiment::ChecksumOverhead(a) => (&a.common, "checksum-overhead"),
        Experiment::Checkpoint(a) => (&a.common, "checkpoint"),
        Experiment::VerifyScaling(a) => (&a.common, "verify-scaling"),
    };
    let bin = pg::choose_binaries(bc.pg_version, bc.pg_bin.as_deref())?;
    guard::install_handler()?;
    let default_runs = match (&args.experiment, bc.quick) {
        (Experiment::VerifyScaling(_), true) => 1,
        (Experiment::VerifyScaling(_), false) => 3,
        (_, true) => 2,
        (_, false) => 10,
    };
    let opts = CommonOpts {
        major: bin.major,
        runs: bc.runs.map_or(default_runs, |r| r as usize),
        quick: bc.quick,
        out: bc.out.clone().unwrap_or_else(|| default_out(name)),
        progress: !common.quiet,
    };
    if !common.quiet {
        eprintln_text!(
            "pgcheckdb bench {name}: {} in {}, {} runs per variant, output in {}",
            bin.version,
            bin.bindir.display(),
            opts.runs,
            opts.out.display()
        );
    }
    let outcome = match run_experiment(&args.experiment, &opts) {
        Ok(o) => o,
        Err(e) if guard::interrupted() => {
            eprintln_text!("pgcheckdb: interrupted: {e:#}");
            std::process::exit(guard::EXIT_INTERRUPTED);
        }
        Err(e) => return Err(e.context(format!("bench {name} failed"))),
    };
    print(common, &outcome)?;
    Ok(EXIT_OK)
}

fn run_experiment(exp: &Experiment, opts: &CommonOpts) -> Result<Outcome> {
    match exp {
        Experiment::ChecksumOverhead(a) => {
            let mut p = checksum_overhead::Params::defaults(opts.quick);
            p.rows_a = a.rows.unwrap_or(p.rows_a);
            p.rows_b = a.rows_b.unwrap_or(p.rows_b);
            p.scans = a.scans.unwrap_or(p.scans);
            p.shared_buffers = a.shared_buffers.clone().unwrap_or(p.shared_buffers);
            checksum_overhead::run(opts, &p)
        }
        Experiment::Checkpoint(a) => {
            let mut p = checkpoint::Params::defaults(opts.quick);
            p.rows = a.rows.unwrap_or(p.rows);
            p.every = a.every;
            checkpoint::run(opts, &p)
        }
        Experiment::VerifyScaling(a) => {
            let exe = std::env::current_exe().context("cannot find the pgcheckdb executable")?;
            let mut p = verify_scaling::Params::defaults(opts.quick, exe);
            p.size_mb = a.size_mb.unwrap_or(p.size_mb);
            p.max_jobs = a.max_jobs.unwrap_or(p.max_jobs);
            verify_scaling::run(opts, &p)
        }
    }
}

fn print(common: &Common, outcome: &Outcome) -> Result<()> {
    match common.format {
        OutputFormat::Json => println!("{}", serde_json::to_string(&outcome.report)?),
        OutputFormat::Text => print!(
            "{}",
            pgcheckdb_report::escape::escape_control_keep_newlines(&output::render_text(
                &outcome.report
            ))
        ),
    }
    if !common.quiet {
        for f in &outcome.written.files {
            eprintln_text!("wrote {}", f.display());
        }
    }
    Ok(())
}

/// `bench-out/<experiment>-<YYYYmmdd-HHMMSS>` (UTC).
fn default_out(experiment: &str) -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("bench-out").join(format!("{experiment}-{}", utc_stamp(secs)))
}

/// `YYYYmmdd-HHMMSS` for a Unix time (days to civil date after Howard Hinnant's algorithm).
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::utc_stamp;

    #[test]
    fn stamps_utc_times() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(1_700_000_000), "20231114-221320");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
    }
}
