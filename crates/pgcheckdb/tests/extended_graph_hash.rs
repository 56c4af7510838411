//! The extended level checks the graph of every hash index: each bucket's primary page and
//! overflow chain, the overflow bitmap, and which bucket each tuple's hash code belongs to.
//! On a real churned cluster of every supported version (an index built over few keys, so
//! that every bucket has a long overflow chain, another split many times by inserts, deletes
//! and a VACUUM that squeezes chains and frees overflow pages, inserts that reuse them)
//! verify `--level extended` must report nothing; then each damage class is injected alone
//! (checksum recomputed), found as `index_graph_invalid` at the exact block, and undone. The
//! bitmap bits are located with pageinspect's `hash_bitmap_info`, not with our own rules.
//! `pg_amcheck --heapallindexed --parent-check` is run on the cluster with every damage at
//! once and its verdict printed for docs/CHECKS.md.

mod common;

use std::path::Path;

use pgcheckdb_pg::format::itemid::{line_pointers, LpFlags};
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::amcheck::index_verdicts;
use pgcheckdb_testkit::asserts::assert_healthy_extended;
use pgcheckdb_testkit::asserts::{assert_clean, assert_only_graph_finding};
use pgcheckdb_testkit::bytes::{u16_at, u32_at, Edit};
use pgcheckdb_testkit::loaded::{loaded_relation, pgbench_scripts};
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::{Cluster, BLCKSZ};

use common::edit;
use common::read_block as block;

pgcheckdb_testkit::version_tests! {
    scenario;
    hash_graph_pg14_checksums(14, true),
    hash_graph_pg15_no_checksums(15, false),
    hash_graph_pg16_checksums(16, true),
    hash_graph_pg17_no_checksums(17, false),
    hash_graph_pg18_checksums(18, true),
    hash_graph_pg19_no_checksums(19, false),
}

/// Splits under concurrent scans: a split that ends while a scan holds a pin on the old bucket
/// leaves it `LH_BUCKET_NEEDS_SPLIT_CLEANUP`, still holding the tuples it copied to the new
/// bucket. pgbench inserts random keys while other clients scan the index; the cluster, shut
/// down cleanly, must verify clean. (Whether a bucket was left pending depends on timing; the
/// count is printed.)
#[test]
fn hash_graph_concurrent_splits_pg16_checksums() {
    let sql = "CREATE TABLE t (id int, p text); CREATE INDEX t_h ON t USING hash (id);";
    let (mut cluster, paths) = loaded_cluster(16, true, sql, &["t_h"]);
    cluster.start().expect("start");
    let ins = "INSERT INTO t SELECT (random() * 1e9)::int, 'x' FROM generate_series(1, 50);\n";
    let sel = "\\set k random(1, 1000000000)\nSELECT count(*) FROM t WHERE id = :k;\n\
               SELECT count(*) FROM t WHERE id IN (1, 2, 3, 4, 5, 6, 7, 8, 9, 10);\n";
    let args = ["-n", "-c", "8", "-j", "2", "-T", "8"];
    let options = "-c enable_seqscan=off -c enable_bitmapscan=off";
    pgbench_scripts(
        &cluster,
        "hash-bench",
        &args,
        &[(ins, 1), (sel, 2)],
        Some(options),
    );
    cluster.stop().expect("stop");
    let path = cluster.datadir().join(&paths[0]);
    let n = std::fs::metadata(&path).expect("index").len() / BLCKSZ as u64;
    let pending = (1..n)
        .filter_map(|b| opaque(&block(&path, b)))
        .filter(|o| o.flag & 0xF == LH_BUCKET_PAGE && o.flag & 0x60 != 0)
        .count();
    let run = common::verify_extended(cluster.datadir(), &[]);
    assert_clean(
        &run,
        "PostgreSQL 16: hash index split under concurrent scans",
    );
    eprintln!("PostgreSQL 16: {n} blocks, {pending} buckets with a split pending: clean");
}

const SCHEMA: &str = "
CREATE TABLE h (id int, k int);
INSERT INTO h SELECT i, i % 20 FROM generate_series(1, 40000) i;
CREATE INDEX h_k ON h USING hash (k);
CREATE INDEX h_id ON h USING hash (id);
INSERT INTO h SELECT i, i % 20 FROM generate_series(40001, 60000) i;
DELETE FROM h WHERE k IN (3, 4) OR id % 7 = 0;
VACUUM h;
INSERT INTO h SELECT i, 3 FROM generate_series(60001, 61000) i;
INSERT INTO h SELECT i, i % 20 FROM generate_series(61001, 90000) i;
CHECKPOINT;
";

const INVALID: u32 = u32::MAX;
const LH_BUCKET_PAGE: u16 = 2;

/// `HashPageOpaqueData` of a page, and where it is.
#[derive(Debug, Clone, Copy)]
struct Opaque {
    special: usize,
    next: u32,
    bucket: u32,
    flag: u16,
}

fn opaque(page: &[u8]) -> Option<Opaque> {
    let h = PageHeader::parse(page).filter(|h| !h.is_new())?;
    let s = h.pd_special as usize;
    Some(Opaque {
        special: s,
        next: u32_at(page, s + 4),
        bucket: u32_at(page, s + 8),
        flag: u16_at(page, s + 12),
    })
}

/// Every bucket's chain, found by following the pages' own links: (primary, overflow pages).
fn chains(path: &Path) -> Vec<(u64, Vec<u64>)> {
    let n = std::fs::metadata(path).expect("index file").len() / BLCKSZ as u64;
    let mut out = Vec::new();
    for b in 1..n {
        let Some(o) = opaque(&block(path, b)) else {
            continue;
        };
        if o.flag & 0xF != LH_BUCKET_PAGE {
            continue;
        }
        let mut pages = Vec::new();
        let mut next = o.next;
        while next != INVALID {
            pages.push(next as u64);
            next = opaque(&block(path, next as u64)).expect("chain page").next;
        }
        out.push((b, pages));
    }
    out
}

/// pageinspect's (bitmap block, bit) of the overflow page at `blkno`.
fn bitmap_bit(cluster: &Cluster, blkno: u64) -> (u64, u64) {
    let v = cluster
        .query_value(
            "postgres",
            &format!(
                "SELECT bitmapblkno || ',' || bitmapbit FROM hash_bitmap_info('h_k', {blkno})"
            ),
        )
        .expect("hash_bitmap_info");
    let (a, b) = v.split_once(',').expect("two values");
    (a.parse().expect("block"), b.parse().expect("bit"))
}

/// One damage: the blocks it edits (to undo it), and the block and words of its finding.
struct Case {
    name: &'static str,
    edits: Vec<(u64, Edit)>,
    at: u64,
    says: &'static str,
}

fn scenario(major: u32, checksums: bool) {
    let (mut cluster, file, path) = loaded_relation(major, checksums, SCHEMA, "h_k");
    let datadir = cluster.datadir().to_path_buf();

    let clean = common::verify_extended(&datadir, &[]);
    assert_healthy_extended(&clean, major, &[("index_graphs_checked", 2)]);

    // Chains with at least three overflow pages, each damaged in its own way.
    let long: Vec<(u64, Vec<u64>)> = chains(&path)
        .into_iter()
        .filter(|(_, c)| c.len() >= 3)
        .collect();
    assert!(
        long.len() >= 6,
        "PostgreSQL {major}: too few long chains: {long:?}"
    );
    cluster.start().expect("start");
    cluster
        .psql("postgres", "CREATE EXTENSION IF NOT EXISTS pageinspect;")
        .expect("pageinspect");
    let cleared = bitmap_bit(&cluster, long[3].1[0]);
    let cut = *long[4].1.last().expect("last page");
    let leaked = bitmap_bit(&cluster, cut);
    cluster.stop().expect("stop");

    let cases = cases(&path, &long, cleared, leaked);
    for case in &cases {
        let saved: Vec<(u64, Vec<u8>)> = case
            .edits
            .iter()
            .map(|(b, _)| (*b, block(&path, *b)))
            .collect();
        for (b, change) in &case.edits {
            edit(&path, *b, |p| change(p));
        }
        let run = common::verify_extended(&datadir, &[]);
        let what = format!("PostgreSQL {major}: {}", case.name);
        assert_only_graph_finding(&run, &file, case.at, case.says, &what);
        for (b, page) in saved {
            corrupt::write_block(&path, b, &page).expect("undo");
        }
    }
    assert_clean(
        &common::verify_extended(&datadir, &[]),
        &format!("PostgreSQL {major}: every damage undone"),
    );

    // Every damage at once but the cycle (a scan of that chain would never end: PostgreSQL
    // follows hasho_nextblkno without a check for interrupts), for pg_amcheck.
    for case in cases.iter().filter(|c| c.says != "cycle") {
        for (b, change) in &case.edits {
            edit(&path, *b, |p| change(p));
        }
    }
    let ours = common::verify_extended(&datadir, &[]);
    let found = ours.error_blocks().len();
    // And a query that reads the whole index.
    let verdicts = index_verdicts(&mut cluster, "SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT k, count(*) FROM h WHERE k IN (0,1,2,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19) GROUP BY k;");
    eprintln!(
        "PostgreSQL {major} (checksums {checksums}): {} hash graph damages; pgcheckdb reports \
         {found} blocks; {verdicts}",
        cases.len() - 1,
    );
}

fn cases(
    path: &Path,
    long: &[(u64, Vec<u64>)],
    cleared: (u64, u64),
    leaked: (u64, u64),
) -> Vec<Case> {
    let primary = long[0].0;
    let wrong_bucket = opaque(&block(path, primary)).expect("primary").bucket + 1;
    let (b_page, b_other) = (long[1].1[1], long[0].0);
    let (c_last, c_first) = (*long[2].1.last().expect("page"), long[2].1[0]);
    let cut_before = long[4].1[long[4].1.len() - 2];
    let code_page = long[5].0;
    // Sets the u32 at byte `field` of the page's HashPageOpaqueData.
    let set_u32 = |field: usize, v: u32| -> Edit {
        Box::new(move |p: &mut [u8]| {
            let a = opaque(p).expect("opaque").special + field;
            p[a..a + 4].copy_from_slice(&v.to_le_bytes());
        })
    };
    vec![
        Case {
            name: "a primary bucket page names another bucket",
            edits: vec![(primary, set_u32(8, wrong_bucket))],
            at: primary,
            says: "primary page",
        },
        Case {
            name: "an overflow page names the wrong previous page",
            edits: vec![(b_page, set_u32(0, b_other as u32))],
            at: b_page,
            says: "hasho_prevblkno",
        },
        Case {
            name: "an overflow chain links back into itself",
            edits: vec![(c_last, set_u32(4, c_first as u32))],
            at: c_last,
            says: "cycle",
        },
        Case {
            name: "a chain page is marked free in the bitmap",
            edits: vec![(
                cleared.0,
                Box::new(move |p: &mut [u8]| {
                    p[24 + (cleared.1 / 8) as usize] &= !(1 << (cleared.1 % 8))
                }),
            )],
            at: cleared.0,
            says: "free, but bucket",
        },
        Case {
            name: "an overflow page cut off its chain stays marked in use",
            edits: vec![(cut_before, set_u32(4, INVALID))],
            at: leaked.0,
            says: "in use, but no bucket chain holds it",
        },
        Case {
            name: "a tuple's hash code belongs to another bucket",
            edits: vec![(code_page, Box::new(flip_last_code))],
            at: code_page,
            says: "hash code",
        },
    ]
}

/// Flips the lowest bit of the hash code of the page's last tuple: its bucket changes.
fn flip_last_code(p: &mut [u8]) {
    let h = PageHeader::parse(p).expect("header");
    let last = line_pointers(p, &h)
        .into_iter()
        .rfind(|lp| lp.lp_flags == LpFlags::Normal)
        .expect("a tuple");
    p[lp_code(last.lp_off)] ^= 1;
}

fn lp_code(lp_off: u16) -> usize {
    lp_off as usize + 8
}
