//! Unit tests of the B-tree merge on hand-made facts.

use super::*;
use crate::btree_order::NotOrderChecked;
use crate::extended::facts::Downlink;
use crate::layout::btree::P_NONE;

/// A pivot or high key with block `b` in `t_tid` and key byte `k`.
fn tuple(b: u32, k: u8) -> Vec<u8> {
    let mut t = vec![(b >> 16) as u8, (b >> 24) as u8, b as u8, (b >> 8) as u8];
    t.extend_from_slice(&[1, 0, 16, 0, k, 0, 0, 0, 0, 0, 0, 0]);
    t
}

fn leaf(blkno: u32, prev: u32, next: u32, high: Option<u8>) -> PageFact {
    PageFact {
        blkno,
        btpo_prev: prev,
        btpo_next: next,
        btpo_flags: bf::BTP_LEAF,
        high_key: high.map(|k| tuple(u32::MAX, k)).unwrap_or_default(),
        ..PageFact::default()
    }
}

/// Root 3 (level 1) over leaves 1 and 2; separator key 5.
fn healthy() -> IndexFacts {
    let mut f = IndexFacts {
        meta: Some(MetaFact {
            root: 3,
            level: 1,
            fastroot: 3,
            fastlevel: 1,
            version: 4,
        }),
        ..IndexFacts::default()
    };
    f.pages.insert(1, leaf(1, P_NONE, 2, Some(5)));
    f.pages.insert(2, leaf(2, 1, P_NONE, None));
    let root = PageFact {
        blkno: 3,
        btpo_level: 1,
        btpo_flags: bf::BTP_ROOT,
        downlinks: vec![
            Downlink {
                offnum: 1,
                child: 1,
                item: tuple(1, 0)[..8].to_vec(),
            },
            Downlink {
                offnum: 2,
                child: 2,
                item: tuple(2, 5),
            },
        ],
        ..PageFact::default()
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

fn found(f: &IndexFacts) -> Vec<(u32, K)> {
    check_index(f, &info(), Some(1000))
        .problems
        .iter()
        .map(|p| (p.blkno, p.kind))
        .collect()
}

#[test]
fn a_healthy_tree_gives_nothing_and_counts_as_not_order_checked() {
    let out = check_index(&healthy(), &info(), Some(1000));
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert!(out.not_order_checked.is_some());
}

#[test]
fn each_wrong_fact_is_blamed_on_its_page() {
    let mut f = healthy();
    f.pages.get_mut(&2).unwrap().btpo_prev = 3;
    assert_eq!(found(&f), vec![(2, K::BtreeLinkInvalid)]);

    let mut f = healthy();
    f.pages.get_mut(&3).unwrap().downlinks[1].child = 1;
    let got = found(&f);
    assert!(got.contains(&(3, K::BtreeDownlinkInvalid)), "{got:?}");
    assert!(got.contains(&(2, K::BtreeDownlinkInvalid)), "{got:?}");

    let mut f = healthy();
    f.pages.get_mut(&1).unwrap().high_key = tuple(u32::MAX, 6);
    assert_eq!(found(&f), vec![(3, K::BtreeDownlinkInvalid)]);

    let mut f = healthy();
    f.meta.as_mut().unwrap().root = 2;
    let got = found(&f);
    assert!(got.contains(&(0, K::BtreeLinkInvalid)), "{got:?}");
    assert!(got.contains(&(0, K::BtreeLevelInvalid)), "{got:?}");
}

#[test]
fn a_deleted_page_from_the_future_is_an_xid_finding() {
    let mut f = healthy();
    let gone = |x: u64| PageFact {
        blkno: 9,
        btpo_flags: bf::BTP_LEAF | bf::BTP_DELETED | bf::BTP_HAS_FULLXID,
        safexid: Some(x),
        ..PageFact::default()
    };
    f.pages.insert(9, gone(1000));
    assert_eq!(found(&f), vec![]);
    f.pages.insert(9, gone(1001));
    assert_eq!(found(&f), vec![(9, K::XidInvalid)]);
    // Not checked when nextXid is not known to be final (no clean shutdown).
    assert!(check_index(&f, &info(), None).problems.is_empty());
}

#[test]
fn nothing_is_concluded_from_a_damaged_page() {
    let mut f = healthy();
    f.pages.remove(&2);
    f.damaged.insert(2);
    assert_eq!(found(&f), vec![]);
    // Without the damaged mark, the same absence is a broken link and downlink.
    f.damaged.clear();
    let got = found(&f);
    assert!(got.contains(&(1, K::BtreeLinkInvalid)), "{got:?}");
    assert!(got.contains(&(3, K::BtreeDownlinkInvalid)), "{got:?}");
}

#[test]
fn incomplete_split_and_half_dead_exceptions_hold() {
    // Leaf 4 is the right half of an incomplete split of leaf 1: no downlink needed.
    let mut f = healthy();
    f.pages.get_mut(&1).unwrap().btpo_next = 4;
    f.pages.get_mut(&1).unwrap().btpo_flags |= bf::BTP_INCOMPLETE_SPLIT;
    f.pages.insert(4, leaf(4, 1, 2, Some(5)));
    f.pages.get_mut(&2).unwrap().btpo_prev = 4;
    f.pages.get_mut(&1).unwrap().high_key = tuple(u32::MAX, 3);
    assert_eq!(found(&f), vec![]);
    // A half-dead leaf that is its own top parent but keeps its downlink.
    let mut f = healthy();
    let l = f.pages.get_mut(&1).unwrap();
    l.btpo_flags |= bf::BTP_HALF_DEAD;
    l.top_parent = Some(INVALID_BLOCK);
    assert_eq!(found(&f), vec![(1, K::BtreeDownlinkInvalid)]);
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
    f.pages.get_mut(&1).unwrap().last_item = int_text_item(9, 5);
    f.pages.get_mut(&2).unwrap().first_item = int_text_item(3, 5);
    let info = IndexInfo {
        ordering: Ok(std::sync::Arc::new(
            crate::btree_order::IndexOrdering::for_fuzzing(),
        )),
        ..info()
    };
    check_index(&f, &info, Some(1000))
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
