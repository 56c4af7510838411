//! `checksums enable|disable`: turn data checksums on or off in a stopped cluster, in parallel
//! and crash-safe.
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
//! * every other page gets the checksum for its absolute block number in `pd_checksum`; a page
//!   whose stored checksum is already right is not rewritten, and adjacent rewritten blocks are
//!   written back as one range.
//!
//! Then, in this order, which is what makes the run crash-safe:
//!
//! 1. every relation file is fsynced (in parallel), then every directory holding one. All files
//!    are synced, not only the ones this run wrote: an earlier run that was killed may have left
//!    its writes in the page cache only, and this run skips those pages as already right;
//! 2. only if the scan was complete (no read, write or sync error) and found no damaged page, or
//!    damage was explicitly accepted ([`EnableOptions::allow_damaged`]): `pg_control` is re-read
//!    and checked to be unchanged since the start (no server started meanwhile), then rewritten
//!    in place with `data_checksum_version = 1`, a new time and a new CRC, and fsynced, and
//!    `global/` is fsynced.
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

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::json;

use pgcheckdb_scan::{plan_units, DirtyRange, Progress, ScanFile, ScanOptions, Visitor};

use crate::checksum::{pg_checksum_page, PD_CHECKSUM_OFFSET};
use crate::cluster::{check_stopped, RunningReason};
use crate::control::{ChecksumState, ControlFile, ControlFileError};
use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::page::SECTOR_SIZE;
use crate::physical::{check_page, PageCheckConfig, PageProblem, PageVerdict};
use crate::verify::Plan;

/// Why the checksum state cannot be switched. Each is one line for the user; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{0}; stop the server cleanly (pg_ctl stop -m fast) and try again")]
    Running(RunningReason),
    #[error("unknown PostgreSQL version (pg_control_version {pg_control_version}, catalog version {catalog_version}); pgcheckdb only switches checksums of PostgreSQL 14-18")]
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
}

impl Default for EnableOptions {
    fn default() -> Self {
        EnableOptions {
            jobs: 1,
            unit_bytes: 16 << 20,
            chunk_bytes: 1 << 20,
            dry_run: false,
            allow_damaged: false,
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

/// The decision for one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockAction {
    /// All zero: left alone.
    New,
    /// The stored checksum is already right.
    AlreadyValid { warning: Option<PageProblem> },
    /// `pd_checksum` must be set to this value.
    Stamp {
        checksum: u16,
        warning: Option<PageProblem>,
    },
    /// The server rejects this page whatever its checksum: report, never stamp.
    Damaged(PageProblem),
}

/// Decides what `enable` does with one block at absolute block number `blkno`.
pub fn classify_block(page: &[u8], blkno: u32, blcksz: usize, max_align: usize) -> BlockAction {
    let cfg = PageCheckConfig {
        blcksz,
        max_align,
        checksums: false,
    };
    let warning = match check_page(&cfg, page, blkno) {
        PageVerdict::New => return BlockAction::New,
        PageVerdict::Valid => None,
        PageVerdict::Problem(
            p @ (PageProblem::NonzeroNewPage { .. } | PageProblem::InvalidHeader { .. }),
        ) => return BlockAction::Damaged(p),
        PageVerdict::Problem(p) => Some(p),
    };
    let checksum = pg_checksum_page(page, blkno);
    let stored = u16::from_le_bytes([page[PD_CHECKSUM_OFFSET], page[PD_CHECKSUM_OFFSET + 1]]);
    if stored == checksum {
        BlockAction::AlreadyValid { warning }
    } else {
        BlockAction::Stamp { checksum, warning }
    }
}

/// Stamps every sane page of `data` (whole blocks, the first at absolute block `first_blkno`)
/// and returns the byte ranges that changed, adjacent blocks coalesced into one range.
pub fn stamp_chunk(
    data: &mut [u8],
    first_blkno: u64,
    blcksz: usize,
    max_align: usize,
    mut on_block: impl FnMut(u64, &[u8], &BlockAction),
) -> Vec<DirtyRange> {
    let mut dirty: Vec<DirtyRange> = Vec::new();
    for (i, page) in data.chunks_exact_mut(blcksz).enumerate() {
        let blkno = first_blkno + i as u64;
        let action = classify_block(page, blkno as u32, blcksz, max_align);
        if let BlockAction::Stamp { checksum, .. } = action {
            page[PD_CHECKSUM_OFFSET..PD_CHECKSUM_OFFSET + 2]
                .copy_from_slice(&checksum.to_le_bytes());
            let start = i * blcksz;
            match dirty.last_mut() {
                Some(last) if last.end == start => last.end += blcksz,
                _ => dirty.push(start..start + blcksz),
            }
        }
        on_block(blkno, page, &action);
    }
    dirty
}

/// Per-worker state of the enable scan.
struct Stamper<'a> {
    plan: &'a Plan,
    write: bool,
    findings: Vec<Finding>,
    tool_errors: Vec<String>,
    blocks: u64,
    new_pages: u64,
    rewritten: u64,
    already_valid: u64,
    damaged: u64,
    warnings: u64,
    files_written: BTreeSet<usize>,
}

impl<'a> Stamper<'a> {
    fn new(plan: &'a Plan, write: bool) -> Self {
        Stamper {
            plan,
            write,
            findings: Vec::new(),
            tool_errors: Vec::new(),
            blocks: 0,
            new_pages: 0,
            rewritten: 0,
            already_valid: 0,
            damaged: 0,
            warnings: 0,
            files_written: BTreeSet::new(),
        }
    }

    fn absorb(&mut self, o: Stamper<'a>) {
        self.findings.extend(o.findings);
        self.tool_errors.extend(o.tool_errors);
        self.blocks += o.blocks;
        self.new_pages += o.new_pages;
        self.rewritten += o.rewritten;
        self.already_valid += o.already_valid;
        self.damaged += o.damaged;
        self.warnings += o.warnings;
        self.files_written.extend(o.files_written);
    }

    fn note(&mut self, file: usize, blkno: u64, action: &BlockAction) {
        self.blocks += 1;
        let warning = match action {
            BlockAction::New => {
                self.new_pages += 1;
                None
            }
            BlockAction::AlreadyValid { warning } => {
                self.already_valid += 1;
                warning.as_ref()
            }
            BlockAction::Stamp { warning, .. } => {
                self.rewritten += 1;
                warning.as_ref()
            }
            BlockAction::Damaged(problem) => {
                self.damaged += 1;
                let f = self.block_finding(file, blkno, problem, Severity::Error);
                self.findings.push(f);
                None
            }
        };
        if let Some(problem) = warning {
            self.warnings += 1;
            let f = self.block_finding(file, blkno, problem, Severity::Warning);
            self.findings.push(f);
        }
    }

    fn block_finding(
        &self,
        file: usize,
        blkno: u64,
        problem: &PageProblem,
        severity: Severity,
    ) -> Finding {
        let (kind, message, detail) = match problem {
            PageProblem::NonzeroNewPage { zero_prefix } => (
                FindingKind::NonzeroNewPage,
                format!("pd_upper is 0 but the page is not all zero (first non-zero byte at offset {zero_prefix}); not stamped"),
                json!({"zero_prefix": zero_prefix, "sector_aligned": *zero_prefix > 0 && zero_prefix % SECTOR_SIZE == 0}),
            ),
            PageProblem::InvalidHeader { rule, text, .. } => (
                FindingKind::InvalidHeader,
                format!("invalid page header: {text}; not stamped"),
                json!({"rule": rule.name()}),
            ),
            PageProblem::TornPage { zero_from, pd_upper, .. } => (
                FindingKind::TornPage,
                format!("page may be torn: zero from byte {zero_from} to the end, but tuple data starts at pd_upper {pd_upper}; the server accepts it, stamped"),
                json!({"zero_from": zero_from, "pd_upper": pd_upper}),
            ),
            PageProblem::SuspiciousHeader { rule, text } => (
                FindingKind::SuspiciousHeader,
                format!("unusual page header: {text}; the server accepts it, stamped"),
                json!({"rule": rule.name()}),
            ),
            PageProblem::ChecksumMismatch { checksum } => (
                FindingKind::ChecksumMismatch,
                format!("checksum {} expected {}", checksum.calculated, checksum.stored),
                json!({}),
            ),
        };
        file_finding(
            self.plan,
            file,
            Some(blkno),
            kind,
            severity,
            message,
            detail,
        )
    }
}

fn file_finding(
    plan: &Plan,
    file: usize,
    blkno: Option<u64>,
    kind: FindingKind,
    severity: Severity,
    message: String,
    detail: serde_json::Value,
) -> Finding {
    let f = &plan.dir.files[file];
    let mut finding = Finding::for_file(kind, severity, &f.rel_path, message)
        .with_detail(detail)
        .at_segment(f.name.segno);
    finding.fork = Some(f.name.fork);
    finding.block = blkno;
    finding.database = Some(DatabaseRef {
        oid: Some(f.location.db_oid()),
        name: None,
    });
    finding.relation = Some(RelationRef {
        filenode: Some(f.name.relfilenode),
        ..Default::default()
    });
    finding
}

impl Visitor for Stamper<'_> {
    fn chunk(&mut self, file: usize, offset: u64, data: &mut [u8]) -> Vec<DirtyRange> {
        let control = &self.plan.control;
        let (bs, align) = (control.blcksz as usize, control.max_align as usize);
        let first = self
            .plan
            .absolute_block(&self.plan.dir.files[file], offset / bs as u64);
        let dirty = stamp_chunk(data, first, bs, align, |blkno, _, action| {
            self.note(file, blkno, action)
        });
        if !self.write {
            return Vec::new();
        }
        if !dirty.is_empty() {
            self.files_written.insert(file);
        }
        dirty
    }

    fn read_failed(&mut self, file: usize, offset: u64, err: &io::Error) {
        let f = &self.plan.dir.files[file];
        self.tool_errors.push(format!(
            "could not read \"{}\" at offset {offset}: {err}",
            f.rel_path
        ));
    }

    fn open_failed(&mut self, file: usize, err: &io::Error) {
        let f = &self.plan.dir.files[file];
        self.tool_errors
            .push(format!("could not open \"{}\": {err}", f.rel_path));
    }

    fn short_file(&mut self, file: usize, offset: u64) {
        let f = &self.plan.dir.files[file];
        self.tool_errors.push(format!(
            "file \"{}\" shrank to {offset} bytes during the run",
            f.rel_path
        ));
    }

    fn written(&mut self, _file: usize, handle: &File, offset: u64, len: u64) {
        // Start writing the range to disk now, so that the fsync at the end has little left
        // to wait for and the disk works while the CPUs checksum.
        start_range_writeback(handle, offset, len);
    }

    fn write_failed(&mut self, file: usize, offset: u64, err: &io::Error) {
        let f = &self.plan.dir.files[file];
        self.tool_errors.push(format!(
            "could not write \"{}\" at offset {offset}: {err}",
            f.rel_path
        ));
    }
}

/// Why `enable` or `disable` stopped before it could decide anything.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Control(#[from] ControlFileError),
    #[error("pg_control changed while pgcheckdb was working (was a server started?): {0}; checksums were not switched")]
    ControlChanged(String),
    #[error("could not update control file \"{path}\": {source}")]
    WriteControl { path: String, source: io::Error },
}

/// A planned `enable`: the cluster passed [`check_can_enable`] and its relation files are listed.
pub struct Enabler {
    datadir: PathBuf,
    control: ControlFile,
    plan: Plan,
    files: Vec<ScanFile>,
}

impl Enabler {
    /// Checks that the cluster may be switched and lists its relation files. Writes nothing.
    pub fn prepare(datadir: &Path, control: ControlFile) -> Result<Enabler, SwitchError> {
        check_can_enable(datadir, &control)?;
        let plan = Plan::build(datadir, control.clone());
        let files = plan.scan_files();
        Ok(Enabler {
            datadir: datadir.to_path_buf(),
            control,
            plan,
            files,
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

    /// Runs the scan, the sync and (when allowed) the switch; see the module documentation.
    pub fn run(
        &self,
        opts: &EnableOptions,
        progress: &Progress,
    ) -> Result<EnableReport, SwitchError> {
        enable_planned(self, opts, progress)
    }
}

/// Runs `enable` on a stopped cluster whose `pg_control` was read as `control`: prepare and run.
pub fn enable(
    datadir: &Path,
    control: ControlFile,
    opts: &EnableOptions,
    progress: &Progress,
) -> Result<EnableReport, SwitchError> {
    Enabler::prepare(datadir, control)?.run(opts, progress)
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
    let started = Instant::now();
    let bs = control.blcksz as usize;
    let units = plan_units(files, opts.unit_bytes, bs as u64);
    let scan_opts = ScanOptions {
        jobs: opts.jobs.max(1),
        chunk_bytes: (opts.chunk_bytes / bs).max(1) * bs,
        block_size: bs,
        write: !opts.dry_run,
        max_bytes_per_sec: None,
    };
    let workers = pgcheckdb_scan::run(
        files,
        &units,
        &scan_opts,
        || Stamper::new(plan, !opts.dry_run),
        progress,
    );
    let mut merged = Stamper::new(plan, !opts.dry_run);
    for w in workers {
        merged.absorb(w);
    }
    let scan_seconds = started.elapsed().as_secs_f64();

    let sync_started = Instant::now();
    if !opts.dry_run {
        merged
            .tool_errors
            .extend(sync_files_and_dirs(files, opts.jobs.max(1)));
    }
    let sync_seconds = sync_started.elapsed().as_secs_f64();

    let outcome = if opts.dry_run {
        EnableOutcome::DryRun
    } else if !merged.tool_errors.is_empty() {
        EnableOutcome::Incomplete
    } else if merged.damaged > 0 && !opts.allow_damaged {
        EnableOutcome::RefusedDamaged
    } else {
        switch_control_file(datadir, control, ChecksumState::ON_VERSION)?;
        EnableOutcome::Enabled
    };

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
    let seconds = started.elapsed().as_secs_f64();
    let bytes = merged.blocks * bs as u64;
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
        scan_seconds,
        sync_seconds,
        seconds,
        gb_per_second: if seconds > 0.0 {
            bytes as f64 / seconds / 1e9
        } else {
            0.0
        },
    };
    Ok(EnableReport {
        outcome,
        findings,
        tool_errors: merged.tool_errors,
        summary,
    })
}

/// Runs `disable`: the control-file change alone.
pub fn disable(datadir: &Path, control: &ControlFile) -> Result<(), SwitchError> {
    check_can_disable(datadir, control)?;
    switch_control_file(datadir, control, 0)
}

/// Re-reads `pg_control`, checks that nothing changed since `before` was read and that the
/// cluster is still stopped, then writes the new checksum version in place and syncs it.
fn switch_control_file(
    datadir: &Path,
    before: &ControlFile,
    version: u32,
) -> Result<(), SwitchError> {
    let now = ControlFile::read_from_datadir(datadir)?;
    let same = now.system_identifier == before.system_identifier
        && now.time == before.time
        && now.checkpoint == before.checkpoint
        && now.state == before.state
        && now.data_checksum_version == before.data_checksum_version;
    if !same {
        return Err(SwitchError::ControlChanged(format!(
            "state \"{}\", checkpoint {:X}/{:X}, time {}",
            now.state,
            now.checkpoint >> 32,
            now.checkpoint & 0xFFFF_FFFF,
            now.time
        )));
    }
    check_stopped(datadir, &now).map_err(Refusal::Running)?;
    let unix_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let image = now.with_checksum_version(version, unix_now);
    write_control_file(datadir, &image).map_err(|source| SwitchError::WriteControl {
        path: datadir.join("global/pg_control").display().to_string(),
        source,
    })
}

/// Writes a full control-file image in place (as PostgreSQL's `update_controlfile` does: no
/// temporary file, no rename), fsyncs it, then fsyncs `global/`.
pub fn write_control_file(datadir: &Path, image: &[u8]) -> io::Result<()> {
    let global = datadir.join("global");
    let file = OpenOptions::new()
        .write(true)
        .open(global.join("pg_control"))?;
    file.write_all_at(image, 0)?;
    file.sync_all()?;
    drop(file);
    File::open(&global)?.sync_all()
}

/// Fsyncs every file (in parallel, after a pass that starts writeback of all of them) and then
/// every directory that holds one. Returns one message per failure.
pub fn sync_files_and_dirs(files: &[ScanFile], jobs: usize) -> Vec<String> {
    let errors = Mutex::new(Vec::new());
    let paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
    // Writeback can run for many files at once while a thread waits on one fsync.
    let threads = jobs.max(4);
    for_each_parallel(&paths, threads, |path| start_writeback(path));
    for_each_parallel(&paths, threads, |path| {
        if let Err(e) = File::open(path).and_then(|f| f.sync_all()) {
            errors
                .lock()
                .expect("errors lock")
                .push(format!("could not fsync \"{}\": {e}", path.display()));
        }
    });
    let dirs: BTreeSet<PathBuf> = files
        .iter()
        .filter_map(|f| f.path.parent().map(Path::to_path_buf))
        .collect();
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    for_each_parallel(&dirs, threads, |dir| {
        if let Err(e) = File::open(dir).and_then(|f| f.sync_all()) {
            errors.lock().expect("errors lock").push(format!(
                "could not fsync directory \"{}\": {e}",
                dir.display()
            ));
        }
    });
    errors.into_inner().expect("errors lock")
}

fn for_each_parallel<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.min(items.len()) {
            s.spawn(|| {
                while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                    f(item);
                }
            });
        }
    });
}

/// Asks the kernel to start writing a byte range of an open file (a hint; errors are ignored).
fn start_range_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: a valid descriptor and plain integers; SYNC_FILE_RANGE_WRITE only starts I/O.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as i64,
                len as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Asks the kernel to start writing a file's dirty pages without waiting (a hint; errors are
/// ignored, the fsync that follows reports them).
fn start_writeback(path: &Path) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        if let Ok(f) = File::open(path) {
            // SAFETY: a valid descriptor and plain integers; SYNC_FILE_RANGE_WRITE only starts I/O.
            unsafe {
                libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physical::ChecksumPair;

    const BS: usize = 8192;

    /// A heap-like page with tuple bytes at the end and `pd_checksum` zero (written with checksums off).
    fn heap_page(seed: u8) -> Vec<u8> {
        crate::test_pages::heap_like_page(seed)
    }

    fn stored(page: &[u8]) -> u16 {
        u16::from_le_bytes([page[8], page[9]])
    }

    #[test]
    fn new_page_is_left_alone() {
        assert_eq!(classify_block(&[0u8; BS], 7, BS, 8), BlockAction::New);
    }

    #[test]
    fn sane_page_gets_the_checksum_for_its_absolute_block() {
        let p = heap_page(0);
        let want = pg_checksum_page(&p, 131077);
        assert_eq!(
            classify_block(&p, 131077, BS, 8),
            BlockAction::Stamp {
                checksum: want,
                warning: None
            }
        );
    }

    #[test]
    fn page_with_right_checksum_is_not_rewritten() {
        let mut p = heap_page(0);
        let c = pg_checksum_page(&p, 3);
        p[8..10].copy_from_slice(&c.to_le_bytes());
        assert_eq!(
            classify_block(&p, 3, BS, 8),
            BlockAction::AlreadyValid { warning: None }
        );
        // ...but the same page at another block number needs a new one.
        assert!(matches!(
            classify_block(&p, 4, BS, 8),
            BlockAction::Stamp { .. }
        ));
    }

    #[test]
    fn stale_checksum_from_a_page_modified_later_is_replaced() {
        let mut p = heap_page(0);
        let c = pg_checksum_page(&p, 3);
        p[8..10].copy_from_slice(&c.to_le_bytes());
        p[5000] ^= 0xFF; // the server changed the page while checksums were off
        let BlockAction::Stamp { checksum, .. } = classify_block(&p, 3, BS, 8) else {
            panic!("expected stamp")
        };
        assert_ne!(checksum, c);
    }

    #[test]
    fn nonzero_page_with_pd_upper_zero_is_damage() {
        let mut p = vec![0u8; BS];
        p[100] = 1;
        assert_eq!(
            classify_block(&p, 0, BS, 8),
            BlockAction::Damaged(PageProblem::NonzeroNewPage { zero_prefix: 100 })
        );
    }

    #[test]
    fn bad_header_is_damage_and_never_stamped() {
        let mut p = heap_page(0);
        p[12..14].copy_from_slice(&4000u16.to_le_bytes()); // pd_lower > pd_upper
        let before = p.clone();
        assert!(matches!(
            classify_block(&p, 0, BS, 8),
            BlockAction::Damaged(PageProblem::InvalidHeader { .. })
        ));
        let dirty = stamp_chunk(&mut p, 0, BS, 8, |_, _, _| {});
        assert!(dirty.is_empty());
        assert_eq!(p, before);
        for (off, val) in [(10usize, 0x0100u16), (16, 8193), (16, 8180)] {
            let mut q = heap_page(0);
            q[off..off + 2].copy_from_slice(&val.to_le_bytes());
            assert!(
                matches!(
                    classify_block(&q, 0, BS, 8),
                    BlockAction::Damaged(PageProblem::InvalidHeader { .. })
                ),
                "{off} {val}"
            );
        }
    }

    #[test]
    fn torn_looking_page_is_stamped_with_a_warning() {
        let mut p = heap_page(0);
        p[4096..].fill(0);
        match classify_block(&p, 1, BS, 8) {
            BlockAction::Stamp {
                warning:
                    Some(PageProblem::TornPage {
                        zero_from: 4096, ..
                    }),
                ..
            } => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn adjacent_dirty_blocks_coalesce_into_one_range() {
        // Blocks: stamp, stamp, new, stamp, already valid, damaged, stamp, stamp, stamp.
        let mut pages: Vec<Vec<u8>> = vec![heap_page(1), heap_page(2), vec![0u8; BS], heap_page(3)];
        let mut valid = heap_page(4);
        let c = pg_checksum_page(&valid, 104);
        valid[8..10].copy_from_slice(&c.to_le_bytes());
        pages.push(valid);
        let mut damaged = vec![0u8; BS];
        damaged[9] = 1;
        pages.push(damaged);
        pages.extend([heap_page(5), heap_page(6), heap_page(7)]);
        let mut data: Vec<u8> = pages.concat();
        let original = data.clone();
        let mut seen = Vec::new();
        let dirty = stamp_chunk(&mut data, 100, BS, 8, |b, _, a| {
            seen.push((b, std::mem::discriminant(a)))
        });
        assert_eq!(dirty, vec![0..2 * BS, 3 * BS..4 * BS, 6 * BS..9 * BS]);
        assert_eq!(seen.len(), 9);
        assert_eq!(seen[0].0, 100);
        for (i, page) in data.chunks_exact(BS).enumerate() {
            let blk = 100 + i as u32;
            match i {
                2 | 5 => assert_eq!(
                    page,
                    &original[i * BS..(i + 1) * BS],
                    "block {i} must be untouched"
                ),
                _ => {
                    assert_eq!(stored(page), pg_checksum_page(page, blk), "block {i}");
                    // Only pd_checksum changed.
                    assert_eq!(page[..8], original[i * BS..i * BS + 8]);
                    assert_eq!(page[10..], original[i * BS + 10..(i + 1) * BS]);
                }
            }
        }
        // A second pass finds nothing to do: a rerun resumes for the price of a read.
        assert!(stamp_chunk(&mut data, 100, BS, 8, |_, _, _| {}).is_empty());
    }

    #[test]
    fn stamped_page_passes_the_physical_check_with_checksums_on() {
        let mut p = heap_page(9);
        stamp_chunk(&mut p, 42, BS, 8, |_, _, _| {});
        let cfg = PageCheckConfig {
            blcksz: BS,
            max_align: 8,
            checksums: true,
        };
        assert_eq!(check_page(&cfg, &p, 42), PageVerdict::Valid);
        let pair = ChecksumPair {
            stored: stored(&p),
            calculated: pg_checksum_page(&p, 42),
            raw: 0,
        };
        assert_eq!(pair.stored, pair.calculated);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_pages_never_panic_and_only_pd_checksum_changes(bytes in proptest::collection::vec(proptest::num::u8::ANY, BS), blk in 0u64..u32::MAX as u64) {
            let mut page = bytes.clone();
            let dirty = stamp_chunk(&mut page, blk, BS, 8, |_, _, _| {});
            proptest::prop_assert_eq!(&page[..8], &bytes[..8]);
            proptest::prop_assert_eq!(&page[10..], &bytes[10..]);
            if dirty.is_empty() {
                proptest::prop_assert_eq!(&page, &bytes);
            }
        }
    }
}
