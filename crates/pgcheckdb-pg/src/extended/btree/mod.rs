//! The merge of one B-tree index's facts: the whole tree's shape, checked from the per-page
//! facts of the scan — sibling links agree both ways, each level is one chain from a leftmost
//! page with `btpo_prev` P_NONE to a rightmost one with `btpo_next` P_NONE, levels match
//! between parents and children, every page but the root has exactly one downlink, half-dead
//! and deleted pages follow nbtree's deletion rules, the metapage's root and fast root exist at
//! the levels it records, a child's high key is the parent's next separator, and — with a
//! comparator from [`crate::btree_order`] — keys are in order across siblings and levels.
//!
//! Each finding is reported at the page holding the wrong fact where the facts tell which one
//! it is (the other pages are named in the message and `detail`). Nothing is concluded from a
//! page that failed its own checks: an index with such a page skips the checks that could
//! blame a healthy page for it.

mod downlinks;
mod links;
mod order;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::facts::{Family, MetaFact, PageFact, Reader, UniqueRun};
use super::plan::IndexInfo;
use crate::finding::FindingKind as K;
use crate::layout::btree::flags as bf;

/// `InvalidBlockNumber`.
const INVALID_BLOCK: u32 = u32::MAX;
/// Bytes of an index tuple before `t_info`: a pivot's downlink or a high key's unused block
/// and its `ip_posid`. Pivot keys are compared from `t_info` on, as for every B-tree version.
const PIVOT_KEY_FROM: usize = 6;

/// One index's facts, read from the merged runs.
#[derive(Debug, Default)]
pub struct IndexFacts {
    pub meta: Option<MetaFact>,
    pub pages: BTreeMap<u32, PageFact>,
    pub damaged: HashSet<u32>,
    pub runs: Vec<UniqueRun>,
}

impl IndexFacts {
    /// Adds one record of this index's unit.
    pub fn add(&mut self, record: &[u8]) {
        let Some((head, mut r)) = Reader::open(record) else {
            return;
        };
        match head.family {
            Family::BtreeMeta => self.meta = MetaFact::read(&mut r),
            Family::BtreePage => {
                if let Some(p) = PageFact::read(head.blkno, &mut r) {
                    self.pages.insert(head.blkno, p);
                }
            }
            Family::Damaged => {
                self.damaged.insert(head.blkno);
            }
            Family::UniqueRun => {
                if let Some(run) = UniqueRun::read(head.blkno, &mut r) {
                    self.runs.push(run);
                }
            }
            // Heap, visibility-map and other families never share an index's unit.
            _ => {}
        }
    }
}

/// A finding of the merge, before it is placed in a file: block, kind, message, detail.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub blkno: u32,
    pub kind: K,
    pub message: String,
    pub detail: Value,
}

/// What the merge of one index found and could not check.
#[derive(Debug, Default)]
pub struct IndexOutcome {
    pub problems: Vec<Problem>,
    /// Why keys were not compared across pages, if they were not.
    pub not_order_checked: Option<String>,
}

fn deleted(p: &PageFact) -> bool {
    p.btpo_flags & bf::BTP_DELETED != 0
}

fn flagged(p: &PageFact, flag: u16) -> bool {
    p.btpo_flags & flag != 0
}

/// The check of one index.
struct Check<'a> {
    f: &'a IndexFacts,
    info: &'a IndexInfo,
    out: IndexOutcome,
    /// (block, kind) already reported: one finding per page and kind.
    reported: HashSet<(u32, K)>,
    /// For each child block, the downlinks to it: (parent block, index in its downlinks).
    downlinks_to: HashMap<u32, Vec<(u32, usize)>>,
    /// For each block, the live pages whose `btpo_next` names it.
    next_from: HashMap<u32, Vec<u32>>,
}

/// Checks one index from its facts.
/// `next_full_xid` is the cluster's `nextXid` when it was shut down cleanly: a deleted page's
/// stored xid must not be newer.
pub fn check_index(f: &IndexFacts, info: &IndexInfo, next_full_xid: Option<u64>) -> IndexOutcome {
    let mut c = Check {
        f,
        info,
        out: IndexOutcome::default(),
        reported: HashSet::new(),
        downlinks_to: HashMap::new(),
        next_from: HashMap::new(),
    };
    for p in c.f.pages.values().filter(|p| !deleted(p)) {
        c.next_from.entry(p.btpo_next).or_default().push(p.blkno);
        for (i, d) in p.downlinks.iter().enumerate() {
            c.downlinks_to
                .entry(d.child)
                .or_default()
                .push((p.blkno, i));
        }
    }
    c.metapage();
    if let Some(next) = next_full_xid {
        c.deleted_xids(next);
    }
    c.siblings();
    c.downlinks();
    c.half_dead();
    c.levels();
    c.key_order();
    c.out
}

impl<'a> Check<'a> {
    fn report(&mut self, blkno: u32, kind: K, message: String, detail: Value) {
        if self.reported.insert((blkno, kind)) {
            self.out.problems.push(Problem {
                blkno,
                kind,
                message,
                detail,
            });
        }
    }

    /// The live (not deleted) page at `blkno` (borrowed from the facts, not from the check,
    /// so findings can be reported while it is held).
    fn live(&self, blkno: u32) -> Option<&'a PageFact> {
        self.f.pages.get(&blkno).filter(|p| !deleted(p))
    }

    /// What block `blkno` is, for messages about a link to it that is not a live page.
    /// The live pages, in block order.
    fn live_pages(&self) -> Vec<&'a PageFact> {
        let f: &'a IndexFacts = self.f;
        f.pages.values().filter(|p| !deleted(p)).collect()
    }

    fn not_live_reason(&self, blkno: u32) -> Option<String> {
        if self.f.damaged.contains(&blkno) {
            return None; // reported by its own checks; nothing concluded
        }
        Some(match self.f.pages.get(&blkno) {
            Some(_) => format!("block {blkno} is a deleted page"),
            None if blkno == 0 => "block 0 is the metapage".to_string(),
            None => format!("block {blkno} is not a B-tree page in use (all zero or missing)"),
        })
    }
}
