//! Tar-format base backups (`pg_basebackup -Ft`): `base.tar`, one `<oid>.tar` per tablespace
//! and, with `-X stream`, `pg_wal.tar`, each plain or compressed (`.gz`, `.lz4`, `.zst`),
//! with `backup_manifest` beside them. They are read as streams ([`archive`]); nothing of the
//! relation data is unpacked.
//!
//! Naming findings and the standard level need the catalogs (`pg_class`, ...), `pg_control`,
//! `pg_xact` and the WAL, which sit inside the archives in any order relative to the data
//! files. The choice: **two passes**.
//! 1. [`TarBackup::open`] reads every archive once and keeps what the checks' readers need
//!    besides the pages: every member that is not a relation file (control file, `PG_VERSION`,
//!    `backup_label`, relation maps, `pg_xact`, ... and the WAL of `pg_wal.tar`) and the
//!    relation files of system catalogs (file number below `FirstNormalObjectId`, plus the
//!    files a relation map or the catalogs name for a system relation, fetched by one more
//!    pass after a `VACUUM FULL` of a catalog gave it a new file number). Those few files are
//!    written to a private staging directory (mode 0700, a random name, files 0600 created
//!    with `O_EXCL|O_NOFOLLOW`; removed when the run ends) so that the file-based readers of
//!    the control file, the catalogs, `pg_xact` and the WAL are reused unchanged. Only the
//!    members those readers open are staged ([`needed_member`]), each at most as large as
//!    PostgreSQL ever makes a file of its kind: a larger one is set aside and reported, never
//!    unpacked, so a forged archive cannot fill the temporary disk. It also lists every
//!    regular member: the relation files become the plan.
//! 2. [`scan::scan`] reads the data archives again and hands each relation file's whole
//!    blocks to the same page checks as `verify -D` (a [`crate::verify::run::BlockSource`]), and
//!    computes each member's manifest checksum in that same read.
//!
//! The cost is one more decompression of each archive; the gain is that findings are named
//! and the standard level's checks run as for a directory, with memory and disk use bounded by
//! the catalogs, not by the data. Only regular members are data: directories, the tablespace
//! links of `pg_tblspc/` and other types are skipped.

pub mod archive;
pub mod scan;

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use archive::{Archive, ArchiveError, Compression, Member, MemberVisitor, StopReading};

use crate::catalog::FIRST_NORMAL_OBJECT_ID;
use crate::datadir::{DataDirectory, Location, RelationDir, RelationFile};
use crate::format::control::ControlFile;
use crate::format::relfile::{parse_relation_file_name, RelFileName};

/// Why a tar-format backup cannot be read (its first pass).
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// The backup's directory could not be listed.
    #[error("could not list \"{}\": {source}", dir.display())]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Two tar files hold the same part (`base.tar` and `base.tar.gz`, say).
    #[error("\"{}\" and \"{}\" are the same part of the backup: keep one", first.display(), second.display())]
    SamePart { first: PathBuf, second: PathBuf },
    #[error("\"{}\" has no base.tar", dir.display())]
    NoBase { dir: PathBuf },
    #[error("could not create a staging directory: {0}")]
    StagingDir(#[source] std::io::Error),
    /// A member's file could not be created in the staging directory.
    #[error("could not write \"{}\" in the staging directory: {source}", path.display())]
    StageFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// What one tar file of the backup holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `base.tar`: the data directory.
    Base,
    /// `<oid>.tar`: the tablespace's directory (`pg_tblspc/<oid>/` in the data directory).
    Tablespace(u32),
    /// `pg_wal.tar` (`-X stream`): `pg_wal/`.
    Wal,
}

/// One tar file of the backup.
#[derive(Debug, Clone)]
pub struct TarFile {
    pub path: PathBuf,
    pub compression: Compression,
    pub role: Role,
}

impl TarFile {
    /// A member's path as it is in the data directory (`/`-separated).
    pub fn data_path(&self, member: &str) -> String {
        match self.role {
            Role::Base => member.to_string(),
            Role::Tablespace(oid) => format!("pg_tblspc/{oid}/{member}"),
            Role::Wal => format!("pg_wal/{member}"),
        }
    }
}

/// A regular member of a data archive.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Path in the data directory.
    pub path: String,
    pub size: u64,
}

/// A tar-format backup after the first pass.
pub struct TarBackup {
    pub dir: PathBuf,
    /// `base.tar` first, then the tablespaces by oid, then `pg_wal.tar`.
    pub archives: Vec<TarFile>,
    /// Every regular member of the data archives (not `pg_wal.tar`), in archive order.
    pub members: Vec<Listed>,
    staging: tempfile::TempDir,
    /// The relation files staged, by `(database, tablespace, file number)`.
    staged: HashSet<(u32, u32, u32)>,
    /// Needed members larger than PostgreSQL makes a file of their kind: not staged.
    pub oversized: Vec<Oversized>,
}

/// A member the readers need that is larger than any file PostgreSQL writes there.
#[derive(Debug, Clone)]
pub struct Oversized {
    /// Path in the data directory.
    pub path: String,
    pub size: u64,
    /// What the file should be, and the most PostgreSQL writes there.
    pub what: &'static str,
    pub cap: u64,
}

/// The mode of the staging directory and of every file staged in it: the catalogs staged
/// include `pg_authid` (password hashes), so nobody else may read them.
const PRIVATE_DIR_MODE: u32 = 0o700;
const PRIVATE_FILE_MODE: u32 = 0o600;

/// Whether `dir` holds a tar-format backup (a `base.tar*`); [`find_archives`] says what is
/// wrong with it, if anything.
pub fn is_tar_backup(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            Compression::of_name(&e.file_name().to_string_lossy())
                .is_some_and(|(stem, _)| stem == "base")
        })
    })
}

/// The tar files of the backup in `dir`.
pub fn find_archives(dir: &Path) -> Result<Vec<TarFile>, TarError> {
    let list = |source| TarError::List {
        dir: dir.to_path_buf(),
        source,
    };
    let entries = fs::read_dir(dir).map_err(list)?;
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(list)?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((stem, compression)) = Compression::of_name(&name) else {
            continue;
        };
        let role = match stem {
            "base" => Role::Base,
            "pg_wal" => Role::Wal,
            oid => match oid.parse::<u32>() {
                Ok(oid) if oid > 0 => Role::Tablespace(oid),
                _ => continue,
            },
        };
        out.push(TarFile {
            path: e.path(),
            compression,
            role,
        });
    }
    out.sort_by_key(|t| match t.role {
        Role::Base => (0, 0),
        Role::Tablespace(oid) => (1, oid),
        Role::Wal => (2, 0),
    });
    for pair in out.windows(2) {
        if pair[0].role == pair[1].role {
            return Err(TarError::SamePart {
                first: pair[0].path.clone(),
                second: pair[1].path.clone(),
            });
        }
    }
    if !out.iter().any(|t| t.role == Role::Base) {
        return Err(TarError::NoBase {
            dir: dir.to_path_buf(),
        });
    }
    Ok(out)
}

/// A relation file's place, parsed from its path in the data directory.
pub fn relation_path(path: &str) -> Option<(Location, &str, RelFileName)> {
    let (dir, name) = path.rsplit_once('/')?;
    let parts: Vec<&str> = dir.split('/').collect();
    let location = match parts.as_slice() {
        ["global"] => Location::Global,
        ["base", db] => Location::Database {
            db_oid: db.parse().ok()?,
        },
        ["pg_tblspc", spc, version, db] if version.starts_with("PG_") => Location::Tablespace {
            spc_oid: spc.parse().ok()?,
            db_oid: db.parse().ok()?,
        },
        _ => return None,
    };
    Some((location, dir, parse_relation_file_name(name)?))
}

fn file_key(location: Location, relfilenode: u32) -> (u32, u32, u32) {
    (location.db_oid(), location.tablespace_oid(), relfilenode)
}

impl TarBackup {
    /// The first pass: lists the archives' members and stages the files the readers need.
    /// `cancelled` is asked between pieces of data: a signal stops the pass.
    pub fn open(dir: &Path, cancelled: &dyn Fn() -> bool) -> Result<TarBackup, TarError> {
        let archives = find_archives(dir)?;
        let staging = tempfile::Builder::new()
            .prefix("pgcheckdb-tar-")
            .permissions(fs::Permissions::from_mode(PRIVATE_DIR_MODE))
            .tempdir()
            .map_err(TarError::StagingDir)?;
        let mut backup = TarBackup {
            dir: dir.to_path_buf(),
            archives,
            members: Vec::new(),
            staging,
            staged: HashSet::new(),
            oversized: Vec::new(),
        };
        backup.stage(&Wanted::First, cancelled)?;
        // A catalog rewritten by VACUUM FULL has a file number past the initdb range: the
        // relation maps name the mapped ones, the catalogs the others.
        for _ in 0..2 {
            let missing = backup.missing_catalog_files();
            if missing.is_empty() {
                break;
            }
            backup.stage(&Wanted::Only(missing), cancelled)?;
        }
        Ok(backup)
    }

    /// The staging directory: the data directory the file-based readers see.
    pub fn staging(&self) -> &Path {
        self.staging.path()
    }

    /// Reads the archives, staging what `wanted` selects (and listing the members the first
    /// time).
    fn stage(&mut self, wanted: &Wanted, cancelled: &dyn Fn() -> bool) -> Result<(), TarError> {
        let first = matches!(wanted, Wanted::First);
        for tar in self.archives.clone() {
            if !first && tar.role == Role::Wal {
                continue;
            }
            let mut stager = Stager {
                tar: &tar,
                root: self.staging.path(),
                wanted,
                list: first && tar.role != Role::Wal,
                members: &mut self.members,
                staged: &mut self.staged,
                oversized: &mut self.oversized,
                cancelled,
                out: None,
                error: None,
            };
            let mut archive = Archive::open(&tar.path, tar.compression)?;
            let result = archive.for_each(&mut stager);
            if let Some(e) = stager.error {
                return Err(e);
            }
            result?;
        }
        Ok(())
    }

    /// The files of system relations (oid below `FirstNormalObjectId`) that the relation
    /// maps and the staged catalogs name but that were not staged.
    fn missing_catalog_files(&self) -> HashSet<(u32, u32, u32)> {
        let mut keys = HashSet::new();
        let root = self.staging();
        let global = crate::datadir::Location::Global;
        if let Ok(map) = crate::catalog::relmap::read_relmap(&root.join("global")) {
            keys.extend(map.values().map(|&n| file_key(global, n)));
        }
        for m in &self.members {
            if let Some(db) = m
                .path
                .strip_prefix("base/")
                .and_then(|r| r.strip_suffix("/pg_filenode.map"))
            {
                if let (Ok(db_oid), Ok(map)) = (
                    db.parse::<u32>(),
                    crate::catalog::relmap::read_relmap(&root.join("base").join(db)),
                ) {
                    let loc = Location::Database { db_oid };
                    keys.extend(map.values().map(|&n| file_key(loc, n)));
                }
            }
        }
        let present: HashSet<(u32, u32, u32)> = self
            .members
            .iter()
            .filter_map(|m| relation_path(&m.path))
            .map(|(loc, _, name)| file_key(loc, name.relfilenode))
            .collect();
        let mut missing: HashSet<_> = keys
            .into_iter()
            .filter(|k| present.contains(k) && !self.staged.contains(k))
            .collect();
        if missing.is_empty() {
            if let Ok(control) = ControlFile::read_from_datadir(root) {
                let catalog = crate::catalog::Catalog::read_with(root, &control, false);
                missing.extend(
                    catalog
                        .relations
                        .iter()
                        .filter(|(k, r)| {
                            r.oid < FIRST_NORMAL_OBJECT_ID
                                && present.contains(*k)
                                && !self.staged.contains(*k)
                        })
                        .map(|(k, _)| *k),
                );
            }
        }
        missing
    }

    /// The relation files of the data archives, as a data directory listing whose files'
    /// paths point into the staging directory (only the staged ones exist there).
    pub fn listing(&self, control: &ControlFile) -> DataDirectory {
        let version_dir = control.tablespace_version_directory();
        let mut out = DataDirectory::default();
        let mut dirs: std::collections::HashMap<String, Arc<RelationDir>> = Default::default();
        for m in &self.members {
            let Some((location, dir, name)) = relation_path(&m.path) else {
                continue;
            };
            if let (Location::Tablespace { .. }, Some(v)) = (location, version_dir.as_deref()) {
                if dir.split('/').nth(2) != Some(v) {
                    continue;
                }
            }
            if name.temp_backend.is_some() {
                out.skipped_temp_files += 1;
                continue;
            }
            let rd = dirs
                .entry(dir.to_string())
                .or_insert_with(|| {
                    Arc::new(RelationDir {
                        path: self.staging().join(dir),
                        rel: dir.to_string(),
                    })
                })
                .clone();
            out.files.push(RelationFile {
                dir: rd,
                location,
                name,
                size: m.size,
            });
        }
        crate::datadir::sort_relation_files(&mut out.files);
        out
    }
}

/// Creates `dir` and its missing parents inside the staging directory, each 0700.
fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
}

/// Creates a new file 0600; refuses a name that exists, a symbolic link among them (a member
/// listed twice is refused, not written twice).
fn create_private_file(path: &Path) -> std::io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// What a staging pass keeps.
enum Wanted {
    /// Non-relation files, system catalogs' files and all of `pg_wal.tar`.
    First,
    /// Only these relation files (by file key).
    Only(HashSet<(u32, u32, u32)>),
}

/// The member visitor of a staging pass.
struct Stager<'a> {
    tar: &'a TarFile,
    root: &'a Path,
    wanted: &'a Wanted,
    list: bool,
    members: &'a mut Vec<Listed>,
    staged: &'a mut HashSet<(u32, u32, u32)>,
    oversized: &'a mut Vec<Oversized>,
    cancelled: &'a dyn Fn() -> bool,
    out: Option<std::io::BufWriter<fs::File>>,
    /// A write error (not the archive's fault).
    error: Option<TarError>,
}

impl Stager<'_> {
    /// Whether a member is staged: `Some(Some(key))` for a relation file, `Some(None)` for
    /// another file the readers need, `None` to pass it by. A needed member larger than its
    /// kind can be is passed by and noted as oversized.
    fn keeps(&mut self, path: &str, size: u64) -> Option<Option<(u32, u32, u32)>> {
        let relation = relation_path(path);
        let kept = match (self.wanted, relation) {
            (Wanted::First, None) => match needed_member(path) {
                Some(need) if size > need.cap => {
                    self.oversized.push(Oversized {
                        path: path.to_string(),
                        size,
                        what: need.what,
                        cap: need.cap,
                    });
                    None
                }
                Some(_) => Some(None),
                None => None,
            },
            (Wanted::First, Some((loc, _, name))) => (name.relfilenode < FIRST_NORMAL_OBJECT_ID
                && name.temp_backend.is_none())
            .then_some(Some(file_key(loc, name.relfilenode))),
            (Wanted::Only(keys), Some((loc, _, name))) => {
                let key = file_key(loc, name.relfilenode);
                keys.contains(&key).then_some(Some(key))
            }
            (Wanted::Only(_), None) => None,
        };
        if let Some(Some(_)) = kept {
            if size > MAX_RELATION_SEGMENT {
                self.oversized.push(Oversized {
                    path: path.to_string(),
                    size,
                    what: "a relation segment file",
                    cap: MAX_RELATION_SEGMENT,
                });
                return None;
            }
        }
        kept
    }
}

/// A kind of file the readers need, and the most PostgreSQL ever writes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needed {
    pub what: &'static str,
    pub cap: u64,
}

/// The most bytes of a staged system catalog's segment file (`RELSEG_SIZE` blocks of the
/// default build: 1 GB).
const MAX_RELATION_SEGMENT: u64 = 1 << 30;
/// `PG_CONTROL_FILE_SIZE`.
const CONTROL_FILE: Needed = Needed {
    what: "pg_control",
    cap: crate::format::control::PG_CONTROL_FILE_SIZE as u64,
};
/// `PG_VERSION` holds the major version and a newline.
const VERSION_FILE: Needed = Needed {
    what: "a PG_VERSION file",
    cap: 64,
};
const LABEL_FILE: Needed = Needed {
    what: "backup_label",
    cap: crate::ops::backup::label::MAX_LABEL_BYTES,
};
/// 512 bytes in 14-15, 524 from 16 on.
const RELMAP_FILE: Needed = Needed {
    what: "a relation map (pg_filenode.map)",
    cap: 524,
};
/// `SLRU_PAGES_PER_SEGMENT` pages of the largest block size.
const SLRU_SEGMENT: Needed = Needed {
    what: "an SLRU segment (32 pages)",
    cap: 32 * 32768,
};
/// A two-phase state file is at most `MaxAllocSize`.
const TWOPHASE_FILE: Needed = Needed {
    what: "a two-phase state file",
    cap: (1 << 30) - 1,
};
/// The largest `wal_segment_size`.
const WAL_SEGMENT: Needed = Needed {
    what: "a WAL segment",
    cap: 1 << 30,
};
/// A timeline history file: a line per timeline switch.
const HISTORY_FILE: Needed = Needed {
    what: "a timeline history file",
    cap: 16 << 20,
};
const BACKUP_HISTORY_FILE: Needed = Needed {
    what: "a backup history file",
    cap: crate::ops::backup::label::MAX_LABEL_BYTES,
};

/// Which non-relation members the readers open, by their path in the data directory: the
/// control file, `PG_VERSION`s, `backup_label`, relation maps, the SLRUs the bounds and hint
/// checks read, two-phase state files and the WAL. Everything else (configuration files,
/// statistics, replication slots, anything a forged archive adds) is passed by.
pub fn needed_member(path: &str) -> Option<Needed> {
    let parts: Vec<&str> = path.split('/').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let hex = |s: &str, lens: std::ops::RangeInclusive<usize>| {
        lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    match parts.as_slice() {
        ["global", "pg_control"] => Some(CONTROL_FILE),
        ["PG_VERSION"] => Some(VERSION_FILE),
        ["base", db, "PG_VERSION"] if digits(db) => Some(VERSION_FILE),
        ["backup_label"] => Some(LABEL_FILE),
        ["global", "pg_filenode.map"] => Some(RELMAP_FILE),
        ["base", db, "pg_filenode.map"] if digits(db) => Some(RELMAP_FILE),
        ["pg_xact", seg] | ["pg_multixact", "offsets" | "members", seg] if hex(seg, 4..=15) => {
            Some(SLRU_SEGMENT)
        }
        ["pg_twophase", name] if hex(name, 16..=16) => Some(TWOPHASE_FILE),
        ["pg_wal", name] => wal_member(name),
        _ => None,
    }
}

/// A member of `pg_wal/`: a segment (whole or `.partial`), a timeline history file or a
/// backup history file.
fn wal_member(name: &str) -> Option<Needed> {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let (stem, suffix) = name.split_once('.').unwrap_or((name, ""));
    match suffix {
        "" | "partial" if hex(stem, 24) => Some(WAL_SEGMENT),
        "history" if hex(stem, 8) => Some(HISTORY_FILE),
        _ if hex(stem, 24)
            && suffix
                .strip_suffix(".backup")
                .is_some_and(|off| hex(off, 8)) =>
        {
            Some(BACKUP_HISTORY_FILE)
        }
        _ => None,
    }
}

impl MemberVisitor for Stager<'_> {
    fn start(&mut self, member: &Member) -> bool {
        let path = self.tar.data_path(&member.path);
        if self.list {
            self.members.push(Listed {
                path: path.clone(),
                size: member.size,
            });
        }
        let Some(key) = self.keeps(&path, member.size) else {
            return false;
        };
        // Paths come from the archive: nothing may leave the staging directory.
        if path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return false;
        }
        let target = self.root.join(&path);
        let opened = target
            .parent()
            .map_or(Ok(()), create_private_dirs)
            .and_then(|()| create_private_file(&target));
        match opened {
            Ok(f) => {
                self.out = Some(std::io::BufWriter::with_capacity(1 << 20, f));
                if let Some(key) = key {
                    self.staged.insert(key);
                }
                true
            }
            Err(e) => {
                self.error.get_or_insert(TarError::StageFile {
                    path: target.clone(),
                    source: e,
                });
                false
            }
        }
    }

    fn cancelled(&self) -> bool {
        (self.cancelled)()
    }

    fn data(&mut self, bytes: &[u8]) -> Result<(), StopReading> {
        if let Some(out) = self.out.as_mut() {
            out.write_all(bytes).map_err(StopReading::Staging)?;
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), StopReading> {
        if let Some(mut out) = self.out.take() {
            out.flush().map_err(StopReading::Staging)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_paths_map_to_relation_files() {
        let (loc, dir, name) = relation_path("base/5/16384_vm.1").expect("relation");
        assert_eq!((loc, dir), (Location::Database { db_oid: 5 }, "base/5"));
        assert_eq!((name.relfilenode, name.segno), (16384, 1));
        let (loc, _, _) = relation_path("pg_tblspc/16400/PG_17_202406281/5/16401").expect("spc");
        assert_eq!(
            loc,
            Location::Tablespace {
                spc_oid: 16400,
                db_oid: 5
            }
        );
        assert!(relation_path("global/pg_control").is_none());
        assert!(relation_path("base/5/pg_filenode.map").is_none());
        assert!(relation_path("pg_xact/0000").is_none());
        let spc = TarFile {
            path: PathBuf::from("16400.tar"),
            compression: Compression::None,
            role: Role::Tablespace(16400),
        };
        assert_eq!(spc.data_path("PG_17_1/5/1"), "pg_tblspc/16400/PG_17_1/5/1");
    }

    #[test]
    fn messages_are_the_old_texts() {
        let io = || std::io::Error::other("boom");
        let cases = [
            (
                TarError::List {
                    dir: "/b".into(),
                    source: io(),
                }
                .to_string(),
                "could not list \"/b\": boom",
            ),
            (
                TarError::SamePart {
                    first: "/b/base.tar".into(),
                    second: "/b/base.tar.gz".into(),
                }
                .to_string(),
                "\"/b/base.tar\" and \"/b/base.tar.gz\" are the same part of the backup: keep one",
            ),
            (
                TarError::NoBase { dir: "/b".into() }.to_string(),
                "\"/b\" has no base.tar",
            ),
            (
                TarError::StagingDir(io()).to_string(),
                "could not create a staging directory: boom",
            ),
            (
                TarError::StageFile {
                    path: "/s/base/1/1259".into(),
                    source: io(),
                }
                .to_string(),
                "could not write \"/s/base/1/1259\" in the staging directory: boom",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
