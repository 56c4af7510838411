//! Why a `verify` run stopped before it had a report: [`VerifyError`].

use std::io;

use super::host::HostError;
use crate::format::control::ControlFileError;
use crate::ops::backup::BackupError;
use crate::ops::open::OpenError;
use crate::scope::ScopeError;

/// Why a run stopped. The report of a run that got as far as the scan carries its other
/// problems as tool errors instead.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A refusal or failure said in one sentence.
    #[error("{0}")]
    Refused(String),
    /// An operating system error while doing `what`.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Control(#[from] ControlFileError),
    /// The base backup's own files (`backup_label`, the tar archives, the streamed scan).
    #[error(transparent)]
    Backup(#[from] BackupError),
    /// The selection options.
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// The host's or the running server's.
    #[error(transparent)]
    Host(HostError),
}

impl From<HostError> for VerifyError {
    fn from(e: HostError) -> Self {
        VerifyError::Host(e)
    }
}
