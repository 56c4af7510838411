//! The first step of a run, before any catalog is read ([`prepare`]): the source opened,
//! `pg_control` read, a running server or a base backup recognised (and anything else that is
//! not stopped refused), the extended level's spill directory checked, the scan's options set.

use std::path::Path;
use std::time::Instant;

use super::error::VerifyError;
use super::host::{Event, Host};
use super::online::Online;
use super::request::VerifyRequest;
use super::source::Source;
use crate::check::extended::{ExtendedConfig, DEFAULT_MEMORY};
use crate::format::control::{state_of_a_backup, ControlFile, DbState};
use crate::ops::backup::{self, Backup};
use crate::ops::cluster::{check_stopped, RunningReason};
use crate::ops::open::{check_pid_file, read_control_for};
use crate::verify::options::{Level, VerifyOptions};

/// What is known and set before the catalogs are read.
pub struct Prepared {
    pub source: Source,
    /// `--online` on a running server.
    pub online: Option<Online>,
    /// A plain or tar-format base backup (its label and WAL read).
    pub backup: Option<Backup>,
    /// The extended level's memory and spill directory.
    pub extended: Option<ExtendedConfig>,
    pub opts: VerifyOptions,
    /// When the checking began (after the refusals): the summary's `seconds` count from here.
    pub started: Instant,
}

/// Opens the source and reads its `pg_control` (returned beside, for the plan to own).
pub fn prepare(
    request: &VerifyRequest,
    host: &mut dyn Host,
) -> Result<(Prepared, ControlFile), VerifyError> {
    let source = Source::open(request, &|| host.interrupted().is_some())?;
    let datadir = source.datadir.as_path();
    let control = read_control_for(datadir, request.online.is_some())?;
    host.event(Event::ControlRead {
        shown: source.shown(),
    });
    check_pid_file(datadir)?;
    let online = match &request.online {
        Some(o) => Online::start(o, request.level, datadir, &control, host)?,
        None => None,
    };
    let (control, backup) = match (&online, online.as_ref().and_then(Online::paused_at)) {
        // A paused standby: its files stand at one point of the WAL; checked as crash
        // recovery from its last restartpoint would find them.
        (Some(_), Some(replayed)) => {
            let control = read_control_for(datadir, true)?;
            let backup = backup::crash::prepare_paused(datadir, &control, replayed);
            (control, Some(backup))
        }
        (Some(_), None) => (control, None),
        (None, _) => {
            let backup = backup_or_refusal(datadir, &control)?;
            (control, backup)
        }
    };
    let extended = (request.level == Level::Extended)
        .then(|| extended_config(request, datadir))
        .transpose()?;
    let opts = VerifyOptions {
        jobs: request.jobs,
        level: request.level,
        max_bytes_per_sec: request.max_bytes_per_sec,
        count_tuples: request.verbose,
        online: online.as_ref().map(Online::scan_options),
        ..VerifyOptions::default()
    };
    host.event(Event::Starting {
        control: &control,
        level: request.level,
        jobs: opts.jobs,
    });
    let prepared = Prepared {
        source,
        online,
        backup,
        extended,
        opts,
        started: Instant::now(),
    };
    Ok((prepared, control))
}

/// Accepts a stopped cluster (`None`), a plain base backup (its `backup_label` and WAL read) or
/// a cluster that crashed (its WAL from the last checkpoint's redo point read); refuses a
/// running one, naming what would check it.
fn backup_or_refusal(datadir: &Path, control: &ControlFile) -> Result<Option<Backup>, VerifyError> {
    let reason = match check_stopped(datadir, control) {
        Ok(()) => return Ok(None),
        Err(reason) => reason,
    };
    let label = match &reason {
        RunningReason::NotShutDown { .. } if state_of_a_backup(control.state) => {
            backup::read_label(datadir)?
        }
        _ => None,
    };
    let Some(label) = label else {
        if matches!(reason, RunningReason::NotShutDown { .. }) && crashed(control.state) {
            return Ok(Some(backup::crash::prepare(datadir, control)));
        }
        return Err(VerifyError::Refused(format!(
            "cannot verify \"{}\" offline: {reason}; a running server is checked with --online",
            datadir.display()
        )));
    };
    if label.incremental_from.is_some() {
        return Err(VerifyError::Refused(format!(
            "\"{}\" is an incremental backup (backup_label has INCREMENTAL FROM LSN): its relation files hold only changed blocks; combine it with pg_combinebackup first",
            datadir.display()
        )));
    }
    Ok(Some(backup::prepare(datadir, control, label)))
}

/// States `pg_control` is left in when a server stops without a shutdown checkpoint (or a
/// copy was taken while it ran): crash recovery would start from its last checkpoint.
fn crashed(state: DbState) -> bool {
    matches!(
        state,
        DbState::InProduction
            | DbState::InCrashRecovery
            | DbState::InArchiveRecovery
            | DbState::Shutdowning
    )
}

/// `--memory` and `--temp-dir` of the extended level; a spill directory inside the data
/// directory is refused (verify never writes there).
fn extended_config(request: &VerifyRequest, datadir: &Path) -> Result<ExtendedConfig, VerifyError> {
    let temp_dir = request.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let temp = std::fs::canonicalize(&temp_dir).map_err(|source| VerifyError::Io {
        what: format!("could not access --temp-dir \"{}\"", temp_dir.display()),
        source,
    })?;
    if !temp.is_dir() {
        return Err(VerifyError::Refused(format!(
            "--temp-dir \"{}\" is not a directory",
            temp_dir.display()
        )));
    }
    let data = std::fs::canonicalize(datadir).map_err(|source| VerifyError::Io {
        what: format!("could not access \"{}\"", datadir.display()),
        source,
    })?;
    if temp.starts_with(&data) {
        return Err(VerifyError::Refused(format!(
            "--temp-dir \"{}\" is inside the data directory; verify never writes there",
            temp_dir.display()
        )));
    }
    Ok(ExtendedConfig {
        memory: request.memory.unwrap_or(DEFAULT_MEMORY),
        temp_dir: temp,
        verbose: request.verbose,
    })
}
