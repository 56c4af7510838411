//! `pgcheckdb corrupt`: damage one block of a stopped cluster on purpose, for drills and tests.
//! Refuses a running cluster, and holds the data directory lock (`postmaster.pid`) while it
//! writes, so that no server can start meanwhile. By default the damage is what a failing disk does (the checksum is
//! left stale); `--fix-checksum` recomputes it so that only structure checks can see the damage.

use anyhow::{bail, Context};
use pgcheckdb_pg::cluster::check_stopped;
use pgcheckdb_pg::corrupt::{self, Damage, HeaderDamage};
use pgcheckdb_pg::lock::DataDirLock;
use pgcheckdb_pg::page::SECTOR_SIZE;

use crate::checksums_cmd::interrupt;
use crate::cli::{Common, CorruptArgs, CorruptHow};
use crate::target::{resolve, BlockTarget};
use crate::verify_cmd::{read_control, resolve_datadir};
use crate::EXIT_OK;

pub fn run(common: &Common, args: &CorruptArgs) -> anyhow::Result<u8> {
    let datadir = resolve_datadir(args.target.pgdata.as_ref())?;
    // A signal only sets a flag from here on: the damage is written whole and the lock removed.
    interrupt::install()?;
    let lock = DataDirLock::acquire(&datadir, "corrupt")
        .map_err(|e| anyhow::anyhow!("refusing to damage \"{}\": {e}", datadir.display()))?;
    let control = read_control(&datadir)?;
    if let Err(reason) = check_stopped(&datadir, &control) {
        bail!("refusing to damage \"{}\": {reason}", datadir.display());
    }
    let target = resolve(&datadir, &control, &args.target)?;
    let bs = control.block_size();
    let what = apply(&target, bs, control.relseg_size as u64, args)?;
    if args.fix_checksum {
        corrupt::recompute_checksum(&target.path, target.block_in_file, bs, target.block)
            .with_context(|| format!("could not recompute the checksum of \"{}\"", target.shown))?;
    }
    if !common.quiet {
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
        println!(
            "damaged block {} of \"{}\"{rel}: {what}{sum}",
            target.block, target.shown
        );
    }
    drop(lock);
    if let Some(signal) = interrupt::received() {
        eprintln!(
            "pgcheckdb: {} received: the damage above was written whole; stopped",
            interrupt::name(signal)
        );
        return Ok(interrupt::exit_code(signal));
    }
    Ok(EXIT_OK)
}

/// Applies the damage; returns a description.
fn apply(t: &BlockTarget, bs: usize, relseg: u64, args: &CorruptArgs) -> anyhow::Result<String> {
    let offset = args.offset.unwrap_or(bs / 2);
    let (damage, text) = match args.how {
        CorruptHow::FlipBit => (
            Damage::FlipBit { offset, bit: 0 },
            format!("flipped bit 0 of byte {offset}"),
        ),
        CorruptHow::Zero => (Damage::ZeroBlock, "zeroed the whole block".to_string()),
        CorruptHow::Tear => {
            let from = args.offset.unwrap_or(bs / 2) / SECTOR_SIZE * SECTOR_SIZE;
            (
                Damage::ZeroTail { from },
                format!("zeroed from byte {from} to the end (torn write)"),
            )
        }
        CorruptHow::Garbage => (
            Damage::Garbage {
                seed: t.block ^ 0x5eed,
            },
            "filled with random bytes".to_string(),
        ),
        CorruptHow::Header => (
            Damage::Header(HeaderDamage::SpecialBeyondBlock),
            "set pd_special beyond the block".to_string(),
        ),
        CorruptHow::Swap => return swap(t, bs, relseg, args),
    };
    corrupt::inject(&t.path, t.block_in_file, bs, damage)
        .with_context(|| format!("could not damage \"{}\"", t.shown))?;
    Ok(text)
}

/// Exchanges the block with `--with` (default: the next block) of the same segment file.
fn swap(t: &BlockTarget, bs: usize, relseg: u64, args: &CorruptArgs) -> anyhow::Result<String> {
    let other = args.with.unwrap_or(t.block + 1);
    if other / relseg != t.block / relseg || other == t.block {
        bail!(
            "--with {other} must be another block of the same segment file as block {}",
            t.block
        );
    }
    let other_in_file = other % relseg;
    let a = corrupt::read_block(&t.path, t.block_in_file, bs)
        .with_context(|| format!("could not read block {}", t.block))?;
    let b = corrupt::read_block(&t.path, other_in_file, bs)
        .with_context(|| format!("could not read block {other}"))?;
    corrupt::write_block(&t.path, t.block_in_file, &b)?;
    corrupt::write_block(&t.path, other_in_file, &a)?;
    Ok(format!("swapped with block {other} (misdirected writes)"))
}
