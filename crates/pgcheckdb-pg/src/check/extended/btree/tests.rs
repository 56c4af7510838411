//! Unit tests of the streaming B-tree merge: hand-made pages are turned into records by the
//! emitter's own [`page_records`], sorted as the spill runs sort them, and fed to
//! [`IndexCheck`] one by one.

use std::collections::BTreeMap;

use super::records::{page_records, run_record, DownlinkView, PageView, Rec, RunRec};
use super::*;
use crate::check::extended::facts::{RunPlace, Writer};
use crate::check::order::NotOrderChecked;
use crate::format::btree::{flags as bf, P_NONE};
use crate::format::page::INVALID_BLOCK_NUMBER;

/// A page as the test describes it (owned), turned into a [`PageView`] for the emitter.
#[derive(Debug, Clone, Default)]
struct Page {
    prev: u32,
    next: u32,
    level: u32,
    flags: u16,
    safexid: Option<u64>,
    top_parent: Option<u32>,
    high_key: Vec<u8>,
    first_item: Vec<u8>,
    last_item: Vec<u8>,
    /// (offnum, child, pivot tuple)
    downlinks: Vec<(u16, u32, Vec<u8>)>,
}

/// A unique index's run: leaf block, place, key byte, heap TIDs.
type TestRun = (u32, RunPlace, u8, Vec<(u32, u16)>);

/// An index as the test describes it: metapage, pages, damaged blocks, unique runs.
#[derive(Debug, Clone, Default)]
struct Index {
    meta: Option<MetaFact>,
    pages: BTreeMap<u32, Page>,
    damaged: Vec<u32>,
    runs: Vec<TestRun>,
}

impl Index {
    fn page(&mut self, blkno: u32) -> &mut Page {
        self.pages.get_mut(&blkno).expect("page")
    }

    /// Every record, sorted by bytes as the merge of the runs delivers them.
    fn records(&self) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut buf = Vec::new();
        if let Some(m) = self.meta {
            m.write(&mut Writer::start(&mut buf, 0, Family::BtreeMeta, 0));
            out.push(buf.clone());
        }
        for (&blkno, p) in &self.pages {
            let view = PageView {
                btpo_prev: p.prev,
                btpo_next: p.next,
                btpo_level: p.level,
                btpo_flags: p.flags,
                safexid: p.safexid,
                top_parent: p.top_parent,
                high_key: &p.high_key,
                first_item: &p.first_item,
                last_item: &p.last_item,
                downlinks: p
                    .downlinks
                    .iter()
                    .map(|(offnum, child, item)| DownlinkView {
                        offnum: *offnum,
                        child: *child,
                        item,
                    })
                    .collect(),
            };
            page_records(0, blkno, &view, true, &mut buf, |r| out.push(r.to_vec()));
        }
        for &d in &self.damaged {
            records::damaged_record(0, d, &mut buf);
            out.push(buf.clone());
        }
        for (blkno, place, key, tids) in &self.runs {
            let key = [0, 0, 0, 0, *key];
            let run = RunRec {
                blkno: *blkno,
                level: 0,
                place: *place,
                offnum: 2,
                key: &key,
                tids: tids.iter().map(|&(b, o)| (b, o, 2)).collect(),
            };
            let next = self.pages.get(blkno).map_or(P_NONE, |p| p.next);
            if matches!(place, RunPlace::First | RunPlace::Whole) {
                run_record(0, *blkno, Rec::FirstRun, &run, &mut buf);
                out.push(buf.clone());
            }
            if *place == RunPlace::Last || (*place == RunPlace::Whole && next != P_NONE) {
                let at = if next == P_NONE { *blkno } else { next };
                run_record(0, at, Rec::LastRun, &run, &mut buf);
                out.push(buf.clone());
            }
        }
        out.sort();
        out
    }

    fn check(&self, info: &IndexInfo, next_full_xid: Option<u64>) -> IndexOutcome {
        let mut c = IndexCheck::new(info, next_full_xid);
        for r in self.records() {
            c.add(&r);
        }
        c.finish()
    }
}

/// A pivot or high key with block `b` in `t_tid` and key byte `k`.
fn tuple(b: u32, k: u8) -> Vec<u8> {
    let mut t = vec![(b >> 16) as u8, (b >> 24) as u8, b as u8, (b >> 8) as u8];
    t.extend_from_slice(&[1, 0, 16, 0, k, 0, 0, 0, 0, 0, 0, 0]);
    t
}

fn leaf(prev: u32, next: u32, high: Option<u8>) -> Page {
    Page {
        prev,
        next,
        flags: bf::BTP_LEAF,
        high_key: high.map(|k| tuple(u32::MAX, k)).unwrap_or_default(),
        ..Page::default()
    }
}

/// Root 3 (level 1) over leaves 1 and 2; separator key 5.
fn healthy() -> Index {
    let mut f = Index {
        meta: Some(MetaFact {
            root: 3,
            level: 1,
            fastroot: 3,
            fastlevel: 1,
            version: 4,
        }),
        ..Index::default()
    };
    f.pages.insert(1, leaf(P_NONE, 2, Some(5)));
    f.pages.insert(2, leaf(1, P_NONE, None));
    let root = Page {
        level: 1,
        flags: bf::BTP_ROOT,
        downlinks: vec![(1, 1, tuple(1, 0)[..8].to_vec()), (2, 2, tuple(2, 5))],
        ..Page::default()
    };
    f.pages.insert(3, root);
    f
}

fn info() -> IndexInfo {
    IndexInfo {
        fork: 0,
        name: "db: public.i".into(),
        ordering: Err(NotOrderChecked::NotImplemented),
        unique: None,
        all_indexed: None,
    }
}

fn found(f: &Index) -> Vec<(u32, K)> {
    f.check(&info(), Some(1000))
        .problems
        .iter()
        .map(|p| (p.blkno, p.kind))
        .collect()
}

#[test]
fn a_healthy_tree_gives_nothing_and_counts_as_not_order_checked() {
    let out = healthy().check(&info(), Some(1000));
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert!(out.not_order_checked.is_some());
}

#[test]
fn each_wrong_fact_is_blamed_on_its_page() {
    let mut f = healthy();
    f.page(2).prev = 3;
    assert_eq!(found(&f), vec![(2, K::BtreeLinkInvalid)]);

    let mut f = healthy();
    f.page(3).downlinks[1].1 = 1;
    let got = found(&f);
    assert!(got.contains(&(3, K::BtreeDownlinkInvalid)), "{got:?}");
    assert!(got.contains(&(2, K::BtreeDownlinkInvalid)), "{got:?}");

    let mut f = healthy();
    f.page(1).high_key = tuple(u32::MAX, 6);
    assert_eq!(found(&f), vec![(3, K::BtreeDownlinkInvalid)]);

    let mut f = healthy();
    f.meta.as_mut().unwrap().root = 2;
    let got = found(&f);
    assert!(got.contains(&(0, K::BtreeLinkInvalid)), "{got:?}");
    assert!(got.contains(&(0, K::BtreeLevelInvalid)), "{got:?}");
}

/// Three leaves 1 <-> 2 <-> 4 under root 3.
fn three_leaves() -> Index {
    let mut f = healthy();
    f.page(2).next = 4;
    f.page(2).high_key = tuple(u32::MAX, 7);
    f.pages.insert(4, leaf(2, P_NONE, None));
    f.page(3).downlinks.push((3, 4, tuple(4, 7)));
    f
}

#[test]
fn sibling_links_blame_the_page_no_neighbour_supports() {
    assert_eq!(found(&three_leaves()), vec![]);
    // 1's btpo_next skips 2: 4 names 2 as its left sibling, so 1 is wrong.
    let mut f = three_leaves();
    f.page(1).next = 4;
    let got = f.check(&info(), Some(1000)).problems;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].blkno, got[0].detail["other_block"].as_u64()),
        (1, Some(4))
    );
    // 2's btpo_prev names 4: 1 still names 2 as its right sibling, so 2 is wrong.
    let mut f = three_leaves();
    f.page(2).prev = 4;
    let got = f.check(&info(), Some(1000)).problems;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].blkno, got[0].detail["other_block"].as_u64()),
        (2, Some(1))
    );
    // A link to a block with no page at all.
    let mut f = three_leaves();
    f.page(4).prev = 9;
    let got = found(&f);
    assert!(got.contains(&(4, K::BtreeLinkInvalid)), "{got:?}");
}

#[test]
fn a_level_that_is_not_one_chain_is_found() {
    // Leaf 4 has no left sibling but is not the leftmost page: two leftmost pages on level 0
    // (and 2 no longer has a right sibling that names it back).
    let mut f = three_leaves();
    f.page(4).prev = P_NONE;
    let got = found(&f);
    assert!(got.contains(&(4, K::BtreeLinkInvalid)), "{got:?}");
    // Counted alone (no link problem reported on the level): both ends of a two-page cycle
    // have siblings, so the level has no leftmost or rightmost page.
    let mut f = healthy();
    f.page(1).prev = 2;
    f.page(2).next = 1;
    f.page(2).high_key = tuple(u32::MAX, 9);
    let got = f.check(&info(), Some(1000)).problems;
    assert!(
        got.iter().any(|p| p.message.contains("no leftmost page")),
        "{got:?}"
    );
}

#[test]
fn a_deleted_page_from_the_future_is_an_xid_finding() {
    let mut f = healthy();
    let gone = |x: u64| Page {
        flags: bf::BTP_LEAF | bf::BTP_DELETED | bf::BTP_HAS_FULLXID,
        safexid: Some(x),
        ..Page::default()
    };
    f.pages.insert(9, gone(1000));
    assert_eq!(found(&f), vec![]);
    f.pages.insert(9, gone(1001));
    assert_eq!(found(&f), vec![(9, K::XidInvalid)]);
    // Not checked when nextXid is not known to be final (no clean shutdown).
    assert!(f.check(&info(), None).problems.is_empty());
}

#[test]
fn a_deleted_page_still_linked_is_blamed_itself() {
    let mut f = three_leaves();
    f.page(2).flags |= bf::BTP_DELETED;
    f.page(2).high_key.clear();
    assert_eq!(found(&f), vec![(2, K::BtreeLinkInvalid)]);
}

#[test]
fn nothing_is_concluded_from_a_damaged_page() {
    let mut f = healthy();
    f.pages.remove(&2);
    f.damaged.push(2);
    assert_eq!(found(&f), vec![]);
    // Without the damaged mark, the same absence is a broken link and downlink.
    f.damaged.clear();
    let got = found(&f);
    assert!(got.contains(&(1, K::BtreeLinkInvalid)), "{got:?}");
    assert!(got.contains(&(3, K::BtreeDownlinkInvalid)), "{got:?}");
}

#[test]
fn a_missing_root_is_reported_at_the_metapage() {
    let mut f = healthy();
    f.meta.as_mut().unwrap().root = 40;
    let got = f.check(&info(), Some(1000)).problems;
    assert!(
        got.iter()
            .any(|p| p.blkno == 0 && p.message.contains("block 40 is not a B-tree page")),
        "{got:?}"
    );
}

#[test]
fn incomplete_split_and_half_dead_exceptions_hold() {
    // Leaf 4 is the right half of an incomplete split of leaf 1: no downlink needed.
    let mut f = healthy();
    f.page(1).next = 4;
    f.page(1).flags |= bf::BTP_INCOMPLETE_SPLIT;
    f.pages.insert(4, leaf(1, 2, Some(5)));
    f.page(2).prev = 4;
    f.page(1).high_key = tuple(u32::MAX, 3);
    assert_eq!(found(&f), vec![]);
    // A half-dead leaf that is its own top parent but keeps its downlink.
    let mut f = healthy();
    let l = f.page(1);
    l.flags |= bf::BTP_HALF_DEAD;
    l.top_parent = Some(INVALID_BLOCK_NUMBER);
    assert_eq!(found(&f), vec![(1, K::BtreeDownlinkInvalid)]);
}

#[test]
fn a_half_dead_leaf_is_reached_from_its_top_parent_through_single_children() {
    // Root 3 (level 2) over internal pages 5 and 6; 5 is the top parent of half-dead leaf 1:
    // its pivot is gone from the root, and its only child is leaf 1.
    let mut f = healthy();
    f.meta = Some(MetaFact {
        root: 3,
        level: 2,
        fastroot: 3,
        fastlevel: 2,
        version: 4,
    });
    f.page(3).level = 2;
    f.page(3).downlinks = vec![(1, 6, tuple(6, 0)[..8].to_vec())];
    let internal = |prev, next, high: Vec<u8>, downlinks| Page {
        level: 1,
        prev,
        next,
        high_key: high,
        downlinks,
        ..Page::default()
    };
    let minus_infinity = |child: u32| (2, child, tuple(child, 0)[..8].to_vec());
    f.pages.insert(
        5,
        internal(P_NONE, 6, tuple(u32::MAX, 5), vec![minus_infinity(1)]),
    );
    f.pages
        .insert(6, internal(5, P_NONE, vec![], vec![(1, 2, tuple(2, 5))]));
    f.page(1).flags |= bf::BTP_HALF_DEAD;
    f.page(1).top_parent = Some(5);
    assert_eq!(found(&f), vec![]);
    // The top parent has a second child: the way down from it does not lead to the leaf.
    f.page(5).downlinks.push((3, 2, tuple(2, 5)));
    let got = f.check(&info(), Some(1000)).problems;
    assert!(
        got.iter()
            .any(|p| p.blkno == 1 && p.message.contains("single-child chain")),
        "{got:?}"
    );
}

/// A leaf tuple of the `(int4, text)` index of [`IndexOrdering::for_fuzzing`]: heap TID
/// `(0, posid)`, key `(k, "a")`.
fn int_text_item(posid: u16, k: i32) -> Vec<u8> {
    let mut t = vec![0, 0, 0, 0];
    t.extend_from_slice(&posid.to_le_bytes());
    t.extend_from_slice(&16u16.to_le_bytes()); // t_info: size 16, no flags
    t.extend_from_slice(&k.to_le_bytes());
    t.extend_from_slice(&[0x05, b'a', 0, 0]); // 1-byte varlena "a", then padding
    t
}

/// Orders sibling leaves 1 and 2 whose equal keys carry heap TIDs in the wrong order.
fn equal_keys_across_siblings(version: u32) -> Vec<(u32, K)> {
    let mut f = healthy();
    f.meta.as_mut().unwrap().version = version;
    f.page(1).last_item = int_text_item(9, 5);
    f.page(2).first_item = int_text_item(3, 5);
    let info = IndexInfo {
        ordering: Ok(std::sync::Arc::new(
            crate::check::order::IndexOrdering::for_fuzzing(),
        )),
        ..info()
    };
    f.check(&info, Some(1000))
        .problems
        .iter()
        .map(|p| (p.blkno, p.kind))
        .filter(|(_, k)| *k == K::BtreeOrderInvalid)
        .collect()
}

#[test]
fn heap_tids_break_ties_across_pages_only_in_heapkeyspace_indexes() {
    assert_eq!(
        equal_keys_across_siblings(4),
        vec![(2, K::BtreeOrderInvalid)]
    );
    // Versions 2 and 3 (indexes built before PostgreSQL 12, kept by pg_upgrade): equal keys
    // may hold their heap TIDs in any order across pages.
    assert!(equal_keys_across_siblings(3).is_empty());
    assert!(equal_keys_across_siblings(2).is_empty());
}

fn heap_tids(out: &IndexOutcome) -> Vec<Vec<(u32, u16)>> {
    out.groups
        .iter()
        .map(|g| {
            g.tids
                .iter()
                .map(|t| (t.heap_block, t.heap_offset))
                .collect()
        })
        .collect()
}

#[test]
fn equal_keys_join_across_right_siblings_only() {
    let mut f = three_leaves();
    // Key 7 ends page 1, fills page 2 and starts page 4; key 9 ends page 4 alone.
    f.runs = vec![
        (1, RunPlace::First, 5, vec![(10, 1)]),
        (1, RunPlace::Last, 7, vec![(10, 2)]),
        (2, RunPlace::Whole, 7, vec![(11, 1)]),
        (4, RunPlace::First, 7, vec![(12, 1)]),
        (4, RunPlace::Last, 9, vec![(12, 2)]),
    ];
    let out = f.check(&info(), Some(1000));
    assert_eq!(heap_tids(&out), vec![vec![(10, 2), (11, 1), (12, 1)]]);
    // Pages that are not right siblings (2 names 4 as its left sibling) do not join.
    f.page(2).prev = 4;
    let out = f.check(&info(), Some(1000));
    assert!(
        out.groups.iter().all(|g| g.tids.len() < 3),
        "{:?}",
        out.groups
    );
    // A run with two heap TIDs is a group on its own.
    let mut f = three_leaves();
    f.runs = vec![(4, RunPlace::Last, 9, vec![(12, 2), (12, 3)])];
    let out = f.check(&info(), Some(1000));
    assert_eq!(heap_tids(&out), vec![vec![(12, 2), (12, 3)]]);
}
