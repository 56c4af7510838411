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
use pgcheckdb_testkit::asserts::assert_healthy_extended;
use pgcheckdb_testkit::bytes::{put_tid, tid_at, u16_at};
use pgcheckdb_testkit::control::set_db_state;
use pgcheckdb_testkit::loaded::relation_path;
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::run::{place_of, Place, Run};
use pgcheckdb_testkit::{amcheck, Cluster, BLCKSZ};

use common::read_block as block;
use common::{edit, verify_extended, verify_spilled};

pgcheckdb_testkit::version_tests! {
    scenario;
    tids_pg14_checksums(14, true),
    tids_pg15_no_checksums(15, false),
    tids_pg16_checksums(16, true),
    tids_pg17_no_checksums(17, false),
    tids_pg18_checksums(18, true),
    tids_pg18_no_checksums(18, false),
    tids_pg19_checksums(19, true),
    tids_pg19_no_checksums(19, false),
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
        relation_path(&mut self.cluster, name)
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

fn items(page: &[u8]) -> Vec<ItemId> {
    match PageHeader::parse(page) {
        Some(h) if !h.is_new() => line_pointers(page, &h),
        _ => Vec::new(),
    }
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
    u16_at(page, at + 6)
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
    u16_at(page, special + at)
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
fn tid_findings(run: &Run) -> BTreeSet<(Place, u64, u64)> {
    run.findings
        .iter()
        .filter(|f| matches!(f["kind"].as_str(), Some("index_tid_invalid" | "lost_write")))
        .map(|f| {
            (
                place_of(f),
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
    // The hash, GiST, SP-GiST and GIN indexes' graphs were checked too.
    let minimums = [
        ("tid_indexes_checked", 9),
        ("tids_checked", 6 * 5500),
        ("index_graphs_checked", 4),
    ];
    let ext = assert_healthy_extended(&clean, major, &minimums);
    for counter in [
        "tid_indexes_not_checked",
        "tids_not_checked",
        "index_graphs_not_checked",
    ] {
        assert_eq!(ext[counter], 0, "{counter}: {ext}");
    }
    // Shut down in recovery (a standby's pages may stand at different points of the WAL), the
    // graphs are counted as not checked, with the reason.
    set_db_state(&datadir, 2);
    let standby = verify_extended(&datadir, &["--verbose"]);
    set_db_state(&datadir, 1);
    let ext = standby.extended();
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
    let ext = alone.extended();
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
    let (small, _temp) = verify_spilled(&datadir, "256k");
    assert_eq!(
        tid_findings(&small),
        tid_findings(&run),
        "findings differ with spills"
    );

    let hits = amcheck_hits(&mut fx, &cases);
    let heading =
        format!("PostgreSQL {major} (checksums {checksums}): case | pgcheckdb | pg_amcheck");
    let rows = cases.iter().map(|c| {
        let theirs = hits.get(c.name).map_or("no", String::as_str);
        (c.name, format!("yes ({})", c.kind), theirs)
    });
    amcheck::print_table(&heading, 58, rows);

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
    let mut args = amcheck::HEAPALLINDEXED.to_vec();
    args.push("--no-dependent-toast");
    let text = amcheck::on_stopped(&mut fx.cluster, &args);
    let mut hits = std::collections::BTreeMap::new();
    for c in cases {
        if let Some(line) = amcheck::line_naming(&text, c.relation) {
            hits.insert(c.name, format!("yes: {}", line.trim()));
        }
    }
    hits
}
