//! Where a run reads from ([`Source`]): a data directory or a plain base backup, read in place,
//! or a tar-format base backup, whose first pass stages the control file, catalogs and WAL in
//! a directory of its own (`ops::backup::tar`) and whose second pass streams the blocks.

use std::path::{Path, PathBuf};

use super::error::VerifyError;
use super::request::VerifyRequest;
use crate::datadir::DataDirectory;
use crate::format::control::ControlFile;
use crate::ops::backup::tar::{is_tar_backup, TarBackup};
use crate::ops::open::resolve_datadir;
use crate::plan::Plan;
use crate::verify::options::Level;

/// The directory a run reads, and the tar-format backup it was staged from.
pub struct Source {
    /// The tar-format backup of `--backup`, after its first pass.
    pub tar: Option<TarBackup>,
    /// The directory read: the data directory, the plain backup, or the tar backup's staging
    /// directory.
    pub datadir: PathBuf,
}

impl Source {
    /// Opens the backup or the data directory of `request`; `cancelled` stops the first pass
    /// of a tar-format backup.
    pub fn open(
        request: &VerifyRequest,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Source, VerifyError> {
        let tar = open_tar(request, cancelled)?;
        let datadir = match (&tar, &request.backup) {
            (Some(t), _) => t.staging().to_path_buf(),
            (None, Some(dir)) => resolve_datadir(Some(dir))?,
            (None, None) => resolve_datadir_or_hint(request.pgdata.as_ref())?,
        };
        Ok(Source { tar, datadir })
    }

    /// The directory as named: a tar backup's own rather than its staging directory.
    pub fn shown(&self) -> &Path {
        self.tar
            .as_ref()
            .map_or(self.datadir.as_path(), |t| t.dir.as_path())
    }

    /// The relation files: listed from the directory, or from the tar backup's members.
    pub fn listing(&self, control: &ControlFile) -> DataDirectory {
        match &self.tar {
            Some(t) => t.listing(control),
            None => Plan::list(&self.datadir, control),
        }
    }
}

/// The tar-format backup of `--backup`, after its first pass; `None` for a plain backup or
/// `-D`.
fn open_tar(
    request: &VerifyRequest,
    cancelled: &dyn Fn() -> bool,
) -> Result<Option<TarBackup>, VerifyError> {
    let Some(dir) = &request.backup else {
        return Ok(None);
    };
    if !dir.is_dir() {
        return Err(VerifyError::Refused(format!(
            "\"{}\" is not a directory",
            dir.display()
        )));
    }
    if !is_tar_backup(dir) {
        return Ok(None);
    }
    if request.level == Level::Extended {
        return Err(VerifyError::Refused(
            "the extended level is not available on a tar-format backup (its phases read the files in an order of their own, a stream has one); use --level standard, or unpack the backup and use -D".into(),
        ));
    }
    if request.estimate {
        return Err(VerifyError::Refused("--estimate samples the files of a data directory; it does not apply to a tar-format backup".into()));
    }
    TarBackup::open(dir, cancelled)
        .map(Some)
        .map_err(|e| VerifyError::Backup(e.into()))
}

/// `-D`'s data directory, with a hint when it is a tar-format backup.
fn resolve_datadir_or_hint(pgdata: Option<&PathBuf>) -> Result<PathBuf, VerifyError> {
    if let Some(dir) = pgdata.filter(|d| is_tar_backup(d)) {
        return Err(VerifyError::Refused(format!(
            "\"{}\" is a tar-format base backup: verify it with --backup {}",
            dir.display(),
            dir.display()
        )));
    }
    Ok(resolve_datadir(pgdata)?)
}
