//! `pgcheckdb verify`: the flags turned into one `VerifyRequest`, run by the library's
//! `Verifier` with this program as its host (`host`: the lines between the steps, progress,
//! signals, the server connection of `server`), and the outcome printed (`print`,
//! `estimate`, `metrics`) and mapped to an exit status.

mod estimate;
mod host;
mod metrics;
mod print;
pub(crate) mod server;

use anyhow::{bail, Context};
use pgcheckdb_pg::ops::verifier::{
    Finished, Interrupted, OnlineRequest, Outcome, Verifier, VerifyRequest,
};
use pgcheckdb_pg::scope::ScopeOptions;
use pgcheckdb_pg::verify::options::Level;
use pgcheckdb_pg::verify::report::{LedgerCounts, Summary};
use pgcheckdb_report::{human_bytes, Format};

use crate::cli::{Common, LevelArg, ScopeArgs, VerifyArgs};
use crate::exit::{EXIT_CORRUPT, EXIT_FAILED, EXIT_OK};
use crate::ledger::model::{level_rank, RunInfo};
use crate::ledger::{self, Location};
use crate::{clock, signals};

/// Runs `verify`; on every failure the JSON stream still ends with a summary carrying the
/// error (the error itself is printed by `main`, once).
pub fn run(common: &Common, args: &VerifyArgs) -> anyhow::Result<u8> {
    let format = common.report_format();
    let level = requested_level(args);
    let started_at = clock::now_rfc3339();
    let result = run_checked(common, args);
    let Err(e) = result else { return result };
    if format == Format::Json {
        let summary = Summary {
            level: level.name().to_string(),
            error: Some(format!("{e:#}")),
            started_at: Some(started_at),
            finished_at: Some(clock::now_rfc3339()),
            ..Summary::default()
        };
        let _ = print::report(format, true, &[], &summary);
    }
    if metrics::wanted(common) {
        let summary = Summary {
            level: level.name().to_string(),
            error: Some(format!("{e:#}")),
            ..Summary::default()
        };
        let dir = args.backup.as_deref().or(args.pgdata.as_deref());
        // The run's own error is the one main prints; a metrics error comes on a line before.
        if let Err(m) = metrics::emit(common, dir, &summary, &[], EXIT_FAILED) {
            eprintln_text!("pgcheckdb: error: {m:#}");
        }
    }
    match signals::caught() {
        // Interrupted before the scan: say so here, exit with the signal's status.
        Some(sig) => {
            eprintln_text!("pgcheckdb: error: {e:#}");
            Ok(signals::exit_code(sig))
        }
        None => Err(e),
    }
}

/// The run: the request handed to the library, its outcome printed.
fn run_checked(common: &Common, args: &VerifyArgs) -> anyhow::Result<u8> {
    let started_at = clock::now_rfc3339();
    signals::install_for_reads().context("could not install the signal handlers")?;
    let mut host = host::Terminal::new(common);
    check_level_flags(args)?;
    let ledger = ledger_location(args)?;
    let outcome = Verifier::new(request(common, args), &mut host).run()?;
    match outcome {
        Outcome::Estimate {
            estimate,
            mut summary,
        } => {
            summary.started_at = Some(started_at);
            summary.finished_at = Some(clock::now_rfc3339());
            estimate::print(common.report_format(), &estimate, &summary)?;
            Ok(EXIT_OK)
        }
        Outcome::Report(finished) => {
            print_finished(common, args, ledger.as_ref(), finished, started_at)
        }
    }
}

/// `--max-pause` when not given.
const DEFAULT_MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(600);

/// The request of the flags.
fn request(common: &Common, args: &VerifyArgs) -> VerifyRequest {
    VerifyRequest {
        pgdata: args.pgdata.clone(),
        backup: args.backup.clone(),
        level: requested_level(args),
        online: args.online.then(|| OnlineRequest {
            dbname: args.dbname.clone(),
            checkpoint_allowed: !args.no_checkpoint,
            pause_replay: args.pause_replay,
            max_pause: args.max_pause.unwrap_or(DEFAULT_MAX_PAUSE),
        }),
        jobs: common.jobs_or_all_cores(),
        max_bytes_per_sec: args.max_rate.map(|mb| (mb * 1e6) as u64),
        verbose: common.verbose,
        estimate: args.estimate,
        scope: scope_options(&args.scope),
        memory: args.memory,
        temp_dir: args.temp_dir.clone(),
    }
}

/// Prints the tool errors, the per-relation lines, the report and the metrics of a run that
/// got through its scan; returns the exit status.
fn print_finished(
    common: &Common,
    args: &VerifyArgs,
    ledger: Option<&Location>,
    mut f: Finished,
    started_at: String,
) -> anyhow::Result<u8> {
    let report = &mut f.report;
    report.summary.started_at = Some(started_at);
    report.summary.finished_at = Some(clock::now_rfc3339());
    if let Some(i) = &f.interrupted {
        report.tool_errors.insert(0, interruption_text(i));
        report.summary.error = report.error_line();
    }
    // The ledger is written after the run and before anything is printed, so that the summary
    // and the metrics carry its counts; a ledger that cannot be written is an error of its own.
    let ledger_error = match ledger {
        Some(location) => match record_in_ledger(location, args, &f) {
            Ok(counts) => {
                f.report.summary.ledger = Some(counts);
                None
            }
            Err(e) => Some(format!("{e:#}")),
        },
        None => None,
    };
    let report = &mut f.report;
    for e in &report.tool_errors {
        eprintln_text!("pgcheckdb: error: {e}");
    }
    if let Some(e) = &ledger_error {
        eprintln_text!("pgcheckdb: error: {e}");
    }
    let format = common.report_format();
    if let Some(relations) = &f.relations {
        print::relations(format, relations)?;
    }
    if !common.metrics_stdout {
        print::report(format, common.quiet, &report.findings, &report.summary)?;
    }
    if let (Some(location), Some(counts)) = (ledger, &f.report.summary.ledger) {
        if format == Format::Text && !common.quiet && !common.metrics_stdout {
            println_text!(
                "pgcheckdb: {}: {} new, {} open, {} repaired",
                location.describe(),
                counts.new,
                counts.open,
                counts.repaired
            );
        }
    }
    let code = match (exit_code(&f), &ledger_error) {
        (EXIT_OK | EXIT_CORRUPT, Some(_)) => EXIT_FAILED,
        (code, _) => code,
    };
    let metrics = match metrics::wanted(common) {
        true => metrics::emit(
            common,
            Some(&f.shown),
            &f.report.summary,
            &f.report.findings,
            code,
        ),
        false => Ok(()),
    };
    match metrics {
        Ok(()) => Ok(code),
        Err(e) => {
            // Said here, once: the report above stands (what was checked and what was found),
            // but the run did not do all it was asked to.
            eprintln_text!("pgcheckdb: error: {e:#}");
            Ok(match code {
                EXIT_OK | EXIT_CORRUPT => EXIT_FAILED,
                interrupted => interrupted,
            })
        }
    }
}

/// The ledger of `--ledger`, refused before the run when it lies inside the data directory.
fn ledger_location(args: &VerifyArgs) -> anyhow::Result<Option<Location>> {
    let Some(text) = &args.ledger else {
        return Ok(None);
    };
    let location = Location::parse(text)?;
    if let Some(dir) = &args.pgdata {
        location.refuse_inside(dir)?;
    }
    Ok(Some(location))
}

/// Records the finished run in the ledger.
fn record_in_ledger(
    location: &Location,
    args: &VerifyArgs,
    f: &Finished,
) -> anyhow::Result<LedgerCounts> {
    let summary = &f.report.summary;
    let run = RunInfo {
        host: match &args.ledger_host {
            Some(h) => h.clone(),
            None => host_name()?,
        },
        system_identifier: f.system_identifier.to_string(),
        pgdata: f.shown.display().to_string(),
        started_at: summary.started_at.clone().unwrap_or_default(),
        finished_at: summary.finished_at.clone().unwrap_or_default(),
        level: level_rank(&summary.level),
        scope: scope_text(&args.scope),
        // A page that could not be read, or (--online) that stayed in flux, was not judged:
        // such a run repairs nothing.
        complete: f.interrupted.is_none()
            && f.report.tool_errors.is_empty()
            && summary.skipped_blocks == 0
            && summary
                .online
                .as_ref()
                .is_none_or(|o| o.in_flux_blocks == 0),
    };
    let r = ledger::record(location, &run, &f.report.findings)?;
    Ok(LedgerCounts {
        new: r.new,
        open: r.open,
        repaired: r.repaired,
    })
}

/// This machine's host name.
fn host_name() -> anyhow::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length, which is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        bail!(
            "could not read the host name ({}): give --ledger-host NAME",
            std::io::Error::last_os_error()
        );
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The scope flags as one text ("" for the whole cluster): a ledger entry found under one
/// scope is repaired only by a run over the same scope or the whole cluster.
fn scope_text(a: &ScopeArgs) -> String {
    if scope_options(a).is_everything() {
        return String::new();
    }
    let mut parts = Vec::new();
    let lists: [(&str, &Vec<String>); 8] = [
        ("-d", &a.database),
        ("--exclude-database", &a.exclude_database),
        ("-s", &a.schema),
        ("-S", &a.exclude_schema),
        ("-t", &a.table),
        ("-T", &a.exclude_table),
        ("-i", &a.index),
        ("-I", &a.exclude_index),
    ];
    for (flag, values) in lists {
        let mut v = values.clone();
        v.sort();
        v.dedup();
        parts.extend(v.into_iter().map(|x| format!("{flag} {x}")));
    }
    let mut nodes = a.filenode.clone();
    nodes.sort_unstable();
    nodes.dedup();
    parts.extend(nodes.into_iter().map(|n| format!("-f {n}")));
    if a.no_dependent_indexes {
        parts.push("--no-dependent-indexes".into());
    }
    if a.no_dependent_toast {
        parts.push("--no-dependent-toast".into());
    }
    parts.join(" ")
}

/// The first tool error of a scan stopped by a signal.
fn interruption_text(i: &Interrupted) -> String {
    format!(
        "interrupted by {} during the block scan after {} of {}; the findings below cover only the part checked",
        i.signal.name,
        human_bytes(i.bytes_done),
        human_bytes(i.bytes_total)
    )
}

/// The signal's status when one stopped the scan; else 2 with an error finding, 1 with a
/// tool error, 0.
fn exit_code(f: &Finished) -> u8 {
    if let Some(i) = &f.interrupted {
        signals::exit_code(i.signal.number)
    } else if f.report.error_count() > 0 {
        EXIT_CORRUPT
    } else if !f.report.tool_errors.is_empty() {
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

/// `--memory` and `--temp-dir` size and place the extended level's facts: at another level
/// they would be silently ignored, so they are an error, as other misplaced flags are.
fn check_level_flags(args: &VerifyArgs) -> anyhow::Result<()> {
    let level = requested_level(args);
    if level == Level::Extended {
        return Ok(());
    }
    let name = match level {
        Level::Physical => "physical",
        _ => "standard",
    };
    for (given, flag) in [
        (args.memory.is_some(), "--memory"),
        (args.temp_dir.is_some(), "--temp-dir"),
    ] {
        if given {
            bail!("{flag} applies to the extended level only (--level extended); the {name} level holds no cross-page facts");
        }
    }
    Ok(())
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

/// The scope options of the command line.
fn scope_options(a: &ScopeArgs) -> ScopeOptions {
    ScopeOptions {
        databases: a.database.clone(),
        exclude_databases: a.exclude_database.clone(),
        schemas: a.schema.clone(),
        exclude_schemas: a.exclude_schema.clone(),
        tables: a.table.clone(),
        exclude_tables: a.exclude_table.clone(),
        indexes: a.index.clone(),
        exclude_indexes: a.exclude_index.clone(),
        no_dependent_indexes: a.no_dependent_indexes,
        no_dependent_toast: a.no_dependent_toast,
        filenodes: a.filenode.clone(),
        strict_names: !a.no_strict_names,
    }
}
