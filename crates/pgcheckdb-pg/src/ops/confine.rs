//! Where a write into a cluster may go: a file whose real path (every symbolic link resolved)
//! is inside the data directory's own real path, or inside a tablespace the user named.
//!
//! `pg_tblspc/<oid>` links lead out of the data directory by design, and a `cp -a` copy of a
//! cluster keeps links to the *original's* tablespace directories: a write through one of them
//! changes every cluster that shares the directory. A relation file that is itself a symbolic
//! link can lead anywhere. So a file outside the data directory is written only when it lies in
//! a tablespace named explicitly ([`TablespaceName`]: by OID, or by directory).
//!
//! [`WriteRoots::open`] resolves the path, checks where it leads, opens the *resolved* path
//! with `O_NOFOLLOW` (a last component swapped for a link after the check is refused), checks
//! that the descriptor is a regular file with one name (a hard link shares the file with another
//! place, as `pg_upgrade --link` does) and that the kernel's own record of where the descriptor
//! is (`/proc/self/fd`) is the path that was checked, so a file or directory swapped in between
//! is never written.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pgcheckdb_scan::open::file_type_name;

/// A tablespace the user allows writes into, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TablespaceName {
    /// The tablespace's OID: the directory its link `pg_tblspc/<oid>` leads to.
    Oid(u32),
    /// The tablespace's directory (the `LOCATION` of `CREATE TABLESPACE`) or any directory.
    Dir(PathBuf),
}

/// Why a `--tablespace` value is not a [`TablespaceName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TablespaceNameError {
    #[error("give a tablespace OID or directory")]
    Empty,
    /// All digits, but past the largest OID (the text as given).
    #[error("{0} is not a tablespace OID (at most 4294967295)")]
    OidTooLarge(String),
}

impl FromStr for TablespaceName {
    type Err = TablespaceNameError;

    /// All digits: an OID; anything else: a directory.
    fn from_str(text: &str) -> Result<TablespaceName, TablespaceNameError> {
        if text.is_empty() {
            return Err(TablespaceNameError::Empty);
        }
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse()
                .map(TablespaceName::Oid)
                .map_err(|_| TablespaceNameError::OidTooLarge(text.to_string()));
        }
        Ok(TablespaceName::Dir(PathBuf::from(text)))
    }
}

/// Why a write was refused or could not be prepared; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("could not resolve the data directory {path:?}: {error}")]
    DataDir { path: PathBuf, error: io::Error },
    #[error(
        "--tablespace {oid}: the data directory has no tablespace {oid} (pg_tblspc/{oid}: {error})"
    )]
    NoSuchTablespace { oid: u32, error: io::Error },
    #[error("--tablespace {path:?}: {reason}")]
    BadTablespaceDir { path: PathBuf, reason: String },
    #[error("could not resolve {shown:?}: {error}")]
    Resolve { shown: String, error: io::Error },
    #[error("{shown:?} is in tablespace {oid}, outside the data directory (pg_tblspc/{oid} leads to {dir:?}, which a cp -a copy shares with its original): nothing was written; name the tablespace with --tablespace {oid} to write there")]
    UnnamedTablespace {
        shown: String,
        oid: u32,
        dir: PathBuf,
    },
    #[error("{shown:?} leads outside the data directory {datadir:?} (its real path is {real:?}): nothing was written; name that directory with --tablespace DIR to write there")]
    Outside {
        shown: String,
        datadir: PathBuf,
        real: PathBuf,
    },
    #[error("{shown:?} is not a regular file but a {what}: nothing was written")]
    NotRegular { shown: String, what: &'static str },
    #[error("{shown:?} changed while it was being opened (a file or link swapped in): nothing was written")]
    Swapped { shown: String },
    #[error("{shown:?} has {names} names (hard links; pg_upgrade --link leaves the old and the new cluster sharing their files): writing it would change the other names' file too; nothing was written")]
    HardLinked { shown: String, names: u64 },
    #[error("could not confirm where {shown:?} was opened (/proc/self/fd: {error}): nothing was written")]
    Unconfirmed { shown: String, error: io::Error },
    #[error("could not open {shown:?} for writing: {error}")]
    Open { shown: String, error: io::Error },
}

/// A `pg_tblspc/<oid>` entry and the real directory it leads to.
#[derive(Debug, Clone)]
pub struct TablespaceLink {
    pub oid: u32,
    /// The directory the link leads to, every link resolved.
    pub real: PathBuf,
}

/// The directories a write may go into: the data directory's real path and the real paths of
/// the named tablespaces.
#[derive(Debug, Clone)]
pub struct WriteRoots {
    datadir: PathBuf,
    named: Vec<PathBuf>,
    /// Every tablespace link that resolves, to name the tablespace a refused file lies in.
    links: Vec<TablespaceLink>,
}

impl WriteRoots {
    /// Resolves the data directory and each named tablespace. An OID must be a link (or
    /// directory) in `pg_tblspc/`; a directory must exist.
    pub fn new(datadir: &Path, named: &[TablespaceName]) -> Result<WriteRoots, ConfineError> {
        let real_datadir = fs::canonicalize(datadir).map_err(|error| ConfineError::DataDir {
            path: datadir.to_path_buf(),
            error,
        })?;
        let mut roots = WriteRoots {
            datadir: real_datadir,
            named: Vec::new(),
            links: tablespace_links(datadir),
        };
        for name in named {
            let real = roots.resolve_named(datadir, name)?;
            roots.named.push(real);
        }
        Ok(roots)
    }

    fn resolve_named(
        &self,
        datadir: &Path,
        name: &TablespaceName,
    ) -> Result<PathBuf, ConfineError> {
        match name {
            TablespaceName::Oid(oid) => {
                let link = datadir.join("pg_tblspc").join(oid.to_string());
                fs::canonicalize(&link)
                    .map_err(|error| ConfineError::NoSuchTablespace { oid: *oid, error })
            }
            TablespaceName::Dir(dir) => {
                let bad = |reason: String| ConfineError::BadTablespaceDir {
                    path: dir.clone(),
                    reason,
                };
                let real = fs::canonicalize(dir).map_err(|e| bad(e.to_string()))?;
                let meta = fs::metadata(&real).map_err(|e| bad(e.to_string()))?;
                if !meta.is_dir() {
                    return Err(bad(format!(
                        "not a directory but a {}",
                        file_type_name(&meta.file_type())
                    )));
                }
                Ok(real)
            }
        }
    }

    /// Checks that the real path `real` of the file shown as `shown` may be written.
    fn check(&self, real: &Path, shown: &str) -> Result<(), ConfineError> {
        if real.starts_with(&self.datadir) || self.named.iter().any(|n| real.starts_with(n)) {
            return Ok(());
        }
        match self.links.iter().find(|l| real.starts_with(&l.real)) {
            Some(link) => Err(ConfineError::UnnamedTablespace {
                shown: shown.to_string(),
                oid: link.oid,
                dir: link.real.clone(),
            }),
            None => Err(ConfineError::Outside {
                shown: shown.to_string(),
                datadir: self.datadir.clone(),
                real: real.to_path_buf(),
            }),
        }
    }

    /// Opens the regular file `path` (shown to the user as `shown`) for reading and writing if
    /// its real path may be written: see the module documentation.
    pub fn open(&self, path: &Path, shown: &str) -> Result<File, ConfineError> {
        let real = fs::canonicalize(path).map_err(|error| ConfineError::Resolve {
            shown: shown.to_string(),
            error,
        })?;
        self.check(&real, shown)?;
        if let Ok(meta) = fs::symlink_metadata(&real) {
            if !meta.is_file() {
                return Err(not_regular(shown, &meta));
            }
        }
        let file = open_no_follow(&real, shown)?;
        let opened = file.metadata().map_err(|error| ConfineError::Open {
            shown: shown.to_string(),
            error,
        })?;
        if !opened.is_file() {
            return Err(not_regular(shown, &opened));
        }
        if opened.nlink() > 1 {
            return Err(ConfineError::HardLinked {
                shown: shown.to_string(),
                names: opened.nlink(),
            });
        }
        // Where the descriptor really is: a directory of the path swapped for a link between
        // the check and the open shows here as another path.
        let location =
            fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(|error| {
                ConfineError::Unconfirmed {
                    shown: shown.to_string(),
                    error,
                }
            })?;
        if location != real {
            return Err(ConfineError::Swapped {
                shown: shown.to_string(),
            });
        }
        Ok(file)
    }
}

/// Opens `real` for reading and writing without following a final symbolic link, without
/// blocking on a FIFO and without taking a terminal.
fn open_no_follow(real: &Path, shown: &str) -> Result<File, ConfineError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(real)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) => ConfineError::Swapped {
                shown: shown.to_string(),
            },
            _ => ConfineError::Open {
                shown: shown.to_string(),
                error,
            },
        })
}

fn not_regular(shown: &str, meta: &fs::Metadata) -> ConfineError {
    ConfineError::NotRegular {
        shown: shown.to_string(),
        what: file_type_name(&meta.file_type()),
    }
}

/// The entries of `pg_tblspc/` named by an OID that resolve, with their real directories.
/// Ones that do not resolve are left out: they name no directory a file could lie in.
pub fn tablespace_links(datadir: &Path) -> Vec<TablespaceLink> {
    let Ok(entries) = fs::read_dir(datadir.join("pg_tblspc")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let oid = e.file_name().to_str()?.parse().ok()?;
            let real = fs::canonicalize(e.path()).ok()?;
            Some(TablespaceLink { oid, real })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A data directory `data/` with `base/5/16384`, a tablespace directory `spc/` linked as
    /// `data/pg_tblspc/16400`, holding `PG_17_1/5/16401`, and an unrelated `elsewhere/16385`.
    fn layout() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().expect("tempdir");
        let data = root.path().join("data");
        fs::create_dir_all(data.join("base/5")).unwrap();
        fs::create_dir_all(data.join("pg_tblspc")).unwrap();
        fs::write(data.join("base/5/16384"), [1u8; 16]).unwrap();
        let spc = root.path().join("spc");
        fs::create_dir_all(spc.join("PG_17_1/5")).unwrap();
        fs::write(spc.join("PG_17_1/5/16401"), [2u8; 16]).unwrap();
        symlink(&spc, data.join("pg_tblspc/16400")).unwrap();
        fs::create_dir_all(root.path().join("elsewhere")).unwrap();
        fs::write(root.path().join("elsewhere/16385"), [3u8; 16]).unwrap();
        (root, data)
    }

    #[test]
    fn names_parse_as_oid_or_directory() {
        assert_eq!("16400".parse(), Ok(TablespaceName::Oid(16400)));
        assert_eq!(
            "/srv/spc".parse(),
            Ok(TablespaceName::Dir(PathBuf::from("/srv/spc")))
        );
        assert_eq!(
            "99999999999"
                .parse::<TablespaceName>()
                .unwrap_err()
                .to_string(),
            "99999999999 is not a tablespace OID (at most 4294967295)"
        );
        assert_eq!(
            "".parse::<TablespaceName>().unwrap_err().to_string(),
            "give a tablespace OID or directory"
        );
    }

    #[test]
    fn own_files_open_and_tablespaces_need_naming() {
        let (root, data) = layout();
        let roots = WriteRoots::new(&data, &[]).unwrap();
        assert!(roots
            .open(&data.join("base/5/16384"), "base/5/16384")
            .is_ok());
        let in_spc = data.join("pg_tblspc/16400/PG_17_1/5/16401");
        match roots.open(&in_spc, "x") {
            Err(ConfineError::UnnamedTablespace { oid: 16400, .. }) => {}
            other => panic!("{other:?}"),
        }
        for named in [
            TablespaceName::Oid(16400),
            TablespaceName::Dir(root.path().join("spc")),
        ] {
            let roots = WriteRoots::new(&data, &[named]).unwrap();
            assert!(roots.open(&in_spc, "x").is_ok());
        }
        assert!(matches!(
            WriteRoots::new(&data, &[TablespaceName::Oid(1)]),
            Err(ConfineError::NoSuchTablespace { oid: 1, .. })
        ));
        let file_as_dir = TablespaceName::Dir(data.join("base/5/16384"));
        assert!(matches!(
            WriteRoots::new(&data, &[file_as_dir]),
            Err(ConfineError::BadTablespaceDir { .. })
        ));
    }

    #[test]
    fn a_symlink_out_of_the_data_directory_is_refused() {
        let (root, data) = layout();
        let outside = root.path().join("elsewhere/16385");
        symlink(&outside, data.join("base/5/16385")).unwrap();
        let roots = WriteRoots::new(&data, &[]).unwrap();
        for path in [data.join("base/5/16385"), outside.clone()] {
            match roots.open(&path, "base/5/16385") {
                Err(ConfineError::Outside { real, .. }) => assert_eq!(real, outside),
                other => panic!("{other:?}"),
            }
        }
        // A hard link shares the file with the outside name.
        fs::hard_link(&outside, data.join("base/5/16387")).unwrap();
        assert!(matches!(
            roots.open(&data.join("base/5/16387"), "base/5/16387"),
            Err(ConfineError::HardLinked { names: 2, .. })
        ));
        // The resolved path is opened without following a last link: one swapped in after the
        // check is refused.
        assert!(matches!(
            open_no_follow(&data.join("base/5/16385"), "base/5/16385"),
            Err(ConfineError::Swapped { .. })
        ));
        // A link that stays inside the data directory is fine.
        symlink(data.join("base/5/16384"), data.join("base/5/16386")).unwrap();
        assert!(roots.open(&data.join("base/5/16386"), "x").is_ok());
        // A directory is not a file to write.
        assert!(matches!(
            roots.open(&data.join("base/5"), "base/5"),
            Err(ConfineError::NotRegular {
                what: "directory",
                ..
            })
        ));
    }
}
