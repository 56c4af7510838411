//! Command-line flags (DESIGN.md §1) and the rule that a bad argument is one line on stderr
//! and exit status 1.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "pgcheckdb",
    version,
    about = "DBCC CHECKDB for PostgreSQL: find and name damaged pages, offline, in parallel"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// Worker threads (default: all cores).
    #[arg(short = 'j', long = "jobs", global = true, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Show a progress bar (default: when stderr is a terminal).
    #[arg(long, global = true, overrides_with = "no_progress")]
    pub progress: bool,
    /// Never show a progress bar.
    #[arg(long, global = true)]
    pub no_progress: bool,
    /// Print only findings and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print more about what is being done.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check every page of a data directory.
    Verify(VerifyArgs),
    /// Show or switch the cluster's data checksums.
    Checksums(ChecksumsArgs),
    /// Show one page decoded: header, checksum, line pointers, tuple headers, special space.
    Inspect(InspectArgs),
    /// Damage one block of a stopped cluster on purpose (drills and tests).
    Corrupt(CorruptArgs),
    /// Show everything on a throwaway cluster of the PostgreSQL installed here.
    Demo(DemoArgs),
    /// Reproducible experiments on throwaway local clusters (checksum overhead, checkpoints, verify scaling).
    Bench(crate::bench_cmd::BenchArgs),
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory with initdb, pg_ctl, postgres and psql (default: the newest 14-18 found).
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<PathBuf>,
    /// Rows in the demo table.
    #[arg(long, default_value_t = 20_000)]
    pub rows: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CorruptHow {
    /// Flip one bit (at --offset, default the middle of the page).
    FlipBit,
    /// Zero the whole block (a lost write).
    Zero,
    /// Zero from a sector boundary (--offset, default the middle) to the end (a torn write).
    Tear,
    /// Fill the block with random bytes.
    Garbage,
    /// Exchange the block with another (--with, default the next block).
    Swap,
    /// Break a page header rule (pd_special beyond the block).
    Header,
}

#[derive(Debug, Args)]
pub struct CorruptArgs {
    #[command(flatten)]
    pub target: BlockArgs,
    /// What to do to the block.
    #[arg(long, value_enum)]
    pub how: CorruptHow,
    /// Byte offset inside the page for flip-bit and tear.
    #[arg(long)]
    pub offset: Option<usize>,
    /// Other block for swap.
    #[arg(long)]
    pub with: Option<u64>,
    /// Recompute the page checksum afterwards, so only structure checks can see the damage.
    #[arg(long)]
    pub fix_checksum: bool,
}

/// One block of one relation fork: the target of `inspect` and `corrupt`.
#[derive(Debug, Args)]
pub struct BlockArgs {
    /// Data directory (default: $PGDATA).
    #[arg(short = 'D', long = "pgdata", env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
    /// Relation file, relative to the data directory or absolute (any segment of the fork).
    #[arg(
        long,
        required_unless_present = "relation",
        conflicts_with = "relation"
    )]
    pub file: Option<PathBuf>,
    /// Relation by name (schema.name or a unique name), found in the offline catalog.
    #[arg(long)]
    pub relation: Option<String>,
    /// Database of --relation (default: search every database).
    #[arg(long)]
    pub database: Option<String>,
    /// Absolute block number in the fork, as `verify` reports it.
    #[arg(long)]
    pub block: u64,
    /// Fork (main, fsm, vm, init); default: the fork named by --file, else main.
    #[arg(long)]
    pub fork: Option<String>,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub target: BlockArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LevelArg {
    Physical,
    Standard,
    Extended,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Data directory (default: $PGDATA).
    #[arg(short = 'D', long = "pgdata", env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
    /// How deep to check.
    #[arg(long, value_enum, default_value_t = LevelArg::Standard)]
    pub level: LevelArg,
    /// Alias of --level physical.
    #[arg(long, conflicts_with = "level")]
    pub physical_only: bool,
    /// Check a running cluster (not yet supported).
    #[arg(long)]
    pub online: bool,
    /// Read at most this many MB per second.
    #[arg(long, value_name = "MB/s")]
    pub max_rate: Option<f64>,
    /// Extended level: memory for cross-page facts before they spill to disk (64MB, 1G, ...).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_memory)]
    pub memory: u64,
    /// Extended level: directory for spill files (default: the system temp dir; never inside
    /// the data directory).
    #[arg(long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
}

fn parse_memory(text: &str) -> Result<u64, String> {
    pgcheckdb_pg::extended::parse_size(text)
}

#[derive(Debug, Args)]
pub struct ChecksumsArgs {
    #[command(subcommand)]
    pub action: ChecksumsAction,
}

#[derive(Debug, Subcommand)]
pub enum ChecksumsAction {
    /// Show the checksum state recorded in pg_control.
    Status {
        /// Data directory (default: $PGDATA).
        #[arg(short = 'D', long = "pgdata", env = "PGDATA")]
        pgdata: Option<PathBuf>,
    },
    /// Turn data checksums on in a stopped cluster: stamp every page, sync, then switch pg_control.
    Enable(crate::checksums_cmd::EnableArgs),
    /// Turn data checksums off in a stopped cluster: the pg_control change alone.
    Disable(crate::checksums_cmd::DisableArgs),
}

/// Clap's message up to its usage and tips, folded into one line.
pub fn one_line(rendered: &str) -> String {
    let text: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| {
            !l.starts_with("Usage:")
                && !l.starts_with("tip:")
                && !l.starts_with("For more information")
        })
        .filter(|l| !l.is_empty())
        .collect();
    let joined = text.join(" ");
    let joined = joined
        .strip_prefix("error: ")
        .unwrap_or(&joined)
        .to_string();
    if joined.is_empty() {
        "invalid arguments".to_string()
    } else {
        joined
    }
}

/// Parses the command line. On a usage error prints one line and returns exit status 1; for
/// `--help` and `--version` prints them and returns 0.
pub fn parse() -> Result<Cli, u8> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            Err(0)
        }
        Err(e) => {
            eprintln!(
                "pgcheckdb: error: {} (try --help)",
                one_line(&e.render().to_string())
            );
            Err(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_fold_into_one_line() {
        let rendered = "error: the following required arguments were not provided:\n  --file <FILE>\n\nUsage: pgcheckdb corrupt --file <FILE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "the following required arguments were not provided: --file <FILE>"
        );
        assert_eq!(one_line(""), "invalid arguments");
    }

    #[test]
    fn inspect_and_corrupt_share_the_block_arguments() {
        let cli = Cli::try_parse_from([
            "pgcheckdb",
            "inspect",
            "-D",
            "/d",
            "--relation",
            "t",
            "--block",
            "3",
        ])
        .expect("parse");
        let Command::Inspect(args) = cli.command else {
            panic!("not inspect")
        };
        assert_eq!(
            (args.target.relation.as_deref(), args.target.block),
            (Some("t"), 3)
        );
        assert!(Cli::try_parse_from([
            "pgcheckdb",
            "corrupt",
            "-D",
            "/d",
            "--block",
            "3",
            "--how",
            "zero"
        ])
        .is_err());
    }
}
