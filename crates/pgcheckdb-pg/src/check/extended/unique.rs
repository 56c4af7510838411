//! Uniqueness of a unique B-tree index: entries with equal keys whose heap tuples are both live.
//!
//! Equal keys are found without a comparator: two keys with the same bytes (null bitmap of the
//! key columns and key data) are equal under every built-in deterministic operator class, since
//! equality is reflexive; keys that are equal with different bytes (`1.0` and `1.00` in numeric,
//! `-0` and `0` in float) are missed, never invented. Equal keys sit next to each other in the
//! leaf level, so each leaf page gives its runs of equal keys: its first run at its own block,
//! its last run at its right sibling's block, where the stream brings them together; the
//! runs that join, and those with two or more heap TIDs, are kept (few: a unique index has
//! duplicates only of dead rows). Each group with two or more heap TIDs is then joined with
//! the heap's liveness facts.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::btree::problem::Problem;
use super::btree::records::RunRec;
use super::facts::{Family, Reader, RunPlace};
use super::heap::is_live;
use crate::finding::FindingKind as K;

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

/// A page's edge run: (leaf block, 0 for its first or only run, 1 for its last).
type RunId = (u32, u8);

/// The runs of one unique index kept from the stream, joined across right siblings
/// (union-find over the edge runs that join or hold two or more TIDs).
/// The runs of equal keys met at one block of the stream: its own first run and the last runs
/// of the pages that name it as their right sibling.
pub struct RunsAt<'a, 'r> {
    pub blkno: u32,
    pub first_run: Option<&'a RunRec<'r>>,
    pub last_runs: &'a [RunRec<'r>],
    /// `btpo_prev` of the page at this block when it is a live leaf.
    pub live_leaf_prev: Option<u32>,
}

#[derive(Debug, Default)]
pub struct UniqueJoin {
    ids: HashMap<RunId, usize>,
    parent: Vec<usize>,
    tids: Vec<Vec<GroupTid>>,
    inner: Vec<Group>,
}

fn tids_of(r: &RunRec<'_>) -> Vec<GroupTid> {
    r.tids
        .iter()
        .map(|&(b, o, at)| GroupTid {
            heap_block: b,
            heap_offset: o,
            index_block: r.blkno,
            index_offset: at,
        })
        .collect()
}

impl UniqueJoin {
    /// An inner run (two or more TIDs, not at a page's edge): a group of its own.
    pub fn inner(&mut self, r: &RunRec<'_>) {
        self.inner.push(Group { tids: tids_of(r) });
    }

    /// The runs met at one block: the page's first run and the last runs of the pages naming
    /// it as right sibling; a last run joins the first run when both pages are live leaves,
    /// linked both ways, and the keys are equal.
    pub(crate) fn block(&mut self, b: &RunsAt<'_, '_>) {
        let first = b.first_run.map(|f| ((b.blkno, 0u8), f));
        if let Some((id, f)) = first {
            if f.tids.len() > 1 {
                self.keep(id, f);
            }
        }
        for l in b.last_runs {
            let id = (l.blkno, (l.place != RunPlace::Whole) as u8);
            if l.place == RunPlace::Last && l.tids.len() > 1 {
                self.keep(id, l);
            }
            let Some((fid, f)) = first else {
                continue;
            };
            let linked = l.blkno != b.blkno && l.level == 0 && b.live_leaf_prev == Some(l.blkno);
            if linked && f.key == l.key {
                let a = self.keep(id, l);
                let c = self.keep(fid, f);
                let (ra, rc) = (self.root(a), self.root(c));
                self.parent[ra] = rc;
            }
        }
    }

    fn keep(&mut self, id: RunId, r: &RunRec<'_>) -> usize {
        if let Some(&i) = self.ids.get(&id) {
            return i;
        }
        let i = self.parent.len();
        self.ids.insert(id, i);
        self.parent.push(i);
        self.tids.push(tids_of(r));
        i
    }

    fn root(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// The groups with two or more heap TIDs: inner runs, and joined edge runs in block order.
    pub fn groups(mut self) -> Vec<Group> {
        let mut ids: Vec<(RunId, usize)> = self.ids.iter().map(|(&k, &v)| (k, v)).collect();
        ids.sort_unstable();
        let mut by_root: HashMap<usize, Vec<GroupTid>> = HashMap::new();
        for (_, i) in ids {
            let top = self.root(i);
            let tids = std::mem::take(&mut self.tids[i]);
            by_root.entry(top).or_default().extend(tids);
        }
        let mut joined: Vec<Vec<GroupTid>> = by_root.into_values().collect();
        joined.sort_by_key(|t| t.first().map(|x| (x.index_block, x.index_offset)));
        let mut groups = self.inner;
        groups.extend(joined.into_iter().map(|tids| Group { tids }));
        groups.retain(|g| g.tids.len() > 1);
        groups
    }
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

    fn tid(heap: (u32, u16), index: (u32, u16)) -> GroupTid {
        GroupTid {
            heap_block: heap.0,
            heap_offset: heap.1,
            index_block: index.0,
            index_offset: index.1,
        }
    }

    #[test]
    fn a_group_with_two_live_tuples_is_a_violation_at_the_second() {
        let groups = vec![Group {
            tids: vec![
                tid((10, 2), (1, 9)),
                tid((11, 1), (2, 2)),
                tid((12, 1), (3, 2)),
            ],
        }];
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
        // The same heap tuple named twice (a posting list split across pages) is one tuple.
        let twice = vec![Group {
            tids: vec![tid((10, 2), (1, 9)), tid((10, 2), (2, 2))],
        }];
        let live: HashMap<u32, Vec<u8>> = [(10, vec![0b10])].into_iter().collect();
        assert!(violations(&twice, &live).is_empty());
    }
}
