//! The GIN graph check on hand-made facts: a healthy index with every allowed oddity (an
//! unfinished split, a deleted page, an orphaned posting tree, a pending list) is clean, and
//! each broken rule is found at the page that holds the wrong fact.

use super::flags::*;
use super::{pack_tid, Check, LinkKind, PageFact, Tag};
use crate::check::extended::graphs::testing::{body, info};
use crate::check::extended::graphs::{GraphAm, GraphCheck, GraphProblem};
use crate::format::page::INVALID_BLOCK_NUMBER;

/// One link: kind, child, bounded, key.
type HandLink = (LinkKind, u32, bool, u64);

/// A hand-made index: each block's page fact and links (`None`: a damaged page).
#[derive(Clone)]
struct Index {
    pages: Vec<Option<(PageFact, Vec<HandLink>)>>,
    meta: (u32, u32),
}

fn page(flags: u16, rightlink: u32) -> PageFact {
    PageFact {
        flags,
        rightlink,
        ..PageFact::default()
    }
}

fn leaf_tids(rightlink: u32, lo: (u32, u16), hi: (u32, u16)) -> PageFact {
    PageFact {
        has_range: true,
        lo: pack_tid(lo.0, lo.1),
        hi: pack_tid(hi.0, hi.1),
        ..page(GIN_DATA | GIN_LEAF, rightlink)
    }
}

const N: u32 = INVALID_BLOCK_NUMBER;

/// Block 1 the entry root over leaves 2 and 3 (3 split into 11 without its downlink); leaf 3
/// names posting tree 4 over leaves 5 and 6; 7 a deleted posting-tree page; 8 -> 9 the
/// pending list; 10 an orphaned posting-tree root.
fn healthy() -> Index {
    let entry_leaf = GIN_LEAF;
    let link = |k, c| (k, c, false, 0);
    let mut internal = page(GIN_DATA, N);
    internal.has_range = true;
    internal.hi = pack_tid(10, 5);
    let pages = vec![
        Some((page(GIN_META, N), vec![])),
        Some((
            page(0, N),
            vec![
                link(LinkKind::EntryDownlink, 2),
                link(LinkKind::EntryDownlink, 3),
            ],
        )),
        Some((page(entry_leaf, 3), vec![])),
        Some((
            page(entry_leaf | GIN_INCOMPLETE_SPLIT, 11),
            vec![link(LinkKind::PostingRoot, 4)],
        )),
        Some((
            internal,
            vec![
                (LinkKind::DataDownlink, 5, true, pack_tid(10, 5)),
                (LinkKind::DataDownlink, 6, false, 0),
            ],
        )),
        Some((leaf_tids(7, (1, 1), (10, 5)), vec![])),
        Some((leaf_tids(N, (10, 6), (20, 1)), vec![])),
        Some((page(GIN_DELETED, 6), vec![])),
        Some((page(GIN_LIST, 9), vec![])),
        Some((page(GIN_LIST, N), vec![])),
        Some((leaf_tids(N, (3, 3), (3, 4)), vec![])),
        Some((page(entry_leaf, N), vec![])),
    ];
    Index {
        pages,
        meta: (8, 9),
    }
}

fn run(ix: &Index) -> Vec<GraphProblem> {
    let info = info(GraphAm::Gin, ix.pages.len() as u64);
    let mut check: Box<dyn GraphCheck> = Box::new(Check::new(&info));
    for (b, p) in ix.pages.iter().enumerate() {
        let b = b as u32;
        let Some((f, links)) = p else {
            check.damaged(b);
            continue;
        };
        if b == 0 {
            check.record(
                b,
                &body(|w| {
                    w.u8(Tag::Meta as u8).u32(ix.meta.0).u32(ix.meta.1);
                }),
            );
        }
        check.record(b, &body(|w| super::emit::write_fact(w, f)));
        for &(kind, child, bounded, key) in links {
            check.record(
                b,
                &body(|w| {
                    w.u8(Tag::Link as u8)
                        .u32(child)
                        .u8(kind as u8)
                        .u8(bounded as u8)
                        .u64(key);
                }),
            );
        }
    }
    check.finish()
}

/// The blocks of the problems found.
fn blocks(ix: &Index) -> Vec<u64> {
    run(ix).iter().map(|p| p.blkno).collect()
}

fn fact(ix: &mut Index, b: usize) -> &mut PageFact {
    &mut ix.pages[b].as_mut().expect("page").0
}

fn links(ix: &mut Index, b: usize) -> &mut Vec<HandLink> {
    &mut ix.pages[b].as_mut().expect("page").1
}

#[test]
fn healthy_index_with_allowed_oddities_is_clean() {
    assert_eq!(run(&healthy()), vec![]);
}

#[test]
fn downlink_to_a_deleted_page_is_found_at_the_parent() {
    let mut ix = healthy();
    links(&mut ix, 4)[0].1 = 7;
    assert_eq!(blocks(&ix), vec![4]);
}

#[test]
fn posting_root_at_an_entry_page_is_found_at_the_entry_leaf() {
    let mut ix = healthy();
    links(&mut ix, 3)[0].1 = 2;
    // Posting tree 4 is then an orphan, which is allowed.
    assert_eq!(blocks(&ix), vec![3]);
}

#[test]
fn second_downlink_to_one_page_is_found() {
    let mut ix = healthy();
    links(&mut ix, 1)[1].1 = 2;
    // Block 3 is then reached by nobody, nor 11 (its right sibling through an unfinished
    // split): with every block read, that is found too.
    assert_eq!(blocks(&ix), vec![1, 3, 11]);
}

#[test]
fn unreachable_entry_page_is_found_only_when_every_block_was_read() {
    let mut ix = healthy();
    fact(&mut ix, 3).flags &= !GIN_INCOMPLETE_SPLIT;
    assert_eq!(blocks(&ix), vec![11]);
    ix.pages[7] = None;
    assert_eq!(blocks(&ix), Vec::<u64>::new());
}

#[test]
fn children_on_two_levels_and_leaves_at_two_depths_are_found() {
    let mut ix = healthy();
    fact(&mut ix, 2).flags = 0;
    fact(&mut ix, 2).rightlink = N;
    let found = blocks(&ix);
    assert!(found.contains(&1), "{found:?}");
}

#[test]
fn entry_rightlink_to_a_data_page_is_found() {
    let mut ix = healthy();
    fact(&mut ix, 2).rightlink = 5;
    assert_eq!(blocks(&ix), vec![2]);
}

#[test]
fn posting_tree_rightlink_may_reach_a_deleted_page_but_not_a_list_page() {
    let mut ix = healthy();
    assert_eq!(fact(&mut ix, 5).rightlink, 7);
    fact(&mut ix, 5).rightlink = 8;
    assert_eq!(blocks(&ix), vec![5]);
}

#[test]
fn heap_tids_above_the_downlink_key_or_out_of_leaf_order_are_found() {
    let mut ix = healthy();
    *fact(&mut ix, 5) = leaf_tids(6, (1, 1), (11, 1));
    // Above the key (10,5) in block 4, and not below the first TID of its right sibling.
    assert_eq!(blocks(&ix), vec![5, 6]);
}

#[test]
fn broken_pending_list_is_found_at_the_page_that_points() {
    let mut ix = healthy();
    fact(&mut ix, 8).rightlink = 2;
    assert_eq!(blocks(&ix), vec![8]);
    let mut ix = healthy();
    ix.meta = (9, 8);
    assert_eq!(blocks(&ix), vec![9]);
    let mut ix = healthy();
    fact(&mut ix, 9).rightlink = 8;
    assert_eq!(blocks(&ix), vec![9]);
}

#[test]
fn zero_and_out_of_range_targets_are_found() {
    let mut ix = healthy();
    links(&mut ix, 1)[0].1 = 40;
    let found = blocks(&ix);
    assert!(found.contains(&1), "{found:?}");
}
