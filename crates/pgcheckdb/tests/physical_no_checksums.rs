//! `verify --level physical` on real clusters WITHOUT data checksums, for every supported major
//! version, plus the refusals and tool-side errors that need a real cluster: a running server,
//! a relation file the tool may not read, a torn `pg_control`. One test per version runs the
//! steps in order on one cluster.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;

use pgcheckdb_pg::ops::corrupt::{self, Damage, HeaderDamage};
use pgcheckdb_testkit::asserts::{assert_problems, assert_status, key};
use pgcheckdb_testkit::{standard_cluster, StandardCluster, BLCKSZ};

use common::{verify, verify_as};

pgcheckdb_testkit::version_tests! {
    scenario;
    no_checksums_pg14(14),
    no_checksums_pg15(15),
    no_checksums_pg16(16),
    no_checksums_pg17(17),
    no_checksums_pg18(18),
    no_checksums_pg19(19),
}

fn scenario(major: u32) {
    let mut sc = standard_cluster(major, false);
    let healthy_blocks = healthy(&sc);
    running_cluster_is_refused(&mut sc, major);
    unreadable_file(&sc, healthy_blocks);
    torn_control_file(&sc);
    header_damage(&sc);
}

/// Clean: no errors or warnings, exit 0, the summary says checksums are off. Returns the blocks checked.
fn healthy(sc: &StandardCluster) -> u64 {
    let run = verify(sc.datadir(), 2);
    assert_status(&run, 0, "healthy cluster without checksums");
    assert_problems(&run, &BTreeSet::new(), "healthy cluster without checksums");
    assert_eq!(run.summary()["checksums"], "off", "{run}");
    run.summary()["blocks"].as_u64().unwrap_or(0)
}

/// With the server up, verify exits 1 and says why.
fn running_cluster_is_refused(sc: &mut StandardCluster, major: u32) {
    sc.cluster
        .start()
        .unwrap_or_else(|e| panic!("start PostgreSQL {major}: {e}"));
    let run = verify(sc.datadir(), 2);
    sc.cluster
        .stop()
        .unwrap_or_else(|e| panic!("stop PostgreSQL {major}: {e}"));
    assert_status(&run, 1, "running cluster");
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 1, "one error line expected\n{run}");
    assert!(
        lines[0].contains("live process") || lines[0].contains("in production"),
        "the message should name the live postmaster or the cluster state\n{run}"
    );
}

/// A relation file the (unprivileged) tool cannot open: one error line, exit 1, the rest checked.
fn unreadable_file(sc: &StandardCluster, healthy_blocks: u64) {
    let user = sc.cluster.user().cloned();
    let path = sc.file("postgres", "accounts");
    let blocks = sc.blocks("postgres", "accounts", "main");
    let mode = fs::metadata(&path)
        .expect("stat accounts")
        .permissions()
        .mode();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).expect("chmod 000");
    let run = verify_as(sc.datadir(), 2, user.as_ref());
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod back");
    if user.is_none() && run.status == 0 {
        panic!("this test needs to run as root (to switch to an unprivileged user) or as a user that permission bits bind");
    }
    assert_status(&run, 1, "unreadable relation file");
    let lines = run.stderr_lines();
    let rel = sc.rel("postgres", "accounts");
    assert_eq!(lines.len(), 1, "one error line expected\n{run}");
    assert!(
        lines[0].starts_with("pgcheckdb: error:")
            && lines[0].contains(rel)
            && lines[0].contains("ermission denied"),
        "{run}"
    );
    let summary = run.summary();
    assert_eq!(
        summary["blocks"],
        healthy_blocks - blocks,
        "every other block must still be checked\n{run}"
    );
    assert_eq!(summary["skipped_blocks"], blocks, "{run}");
    assert_problems(&run, &BTreeSet::new(), "unreadable relation file");
}

/// A byte flipped in pg_control: a CRC error, exit 1, nothing else read.
fn torn_control_file(sc: &StandardCluster) {
    let path = sc.datadir().join("global/pg_control");
    let good = fs::read(&path).expect("read pg_control");
    let mut bad = good.clone();
    bad[40] ^= 0x01;
    fs::write(&path, &bad).expect("write pg_control");
    let run = verify(sc.datadir(), 2);
    fs::write(&path, &good).expect("restore pg_control");
    assert_status(&run, 1, "torn pg_control");
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 1, "one error line expected\n{run}");
    assert!(
        lines[0].contains("pg_control") && lines[0].contains("CRC"),
        "{run}"
    );
    assert_eq!(
        run.summary()["blocks"],
        0,
        "nothing should be checked with a bad pg_control\n{run}"
    );
    assert!(
        run.summary()["error"]
            .as_str()
            .is_some_and(|e| e.contains("CRC")),
        "the JSON summary carries the error\n{run}"
    );
}

/// Header rules are checked without checksums.
fn header_damage(sc: &StandardCluster) {
    let accounts = sc.file("postgres", "accounts");
    corrupt::inject(
        &accounts,
        2,
        BLCKSZ,
        Damage::Header(HeaderDamage::SpecialBeyondBlock),
    )
    .expect("damage accounts");
    let small = sc.file("postgres", "small");
    corrupt::inject(&small, 3, BLCKSZ, Damage::ZeroPdUpper).expect("damage small");
    let other = sc.file("second", "other");
    corrupt::inject(
        &other,
        1,
        BLCKSZ,
        Damage::Header(HeaderDamage::LowerAboveUpper),
    )
    .expect("damage other");
    let expected: BTreeSet<_> = [
        key("invalid_header", sc.rel("postgres", "accounts"), 2),
        key("nonzero_new_page", sc.rel("postgres", "small"), 3),
        key("invalid_header", sc.rel("second", "other"), 1),
    ]
    .into();
    let run = verify(sc.datadir(), 2);
    assert_status(&run, 2, "header damage without checksums");
    assert_problems(&run, &expected, "header damage without checksums");
    assert_eq!(run.summary()["checksums"], "off", "{run}");
}
