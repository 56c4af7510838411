//! Command-line flags (docs/OUTPUT.md, "Commands") and the rule that a bad argument is one line on stderr
//! and exit status 1.

pub mod bench;
pub mod checksums;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use pgcheckdb_pg::format::page::MAX_BLOCK_NUMBER;
use pgcheckdb_pg::ops::confine::TablespaceName;

/// The PostgreSQL major versions whose data directories pgcheckdb reads, for `--version`.
pub const VERSION_TEXT: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (reads data directories of PostgreSQL 14, 15, 16, 17, 18 and 19)"
);

/// The exit statuses, at the end of `--help` (docs/OUTPUT.md, "Exit status").
pub const EXIT_STATUS_HELP: &str = "Exit status:
  0         nothing found (verify), or the command did what was asked
  1         could not run or finish: bad arguments, a running cluster, anything unreadable
  2         corruption found (verify; checksums enable when damaged pages are in the way)
  130, 143  interrupted by SIGINT, SIGTERM

The manual: `pgcheckdb man`, `pgcheckdb man verify` (each command has its page).";

#[derive(Debug, Parser)]
#[command(
    name = "pgcheckdb",
    version = VERSION_TEXT,
    about = "DBCC CHECKDB for PostgreSQL: find and name damaged pages, offline, in parallel",
    arg_required_else_help = true,
    after_help = EXIT_STATUS_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What the commands need of the output and run flags. Built from the flags the command
/// offers; a flag a command does not offer keeps its default here.
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// `-j`: worker threads (default: all cores).
    pub jobs: Option<u32>,
    /// `--format text|json` (`prometheus` is `metrics_stdout` with text here).
    pub format: OutputFormat,
    /// `--progress`.
    pub progress: bool,
    /// `--no-progress`.
    pub no_progress: bool,
    /// `-q`: only findings and errors.
    pub quiet: bool,
    /// `-v`: what is read, counts and the time of each phase.
    pub verbose: bool,
    /// `verify --format prometheus`: metrics instead of findings on stdout.
    pub metrics_stdout: bool,
    /// `verify --metrics-file FILE`: metrics written atomically to FILE.
    pub metrics_file: Option<PathBuf>,
}

impl Common {
    /// The report format of `--format` (`prometheus` is text besides its metrics).
    pub fn report_format(&self) -> pgcheckdb_report::Format {
        match self.format {
            OutputFormat::Text => pgcheckdb_report::Format::Text,
            OutputFormat::Json => pgcheckdb_report::Format::Json,
        }
    }

    /// `-j`, or every core.
    pub fn jobs_or_all_cores(&self) -> usize {
        self.jobs
            .map(|j| j as usize)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// `-j, --jobs N`.
#[derive(Debug, Args)]
pub struct JobsFlag {
    /// Worker threads (default: all cores).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,
}

/// `--format text|json`.
#[derive(Debug, Args)]
pub struct FormatFlag {
    /// Output format (json: JSON Lines ending in a summary line; see docs/OUTPUT.md).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

/// `--format text|json|prometheus` and `--metrics-file` of `verify`.
#[derive(Debug, Args)]
pub struct VerifyOutput {
    /// Output format (json: JSON Lines ending in a summary line; prometheus: metrics in the
    /// text exposition format instead of findings; see docs/OUTPUT.md).
    #[arg(long, value_enum, default_value_t = VerifyFormat::Text)]
    pub format: VerifyFormat,
    /// Also write the run's metrics to FILE, atomically, in node_exporter's textfile-collector
    /// format (on every outcome; the last success time is kept from the previous file).
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
}

/// `--progress` and `--no-progress`.
#[derive(Debug, Args)]
pub struct ProgressFlags {
    /// Show a progress bar (default: when stderr is a terminal).
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,
    /// Never show a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// `--no-progress` on a command that never draws a bar: accepted, so scripts passing it to
/// every command keep working, and not shown.
#[derive(Debug, Args)]
pub struct NoProgressAccepted {
    #[arg(long, hide = true)]
    pub no_progress: bool,
}

/// `-q, --quiet`.
#[derive(Debug, Args)]
pub struct QuietFlag {
    /// Print only findings and errors.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `-v, --verbose`.
#[derive(Debug, Args)]
pub struct VerboseFlag {
    /// Print what is read, counts per database and the time of each phase (on stderr).
    #[arg(short, long, conflicts_with = "quiet")]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

/// `verify`'s formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyFormat {
    Text,
    Json,
    /// Prometheus text exposition format (the metrics of `--metrics-file`) on stdout.
    Prometheus,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check every page of a data directory.
    #[command(after_help = EXIT_STATUS_HELP)]
    Verify(Box<VerifyCmd>),
    /// Show or switch the cluster's data checksums.
    #[command(arg_required_else_help = true)]
    Checksums(ChecksumsArgs),
    /// Show one page decoded: header, checksum, line pointers, tuple headers, special space.
    Inspect(InspectCmd),
    /// Damage one block of a stopped cluster on purpose (drills and tests).
    Corrupt(CorruptCmd),
    /// Show everything on a throwaway cluster of the PostgreSQL installed here.
    Demo(DemoArgs),
    /// Reproducible experiments on throwaway local clusters (checksum overhead, checkpoints, verify scaling).
    #[command(arg_required_else_help = true)]
    Bench(BenchCmd),
    /// List the damage ledger: what is still damaged, new since the last run, repaired.
    Ledger(LedgerCmd),
    /// Print the manual page (roff) of pgcheckdb or of one command: `pgcheckdb man > pgcheckdb.1`.
    Man(ManArgs),
    /// Print a shell completion script: `pgcheckdb completions bash > /etc/bash_completion.d/pgcheckdb`.
    Completions(CompletionsArgs),
}

/// `verify` with the output flags it honours.
#[derive(Debug, Args)]
pub struct VerifyCmd {
    #[command(flatten)]
    pub args: VerifyArgs,
    #[command(flatten)]
    pub jobs: JobsFlag,
    #[command(flatten)]
    pub output: VerifyOutput,
    #[command(flatten)]
    pub progress: ProgressFlags,
    #[command(flatten)]
    pub quiet: QuietFlag,
    #[command(flatten)]
    pub verbose: VerboseFlag,
}

/// `inspect`: prints one page, so only `--format`.
#[derive(Debug, Args)]
pub struct InspectCmd {
    #[command(flatten)]
    pub args: InspectArgs,
    #[command(flatten)]
    pub format: FormatFlag,
    #[command(flatten)]
    pub no_progress: NoProgressAccepted,
}

/// `corrupt`: `-q` drops the line saying what was damaged.
#[derive(Debug, Args)]
pub struct CorruptCmd {
    #[command(flatten)]
    pub args: CorruptArgs,
    #[command(flatten)]
    pub format: FormatFlag,
    #[command(flatten)]
    pub quiet: QuietFlag,
    #[command(flatten)]
    pub no_progress: NoProgressAccepted,
}

/// `bench`: `--format` and `-q` apply to every experiment.
#[derive(Debug, Args)]
pub struct BenchCmd {
    #[command(flatten)]
    pub args: bench::BenchArgs,
    /// Output format of the report.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text, global = true)]
    pub format: OutputFormat,
    /// Print only the report and errors (no plan line, no list of files written).
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

/// `ledger`: the damage ledger `verify --ledger` writes (docs/LEDGER.md).
#[derive(Debug, Args)]
pub struct LedgerCmd {
    /// The ledger: a SQLite file, or a PostgreSQL connection string or URL (a central
    /// ledger; every host and cluster in it is listed). Default:
    /// $XDG_STATE_HOME/pgcheckdb/ledger.sqlite (~/.local/state/pgcheckdb/ledger.sqlite).
    #[arg(long, value_name = "FILE|CONNSTR")]
    pub ledger: Option<String>,
    /// Also list entries repaired before each cluster's last run (the whole history).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub format: FormatFlag,
    #[command(flatten)]
    pub no_progress: NoProgressAccepted,
}

/// `man [COMMAND...]`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// A command (`verify`, `checksums enable`, ...): its own page instead of pgcheckdb(1).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

impl Cli {
    /// The flags of the chosen command as the commands read them.
    pub fn common(&self) -> Common {
        let mut c = Common::default();
        match &self.command {
            Command::Verify(v) => {
                c.jobs = v.jobs.jobs;
                c.format = match v.output.format {
                    VerifyFormat::Json => OutputFormat::Json,
                    VerifyFormat::Text | VerifyFormat::Prometheus => OutputFormat::Text,
                };
                c.metrics_stdout = v.output.format == VerifyFormat::Prometheus;
                c.metrics_file = v.output.metrics_file.clone();
                c.progress = v.progress.progress;
                c.no_progress = v.progress.no_progress;
                c.quiet = v.quiet.quiet;
                c.verbose = v.verbose.verbose;
            }
            Command::Checksums(a) => match &a.action {
                ChecksumsAction::Status(s) => c.format = s.format.format,
                ChecksumsAction::Enable(e) => {
                    c.jobs = e.jobs.jobs;
                    c.format = e.format.format;
                    c.progress = e.progress.progress;
                    c.no_progress = e.progress.no_progress;
                    c.quiet = e.quiet.quiet;
                }
                ChecksumsAction::Disable(d) => {
                    c.format = d.format.format;
                    c.quiet = d.quiet.quiet;
                }
            },
            Command::Inspect(i) => c.format = i.format.format,
            Command::Corrupt(k) => {
                c.quiet = k.quiet.quiet;
                c.format = k.format.format;
            }
            Command::Bench(b) => {
                c.format = b.format;
                c.quiet = b.quiet;
            }
            Command::Ledger(l) => c.format = l.format.format,
            Command::Demo(_) | Command::Man(_) | Command::Completions(_) => {}
        }
        c
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory with initdb, pg_ctl, postgres and psql (default: the newest 14-19 found).
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<PathBuf>,
    /// Rows in the demo table (100 to 10000000).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    pub rows: u32,
}

/// `--offset`: a byte inside a page of the largest block size (32 kB).
fn parse_offset(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(v) if v < 32768 => Ok(v),
        _ => Err("must be a byte offset inside the page, 0 to 32767".into()),
    }
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
    /// Data directory to damage (required: $PGDATA is never used, so that a drill cannot hit
    /// the cluster of the current environment by accident).
    #[arg(short = 'D', long = "pgdata", required = true)]
    pub pgdata: Option<PathBuf>,
    #[command(flatten)]
    pub target: BlockArgs,
    /// What to do to the block.
    #[arg(long, value_enum)]
    pub how: CorruptHow,
    /// Byte offset inside the page: the byte to flip (flip-bit), or where the zeroed tail
    /// starts (tear: a multiple of 512, the sector size). Rejected by the other kinds.
    #[arg(long, value_parser = parse_offset)]
    pub offset: Option<usize>,
    /// Other block for swap (default: the next block). Rejected by the other kinds.
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(0..=MAX_BLOCK_NUMBER))]
    pub with: Option<u64>,
    /// Seed of the random bytes of garbage (default: derived from the block number), so that a
    /// drill can be repeated byte for byte. Rejected by the other kinds.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Do not ask for confirmation. Required when stdin is not a terminal: without it, such a
    /// run is refused at once and stdin is never read ("yes" piped in is not a confirmation).
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Recompute the page checksum afterwards, so only structure checks can see the damage.
    #[arg(long)]
    pub fix_checksum: bool,
    /// Allow writing into this tablespace: its OID (the link pg_tblspc/OID) or its directory.
    /// Without it, a file whose real path leaves the data directory is refused: one in a
    /// tablespace (a `cp -a` copy shares its original's), or one reached through a symbolic
    /// link; so is a file with another name (a hard link). Repeatable.
    #[arg(long, value_name = "OID|DIR")]
    pub tablespace: Vec<TablespaceName>,
}

/// One block of one relation fork: the target of `inspect` and `corrupt`.
#[derive(Debug, Args)]
pub struct BlockArgs {
    /// Relation file, relative to the data directory or absolute (any segment of the fork).
    #[arg(
        long,
        required_unless_present = "relation",
        conflicts_with = "relation"
    )]
    pub file: Option<PathBuf>,
    /// Relation by name (schema.name or a unique name), found in the offline catalog; unquoted
    /// names are folded to lower case as psql does ("Accounts" for a mixed-case name).
    #[arg(long)]
    pub relation: Option<String>,
    /// Database of --relation (default: search every database).
    #[arg(short = 'd', long)]
    pub database: Option<String>,
    /// Absolute block number in the fork, as `verify` reports it.
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(0..=MAX_BLOCK_NUMBER))]
    pub block: u64,
    /// Fork (main, fsm, vm, init); default: the fork named by --file, else main.
    #[arg(long)]
    pub fork: Option<String>,
}

impl BlockArgs {
    /// The block these flags ask for.
    pub fn request(&self) -> pgcheckdb_pg::ops::target::BlockRequest {
        pgcheckdb_pg::ops::target::BlockRequest {
            file: self.file.clone(),
            relation: self.relation.clone(),
            database: self.database.clone(),
            block: self.block,
            fork: self.fork.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Data directory (default: $PGDATA).
    #[arg(short = 'D', long = "pgdata", env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
    #[command(flatten)]
    pub target: BlockArgs,
    /// Also dump the page's bytes in hex (text), or as a "hex" string (JSON).
    #[arg(long)]
    pub hex: bool,
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
    /// Check a running cluster from its files (physical and standard levels): pages written
    /// while read are re-read, pages newer than the last checkpoint may be "in flux".
    #[arg(long)]
    pub online: bool,
    /// With --online: connect to the server, as psql's --dbname: a database name, or a
    /// connection string or URL (PGHOST, PGPORT, PGUSER and PGDATABASE fill in the rest), for
    /// the end of WAL and a CHECKPOINT before the in-flux pages are read once more. ""
    /// connects with the environment alone.
    #[arg(long, value_name = "DBNAME|CONNSTR", requires = "online")]
    pub dbname: Option<String>,
    /// With --online --dbname: never ask for a CHECKPOINT; wait for the next one (at most
    /// checkpoint_timeout) when pages are in flux.
    #[arg(long, requires = "dbname")]
    pub no_checkpoint: bool,
    /// With --online --dbname on a standby: pause its WAL replay for the run (resumed at the
    /// end, on an error, on Ctrl-C), so that every level runs, the extended one included.
    #[arg(long, requires = "dbname")]
    pub pause_replay: bool,
    /// With --pause-replay: the longest pause (30s, 10min, 1h; default 10min). When it runs
    /// out, replay is resumed and the run ends with a tool error.
    #[arg(long, value_name = "DURATION", requires = "pause_replay", value_parser = parse_duration)]
    pub max_pause: Option<std::time::Duration>,
    /// Read at most this many MB per second.
    #[arg(long, value_name = "MB/s", value_parser = parse_rate, allow_negative_numbers = true)]
    pub max_rate: Option<f64>,
    /// Extended level: memory for cross-page facts before they spill to disk (64MB, 1G, ...;
    /// default 1G, at least 32kB).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory: Option<u64>,
    /// Extended level: directory for spill files (default: the system temp dir; never inside
    /// the data directory).
    #[arg(long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
    /// Only plan: files, blocks and bytes per level and an expected time from a short sample
    /// read; nothing is checked.
    #[arg(long)]
    pub estimate: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// A base backup to verify instead of -D: a plain one (a directory with backup_label) or
    /// a tar-format one (base.tar[.gz|.lz4|.zst], <oid>.tar*, pg_wal.tar*), read without
    /// unpacking.
    #[arg(long, value_name = "DIR", conflicts_with = "online")]
    pub backup: Option<PathBuf>,
    /// Record the run's damage in a ledger after the run (docs/LEDGER.md): a SQLite file
    /// (the flag alone: $XDG_STATE_HOME/pgcheckdb/ledger.sqlite, else
    /// ~/.local/state/pgcheckdb/ledger.sqlite; never inside the data directory), or a
    /// PostgreSQL connection string or URL (`postgresql://...`, `host=... dbname=...`): a
    /// central ledger for a fleet. A ledger that cannot be written is an error (exit 1).
    #[arg(long, value_name = "FILE|CONNSTR", num_args = 0..=1, default_missing_value = "",
          conflicts_with_all = ["backup", "estimate"])]
    pub ledger: Option<String>,
    /// The host name recorded with --ledger (default: this machine's host name).
    #[arg(long, value_name = "NAME", requires = "ledger")]
    pub ledger_host: Option<String>,
}

/// Which part of the cluster `verify` checks (pg_amcheck's and pg_checksums' flags; patterns
/// as in psql: `*`, `?`, `"Quoted"`, `db.schema.name`).
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Scope")]
pub struct ScopeArgs {
    /// Check only databases matching PATTERN (repeatable).
    #[arg(short = 'd', long = "database", value_name = "PATTERN")]
    pub database: Vec<String>,
    /// Do not check databases matching PATTERN.
    #[arg(long = "exclude-database", value_name = "PATTERN")]
    pub exclude_database: Vec<String>,
    /// Check only relations in schemas matching PATTERN ([db.]schema).
    #[arg(short = 's', long = "schema", value_name = "PATTERN")]
    pub schema: Vec<String>,
    /// Do not check relations in schemas matching PATTERN.
    #[arg(short = 'S', long = "exclude-schema", value_name = "PATTERN")]
    pub exclude_schema: Vec<String>,
    /// Check tables, materialized views, sequences and TOAST tables matching PATTERN
    /// ([[db.]schema.]name), with their indexes and TOAST.
    #[arg(short = 't', long = "table", value_name = "PATTERN")]
    pub table: Vec<String>,
    /// Do not check tables matching PATTERN.
    #[arg(short = 'T', long = "exclude-table", value_name = "PATTERN")]
    pub exclude_table: Vec<String>,
    /// Check indexes matching PATTERN.
    #[arg(short = 'i', long = "index", value_name = "PATTERN")]
    pub index: Vec<String>,
    /// Do not check indexes matching PATTERN.
    #[arg(short = 'I', long = "exclude-index", value_name = "PATTERN")]
    pub exclude_index: Vec<String>,
    /// Do not add the indexes of the tables selected.
    #[arg(long)]
    pub no_dependent_indexes: bool,
    /// Do not add the TOAST tables of the tables selected.
    #[arg(long)]
    pub no_dependent_toast: bool,
    /// Check only the relation files with this file number (pg_checksums -f; repeatable).
    #[arg(short = 'f', long = "filenode", value_name = "FILENODE")]
    pub filenode: Vec<u32>,
    /// A pattern that matches nothing is not an error.
    #[arg(long)]
    pub no_strict_names: bool,
}

fn parse_memory(text: &str) -> Result<u64, String> {
    use pgcheckdb_pg::check::extended::MIN_MEMORY;
    let bytes = pgcheckdb_pg::check::extended::parse_size(text)?;
    if bytes < MIN_MEMORY {
        return Err(format!(
            "{text} is too little for the extended level: at least {}kB (below it the heap -> index filters of even a small table would miss most lacking entries)",
            MIN_MEMORY >> 10
        ));
    }
    Ok(bytes)
}

#[derive(Debug, Args)]
pub struct ChecksumsArgs {
    #[command(subcommand)]
    pub action: ChecksumsAction,
}

#[derive(Debug, Subcommand)]
pub enum ChecksumsAction {
    /// Show the checksum state recorded in pg_control.
    Status(StatusCmd),
    /// Turn data checksums on in a stopped cluster: stamp every page, sync, then switch pg_control.
    Enable(EnableCmd),
    /// Turn data checksums off in a stopped cluster: the pg_control change alone.
    Disable(DisableCmd),
}

/// `checksums status`: prints the state, so only `--format`.
#[derive(Debug, Args)]
pub struct StatusCmd {
    /// Data directory (default: $PGDATA).
    #[arg(short = 'D', long = "pgdata", env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
    #[command(flatten)]
    pub format: FormatFlag,
    #[command(flatten)]
    pub no_progress: NoProgressAccepted,
}

/// `checksums enable` with the output flags it honours.
#[derive(Debug, Args)]
pub struct EnableCmd {
    #[command(flatten)]
    pub args: checksums::EnableArgs,
    #[command(flatten)]
    pub jobs: JobsFlag,
    #[command(flatten)]
    pub format: FormatFlag,
    #[command(flatten)]
    pub progress: ProgressFlags,
    #[command(flatten)]
    pub quiet: QuietFlag,
}

/// `checksums disable`: one pg_control write; `-q` drops the warning about standbys and the
/// result line (the exit status says it switched).
#[derive(Debug, Args)]
pub struct DisableCmd {
    #[command(flatten)]
    pub args: checksums::DisableArgs,
    #[command(flatten)]
    pub format: FormatFlag,
    #[command(flatten)]
    pub quiet: QuietFlag,
    #[command(flatten)]
    pub no_progress: NoProgressAccepted,
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
/// `--help` and `--version` prints them and returns 0; with no command (or `checksums`,
/// `bench` without theirs) prints the usage on stderr and returns 1.
pub fn parse() -> Result<Cli, u8> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command()
        .try_get_matches()
        .map_err(|e| report_parse_error(&e))?;
    if let Some(line) = conflicting_sources(&matches) {
        eprintln_text!("pgcheckdb: error: {line} (try --help)");
        return Err(1);
    }
    Cli::from_arg_matches(&matches).map_err(|e| report_parse_error(&e))
}

/// Flags that clap cannot refuse together because one of them also comes from the
/// environment: `verify -D DIR --backup DIR` (`$PGDATA` alone does not conflict).
fn conflicting_sources(matches: &clap::ArgMatches) -> Option<String> {
    use clap::parser::ValueSource;
    let (name, m) = matches.subcommand()?;
    let given = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine);
    (name == "verify" && given("pgdata") && given("backup")).then(|| {
        "-D and --backup cannot be used together: --backup DIR names a base backup to verify, -D DIR a data directory (a plain backup can be given with either)".to_string()
    })
}

/// Prints a clap error the way the contract wants and returns the exit status.
pub fn report_parse_error(e: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("{}", e.render());
            1
        }
        _ => {
            eprintln_text!("pgcheckdb: error: {} (try --help)", error_line(e));
            1
        }
    }
}

/// The one line of a usage error, with clap's suggestion as "did you mean".
pub fn error_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let mut line = one_line(&e.render().to_string());
    let suggestions: Vec<String> = [ContextKind::SuggestedSubcommand, ContextKind::SuggestedArg]
        .into_iter()
        .filter_map(|kind| e.get(kind))
        .flat_map(|value| match value {
            ContextValue::String(s) => vec![s.clone()],
            ContextValue::Strings(v) => v.clone(),
            _ => Vec::new(),
        })
        .collect();
    // A path given without -D (`verify /path`): say how to give it, as pg_checksums users
    // type `-D`.
    if e.kind() == clap::error::ErrorKind::UnknownArgument && suggestions.is_empty() {
        if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            if !arg.starts_with('-') {
                line.push_str(&format!(
                    "; did you mean '-D {arg}'? (the data directory is given with -D)"
                ));
            }
        }
    }
    if !suggestions.is_empty() {
        let quoted: Vec<String> = suggestions.iter().map(|s| format!("'{s}'")).collect();
        line.push_str(&format!("; did you mean {}?", quoted.join(" or ")));
    }
    line
}

/// `--max-rate`: a finite number of MB per second above 0.
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        Ok(_) => Err("must be more than 0 and at most 1000000 (MB/s)".into()),
        Err(_) => Err("must be a number of MB/s, such as 200 or 12.5".into()),
    }
}

/// A duration: a number of seconds, or with a unit (`ms`, `s`, `min`, `h`).
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("\"{text}\" is not a duration (30s, 10min, 1h)"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "min" | "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown unit \"{other}\" (ms, s, min, h)")),
    };
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("\"{text}\" is not a positive duration"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
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
            (args.args.target.relation.as_deref(), args.args.target.block),
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

    #[test]
    fn durations_take_units() {
        use std::time::Duration;
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10min"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 weeks").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
