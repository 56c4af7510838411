//! The last step of `checksums enable|disable`: `pg_control`'s `data_checksum_version` is
//! rewritten in place, after checking that the lock is still ours and that `pg_control` did not
//! change since the run began.
//!
//! Once the first byte of the new image may have reached the file, a failure leaves the state
//! unknown (the old or the new image may be on disk): [`SwitchError::ControlStateUnknown`] says so
//! and how to check, never "still off".

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use pgcheckdb_scan::open::open_regular;

use super::{Refusal, SwitchError};
use crate::format::control::ControlFile;
use crate::ops::cluster::check_stopped;
use crate::ops::lock::DataDirLock;

/// Re-reads `pg_control`, checks that the lock is still held, that nothing changed since
/// `before` was read and that the cluster is still stopped, then writes the new checksum version
/// in place and syncs it.
pub(super) fn switch_control_file(
    datadir: &Path,
    before: &ControlFile,
    version: u32,
    lock: &DataDirLock,
) -> Result<(), SwitchError> {
    lock.check_held()?;
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
    let path = datadir.join("global/pg_control").display().to_string();
    write_control_file(datadir, &image).map_err(|failure| match failure {
        ControlWriteError::Open(source) => SwitchError::WriteControl { path, source },
        ControlWriteError::AfterWrite(source) => SwitchError::ControlStateUnknown {
            path,
            datadir: datadir.display().to_string(),
            source,
        },
    })
}

/// Where writing `pg_control` failed.
#[derive(Debug)]
pub enum ControlWriteError {
    /// Before any byte was written: the old image is intact.
    Open(io::Error),
    /// While or after writing (write, fsync of the file or of `global/`): either image may be
    /// what the disk holds.
    AfterWrite(io::Error),
}

impl std::fmt::Display for ControlWriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlWriteError::Open(e) => write!(f, "could not open: {e}"),
            ControlWriteError::AfterWrite(e) => write!(f, "could not write or fsync: {e}"),
        }
    }
}

/// Writes a full control-file image in place (as PostgreSQL's `update_controlfile` does: no
/// temporary file, no rename), fsyncs it, then fsyncs `global/`.
pub fn write_control_file(datadir: &Path, image: &[u8]) -> Result<(), ControlWriteError> {
    let global = datadir.join("global");
    let file = open_regular(&global.join("pg_control"), true).map_err(ControlWriteError::Open)?;
    file.write_all_at(image, 0)
        .and_then(|()| fault_injection::control_fsync())
        .and_then(|()| file.sync_all())
        .map_err(ControlWriteError::AfterWrite)?;
    drop(file);
    super::sync::open_directory(&global)
        .and_then(|d| d.sync_all())
        .map_err(ControlWriteError::AfterWrite)
}

/// Test-only failure of the `pg_control` fsync: a real fsync failure cannot be provoked on a
/// healthy disk. Set `PGCHECKDB_TEST_FAIL_CONTROL_FSYNC=1` to make it fail with `EIO`.
mod fault_injection {
    use std::io;

    pub(super) fn control_fsync() -> io::Result<()> {
        if std::env::var_os("PGCHECKDB_TEST_FAIL_CONTROL_FSYNC").is_some() {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
}
