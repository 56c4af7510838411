//! `pgcheckdb verify`: resolve the data directory, refuse
//! what cannot be checked safely, run the scan and print the report.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::cluster::check_stopped;
use pgcheckdb_pg::control::{read_pg_version_file, ControlFile};
use pgcheckdb_pg::extended::{ExtendedConfig, ExtendedPlan};
use pgcheckdb_pg::naming::name_findings;
use pgcheckdb_pg::verify::{self, Level, Plan, Structure, Summary, VerifyOptions};
use pgcheckdb_report::{human_bytes, write_finding, write_summary, Format};
use pgcheckdb_scan::open::{not_regular, read_regular};
use pgcheckdb_scan::Progress;

use crate::cli::{Common, LevelArg, OutputFormat, VerifyArgs};
use crate::{progress, signals, EXIT_CORRUPT, EXIT_FAILED, EXIT_OK};

/// The data directory from `-D` or `$PGDATA`, checked to look like one.
pub fn resolve_datadir(arg: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    let Some(dir) = arg else {
        bail!("no data directory specified: use -D DIR or set PGDATA");
    };
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("could not access data directory \"{}\"", dir.display()))?;
    if !meta.is_dir() {
        bail!("\"{}\" is not a directory", dir.display());
    }
    let control = dir.join("global").join("pg_control");
    match std::fs::metadata(&control) {
        Ok(_) => Ok(dir.clone()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
            "\"{}\" is not a PostgreSQL data directory: global/pg_control is missing",
            dir.display()
        ),
        Err(e) => {
            Err(anyhow!(e)).with_context(|| format!("could not access \"{}\"", control.display()))
        }
    }
}

/// Reads pg_control, checks it against PG_VERSION and refuses versions pgcheckdb does not
/// know the formats of.
pub fn read_control(datadir: &Path) -> anyhow::Result<ControlFile> {
    let control = ControlFile::read_from_datadir(datadir)?;
    let file_major = read_pg_version_file(datadir).map_err(|e| anyhow!(e))?;
    if let Some(major) = control.major {
        if major != file_major {
            bail!("pg_control says PostgreSQL {major} but PG_VERSION says {file_major}");
        }
    }
    control
        .supported_major(file_major)
        .map_err(|e| anyhow!(e))?;
    Ok(control)
}

/// `postmaster.pid` must be absent or a readable regular file: anything else leaves open
/// whether a server is running.
fn check_pid_file(datadir: &Path) -> anyhow::Result<()> {
    match read_regular(&datadir.join("postmaster.pid"), 64 << 10) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => {
            let why = match not_regular(&e) {
                Some(what) => format!("it is a {what}, not a regular file"),
                None => e.to_string(),
            };
            bail!("could not read \"postmaster.pid\" ({why}): cannot tell whether a server is running")
        }
    }
}

fn jobs(common: &Common) -> usize {
    common
        .jobs
        .map(|j| j as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn format(common: &Common) -> Format {
    match common.format {
        OutputFormat::Text => Format::Text,
        OutputFormat::Json => Format::Json,
    }
}

/// Runs `verify`; on every failure the JSON stream still ends with a summary carrying the
/// error (the error itself is printed by `main`, once).
pub fn run(common: &Common, args: &VerifyArgs) -> anyhow::Result<u8> {
    let format = format(common);
    let level = requested_level(args);
    let result = run_checked(common, args);
    let Err(e) = result else { return result };
    if format == Format::Json {
        let summary = Summary {
            level: level.name().to_string(),
            error: Some(format!("{e:#}")),
            ..Summary::default()
        };
        let _ = print_report(format, true, &[], &summary);
    }
    match signals::caught() {
        // Interrupted before the scan: say so here, exit with the signal's status.
        Some(sig) => {
            eprintln!("pgcheckdb: error: {e:#}");
            Ok(signals::exit_code(sig))
        }
        None => Err(e),
    }
}

fn requested_level(args: &VerifyArgs) -> Level {
    let requested = if args.physical_only {
        LevelArg::Physical
    } else {
        args.level
    };
    match requested {
        LevelArg::Physical => Level::Physical,
        LevelArg::Standard => Level::Standard,
        LevelArg::Extended => Level::Extended,
    }
}

/// Stops with the interruption error when a signal was caught; `state` says where.
fn check_interrupt(state: &str) -> anyhow::Result<()> {
    match signals::caught() {
        Some(sig) => bail!(
            "interrupted by {} {state}; nothing was checked",
            signals::name(sig)
        ),
        None => Ok(()),
    }
}

fn run_checked(common: &Common, args: &VerifyArgs) -> anyhow::Result<u8> {
    if args.online {
        bail!("--online is not supported yet; stop the server or verify a stopped copy");
    }
    signals::install().context("could not install the signal handlers")?;
    let datadir = resolve_datadir(args.pgdata.as_ref())?;
    let control = read_control(&datadir)?;
    check_pid_file(&datadir)?;
    if let Err(reason) = check_stopped(&datadir, &control) {
        bail!("cannot verify \"{}\" offline: {reason}", datadir.display());
    }
    let level = requested_level(args);
    let extended_config = (level == Level::Extended)
        .then(|| extended_config(common, args, &datadir))
        .transpose()?;
    let opts = VerifyOptions {
        jobs: jobs(common),
        level,
        max_bytes_per_sec: args.max_rate.map(|mb| (mb * 1e6) as u64),
        ..VerifyOptions::default()
    };
    let format = format(common);
    if format == Format::Text && !common.quiet {
        announce(&control, level, opts.jobs);
    }
    let started = std::time::Instant::now();
    let plan = Plan::build(&datadir, control);
    check_interrupt("while listing the data directory")?;
    let catalog = Catalog::read(&datadir, &plan.control);
    check_interrupt("while reading the catalogs")?;
    let extended = match &extended_config {
        Some(config) => Some(
            ExtendedPlan::build(&plan, &catalog, config, opts.jobs).with_context(|| {
                format!(
                    "could not create a spill directory in \"{}\"",
                    config.temp_dir.display()
                )
            })?,
        ),
        None => None,
    };
    let structure = (level != Level::Physical).then(|| Structure {
        extended: extended.as_ref(),
        ..Structure::from_catalog(&plan, &catalog)
    });
    let total: u64 = plan.scan_files().iter().map(|f| f.len).sum();
    let progress_state = Progress::default();
    let mut report = signals::cancel_on_signal(&progress_state, || {
        progress::with_bar(progress::wanted(common), total, &progress_state, || {
            verify::run(&plan, &opts, &progress_state, structure.as_ref())
        })
    });
    name_findings(&mut report, &plan, &catalog);
    report
        .tool_errors
        .extend(catalog.tool_errors.iter().cloned());
    report.summary.seconds = started.elapsed().as_secs_f64();
    let interrupted = signals::caught();
    if let Some(sig) = interrupted {
        let done = progress_state
            .bytes_done
            .load(std::sync::atomic::Ordering::Relaxed);
        report.tool_errors.insert(
            0,
            format!(
                "interrupted by {} during the block scan after {} of {}; the findings below cover only the part checked",
                signals::name(sig),
                human_bytes(done),
                human_bytes(total)
            ),
        );
    }
    report.summary.error = report
        .tool_errors
        .first()
        .map(|first| match report.tool_errors.len() {
            1 => first.clone(),
            n => format!("{first} (and {} more error(s))", n - 1),
        });
    for e in &report.tool_errors {
        eprintln!("pgcheckdb: error: {e}");
    }
    print_report(format, common.quiet, &report.findings, &report.summary)?;
    Ok(if let Some(sig) = interrupted {
        signals::exit_code(sig)
    } else if report.error_count() > 0 {
        EXIT_CORRUPT
    } else if !report.tool_errors.is_empty() {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

/// `--memory` and `--temp-dir` of the extended level; a spill directory inside the data
/// directory is refused (verify never writes there).
fn extended_config(
    common: &Common,
    args: &VerifyArgs,
    datadir: &Path,
) -> anyhow::Result<ExtendedConfig> {
    let temp_dir = args.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let temp = std::fs::canonicalize(&temp_dir)
        .with_context(|| format!("could not access --temp-dir \"{}\"", temp_dir.display()))?;
    if !temp.is_dir() {
        bail!("--temp-dir \"{}\" is not a directory", temp_dir.display());
    }
    let data = std::fs::canonicalize(datadir)
        .with_context(|| format!("could not access \"{}\"", datadir.display()))?;
    if temp.starts_with(&data) {
        bail!(
            "--temp-dir \"{}\" is inside the data directory; verify never writes there",
            temp_dir.display()
        );
    }
    Ok(ExtendedConfig {
        memory: args.memory,
        temp_dir: temp,
        verbose: common.verbose,
    })
}

/// The opening lines of the text format.
fn announce(control: &ControlFile, level: Level, jobs: usize) {
    eprintln!(
        "pgcheckdb: PostgreSQL {}, block size {}, segment size {} blocks, data checksums {}, {} jobs",
        control.major.map_or("?".to_string(), |m| m.to_string()),
        control.blcksz,
        control.relseg_size,
        control.checksum_state(),
        jobs
    );
    if control.data_checksum_version == 0 {
        let what = match level {
            Level::Physical => "page headers only",
            _ => "page headers and the structure inside pages",
        };
        eprintln!("pgcheckdb: data checksums are off in this cluster: checking {what}");
    }
}

fn print_report(
    format: Format,
    quiet: bool,
    findings: &[pgcheckdb_pg::finding::Finding],
    summary: &Summary,
) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for f in findings {
        if format == Format::Text && quiet && f.severity == pgcheckdb_pg::finding::Severity::Info {
            continue;
        }
        write_finding(&mut out, format, f)?;
    }
    write_summary(&mut out, format, summary, findings)?;
    out.flush()
}
