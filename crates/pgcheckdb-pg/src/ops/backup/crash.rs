//! A cluster that was not shut down: crashed (a server killed, a machine lost), or copied while
//! it ran without backup mode. Crash recovery would replay the WAL in `pg_wal` from the redo
//! point of `pg_control`'s last checkpoint to the end of the valid WAL; the pages its records
//! name are rewritten then, every other page is already what the recovered cluster will hold.
//! So the same rule as a base backup's applies ([`super`]), from the redo point.

use std::path::Path;

use super::{wal, wal_format, Backup, Origin, ReplayBasis};
use crate::format::control::ControlFile;
use crate::format::lsn::Lsn;
use crate::verify::report::CrashSummary;

/// Where crash recovery would start, from `pg_control`.
#[derive(Debug, Clone)]
pub struct CrashPoint {
    /// `checkPointCopy.redo`: replay starts here.
    pub redo: Lsn,
    /// `checkPoint`: the last checkpoint record.
    pub checkpoint: Lsn,
    /// `state`, in PostgreSQL's words (`in production`, ...).
    pub state: String,
    /// `time`: when `pg_control` was last written (to tell whether it changed during the run).
    pub control_time: i64,
    /// A running standby whose replay this run paused (`--pause-replay`), not a crash: its
    /// stillness is checked with the server ([`super::super::verifier`]), not here.
    pub paused_standby: bool,
}

/// Reads the WAL from the redo point to its end into the set of blocks recovery rewrites.
pub fn prepare(datadir: &Path, control: &ControlFile) -> Backup {
    prepare_from(datadir, control, false)
}

/// The same for a standby whose replay is paused at `replayed`: the WAL from its last
/// restartpoint's redo point names every block replay changed since (and the WAL received but
/// not replayed, a few more). The rule holds only if that WAL reaches `replayed`.
pub fn prepare_paused(datadir: &Path, control: &ControlFile, replayed: Lsn) -> Backup {
    let mut backup = prepare_from(datadir, control, true);
    if let ReplayBasis::Wal { set, complete } = &mut backup.basis {
        let reached = set.last_record.map_or(set.end_lsn.0, |(_, next)| next);
        *complete &= reached >= replayed.0;
    }
    backup
}

fn prepare_from(datadir: &Path, control: &ControlFile, paused_standby: bool) -> Backup {
    let point = CrashPoint {
        redo: Lsn(control.redo),
        checkpoint: Lsn(control.checkpoint),
        state: control.state.to_string(),
        control_time: control.time,
        paused_standby,
    };
    let basis = match wal::collect(datadir, wal_format(control), point.redo) {
        Some(set) => {
            // Recovery replays up to the first record that is not valid: that is the end.
            // It also needs the checkpoint record itself.
            let complete = set.decode_error.is_none() && set.end_lsn > point.checkpoint;
            ReplayBasis::Wal {
                set: Box::new(set),
                complete,
            }
        }
        None => ReplayBasis::PageLsn,
    };
    Backup {
        origin: Origin::Crash(point),
        basis,
        manifest_wal_end: None,
        newer_pages: None,
    }
}

/// After the scan: `pg_control` and the end of the WAL are as they were before it. A server
/// that `postmaster.pid` does not reveal (one in another PID namespace, or whose lock file was
/// removed) writes WAL before any page it changes, and `pg_control` at every checkpoint; if
/// neither moved, the files read are one crash image, the one recovery would start from.
pub fn check_still(datadir: &Path, backup: &Backup) -> Result<(), String> {
    let Origin::Crash(point) = &backup.origin else {
        return Ok(());
    };
    if point.paused_standby {
        return Ok(());
    }
    let control = crate::ops::open::read_control(datadir).map_err(|e| e.to_string())?;
    let moved = control.checkpoint != point.checkpoint.0
        || control.redo != point.redo.0
        || control.time != point.control_time;
    let grew =
        (backup.basis.wal()).is_some_and(|set| wal::grew(datadir, wal_format(&control), set));
    if moved || grew {
        let what = if moved { "pg_control" } else { "the WAL" };
        return Err(format!(
            "{what} of \"{}\" changed while it was read: a server is running on it (one postmaster.pid does not name, e.g. in another PID namespace); nothing read can be judged as a crashed cluster: check it with --online",
            datadir.display()
        ));
    }
    Ok(())
}

const NOTE_WAL: &str = "pages with a block reference in the WAL from the redo point on are rewritten by crash recovery and were not verified, nor any cross-page fact about their relations; every other page was";
const NOTE_WAL_SHORT: &str = "the WAL in pg_wal could not be read to its end (or does not reach the last checkpoint record): pages newer than the redo point were not verified, and no cross-page fact was judged";
const NOTE_LSN: &str = "no WAL from the redo point in pg_wal (PostgreSQL could not recover this cluster either): pages newer than the redo point were not verified, and no cross-page fact was judged";

/// The summary's `crash_recovery` object.
pub fn summary(point: &CrashPoint, backup: &Backup, unverified: u64, aside: u64) -> CrashSummary {
    let (rule, note) = match &backup.basis {
        ReplayBasis::Wal { complete: true, .. } => ("wal_block_set", NOTE_WAL),
        ReplayBasis::Wal { .. } => ("page_lsn", NOTE_WAL_SHORT),
        ReplayBasis::PageLsn => ("page_lsn", NOTE_LSN),
    };
    let (wal_end, records, blocks) = backup.basis.wal_counts();
    let relations = backup
        .basis
        .wal()
        .map_or(0, |set| set.relations.len() + set.databases.len());
    CrashSummary {
        paused_standby: point.paused_standby,
        state: point.state.clone(),
        redo_lsn: point.redo,
        checkpoint_lsn: point.checkpoint,
        rule: rule.to_string(),
        wal_end_lsn: wal_end,
        wal_records: records,
        wal_blocks: blocks,
        wal_relations: relations as u64,
        replayed_blocks_unverified: unverified,
        replayed_findings_set_aside: aside,
        note: note.to_string(),
    }
}
