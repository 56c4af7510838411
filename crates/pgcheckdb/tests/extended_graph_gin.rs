//! The extended level checks the GIN graph: entry tree, posting trees and pending list. On a
//! real churned cluster of every supported version (a multi-level entry tree, posting trees
//! with internal pages and pages deleted by VACUUM, a pending list that was cleaned up and
//! filled again) verify `--level extended` must report nothing; then one link per case is
//! bent (checksum recomputed): an entry-tree downlink to a posting-tree page, a posting-tree
//! root named at an entry-tree page, a posting-tree downlink to a deleted page, a downlink key
//! below its child's heap TIDs, an entry-tree rightlink to a pending-list page, a second
//! downlink to one page, and the metapage's pending-list head at an entry-tree page. Each must
//! be found as `index_graph_invalid` at the page holding the bent link (the key: at the child
//! whose TIDs it no longer bounds). `pg_amcheck
//! --heapallindexed --parent-check` (and on 18 `gin_index_check`) is run on the damaged
//! cluster and its verdict printed for docs/CHECKS.md. A cluster crashed during GIN inserts and
//! recovered must be clean too.

mod common;

use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::amcheck;
use pgcheckdb_testkit::asserts::{assert_clean, graph_finding};
use pgcheckdb_testkit::bytes::{block_id_at, put_block_id, u16_at, u32_at};
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::{Cluster, BLCKSZ};

use common::{edit, normal_items, verify_extended};

pgcheckdb_testkit::version_tests! {
    scenario;
    gin_graph_pg14_checksums(14, true),
    gin_graph_pg15_no_checksums(15, false),
    gin_graph_pg16_checksums(16, true),
    gin_graph_pg17_no_checksums(17, false),
    gin_graph_pg18_checksums(18, true),
    gin_graph_pg19_no_checksums(19, false),
}

/// A cluster crashed (immediate stop) while GIN indexes of both kinds take inserts, then
/// recovered and shut down cleanly: whatever the crash left (unfinished splits, posting trees
/// or pending-list pages never linked) must not be reported.
#[test]
fn gin_graph_crash_recovered_pg17_is_clean() {
    let (mut c, _) = loaded_cluster(17, false, SCHEMA, &[]);
    c.start().expect("start");
    let load = "DO $$ BEGIN FOR j IN 1..100000 LOOP
          INSERT INTO g SELECT i, ARRAY[i % 2, 10 + i % 1000], ARRAY['w' || (i % 300)]
            FROM generate_series(j * 1000, j * 1000 + 999) i;
          DELETE FROM g WHERE id BETWEEN j * 1000 AND j * 1000 + 300;
          COMMIT; END LOOP; END $$;";
    let mut children: Vec<_> = (0..2)
        .map(|_| c.spawn_psql("postgres", load).expect("spawn psql"))
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    c.stop_immediate().expect("crash");
    for child in &mut children {
        let _ = child.wait();
    }
    c.start().expect("crash recovery");
    let rows = c
        .psql("postgres", "SELECT count(*) > 150000 FROM g;")
        .expect("count");
    assert!(rows.contains('t'), "the load ran before the crash: {rows}");
    c.stop().expect("stop");
    let run = verify_extended(c.datadir(), &[]);
    assert_clean(&run, "PostgreSQL 17: crash-recovered GIN indexes");
    let ext = &run.summary.as_ref().expect("summary")["extended"];
    assert!(
        ext["index_graphs_checked"].as_u64().unwrap_or(0) >= 2,
        "{ext}"
    );
}

/// `g_a` (fastupdate off): keys 0 and 1 have one posting tree each (60 000 TIDs, internal
/// roots); deleting a middle range of rows empties posting-tree leaves, which VACUUM deletes.
/// `g_w` (fastupdate on, 64 kB pending list): inserts spill into the pending list, clean-ups
/// delete list pages, and the last rows stay pending.
const SCHEMA: &str = "
CREATE TABLE g (id int, a int[], w text[]);
INSERT INTO g SELECT i, ARRAY[i % 2, 10 + i % 1000], ARRAY['w' || (i % 300), 'x' || (i % 7)]
  FROM generate_series(1, 120000) i;
CREATE INDEX g_a ON g USING gin (a) WITH (fastupdate = off);
CREATE INDEX g_w ON g USING gin (w) WITH (fastupdate = on, gin_pending_list_limit = 64);
DELETE FROM g WHERE id BETWEEN 20000 AND 100000;
VACUUM g;
INSERT INTO g SELECT i, ARRAY[i % 2, 10 + i % 1000], ARRAY['w' || (i % 300), 'y' || (i % 5)]
  FROM generate_series(120001, 150000) i;
DELETE FROM g WHERE id % 7 = 0;
VACUUM g;
INSERT INTO g SELECT i, ARRAY[i % 2, 10 + i % 1000], ARRAY['w' || (i % 300)]
  FROM generate_series(150001, 150600) i;
CHECKPOINT;
";

/// GIN page flags.
const GIN_DATA: u16 = 0x01;
const GIN_LEAF: u16 = 0x02;
const GIN_DELETED: u16 = 0x04;
const GIN_META: u16 = 0x08;
const GIN_LIST: u16 = 0x10;
const INVALID: u32 = u32::MAX;
/// `GinDataPageGetData`, `sizeof(PostingItem)`.
const DATA_START: usize = 32;
const POSTING_ITEM: usize = 10;

/// The GIN facts of one page the test needs.
#[derive(Debug, Clone, Copy)]
struct GinPage {
    blkno: u32,
    flags: u16,
    rightlink: u32,
    maxoff: u16,
}

impl GinPage {
    fn entry(&self) -> bool {
        self.flags & (GIN_DATA | GIN_DELETED | GIN_META | GIN_LIST) == 0
    }
    fn live_data(&self) -> bool {
        self.flags & (GIN_DATA | GIN_DELETED) == GIN_DATA
    }
    fn leaf(&self) -> bool {
        self.flags & GIN_LEAF != 0
    }
}

fn block(path: &Path, b: u32) -> Vec<u8> {
    corrupt::read_block(path, b as u64, BLCKSZ).expect("read block")
}

/// An entry-tree leaf page other than `leaf`.
fn other_entry_leaf(pages: &[GinPage], leaf: u32) -> u32 {
    pages
        .iter()
        .find(|p| p.entry() && p.leaf() && p.blkno != leaf)
        .expect("another entry leaf")
        .blkno
}

fn gin_pages(path: &Path) -> Vec<GinPage> {
    let n = std::fs::metadata(path).expect("index file").len() / BLCKSZ as u64;
    (0..n as u32)
        .filter_map(|b| {
            let p = block(path, b);
            let h = PageHeader::parse(&p)?;
            if h.is_new() {
                return None;
            }
            let s = h.pd_special as usize;
            Some(GinPage {
                blkno: b,
                rightlink: u32_at(&p, s),
                maxoff: u16_at(&p, s + 4),
                flags: u16_at(&p, s + 6),
            })
        })
        .collect()
}

/// The byte offsets of the tuples of an entry page.
fn tuples(page: &[u8]) -> Vec<usize> {
    normal_items(page)
        .iter()
        .map(|lp| lp.lp_off as usize)
        .collect()
}

struct Fixture {
    cluster: Cluster,
}

impl Fixture {
    fn rel_path(&mut self, name: &str) -> PathBuf {
        self.cluster.start().expect("start");
        let r = self
            .cluster
            .relation_filepath("postgres", name)
            .expect("relation path");
        self.cluster.stop().expect("stop");
        self.cluster.datadir().join(r)
    }
}

/// One injected case: the finding it must give.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    index: &'static str,
    block: u32,
    /// A word the finding's message must hold.
    says: &'static str,
    /// The bent page: its file, block, and bytes before and after.
    bent: Bent,
}

#[derive(Debug, Clone)]
struct Bent {
    path: PathBuf,
    block: u32,
    before: Vec<u8>,
    after: Vec<u8>,
}

/// Edits block `b` of `path` (checksum recomputed) and keeps both versions of the page.
fn bend(path: &Path, b: u32, change: impl FnOnce(&mut [u8])) -> Bent {
    let before = block(path, b);
    edit(path, b as u64, change);
    Bent {
        path: path.to_path_buf(),
        block: b,
        before,
        after: block(path, b),
    }
}

fn put_page(path: &Path, b: u32, page: &[u8]) {
    corrupt::write_block(path, b as u64, page).expect("write block");
}

/// The healthy structure the cases need is there: a multi-level entry tree, internal
/// posting-tree roots, deleted posting-tree pages, a pending list with deleted list pages.
fn assert_churned(a: &[GinPage], w: &[GinPage], w_meta: &[u8]) {
    assert!(a.iter().any(|p| p.blkno == 1 && !p.leaf()), "g_a root");
    let data_internal = a.iter().filter(|p| p.live_data() && !p.leaf()).count();
    assert!(data_internal >= 2, "g_a posting-tree internal pages");
    assert!(
        a.iter()
            .any(|p| p.flags & (GIN_DATA | GIN_DELETED) == GIN_DATA | GIN_DELETED),
        "g_a has no deleted posting-tree page: {a:?}"
    );
    assert!(w.iter().any(|p| p.blkno == 1 && !p.leaf()), "g_w root");
    assert!(w.iter().any(|p| p.flags & GIN_LIST != 0), "g_w list pages");
    assert!(
        w.iter().any(|p| p.flags == GIN_DELETED),
        "g_w has no deleted list page"
    );
    assert_ne!(u32_at(w_meta, 24), INVALID, "g_w pending list empty");
}

fn inject_g_a(path: &Path, cases: &mut Vec<Case>) {
    let pages = gin_pages(path);
    let deleted = pages
        .iter()
        .find(|p| p.flags & (GIN_DATA | GIN_DELETED) == GIN_DATA | GIN_DELETED)
        .expect("deleted data page")
        .blkno;
    // The entry leaf naming the posting trees of keys 0 and 1 (the leftmost leaf).
    let (leaf, roots) = pages
        .iter()
        .filter(|p| p.entry() && p.leaf())
        .find_map(|p| {
            let page = block(path, p.blkno);
            let roots: Vec<(usize, u32)> = tuples(&page)
                .into_iter()
                .filter(|&t| u16_at(&page, t + 4) == 0xFFFF)
                .map(|t| (t, block_id_at(&page, t)))
                .collect();
            (roots.len() >= 2).then_some((p.blkno, roots))
        })
        .expect("an entry leaf naming two posting trees");
    let (at, r0) = roots[0];
    let r1 = roots[1].1;
    let internal = |b: u32| {
        let p = pages.iter().find(|p| p.blkno == b).expect("posting root");
        assert!(p.live_data() && !p.leaf() && p.maxoff >= 2, "{p:?}");
        *p
    };
    let (r0, r1) = (internal(r0), internal(r1));
    // The root's last downlink at a posting-tree page (the subtree of the largest keys).
    let root = block(path, 1);
    let last = *tuples(&root).last().expect("root tuples");
    let bent = bend(path, 1, |p| put_block_id(p, last, r0.blkno));
    cases.push(Case {
        name: "GIN entry-tree downlink to a posting-tree page",
        index: "g_a",
        block: 1,
        says: "entry-tree downlink",
        bent,
    });
    // Key 0's posting-tree root named at another entry-tree leaf page.
    let other_leaf = other_entry_leaf(&pages, leaf);
    let bent = bend(path, leaf, |p| put_block_id(p, at, other_leaf));
    cases.push(Case {
        name: "GIN posting-tree root at an entry-tree page",
        index: "g_a",
        block: leaf,
        says: "posting-tree root",
        bent,
    });
    // A posting-tree downlink (key 0's root's last item) at a deleted page.
    let at = DATA_START + (r0.maxoff as usize - 1) * POSTING_ITEM;
    let bent = bend(path, r0.blkno, |p| put_block_id(p, at, deleted));
    cases.push(Case {
        name: "GIN posting-tree downlink to a deleted page",
        index: "g_a",
        block: r0.blkno,
        says: "deleted page",
        bent,
    });
    // Key 1's root's first downlink key (1,1): below its child's heap TIDs.
    let child = block_id_at(&block(path, r1.blkno), DATA_START);
    let bent = bend(path, r1.blkno, |p| {
        put_block_id(p, DATA_START + 4, 1);
        p[DATA_START + 8..DATA_START + 10].copy_from_slice(&1u16.to_le_bytes());
    });
    cases.push(Case {
        name: "GIN posting-tree downlink key below its child's heap TIDs",
        index: "g_a",
        block: child,
        says: "above (1,1)",
        bent,
    });
}

fn inject_g_w(path: &Path, cases: &mut Vec<Case>) {
    let pages = gin_pages(path);
    let list = pages
        .iter()
        .find(|p| p.flags & (GIN_LIST | GIN_DELETED) == GIN_LIST)
        .expect("a live list page")
        .blkno;
    // An entry leaf's rightlink at a pending-list page.
    let leaf = pages
        .iter()
        .find(|p| p.entry() && p.leaf() && p.rightlink != INVALID)
        .expect("an entry leaf with a right sibling")
        .blkno;
    let bent = bend(path, leaf, |p| {
        let s = u16_at(p, 16) as usize;
        p[s..s + 4].copy_from_slice(&list.to_le_bytes());
    });
    cases.push(Case {
        name: "GIN entry-tree rightlink to a pending-list page",
        index: "g_w",
        block: leaf,
        says: "pending-list page",
        bent,
    });
    // The root's second downlink the same as its first.
    let root = block(path, 1);
    let t = tuples(&root);
    let first_child = block_id_at(&root, t[0]);
    let bent = bend(path, 1, |p| put_block_id(p, t[1], first_child));
    cases.push(Case {
        name: "GIN second downlink to one entry-tree page",
        index: "g_w",
        block: 1,
        says: "also links to",
        bent,
    });
    // The pending list's head at an entry-tree leaf.
    let other_leaf = other_entry_leaf(&pages, leaf);
    let bent = bend(path, 0, |p| {
        p[24..28].copy_from_slice(&other_leaf.to_le_bytes())
    });
    cases.push(Case {
        name: "GIN pending-list head at an entry-tree page",
        index: "g_w",
        block: 0,
        says: "pending list leads to",
        bent,
    });
}

fn scenario(major: u32, checksums: bool) {
    let (cluster, _) = loaded_cluster(major, checksums, SCHEMA, &[]);
    let mut fx = Fixture { cluster };
    let datadir = fx.cluster.datadir().to_path_buf();

    // Healthy and churned: nothing to report, and both GIN graphs were checked.
    let clean = verify_extended(&datadir, &[]);
    assert_clean(&clean, &format!("PostgreSQL {major}: healthy cluster"));
    let ext = &clean.summary.as_ref().expect("summary")["extended"];
    assert!(
        ext["index_graphs_checked"].as_u64().unwrap_or(0) >= 2,
        "{ext}"
    );
    assert_eq!(ext["index_graphs_not_checked"], 0, "{ext}");

    let a = fx.rel_path("g_a");
    let w = fx.rel_path("g_w");
    assert_churned(&gin_pages(&a), &gin_pages(&w), &block(&w, 0));

    let mut cases = Vec::new();
    inject_g_a(&a, &mut cases);
    inject_g_w(&w, &mut cases);
    let run = verify_extended(&datadir, &[]);
    assert_eq!(run.status, 2, "PostgreSQL {major}: damaged\n{run}");
    let files = [("g_a", &a), ("g_w", &w)];
    let file_of = |index: &str| {
        let (_, p) = files.iter().find(|(n, _)| *n == index).expect("index");
        p.strip_prefix(&datadir)
            .expect("in datadir")
            .display()
            .to_string()
    };
    for c in &cases {
        let rel = file_of(c.index);
        let hit = graph_finding(&run, &rel, u64::from(c.block), c.says);
        let f = hit.unwrap_or_else(|| {
            panic!(
                "PostgreSQL {major}: \"{}\" not found at {rel} block {}\n{run}",
                c.name, c.block
            )
        });
        assert_eq!(f["severity"], "error", "{f}");
        assert_eq!(f["detail"]["am"], "gin", "{f}");
        assert_eq!(
            f["detail"]["index"],
            format!("postgres: public.{}", c.index),
            "{f}"
        );
    }
    // Nothing else but more graph findings in the two damaged indexes (the pages a bent link
    // no longer reaches).
    for f in run.problems() {
        let in_damaged = files.iter().any(|(n, _)| f["file"] == file_of(n).as_str());
        assert!(
            f["kind"] == "index_graph_invalid" && in_damaged,
            "PostgreSQL {major}: unexpected finding {f}\n{run}"
        );
    }
    print_graph_findings(&run);

    // Cross-check, one case at a time on the otherwise restored cluster.
    for c in &cases {
        put_page(&c.bent.path, c.bent.block, &c.bent.before);
    }
    eprintln!("PostgreSQL {major} (checksums {checksums}): case | pgcheckdb | amcheck");
    for c in &cases {
        put_page(&c.bent.path, c.bent.block, &c.bent.after);
        let verdict = amcheck_verdict(&mut fx, major, c.index);
        put_page(&c.bent.path, c.bent.block, &c.bent.before);
        eprintln!("  {:<58} | yes | {verdict}", c.name);
    }
}

fn print_graph_findings(run: &Run) {
    for f in run.problems() {
        eprintln!(
            "  finding: {} block {}: {}",
            f["file"], f["block"], f["message"]
        );
    }
}

/// Starts the cluster, runs `pg_amcheck --heapallindexed --parent-check` and, on 18,
/// `gin_index_check` on `index`, stops it; what they said.
fn amcheck_verdict(fx: &mut Fixture, major: u32, index: &str) -> String {
    fx.cluster.start().expect("start damaged cluster");
    let (ok, text) = amcheck::heapallindexed(&fx.cluster);
    let rel = format!("public.{index}\"");
    let pg_amcheck = match text.lines().find(|l| l.contains(&rel)) {
        Some(line) => format!("pg_amcheck: yes ({})", line.trim()),
        None if ok => "pg_amcheck: no".to_string(),
        None => format!("pg_amcheck: failed on something else ({})", text.trim()),
    };
    let gin_check = if major >= 18 {
        let sql = format!("SELECT gin_index_check('{index}');");
        match fx.cluster.psql("postgres", &sql) {
            Ok(_) => "gin_index_check: no".to_string(),
            Err(e) => {
                let e = e.to_string();
                let line = e.lines().find(|l| l.contains("ERROR")).unwrap_or("error");
                format!("gin_index_check: yes ({})", line.trim())
            }
        }
    } else {
        "gin_index_check: n/a".to_string()
    };
    fx.cluster.stop().expect("stop");
    format!("{pg_amcheck}; {gin_check}")
}
