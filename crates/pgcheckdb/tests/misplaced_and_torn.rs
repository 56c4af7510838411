//! Precision of `misplaced_page` and `torn_page` on real clusters of every supported version:
//! * with checksums, 200 single-byte flips across a 3,000-block table are each a
//!   `checksum_mismatch` (never "misplaced" on a chance checksum match), while two swapped pages
//!   are `misplaced_page` naming each other; `pg_checksums --check` reports the same blocks;
//! * without checksums, rows whose values end in zero bytes are no `torn_page`, a real tear
//!   still is, and swapped or copied heap pages are `misplaced_page` from their tuples' `t_ctid`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::checksum::pg_checksum_page;
use pgcheckdb_pg::ops::corrupt::{self, Damage};
use pgcheckdb_testkit::asserts::{assert_problems, assert_status, finding, key};
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{pg_checksums, Cluster, BLCKSZ};

use common::{bin, verify};

/// Blocks of the large table with checksums.
const WIDE_BLOCKS: u64 = 3000;
/// Damaged blocks: 7, 22, 37, ... (every 15th).
const FLIPS: u64 = 200;
/// The two pages swapped in the large table (never among the flipped ones).
const SWAP: (u64, u64) = (1000, 2000);

pgcheckdb_testkit::version_tests! {
    precision;
    precision_pg14(14),
    precision_pg15(15),
    precision_pg16(16),
    precision_pg17(17),
    precision_pg18(18),
    precision_pg19(19),
}

fn precision(major: u32) {
    with_checksums(major);
    without_checksums(major);
}

/// `mask`, or the next odd mask after it, whichever changes the page's data checksum: a 16-bit
/// checksum misses one random change in 65,536, and a flip no checksum can see is no test of
/// the verifier (seen once: a PostgreSQL 18 page whose flipped byte kept its checksum).
fn detectable_mask(page: &[u8], block: u64, offset: usize, mask: u8) -> u8 {
    let stored = u16::from_le_bytes([page[8], page[9]]);
    (0..128u8)
        .map(|k| mask.wrapping_add(2 * k) | 1)
        .find(|&m| {
            let mut flipped = page.to_vec();
            flipped[offset] ^= m;
            pg_checksum_page(&flipped, block as u32) != stored
        })
        .expect("some mask changes the checksum")
}

/// A stopped cluster loaded with `sql`, and the data-directory-relative paths of `tables`.
fn cluster(major: u32, checksums: bool, sql: &str, tables: &[&str]) -> (Cluster, Vec<String>) {
    loaded_cluster(major, checksums, sql, tables)
}

fn swap_blocks(path: &Path, a: u64, b: u64) {
    let pa = corrupt::read_block(path, a, BLCKSZ).expect("read");
    let pb = corrupt::read_block(path, b, BLCKSZ).expect("read");
    corrupt::write_block(path, a, &pb).expect("write");
    corrupt::write_block(path, b, &pa).expect("write");
}

/// `verify` at the default (standard) level.
fn verify_standard(datadir: &Path) -> Run {
    let dir = datadir.display().to_string();
    run::pgcheckdb(
        &bin(),
        &[
            "verify",
            "-D",
            &dir,
            "--format",
            "json",
            "--no-progress",
            "-j",
            "2",
        ],
        None,
    )
}

fn with_checksums(major: u32) {
    // fillfactor 10 and ~130-byte rows: 6 rows per page, 18,000 rows fill 3,000 blocks.
    let sql = format!(
        "CREATE TABLE wide (id int, pad text) WITH (fillfactor = 10);
         INSERT INTO wide SELECT g, repeat('w', 90) FROM generate_series(1, {}) g;
         CHECKPOINT;",
        WIDE_BLOCKS * 6
    );
    let (c, paths) = cluster(major, true, &sql, &["wide"]);
    let rel = &paths[0];
    let path = c.datadir().join(rel);
    let blocks = std::fs::metadata(&path).expect("stat").len() / BLCKSZ as u64;
    assert!(blocks >= WIDE_BLOCKS, "wide has only {blocks} blocks");

    let mut expected = BTreeSet::new();
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15 ^ major as u64;
    for i in 0..FLIPS {
        let block = 7 + 15 * i;
        let page = corrupt::read_block(&path, block, BLCKSZ).expect("read");
        let pd_upper = u16::from_le_bytes([page[14], page[15]]) as u64;
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (pd_upper + (seed >> 33) % (BLCKSZ as u64 - pd_upper)) as usize;
        let mask = detectable_mask(&page, block, offset, ((seed >> 20) as u8) | 1);
        corrupt::flip_bit_mask(&path, block, BLCKSZ, offset, mask).expect("flip");
        expected.insert(key("checksum_mismatch", rel, block));
    }
    swap_blocks(&path, SWAP.0, SWAP.1);
    expected.insert(key("misplaced_page", rel, SWAP.0));
    expected.insert(key("misplaced_page", rel, SWAP.1));

    let run = verify(c.datadir(), 2);
    assert_status(&run, 2, "flips and a swap with checksums");
    assert_problems(&run, &expected, "flips and a swap with checksums");
    let chance = run
        .findings
        .iter()
        .filter(|f| f["detail"].get("candidate_blocks").is_some())
        .count();
    eprintln!("PostgreSQL {major}: {chance} of {FLIPS} flipped pages have a stored checksum that is right for another block (reported as checksum_mismatch)");
    for (at, names) in [(SWAP.0, SWAP.1), (SWAP.1, SWAP.0)] {
        let f = finding(&run, &key("misplaced_page", rel, at));
        assert_eq!(f["detail"]["claims_block"], names, "{f}");
        assert_eq!(f["detail"]["evidence"], "t_ctid", "{f}");
    }

    let check = pg_checksums::check(&c);
    let ours: BTreeSet<(String, u64)> = run.error_blocks();
    assert_eq!(
        check.bad_blocks, ours,
        "pg_checksums --check and pgcheckdb disagree\n{}",
        check.stderr
    );
}

fn without_checksums(major: u32) {
    // zeros: 1,500 zero bytes at the end of every row (5 rows a page, the page's last 1,024
    // bytes are zero). swapme: ~14 blocks of in-place rows.
    let sql = "CREATE TABLE zeros (id int, z bytea);
         INSERT INTO zeros SELECT g, decode(repeat('00', 1500), 'hex') FROM generate_series(1, 200) g;
         CREATE TABLE swapme (id int, pad text);
         INSERT INTO swapme SELECT g, repeat('s', 90) FROM generate_series(1, 1000) g;
         CHECKPOINT;";
    let (c, paths) = cluster(major, false, sql, &["zeros", "swapme"]);
    let (zeros_rel, swap_rel) = (&paths[0], &paths[1]);
    let zeros: PathBuf = c.datadir().join(zeros_rel);
    let swapme: PathBuf = c.datadir().join(swap_rel);
    let last = corrupt::read_block(&zeros, 0, BLCKSZ).expect("read");
    assert!(
        last[BLCKSZ - 1024..].iter().all(|&b| b == 0),
        "the fixture must end its pages in zero bytes"
    );

    for (run, level) in [
        (verify(c.datadir(), 2), "physical"),
        (verify_standard(c.datadir()), "standard"),
    ] {
        assert_status(&run, 0, level);
        assert_problems(
            &run,
            &BTreeSet::new(),
            &format!("zero-valued rows ({level})"),
        );
    }

    corrupt::inject(&zeros, 3, BLCKSZ, Damage::ZeroTail { from: 4096 }).expect("tear");
    swap_blocks(&swapme, 2, 9);
    corrupt::inject(&swapme, 11, BLCKSZ, Damage::CopyFrom { source: 4 }).expect("copy");
    let expected: BTreeSet<_> = [
        key("torn_page", zeros_rel, 3),
        key("misplaced_page", swap_rel, 2),
        key("misplaced_page", swap_rel, 9),
        key("misplaced_page", swap_rel, 11),
    ]
    .into();
    for (run, level) in [
        (verify(c.datadir(), 2), "physical"),
        (verify_standard(c.datadir()), "standard"),
    ] {
        assert_status(&run, 2, level);
        assert_problems(&run, &expected, &format!("tear, swap, copy ({level})"));
        for (at, names, how) in [(2, 9, "swapped"), (9, 2, "swapped"), (11, 4, "same_tuples")] {
            let f = finding(&run, &key("misplaced_page", swap_rel, at));
            assert_eq!(f["detail"]["claims_block"], names, "{f}");
            assert_eq!(f["detail"]["evidence"], "t_ctid", "{f}");
            assert_eq!(f["detail"]["corroboration"], how, "{f}");
        }
    }
}
