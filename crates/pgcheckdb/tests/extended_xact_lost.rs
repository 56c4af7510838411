//! A lost write of a `pg_xact` page: tuples carry the commit hint bits a reader set while the
//! commit log said "committed", and after a clean shutdown the commit log says "in progress"
//! (its status bits are 00 again, as on a page that never reached the disk). On real clusters
//! of every supported version (with and without data checksums): rows inserted by several
//! transactions and rows deleted by one, a prepared transaction left open (in progress, as it
//! may be), hint bits set by a `SELECT`, `CHECKPOINT`, clean stop.
//! `verify --level extended` first reports nothing; then the status of one inserting and of the
//! deleting transaction is set to "in progress" in `pg_xact`, and exactly one `hint_bit_invalid`
//! per heap page holding their tuples must be reported, at that page and its first such line
//! pointer, naming the `pg_xact` page. The same damaged cluster marked as crashed (where
//! `pg_xact` may lag and "in progress" proves nothing) gives no such finding. Started, the
//! damaged cluster passes `pg_amcheck --heapallindexed --parent-check`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use pgcheckdb_pg::format::heap::infomask as im;
use pgcheckdb_testkit::amcheck;
use pgcheckdb_testkit::asserts::{assert_clean, assert_status};
use pgcheckdb_testkit::bytes::{u16_at, u32_at};
use pgcheckdb_testkit::control::set_db_state;
use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::{Cluster, ClusterOptions, MAJORS};

use common::{normal_items, read_block, verify_extended};

/// Table `h`: five inserting transactions of 150 rows (several pages each). Table `d`: ten rows
/// on one page (free enough that no reader prunes it), three deleted by one transaction. A
/// prepared transaction inserts into `h` and deletes from `d`: "in progress" in `pg_xact` at the
/// clean shutdown, legitimately, and without commit hints. The `SELECT`s set the hint bits.
const SQL: &str = "
CREATE TABLE h (id int, v text);
INSERT INTO h SELECT g, repeat('h', 80) FROM generate_series(1, 150) g;
INSERT INTO h SELECT g, repeat('h', 80) FROM generate_series(151, 300) g;
INSERT INTO h SELECT g, repeat('h', 80) FROM generate_series(301, 450) g;
INSERT INTO h SELECT g, repeat('h', 80) FROM generate_series(451, 600) g;
INSERT INTO h SELECT g, repeat('h', 80) FROM generate_series(601, 750) g;
CREATE TABLE d (id int);
INSERT INTO d SELECT generate_series(1, 10);
DELETE FROM d WHERE id <= 3;
BEGIN;
INSERT INTO h SELECT g, 'prepared' FROM generate_series(1001, 1010) g;
DELETE FROM d WHERE id = 10;
PREPARE TRANSACTION 'kept';
SELECT count(*) FROM h;
SELECT count(*) FROM d;
CHECKPOINT;
";

/// `HEAP_XMIN_COMMITTED` / `HEAP_XMAX_COMMITTED` hint bits per status field.
const T_XMIN: usize = 0;
const T_XMAX: usize = 4;
const T_INFOMASK: usize = 20;

/// `(offset, xmin, xmax, infomask)` of the normal tuples of a heap page.
fn tuples(page: &[u8]) -> Vec<(u16, u32, u32, u16)> {
    normal_items(page)
        .iter()
        .map(|lp| {
            let at = lp.lp_off as usize;
            let mask = u16_at(page, at + T_INFOMASK);
            (
                lp.offnum,
                u32_at(page, at + T_XMIN),
                u32_at(page, at + T_XMAX),
                mask,
            )
        })
        .collect()
}

/// Block -> first offset of the tuples of `path` whose status field (`xmin` or `xmax`) is
/// `xid` and whose commit hint `hint` is set; asserts that every such tuple has the hint.
fn hinted(path: &Path, xid: u32, xmax: bool, hint: u16) -> BTreeMap<u64, u16> {
    let blocks = std::fs::metadata(path).expect("relation file").len() / 8192;
    let mut out = BTreeMap::new();
    for b in 0..blocks {
        for (off, xmin, x, mask) in tuples(&read_block(path, b)) {
            if (if xmax { x } else { xmin }) != xid {
                continue;
            }
            assert!(
                mask & hint != 0,
                "block {b} offset {off}: hint {hint:#x} not set by the SELECT"
            );
            out.entry(b).or_insert(off);
        }
    }
    assert!(!out.is_empty(), "no tuple of transaction {xid}");
    out
}

/// Sets the status of `xid` in `pg_xact` to 00 ("in progress"), leaving its neighbours.
fn lose_commit(datadir: &Path, xid: u32) {
    const XACTS_PER_PAGE: u32 = 8192 * 4;
    let page = xid / XACTS_PER_PAGE;
    let path = datadir.join(format!("pg_xact/{:04X}", page / 32));
    let mut bytes = std::fs::read(&path).expect("read pg_xact segment");
    let at = (page % 32) as usize * 8192 + (xid % XACTS_PER_PAGE / 4) as usize;
    let shift = 2 * (xid % 4);
    assert_eq!(
        (bytes[at] >> shift) & 3,
        1,
        "xid {xid} is not committed in pg_xact"
    );
    bytes[at] &= !(3 << shift);
    std::fs::write(&path, bytes).expect("write pg_xact segment");
}

/// `(file, block, offset, hint, xid, pg_xact file)` of the `hint_bit_invalid` findings.
fn hint_findings(run: &Run) -> BTreeSet<(String, u64, u64, String, u64, String)> {
    run.findings
        .iter()
        .filter(|f| f["kind"] == "hint_bit_invalid")
        .map(|f| {
            let d = &f["detail"];
            assert_eq!(d["xact_status"], "in_progress", "{f}");
            let message = f["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("still in progress on a cluster shut down cleanly")
                    && message.contains("pg_xact/0000 page 0"),
                "{f}"
            );
            (
                f["file"].as_str().unwrap_or_default().to_string(),
                f["block"].as_u64().unwrap_or(u64::MAX),
                f["offset"].as_u64().unwrap_or(0),
                d["hint"].as_str().unwrap_or_default().to_string(),
                d["xid"].as_u64().unwrap_or(0),
                d["pg_xact_file"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn scenario(major: u32) {
    let checksums = major.is_multiple_of(2);
    let what = format!("PG{major} checksums {checksums}");
    pgcheckdb_testkit::require_binaries(major);
    let opts = ClusterOptions::new(major, checksums)
        .throwaway()
        .setting("autovacuum", "off")
        .setting("max_prepared_transactions", "2");
    let mut cluster = Cluster::init_temp(&opts).unwrap_or_else(|e| panic!("initdb {major}: {e}"));
    cluster.start().expect("start");
    cluster.psql("postgres", SQL).expect("load");
    let paths: Vec<String> = ["h", "d"]
        .iter()
        .map(|t| cluster.relation_filepath("postgres", t).expect("path"))
        .collect();
    let value = |sql: &str| -> u32 {
        let v = cluster.query_value("postgres", sql).expect(sql);
        v.trim().parse().unwrap_or_else(|_| panic!("{sql}: {v}"))
    };
    let inserter = value("SELECT xmin::text FROM h WHERE id = 301");
    cluster.stop().expect("stop");
    let datadir = cluster.datadir().to_path_buf();
    let (h, d) = (datadir.join(&paths[0]), datadir.join(&paths[1]));
    // The deleted rows are visible to no query: their xmax is read from the page.
    // The deleter's tuples have the commit hint, the prepared transaction's do not.
    let deleters: BTreeSet<u32> = tuples(&read_block(&d, 0))
        .into_iter()
        .filter(|t| t.2 != 0 && t.3 & im::HEAP_XMAX_COMMITTED != 0)
        .map(|t| t.2)
        .collect();
    assert_eq!(
        deleters.len(),
        1,
        "{what}: one deleting transaction: {deleters:?}"
    );
    let deleter = deleters.into_iter().next().unwrap_or_default();
    let prepared = std::fs::read_dir(datadir.join("pg_twophase"))
        .expect("pg_twophase")
        .count();
    assert_eq!(prepared, 1, "{what}: the prepared transaction's state file");

    let clean = verify_extended(&datadir, &[]);
    assert_clean(&clean, &format!("{what}: before the damage"));

    let mut expected = BTreeSet::new();
    let cases = [
        (
            &h,
            &paths[0],
            inserter,
            false,
            im::HEAP_XMIN_COMMITTED,
            "HEAP_XMIN_COMMITTED",
        ),
        (
            &d,
            &paths[1],
            deleter,
            true,
            im::HEAP_XMAX_COMMITTED,
            "HEAP_XMAX_COMMITTED",
        ),
    ];
    for (path, file, xid, xmax, hint, name) in cases {
        for (block, offset) in hinted(path, xid, xmax, hint) {
            expected.insert((
                file.clone(),
                block,
                offset as u64,
                name.to_string(),
                xid as u64,
                "pg_xact/0000".to_string(),
            ));
        }
        lose_commit(&datadir, xid);
    }
    assert!(
        expected.iter().filter(|e| e.0 == paths[0]).count() > 1,
        "{what}: the inserting transaction's rows should span pages"
    );

    let damaged = verify_extended(&datadir, &[]);
    assert_status(&damaged, 2, &format!("{what}: damaged"));
    assert_eq!(hint_findings(&damaged), expected, "{what}\n{damaged}");
    assert_eq!(
        damaged.problems().len(),
        expected.len(),
        "{what}: other findings\n{damaged}"
    );

    // As after a crash: pg_xact may lag behind the pages, "in progress" proves nothing.
    set_db_state(&datadir, 6);
    let crashed = verify_extended(&datadir, &[]);
    assert!(
        hint_findings(&crashed).is_empty(),
        "{what}: marked as crashed\n{crashed}"
    );

    // amcheck's heap check trusts a set commit hint: the same damage passes it (on 14-19).
    set_db_state(&datadir, 1);
    cluster.start().expect("start the damaged cluster");
    let (ok, out) = amcheck::heapallindexed(&cluster);
    println!("{what}: pg_amcheck --heapallindexed --parent-check:\n{out}");
    assert!(ok, "{what}: pg_amcheck found the damage too:\n{out}");
    cluster.stop().expect("stop");
}

#[test]
fn lost_pg_xact_commit_under_commit_hints() {
    for major in MAJORS {
        scenario(major);
    }
}
