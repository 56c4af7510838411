//! `pgcheckdb corrupt`: damage one block of a stopped cluster on purpose, for drills and tests.
//! Needs `-D` (never `$PGDATA`) and a confirmation (`--yes`, or "yes" typed at the terminal:
//! without `--yes` a stdin that is not a terminal is refused at once, never read); refuses a
//! running cluster, a block past the end of its fork and options the chosen damage does not use;
//! holds the data directory lock (`postmaster.pid`) while it writes, so that no server can
//! start meanwhile. By default the damage is what a failing disk does (the checksum is left
//! stale); `--fix-checksum` recomputes it so that only structure checks can see the damage.
//! The file is opened once, through [`WriteRoots::open`]: one whose real path leaves the data
//! directory (a tablespace, a symbolic link, a hard link) is refused unless its tablespace was
//! named with `--tablespace`, and every read and write of the run uses that one descriptor.

use std::io::{self, BufRead, IsTerminal, Write};

use anyhow::{bail, Context};
use pgcheckdb_pg::format::page::SECTOR_SIZE;
use pgcheckdb_pg::ops::cluster::check_stopped;
use pgcheckdb_pg::ops::confine::WriteRoots;
use pgcheckdb_pg::ops::corrupt::{Damage, HeaderDamage, SegmentFile};
use pgcheckdb_pg::ops::lock::DataDirLock;
use pgcheckdb_pg::ops::open::{read_control, resolve_datadir};
use pgcheckdb_pg::ops::target::{resolve, BlockTarget};
use pgcheckdb_report::escape::escape_control;
use serde_json::json;

use crate::cli::{Common, CorruptArgs, CorruptHow, OutputFormat};
use crate::exit::EXIT_OK;
use crate::signals;

pub fn run(common: &Common, args: &CorruptArgs) -> anyhow::Result<u8> {
    reject_unused_options(args)?;
    if !args.yes && !io::stdin().is_terminal() {
        // "yes" piped in is not a person confirming; reading a pipe could also wait forever.
        bail!(
            "refusing to damage a block without confirmation: stdin is not a terminal: pass --yes"
        );
    }
    let datadir = resolve_datadir(args.pgdata.as_ref())?;
    // A signal only sets a flag from here on: the damage is written whole and the lock removed.
    signals::install_for_writes()?;
    let lock = DataDirLock::acquire(&datadir, "corrupt")
        .map_err(|e| anyhow::anyhow!("refusing to damage \"{}\": {e}", datadir.display()))?;
    let control = read_control(&datadir)?;
    if let Err(reason) = check_stopped(&datadir, &control) {
        bail!("refusing to damage \"{}\": {reason}", datadir.display());
    }
    let target = resolve(&datadir, &control, &args.target.request())?;
    target.check_exists()?;
    if args.how == CorruptHow::Swap {
        check_swap_partner(&target, args, control.relseg_size as u64)?;
    }
    let file = WriteRoots::new(&datadir, &args.tablespace)?.open(&target.path, &target.shown)?;
    let file = SegmentFile::from_checked(file);
    if !args.yes {
        confirm(&target, args)?;
    }
    let bs = control.block_size();
    let what = apply(&file, &target, bs, control.relseg_size as u64, args)?;
    if args.fix_checksum {
        file.recompute_checksum(target.block_in_file, bs, target.block)
            .with_context(|| format!("could not recompute the checksum of \"{}\"", target.shown))?;
    }
    drop(lock);
    report(common, args, &target, &what);
    if let Some(signal) = signals::caught() {
        eprintln_text!(
            "pgcheckdb: {} received: the damage above was written whole; stopped",
            signals::name(signal)
        );
        return Ok(signals::exit_code(signal));
    }
    Ok(EXIT_OK)
}

/// The one line (text) or the `corrupted` record (JSON) saying what was done.
fn report(common: &Common, args: &CorruptArgs, target: &BlockTarget, what: &str) {
    match common.format {
        OutputFormat::Json => println!(
            "{}",
            json!({"type": "corrupted", "file": target.shown, "fork": target.fork.name(),
                   "block": target.block, "database": target.database,
                   "relation": target.relation, "how": how_name(args.how),
                   "damage": what, "checksum_recomputed": args.fix_checksum})
        ),
        OutputFormat::Text if !common.quiet => {
            let rel = target
                .relation
                .as_deref()
                .map(|r| format!(" (relation {r})"))
                .unwrap_or_default();
            let sum = if args.fix_checksum {
                ", checksum recomputed"
            } else {
                ""
            };
            println_text!(
                "damaged block {} of \"{}\"{rel}: {what}{sum}",
                target.block,
                target.shown
            );
        }
        OutputFormat::Text => {}
    }
}

fn how_name(how: CorruptHow) -> &'static str {
    match how {
        CorruptHow::FlipBit => "flip-bit",
        CorruptHow::Zero => "zero",
        CorruptHow::Tear => "tear",
        CorruptHow::Garbage => "garbage",
        CorruptHow::Swap => "swap",
        CorruptHow::Header => "header",
    }
}

/// Every option is used by some kinds of damage only; given to another, it is an error rather
/// than silently ignored.
fn reject_unused_options(args: &CorruptArgs) -> anyhow::Result<()> {
    let how = args.how;
    let uses_offset = matches!(how, CorruptHow::FlipBit | CorruptHow::Tear);
    let given = [
        ("--offset", args.offset.is_some(), uses_offset),
        ("--with", args.with.is_some(), how == CorruptHow::Swap),
        ("--seed", args.seed.is_some(), how == CorruptHow::Garbage),
    ];
    for (flag, present, used) in given {
        if present && !used {
            bail!("{flag} does not apply to --how {}", how_name(how));
        }
    }
    if let (CorruptHow::Tear, Some(offset)) = (how, args.offset) {
        if offset == 0 || offset % SECTOR_SIZE != 0 {
            bail!(
                "--offset {offset} for tear must be a non-zero multiple of {SECTOR_SIZE} (a sector boundary; 0 would zero the whole block: use --how zero)"
            );
        }
    }
    Ok(())
}

/// `swap` needs a second block of the same segment file that exists.
fn check_swap_partner(t: &BlockTarget, args: &CorruptArgs, relseg: u64) -> anyhow::Result<()> {
    if t.fork_blocks < 2 {
        bail!(
            "swap needs two blocks, but the {} fork of \"{}\" has {} block(s)",
            t.fork.name(),
            t.shown,
            t.fork_blocks
        );
    }
    let other = swap_partner(t, args);
    if other >= t.fork_blocks {
        bail!(
            "--with {other} is past the end: the {} fork has {} block(s), 0..{}{}",
            t.fork.name(),
            t.fork_blocks,
            t.fork_blocks - 1,
            if args.with.is_none() {
                " (give --with for the last block)"
            } else {
                ""
            }
        );
    }
    if other / relseg != t.block / relseg || other == t.block {
        bail!(
            "--with {other} must be another block of the same segment file as block {}",
            t.block
        );
    }
    Ok(())
}

fn swap_partner(t: &BlockTarget, args: &CorruptArgs) -> u64 {
    args.with.unwrap_or(t.block + 1)
}

/// Asks on stderr and reads the answer from stdin (a terminal: checked by `run`); anything but
/// "yes"/"y" (or no answer) refuses.
fn confirm(t: &BlockTarget, args: &CorruptArgs) -> anyhow::Result<()> {
    let rel = t
        .relation
        .as_deref()
        .map(|r| format!(" (relation {r})"))
        .unwrap_or_default();
    let question = format!(
        "pgcheckdb: about to damage block {} of \"{}\"{rel} ({}) on purpose; type yes to go on: ",
        t.block,
        t.shown,
        how_name(args.how)
    );
    eprint!("{}", escape_control(&question));
    io::stderr().flush().ok();
    let mut answer = String::new();
    io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("could not read the confirmation")?;
    match answer.trim() {
        "yes" | "y" => Ok(()),
        "" => bail!("not confirmed (no answer on stdin): nothing was changed; pass --yes to damage without asking"),
        other => bail!("not confirmed (answer \"{other}\"): nothing was changed"),
    }
}

/// `--offset` (default: the middle of the page), which must lie inside the page.
fn offset_in_page(args: &CorruptArgs, bs: usize) -> anyhow::Result<usize> {
    let offset = args.offset.unwrap_or(bs / 2);
    if offset >= bs {
        bail!("--offset {offset} is outside the {bs}-byte page");
    }
    Ok(offset)
}

/// Applies the damage to `file` (the target's segment file); returns a description.
fn apply(
    file: &SegmentFile,
    t: &BlockTarget,
    bs: usize,
    relseg: u64,
    args: &CorruptArgs,
) -> anyhow::Result<String> {
    let (damage, text) = match args.how {
        CorruptHow::FlipBit => {
            let offset = offset_in_page(args, bs)?;
            (
                Damage::FlipBit { offset, bit: 0 },
                format!("flipped bit 0 of byte {offset}"),
            )
        }
        CorruptHow::Zero => (Damage::ZeroBlock, "zeroed the whole block".to_string()),
        CorruptHow::Tear => {
            let from = offset_in_page(args, bs)?;
            (
                Damage::ZeroTail { from },
                format!("zeroed from byte {from} to the end (torn write)"),
            )
        }
        CorruptHow::Garbage => {
            let seed = args.seed.unwrap_or(t.block ^ 0x5eed);
            (
                Damage::Garbage { seed },
                format!("filled with random bytes (seed {seed})"),
            )
        }
        CorruptHow::Header => (
            Damage::Header(HeaderDamage::SpecialBeyondBlock),
            "set pd_special beyond the block".to_string(),
        ),
        CorruptHow::Swap => return swap(file, t, bs, relseg, args),
    };
    file.inject(t.block_in_file, bs, damage)
        .with_context(|| format!("could not damage \"{}\"", t.shown))?;
    Ok(text)
}

/// Exchanges the block with `--with` (default: the next block) of the same segment file
/// (checked by [`check_swap_partner`]).
fn swap(
    file: &SegmentFile,
    t: &BlockTarget,
    bs: usize,
    relseg: u64,
    args: &CorruptArgs,
) -> anyhow::Result<String> {
    let other = swap_partner(t, args);
    let other_in_file = other % relseg;
    let a = file
        .read_block(t.block_in_file, bs)
        .with_context(|| format!("could not read block {}", t.block))?;
    let b = file
        .read_block(other_in_file, bs)
        .with_context(|| format!("could not read block {other}"))?;
    file.write_block(t.block_in_file, &b)
        .with_context(|| format!("could not write block {} of \"{}\"", t.block, t.shown))?;
    file.write_block(other_in_file, &a)
        .with_context(|| format!("could not write block {other} of \"{}\"", t.shown))?;
    Ok(format!("swapped with block {other} (misdirected writes)"))
}
