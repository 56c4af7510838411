//! Opening a data directory named on the command line, shared by every command that reads
//! one: the directory checked to be one ([`resolve_datadir`]), `pg_control` read and held
//! against `PG_VERSION` ([`read_control`]) and `postmaster.pid` checked to be readable
//! ([`check_pid_file`]).

use std::io;
use std::path::{Path, PathBuf};

use pgcheckdb_scan::open::{not_regular, read_regular};

use crate::format::control::{read_pg_version_file, ControlFile, ControlFileError};
use crate::verify::online::read_control_settled;

/// Why a data directory cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A refusal said in one sentence.
    #[error("{0}")]
    Refused(String),
    /// An operating system error while looking at `what`.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Control(#[from] ControlFileError),
}

/// The data directory from `-D` or `$PGDATA` (`None` when neither was given), checked to look
/// like one.
pub fn resolve_datadir(arg: Option<&PathBuf>) -> Result<PathBuf, OpenError> {
    let Some(dir) = arg else {
        return Err(OpenError::Refused(
            "no data directory specified: use -D DIR or set PGDATA".into(),
        ));
    };
    let meta = std::fs::metadata(dir).map_err(|source| OpenError::Io {
        what: format!("could not access data directory \"{}\"", dir.display()),
        source,
    })?;
    if !meta.is_dir() {
        return Err(OpenError::Refused(format!(
            "\"{}\" is not a directory",
            dir.display()
        )));
    }
    let control = dir.join("global").join("pg_control");
    match std::fs::metadata(&control) {
        Ok(_) => Ok(dir.clone()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(OpenError::Refused(format!(
            "\"{}\" is not a PostgreSQL data directory: global/pg_control is missing",
            dir.display()
        ))),
        Err(source) => Err(OpenError::Io {
            what: format!("could not access \"{}\"", control.display()),
            source,
        }),
    }
}

/// Reads pg_control, checks it against PG_VERSION and refuses versions pgcheckdb does not
/// know the formats of.
pub fn read_control(datadir: &Path) -> Result<ControlFile, OpenError> {
    read_control_for(datadir, false)
}

/// [`read_control`]; `online`: re-read while the CRC fails (the server rewrites the file).
pub fn read_control_for(datadir: &Path, online: bool) -> Result<ControlFile, OpenError> {
    let control = if online {
        read_control_settled(datadir)?
    } else {
        ControlFile::read_from_datadir(datadir)?
    };
    let file_major = read_pg_version_file(datadir).map_err(OpenError::Refused)?;
    if let Some(major) = control.major {
        if major != file_major {
            return Err(OpenError::Refused(format!(
                "pg_control says PostgreSQL {major} but PG_VERSION says {file_major}"
            )));
        }
    }
    control
        .supported_major(file_major)
        .map_err(OpenError::Refused)?;
    Ok(control)
}

/// `postmaster.pid` must be absent or a readable regular file: anything else leaves open
/// whether a server is running.
pub fn check_pid_file(datadir: &Path) -> Result<(), OpenError> {
    match read_regular(&datadir.join("postmaster.pid"), 64 << 10) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => {
            let why = match not_regular(&e) {
                Some(what) => format!("it is a {what}, not a regular file"),
                None => e.to_string(),
            };
            Err(OpenError::Refused(format!(
                "could not read \"postmaster.pid\" ({why}): cannot tell whether a server is running"
            )))
        }
    }
}
