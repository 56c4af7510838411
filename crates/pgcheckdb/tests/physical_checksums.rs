//! `verify --level physical` on real clusters WITH data checksums, for every supported major
//! version: a healthy cluster (with a relation of more than one segment) is clean and agrees with
//! `pg_checksums --check`; every damage class injected into distinct blocks is found with its exact
//! file, absolute block and kind; `pg_checksums` of the same version finds nothing pgcheckdb
//! misses; verify writes nothing; `-j 1` and `-j 2` agree; partial blocks and segment gaps are
//! found. One test per version runs the steps in order on one cluster.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt::{self, Damage, HeaderDamage};
use pgcheckdb_testkit::asserts::{assert_problems, assert_status, finding, key};
use pgcheckdb_testkit::fixture::BIG_ROWS;
use pgcheckdb_testkit::run::Key;
use pgcheckdb_testkit::snapshot::{differences, snapshot};
use pgcheckdb_testkit::{
    pg_checksums, standard_cluster_with, FixtureOptions, StandardCluster, BLCKSZ, RELSEG_SIZE,
};

use common::verify;

/// Block of `big` damaged in segment 1 (counted inside segment 1).
const BIG_BLOCK_IN_SEG1: u64 = 100;

pgcheckdb_testkit::version_tests! {
    scenario;
    checksums_pg14(14),
    checksums_pg15(15),
    checksums_pg16(16),
    checksums_pg17(17),
    checksums_pg18(18),
    checksums_pg19(19),
}

fn scenario(major: u32) {
    let sc = standard_cluster_with(FixtureOptions {
        major,
        checksums: true,
        big_relation: true,
    })
    .unwrap_or_else(|e| panic!("could not build the PostgreSQL {major} test cluster: {e}"));
    healthy(&sc, major);
    let expected = inject_block_damage(&sc);
    damaged(&sc, major, &expected);
    cross_check_pg_checksums(&sc, major, &expected);
    file_level_damage(&sc, expected);
}

/// A freshly stopped cluster: no errors or warnings, exit 0, `pg_checksums` agrees.
fn healthy(sc: &StandardCluster, major: u32) {
    assert_eq!(
        sc.blocks("postgres", "big", "main"),
        BIG_ROWS,
        "big should hold one row per page"
    );
    let run = verify(sc.datadir(), 2);
    assert_status(&run, 0, "healthy cluster");
    assert_problems(&run, &BTreeSet::new(), "healthy cluster");
    let summary = run.summary();
    assert_eq!(summary["checksums"], "on", "{run}");
    assert_eq!(summary["postgres_version"], major, "{run}");
    assert!(
        summary["blocks"].as_u64().unwrap_or(0) > BIG_ROWS,
        "the big relation was not scanned\n{run}"
    );
    let one = verify(sc.datadir(), 1);
    assert_eq!(
        one.findings_text(),
        run.findings_text(),
        "-j 1 and -j 2 differ on the healthy cluster"
    );
    let pgc = pg_checksums::check(&sc.cluster);
    assert_eq!(
        pgc.status, 0,
        "pg_checksums --check {major} on the healthy cluster:\n{}\n{}",
        pgc.stdout, pgc.stderr
    );
}

/// Damages distinct blocks of the stopped cluster and returns the findings that must result.
fn inject_block_damage(sc: &StandardCluster) -> BTreeSet<Key> {
    let mut expected = BTreeSet::new();
    let mut add = |kind: &str, rel: String, block: u64| expected.insert(key(kind, &rel, block));

    // A flipped byte in the tuple area of a heap page.
    damage(
        &sc.file("postgres", "accounts"),
        1,
        Damage::FlipByte {
            offset: BLCKSZ - 100,
        },
    );
    add(
        "checksum_mismatch",
        sc.fork_rel("postgres", "accounts", "main", 0),
        1,
    );

    // A flipped byte in the second 1 GiB segment: the absolute block number is reported.
    damage(
        &sc.fork_file("postgres", "big", "main", 1),
        BIG_BLOCK_IN_SEG1,
        Damage::FlipByte {
            offset: BLCKSZ - 100,
        },
    );
    add(
        "checksum_mismatch",
        sc.fork_rel("postgres", "big", "main", 1),
        RELSEG_SIZE + BIG_BLOCK_IN_SEG1,
    );

    // Block 2 written over block 5.
    damage(
        &sc.file("postgres", "small"),
        5,
        Damage::CopyFrom { source: 2 },
    );
    add(
        "misplaced_page",
        sc.fork_rel("postgres", "small", "main", 0),
        5,
    );

    // A full heap page torn after the first 4 KiB.
    let accounts = sc.file("postgres", "accounts");
    let header = header_of(&accounts, 3);
    assert!(
        header.pd_upper < 4096,
        "accounts block 3 is not full enough for a torn-page test: {header:?}"
    );
    damage(&accounts, 3, Damage::ZeroTail { from: 4096 });
    add(
        "torn_page",
        sc.fork_rel("postgres", "accounts", "main", 0),
        3,
    );

    // pd_special beyond the block, in the second database.
    damage(
        &sc.file("second", "other"),
        1,
        Damage::Header(HeaderDamage::SpecialBeyondBlock),
    );
    add(
        "invalid_header",
        sc.fork_rel("second", "other", "main", 0),
        1,
    );

    // pd_lower above pd_upper with a recomputed (valid) checksum: structure-only damage in TOAST.
    let toast = sc.file("postgres", "docs_toast");
    damage(&toast, 2, Damage::Header(HeaderDamage::LowerAboveUpper));
    corrupt::recompute_checksum(&toast, 2, BLCKSZ, 2).expect("recompute checksum");
    add(
        "invalid_header",
        sc.fork_rel("postgres", "docs_toast", "main", 0),
        2,
    );

    // pd_upper = 0 on a page that still holds data.
    damage(&accounts, 6, Damage::ZeroPdUpper);
    add(
        "nonzero_new_page",
        sc.fork_rel("postgres", "accounts", "main", 0),
        6,
    );

    // A page in the tablespace outside the data directory.
    damage(
        &sc.file("postgres", "in_space"),
        0,
        Damage::FlipByte {
            offset: BLCKSZ - 100,
        },
    );
    add(
        "checksum_mismatch",
        sc.fork_rel("postgres", "in_space", "main", 0),
        0,
    );

    // The free space map (its root page) and the visibility map.
    let fsm = sc.fork_file("postgres", "vacuumed", "fsm", 0);
    let fsm_block = sc.blocks("postgres", "vacuumed", "fsm") - 1;
    assert_ne!(
        header_of(&fsm, fsm_block).pd_upper,
        0,
        "FSM block {fsm_block} of vacuumed is not initialized"
    );
    damage(&fsm, fsm_block, Damage::FlipByte { offset: 100 });
    add(
        "checksum_mismatch",
        sc.fork_rel("postgres", "vacuumed", "fsm", 0),
        fsm_block,
    );
    let vm = sc.fork_file("postgres", "vacuumed", "vm", 0);
    let vm_header = header_of(&vm, 0);
    assert_ne!(
        vm_header.pd_upper, 0,
        "VM block 0 of vacuumed is not initialized (did VACUUM set all-visible?)"
    );
    damage(&vm, 0, Damage::FlipByte { offset: 100 });
    add(
        "checksum_mismatch",
        sc.fork_rel("postgres", "vacuumed", "vm", 0),
        0,
    );
    expected
}

fn damage(path: &Path, block: u64, d: Damage) {
    corrupt::inject(path, block, BLCKSZ, d).unwrap_or_else(|e| {
        panic!(
            "could not inject {d:?} into {} block {block}: {e}",
            path.display()
        )
    });
}

fn header_of(path: &Path, block: u64) -> PageHeader {
    let page = corrupt::read_block(path, block, BLCKSZ)
        .unwrap_or_else(|e| panic!("read {} block {block}: {e}", path.display()));
    PageHeader::parse(&page).expect("a whole block has a header")
}

/// Every injected block is reported exactly, verify writes nothing, thread counts agree.
fn damaged(sc: &StandardCluster, major: u32, expected: &BTreeSet<Key>) {
    let before = snapshot(sc.datadir()).expect("snapshot before");
    let run = verify(sc.datadir(), 2);
    let after = snapshot(sc.datadir()).expect("snapshot after");
    let diffs = differences(&before, &after);
    assert!(
        diffs.is_empty(),
        "verify changed the data directory: {diffs:#?}"
    );
    assert_status(&run, 2, "damaged cluster");
    assert_problems(
        &run,
        expected,
        &format!("damaged PostgreSQL {major} cluster"),
    );
    assert_eq!(run.summary()["corrupt_blocks"], expected.len(), "{run}");

    let seg1 = finding(
        &run,
        &key(
            "checksum_mismatch",
            &sc.fork_rel("postgres", "big", "main", 1),
            RELSEG_SIZE + BIG_BLOCK_IN_SEG1,
        ),
    );
    assert!(
        seg1["file"].as_str().is_some_and(|f| f.ends_with(".1")),
        "{seg1}"
    );
    assert_eq!(seg1["segment"], 1, "{seg1}");
    let spc = finding(
        &run,
        &key(
            "checksum_mismatch",
            &sc.fork_rel("postgres", "in_space", "main", 0),
            0,
        ),
    );
    assert!(
        spc["file"]
            .as_str()
            .is_some_and(|f| f.starts_with("pg_tblspc/")),
        "{spc}"
    );
    let fsm_block = sc.blocks("postgres", "vacuumed", "fsm") - 1;
    for (fork, block) in [("fsm", fsm_block), ("vm", 0)] {
        let f = finding(
            &run,
            &key(
                "checksum_mismatch",
                &sc.fork_rel("postgres", "vacuumed", fork, 0),
                block,
            ),
        );
        assert_eq!(f["fork"], fork, "{f}");
    }
    let misplaced = finding(
        &run,
        &key(
            "misplaced_page",
            &sc.fork_rel("postgres", "small", "main", 0),
            5,
        ),
    );
    assert_eq!(misplaced["detail"]["identical_copy_at"], 2, "{misplaced}");
    let torn = finding(
        &run,
        &key(
            "torn_page",
            &sc.fork_rel("postgres", "accounts", "main", 0),
            3,
        ),
    );
    assert_eq!(torn["detail"]["zero_from"], 4096, "{torn}");

    let one = verify(sc.datadir(), 1);
    assert_eq!(
        one.findings_text(),
        run.findings_text(),
        "-j 1 and -j 2 differ on the damaged cluster"
    );
}

/// Everything `pg_checksums --check` reports is reported by pgcheckdb; what pgcheckdb finds in
/// addition is exactly the damage checksums cannot see.
fn cross_check_pg_checksums(sc: &StandardCluster, major: u32, expected: &BTreeSet<Key>) {
    let pgc = pg_checksums::check(&sc.cluster);
    assert_eq!(
        pgc.status, 1,
        "pg_checksums {major} should fail on the damaged cluster\n{}\n{}",
        pgc.stdout, pgc.stderr
    );
    assert!(
        !pgc.bad_blocks.is_empty(),
        "no failures parsed from pg_checksums {major}:\n{}",
        pgc.stderr
    );
    let run = verify(sc.datadir(), 2);
    let ours = run.error_blocks();
    let missed: Vec<_> = pgc.bad_blocks.difference(&ours).collect();
    assert!(
        missed.is_empty(),
        "pg_checksums {major} reports blocks pgcheckdb does not: {missed:?}\n{}\n{run}",
        pgc.stderr
    );
    for ((file, block), failure) in &pgc.failures {
        let ours = run
            .findings
            .iter()
            .find(|f| {
                f["file"] == file.as_str() && f["block"] == *block && f["severity"] == "error"
            })
            .unwrap_or_else(|| panic!("no finding for {file} block {block}"));
        assert_eq!(
            (ours["detail"]["calculated"].as_u64(), ours["detail"]["expected"].as_u64()),
            (Some(failure.calculated as u64), Some(failure.stored as u64)),
            "pgcheckdb and pg_checksums {major} disagree on the checksums of {file} block {block}: {ours}"
        );
    }
    let extra: BTreeSet<Key> = expected
        .iter()
        .filter(|k| {
            !pgc.bad_blocks
                .contains(&(k.file.clone(), k.block.unwrap_or(0)))
        })
        .cloned()
        .collect();
    let extra_kinds: BTreeSet<&str> = extra.iter().map(|k| k.kind.as_str()).collect();
    eprintln!(
        "PostgreSQL {major}: pg_checksums reported {} blocks, pgcheckdb {}; found only by pgcheckdb: {}",
        pgc.bad_blocks.len(),
        ours.len(),
        extra.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
    );
    let want_extra: BTreeSet<Key> = [
        key(
            "nonzero_new_page",
            &sc.fork_rel("postgres", "accounts", "main", 0),
            6,
        ),
        key(
            "invalid_header",
            &sc.fork_rel("postgres", "docs_toast", "main", 0),
            2,
        ),
    ]
    .into();
    assert_eq!(
        extra, want_extra,
        "blocks found only by pgcheckdb ({extra_kinds:?})"
    );
}

/// A partial trailing block and a short first segment, after the `pg_checksums` comparison
/// (`pg_checksums` aborts on a partial block).
fn file_level_damage(sc: &StandardCluster, mut expected: BTreeSet<Key>) {
    let trunc = sc.file("postgres", "trunc_me");
    let blocks = sc.blocks("postgres", "trunc_me", "main");
    corrupt::truncate_by(&trunc, 100).expect("truncate trunc_me");
    expected.insert(key(
        "partial_block",
        &sc.fork_rel("postgres", "trunc_me", "main", 0),
        blocks - 1,
    ));

    let big0 = sc.file("postgres", "big");
    corrupt::truncate_by(&big0, BLCKSZ as u64).expect("truncate segment 0 of big");
    expected.insert(Key::new(
        "segment_gap",
        &sc.fork_rel("postgres", "big", "main", 0),
        None,
    ));

    let run = verify(sc.datadir(), 2);
    assert_status(&run, 2, "cluster with file-level damage");
    assert_problems(&run, &expected, "cluster with file-level damage");
    let partial = finding(
        &run,
        &key(
            "partial_block",
            &sc.fork_rel("postgres", "trunc_me", "main", 0),
            blocks - 1,
        ),
    );
    assert_eq!(
        partial["detail"]["remainder"],
        BLCKSZ as u64 - 100,
        "{partial}"
    );
}
