//! `pgcheckdb checksums status|enable|disable`: show the page-verify switch and turn it on or off
//! in a stopped cluster. The PostgreSQL side lives in `pgcheckdb_pg::ops::enable`; this file resolves
//! the arguments, prints and maps outcomes to exit codes.
//!
//! Exit codes of `enable`: 0 checksums are on (or a dry run found nothing in the way); 1 refused
//! or could not finish (nothing switched; a rerun completes); 2 damaged pages found: they are
//! named, and checksums were not enabled unless `--allow-damaged` was given; 130 / 143
//! interrupted by SIGINT / SIGTERM (nothing switched). `enable` and `disable` hold the data
//! directory lock (`postmaster.pid`) for the whole run; a dry run takes none. With
//! `--format json` every exit ends with one `summary` line, refusals and errors included.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use pgcheckdb_pg::ops::enable::{
    self, EnableOptions, EnableOutcome, EnableReport, Enabler, SwitchError,
};
use pgcheckdb_pg::ops::lock::DataDirLock;
use pgcheckdb_pg::ops::open::{read_control, resolve_datadir};
use pgcheckdb_report::{human_bytes, write_finding, Format};
use pgcheckdb_scan::Progress;
use serde_json::json;

use crate::cli::checksums::{DisableArgs, EnableArgs};
use crate::cli::{ChecksumsAction, ChecksumsArgs, Common};
use crate::exit::{EXIT_CORRUPT, EXIT_FAILED, EXIT_OK};
use crate::{progress, signals};

pub fn run(common: &Common, args: &ChecksumsArgs) -> anyhow::Result<u8> {
    match &args.action {
        ChecksumsAction::Status(s) => status(common, s.pgdata.as_ref()),
        ChecksumsAction::Enable(e) => enable_cmd(common, &e.args),
        ChecksumsAction::Disable(d) => disable_cmd(common, &d.args),
    }
}

fn status(common: &Common, pgdata: Option<&PathBuf>) -> anyhow::Result<u8> {
    let datadir = resolve_datadir(pgdata)?;
    let control = read_control(&datadir)?;
    let state = control.checksum_state();
    match common.report_format() {
        Format::Json => println!(
            "{}",
            json!({
                "type": "checksums_status",
                "checksums": state.name(),
                "data_checksum_version": control.data_checksum_version,
                "postgres_version": control.major,
                "pg_control_version": control.pg_control_version,
                "catalog_version": control.catalog_version_no,
                "cluster_state": control.state.to_string(),
                "block_size": control.blcksz,
                "segment_blocks": control.relseg_size,
            })
        ),
        Format::Text => {
            println_text!("Data checksums: {state}");
            println_text!("Data checksum version: {}", control.data_checksum_version);
            println_text!(
                "PostgreSQL version: {}",
                control.major.map_or("unknown".into(), |m| m.to_string())
            );
            println_text!("Database cluster state: {}", control.state);
        }
    }
    Ok(EXIT_OK)
}

/// Prints the `summary` line of a run that ended without a report (refusal, error), so that a
/// JSON reader always gets one.
fn print_failure_summary(fmt: Format, command: &str, outcome: &str, checksums: &str, error: &str) {
    if fmt == Format::Json {
        println!(
            "{}",
            json!({"type": "summary", "command": command, "outcome": outcome,
                   "checksums": checksums, "error": error})
        );
    }
}

/// The checksum state for the summary of a run refused before it read pg_control (read only to
/// report it), or "unknown".
fn state_for_summary(datadir: &Path) -> String {
    pgcheckdb_pg::format::control::ControlFile::read_from_datadir(datadir)
        .map_or_else(|_| "unknown".to_string(), |c| c.checksum_state().name())
}

/// Takes the data directory lock for `command`, unless `dry_run`.
fn lock(datadir: &Path, command: &str, dry_run: bool) -> anyhow::Result<Option<DataDirLock>> {
    if dry_run {
        return Ok(None);
    }
    DataDirLock::acquire(datadir, command)
        .map(Some)
        .map_err(|e| anyhow!("{e}"))
}

fn enable_cmd(common: &Common, args: &EnableArgs) -> anyhow::Result<u8> {
    let fmt = common.report_format();
    signals::install_for_writes()?;
    let enabler = match prepare_enable(args) {
        Ok(e) => e,
        Err((checksums, e)) => {
            let message = format!("cannot enable data checksums: {e:#}");
            print_failure_summary(fmt, "checksums enable", "refused", &checksums, &message);
            bail!(message);
        }
    };
    if let Some(signal) = signals::caught() {
        return Ok(interrupted_enable(fmt, signal, None));
    }
    run_enable(common, args, &enabler)
}

/// Locks, reads pg_control under the lock and plans the run; on failure, the checksum state to
/// report (unchanged, as far as it is known) and the error.
fn prepare_enable(args: &EnableArgs) -> Result<Enabler, (String, anyhow::Error)> {
    let unknown = || "unknown".to_string();
    let datadir = resolve_datadir(args.pgdata.as_ref()).map_err(|e| (unknown(), e.into()))?;
    let lock = lock(&datadir, "checksums enable", args.dry_run).map_err(|e| {
        let state = state_for_summary(&datadir);
        (state, e.context(format!("\"{}\"", datadir.display())))
    })?;
    let control = read_control(&datadir).map_err(|e| (unknown(), e.into()))?;
    let state = control.checksum_state().name();
    Enabler::prepare(&datadir, control, lock)
        .map_err(|e| (state, anyhow!("\"{}\": {e}", datadir.display())))
}

fn run_enable(common: &Common, args: &EnableArgs, enabler: &Enabler) -> anyhow::Result<u8> {
    let fmt = common.report_format();
    let opts = EnableOptions {
        jobs: common.jobs_or_all_cores(),
        dry_run: args.dry_run,
        allow_damaged: args.allow_damaged,
        skip_structure_checks: args.skip_structure_checks,
        ..EnableOptions::default()
    };
    if !common.quiet {
        announce_enable(enabler, &opts);
    }
    let progress_state = Progress::default();
    let result = signals::cancel_on_signal(&progress_state.cancel, || {
        progress::with_bar(
            progress::wanted(common),
            enabler.total_bytes(),
            &progress_state,
            || enabler.run(&opts, &progress_state),
        )
    });
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let (checksums, message) = enable_failure(enabler, &e);
            print_failure_summary(fmt, "checksums enable", "error", checksums, &message);
            bail!(message);
        }
    };
    if report.outcome == EnableOutcome::Interrupted {
        let signal = signals::caught().unwrap_or(libc::SIGINT);
        return Ok(interrupted_enable(fmt, signal, Some(&report)));
    }
    print_enable_report(fmt, common.quiet, &report)?;
    print_enable_notes(common.quiet, &report);
    Ok(enable_exit_code(&report))
}

/// The opening line of `enable`.
fn announce_enable(enabler: &Enabler, opts: &EnableOptions) {
    eprintln_text!(
        "pgcheckdb: {} data checksums in \"{}\": PostgreSQL {}, {} relation files, {}, {} jobs",
        if opts.dry_run {
            "dry run: would enable"
        } else {
            "enabling"
        },
        enabler.datadir().display(),
        enabler
            .postgres_version()
            .map_or("?".into(), |m| m.to_string()),
        enabler.file_count(),
        human_bytes(enabler.total_bytes()),
        opts.jobs
    );
}

/// The checksum state to report and the message of a run that failed.
fn enable_failure(enabler: &Enabler, e: &SwitchError) -> (&'static str, String) {
    if e.control_unchanged() {
        (
            "off",
            format!(
                "{e}; data checksums are still off in \"{}\"",
                enabler.datadir().display()
            ),
        )
    } else {
        ("unknown", e.to_string())
    }
}

/// The lines on stderr after an `enable` report: the warning about standbys, the tool errors,
/// a signal that came after the switch.
fn print_enable_notes(quiet: bool, report: &EnableReport) {
    if report.outcome == EnableOutcome::Enabled && !quiet {
        eprintln_text!(
            "pgcheckdb: warning: standbys and copies of this cluster keep checksums off: rebuild them from this cluster \
             (pg_basebackup) or stop and enable each one too before they are used with it (pg_rewind, backups)"
        );
    }
    for e in &report.tool_errors {
        eprintln_text!("pgcheckdb: error: {e}");
    }
    if let (Some(signal), EnableOutcome::Enabled) = (signals::caught(), report.outcome) {
        eprintln_text!(
            "pgcheckdb: {} arrived after pg_control was switched: data checksums are on",
            signals::name(signal)
        );
    }
}

/// The one line and the summary of an `enable` stopped by a signal; returns the exit status.
fn interrupted_enable(fmt: Format, signal: i32, report: Option<&EnableReport>) -> u8 {
    if fmt == Format::Json {
        let mut line = serde_json::Map::new();
        line.insert("type".into(), json!("summary"));
        line.insert("command".into(), json!("checksums enable"));
        line.insert("outcome".into(), json!("interrupted"));
        line.insert("signal".into(), json!(signals::name(signal)));
        if let Some(Ok(serde_json::Value::Object(s))) =
            report.map(|r| serde_json::to_value(&r.summary))
        {
            line.extend(s);
        }
        line.insert("checksums".into(), json!("off"));
        println!("{}", serde_json::Value::Object(line));
    }
    eprintln_text!(
        "pgcheckdb: interrupted ({}): data checksums are still off; rerun to finish",
        signals::name(signal)
    );
    signals::exit_code(signal)
}

fn enable_exit_code(report: &EnableReport) -> u8 {
    let s = &report.summary;
    match report.outcome {
        EnableOutcome::Enabled if s.damaged_blocks > 0 => {
            eprintln_text!(
                "pgcheckdb: warning: data checksums enabled with {} damaged page(s) left unstamped (--allow-damaged): the server will keep rejecting them",
                s.damaged_blocks
            );
            EXIT_CORRUPT
        }
        EnableOutcome::Enabled => EXIT_OK,
        EnableOutcome::DryRun if s.damaged_blocks > 0 => {
            eprintln_text!(
                "pgcheckdb: error: dry run: {} damaged page(s) found; enable would refuse to switch checksums on without --allow-damaged",
                s.damaged_blocks
            );
            EXIT_CORRUPT
        }
        EnableOutcome::DryRun => EXIT_OK,
        EnableOutcome::RefusedDamaged => {
            eprintln_text!(
                "pgcheckdb: error: {} damaged page(s) found: data checksums were NOT enabled (pg_control unchanged, checksums still off; \
                 the sane pages were stamped and synced); repair or rebuild the relations named above and rerun, or rerun with --allow-damaged",
                s.damaged_blocks
            );
            EXIT_CORRUPT
        }
        EnableOutcome::Incomplete | EnableOutcome::Interrupted => {
            eprintln_text!(
                "pgcheckdb: error: the run did not complete ({} error(s) above): data checksums were NOT enabled (still off); fix the cause and rerun",
                report.tool_errors.len()
            );
            EXIT_FAILED
        }
    }
}

fn print_enable_report(fmt: Format, quiet: bool, report: &EnableReport) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for f in &report.findings {
        write_finding(&mut out, fmt, f)?;
    }
    let s = &report.summary;
    match fmt {
        Format::Json => {
            let mut v = serde_json::to_value(s).map_err(io::Error::other)?;
            if let Some(o) = v.as_object_mut() {
                let mut line = serde_json::Map::new();
                line.insert("type".into(), json!("summary"));
                line.insert("command".into(), json!("checksums enable"));
                line.insert(
                    "outcome".into(),
                    serde_json::to_value(report.outcome).map_err(io::Error::other)?,
                );
                line.extend(std::mem::take(o));
                serde_json::to_writer(&mut out, &line).map_err(io::Error::other)?;
                out.write_all(b"\n")?;
            }
        }
        Format::Text if !quiet || report.outcome == EnableOutcome::Enabled => {
            let verb = if report.outcome == EnableOutcome::DryRun {
                "to write"
            } else {
                "written"
            };
            writeln!(out, "Checksum operation completed")?;
            writeln!(out, "Files scanned:   {}", s.files)?;
            writeln!(out, "Blocks scanned:  {}", s.blocks)?;
            writeln!(out, "Files {verb}:   {}", s.files_written)?;
            writeln!(out, "Blocks {verb}:  {}", s.blocks_rewritten)?;
            writeln!(out, "Blocks already valid: {}", s.blocks_already_valid)?;
            writeln!(out, "New (all-zero) pages: {}", s.new_pages)?;
            writeln!(out, "Damaged pages: {}", s.damaged_blocks)?;
            writeln!(
                out,
                "{} in {:.2} s (scan {:.2} s, sync {:.2} s), {:.2} GB/s",
                human_bytes(s.bytes),
                s.seconds,
                s.scan_seconds,
                s.sync_seconds,
                s.gb_per_second
            )?;
            match report.outcome {
                EnableOutcome::Enabled => writeln!(out, "Checksums enabled in cluster")?,
                EnableOutcome::DryRun => writeln!(out, "Dry run: nothing was written")?,
                _ => writeln!(out, "Checksums NOT enabled in cluster")?,
            }
        }
        Format::Text => {}
    }
    out.flush()
}

fn disable_cmd(common: &Common, args: &DisableArgs) -> anyhow::Result<u8> {
    let fmt = common.report_format();
    signals::install_for_writes()?;
    let fail = |checksums: String, e: anyhow::Error| -> anyhow::Error {
        let message = format!("cannot disable data checksums: {e:#}");
        print_failure_summary(fmt, "checksums disable", "refused", &checksums, &message);
        anyhow!(message)
    };
    let datadir =
        resolve_datadir(args.pgdata.as_ref()).map_err(|e| fail("unknown".into(), e.into()))?;
    let lock = DataDirLock::acquire(&datadir, "checksums disable").map_err(|e| {
        fail(
            state_for_summary(&datadir),
            anyhow!("\"{}\": {e}", datadir.display()),
        )
    })?;
    let control = read_control(&datadir).map_err(|e| fail("unknown".into(), e.into()))?;
    let switched = match enable::disable(&datadir, &control, &lock, signals::cancel_flag()) {
        Ok(switched) => switched,
        Err(e) if e.control_unchanged() => {
            return Err(fail(
                control.checksum_state().name(),
                anyhow!("\"{}\": {e}", datadir.display()),
            ))
        }
        Err(e) => {
            print_failure_summary(fmt, "checksums disable", "error", "unknown", &e.to_string());
            bail!("{e}");
        }
    };
    drop(lock);
    if !switched {
        let signal = signals::caught().unwrap_or(libc::SIGINT);
        return Ok(interrupted_disable(fmt, signal));
    }
    print_disabled(fmt, common.quiet, control.major);
    Ok(EXIT_OK)
}

/// The summary and the line of a `disable` stopped by a signal; returns the exit status.
fn interrupted_disable(fmt: Format, signal: i32) -> u8 {
    if fmt == Format::Json {
        println!(
            "{}",
            json!({"type": "summary", "command": "checksums disable", "outcome": "interrupted",
                   "signal": signals::name(signal), "checksums": "on"})
        );
    }
    eprintln_text!(
        "pgcheckdb: interrupted ({}): data checksums are still on",
        signals::name(signal)
    );
    signals::exit_code(signal)
}

/// The summary (JSON), or the warning and the line (text), of a `disable` that switched.
fn print_disabled(fmt: Format, quiet: bool, postgres_version: Option<u32>) {
    match fmt {
        Format::Json => println!(
            "{}",
            json!({"type": "summary", "command": "checksums disable", "outcome": "disabled", "checksums": "off",
                   "postgres_version": postgres_version})
        ),
        Format::Text => {
            // -q: only findings and errors; the exit status says it switched.
            if !quiet {
                eprintln_text!(
                    "pgcheckdb: warning: standbys and copies of this cluster keep checksums on: disable them too or rebuild them"
                );
                println_text!("Checksums disabled in cluster");
            }
        }
    }
}
