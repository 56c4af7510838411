//! Uniqueness of a unique B-tree index: entries with equal keys whose heap tuples are both live.
//!
//! Equal keys are found without a comparator: two keys with the same bytes (null bitmap of the
//! key columns and key data) are equal under every built-in deterministic operator class, since
//! equality is reflexive; keys that are equal with different bytes (`1.0` and `1.00` in numeric,
//! `-0` and `0` in float) are missed, never invented. Equal keys sit next to each other in the
//! leaf level, so each leaf page gives its runs of equal keys ([`super::facts::UniqueRun`]); the
//! last run of a page joins the first run of its right sibling when their keys are equal. Each
//! group with two or more heap TIDs is then joined with the heap's liveness facts.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::btree::{IndexFacts, Problem};
use super::facts::{Family, Reader, RunPlace, UniqueRun};
use super::heap::is_live;
use crate::finding::FindingKind as K;
use crate::layout::btree::flags as bf;

/// One heap TID of a group, with the index entry holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupTid {
    pub heap_block: u32,
    pub heap_offset: u16,
    pub index_block: u32,
    pub index_offset: u16,
}

/// Index entries with equal keys: a uniqueness violation if two of their heap tuples are live.
#[derive(Debug, Clone)]
pub struct Group {
    pub tids: Vec<GroupTid>,
}

/// The groups of equal keys with two or more heap TIDs.
pub fn candidate_groups(f: &IndexFacts) -> Vec<Group> {
    let tids_of = |r: &UniqueRun| -> Vec<GroupTid> {
        r.tids
            .iter()
            .map(|&(b, o, at)| GroupTid {
                heap_block: b,
                heap_offset: o,
                index_block: r.blkno,
                index_offset: at,
            })
            .collect()
    };
    let mut groups = Vec::new();
    // Edge runs (a page's first and last runs; a page with one run has one) are joined with
    // their right sibling's first run when the keys are equal: union-find over the edge runs.
    let mut edge: Vec<&UniqueRun> = Vec::new();
    let mut first_of: HashMap<u32, usize> = HashMap::new();
    let mut last_of: HashMap<u32, usize> = HashMap::new();
    for r in &f.runs {
        if r.place == RunPlace::Inner {
            groups.push(Group { tids: tids_of(r) });
            continue;
        }
        let id = edge.len();
        edge.push(r);
        if matches!(r.place, RunPlace::First | RunPlace::Whole) {
            first_of.insert(r.blkno, id);
        }
        if matches!(r.place, RunPlace::Last | RunPlace::Whole) {
            last_of.insert(r.blkno, id);
        }
    }
    let mut parent: Vec<usize> = (0..edge.len()).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for (&blkno, &l) in &last_of {
        let Some(next) = f.pages.get(&blkno).map(|p| p.btpo_next) else {
            continue;
        };
        if let Some(&n) = first_of.get(&next) {
            if edge[n].key == edge[l].key && linked(f, blkno, next) {
                let (a, b) = (root(&mut parent, l), root(&mut parent, n));
                parent[a] = b;
            }
        }
    }
    let mut by_root: HashMap<usize, Vec<GroupTid>> = HashMap::new();
    for (id, r) in edge.iter().enumerate() {
        let top = root(&mut parent, id);
        by_root.entry(top).or_default().extend(tids_of(r));
    }
    let mut joined: Vec<Vec<GroupTid>> = by_root.into_values().collect();
    joined.sort_by_key(|t| t.first().map(|x| (x.index_block, x.index_offset)));
    groups.extend(joined.into_iter().map(|tids| Group { tids }));
    groups.retain(|g| g.tids.len() > 1);
    groups
}

/// Pages `a` and `b` are live right siblings of the leaf level.
fn linked(f: &IndexFacts, a: u32, b: u32) -> bool {
    let live = |x: u32| {
        f.pages
            .get(&x)
            .filter(|p| p.btpo_flags & bf::BTP_DELETED == 0 && p.btpo_level == 0)
    };
    matches!((live(a), live(b)), (Some(pa), Some(pb)) if pa.btpo_next == b && pb.btpo_prev == a)
}

/// The heap blocks the groups of one heap need.
pub fn needed_blocks(groups: &[Group]) -> HashSet<u32> {
    groups
        .iter()
        .flat_map(|g| g.tids.iter().map(|t| t.heap_block))
        .collect()
}

/// Keeps the liveness bitmaps of the needed blocks from one heap's fact records.
pub fn collect_live(record: &[u8], needed: &HashSet<u32>, out: &mut HashMap<u32, Vec<u8>>) {
    let Some((head, mut r)) = Reader::open(record) else {
        return;
    };
    if head.family == Family::HeapLive && needed.contains(&head.blkno) {
        if let Some(bits) = r.bytes() {
            out.insert(head.blkno, bits.to_vec());
        }
    }
}

/// A violation per group with two or more distinct live heap tuples, reported at the index
/// page holding the second live entry.
pub fn violations(groups: &[Group], live: &HashMap<u32, Vec<u8>>) -> Vec<Problem> {
    let mut out = Vec::new();
    for g in groups {
        let mut seen = HashSet::new();
        let alive: Vec<&GroupTid> = g
            .tids
            .iter()
            .filter(|t| seen.insert((t.heap_block, t.heap_offset)))
            .filter(|t| {
                live.get(&t.heap_block)
                    .is_some_and(|bits| is_live(bits, t.heap_offset))
            })
            .collect();
        if alive.len() < 2 {
            continue;
        }
        let (a, b) = (alive[0], alive[1]);
        out.push(Problem {
            blkno: b.index_block,
            kind: K::BtreeUniqueViolation,
            message: format!(
                "unique index holds equal keys for live rows: this page's entry at offset {} (heap tuple ({},{})) and block {} offset {} (heap tuple ({},{})) of the table",
                b.index_offset, b.heap_block, b.heap_offset, a.index_block, a.index_offset, a.heap_block, a.heap_offset
            ),
            detail: json!({
                "offset": b.index_offset,
                "heap_tid": [b.heap_block, b.heap_offset],
                "other_block": a.index_block,
                "other_offset": a.index_offset,
                "other_heap_tid": [a.heap_block, a.heap_offset],
                "live_entries": alive.len(),
            }),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extended::facts::PageFact;

    fn leaf(blkno: u32, prev: u32, next: u32) -> PageFact {
        PageFact {
            blkno,
            btpo_prev: prev,
            btpo_next: next,
            btpo_flags: bf::BTP_LEAF,
            ..PageFact::default()
        }
    }

    fn run(blkno: u32, place: RunPlace, key: u8, tids: &[(u32, u16)]) -> UniqueRun {
        UniqueRun {
            blkno,
            place,
            offnum: 2,
            key: vec![0, 0, 0, 0, key],
            tids: tids.iter().map(|&(b, o)| (b, o, 2)).collect(),
        }
    }

    #[test]
    fn equal_keys_join_across_right_siblings_only() {
        let mut f = IndexFacts::default();
        for p in [leaf(1, 0, 2), leaf(2, 1, 3), leaf(3, 2, 0)] {
            f.pages.insert(p.blkno, p);
        }
        // Key 7 ends page 1, fills page 2 and starts page 3; key 9 ends page 3 alone.
        f.runs = vec![
            run(1, RunPlace::First, 5, &[(10, 1)]),
            run(1, RunPlace::Last, 7, &[(10, 2)]),
            run(2, RunPlace::Whole, 7, &[(11, 1)]),
            run(3, RunPlace::First, 7, &[(12, 1)]),
            run(3, RunPlace::Last, 9, &[(12, 2)]),
        ];
        let groups = candidate_groups(&f);
        assert_eq!(groups.len(), 1, "{groups:?}");
        let heap: Vec<(u32, u16)> = groups[0]
            .tids
            .iter()
            .map(|t| (t.heap_block, t.heap_offset))
            .collect();
        assert_eq!(heap, vec![(10, 2), (11, 1), (12, 1)]);
        // Both live: one violation, at the second live entry's page.
        let live: HashMap<u32, Vec<u8>> = [(10, vec![0b10]), (11, vec![0b1])].into_iter().collect();
        let v = violations(&groups, &live);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].blkno, v[0].detail["other_block"].as_u64()),
            (2, Some(1))
        );
        // One of them dead: nothing.
        let live: HashMap<u32, Vec<u8>> = [(10, vec![0b10])].into_iter().collect();
        assert!(violations(&groups, &live).is_empty());
        // Pages that are not right siblings do not join.
        f.pages.get_mut(&2).unwrap().btpo_prev = 3;
        let groups = candidate_groups(&f);
        assert!(groups.iter().all(|g| g.tids.len() < 3), "{groups:?}");
    }
}
