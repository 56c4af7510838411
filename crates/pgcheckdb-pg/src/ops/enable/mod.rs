//! `checksums enable|disable`: turn data checksums on or off in a stopped cluster, in parallel
//! and crash-safe. The steps live in submodules: `preflight` (refusals), `stamp` (pages),
//! `sync` (durability), `control_switch` (`pg_control`).
//!
//! # The lock
//!
//! `enable` and `disable` run holding the data directory's `postmaster.pid`
//! ([`crate::ops::lock::DataDirLock`]), taken before `pg_control` is read: a server started during the
//! run refuses to start, so no page it writes can be overwritten by this run's older copy, and a
//! second pgcheckdb is refused naming the first. A dry run writes nothing and takes no lock.
//!
//! # Refusals
//!
//! Before any page is written, every part of the data directory the server will read must be
//! visible (`preflight`): an unlistable directory, a dangling, looping or unmounted tablespace,
//! a non-regular or unopenable relation file or a non-regular cluster file makes `enable`
//! refuse ([`SwitchError::Blocked`]) with every path named. Then (not for a dry run) no running
//! process may hold a file open under a tablespace's real directory
//! ([`SwitchError::TablespaceInUse`]): a `cp -a` copy shares its original's tablespaces, and
//! pages stamped under a running server would overwrite its writes.
//!
//! # Enable
//!
//! One pass over every block of every relation file (the same file list as `verify`), in
//! parallel across block ranges, with large reads and writes:
//!
//! * an all-zero (new) page is left as it is, as the server leaves it;
//! * a page the server would reject on read whatever the checksum says (`pd_upper == 0` but not
//!   all zero, or a header that breaks the `PageIsVerified` rules) is **damaged**: it is named
//!   in the report and **not** stamped, so a checksum never blesses it;
//! * a page whose header the server accepts must also pass the standard level's structure
//!   checks (`verify --level standard`'s `check_page_structure`, each file's page format from
//!   the offline catalog) and must not be an image of another block of its fork (`t_ctid`
//!   evidence, [`crate::check::placement`]); one that fails is **damaged** too, named (database and
//!   relation from the catalog) and not stamped ([`judge`]). `skip_structure_checks` leaves out
//!   the structure checks (not the placement check), for about half the scan's CPU time;
//! * every other page gets the checksum for its absolute block number in `pd_checksum`; a page
//!   whose stored checksum is already right is not rewritten, and adjacent rewritten blocks are
//!   written back as one range.
//!
//! Then, in this order, which is what makes the run crash-safe:
//!
//! 1. every relation file is fsynced (in parallel), then every directory holding one. All files
//!    are synced, not only the ones this run wrote: an earlier run that was killed may have left
//!    its writes in the page cache only, and this run skips those pages as already right;
//! 2. only if the scan was complete (no read, write or sync error, not interrupted through
//!    [`Progress::cancel`]) and found no damaged page, or
//!    damage was explicitly accepted ([`EnableOptions::allow_damaged`]): `pg_control` is re-read
//!    and checked to be unchanged since the start (and the lock to be still ours), then rewritten
//!    in place with `data_checksum_version = 1`, a new time and a new CRC, and fsynced, and
//!    `global/` is fsynced. If that write or fsync fails, the state is unknown
//!    ([`SwitchError::ControlStateUnknown`]).
//!
//! Killed at any moment before step 2 ends, `pg_control` still says checksums are off: the
//! server ignores `pd_checksum` then, and a page write only ever changes those two bytes, so no
//! data can be lost. A rerun skips the pages already stamped (it resumes for the price of a
//! read) and completes.
//!
//! **Damage policy.** A damaged page makes `enable` leave `pg_control` alone: the cluster keeps
//! checksums off and stays as readable as before (the sane pages carry valid checksums, which
//! is harmless), and the report names every damaged block so it can be repaired or the
//! relation rebuilt first. With `allow_damaged` the switch is flipped anyway; the damaged pages
//! stay unstamped, so the server and `verify` keep reporting them. Pages that the server accepts
//! but that look suspicious (a torn-looking zero tail, strict header rules) are reported as
//! warnings and stamped: the server reads them today, and refusing them would block clusters
//! whose data legitimately ends in zeros.
//!
//! # Disable
//!
//! The control-file change alone: no page is read or written (with checksums off the server
//! ignores `pd_checksum`). `pg_control` is rewritten in place with `data_checksum_version = 0`
//! and fsynced, then `global/`.

mod control_switch;
mod judge;
mod preflight;
mod stamp;
mod sync;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::Serialize;

use pgcheckdb_scan::{plan_units, Progress, ScanFile, ScanOptions};

use crate::catalog::Catalog;
use crate::check::structure::Structure;
use crate::finding::{Finding, Severity};
use crate::format::control::{ChecksumState, ControlFile, ControlFileError};
use crate::ops::cluster::{check_stopped, RunningReason};
use crate::ops::lock::{DataDirLock, LockError};
use crate::plan::Plan;

pub use control_switch::{write_control_file, ControlWriteError};
pub use stamp::{classify_block, stamp_chunk, stamp_chunk_judged, BlockAction};
pub use sync::sync_files_and_dirs;

use stamp::Stamper;

/// Why the checksum state cannot be switched. Each is one line for the user; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{0}; stop the server cleanly (pg_ctl stop -m fast) and try again")]
    Running(RunningReason),
    #[error("unknown PostgreSQL version (pg_control_version {pg_control_version}, catalog version {catalog_version}); pgcheckdb only switches checksums of PostgreSQL 14-19")]
    UnknownVersion {
        pg_control_version: u32,
        catalog_version: u32,
    },
    #[error("data checksums are already enabled in this cluster")]
    AlreadyOn,
    #[error("data checksums are already disabled in this cluster")]
    AlreadyOff,
    #[error("data checksum state is \"{0}\" (an online switch is in progress or pg_control is from a newer version); refusing to change it offline")]
    InProgress(ChecksumState),
}

/// Checks everything `enable` needs before it touches a file.
pub fn check_can_enable(datadir: &Path, control: &ControlFile) -> Result<(), Refusal> {
    check_common(datadir, control)?;
    match control.checksum_state() {
        ChecksumState::Off => Ok(()),
        ChecksumState::On => Err(Refusal::AlreadyOn),
        other => Err(Refusal::InProgress(other)),
    }
}

/// Checks everything `disable` needs before it touches a file.
pub fn check_can_disable(datadir: &Path, control: &ControlFile) -> Result<(), Refusal> {
    check_common(datadir, control)?;
    match control.checksum_state() {
        ChecksumState::On => Ok(()),
        ChecksumState::Off => Err(Refusal::AlreadyOff),
        other => Err(Refusal::InProgress(other)),
    }
}

fn check_common(datadir: &Path, control: &ControlFile) -> Result<(), Refusal> {
    check_stopped(datadir, control).map_err(Refusal::Running)?;
    if control.major.is_none() {
        return Err(Refusal::UnknownVersion {
            pg_control_version: control.pg_control_version,
            catalog_version: control.catalog_version_no,
        });
    }
    Ok(())
}

/// How to run `enable`.
#[derive(Debug, Clone)]
pub struct EnableOptions {
    pub jobs: usize,
    /// Bytes per work unit (a block range of one segment file).
    pub unit_bytes: u64,
    /// Bytes per read and, at most, per write.
    pub chunk_bytes: usize,
    /// Scan and report, write nothing.
    pub dry_run: bool,
    /// Flip `pg_control` even when damaged pages were found.
    pub allow_damaged: bool,
    /// Stamp every page whose header the server accepts, without the standard level's
    /// structure checks (faster; a page damaged inside may then get a valid checksum).
    pub skip_structure_checks: bool,
}

impl Default for EnableOptions {
    fn default() -> Self {
        EnableOptions {
            jobs: 1,
            unit_bytes: 16 << 20,
            chunk_bytes: 1 << 20,
            dry_run: false,
            allow_damaged: false,
            skip_structure_checks: false,
        }
    }
}

/// What `enable` did with `pg_control`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnableOutcome {
    /// Checksums are now on.
    Enabled,
    /// Dry run: nothing was written.
    DryRun,
    /// Damaged pages were found: pages were stamped and synced, `pg_control` left at "off".
    RefusedDamaged,
    /// The scan or the sync did not complete: `pg_control` left at "off"; rerun.
    Incomplete,
    /// Stopped by a signal ([`Progress::cancel`]) before `pg_control` was switched: still off.
    Interrupted,
}

/// Totals of an `enable` run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EnableSummary {
    pub postgres_version: Option<u32>,
    /// The state in pg_control at the end.
    pub checksums: String,
    pub files: u64,
    pub files_written: u64,
    pub blocks: u64,
    pub bytes: u64,
    pub new_pages: u64,
    /// Blocks whose checksum was (or, in a dry run, would be) written.
    pub blocks_rewritten: u64,
    /// Blocks whose stored checksum was already right (e.g. from an interrupted earlier run).
    pub blocks_already_valid: u64,
    pub damaged_blocks: u64,
    pub warnings: u64,
    pub scan_seconds: f64,
    pub sync_seconds: f64,
    pub seconds: f64,
    /// Bytes scanned per second over the whole run, in GB/s (10^9).
    pub gb_per_second: f64,
}

/// Everything an `enable` run produced.
#[derive(Debug)]
pub struct EnableReport {
    pub outcome: EnableOutcome,
    /// Damaged pages (errors) and suspicious ones (warnings), sorted by file and block.
    pub findings: Vec<Finding>,
    /// Problems on pgcheckdb's side (unreadable file, failed write or fsync).
    pub tool_errors: Vec<String>,
    pub summary: EnableSummary,
}

/// Why `enable` or `disable` stopped before it could decide anything.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{} part(s) of the data directory cannot be read or written, so their pages could not get checksums; nothing was changed:\n  {}", .0.len(), .0.join("\n  "))]
    Blocked(Vec<String>),
    #[error("tablespace {oid} ({dir:?}) is in use by a running process: pid {pid} ({command}) has {file:?} open. Is its directory shared with another data directory (a cp -a copy keeps links to its original's tablespaces)? Stamping pages under a running server would overwrite its writes; nothing was changed")]
    TablespaceInUse {
        oid: u32,
        dir: PathBuf,
        pid: u32,
        command: String,
        file: PathBuf,
    },
    #[error("tablespace {oid} may be in use: process {pid} ({command}) runs as the tablespace directory's owner, but its open files cannot be read ({error}); stop that process, or run pgcheckdb with the privileges to inspect it (as root with CAP_SYS_PTRACE); nothing was changed")]
    ProcessUninspectable {
        oid: u32,
        pid: u32,
        command: String,
        error: io::Error,
    },
    #[error("could not see which files running processes hold open ({path:?}: {error}), so the tablespaces may be in use by another server; nothing was changed")]
    ProcessesUnreadable { path: PathBuf, error: io::Error },
    #[error(transparent)]
    Control(#[from] ControlFileError),
    #[error("pg_control changed while pgcheckdb was working (was a server started?): {0}; checksums were not switched")]
    ControlChanged(String),
    #[error("could not open control file \"{path}\" for writing: {source}; it was not changed")]
    WriteControl { path: String, source: io::Error },
    #[error("could not write and fsync control file \"{path}\": {source}: the data checksum state is UNKNOWN (the old or the new pg_control may be on disk); check it with `pgcheckdb checksums status -D {datadir}` or `pg_controldata {datadir}`, and rerun if it does not say what you asked for")]
    ControlStateUnknown {
        path: String,
        datadir: String,
        source: io::Error,
    },
}

impl SwitchError {
    /// True when `pg_control` is known to be unchanged (every error but an unknown state).
    pub fn control_unchanged(&self) -> bool {
        !matches!(self, SwitchError::ControlStateUnknown { .. })
    }
}

/// A planned `enable`: the cluster passed [`check_can_enable`] and [`preflight`], and its
/// relation files are listed. Holds the data directory lock (none for a dry run) until dropped.
pub struct Enabler {
    datadir: PathBuf,
    control: ControlFile,
    plan: Plan,
    /// The offline catalog: each file's page format for the structure checks, and the names
    /// of the damaged pages' databases and relations.
    catalog: Catalog,
    files: Vec<ScanFile>,
    lock: Option<DataDirLock>,
}

impl Enabler {
    /// Checks that the cluster may be switched and lists its relation files. Writes nothing but
    /// the lock, which the caller took (`None` for a dry run) before reading `control`.
    pub fn prepare(
        datadir: &Path,
        control: ControlFile,
        lock: Option<DataDirLock>,
    ) -> Result<Enabler, SwitchError> {
        check_can_enable(datadir, &control)?;
        let plan = Plan::build(datadir, control.clone());
        let problems = preflight::blocking_problems(&plan, lock.is_some());
        if !problems.is_empty() {
            return Err(SwitchError::Blocked(problems));
        }
        if lock.is_some() {
            preflight::check_tablespaces_unused(datadir)?;
        }
        let files = plan.scan_files();
        let catalog = Catalog::read(datadir, &plan.control);
        Ok(Enabler {
            datadir: datadir.to_path_buf(),
            control,
            plan,
            catalog,
            files,
            lock,
        })
    }

    /// Bytes the scan will read (whole blocks of every relation file).
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }

    /// Number of relation files.
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// The data directory.
    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// The PostgreSQL major version from `pg_control`.
    pub fn postgres_version(&self) -> Option<u32> {
        self.control.major
    }

    /// Runs the scan, the sync and (when allowed) the switch; see the module documentation.
    /// Setting `progress.cancel` stops the run before `pg_control` is switched.
    pub fn run(
        &self,
        opts: &EnableOptions,
        progress: &Progress,
    ) -> Result<EnableReport, SwitchError> {
        enable_planned(self, opts, progress)
    }
}

/// Test-only slowdown of the scan, so that tests can act while `enable` runs: milliseconds to
/// sleep before each chunk (one read of up to `chunk_bytes`), from `PGCHECKDB_TEST_DELAY_MS`.
fn test_unit_delay() -> Option<std::time::Duration> {
    std::env::var("PGCHECKDB_TEST_DELAY_MS")
        .ok()?
        .parse()
        .ok()
        .map(std::time::Duration::from_millis)
}

fn enable_planned(
    enabler: &Enabler,
    opts: &EnableOptions,
    progress: &Progress,
) -> Result<EnableReport, SwitchError> {
    let (datadir, control, plan, files) = (
        &enabler.datadir,
        &enabler.control,
        &enabler.plan,
        &enabler.files,
    );
    let write = !opts.dry_run;
    let started = Instant::now();
    let bs = control.blcksz as usize;
    let units = plan_units(files, opts.unit_bytes, bs as u64);
    let scan_opts = ScanOptions {
        jobs: opts.jobs.max(1),
        chunk_bytes: (opts.chunk_bytes / bs).max(1) * bs,
        block_size: bs,
        write,
        max_bytes_per_sec: None,
        keep_cache: false,
    };
    let delay = test_unit_delay();
    let structure =
        (!opts.skip_structure_checks).then(|| Structure::from_catalog(plan, &enabler.catalog));
    let workers = pgcheckdb_scan::run(
        files,
        &units,
        &scan_opts,
        || Stamper::new(plan, structure.as_ref(), write).with_delay(delay),
        progress,
    );
    let mut merged = Stamper::new(plan, structure.as_ref(), write);
    for w in workers {
        merged.absorb(w);
    }
    if structure.is_some() {
        // Pages of a relation the catalog could not describe were not structure-checked.
        merged.tool_errors.extend(enabler.catalog.tool_errors.iter().map(|e| {
            format!("{e}; the structure checks of the pages it describes could not run (rerun with --skip-structure-checks to stamp them unchecked)")
        }));
    }
    let scan_seconds = started.elapsed().as_secs_f64();
    let interrupted = || progress.cancel.load(Ordering::SeqCst);

    let sync_started = Instant::now();
    if write && !interrupted() {
        merged
            .tool_errors
            .extend(sync_files_and_dirs(files, opts.jobs.max(1)));
    }
    let sync_seconds = sync_started.elapsed().as_secs_f64();

    let outcome = if opts.dry_run {
        EnableOutcome::DryRun
    } else if interrupted() {
        EnableOutcome::Interrupted
    } else if !merged.tool_errors.is_empty() {
        EnableOutcome::Incomplete
    } else if merged.damaged > 0 && !opts.allow_damaged {
        EnableOutcome::RefusedDamaged
    } else {
        let Some(lock) = enabler.lock.as_ref() else {
            return Err(SwitchError::WriteControl {
                path: datadir.join("global/pg_control").display().to_string(),
                source: io::Error::other("enable without the data directory lock"),
            });
        };
        control_switch::switch_control_file(datadir, control, ChecksumState::ON_VERSION, lock)?;
        EnableOutcome::Enabled
    };
    let times = Times {
        started,
        scan_seconds,
        sync_seconds,
    };
    let mut report = report(plan, files, merged, outcome, times);
    for f in &mut report.findings {
        enabler.catalog.annotate(f);
    }
    Ok(report)
}

/// When the run started and how long its phases took.
struct Times {
    started: Instant,
    scan_seconds: f64,
    sync_seconds: f64,
}

fn report(
    plan: &Plan,
    files: &[ScanFile],
    merged: Stamper<'_>,
    outcome: EnableOutcome,
    times: Times,
) -> EnableReport {
    let control = &plan.control;
    let bs = control.blcksz as u64;
    let mut findings = merged.findings;
    // Segment-structure and file-size notes do not affect checksums; shown as warnings.
    findings.extend(
        plan.findings
            .iter()
            .filter(|f| f.severity != Severity::Info)
            .cloned()
            .map(|mut f| {
                f.severity = Severity::Warning;
                f
            }),
    );
    findings.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    let seconds = times.started.elapsed().as_secs_f64();
    let bytes = merged.blocks * bs;
    let summary = EnableSummary {
        postgres_version: control.major,
        checksums: if outcome == EnableOutcome::Enabled {
            ChecksumState::On.name()
        } else {
            control.checksum_state().name()
        },
        files: files.len() as u64,
        files_written: merged.files_written.len() as u64,
        blocks: merged.blocks,
        bytes,
        new_pages: merged.new_pages,
        blocks_rewritten: merged.rewritten,
        blocks_already_valid: merged.already_valid,
        damaged_blocks: merged.damaged,
        warnings: findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count() as u64,
        scan_seconds: times.scan_seconds,
        sync_seconds: times.sync_seconds,
        seconds,
        gb_per_second: if seconds > 0.0 {
            bytes as f64 / seconds / 1e9
        } else {
            0.0
        },
    };
    EnableReport {
        outcome,
        findings,
        tool_errors: merged.tool_errors,
        summary,
    }
}

/// Runs `disable` holding `lock` (taken before `control` was read): the control-file change
/// alone. A set `cancel` (a signal arrived) stops it before `pg_control` is written; returns
/// whether it was switched.
pub fn disable(
    datadir: &Path,
    control: &ControlFile,
    lock: &DataDirLock,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<bool, SwitchError> {
    check_can_disable(datadir, control)?;
    if cancel.load(Ordering::SeqCst) {
        return Ok(false);
    }
    control_switch::switch_control_file(datadir, control, 0, lock)?;
    Ok(true)
}
