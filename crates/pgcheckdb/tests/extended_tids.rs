//! The extended level checks every heap TID an index holds against its table (index -> heap):
//! B-tree plain and posting-list TIDs, hash, GiST, SP-GiST and GIN entries. On a real churned
//! cluster of every supported version (HOT and non-HOT updates, deletes, VACUUM, dead rows left
//! unvacuumed, a GIN pending list) verify `--level extended` must report nothing; then one TID
//! per case is bent (checksum recomputed) to point past the table, past a page's line
//! pointers, at an unused line pointer or at a heap-only tuple, one heap page is zeroed and the
//! last page of another table cut off (lost writes). Each must be found at the right relation
//! and block, identically when the facts spill to disk; an index checked without its table
//! (`-i`) is counted as not checked. `pg_amcheck --heapallindexed --parent-check` is run on the
//! damaged cluster and its verdict printed for docs/CHECKS.md.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::btree::{BtPageOpaque, P_NONE};
use pgcheckdb_pg::format::heap::{infomask2, HeapTupleHeader};
use pgcheckdb_pg::format::itemid::{line_pointers, ItemId, LpFlags};
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::{Cluster, BLCKSZ};

use common::{assert_clean, edit, loaded_cluster, verify_extended};

#[test]
fn tids_pg14_checksums() {
    scenario(14, true);
}

#[test]
fn tids_pg15_no_checksums() {
    scenario(15, false);
}

#[test]
fn tids_pg16_checksums() {
    scenario(16, true);
}

#[test]
fn tids_pg17_no_checksums() {
    scenario(17, false);
}

#[test]
fn tids_pg18_checksums() {
    scenario(18, true);
}

#[test]
fn tids_pg18_no_checksums() {
    scenario(18, false);
}

const SCHEMA: &str = "
CREATE TABLE t (id int PRIMARY KEY, k text NOT NULL, g int NOT NULL, p point,
                a int[], note text) WITH (fillfactor = 80);
INSERT INTO t SELECT i, 'key' || (i % 40), i % 10, point(i % 100, i / 100),
                     ARRAY[i % 600, 1000 + i % 7], 'n'
  FROM generate_series(1, 6000) i;
CREATE INDEX t_k ON t (k);
CREATE INDEX t_g ON t (g);
CREATE INDEX t_hash ON t USING hash (id);
CREATE INDEX t_gist ON t USING gist (p);
CREATE INDEX t_spgist ON t USING spgist (p);
CREATE INDEX t_gin ON t USING gin (a);
UPDATE t SET note = 'hot' || id WHERE id % 5 = 0;
DELETE FROM t WHERE id BETWEEN 1000 AND 1400;
VACUUM t;
UPDATE t SET g = g + 1 WHERE id % 11 = 0;
UPDATE t SET note = 'hot again' WHERE id % 17 = 0;
DELETE FROM t WHERE id BETWEEN 3000 AND 3100;
SELECT count(*) FROM t WHERE note <> '';
CREATE TABLE z (id int PRIMARY KEY, pad text);
INSERT INTO z SELECT i, repeat('z', 100) FROM generate_series(1, 2000) i;
CREATE TABLE e (id int PRIMARY KEY, pad text);
INSERT INTO e SELECT i, repeat('e', 100) FROM generate_series(1, 2000) i;
CHECKPOINT;
";

/// Offset numbers past every heap page's line pointers here (tuples of ~60 bytes: at most
/// ~130 a page), yet within `MaxHeapTuplesPerPage` so that no page-level check objects.
const FAR_OFFSET: u16 = 290;

struct Fixture {
    cluster: Cluster,
}

impl Fixture {
    fn build(major: u32, checksums: bool) -> Fixture {
        let (cluster, _) = loaded_cluster(major, checksums, SCHEMA, &[]);
        Fixture { cluster }
    }

    fn rel(&mut self, name: &str) -> String {
        self.cluster.start().expect("start");
        let r = self
            .cluster
            .relation_filepath("postgres", name)
            .expect("relation path");
        self.cluster.stop().expect("stop");
        r
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.cluster.datadir().join(rel)
    }
}

/// One injected case: the finding it must give.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    /// The relation the finding is at (an index, or the table for a lost write).
    relation: &'static str,
    kind: &'static str,
    block: u64,
    /// For `index_tid_invalid`: the heap TID and what its line pointer is.
    tid: Option<(u64, u16, &'static str)>,
}

fn nblocks(path: &Path) -> u64 {
    std::fs::metadata(path).expect("file").len() / BLCKSZ as u64
}

fn block(path: &Path, b: u64) -> Vec<u8> {
    corrupt::read_block(path, b, BLCKSZ).expect("read block")
}

fn items(page: &[u8]) -> Vec<ItemId> {
    match PageHeader::parse(page) {
        Some(h) if !h.is_new() => line_pointers(page, &h),
        _ => Vec::new(),
    }
}

/// Writes TID (`blk`, `off`) at byte `at` of a page (`bi_hi`, `bi_lo`, `ip_posid`).
fn put_tid(page: &mut [u8], at: usize, blk: u32, off: u16) {
    page[at..at + 2].copy_from_slice(&((blk >> 16) as u16).to_le_bytes());
    page[at + 2..at + 4].copy_from_slice(&(blk as u16).to_le_bytes());
    page[at + 4..at + 6].copy_from_slice(&off.to_le_bytes());
}

fn tid_at(page: &[u8], at: usize) -> (u32, u16) {
    let u = |o: usize| u16::from_le_bytes([page[o], page[o + 1]]);
    (((u(at) as u32) << 16) | u(at + 2) as u32, u(at + 4))
}

/// The heap's (block, offset) of an unused line pointer and of a heap-only tuple, and a block
/// with its line pointer count.
struct HeapTargets {
    unused: (u32, u16),
    heap_only: (u32, u16),
    some_block: (u32, u16),
}

fn heap_targets(path: &Path) -> HeapTargets {
    let (mut unused, mut heap_only) = (None, None);
    for b in 0..nblocks(path) {
        let page = block(path, b);
        let lps = items(&page);
        for lp in &lps {
            match lp.lp_flags {
                LpFlags::Unused if unused.is_none() => unused = Some((b as u32, lp.offnum)),
                LpFlags::Normal if heap_only.is_none() => {
                    let (o, l) = (lp.lp_off as usize, lp.lp_len as usize);
                    let h = HeapTupleHeader::parse(&page[o..o + l]).expect("tuple header");
                    if h.t_infomask2 & infomask2::HEAP_ONLY_TUPLE != 0 {
                        heap_only = Some((b as u32, lp.offnum));
                    }
                }
                _ => {}
            }
        }
    }
    let page = block(path, 2);
    HeapTargets {
        unused: unused.expect("an unused line pointer in t (DELETE + VACUUM)"),
        heap_only: heap_only.expect("a heap-only tuple in t (HOT updates)"),
        some_block: (2, items(&page).len() as u16),
    }
}

/// A leaf page's data items: (offnum, lp_off, lp_len).
type LeafItems = Vec<(u16, usize, usize)>;

/// Live B-tree leaf pages (not the metapage) with their data items.
fn btree_leaves(path: &Path) -> Vec<(u64, LeafItems)> {
    (1..nblocks(path))
        .filter_map(|b| {
            let page = block(path, b);
            let h = PageHeader::parse(&page)?;
            let o = BtPageOpaque::parse(&page, h.pd_special as usize)?;
            if !o.is_leaf() || o.btpo_flags & 0x14 != 0 {
                return None;
            }
            let first = if o.btpo_next == P_NONE { 1 } else { 2 };
            let data = items(&page)
                .iter()
                .filter(|lp| lp.offnum >= first && lp.lp_flags == LpFlags::Normal)
                .map(|lp| (lp.offnum, lp.lp_off as usize, lp.lp_len as usize))
                .collect();
            Some((b, data))
        })
        .collect()
}

fn t_info(page: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([page[at + 6], page[at + 7]])
}

/// Bends the plain TIDs of four entries on four leaf pages of `t_pkey`.
fn inject_pkey(fx: &mut Fixture, heap: &Path, cases: &mut Vec<Case>) {
    let rel = fx.rel("t_pkey");
    let path = fx.path(&rel);
    let targets = heap_targets(heap);
    let past_end = nblocks(heap) as u32 + 1000;
    let (sb, sn) = targets.some_block;
    let bends: [(&'static str, (u32, u16), &'static str); 4] = [
        (
            "B-tree TID past the end of the table",
            (past_end, 1),
            "beyond_table",
        ),
        (
            "B-tree TID past the page's line pointers",
            (sb, sn + 3),
            "beyond_line_pointers",
        ),
        (
            "B-tree TID at an unused line pointer",
            targets.unused,
            "unused",
        ),
        (
            "B-tree TID at a heap-only tuple",
            targets.heap_only,
            "heap_only",
        ),
    ];
    let leaves = btree_leaves(&path);
    assert!(leaves.len() >= 6, "t_pkey has {} leaves", leaves.len());
    for (i, (name, (blk, off), what)) in bends.into_iter().enumerate() {
        let (b, data) = &leaves[i + 1];
        let page = block(&path, *b);
        let &(_, at, _) = data
            .iter()
            .find(|&&(_, at, len)| len == 16 && t_info(&page, at) & 0xE000 == 0)
            .expect("a plain leaf tuple");
        edit(&path, *b, |p| put_tid(p, at, blk, off));
        cases.push(Case {
            name,
            relation: "t_pkey",
            kind: "index_tid_invalid",
            block: *b,
            tid: Some((blk as u64, off, what)),
        });
    }
}

/// Bends one TID inside a posting list of `index` (not its page's first or last item, and
/// one whose next TID is on a later heap block, so that every order stays intact).
fn inject_posting(fx: &mut Fixture, index: &'static str, name: &'static str) -> Case {
    let rel = fx.rel(index);
    let path = fx.path(&rel);
    for (b, data) in btree_leaves(&path) {
        let page = block(&path, b);
        for &(_, at, _) in data.iter().skip(1).take(data.len().saturating_sub(2)) {
            let info = t_info(&page, at);
            let (start, flags) = tid_at(&page, at);
            if info & 0x2000 == 0 || flags & 0x2000 == 0 {
                continue;
            }
            let n = (flags & 0x0FFF) as usize;
            for j in 1..n.saturating_sub(1) {
                let here = at + start as usize + 6 * j;
                let (blk, _) = tid_at(&page, here);
                let (next_blk, _) = tid_at(&page, here + 6);
                if next_blk > blk {
                    edit(&path, b, |p| put_tid(p, here, blk, FAR_OFFSET));
                    return Case {
                        name,
                        relation: index,
                        kind: "index_tid_invalid",
                        block: b,
                        tid: Some((blk as u64, FAR_OFFSET, "beyond_line_pointers")),
                    };
                }
            }
        }
    }
    panic!("no posting list in {index}");
}

/// Bends the TID at byte `tid_at` of the first item that `pick` accepts on a page that
/// `page_ok` accepts; the offset becomes [`FAR_OFFSET`].
fn inject_item(
    fx: &mut Fixture,
    index: &'static str,
    name: &'static str,
    page_ok: impl Fn(&[u8], usize) -> bool,
    pick: impl Fn(&[u8]) -> Option<usize>,
) -> Case {
    let rel = fx.rel(index);
    let path = fx.path(&rel);
    for b in 1..nblocks(&path) {
        let page = block(&path, b);
        let Some(h) = PageHeader::parse(&page) else {
            continue;
        };
        if h.is_new() || !page_ok(&page, h.pd_special as usize) {
            continue;
        }
        for lp in items(&page) {
            let (o, l) = (lp.lp_off as usize, lp.lp_len as usize);
            if l == 0 {
                continue;
            }
            let Some(rel_at) = pick(&page[o..o + l]) else {
                continue;
            };
            let (blk, _) = tid_at(&page, o + rel_at);
            edit(&path, b, |p| put_tid(p, o + rel_at, blk, FAR_OFFSET));
            return Case {
                name,
                relation: index,
                kind: "index_tid_invalid",
                block: b,
                tid: Some((blk as u64, FAR_OFFSET, "beyond_line_pointers")),
            };
        }
    }
    panic!("nothing to damage in {index}");
}

fn special_u16(page: &[u8], special: usize, at: usize) -> u16 {
    u16::from_le_bytes([page[special + at], page[special + at + 1]])
}

fn inject(fx: &mut Fixture) -> Vec<Case> {
    let mut cases = Vec::new();
    let heap_rel = fx.rel("t");
    let heap = fx.path(&heap_rel);
    inject_pkey(fx, &heap, &mut cases);
    cases.push(inject_posting(
        fx,
        "t_g",
        "B-tree posting-list TID (int key)",
    ));
    cases.push(inject_posting(
        fx,
        "t_k",
        "B-tree posting-list TID (text key)",
    ));
    // Hash bucket or overflow page (LH_BUCKET_PAGE or LH_OVERFLOW_PAGE): t_tid.
    cases.push(inject_item(
        fx,
        "t_hash",
        "hash index TID",
        |p, s| matches!(special_u16(p, s, 12) & 0xF, 1 | 2),
        |_| Some(0),
    ));
    // GiST leaf page (F_LEAF): t_tid.
    cases.push(inject_item(
        fx,
        "t_gist",
        "GiST leaf TID",
        |p, s| special_u16(p, s, 12) & 0x3 == 0x1,
        |_| Some(0),
    ));
    // SP-GiST leaf page (SPGIST_LEAF), a live leaf tuple: heapPtr at byte 6.
    cases.push(inject_item(
        fx,
        "t_spgist",
        "SP-GiST leaf TID",
        |p, s| special_u16(p, s, 0) & 0x7 == 0x4,
        |t| (t[0] & 0x3 == 0).then_some(6),
    ));
    // GIN entry-tree leaf page (GIN_LEAF, not GIN_DATA nor GIN_LIST): a compressed posting
    // list's first TID (`GinPostingList.first`).
    cases.push(inject_item(
        fx,
        "t_gin",
        "GIN posting-list TID",
        |p, s| special_u16(p, s, 6) & 0x1F == 0x2,
        |t| {
            let (blk, n) = tid_at(t, 0);
            (blk & 0x8000_0000 != 0 && n >= 2 && n != 0xFFFF)
                .then_some((blk & 0x7FFF_FFFF) as usize)
        },
    ));
    // A lost write in the middle of z: its page 1 all zero.
    let z_rel = fx.rel("z");
    let z = fx.path(&z_rel);
    corrupt::zero_block(&z, 1, BLCKSZ).expect("zero block");
    cases.push(Case {
        name: "heap page zeroed while indexed (lost write)",
        relation: "z",
        kind: "lost_write",
        block: 1,
        tid: None,
    });
    // e's last page cut off.
    let e_rel = fx.rel("e");
    let e = fx.path(&e_rel);
    let last = nblocks(&e) - 1;
    corrupt::truncate_by(&e, BLCKSZ as u64).expect("truncate");
    cases.push(Case {
        name: "last heap page truncated away while indexed (lost write)",
        relation: "e",
        kind: "lost_write",
        block: last,
        tid: None,
    });
    cases
}

/// The findings of this check as (file, block, kind, heap block, heap offset).
fn tid_findings(run: &Run) -> BTreeSet<(String, u64, String, u64, u64)> {
    run.findings
        .iter()
        .filter(|f| matches!(f["kind"].as_str(), Some("index_tid_invalid" | "lost_write")))
        .map(|f| {
            (
                f["file"].as_str().unwrap_or("?").to_string(),
                f["block"].as_u64().unwrap_or(u64::MAX),
                f["kind"].as_str().unwrap_or("?").to_string(),
                f["detail"]["heap_block"].as_u64().unwrap_or(0),
                f["detail"]["heap_offset"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn scenario(major: u32, checksums: bool) {
    let mut fx = Fixture::build(major, checksums);
    let datadir = fx.cluster.datadir().to_path_buf();

    // Healthy and churned: nothing to report, and every index's TIDs were checked.
    let clean = verify_extended(&datadir, &[]);
    assert_clean(&clean, &format!("PostgreSQL {major}: healthy cluster"));
    let summary = clean.summary.clone().expect("summary");
    let ext = &summary["extended"];
    assert!(
        ext["tid_indexes_checked"].as_u64().unwrap_or(0) >= 9,
        "{summary}"
    );
    assert_eq!(ext["tid_indexes_not_checked"], 0, "{summary}");
    assert!(
        ext["tids_checked"].as_u64().unwrap_or(0) >= 6 * 5500,
        "{summary}"
    );
    assert_eq!(ext["tids_not_checked"], 0, "{summary}");
    // The hash, GiST, SP-GiST and GIN indexes' graphs were checked too.
    assert!(
        ext["index_graphs_checked"].as_u64().unwrap_or(0) >= 4,
        "{summary}"
    );
    assert_eq!(ext["index_graphs_not_checked"], 0, "{summary}");
    // Shut down in recovery (a standby's pages may stand at different points of the WAL), the
    // graphs are counted as not checked, with the reason.
    common::set_db_state(&datadir, 2);
    let standby = verify_extended(&datadir, &["--verbose"]);
    common::set_db_state(&datadir, 1);
    let ext = &standby.summary.as_ref().expect("summary")["extended"];
    assert_eq!(ext["index_graphs_checked"], 0, "{ext}");
    assert!(
        ext["index_graphs_not_checked"].as_u64().unwrap_or(0) >= 4,
        "{ext}"
    );
    assert!(
        standby.stderr.contains(
            "graph not checked: index postgres: public.t_gin: the cluster was not shut down cleanly"
        ),
        "{}",
        standby.stderr
    );

    // An index checked without its table: counted, not reported.
    let alone = verify_extended(&datadir, &["-i", "public.t_k", "--verbose"]);
    assert_eq!(alone.status, 0, "{alone}");
    let ext = &alone.summary.as_ref().expect("summary")["extended"];
    assert_eq!(ext["tid_indexes_checked"], 0, "{ext}");
    assert!(
        ext["tid_indexes_not_checked"].as_u64().unwrap_or(0) >= 1,
        "{ext}"
    );
    assert!(
        ext["tids_not_checked_indexes"].to_string().contains("t_k"),
        "{ext}"
    );
    assert!(
        alone.stderr.contains(
            "TIDs not checked: index postgres: public.t_k: its table is not in the scope"
        ),
        "{}",
        alone.stderr
    );

    let cases = inject(&mut fx);
    let run = verify_extended(&datadir, &[]);
    assert_eq!(run.status, 2, "PostgreSQL {major}: damaged\n{run}");
    let mut allowed_pages = BTreeSet::new();
    for c in &cases {
        let rel = fx.rel(c.relation);
        let hit = run.findings.iter().find(|f| {
            f["kind"] == c.kind
                && f["file"] == rel.as_str()
                && f["block"] == c.block
                && c.tid.is_none_or(|(b, o, what)| {
                    f["detail"]["heap_block"] == b
                        && f["detail"]["heap_offset"] == o
                        && f["detail"]["line_pointer"] == what
                })
        });
        let f = hit.unwrap_or_else(|| {
            panic!(
                "PostgreSQL {major}: \"{}\" not found: {} at {rel} block {} {:?}\n{run}",
                c.name, c.kind, c.block, c.tid
            )
        });
        assert_eq!(f["severity"], "error", "{f}");
        assert_eq!(
            f["relation"]["name"],
            format!("public.{}", c.relation),
            "{f}"
        );
        if c.kind == "lost_write" {
            assert_eq!(f["detail"]["evidence"], "index", "{f}");
            assert_eq!(
                f["detail"]["index_pages"][0]["index"],
                format!("postgres: public.{}_pkey", c.relation),
                "{f}"
            );
        } else {
            assert_eq!(f["detail"]["heap"]["table"], "public.t", "{f}");
        }
        allowed_pages.insert((rel, c.block));
    }
    // Nothing else is an error or a warning, except more bent TIDs on the damaged GIN page
    // (its later TIDs are deltas from the bent first one), and the rows a bent B-tree TID no
    // longer names, which lack their entry, and the live rows it names instead, which now
    // have an entry with another key (heap -> index, tested in extended_allindexed.rs).
    for f in run
        .problems()
        .into_iter()
        .filter(|f| f["kind"] != "index_entry_missing" && f["kind"] != "index_entry_extra")
    {
        let at = (
            f["file"].as_str().unwrap_or("").to_string(),
            f["block"].as_u64().unwrap_or(u64::MAX),
        );
        assert!(
            allowed_pages.contains(&at)
                && matches!(f["kind"].as_str(), Some("index_tid_invalid" | "lost_write")),
            "PostgreSQL {major}: unexpected finding {f}\n{run}"
        );
    }

    // The same findings when the facts spill to disk.
    let temp = tempfile::tempdir().expect("temp dir");
    let temp_arg = temp.path().display().to_string();
    let small = verify_extended(&datadir, &["--memory", "256k", "--temp-dir", &temp_arg]);
    let spilled = &small.summary.as_ref().expect("summary")["extended"];
    assert!(
        spilled["spill_files"].as_u64().unwrap_or(0) > 0,
        "{spilled}"
    );
    assert_eq!(
        tid_findings(&small),
        tid_findings(&run),
        "findings differ with spills"
    );

    let hits = amcheck_hits(&mut fx, &cases);
    eprintln!("PostgreSQL {major} (checksums {checksums}): case | pgcheckdb | pg_amcheck");
    for c in &cases {
        eprintln!(
            "  {:<58} | yes ({}) | {}",
            c.name,
            c.kind,
            hits.get(c.name).map_or("no", String::as_str)
        );
    }

    // An index left invalid (as a failed CREATE INDEX CONCURRENTLY leaves it) may be built in
    // part: its graph is counted as not checked, with the reason.
    fx.cluster.start().expect("start");
    fx.cluster
        .psql(
            "postgres",
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 't_hash'::regclass;",
        )
        .expect("mark t_hash invalid");
    fx.cluster.stop().expect("stop");
    let invalid = verify_extended(&datadir, &["--verbose"]);
    assert!(
        invalid.stderr.contains(
            "graph not checked: index postgres: public.t_hash: the index is not valid (indisvalid is false)"
        ),
        "PostgreSQL {major}: {}",
        invalid.stderr
    );
}

/// Runs `pg_amcheck --heapallindexed --parent-check` on the damaged cluster (started after
/// pgcheckdb's runs); returns, per case, what it said about the case's relation (its table
/// for index cases: amcheck has no index -> heap check, only heap -> index).
fn amcheck_hits(
    fx: &mut Fixture,
    cases: &[Case],
) -> std::collections::BTreeMap<&'static str, String> {
    fx.cluster.start().expect("start damaged cluster");
    fx.cluster
        .psql("postgres", "CREATE EXTENSION IF NOT EXISTS amcheck;")
        .expect("create extension amcheck");
    let sock = fx.cluster.socket_dir().display().to_string();
    let args = [
        "-h",
        &sock,
        "-U",
        "postgres",
        "-d",
        "postgres",
        "--heapallindexed",
        "--parent-check",
        "--no-dependent-toast",
    ];
    let out = fx
        .cluster
        .command("pg_amcheck")
        .args(args)
        .output()
        .expect("run pg_amcheck");
    fx.cluster.stop().expect("stop");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("--- pg_amcheck output ---\n{text}--- end ---");
    let mut hits = std::collections::BTreeMap::new();
    for c in cases {
        let rel = format!("\"postgres.public.{}\"", c.relation);
        if let Some(line) = text.lines().find(|l| l.contains(&rel)) {
            hits.insert(c.name, format!("yes: {}", line.trim()));
        }
    }
    hits
}
