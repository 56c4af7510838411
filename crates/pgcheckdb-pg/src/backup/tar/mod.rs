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
//!    written to a private staging directory (removed when the run ends) so that the
//!    file-based readers of the control file, the catalogs, `pg_xact` and the WAL are reused
//!    unchanged. It also lists every regular member: the relation files become the plan.
//! 2. [`scan::scan`] reads the data archives again and hands each relation file's whole
//!    blocks to the same page checks as `verify -D` (a [`crate::verify::BlockSource`]), and
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
use std::path::{Path, PathBuf};
use std::sync::Arc;

use archive::{Archive, ArchiveError, Compression, Member, MemberVisitor};

use crate::control::ControlFile;
use crate::datadir::{DataDirectory, Location, RelationDir, RelationFile};
use crate::relfile::{parse_relation_file_name, RelFileName};

/// File numbers below this are assigned by initdb: the system catalogs' own files.
const FIRST_NORMAL_OBJECT_ID: u32 = 16384;

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
}

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
pub fn find_archives(dir: &Path) -> Result<Vec<TarFile>, String> {
    let entries =
        fs::read_dir(dir).map_err(|e| format!("could not list \"{}\": {e}", dir.display()))?;
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("could not list \"{}\": {e}", dir.display()))?;
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
            return Err(format!(
                "\"{}\" and \"{}\" are the same part of the backup: keep one",
                pair[0].path.display(),
                pair[1].path.display()
            ));
        }
    }
    if !out.iter().any(|t| t.role == Role::Base) {
        return Err(format!("\"{}\" has no base.tar", dir.display()));
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
    pub fn open(dir: &Path, cancelled: &dyn Fn() -> bool) -> Result<TarBackup, String> {
        let archives = find_archives(dir)?;
        let staging = tempfile::Builder::new()
            .prefix("pgcheckdb-tar-")
            .tempdir()
            .map_err(|e| format!("could not create a staging directory: {e}"))?;
        let mut backup = TarBackup {
            dir: dir.to_path_buf(),
            archives,
            members: Vec::new(),
            staging,
            staged: HashSet::new(),
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
    fn stage(&mut self, wanted: &Wanted, cancelled: &dyn Fn() -> bool) -> Result<(), String> {
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
                cancelled,
                out: None,
                error: None,
            };
            let mut archive =
                Archive::open(&tar.path, tar.compression).map_err(|e| e.to_string())?;
            let result = archive.for_each(&mut stager);
            if let Some(e) = stager.error {
                return Err(e);
            }
            result.map_err(|e: ArchiveError| e.to_string())?;
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
    cancelled: &'a dyn Fn() -> bool,
    out: Option<std::io::BufWriter<fs::File>>,
    /// A write error (not the archive's fault).
    error: Option<String>,
}

impl Stager<'_> {
    fn keeps(&self, path: &str) -> Option<Option<(u32, u32, u32)>> {
        let relation = relation_path(path);
        match (self.wanted, relation) {
            (Wanted::First, _) if self.tar.role == Role::Wal => Some(None),
            (Wanted::First, None) => Some(None),
            (Wanted::First, Some((loc, _, name))) => (name.relfilenode < FIRST_NORMAL_OBJECT_ID
                && name.temp_backend.is_none())
            .then_some(Some(file_key(loc, name.relfilenode))),
            (Wanted::Only(keys), Some((loc, _, name))) => {
                let key = file_key(loc, name.relfilenode);
                keys.contains(&key).then_some(Some(key))
            }
            (Wanted::Only(_), None) => None,
        }
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
        let Some(key) = self.keeps(&path) else {
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
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| fs::File::create(&target));
        match opened {
            Ok(f) => {
                self.out = Some(std::io::BufWriter::with_capacity(1 << 20, f));
                if let Some(key) = key {
                    self.staged.insert(key);
                }
                true
            }
            Err(e) => {
                self.error.get_or_insert(format!(
                    "could not write \"{}\" in the staging directory: {e}",
                    target.display()
                ));
                false
            }
        }
    }

    fn cancelled(&self) -> bool {
        (self.cancelled)()
    }

    fn data(&mut self, bytes: &[u8]) -> Result<(), String> {
        if let Some(out) = self.out.as_mut() {
            out.write_all(bytes)
                .map_err(|e| format!("could not write to the staging directory: {e}"))?;
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), String> {
        if let Some(mut out) = self.out.take() {
            out.flush()
                .map_err(|e| format!("could not write to the staging directory: {e}"))?;
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
}
