//! The errors of cluster management, worded for a person who has to fix their machine.

use std::io;
use std::path::PathBuf;

/// What went wrong while finding PostgreSQL or driving a cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable binaries for the requested major version.
    #[error("PostgreSQL {major} binaries not found (looked in: {searched}); {hint}")]
    BinariesNotFound {
        major: u32,
        searched: String,
        hint: &'static str,
    },
    /// A directory named by `PGCHECKDB_PG<major>_BIN` or found on disk holds another version.
    #[error("{dir} holds PostgreSQL {found}, not {major}")]
    WrongVersion {
        major: u32,
        found: String,
        dir: PathBuf,
    },
    /// No unprivileged user to run the server as.
    #[error("cannot run PostgreSQL as root and no unprivileged user is available: {0}")]
    NoUser(String),
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    /// A PostgreSQL program ran but failed.
    #[error("{what} failed ({status}){output}")]
    Command {
        what: String,
        status: String,
        output: String,
    },
    /// A query returned something other than what was asked for.
    #[error("unexpected query result: {0}")]
    Query(String),
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Wraps an `io::Error` with what was being done.
pub(crate) fn io_context(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
