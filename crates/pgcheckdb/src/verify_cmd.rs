//! `pgcheckdb verify`: resolve the data directory, refuse
//! what cannot be checked safely, run the scan and print the report.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::cluster::check_stopped;
use pgcheckdb_pg::control::{read_pg_version, ControlFile};
use pgcheckdb_pg::naming::name_findings;
use pgcheckdb_pg::verify::{self, Level, Plan, Structure, VerifyOptions};
use pgcheckdb_report::{write_finding, write_summary, Format};
use pgcheckdb_scan::Progress;

use crate::cli::{Common, LevelArg, OutputFormat, VerifyArgs};
use crate::{progress, EXIT_CORRUPT, EXIT_FAILED, EXIT_OK};

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
    if !dir.join("global").join("pg_control").exists() {
        bail!(
            "\"{}\" is not a PostgreSQL data directory: global/pg_control is missing",
            dir.display()
        );
    }
    Ok(dir.clone())
}

/// Reads pg_control and checks it against PG_VERSION.
pub fn read_control(datadir: &Path) -> anyhow::Result<ControlFile> {
    let control = ControlFile::read_from_datadir(datadir)?;
    if let (Some(major), Some(file_major)) = (control.major, read_pg_version(datadir)) {
        if major != file_major {
            bail!("pg_control says PostgreSQL {major} but PG_VERSION says {file_major}");
        }
    }
    Ok(control)
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

pub fn run(common: &Common, args: &VerifyArgs) -> anyhow::Result<u8> {
    if args.online {
        bail!("--online is not supported yet; stop the server or verify a stopped copy");
    }
    let datadir = resolve_datadir(args.pgdata.as_ref())?;
    let control = read_control(&datadir)?;
    if let Err(reason) = check_stopped(&datadir, &control) {
        bail!("cannot verify \"{}\" offline: {reason}", datadir.display());
    }
    let requested = if args.physical_only {
        LevelArg::Physical
    } else {
        args.level
    };
    let level = match requested {
        LevelArg::Physical => Level::Physical,
        LevelArg::Standard => Level::Standard,
        LevelArg::Extended => {
            if !common.quiet {
                eprintln!("pgcheckdb: warning: the cross-page checks of the extended level are not implemented yet; running the standard level");
            }
            Level::Standard
        }
    };
    let opts = VerifyOptions {
        jobs: jobs(common),
        level,
        max_bytes_per_sec: args.max_rate.map(|mb| (mb * 1e6) as u64),
        ..VerifyOptions::default()
    };
    let format = format(common);
    if format == Format::Text && !common.quiet {
        eprintln!(
            "pgcheckdb: PostgreSQL {}, block size {}, segment size {} blocks, data checksums {}, {} jobs",
            control.major.map_or("?".to_string(), |m| m.to_string()),
            control.blcksz,
            control.relseg_size,
            control.checksum_state(),
            opts.jobs
        );
        if control.data_checksum_version == 0 {
            let what = match level {
                Level::Physical => "page headers only",
                _ => "page headers and the structure inside pages",
            };
            eprintln!("pgcheckdb: data checksums are off in this cluster: checking {what}");
        }
    }
    let started = std::time::Instant::now();
    let plan = Plan::build(&datadir, control);
    let catalog = Catalog::read(&datadir, &plan.control);
    let structure = (level != Level::Physical).then(|| Structure::from_catalog(&plan, &catalog));
    let total: u64 = plan.scan_files().iter().map(|f| f.len).sum();
    let progress_state = Progress::default();
    let mut report = progress::with_bar(progress::wanted(common), total, &progress_state, || {
        verify::run(&plan, &opts, &progress_state, structure.as_ref())
    });
    name_findings(&mut report, &plan, &catalog);
    report.summary.seconds = started.elapsed().as_secs_f64();
    for e in &report.tool_errors {
        eprintln!("pgcheckdb: error: {e}");
    }
    print_report(format, common.quiet, &report)?;
    Ok(if report.error_count() > 0 {
        EXIT_CORRUPT
    } else if !report.tool_errors.is_empty() {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

fn print_report(format: Format, quiet: bool, report: &verify::VerifyReport) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for f in &report.findings {
        if format == Format::Text && quiet && f.severity == pgcheckdb_pg::finding::Severity::Info {
            continue;
        }
        write_finding(&mut out, format, f)?;
    }
    write_summary(&mut out, format, &report.summary, &report.findings)?;
    out.flush()
}
