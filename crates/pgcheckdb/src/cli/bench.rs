//! The flags of `pgcheckdb bench <experiment>`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub experiment: Experiment,
}

/// Flags every experiment takes.
#[derive(Debug, Args)]
pub struct BenchCommon {
    /// PostgreSQL major version (default: the newest installed).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(14..=19))]
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
