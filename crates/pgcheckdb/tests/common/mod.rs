//! What the integration tests share that is bound to this crate: the binary under test
//! (`verify` runs of it), and what needs `pgcheckdb-pg`: page edits through its corruptor
//! (checksum recomputed) and B-tree pages decoded with its layout types ([`btree`]). Everything
//! else the tests share lives in `pgcheckdb-testkit`.

#![allow(dead_code)]

pub mod btree;

use std::path::{Path, PathBuf};

use pgcheckdb_testkit::asserts;
use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::RunAs;

/// The `pgcheckdb` binary built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pgcheckdb"))
}

/// `pgcheckdb verify --level physical --format json -j <jobs>` on `datadir`.
pub fn verify(datadir: &Path, jobs: u32) -> Run {
    run::verify(&bin(), datadir, jobs, None)
}

/// The same, run as `user`.
pub fn verify_as(datadir: &Path, jobs: u32, user: Option<&RunAs>) -> Run {
    run::verify(&bin(), datadir, jobs, user)
}

/// `verify <target...> --level <level> --format json --no-progress -j 2 <extra...>`, run as
/// `user`: `target` says what is verified (`["-D", dir]`, `["--backup", dir]`, ...).
pub fn verify_json(target: &[&str], level: &str, extra: &[&str], user: Option<&RunAs>) -> Run {
    run::verify_json(&bin(), target, level, extra, user)
}

/// `verify --level <level> --format json --no-progress -j 2` on `datadir`.
pub fn verify_level(datadir: &Path, level: &str) -> Run {
    let dir = datadir.display().to_string();
    verify_json(&["-D", &dir], level, &[], None)
}

/// `verify --level extended --format json --no-progress -j 2` on `datadir`, plus `extra`.
pub fn verify_extended(datadir: &Path, extra: &[&str]) -> Run {
    let dir = datadir.display().to_string();
    verify_json(&["-D", &dir], "extended", extra, None)
}

/// [`verify_extended`] with `--memory <memory>` and a fresh `--temp-dir`, asserting that the
/// facts spilled; the run and the spill directory.
pub fn verify_spilled(datadir: &Path, memory: &str) -> (Run, tempfile::TempDir) {
    asserts::verify_spilled(&bin(), datadir, memory)
}

/// Reads block `block` of the relation file at `path`, lets `change` edit it, writes it back
/// and recomputes its checksum (so that only the edit is damage).
pub fn edit<R>(path: &Path, block: u64, change: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut page = read_block(path, block);
    let r = change(&mut page);
    write_block(path, block, &page, true);
    r
}

/// Writes `page` as block `block` of the relation file at `path`, with its checksum recomputed
/// when `checksum`.
pub fn write_block(path: &Path, block: u64, page: &[u8], checksum: bool) {
    use pgcheckdb_pg::ops::corrupt;
    corrupt::write_block(path, block, page).expect("write block");
    if checksum {
        corrupt::recompute_checksum(path, block, pgcheckdb_testkit::BLCKSZ, block)
            .expect("recompute checksum");
    }
}

/// The normal line pointers (with storage) of an initialized page, in offset order; none for
/// a new (all-zero) page.
pub fn normal_items(page: &[u8]) -> Vec<pgcheckdb_pg::format::itemid::ItemId> {
    use pgcheckdb_pg::format::itemid::{line_pointers, LpFlags};
    let Some(h) = pgcheckdb_pg::format::page::PageHeader::parse(page).filter(|h| !h.is_new())
    else {
        return Vec::new();
    };
    line_pointers(page, &h)
        .into_iter()
        .filter(|lp| lp.lp_flags == LpFlags::Normal && lp.lp_len > 0)
        .collect()
}

/// Block `b` of relation file `path`.
pub fn read_block(path: &Path, b: u64) -> Vec<u8> {
    pgcheckdb_pg::ops::corrupt::read_block(path, b, pgcheckdb_testkit::BLCKSZ).expect("read block")
}
