//! The extended level checks the graph of every BRIN index: each range map (revmap) entry
//! must point at a regular page's tuple that summarizes that range, and the range map's
//! blocks must be revmap pages. On a real churned cluster of every supported version (ranges
//! summarized at build, new ranges summarized later, ranges widened so that their tuples move
//! to other pages, ranges desummarized and summarized again, deletes and VACUUM) verify
//! `--level extended` must report nothing; then each damage class is injected alone
//! (checksum recomputed), found as `index_graph_invalid` at the revmap block, and undone.
//! `pg_amcheck --heapallindexed --parent-check` is run on the cluster with the damages and its
//! verdict printed for docs/CHECKS.md.

mod common;

use std::path::Path;

use pgcheckdb_pg::format::itemid::line_pointers;
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::amcheck::index_verdicts;
use pgcheckdb_testkit::asserts::assert_healthy_extended;
use pgcheckdb_testkit::asserts::{assert_clean, assert_only_graph_finding};
use pgcheckdb_testkit::bytes::{put_tid, tid_at, Edit};
use pgcheckdb_testkit::loaded::{loaded_relation, pgbench_scripts};
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::BLCKSZ;

use common::edit;
use common::read_block as block;

pgcheckdb_testkit::version_tests! {
    scenario;
    brin_graph_pg14_checksums(14, true),
    brin_graph_pg15_no_checksums(15, false),
    brin_graph_pg16_checksums(16, true),
    brin_graph_pg17_no_checksums(17, false),
    brin_graph_pg18_checksums(18, true),
    brin_graph_pg19_no_checksums(19, false),
}

/// The range map grows past its first page while the table grows and ranges are summarized
/// concurrently: a regular page in the way is evacuated (its tuples move, their revmap entries
/// with them) and becomes a revmap page. pgbench inserts rows while other clients summarize new
/// ranges and desummarize old ones; the cluster, shut down cleanly, must verify clean.
#[test]
fn brin_graph_range_map_growth_pg16_checksums() {
    let sql = "CREATE TABLE g (id int, pad text) WITH (fillfactor = 10);
        INSERT INTO g SELECT i, repeat('p', 100) FROM generate_series(1, 2000) i;
        CREATE INDEX g_idx ON g USING brin (id, pad) WITH (pages_per_range = 1);";
    let (mut cluster, paths) = loaded_cluster(16, true, sql, &["g_idx", "g"]);
    cluster.start().expect("start");
    let ins = "INSERT INTO g SELECT (random() * 1e6)::int, repeat('q', (random() * 200)::int) \
               FROM generate_series(1, 40);\n";
    let sum = "SELECT brin_summarize_new_values('g_idx');\n\
               \\set r random(0, 1000)\n\
               SELECT brin_desummarize_range('g_idx', :r);\n\
               SELECT brin_summarize_range('g_idx', :r);\n";
    let args = ["-n", "-c", "6", "-j", "2", "-t", "60"];
    pgbench_scripts(&cluster, "brin-bench", &args, &[(ins, 3), (sum, 1)], None);
    cluster
        .psql("postgres", "SELECT brin_summarize_new_values('g_idx');")
        .expect("summarize");
    cluster.stop().expect("stop");
    let path = cluster.datadir().join(&paths[0]);
    let meta = block(&path, 0);
    let last_revmap = u32::from_le_bytes(meta[36..40].try_into().expect("4 bytes"));
    assert!(
        last_revmap >= 2,
        "the range map did not grow: lastRevmapPage {last_revmap}"
    );
    let run = common::verify_extended(cluster.datadir(), &[]);
    assert_clean(
        &run,
        "PostgreSQL 16: BRIN range map grown under concurrent summarization",
    );
    let heap = cluster.datadir().join(&paths[1]);
    let pages = std::fs::metadata(&heap).expect("table").len() / BLCKSZ as u64;
    eprintln!("PostgreSQL 16: table of {pages} pages, lastRevmapPage {last_revmap}: clean");
}

const SCHEMA: &str = "
CREATE TABLE b (id int, t text, pad text) WITH (fillfactor = 50);
INSERT INTO b SELECT i, 'v' || i, repeat('p', 60) FROM generate_series(1, 20000) i;
CREATE INDEX b_idx ON b USING brin (id, t) WITH (pages_per_range = 1);
INSERT INTO b SELECT i, 'w' || i, repeat('p', 60) FROM generate_series(20001, 30000) i;
SELECT brin_summarize_new_values('b_idx');
UPDATE b SET t = repeat('z', 200) || id WHERE id % 500 = 0;
SELECT brin_desummarize_range('b_idx', 10);
SELECT brin_desummarize_range('b_idx', 11);
DELETE FROM b WHERE id < 2000;
VACUUM b;
SELECT brin_summarize_range('b_idx', 10);
CHECKPOINT;
";

/// Where the revmap's TIDs start (after the page header) and the range map's first block.
const REVMAP_TIDS: usize = 24;
const REVMAP_BLOCK: u64 = 1;
const BRIN_PAGETYPE_REGULAR: u16 = 0xF093;

/// Revmap entry `k` of `page` as (block, offset).
fn tid(page: &[u8], k: usize) -> (u32, u16) {
    tid_at(page, REVMAP_TIDS + 6 * k)
}

/// An edit that sets revmap entry `k` to (`blk`, `off`).
fn set_tid(k: usize, blk: u32, off: u16) -> Edit {
    Box::new(move |p: &mut [u8]| put_tid(p, REVMAP_TIDS + 6 * k, blk, off))
}

/// One damage: the block it edits, and the words of its finding (always at the revmap page).
struct Case {
    name: &'static str,
    block: u64,
    change: Edit,
    says: &'static str,
}

fn scenario(major: u32, checksums: bool) {
    let (mut cluster, file, path) = loaded_relation(major, checksums, SCHEMA, "b_idx");
    let datadir = cluster.datadir().to_path_buf();

    let clean = common::verify_extended(&datadir, &[]);
    assert_healthy_extended(&clean, major, &[("index_graphs_checked", 1)]);

    let cases = cases(&path);
    for case in &cases {
        let saved = block(&path, case.block);
        if case.name.ends_with("all zeros") {
            // A page never written: no checksum either.
            corrupt::write_block(&path, case.block, &vec![0; BLCKSZ]).expect("zero");
        } else {
            edit(&path, case.block, |p| (case.change)(p));
        }
        let run = common::verify_extended(&datadir, &[]);
        let what = format!("PostgreSQL {major}: {}", case.name);
        assert_only_graph_finding(&run, &file, REVMAP_BLOCK, case.says, &what);
        corrupt::write_block(&path, case.block, &saved).expect("undo");
    }
    assert_clean(
        &common::verify_extended(&datadir, &[]),
        &format!("PostgreSQL {major}: every damage undone"),
    );

    // The entry damages at once (not the page-wide ones), for pg_amcheck.
    for case in cases.iter().filter(|c| c.block == REVMAP_BLOCK).take(4) {
        edit(&path, case.block, |p| (case.change)(p));
    }
    let ours = common::verify_extended(&datadir, &[]);
    // And a query that reads the whole index.
    let verdicts = index_verdicts(
        &mut cluster,
        "SET enable_seqscan = off; SELECT count(*) FROM b WHERE id BETWEEN 1 AND 40000;",
    );
    eprintln!(
        "PostgreSQL {major} (checksums {checksums}): 4 revmap entry damages; pgcheckdb exit {}, \
         {} findings; {verdicts}",
        ours.status,
        ours.problems().len(),
    );
}

fn cases(path: &Path) -> Vec<Case> {
    let revmap = block(path, REVMAP_BLOCK);
    let valid: Vec<(usize, (u32, u16))> = (0..40)
        .map(|k| (k, tid(&revmap, k)))
        .filter(|(_, t)| t.1 != 0)
        .collect();
    assert!(valid.len() >= 20, "too few summarized ranges: {valid:?}");
    let n = std::fs::metadata(path).expect("index").len() / BLCKSZ as u64;
    let (k0, k1, k2, k3, k4) = (valid[0].0, valid[1].1, valid[2].0, valid[3].0, valid[4].0);
    let (tblk, toff) = valid[5].1;
    let tuple_page = block(path, tblk as u64);
    let h = PageHeader::parse(&tuple_page).expect("header");
    let lp = line_pointers(&tuple_page, &h)[toff as usize - 1];
    let bt_at = lp.lp_off as usize;
    vec![
        Case {
            name: "an entry points at another range's tuple",
            block: REVMAP_BLOCK,
            change: set_tid(k0, k1.0, k1.1),
            says: "whose tuple summarizes the range at heap block",
        },
        Case {
            name: "an entry points past its page's line pointers",
            block: REVMAP_BLOCK,
            change: set_tid(k2, valid[2].1 .0, 300),
            says: "not a normal line pointer",
        },
        Case {
            name: "an entry points at the metapage",
            block: REVMAP_BLOCK,
            change: set_tid(k3, 0, 1),
            says: "a meta page",
        },
        Case {
            name: "an entry points past the end of the index",
            block: REVMAP_BLOCK,
            change: set_tid(k4, n as u32 + 10, 1),
            says: "past the index's",
        },
        Case {
            name: "a regular page's tuple names another range",
            block: tblk as u64,
            change: Box::new(move |p: &mut [u8]| p[bt_at] ^= 1),
            says: "whose tuple summarizes the range at heap block",
        },
        Case {
            name: "the range map's page became a regular page",
            block: REVMAP_BLOCK,
            change: Box::new(|p: &mut [u8]| {
                let at = p.len() - 2;
                p[at..].copy_from_slice(&BRIN_PAGETYPE_REGULAR.to_le_bytes());
            }),
            says: "is in the range map",
        },
        Case {
            name: "the range map's page is all zeros",
            block: REVMAP_BLOCK,
            change: Box::new(|p: &mut [u8]| p.fill(0)),
            says: "all zeros",
        },
    ]
}
