//! Resolves `--file PATH | --relation NAME`, `--fork` and an absolute `--block` to the segment
//! file and block inside it: shared by `inspect` and `corrupt`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::control::ControlFile;
use pgcheckdb_pg::relfile::{parse_relation_file_name, ForkNumber};

use crate::cli::BlockArgs;

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
}

/// Finds the segment file and block for the arguments.
pub fn resolve(
    datadir: &Path,
    control: &ControlFile,
    args: &BlockArgs,
) -> anyhow::Result<BlockTarget> {
    let (dir, shown_dir, name, relation) = match (args.file.as_deref(), args.relation.as_deref()) {
        (Some(file), _) => {
            let (dir, shown, name) = split_file(datadir, file)?;
            (dir, shown, name, None)
        }
        (None, Some(rel)) => {
            let catalog = Catalog::read(datadir, control);
            let (key, info) = catalog
                .find_relation(rel, args.database.as_deref())
                .map_err(anyhow::Error::msg)?;
            let version_dir = control.tablespace_version_directory().unwrap_or_default();
            let shown = Catalog::relation_dir(key, &version_dir);
            (
                datadir.join(&shown),
                shown,
                key.2.to_string(),
                Some(info.name.clone()),
            )
        }
        (None, None) => bail!("give --file PATH or --relation NAME"),
    };
    let parsed = parse_relation_file_name(&name)
        .with_context(|| format!("\"{name}\" is not a relation file name"))?;
    let fork = match args.fork.as_deref() {
        Some(f) => ForkNumber::from_name(f)
            .with_context(|| format!("unknown fork \"{f}\" (main, fsm, vm, init)"))?,
        None => parsed.fork,
    };
    let relseg = control.relseg_size as u64;
    let segno = u32::try_from(args.block / relseg).context("block number too large")?;
    let file_name = segment_file_name(parsed.temp_backend, parsed.relfilenode, fork, segno);
    let shown = if shown_dir.is_empty() {
        file_name.clone()
    } else {
        format!("{shown_dir}/{file_name}")
    };
    Ok(BlockTarget {
        path: dir.join(&file_name),
        shown,
        segno,
        block_in_file: args.block % relseg,
        block: args.block,
        relation,
    })
}

/// Splits `--file` into its directory, the directory as shown and the file name.
fn split_file(datadir: &Path, file: &Path) -> anyhow::Result<(PathBuf, String, String)> {
    let full = if file.is_absolute() {
        file.to_path_buf()
    } else {
        datadir.join(file)
    };
    let name = full
        .file_name()
        .and_then(|n| n.to_str())
        .context("--file has no file name")?
        .to_string();
    let dir = full
        .parent()
        .context("--file has no directory")?
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
