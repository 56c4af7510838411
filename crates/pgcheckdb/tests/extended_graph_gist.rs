//! The GiST and SP-GiST graphs at the extended level. On a real cluster of every supported
//! version with point, box, range and text GiST and SP-GiST indexes built and churned by SQL
//! (a GiST index with fillfactor 10, three levels deep with deleted pages after VACUUM; an
//! SP-GiST tree of nulls that has split), `verify --level extended` must report nothing; then
//! downlinks and chain links are bent (checksum recomputed): a GiST downlink past the end of
//! the index, at a deleted page, at an internal page where a leaf belongs, at another page's
//! leaf; an SP-GiST node downlink past the end (point and text indexes), at a chain member, into
//! the tree of nulls; a leaf chain looped, cut and pointed past the page's tuples. Each must be
//! found as `index_graph_invalid` at the page that holds the bent link.
//! `pg_amcheck --heapallindexed --parent-check` is run on the damaged cluster and its verdict
//! printed for docs/CHECKS.md.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_testkit::amcheck;
use pgcheckdb_testkit::asserts::{assert_clean, graph_finding};
use pgcheckdb_testkit::bytes::{block_id_at, put_block_id, u16_at, u32_at};
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::{Cluster, BLCKSZ};

use common::read_block as block;
use common::{edit, normal_items, verify_extended};

pgcheckdb_testkit::version_tests! {
    scenario;
    gist_spgist_graphs_pg14_checksums(14, true),
    gist_spgist_graphs_pg15_no_checksums(15, false),
    gist_spgist_graphs_pg16_checksums(16, true),
    gist_spgist_graphs_pg17_no_checksums(17, false),
    gist_spgist_graphs_pg18_checksums(18, true),
    gist_spgist_graphs_pg19_no_checksums(19, false),
}

const SCHEMA: &str = "
CREATE TABLE g (id int PRIMARY KEY, p point, b box, r int4range, t text);
INSERT INTO g SELECT i, CASE WHEN i % 9 = 0 THEN NULL ELSE point(i % 150, i / 150) END,
                     box(point(i % 100, i / 100), point(i % 100 + 2, i / 100 + 3)),
                     int4range(i, i + 10 + i % 7), 'k' || (i * 7919 % 20011)
  FROM generate_series(1, 20000) i;
CREATE INDEX g_p_gist ON g USING gist (p) WITH (fillfactor = 10);
CREATE INDEX g_b_gist ON g USING gist (b);
CREATE INDEX g_r_gist ON g USING gist (r);
CREATE INDEX g_p_spgist ON g USING spgist (p);
CREATE INDEX g_t_spgist ON g USING spgist (t);
CREATE INDEX g_r_spgist ON g USING spgist (r);
INSERT INTO g SELECT i, point((i * 37) % 150 + 0.5, (i * 53) % 150 + 0.25),
                     box(point(i % 90, i % 70), point(i % 90 + 1, i % 70 + 1)),
                     int4range(i % 5000, i % 5000 + 3), 'n' || i
  FROM generate_series(20001, 26000) i;
DELETE FROM g WHERE id BETWEEN 3000 AND 9000;
UPDATE g SET p = point(p[0] + 0.5, p[1]), t = t || 'u' WHERE id % 7 = 0;
VACUUM g;
INSERT INTO g SELECT i, point((i * 31) % 150, (i * 17) % 150), box(point(1, 1), point(2, 2)),
                     int4range(i, i + 1), 'm' || (i % 977)
  FROM generate_series(26001, 29000) i;
DELETE FROM g WHERE id % 5 = 0 AND id > 20000;
VACUUM g;
CHECKPOINT;
";

fn nblocks(path: &Path) -> u64 {
    std::fs::metadata(path).expect("file").len() / BLCKSZ as u64
}

/// Normal items of a page: (offset number, lp_off, lp_len).
fn items(page: &[u8]) -> Vec<(u16, usize, usize)> {
    normal_items(page)
        .iter()
        .map(|lp| (lp.offnum, lp.lp_off as usize, lp.lp_len as usize))
        .collect()
}

fn special(page: &[u8]) -> usize {
    PageHeader::parse(page).map_or(page.len(), |h| h.pd_special as usize)
}

// ---------------------------------------------------------------------------------------
// GiST

const F_LEAF: u16 = 1;
const F_DELETED: u16 = 2;

struct GistPage {
    flags: u16,
    /// Internal pages: (byte of the tuple's `t_tid`, child block).
    downlinks: Vec<(usize, u32)>,
}

fn gist_pages(path: &Path) -> Vec<Option<GistPage>> {
    (0..nblocks(path))
        .map(|b| {
            let page = block(path, b);
            let h = PageHeader::parse(&page)?;
            if h.is_new() {
                return None;
            }
            let flags = u16_at(&page, special(&page) + 12);
            let downlinks = if flags & (F_LEAF | F_DELETED) == 0 {
                items(&page)
                    .iter()
                    .map(|&(_, at, _)| (at, block_id_at(&page, at)))
                    .collect()
            } else {
                Vec::new()
            };
            Some(GistPage { flags, downlinks })
        })
        .collect()
}

/// The internal pages whose children are all leaves, in block order, and the number of
/// internal levels.
fn gist_bottoms(pages: &[Option<GistPage>]) -> (Vec<u32>, u32) {
    let is_leaf = |b: u32| {
        pages[b as usize]
            .as_ref()
            .is_some_and(|p| p.flags & F_LEAF != 0)
    };
    let mut level = vec![0u32];
    let mut depth = 0;
    loop {
        let children: Vec<u32> = level
            .iter()
            .flat_map(|&b| pages[b as usize].as_ref().expect("page").downlinks.clone())
            .map(|(_, c)| c)
            .collect();
        depth += 1;
        if children.iter().all(|&c| is_leaf(c)) {
            let mut bottoms = level;
            bottoms.sort_unstable();
            return (bottoms, depth);
        }
        level = children;
    }
}

// ---------------------------------------------------------------------------------------
// SP-GiST

const SPGIST_LEAF: u16 = 4;
const SPGIST_NULLS: u16 = 8;
const SPGIST_META: u16 = 1;

/// One node downlink of an inner tuple: the inner page, the byte of the node's `t_tid`, the
/// (block, offset) it names.
#[derive(Debug, Clone, Copy)]
struct Node {
    page: u32,
    at: usize,
    child: (u32, u16),
}

/// Every valid node downlink of the index's inner pages.
fn spgist_nodes(path: &Path) -> Vec<Node> {
    let mut out = Vec::new();
    for b in 1..nblocks(path) {
        let page = block(path, b);
        if PageHeader::parse(&page).is_none_or(|h| h.is_new()) {
            continue;
        }
        let flags = u16_at(&page, special(&page));
        if flags & (SPGIST_LEAF | SPGIST_META) != 0 {
            continue;
        }
        for (_, at, _) in items(&page) {
            let word = u32_at(&page, at);
            if word & 3 != 0 {
                continue;
            }
            let n_nodes = (word >> 3) & 0x1FFF;
            let mut node = at + 8 + (word >> 16) as usize;
            for _ in 0..n_nodes {
                let off = u16_at(&page, node + 4);
                if off != 0 {
                    out.push(Node {
                        page: b as u32,
                        at: node,
                        child: (block_id_at(&page, node), off),
                    });
                }
                node += (u16_at(&page, node + 6) & 0x1FFF) as usize;
            }
        }
    }
    out
}

fn spgist_flags(path: &Path, b: u32) -> u16 {
    let page = block(path, b as u64);
    u16_at(&page, special(&page))
}

/// The chain from the head at `off` of leaf page `page`: (offset, lp_off) of each tuple.
fn chain(page: &[u8], head: u16) -> Vec<(u16, usize)> {
    let its = items(page);
    let mut out = Vec::new();
    let mut at = head;
    while at != 0 && out.len() <= its.len() {
        let Some(&(_, lp_off, _)) = its.iter().find(|i| i.0 == at) else {
            break;
        };
        if u32_at(page, lp_off) & 3 != 0 {
            break;
        }
        out.push((at, lp_off));
        at = u16_at(page, lp_off + 4) & 0x3FFF;
    }
    out
}

fn set_next(page: &mut [u8], lp_off: usize, next: u16) {
    let info = (u16_at(page, lp_off + 4) & 0xC000) | next;
    page[lp_off + 4..lp_off + 6].copy_from_slice(&info.to_le_bytes());
}

// ---------------------------------------------------------------------------------------

/// One injected case: the finding it must give.
struct Case {
    name: &'static str,
    index: &'static str,
    block: u64,
    /// A piece of the finding's message.
    says: &'static str,
}

struct Fixture {
    cluster: Cluster,
    rels: HashMap<&'static str, String>,
}

const INDEXES: [&str; 6] = [
    "g_p_gist",
    "g_b_gist",
    "g_r_gist",
    "g_p_spgist",
    "g_t_spgist",
    "g_r_spgist",
];

impl Fixture {
    fn path(&self, index: &str) -> PathBuf {
        self.cluster.datadir().join(&self.rels[index])
    }
}

fn inject_gist(fx: &Fixture, cases: &mut Vec<Case>) {
    let index = "g_p_gist";
    let path = fx.path(index);
    let pages = gist_pages(&path);
    let (bottoms, depth) = gist_bottoms(&pages);
    assert!(depth >= 2, "g_p_gist has {depth} internal levels");
    assert!(
        bottoms.len() >= 3,
        "g_p_gist: {} bottom pages",
        bottoms.len()
    );
    let deleted = (0..pages.len())
        .find(|&b| pages[b].as_ref().is_some_and(|p| p.flags & F_DELETED != 0))
        .expect("a deleted GiST page after DELETE + VACUUM") as u32;
    // The `k`th downlink of page `b`.
    let nth = |b: u32, k: usize| pages[b as usize].as_ref().expect("page").downlinks[k];
    let bend = |b: u32, k: usize, to: u32| {
        let (at, _) = nth(b, k);
        edit(&path, b as u64, |p| put_block_id(p, at, to));
    };
    let case = |name, block: u32, says| Case {
        name,
        index,
        block: block as u64,
        says,
    };
    let past = nblocks(&path) as u32 + 50;
    bend(bottoms[0], 0, past);
    cases.push(case(
        "GiST downlink past the end of the index",
        bottoms[0],
        "beyond the index",
    ));
    bend(bottoms[0], 1, deleted);
    cases.push(case(
        "GiST downlink to a deleted page",
        bottoms[0],
        "a deleted page",
    ));
    bend(bottoms[1], 0, bottoms[2]);
    cases.push(case(
        "GiST downlink to an internal page where a leaf belongs",
        bottoms[1],
        "is an internal page at the depth of the index's leaves",
    ));
    cases.push(case(
        "  (the internal page, now named by two downlinks)",
        bottoms[2],
        "named by 2 downlinks",
    ));
    let (_, leaf) = nth(bottoms[2], 5);
    bend(bottoms[1], 1, leaf);
    cases.push(case(
        "GiST downlink to another page's leaf (found at the leaf)",
        leaf,
        "named by 2 downlinks",
    ));
}

/// Leaf heads with their chain length ≥ `min`, one per leaf page, in the non-null tree.
fn heads_by_page(path: &Path, nodes: &[Node], min: usize) -> BTreeMap<u32, (Node, usize)> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let (b, off) = n.child;
        if out.contains_key(&b) {
            continue;
        }
        let flags = spgist_flags(path, b);
        if flags & SPGIST_LEAF == 0 || flags & SPGIST_NULLS != 0 {
            continue;
        }
        let len = chain(&block(path, b as u64), off).len();
        if len >= min {
            out.insert(b, (*n, len));
        }
    }
    out
}

fn inject_spgist(fx: &Fixture, cases: &mut Vec<Case>) {
    let index = "g_p_spgist";
    let path = fx.path(index);
    let nodes = spgist_nodes(&path);
    let nulls_pages = (3..nblocks(&path) as u32)
        .filter(|&b| spgist_flags(&path, b) & SPGIST_NULLS != 0)
        .count();
    assert!(nulls_pages > 0, "the tree of nulls has split");
    let heads: Vec<(Node, usize)> = heads_by_page(&path, &nodes, 3).into_values().collect();
    assert!(
        heads.len() >= 5,
        "{} leaf pages with long chains",
        heads.len()
    );
    let past = nblocks(&path) as u32 + 50;

    // A node downlink past the end.
    let n = nodes
        .iter()
        .find(|n| n.page > 2)
        .copied()
        .unwrap_or(nodes[0]);
    edit(&path, n.page as u64, |p| put_block_id(p, n.at, past));
    cases.push(Case {
        name: "SP-GiST node downlink past the end (point)",
        index,
        block: n.page as u64,
        says: "beyond the index",
    });

    // A node downlink to the second tuple of its chain.
    let (n, _) = heads[0];
    let page = block(&path, n.child.0 as u64);
    let second = chain(&page, n.child.1)[1].0;
    edit(&path, n.page as u64, |p| {
        p[n.at + 4..n.at + 6].copy_from_slice(&second.to_le_bytes())
    });
    cases.push(Case {
        name: "SP-GiST node downlink to a chain member",
        index,
        block: n.page as u64,
        says: "inside a chain",
    });

    // A leaf page moved into the tree of nulls.
    let (n, _) = heads[1];
    edit(&path, n.child.0 as u64, |p| {
        let s = special(p);
        let f = u16_at(p, s) | SPGIST_NULLS;
        p[s..s + 2].copy_from_slice(&f.to_le_bytes());
    });
    cases.push(Case {
        name: "SP-GiST downlink into the tree of nulls",
        index,
        block: n.page as u64,
        says: "nulls tree",
    });

    // Chains bent on three more leaf pages: looped, cut, and pointed past the page's tuples.
    let bends: [(&'static str, &'static str); 3] = [
        ("SP-GiST leaf chain loops", "loops"),
        (
            "SP-GiST leaf chain cut (tuples unreached)",
            "no downlink names",
        ),
        (
            "SP-GiST leaf chain link past the page's tuples",
            "holds no live leaf tuple",
        ),
    ];
    for (i, (name, says)) in bends.into_iter().enumerate() {
        let (n, _) = heads[2 + i];
        let b = n.child.0;
        let page = block(&path, b as u64);
        let ch = chain(&page, n.child.1);
        let max = items(&page).len() as u16;
        edit(&path, b as u64, |p| match i {
            0 => set_next(p, ch[ch.len() - 1].1, ch[0].0),
            1 => set_next(p, ch[0].1, 0),
            _ => set_next(p, ch[ch.len() - 1].1, max + 5),
        });
        cases.push(Case {
            name,
            index,
            block: b as u64,
            says,
        });
    }

    // The text index: prefixes and labels in its inner tuples.
    let index = "g_t_spgist";
    let path = fx.path(index);
    let nodes = spgist_nodes(&path);
    let n = *nodes.last().expect("a node downlink in g_t_spgist");
    let past = nblocks(&path) as u32 + 50;
    edit(&path, n.page as u64, |p| put_block_id(p, n.at, past));
    cases.push(Case {
        name: "SP-GiST node downlink past the end (text)",
        index,
        block: n.page as u64,
        says: "beyond the index",
    });
}

fn scenario(major: u32, checksums: bool) {
    let (cluster, paths) = loaded_cluster(major, checksums, SCHEMA, &INDEXES);
    let rels = INDEXES.iter().copied().zip(paths).collect();
    let mut fx = Fixture { cluster, rels };
    let datadir = fx.cluster.datadir().to_path_buf();

    // Healthy and churned: nothing to report, every graph checked.
    let clean = verify_extended(&datadir, &[]);
    assert_clean(&clean, &format!("PostgreSQL {major}: healthy cluster"));
    let ext = &clean.summary.as_ref().expect("summary")["extended"];
    assert!(
        ext["index_graphs_checked"].as_u64().unwrap_or(0) >= INDEXES.len() as u64,
        "{ext}"
    );
    assert_eq!(ext["index_graphs_not_checked"], 0, "{ext}");

    let mut cases = Vec::new();
    inject_gist(&fx, &mut cases);
    inject_spgist(&fx, &mut cases);
    let run = verify_extended(&datadir, &[]);
    assert_eq!(run.status, 2, "PostgreSQL {major}: damaged\n{run}");
    for c in &cases {
        let rel = &fx.rels[c.index];
        let hit = graph_finding(&run, rel, c.block, c.says);
        let f = hit.unwrap_or_else(|| {
            panic!(
                "PostgreSQL {major}: \"{}\" not found at {} block {} ({})\n{run}",
                c.name, c.index, c.block, c.says
            )
        });
        assert_eq!(f["severity"], "error", "{f}");
        assert_eq!(
            f["detail"]["index"],
            format!("postgres: public.{}", c.index)
        );
    }
    for f in run.problems() {
        eprintln!(
            "  found: {} block {}: {}",
            f["file"], f["block"], f["message"]
        );
    }
    // Nothing else but graph findings in the damaged indexes.
    let damaged: Vec<&str> = ["g_p_gist", "g_p_spgist", "g_t_spgist"]
        .iter()
        .map(|i| fx.rels[i].as_str())
        .collect();
    for f in run.problems() {
        assert!(
            f["kind"] == "index_graph_invalid"
                && damaged.contains(&f["file"].as_str().unwrap_or("")),
            "PostgreSQL {major}: unexpected finding {f}\n{run}"
        );
    }

    let amcheck = amcheck_verdicts(&mut fx);
    let heading =
        format!("PostgreSQL {major} (checksums {checksums}): case | pgcheckdb | pg_amcheck");
    let rows = cases.iter().map(|c| {
        let theirs = amcheck.get(c.index).map_or("no", String::as_str);
        (c.name, format!("yes (block {})", c.block), theirs)
    });
    amcheck::print_table(&heading, 58, rows);
}

/// `pg_amcheck --heapallindexed --parent-check` on the damaged cluster (started after
/// pgcheckdb's runs): what it said about each damaged index, by name.
fn amcheck_verdicts(fx: &mut Fixture) -> BTreeMap<&'static str, String> {
    fx.cluster.start().expect("start damaged cluster");
    let (ok, text) = amcheck::heapallindexed(&fx.cluster);
    fx.cluster.stop().expect("stop");
    eprintln!("--- pg_amcheck (success: {ok}) ---\n{text}--- end ---");
    let mut out = BTreeMap::new();
    for index in ["g_p_gist", "g_p_spgist", "g_t_spgist"] {
        if let Some(line) = text.lines().find(|l| l.contains(index)) {
            out.insert(index, format!("yes: {}", line.trim()));
        }
    }
    out
}
