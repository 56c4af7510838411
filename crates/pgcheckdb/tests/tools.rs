//! The DBA's tools on real clusters: `checksums enable` never blesses a damaged page (structure
//! checks and placement before stamping), `inspect` (refusals, name resolution, FROZEN, VM and
//! FSM pages, `--hex`, blocks past the end), `corrupt` (refusals, confirmation, options, seed,
//! JSON), and every command quiet on a closed stdout.

mod common;

use std::path::Path;

use pgcheckdb_pg::control::{ChecksumState, ControlFile};
use pgcheckdb_pg::corrupt;
use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{require_binaries, Cluster, ClusterOptions, BLCKSZ};

use common::bin;

/// A stopped cluster without data checksums loaded with `sql`, and the data-directory-relative
/// paths of `tables` (database `postgres`).
fn cluster(major: u32, sql: &str, tables: &[&str]) -> (Cluster, Vec<String>) {
    require_binaries(major);
    let opts = ClusterOptions::new(major, false)
        .throwaway()
        .setting("autovacuum", "off");
    let mut c = Cluster::init_temp(&opts).unwrap_or_else(|e| panic!("initdb {major}: {e}"));
    c.start().unwrap_or_else(|e| panic!("start {major}: {e}"));
    c.psql("postgres", sql)
        .unwrap_or_else(|e| panic!("load {major}: {e}"));
    let paths = tables
        .iter()
        .map(|t| c.relation_filepath("postgres", t).expect("relation path"))
        .collect();
    c.stop().unwrap_or_else(|e| panic!("stop {major}: {e}"));
    (c, paths)
}

fn pgcheckdb(args: &[&str]) -> Run {
    run::pgcheckdb(&bin(), args, None)
}

fn checksum_state(datadir: &Path) -> ChecksumState {
    ControlFile::read_from_datadir(datadir)
        .expect("pg_control readable")
        .checksum_state()
}

/// `lp_off` of line pointer 1 of a heap page.
fn first_tuple_offset(page: &[u8]) -> usize {
    let lp = u32::from_le_bytes([page[24], page[25], page[26], page[27]]);
    (lp & 0x7fff) as usize
}

fn stored_checksum(path: &Path, block: u64) -> u16 {
    let page = corrupt::read_block(path, block, BLCKSZ).expect("read");
    u16::from_le_bytes([page[8], page[9]])
}

// ---------------------------------------------------------------------------------------------
// checksums enable

/// Blocks of `accounts` damaged in ways the page header does not show.
const FLIPPED_LP: u64 = 1;
const WIDE_NATTS: u64 = 2;
const SWAPPED: (u64, u64) = (4, 7);

#[test]
fn enable_never_stamps_pages_that_fail_the_structure_checks_or_are_misplaced() {
    let (c, paths) = cluster(
        17,
        "CREATE TABLE accounts (id int, owner text, balance int);
         INSERT INTO accounts SELECT g, 'owner ' || g, g FROM generate_series(1, 2000) g;
         CREATE INDEX accounts_id ON accounts (id);",
        &["accounts"],
    );
    let datadir = c.datadir();
    let d = datadir.to_str().expect("utf-8");
    let file = datadir.join(&paths[0]);
    // A bit flip in line pointer 1's lp_off: it now points 16 kB further, past the page.
    let page = corrupt::read_block(&file, FLIPPED_LP, BLCKSZ).expect("read");
    let mut flipped = page.clone();
    flipped[25] ^= 0x40;
    corrupt::write_block(&file, FLIPPED_LP, &flipped).expect("write");
    // The first tuple of another page claims 127 attributes (the table has 3).
    let mut wide = corrupt::read_block(&file, WIDE_NATTS, BLCKSZ).expect("read");
    let t = first_tuple_offset(&wide);
    wide[t + 18] = 0x7f;
    corrupt::write_block(&file, WIDE_NATTS, &wide).expect("write");
    // Two pages written at each other's place.
    let (a, b) = SWAPPED;
    let pa = corrupt::read_block(&file, a, BLCKSZ).expect("read");
    let pb = corrupt::read_block(&file, b, BLCKSZ).expect("read");
    corrupt::write_block(&file, a, &pb).expect("write");
    corrupt::write_block(&file, b, &pa).expect("write");

    let enable = |extra: &[&str]| {
        let mut args = vec![
            "checksums",
            "enable",
            "-D",
            d,
            "--format",
            "json",
            "--no-progress",
            "-j",
            "2",
        ];
        args.extend(extra);
        pgcheckdb(&args)
    };
    let dry = enable(&["--dry-run"]);
    assert_eq!(dry.status, 2, "dry run must find the damage\n{dry}");
    let real = enable(&[]);
    assert_eq!(real.status, 2, "enable must refuse\n{real}");
    assert_eq!(real.summary()["outcome"], "refused_damaged", "{real}");
    assert_eq!(checksum_state(datadir), ChecksumState::Off, "pg_control must stay off");
    assert!(
        !real.stderr.contains("standbys"),
        "no standby warning when nothing was switched\n{real}"
    );
    for key in [
        "blocks",
        "new_pages",
        "blocks_rewritten",
        "blocks_already_valid",
        "damaged_blocks",
        "warnings",
    ] {
        assert_eq!(
            dry.summary()[key],
            real.summary()[key],
            "dry run and real run disagree on {key}\n{dry}\n{real}"
        );
    }
    assert_eq!(real.summary()["damaged_blocks"], 4, "{real}");
    let damaged: std::collections::BTreeSet<u64> = real
        .findings
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| {
            assert_eq!(f["file"], paths[0].as_str(), "{f}");
            assert_eq!(f["relation"]["name"], "public.accounts", "named by relation: {f}");
            assert_eq!(f["database"]["name"], "postgres", "named by database: {f}");
            f["block"].as_u64().expect("block")
        })
        .collect();
    assert_eq!(
        damaged,
        [FLIPPED_LP, WIDE_NATTS, a, b].into_iter().collect(),
        "{real}"
    );
    assert!(
        real.findings
            .iter()
            .any(|f| f["kind"] == "misplaced_page" && f["block"] == a),
        "{real}"
    );
    // The damaged pages got no checksum; a sane one did.
    for blk in [FLIPPED_LP, WIDE_NATTS, a, b] {
        assert_eq!(stored_checksum(&file, blk), 0, "block {blk} was stamped");
    }
    assert_ne!(stored_checksum(&file, 0), 0, "block 0 was not stamped");

    // The escape hatch stamps what the header checks accept; the swap is still caught.
    let skip = enable(&["--dry-run", "--skip-structure-checks"]);
    assert_eq!(skip.summary()["damaged_blocks"], 2, "{skip}");

    // With --allow-damaged the switch is flipped and the standby warning is shown.
    let allowed = enable(&["--allow-damaged"]);
    assert_eq!(allowed.status, 2, "{allowed}");
    assert_eq!(allowed.summary()["outcome"], "enabled", "{allowed}");
    assert_eq!(checksum_state(datadir), ChecksumState::On);
    assert!(allowed.stderr.contains("standbys"), "{allowed}");
    for blk in [FLIPPED_LP, WIDE_NATTS, a, b] {
        assert_eq!(stored_checksum(&file, blk), 0, "block {blk} was stamped");
    }
}
