//! The merge of one B-tree index's facts, streamed block by block: sibling links agree both
//! ways, each level has one leftmost and one rightmost page, levels match between parents and
//! children, every page but the root has exactly one downlink, half-dead and deleted pages
//! follow nbtree's deletion rules, the metapage's root and fast root exist at the levels it
//! records, a child's high key is the parent's next separator, and — with a comparator from
//! [`crate::check::order`] — keys are in order across siblings and levels.
//!
//! The scan wrote each fact at the block it is about ([`records`]): a page's own fact, and the
//! claims its siblings, parents and half-dead children make about it. The sorted facts of one
//! index arrive grouped by block, so the check holds one block's facts at a time ([`block`])
//! plus what is proportional to its findings (candidate problems, a few decisions that need a
//! second block, the damaged pages) and to its height (per-level counters); [`resolve`] turns
//! them into findings after the stream, in the order and with the blame rules of a check that
//! walks the whole tree.
//!
//! Each finding is reported at the page holding the wrong fact where the facts tell which one
//! it is (the other pages are named in the message and `detail`). Nothing is concluded from a
//! page that failed its own checks: an index with such a page skips the checks that could
//! blame a healthy page for it.

pub(crate) mod block;
mod downlinks;
mod links;
mod order;
pub mod problem;
pub mod records;
mod resolve;
#[cfg(test)]
mod tests;
pub mod view;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::facts::{Family, MetaFact, Reader};
use super::plan::IndexInfo;
use super::unique::{Group, UniqueJoin};
use crate::check::order::IndexOrdering;
use crate::finding::FindingKind as K;
use crate::format::btree::BTREE_VERSION;
use problem::Problem;
use records::Record;

/// What the merge of one index found and could not check.
#[derive(Debug, Default)]
pub struct IndexOutcome {
    pub problems: Vec<Problem>,
    /// Why keys were not compared across pages, if they were not.
    pub not_order_checked: Option<String>,
    /// A unique index's groups of equal keys with two or more heap TIDs.
    pub groups: Vec<Group>,
}

/// The checks in the order a whole-tree walk makes them: when two problems are found at the
/// same page with the same kind, the one of the earlier phase is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Metapage,
    DeletedXids,
    Siblings,
    Downlinks,
    DownlinkCounts,
    HalfDead,
    Levels,
    KeyOrder,
}

/// What must still hold when the stream has passed for a candidate problem to be reported.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unless {
    Nothing,
    /// The block is damaged (its facts are unknown).
    Damaged(u32),
    /// Any page of the index is damaged (a downlink may sit on it).
    AnyDamaged,
    /// One of these parents was reported with a wrong downlink already.
    ParentReported(Vec<u32>),
}

/// A problem found in the stream, with where a whole-tree walk would have found it.
#[derive(Debug, Clone)]
struct Candidate {
    phase: Phase,
    /// The page whose check found it, then the order within that page's check.
    at: u32,
    sub: u32,
    /// The level of the blamed page, when known (a level with a finding is not walked).
    level: Option<u32>,
    unless: Unless,
    problem: Problem,
}

/// Which check found a candidate, and what must still hold for it to be reported.
#[derive(Debug, Clone)]
struct Where {
    phase: Phase,
    at: u32,
    sub: u32,
    level: Option<u32>,
    unless: Unless,
}

impl Where {
    fn new(phase: Phase, at: u32, sub: u32) -> Where {
        Where {
            phase,
            at,
            sub,
            level: None,
            unless: Unless::Nothing,
        }
    }

    /// The blamed page's level.
    fn level(mut self, level: u32) -> Where {
        self.level = Some(level);
        self
    }

    fn unless(mut self, unless: Unless) -> Where {
        self.unless = unless;
        self
    }
}

/// A `btpo_prev` that its target page does not return (`c.btpo_next != b`), decided when the
/// stream has passed: block `b` is blamed if `d` (`c`'s right sibling) points back at `c` or
/// another page names `b` as its right sibling, else `c`.
#[derive(Debug, Clone)]
struct PrevMismatch {
    b: u32,
    b_level: u32,
    c: u32,
    c_level: u32,
    d: u32,
    d_supports_c: bool,
}

/// The leftmost and rightmost pages seen on one level.
#[derive(Debug, Clone, Default)]
struct LevelCount {
    first_block: u32,
    pages: u64,
    /// The first two (in block order) of the pages with `btpo_prev` / `btpo_next` P_NONE,
    /// and how many there are.
    leftmost: (u64, Vec<u32>),
    rightmost: (u64, Vec<u32>),
}

/// The streaming check of one index: feed it the index's records in sorted order with
/// [`IndexCheck::add`], then [`IndexCheck::finish`].
pub struct IndexCheck<'a> {
    info: &'a IndexInfo,
    next_full_xid: Option<u64>,
    meta: Option<MetaFact>,
    ordering: Option<Arc<IndexOrdering>>,
    /// The records of the block being gathered.
    group: GroupBuf,
    found: Vec<Candidate>,
    prev_mismatches: Vec<PrevMismatch>,
    /// For a live page whose `btpo_prev` does not name it back: whether another page names it
    /// as its right sibling.
    claimed_by_other: HashMap<u32, bool>,
    /// Half-dead leaves whose top parent must lead down to them: (leaf, top parent, level).
    chains: Vec<(u32, u32, u32)>,
    /// For a half-dead leaf or a page with one child, whose parent has only one downlink:
    /// that parent (few: such chains exist while a subtree is being deleted).
    single_parent: HashMap<u32, u32>,
    damaged: HashSet<u32>,
    levels: BTreeMap<u32, LevelCount>,
    /// The metapage's root and fast root were met in the stream.
    root_seen: bool,
    fastroot_seen: bool,
    /// Key comparisons the comparator could not make.
    unknown: u64,
    unique: UniqueJoin,
}

/// One block's records, copied from the stream.
#[derive(Debug, Default)]
struct GroupBuf {
    blkno: Option<u32>,
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl<'a> IndexCheck<'a> {
    /// `next_full_xid` is the cluster's `nextXid` when it was shut down cleanly: a deleted
    /// page's stored xid must not be newer.
    pub fn new(info: &'a IndexInfo, next_full_xid: Option<u64>) -> IndexCheck<'a> {
        IndexCheck {
            info,
            next_full_xid,
            meta: None,
            ordering: info.ordering.as_ref().ok().cloned(),
            group: GroupBuf::default(),
            found: Vec::new(),
            prev_mismatches: Vec::new(),
            claimed_by_other: HashMap::new(),
            chains: Vec::new(),
            single_parent: HashMap::new(),
            damaged: HashSet::new(),
            levels: BTreeMap::new(),
            root_seen: false,
            fastroot_seen: false,
            unknown: 0,
            unique: UniqueJoin::default(),
        }
    }

    /// Adds one record of this index's unit (records come in sorted order).
    pub fn add(&mut self, record: &[u8]) {
        let Some((head, mut r)) = Reader::open(record) else {
            return;
        };
        match head.family {
            Family::BtreeMeta => self.meta = MetaFact::read(&mut r),
            Family::BtreePage => {
                if self.group.blkno != Some(head.blkno) {
                    self.flush();
                    self.group.blkno = Some(head.blkno);
                }
                self.group.bytes.extend_from_slice(record);
                self.group.ends.push(self.group.bytes.len());
            }
            Family::UniqueRun => {
                self.flush();
                if let Some(run) = records::read_inner_run(&mut r) {
                    self.unique.inner(&run);
                }
            }
            // Damaged marks sort with the page facts; heap, TOAST, visibility-map and TID
            // families never share an index's unit.
            _ => {}
        }
    }

    /// Checks the gathered block and empties the buffer.
    fn flush(&mut self) {
        let Some(blkno) = self.group.blkno.take() else {
            return;
        };
        let buf = std::mem::take(&mut self.group);
        let mut recs: Vec<Record<'_>> = Vec::with_capacity(buf.ends.len());
        let mut start = 0;
        for &end in &buf.ends {
            if let Some((_, mut r)) = Reader::open(&buf.bytes[start..end]) {
                if let Some(rec) = records::read(&mut r) {
                    recs.push(rec);
                }
            }
            start = end;
        }
        self.block(blkno, recs);
        self.group = GroupBuf {
            blkno: None,
            bytes: buf.bytes,
            ends: buf.ends,
        };
        self.group.bytes.clear();
        self.group.ends.clear();
    }

    /// The findings, after the last record.
    pub fn finish(mut self) -> IndexOutcome {
        self.flush();
        let mut out = self.resolve();
        out.not_order_checked = match &self.info.ordering {
            Err(why) => Some(format!("{why:?}")),
            Ok(_) if self.unknown > 0 => Some(format!(
                "{} key comparison(s) could not be made",
                self.unknown
            )),
            Ok(_) => None,
        };
        out.groups = std::mem::take(&mut self.unique).groups();
        out
    }

    /// Notes a candidate problem found by the check `w`.
    fn candidate(&mut self, w: Where, blkno: u32, kind: K, message: String, detail: Value) {
        self.found.push(Candidate {
            phase: w.phase,
            at: w.at,
            sub: w.sub,
            level: w.level,
            unless: w.unless,
            problem: Problem {
                blkno,
                kind,
                message,
                detail,
            },
        });
    }

    fn heapkeyspace(&self) -> bool {
        self.meta.is_some_and(|m| m.version >= BTREE_VERSION)
    }
}
