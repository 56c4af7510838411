//! `pgcheckdb inspect`: find the segment file that holds an absolute block of a fork and print
//! the decoded page (text or JSON). Reads only.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use pgcheckdb_pg::inspect::{inspect_block, render_text};
use pgcheckdb_pg::relfile::{parse_relation_file_name, ForkNumber};

use crate::cli::{Common, InspectArgs, OutputFormat};
use crate::verify_cmd::{read_control, resolve_datadir};
use crate::EXIT_OK;

pub fn run(common: &Common, args: &InspectArgs) -> anyhow::Result<u8> {
    let datadir = resolve_datadir(args.pgdata.as_ref())?;
    let control = read_control(&datadir)?;
    let Some(file) = &args.file else {
        bail!("--relation needs the offline catalog reader, which is not available yet; use --file (verify prints it)");
    };
    let (dir, shown_dir, name) = split_file(&datadir, file)?;
    let parsed = parse_relation_file_name(&name)
        .with_context(|| format!("\"{name}\" is not a relation file name"))?;
    let fork = match &args.fork {
        Some(f) => ForkNumber::from_name(f)
            .with_context(|| format!("unknown fork \"{f}\" (main, fsm, vm, init)"))?,
        None => parsed.fork,
    };
    let relseg = control.relseg_size as u64;
    let segno = u32::try_from(args.block / relseg).context("block number too large")?;
    let file_name = segment_file_name(parsed.temp_backend, parsed.relfilenode, fork, segno);
    let path = dir.join(&file_name);
    let shown = if shown_dir.is_empty() {
        file_name.clone()
    } else {
        format!("{shown_dir}/{file_name}")
    };
    let dump = inspect_block(&path, &shown, segno, args.block % relseg, &control)
        .with_context(|| format!("could not read block {} of \"{shown}\"", args.block))?;
    match common.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string(&serde_json::json!({"type": "page", "page": dump}))?
        ),
        OutputFormat::Text => print!("{}", render_text(&dump)),
    }
    Ok(EXIT_OK)
}

/// Splits `--file` into its directory, the directory as shown (relative to the data directory
/// when inside it) and the file name.
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
