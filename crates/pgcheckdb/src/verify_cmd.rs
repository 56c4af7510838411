//! `pgcheckdb verify`: resolve the data directory, refuse
//! what cannot be checked safely, run the scan and print the report.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::check::extended::tids::TidNotChecked;
use pgcheckdb_pg::check::extended::{ExtendedConfig, ExtendedPlan};
use pgcheckdb_pg::check::structure::Structure;
use pgcheckdb_pg::format::control::{read_pg_version_file, ControlFile};
use pgcheckdb_pg::ops::backup::{self, Backup};
use pgcheckdb_pg::ops::cluster::{check_stopped, RunningReason};
use pgcheckdb_pg::plan::Plan;
use pgcheckdb_pg::scope::{Scope, ScopeOptions};
use pgcheckdb_pg::verify::naming::{listing_findings, name_findings_with};
use pgcheckdb_pg::verify::options::Level;
use pgcheckdb_pg::verify::options::VerifyOptions;
use pgcheckdb_pg::verify::relstats::{relation_summaries, RelationSummary};
use pgcheckdb_pg::verify::report::Summary;
use pgcheckdb_pg::verify::{self};
use pgcheckdb_report::{
    human_bytes, not_structure_checked_lines, text_line, write_finding, write_findings_text,
    write_summary, Format, TEXT_FINDINGS_PER_PAGE,
};
use pgcheckdb_scan::open::{not_regular, read_regular};
use pgcheckdb_scan::Progress;

use crate::cli::{Common, LevelArg, OutputFormat, ScopeArgs, VerifyArgs};
use crate::exit::{EXIT_CORRUPT, EXIT_FAILED, EXIT_OK};
use crate::{clock, estimate, online_cmd, progress, signals, tar_backup, verbose};

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
    read_control_for(datadir, false)
}

/// [`read_control`]; `online`: re-read while the CRC fails (the server rewrites the file).
fn read_control_for(datadir: &Path, online: bool) -> anyhow::Result<ControlFile> {
    let control = if online {
        pgcheckdb_pg::verify::online::read_control_settled(datadir)?
    } else {
        ControlFile::read_from_datadir(datadir)?
    };
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
pub(crate) fn check_pid_file(datadir: &Path) -> anyhow::Result<()> {
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
        let _ = print_report(format, true, &[], &summary);
    }
    if wants_metrics(common) {
        let summary = Summary {
            level: level.name().to_string(),
            error: Some(format!("{e:#}")),
            ..Summary::default()
        };
        let dir = args.backup.as_deref().or(args.pgdata.as_deref());
        // The run's own error is the one main prints; a metrics error comes on a line before.
        if let Err(m) = emit_metrics(common, dir, &summary, &[], EXIT_FAILED) {
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

pub(crate) fn requested_level(args: &VerifyArgs) -> Level {
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

/// Each `-f` file number must name a file of the plan (unless `--no-strict-names`).
fn check_filenodes(opts: &ScopeOptions, plan: &Plan) -> anyhow::Result<()> {
    if !opts.strict_names {
        return Ok(());
    }
    for node in &opts.filenodes {
        if !plan.dir.files.iter().any(|f| f.name.relfilenode == *node) {
            bail!("no relation files to check with file number {node}");
        }
    }
    Ok(())
}

fn run_checked(common: &Common, args: &VerifyArgs) -> anyhow::Result<u8> {
    let started_at = clock::now_rfc3339();
    signals::install_for_reads().context("could not install the signal handlers")?;
    let mut phases = verbose::Phases::new(common.verbose);
    check_level_flags(args)?;
    let tar = tar_backup::open(args)?;
    let datadir = match (&tar, &args.backup) {
        (Some(t), _) => t.staging().to_path_buf(),
        (None, Some(dir)) => resolve_datadir(Some(dir))?,
        (None, None) => tar_backup::resolve_datadir_or_hint(args.pgdata.as_ref())?,
    };
    let control = read_control_for(&datadir, args.online)?;
    let shown = tar.as_ref().map_or(datadir.as_path(), |t| t.dir.as_path());
    phases.done(
        "read global/pg_control",
        &format!("data directory \"{}\"", shown.display()),
    );
    check_pid_file(&datadir)?;
    let level = requested_level(args);
    let mut online = match args.online {
        true => online_cmd::Online::start(args, level, &datadir, &control)?,
        false => None,
    };
    let mut backup = match online {
        Some(_) => None,
        None => backup_or_refusal(&datadir, &control)?,
    };
    let extended_config = (level == Level::Extended)
        .then(|| extended_config(common, args, &datadir))
        .transpose()?;
    let opts = VerifyOptions {
        jobs: jobs(common),
        level,
        max_bytes_per_sec: args.max_rate.map(|mb| (mb * 1e6) as u64),
        count_tuples: common.verbose,
        online: online.as_ref().map(online_cmd::Online::scan_options),
        ..VerifyOptions::default()
    };
    let format = format(common);
    if format == Format::Text && !common.quiet {
        announce(&control, level, opts.jobs);
    }
    let started = std::time::Instant::now();
    // The catalog first: the scope is chosen by name before the plan picks what to read. The
    // data directory is listed meanwhile on a second thread. Only the structure checks (and
    // the estimate of their time) need every relation's columns.
    let columns = level != Level::Physical || args.estimate;
    if level == Level::Physical {
        lean_malloc();
    }
    let (mut catalog, listing) = std::thread::scope(|s| {
        let listing = s.spawn(|| match &tar {
            Some(t) => t.listing(&control),
            None => Plan::list(&datadir, &control),
        });
        let catalog = match online {
            Some(_) => online_cmd::Online::read_catalog(&datadir, &control, columns),
            None => Catalog::read_with(&datadir, &control, columns),
        };
        let listing = listing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (catalog, listing)
    });
    check_interrupt("while reading the catalogs")?;
    if let (Some(online), true) = (online.as_mut(), level != Level::Physical) {
        online.fill_commit_log(&mut catalog.clog)?;
    }
    phases.done(
        "read the catalogs offline",
        &verbose::catalog_line(&catalog),
    );
    let scope_opts = scope_options(&args.scope);
    let scope = Scope::select(&scope_opts, &catalog).map_err(|e| anyhow!(e))?;
    let plan = Plan::from_listing(&datadir, control, listing, |f| scope.keeps_file(f));
    check_interrupt("while listing the data directory")?;
    check_filenodes(&scope_opts, &plan)?;
    phases.done(
        "listed the data directory",
        &format!(
            "{} relation file(s) in {} fork(s)",
            plan.dir.files.len(),
            plan.forks.len()
        ),
    );
    for line in verbose::plan_lines(&plan, Some(&catalog)) {
        phases.say(&line);
    }
    if args.estimate {
        let setup = (started_at, started.elapsed());
        return estimate::run(&plan, &catalog, &opts, format, &scope, setup);
    }
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
    if let (Some(s), false) = (&structure, common.quiet) {
        warn_missing_locales(s);
        if common.verbose {
            list_not_order_checked(s);
            if let Some(ext) = &extended {
                let (tids, graphs) = (&ext.tids, &ext.graphs);
                let (n, skipped) = (tids.indexes.len(), &tids.not_checked);
                list_not_checked("index -> heap TIDs", "TIDs not checked", n, skipped);
                let (n, skipped) = (graphs.indexes.len(), &graphs.not_checked);
                let what = "index graphs (hash, GiST, SP-GiST, GIN, BRIN)";
                list_not_checked(what, "graph not checked", n, skipped);
            }
        }
    }
    let total: u64 = plan.scan_bytes();
    let progress_state = Progress::default();
    let where_is = |file: usize| progress::file_label(&plan, &catalog, file);
    let display = progress::Display {
        mode: progress::mode(common),
        total,
        block_size: plan.control.blcksz as u64,
        label: &where_is,
    };
    let mut streamed = None;
    // Orphan and missing files come from the catalog and the listing alone: they are found on
    // a thread of their own while the scan runs (80,000 relations: 12 ms).
    let (scanned, listed) = std::thread::scope(|s| {
        let listed = s.spawn(|| listing_findings(&plan, &catalog));
        let scanned = signals::cancel_on_signal(&progress_state.cancel, || {
            progress::with_progress(&display, &progress_state, || match &tar {
                None => Ok(verify::run::run(
                    &plan,
                    &opts,
                    &progress_state,
                    structure.as_ref(),
                )),
                Some(t) => tar_backup::scan(
                    t,
                    &plan,
                    &opts,
                    &progress_state,
                    structure.as_ref(),
                    backup.as_ref(),
                )
                .map(|(report, seen)| {
                    streamed = Some(seen);
                    report
                }),
            })
        })
        .map_err(|e| anyhow!(e));
        let listed = listed
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (scanned, listed)
    });
    let mut report = scanned?;
    if let (Some(b), Some(seen)) = (backup.as_mut(), streamed.as_mut()) {
        b.newer_pages = Some(std::mem::take(&mut seen.newer_pages));
    }
    phases.done(
        "scanned the blocks",
        &format!(
            "{} block(s), {}, {} finding(s), {} jobs",
            report.summary.blocks,
            human_bytes(report.summary.bytes),
            report.findings.len(),
            opts.jobs
        ),
    );
    if let Some(online) = online.as_mut() {
        online.settle(&plan, &catalog, level, &mut report)?;
        phases.done("re-read the pages that failed", &online.summary.text_line());
    }
    let before_naming = online.as_ref().map(|_| report.findings.clone());
    name_findings_with(&mut report, &catalog, listed);
    if let (Some(online), Some(before)) = (online.as_mut(), before_naming) {
        online.keep_lasting(&mut report, &before, &datadir, &scope)?;
        report.summary.online = Some(online.summary.clone());
    }
    phases.done(
        "named the findings",
        "database and relation names from the catalogs",
    );
    if let Some(backup) = &backup {
        let (mut summary, aside) = backup::set_aside(&mut report, &plan, backup);
        if common.verbose {
            for f in &aside {
                eprintln_text!(
                    "pgcheckdb: set aside (replay rewrites it): {} {} block {}: {}",
                    f.kind.name(),
                    f.file,
                    f.block.map_or("-".to_string(), |b| b.to_string()),
                    f.message
                );
            }
        }
        let checked = match (&tar, streamed.take()) {
            (Some(t), Some(seen)) => tar_backup::check_manifest(t, seen, &mut report, &mut summary),
            _ => backup::check_manifest(&datadir, &mut report, &mut summary),
        };
        if let Err(e) = checked {
            report.tool_errors.push(e);
        }
        phases.done("checked the base backup", &summary.text_line());
        report.summary.backup = Some(summary);
    }
    if !scope_opts.is_everything() {
        report.findings.retain(|f| scope.keeps_finding(f));
        report.summary.findings = report.findings.len() as u64;
    }
    let relations = common.verbose.then(|| {
        let formats: Vec<_> = match &structure {
            Some(s) => s
                .files
                .iter()
                .map(|f| f.as_ref().map(|x| x.format.clone()))
                .collect(),
            None => Vec::new(),
        };
        relation_summaries(&plan, &formats, &report.file_tallies, &catalog)
    });
    report
        .tool_errors
        .extend(catalog.tool_errors.iter().cloned());
    report.summary.seconds = started.elapsed().as_secs_f64();
    report.summary.started_at = Some(started_at);
    report.summary.finished_at = Some(clock::now_rfc3339());
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
        eprintln_text!("pgcheckdb: error: {e}");
    }
    if let Some(relations) = &relations {
        print_relations(format, relations)?;
    }
    if !common.metrics_stdout {
        print_report(format, common.quiet, &report.findings, &report.summary)?;
    }
    let code = if let Some(sig) = interrupted {
        signals::exit_code(sig)
    } else if report.error_count() > 0 {
        EXIT_CORRUPT
    } else if !report.tool_errors.is_empty() {
        EXIT_FAILED
    } else {
        EXIT_OK
    };
    let metrics = match wants_metrics(common) {
        true => emit_metrics(common, Some(shown), &report.summary, &report.findings, code),
        false => Ok(()),
    };
    // The process ends now and its memory goes back whole: the catalogs, the plan and the
    // structure are not freed object by object (18 ms on one core at the standard level on
    // 80,000 relations). Nothing of theirs has work to do when dropped.
    std::mem::forget(structure);
    std::mem::forget(catalog);
    std::mem::forget(plan);
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

/// Accepts a stopped cluster (`None`) or a plain base backup (its `backup_label` and WAL
/// read); refuses anything else, naming what would check it.
fn backup_or_refusal(datadir: &Path, control: &ControlFile) -> anyhow::Result<Option<Backup>> {
    let reason = match check_stopped(datadir, control) {
        Ok(()) => return Ok(None),
        Err(reason) => reason,
    };
    let label = match &reason {
        RunningReason::NotShutDown { .. }
            if pgcheckdb_pg::format::control::state_of_a_backup(control.state) =>
        {
            backup::read_label(datadir).map_err(|e| anyhow!(e))?
        }
        _ => None,
    };
    let Some(label) = label else {
        bail!(
            "cannot verify \"{}\" offline: {reason}; a running server is checked with --online, a crashed one must be started once and stopped cleanly, a base backup needs its backup_label",
            datadir.display()
        );
    };
    if label.incremental_from.is_some() {
        bail!(
            "\"{}\" is an incremental backup (backup_label has INCREMENTAL FROM LSN): its relation files hold only changed blocks; combine it with pg_combinebackup first",
            datadir.display()
        );
    }
    Ok(Some(backup::prepare(datadir, control, label)))
}

fn wants_metrics(common: &Common) -> bool {
    common.metrics_stdout || common.metrics_file.is_some()
}

/// Writes the run's metrics to stdout (`--format prometheus`) and/or, atomically, to
/// `--metrics-file`, carrying the last success time over from the previous file. When the
/// previous file cannot be read (not a regular file, a symbolic link, too large, unreadable)
/// no metrics are written at all, neither to the file nor to stdout: the error names the path.
fn emit_metrics(
    common: &Common,
    pgdata: Option<&Path>,
    summary: &Summary,
    findings: &[pgcheckdb_pg::finding::Finding],
    exit_status: u8,
) -> anyhow::Result<()> {
    use pgcheckdb_report::prometheus::{previous_last_success, render, write_atomically, Metrics};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let complete = matches!(exit_status, EXIT_OK | EXIT_CORRUPT);
    let previous = match &common.metrics_file {
        Some(file) => previous_last_success(file).map_err(|e| {
            let why = match not_regular(&e) {
                Some(what) => format!("it is a {what}, not a regular file"),
                None => e.to_string(),
            };
            anyhow!(
                "could not read the previous metrics file \"{}\" ({why}): no metrics were written",
                file.display()
            )
        })?,
        None => None,
    };
    let pgdata = pgdata.map_or(String::new(), |p| p.display().to_string());
    let text = render(&Metrics {
        pgdata: &pgdata,
        summary,
        findings,
        exit_status,
        now,
        last_success: if complete { Some(now) } else { previous },
    });
    if common.metrics_stdout {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    if let Some(file) = &common.metrics_file {
        write_atomically(file, &text)
            .with_context(|| format!("could not write the metrics file \"{}\"", file.display()))?;
    }
    Ok(())
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
        memory: args
            .memory
            .unwrap_or(pgcheckdb_pg::check::extended::DEFAULT_MEMORY),
        temp_dir: temp,
        verbose: common.verbose,
    })
}

/// The opening lines of the text format.
fn announce(control: &ControlFile, level: Level, jobs: usize) {
    eprintln_text!(
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
        eprintln_text!("pgcheckdb: data checksums are off in this cluster: checking {what}");
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
    match format {
        Format::Json => {
            for f in findings {
                write_finding(&mut out, format, f)?;
            }
            write_summary(&mut out, format, summary, findings)?;
        }
        Format::Text => {
            // -q: findings and errors only (no info findings, no closing sentence).
            let shown: Vec<pgcheckdb_pg::finding::Finding> = findings
                .iter()
                .filter(|f| !quiet || f.severity != pgcheckdb_pg::finding::Severity::Info)
                .cloned()
                .collect();
            write_findings_text(&mut out, &shown, TEXT_FINDINGS_PER_PAGE)?;
            if let (Some(b), false) = (&summary.backup, quiet) {
                text_line(&mut out, &format!("pgcheckdb: {}", b.text_line()))?;
            }
            if let (Some(o), false) = (&summary.online, quiet) {
                text_line(&mut out, &format!("pgcheckdb: {}", o.text_line()))?;
            }
            if !quiet {
                for line in not_structure_checked_lines(summary) {
                    text_line(&mut out, &line)?;
                }
            }
            if !quiet {
                write_summary(&mut out, format, summary, findings)?;
            }
        }
    }
    out.flush()
}

/// The verbose per-relation lines, as CHECKDB's "There are N rows in M pages for object X".
fn print_relations(format: Format, relations: &[RelationSummary]) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for r in relations {
        match format {
            Format::Json => {
                let mut v = serde_json::to_value(r).map_err(io::Error::other)?;
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("type".into(), "relation".into());
                }
                serde_json::to_writer(&mut out, &v).map_err(io::Error::other)?;
                writeln!(out)?;
            }
            Format::Text => text_line(&mut out, &relation_text(r))?,
        }
    }
    out.flush()
}

fn relation_text(r: &RelationSummary) -> String {
    let db = match (&r.database, r.database_oid) {
        (Some(name), _) => name.clone(),
        (None, 0) => "shared catalogs".to_string(),
        (None, oid) => format!("database {oid}"),
    };
    let what = match (&r.relation, &r.kind) {
        (Some(name), Some(kind)) => format!("{name} ({kind})"),
        (Some(name), None) => name.clone(),
        _ => format!("relfilenode {}", r.filenode),
    };
    let rows = match (r.tuples, r.kind.as_deref()) {
        (Some(n), Some("index")) => format!("{n} index entries in "),
        (Some(n), _) => format!("{n} rows in "),
        (None, _) => String::new(),
    };
    format!(
        "{db}: there are {rows}{} pages for {what} ({} pages in all forks)",
        r.pages, r.pages_all_forks
    )
}

/// One warning per libc locale that B-tree indexes use and this machine lacks: their keys are
/// not order-checked (counted in the summary's `keys_not_order_checked`).
fn warn_missing_locales(structure: &Structure<'_>) {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, _, why) in &structure.not_order_checked {
        if let Some(locale) = why.missing_locale() {
            *counts.entry(locale).or_default() += 1;
        }
    }
    for (locale, n) in counts {
        eprintln_text!(
            "pgcheckdb: warning: locale \"{locale}\" is not installed on this machine: the keys of {n} B-tree index(es) using it are not order-checked"
        );
    }
}

/// `--verbose`: how many indexes a check of the extended level covered, and each one it left
/// out, with the reason (`check` names the check, `each` starts the line of one left out).
fn list_not_checked(check: &str, each: &str, checked: usize, not_checked: &[TidNotChecked]) {
    eprintln_text!(
        "pgcheckdb: {check}: {checked} index(es) checked, {} not checked",
        not_checked.len()
    );
    for n in not_checked {
        eprintln_text!("pgcheckdb: {each}: index {}: {}", n.index, n.reason);
    }
}

/// `--verbose`: each B-tree index whose keys are not order-checked, with the reason.
fn list_not_order_checked(structure: &Structure<'_>) {
    let checked = structure
        .files
        .iter()
        .flatten()
        .filter(|f| f.btree_order.is_some())
        .count();
    eprintln_text!(
        "pgcheckdb: B-tree key order: {checked} index file(s) checked, {} index(es) not order-checked",
        structure.not_order_checked.len()
    );
    for (index, db_oid, why) in &structure.not_order_checked {
        eprintln_text!(
            "pgcheckdb: keys not order-checked: index {index} (database {db_oid}): {why}"
        );
    }
}

/// Has every thread allocate from one malloc arena, and large blocks mapped on their own. The
/// physical level's threads allocate almost nothing once the catalogs are read and the plan is
/// made, but each thread that does gets an arena of its own, whose freed memory stays
/// resident: on a cluster of 80,000 small relations that was a sixth of the peak resident
/// memory. The levels above allocate per
/// page in every worker, and keep the default. Blocks of 128 kB and more (the listing's and
/// the catalog's tables, which grow and are freed while the other is built) are mapped and
/// unmapped on their own instead of leaving holes in the heap: half a megabyte less at the
/// peak on 80,000 relations, and the same from run to run.
fn lean_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes tuning parameters of the C allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}
