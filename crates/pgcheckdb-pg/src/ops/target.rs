//! Resolves a block asked for by file (`--file PATH`) or by relation name (`--relation NAME
//! [-d DATABASE]`), with `--fork` and an absolute `--block`, to the segment file and block
//! inside it ([`resolve`]): shared by `inspect` and `corrupt`. Relation names follow psql's
//! rules: unquoted identifiers are folded to lower case, `"Quoted"` ones are not.

use std::path::{Path, PathBuf};

use crate::catalog::Catalog;
use crate::format::control::ControlFile;
use crate::format::relfile::{parse_relation_file_name, ForkNumber};

/// Why a block cannot be located.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A refusal said in one sentence.
    #[error("{0}")]
    Refused(String),
    /// The block number is past the last segment file a fork can have.
    #[error("block number too large")]
    BlockTooLarge(#[source] std::num::TryFromIntError),
}

fn refused(message: impl Into<String>) -> TargetError {
    TargetError::Refused(message.into())
}

/// The block asked for: by file or by relation (and database), the fork and the block.
#[derive(Debug, Clone, Default)]
pub struct BlockRequest {
    /// A relation file, relative to the data directory or absolute (any segment of the fork).
    pub file: Option<PathBuf>,
    /// A relation by name (`schema.name` or a unique name).
    pub relation: Option<String>,
    /// The database of `relation` (`None`: every database is searched).
    pub database: Option<String>,
    /// Absolute block number in the fork.
    pub block: u64,
    /// The fork's name; `None`: the fork of `file`, else main.
    pub fork: Option<String>,
}

/// One block of one fork, located on disk.
#[derive(Debug, Clone)]
pub struct BlockTarget {
    /// Path to open.
    pub path: PathBuf,
    /// Path as shown to the user (relative to the data directory when inside it).
    pub shown: String,
    pub segno: u32,
    pub block_in_file: u64,
    /// Absolute block number in the fork.
    pub block: u64,
    /// `schema.name` when the relation was named or found in the catalog.
    pub relation: Option<String>,
    /// The database's name when known from the catalog (`None` for a shared catalog).
    pub database: Option<String>,
    /// Whole blocks of the fork over all its segments.
    pub fork_blocks: u64,
    pub fork: ForkNumber,
}

/// Finds the segment file and block for the request.
pub fn resolve(
    datadir: &Path,
    control: &ControlFile,
    req: &BlockRequest,
) -> Result<BlockTarget, TargetError> {
    let catalog = Catalog::read(datadir, control);
    let found = find_directory(datadir, control, &catalog, req)?;
    let parsed = parse_relation_file_name(&found.name)
        .ok_or_else(|| refused(format!("\"{}\" is not a relation file name", found.name)))?;
    let fork = match req.fork.as_deref() {
        Some(f) => ForkNumber::from_name(f)
            .ok_or_else(|| refused(format!("unknown fork \"{f}\" (main, fsm, vm, init)")))?,
        None => parsed.fork,
    };
    let relseg = control.relseg_size as u64;
    let segno = u32::try_from(req.block / relseg).map_err(TargetError::BlockTooLarge)?;
    let file_name = segment_file_name(parsed.temp_backend, parsed.relfilenode, fork, segno);
    let shown = if found.shown_dir.is_empty() {
        file_name.clone()
    } else {
        format!("{}/{file_name}", found.shown_dir)
    };
    let fork_blocks = count_fork_blocks(
        &found.dir,
        parsed.temp_backend,
        parsed.relfilenode,
        fork,
        control,
    );
    Ok(BlockTarget {
        path: found.dir.join(&file_name),
        shown,
        segno,
        block_in_file: req.block % relseg,
        block: req.block,
        relation: found.relation,
        database: found.database,
        fork_blocks,
        fork,
    })
}

/// The directory of the relation's files and the name of one of them.
struct Found {
    dir: PathBuf,
    /// `dir` as shown (relative to the data directory when inside it).
    shown_dir: String,
    name: String,
    relation: Option<String>,
    database: Option<String>,
}

/// Where the file or the relation of `req` is, and what the catalog names it.
fn find_directory(
    datadir: &Path,
    control: &ControlFile,
    catalog: &Catalog,
    req: &BlockRequest,
) -> Result<Found, TargetError> {
    match (req.file.as_deref(), req.relation.as_deref()) {
        (Some(file), _) => {
            let (dir, shown_dir, name) = split_file(datadir, file)?;
            let database = database_of_dir(&shown_dir).and_then(|oid| database_name(catalog, oid));
            Ok(Found {
                dir,
                shown_dir,
                name,
                relation: None,
                database,
            })
        }
        (None, Some(rel)) => {
            if let Some(d) = req.database.as_deref() {
                check_database(catalog, d)?;
            }
            let wanted = fold_qualified_name(rel)?;
            let (key, info) = catalog
                .find_relation(&wanted, req.database.as_deref())
                .map_err(|e| refused(e.to_string()))?;
            let version_dir = control.tablespace_version_directory().unwrap_or_default();
            let shown_dir = Catalog::relation_dir(key, &version_dir);
            Ok(Found {
                dir: datadir.join(&shown_dir),
                shown_dir,
                name: key.2.to_string(),
                relation: Some(info.name.to_string()),
                database: database_name(catalog, key.0),
            })
        }
        (None, None) => Err(refused("give --file PATH or --relation NAME")),
    }
}

impl BlockTarget {
    /// Fails with one line when the block is past the end of its fork.
    pub fn check_exists(&self) -> Result<(), TargetError> {
        if let Ok(meta) = std::fs::metadata(&self.path) {
            if !meta.is_file() {
                return Err(refused(format!(
                    "\"{}\" is not a regular file but a {}; it was not read",
                    self.shown,
                    pgcheckdb_scan::open::file_type_name(&meta.file_type())
                )));
            }
        }
        if self.block < self.fork_blocks {
            return Ok(());
        }
        let what = self
            .relation
            .as_deref()
            .map(|r| format!("relation {r}"))
            .unwrap_or_else(|| format!("\"{}\"", self.shown));
        Err(refused(match self.fork_blocks {
            0 => format!(
                "block {} is past the end: the {} fork of {what} is empty or missing",
                self.block,
                self.fork.name()
            ),
            n => format!(
                "block {} is past the end: the {} fork of {what} has {n} block(s), 0..{}",
                self.block,
                self.fork.name(),
                n - 1
            ),
        }))
    }
}

/// Whole blocks of a fork: the sizes of its segments `0, 1, ...` until one is missing.
fn count_fork_blocks(
    dir: &Path,
    temp_backend: Option<u32>,
    relfilenode: u32,
    fork: ForkNumber,
    control: &ControlFile,
) -> u64 {
    let bs = control.blcksz as u64;
    let mut total = 0;
    for segno in 0u32.. {
        let name = segment_file_name(temp_backend, relfilenode, fork, segno);
        match std::fs::metadata(dir.join(name)) {
            Ok(meta) if meta.is_file() => total += meta.len() / bs,
            _ => break,
        }
    }
    total
}

/// `-d NAME` must name a database of the catalog.
fn check_database(catalog: &Catalog, name: &str) -> Result<(), TargetError> {
    if catalog.databases.values().any(|db| db.name == name) {
        return Ok(());
    }
    let mut names: Vec<&str> = catalog
        .databases
        .values()
        .map(|db| db.name.as_str())
        .collect();
    names.sort_unstable();
    Err(refused(format!(
        "no such database \"{name}\" (the catalog has: {})",
        names.join(", ")
    )))
}

fn database_name(catalog: &Catalog, oid: u32) -> Option<String> {
    catalog.databases.get(&oid).map(|db| db.name.clone())
}

/// The database oid of a relation directory as shown (`base/5`, `pg_tblspc/S/V/5`).
fn database_of_dir(shown: &str) -> Option<u32> {
    let parts: Vec<&str> = shown.split('/').collect();
    match parts.as_slice() {
        ["base", db] | ["pg_tblspc", _, _, db] => db.parse().ok(),
        _ => None,
    }
}

/// Folds a possibly schema-qualified name as psql does: unquoted parts to lower case, quoted
/// parts (`"Mixed"`, `""` for a quote) kept as written; returns `schema.name` or `name`.
pub fn fold_qualified_name(input: &str) -> Result<String, TargetError> {
    let mut parts: Vec<String> = vec![String::new()];
    let mut chars = input.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        let part = parts.last_mut().expect("at least one part");
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                part.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => part.push(c),
            (false, '"') => quoted = true,
            (false, '.') => parts.push(String::new()),
            (false, c) => part.extend(c.to_lowercase()),
        }
    }
    if quoted {
        return Err(refused(format!(
            "unterminated quoted identifier in \"{input}\""
        )));
    }
    if parts.len() > 2 || parts.iter().any(String::is_empty) {
        return Err(refused(format!(
            "\"{input}\" is not a relation name (name or schema.name)"
        )));
    }
    Ok(parts.join("."))
}

/// Splits `--file` into its directory, the directory as shown and the file name.
fn split_file(datadir: &Path, file: &Path) -> Result<(PathBuf, String, String), TargetError> {
    let full = if file.is_absolute() {
        file.to_path_buf()
    } else {
        datadir.join(file)
    };
    let name = full
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| refused("--file has no file name"))?
        .to_string();
    let dir = full
        .parent()
        .ok_or_else(|| refused("--file has no directory"))?
        .to_path_buf();
    let shown = dir
        .strip_prefix(datadir)
        .unwrap_or(&dir)
        .to_string_lossy()
        .into_owned();
    Ok((dir, shown, name))
}

/// `<node>[_<fork>][.<segno>]`, with the `t<backend>_` prefix for temporary relations.
fn segment_file_name(
    temp_backend: Option<u32>,
    relfilenode: u32,
    fork: ForkNumber,
    segno: u32,
) -> String {
    let mut name = match temp_backend {
        Some(b) => format!("t{b}_{relfilenode}"),
        None => relfilenode.to_string(),
    };
    if fork != ForkNumber::Main {
        name = format!("{name}_{}", fork.name());
    }
    if segno > 0 {
        name = format!("{name}.{segno}");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fold_like_psql() {
        assert_eq!(fold_qualified_name("Accounts").unwrap(), "accounts");
        assert_eq!(fold_qualified_name("\"Accounts\"").unwrap(), "Accounts");
        assert_eq!(
            fold_qualified_name("Public.\"My \"\"T\"\"\"").unwrap(),
            "public.My \"T\""
        );
        assert!(fold_qualified_name("\"open").is_err());
        assert!(fold_qualified_name("a.b.c").is_err());
        assert!(fold_qualified_name("a.").is_err());
    }

    #[test]
    fn database_of_shown_dirs() {
        assert_eq!(database_of_dir("base/5"), Some(5));
        assert_eq!(database_of_dir("pg_tblspc/16390/PG_17_1/5"), Some(5));
        assert_eq!(database_of_dir("global"), None);
    }

    #[test]
    fn segment_names() {
        assert_eq!(segment_file_name(None, 16384, ForkNumber::Main, 0), "16384");
        assert_eq!(
            segment_file_name(None, 16384, ForkNumber::Vm, 2),
            "16384_vm.2"
        );
        assert_eq!(
            segment_file_name(Some(3), 16384, ForkNumber::Fsm, 0),
            "t3_16384_fsm"
        );
    }
}
