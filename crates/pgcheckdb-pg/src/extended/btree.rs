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

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Value};

use super::facts::{Family, MetaFact, PageFact, Reader, UniqueRun};
use super::plan::IndexInfo;
use crate::finding::FindingKind as K;
use crate::layout::btree::{flags as bf, P_NONE};

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
            Family::HeapLive => {}
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

impl Check<'_> {
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

    /// The live (not deleted) page at `blkno`.
    fn live(&self, blkno: u32) -> Option<&PageFact> {
        self.f.pages.get(&blkno).filter(|p| !deleted(p))
    }

    /// What block `blkno` is, for messages about a link to it that is not a live page.
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

    /// A deleted page (PostgreSQL 14+, `BTP_HAS_FULLXID`) stores the next full transaction id
    /// of the moment it was deleted; a value newer than the cluster's `nextXid` is impossible.
    fn deleted_xids(&mut self, next: u64) {
        let future: Vec<(u32, u64)> = self
            .f
            .pages
            .values()
            .filter(|p| deleted(p))
            .filter_map(|p| p.safexid.filter(|&x| x > next).map(|x| (p.blkno, x)))
            .collect();
        for (blkno, x) in future {
            self.report(
                blkno,
                K::XidInvalid,
                format!(
                    "deleted page's stored transaction id {} (epoch {}) is newer than nextXid {} (epoch {})",
                    x as u32,
                    x >> 32,
                    next as u32,
                    next >> 32
                ),
                json!({"safexid": x, "next_full_xid": next}),
            );
        }
    }

    /// A link from live page `from` to a deleted page whose own links still agree with it: the
    /// deleted flag is the odd fact (a deleted page is unlinked from its siblings and parent
    /// in the same step), so it is reported at the deleted page.
    fn deleted_but_linked(
        &mut self,
        target: u32,
        agrees: impl Fn(&PageFact) -> bool,
        from: u32,
        link: &str,
    ) -> bool {
        let Some(d) = self.f.pages.get(&target).filter(|p| deleted(p)).cloned() else {
            return false;
        };
        if !agrees(&d) {
            return false;
        }
        self.report(
            target,
            K::BtreeLinkInvalid,
            format!("page is flagged deleted, but block {from} still points at it ({link}); a deleted page is unlinked from its siblings and parent"),
            json!({"btpo_flags": d.btpo_flags, "other_block": from, "link": link}),
        );
        true
    }

    fn metapage(&mut self) {
        let Some(meta) = self.f.meta else {
            return;
        };
        if meta.root != P_NONE {
            self.meta_target("root", meta.root, meta.level, true);
        }
        if meta.fastroot != P_NONE {
            self.meta_target("fast root", meta.fastroot, meta.fastlevel, false);
        }
        let pages: Vec<(u32, u32, u16)> = self
            .f
            .pages
            .values()
            .filter(|p| !deleted(p))
            .map(|p| (p.blkno, p.btpo_level, p.btpo_flags))
            .collect();
        for (blkno, level, flags) in pages {
            if meta.root != P_NONE && level > meta.level {
                self.report(
                    blkno,
                    K::BtreeLevelInvalid,
                    format!("page has level {level}, above the root's level {} (metapage root is block {})", meta.level, meta.root),
                    json!({"btpo_level": level, "other_block": 0, "btm_root": meta.root, "btm_level": meta.level}),
                );
            }
            if flags & bf::BTP_ROOT != 0 && blkno != meta.root {
                self.report(
                    blkno,
                    K::BtreeLinkInvalid,
                    format!("page is flagged BTP_ROOT but the metapage (block 0) names block {} as the root", meta.root),
                    json!({"other_block": 0, "btm_root": meta.root}),
                );
            }
        }
    }

    /// The metapage's root or fast root `target` must be a live page of `level`; the root must
    /// also be flagged and have no siblings (unless its split is incomplete).
    fn meta_target(&mut self, what: &str, target: u32, level: u32, is_root: bool) {
        let detail = json!({"other_block": target, "btm_level": level});
        let Some(p) = self.live(target).cloned() else {
            if let Some(why) = self.not_live_reason(target) {
                self.report(
                    0,
                    K::BtreeLinkInvalid,
                    format!("metapage {what} is block {target}, but {why}"),
                    detail,
                );
            }
            return;
        };
        if p.btpo_level != level {
            self.report(
                0,
                K::BtreeLevelInvalid,
                format!(
                    "metapage says the {what} block {target} is at level {level}, but the page has level {}",
                    p.btpo_level
                ),
                json!({"other_block": target, "btm_level": level, "btpo_level": p.btpo_level}),
            );
        }
        let incomplete = flagged(&p, bf::BTP_INCOMPLETE_SPLIT);
        if is_root && !incomplete {
            let not_root = !flagged(&p, bf::BTP_ROOT);
            let siblings = p.btpo_prev != P_NONE || p.btpo_next != P_NONE;
            if not_root || siblings {
                self.report(
                    0,
                    K::BtreeLinkInvalid,
                    format!(
                        "metapage root is block {target}, which is not a root page (flags {:?}, btpo_prev {}, btpo_next {})",
                        bf::names(p.btpo_flags), p.btpo_prev, p.btpo_next
                    ),
                    json!({"other_block": target, "btpo_flags": p.btpo_flags, "btpo_prev": p.btpo_prev, "btpo_next": p.btpo_next}),
                );
            }
        }
    }

    /// `btpo_next` and `btpo_prev` agree both ways; the page whose link no neighbour supports
    /// is blamed.
    fn siblings(&mut self) {
        let live: Vec<PageFact> = self
            .f
            .pages
            .values()
            .filter(|p| !deleted(p))
            .cloned()
            .collect();
        for a in &live {
            if a.btpo_next != P_NONE {
                self.next_link(a);
            }
            if a.btpo_prev != P_NONE {
                self.prev_link(a);
            }
        }
    }

    fn next_link(&mut self, a: &PageFact) {
        let b_blk = a.btpo_next;
        let Some(b) = self.live(b_blk).cloned() else {
            if self.deleted_but_linked(b_blk, |d| d.btpo_prev == a.blkno, a.blkno, "btpo_next") {
                return;
            }
            if let Some(why) = self.not_live_reason(b_blk) {
                self.report(
                    a.blkno,
                    K::BtreeLinkInvalid,
                    format!("btpo_next is {b_blk}, but {why}"),
                    json!({"btpo_next": b_blk, "other_block": b_blk}),
                );
            }
            return;
        };
        if b.btpo_prev == a.blkno {
            return;
        }
        let c_blk = b.btpo_prev;
        if self.f.damaged.contains(&c_blk) {
            return;
        }
        let c_supports_b = self.live(c_blk).is_some_and(|c| c.btpo_next == b_blk);
        let detail = json!({"btpo_next": b_blk, "other_block": b_blk, "other_btpo_prev": c_blk});
        if c_supports_b {
            self.report(
                a.blkno,
                K::BtreeLinkInvalid,
                format!("btpo_next is {b_blk}, but block {b_blk}'s btpo_prev is {c_blk}, whose btpo_next is {b_blk}"),
                detail,
            );
        } else {
            self.report(
                b_blk,
                K::BtreeLinkInvalid,
                format!("btpo_prev is {c_blk}, but block {} has btpo_next {b_blk} and block {c_blk} does not", a.blkno),
                json!({"btpo_prev": c_blk, "other_block": a.blkno}),
            );
        }
    }

    fn prev_link(&mut self, b: &PageFact) {
        let c_blk = b.btpo_prev;
        let Some(c) = self.live(c_blk).cloned() else {
            if self.deleted_but_linked(c_blk, |d| d.btpo_next == b.blkno, b.blkno, "btpo_prev") {
                return;
            }
            if let Some(why) = self.not_live_reason(c_blk) {
                self.report(
                    b.blkno,
                    K::BtreeLinkInvalid,
                    format!("btpo_prev is {c_blk}, but {why}"),
                    json!({"btpo_prev": c_blk, "other_block": c_blk}),
                );
            }
            return;
        };
        if c.btpo_next == b.blkno {
            return;
        }
        let d_blk = c.btpo_next;
        if self.f.damaged.contains(&d_blk) {
            return;
        }
        let d_supports_c = self.live(d_blk).is_some_and(|d| d.btpo_prev == c_blk);
        // Another page whose btpo_next is B also says B's btpo_prev is the wrong link.
        let b_claimed = self
            .next_from
            .get(&b.blkno)
            .is_some_and(|from| from.iter().any(|&a| a != c_blk));
        if d_supports_c || b_claimed {
            self.report(
                b.blkno,
                K::BtreeLinkInvalid,
                format!("btpo_prev is {c_blk}, but block {c_blk}'s btpo_next is {d_blk}, whose btpo_prev is {c_blk}"),
                json!({"btpo_prev": c_blk, "other_block": c_blk, "other_btpo_next": d_blk}),
            );
        } else {
            self.report(
                c_blk,
                K::BtreeLinkInvalid,
                format!("btpo_next is {d_blk}, but block {} has btpo_prev {c_blk} and block {d_blk} does not", b.blkno),
                json!({"btpo_next": d_blk, "other_block": b.blkno}),
            );
        }
    }

    /// Every downlink points at a live page one level down whose high key is the parent's next
    /// separator; every live page but the root has exactly one downlink.
    fn downlinks(&mut self) {
        let parents: Vec<PageFact> = self
            .f
            .pages
            .values()
            .filter(|p| !deleted(p) && !p.downlinks.is_empty())
            .cloned()
            .collect();
        for p in &parents {
            for i in 0..p.downlinks.len() {
                self.downlink(p, i);
            }
        }
        self.downlink_counts();
    }

    fn downlink(&mut self, p: &PageFact, i: usize) {
        let d = &p.downlinks[i];
        let child_blk = d.child;
        let Some(child) = self.live(child_blk).cloned() else {
            if self.deleted_but_linked(child_blk, |_| true, p.blkno, "downlink") {
                return;
            }
            if let Some(why) = self.not_live_reason(child_blk) {
                self.report(
                    p.blkno,
                    K::BtreeDownlinkInvalid,
                    format!(
                        "downlink at offset {} points at block {child_blk}, but {why}",
                        d.offnum
                    ),
                    json!({"offset": d.offnum, "child": child_blk, "other_block": child_blk}),
                );
            }
            return;
        };
        if child.btpo_level + 1 != p.btpo_level {
            self.level_mismatch(p, &child);
        }
        if flagged(&child, bf::BTP_INCOMPLETE_SPLIT | bf::BTP_HALF_DEAD)
            || child.btpo_next == P_NONE
            || child.btpo_level + 1 != p.btpo_level
        {
            return;
        }
        let separator: Option<&[u8]> = match p.downlinks.get(i + 1) {
            Some(next) => Some(&next.item),
            None if p.btpo_next != P_NONE => Some(&p.high_key),
            None => None,
        };
        let tail = |t: &[u8]| t.get(PIVOT_KEY_FROM..).map(<[u8]>::to_vec);
        let matches =
            separator.is_some_and(|s| tail(s).is_some() && tail(s) == tail(&child.high_key));
        if !matches {
            let bound = match separator {
                Some(_) if i + 1 < p.downlinks.len() => {
                    format!("the pivot at offset {}", p.downlinks[i + 1].offnum)
                }
                Some(_) => "the parent's high key".to_string(),
                None => "nothing (the parent is the rightmost page of its level)".to_string(),
            };
            self.report(
                p.blkno,
                K::BtreeDownlinkInvalid,
                format!(
                    "downlink at offset {} points at block {child_blk}, whose high key differs from {bound}: the downlink names the wrong child or the child's high key is wrong",
                    d.offnum
                ),
                json!({"offset": d.offnum, "child": child_blk, "other_block": child_blk}),
            );
        }
    }

    /// A child whose level is not its parent's minus one: the child is blamed when its
    /// siblings have the level the parent expects, otherwise the parent.
    fn level_mismatch(&mut self, p: &PageFact, child: &PageFact) {
        let expected = p.btpo_level.wrapping_sub(1);
        let sibling_levels: Vec<u32> = [child.btpo_prev, child.btpo_next]
            .iter()
            .filter_map(|&s| self.live(s).map(|x| x.btpo_level))
            .collect();
        let child_is_odd = sibling_levels.contains(&expected);
        if child_is_odd {
            self.report(
                child.blkno,
                K::BtreeLevelInvalid,
                format!("page has level {}, but its parent block {} (level {}) and its siblings are at level {expected}", child.btpo_level, p.blkno, p.btpo_level),
                json!({"btpo_level": child.btpo_level, "expected_level": expected, "other_block": p.blkno}),
            );
        } else {
            self.report(
                p.blkno,
                K::BtreeLevelInvalid,
                format!("page has level {}, but its child block {} has level {}", p.btpo_level, child.blkno, child.btpo_level),
                json!({"btpo_level": p.btpo_level, "child_level": child.btpo_level, "other_block": child.blkno}),
            );
        }
    }

    /// Exactly one downlink per live page, with nbtree's exceptions: the root, the right half
    /// of an incomplete split, a half-dead leaf that is its own top parent and the top parent
    /// of a half-dead leaf.
    fn downlink_counts(&mut self) {
        let Some(meta) = self.f.meta else {
            return;
        };
        let tops: HashSet<u32> = self
            .f
            .pages
            .values()
            .filter(|p| !deleted(p) && flagged(p, bf::BTP_HALF_DEAD))
            .filter_map(|p| {
                p.top_parent
                    .map(|t| if t == INVALID_BLOCK { p.blkno } else { t })
            })
            .collect();
        let pages: Vec<PageFact> = self
            .f
            .pages
            .values()
            .filter(|p| !deleted(p))
            .cloned()
            .collect();
        for c in &pages {
            let links = self.downlinks_to.get(&c.blkno).cloned().unwrap_or_default();
            if c.blkno == meta.root {
                continue;
            }
            if links.is_empty() {
                let right_half = self
                    .live(c.btpo_prev)
                    .is_some_and(|l| flagged(l, bf::BTP_INCOMPLETE_SPLIT));
                // A downlink may sit on a damaged page, and the root level has none.
                if right_half
                    || tops.contains(&c.blkno)
                    || !self.f.damaged.is_empty()
                    || c.btpo_level >= meta.level
                {
                    continue;
                }
                self.report(
                    c.blkno,
                    K::BtreeDownlinkInvalid,
                    format!("no page of level {} has a downlink to this page (btpo_prev {}, btpo_next {})", c.btpo_level + 1, c.btpo_prev, c.btpo_next),
                    json!({"btpo_prev": c.btpo_prev, "btpo_next": c.btpo_next, "other_block": c.btpo_prev}),
                );
            } else if links.len() > 1 {
                let from: Vec<Value> = links
                    .iter()
                    .map(|&(pb, i)| json!({"block": pb, "offset": self.f.pages[&pb].downlinks[i].offnum}))
                    .collect();
                let already = links
                    .iter()
                    .any(|&(pb, _)| self.reported.contains(&(pb, K::BtreeDownlinkInvalid)));
                if !already {
                    let (pb, _) = links[1];
                    self.report(
                        c.blkno,
                        K::BtreeDownlinkInvalid,
                        format!(
                            "{} downlinks point at this page (from blocks {}), a page has one",
                            links.len(),
                            links
                                .iter()
                                .map(|l| l.0.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        json!({"downlinks": from, "other_block": pb}),
                    );
                }
            }
        }
    }

    /// A half-dead leaf's high key names its top parent: itself (InvalidBlockNumber), and then
    /// it has no downlink; or an internal page without a downlink whose single-child chain
    /// leads down to the leaf.
    fn half_dead(&mut self) {
        let halves: Vec<PageFact> = self
            .f
            .pages
            .values()
            .filter(|p| !deleted(p) && flagged(p, bf::BTP_HALF_DEAD))
            .cloned()
            .collect();
        for l in &halves {
            let Some(top) = l.top_parent else {
                continue;
            };
            if let Some(links) = self.downlinks_to.get(&l.blkno).cloned() {
                if top == INVALID_BLOCK {
                    let (pb, _) = links[0];
                    self.report(
                        l.blkno,
                        K::BtreeDownlinkInvalid,
                        format!("half-dead page is its own top parent but block {pb} still has a downlink to it"),
                        json!({"top_parent": top, "other_block": pb}),
                    );
                    continue;
                }
            }
            if top == INVALID_BLOCK {
                continue;
            }
            if let Some(why) = self.top_parent_problem(l, top) {
                self.report(
                    l.blkno,
                    K::BtreeDownlinkInvalid,
                    format!("half-dead page names block {top} as its top parent, but {why}"),
                    json!({"top_parent": top, "other_block": top}),
                );
            }
        }
    }

    fn top_parent_problem(&self, leaf: &PageFact, top: u32) -> Option<String> {
        if self.f.damaged.contains(&top) {
            return None;
        }
        let Some(t) = self.live(top) else {
            return self.not_live_reason(top);
        };
        if let Some(links) = self.downlinks_to.get(&top) {
            return Some(format!(
                "block {top} still has a downlink from block {}",
                links[0].0
            ));
        }
        let mut at = t;
        for _ in 0..=t.btpo_level {
            if at.blkno == leaf.blkno {
                return None;
            }
            match at.downlinks.as_slice() {
                [only] => match self.live(only.child) {
                    Some(next) => at = next,
                    None => return None,
                },
                _ => {
                    return Some(format!(
                        "block {} on the way down has {} downlinks, not one",
                        at.blkno,
                        at.downlinks.len()
                    ))
                }
            }
        }
        (at.blkno != leaf.blkno).then(|| {
            format!(
                "its single-child chain does not lead to block {}",
                leaf.blkno
            )
        })
    }

    /// Each level is one chain: walking `btpo_next` from the page with `btpo_prev` P_NONE
    /// reaches every live page of the level. Reported once per level, and only when no link of
    /// the level was reported already.
    fn levels(&mut self) {
        let mut by_level: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for p in self.f.pages.values().filter(|p| !deleted(p)) {
            by_level.entry(p.btpo_level).or_default().push(p.blkno);
        }
        if !self.f.damaged.is_empty() {
            return;
        }
        // Levels where a page (live or deleted) was already reported: the walk would only
        // repeat that finding.
        let reported_levels: HashSet<u32> = self
            .reported
            .iter()
            .filter_map(|r| self.f.pages.get(&r.0).map(|p| p.btpo_level))
            .collect();
        for (level, blocks) in by_level {
            if reported_levels.contains(&level) {
                continue;
            }
            let leftmost: Vec<u32> = blocks
                .iter()
                .copied()
                .filter(|&b| self.live(b).is_some_and(|p| p.btpo_prev == P_NONE))
                .collect();
            let Some(&start) = leftmost.first() else {
                self.report(
                    blocks[0],
                    K::BtreeLinkInvalid,
                    format!("no page of level {level} has btpo_prev P_NONE: the level has no leftmost page"),
                    json!({"level": level, "pages": blocks.len()}),
                );
                continue;
            };
            let mut seen = HashSet::new();
            let mut at = start;
            while at != P_NONE && seen.insert(at) {
                match self.live(at) {
                    Some(p) => at = p.btpo_next,
                    None => break,
                }
            }
            let missing: Vec<u32> = blocks
                .iter()
                .copied()
                .filter(|b| !seen.contains(b))
                .collect();
            if let Some(&first) = missing.first() {
                self.report(
                    first,
                    K::BtreeLinkInvalid,
                    format!("page is not reached from the leftmost page {start} of level {level} by following btpo_next ({} page(s) of the level are not)", missing.len()),
                    json!({"level": level, "other_block": start, "unreached": missing.len(), "leftmost_pages": leftmost}),
                );
            }
        }
    }

    /// Keys across pages with the index's comparator: a page's last key is not above its right
    /// sibling's first key or its high key above that first key, and a parent's separator is
    /// not above its leaf child's first key.
    fn key_order(&mut self) {
        let ordering = match &self.info.ordering {
            Ok(o) => o.clone(),
            Err(why) => {
                self.out.not_order_checked = Some(format!("{why:?}"));
                return;
            }
        };
        let mut unknown = 0u64;
        let pages: Vec<PageFact> = self
            .f
            .pages
            .values()
            .filter(|p| !deleted(p))
            .cloned()
            .collect();
        for a in &pages {
            if let Some(b) = self.live(a.btpo_next).cloned() {
                if b.btpo_prev == a.blkno
                    && b.btpo_level == a.btpo_level
                    && !b.first_item.is_empty()
                {
                    for (what, left) in [("last key", &a.last_item), ("high key", &a.high_key)] {
                        if left.is_empty() || (what == "last key" && !a.downlinks.is_empty()) {
                            continue;
                        }
                        match ordering.compare(left, &b.first_item) {
                            Some(std::cmp::Ordering::Greater) => self.report(
                                b.blkno,
                                K::BtreeOrderInvalid,
                                format!("first key sorts before the {what} of its left sibling block {}", a.blkno),
                                json!({"other_block": a.blkno}),
                            ),
                            Some(_) => {}
                            None => unknown += 1,
                        }
                    }
                }
            }
            for (i, d) in a.downlinks.iter().enumerate().skip(1) {
                let Some(child) = self.live(d.child).cloned() else {
                    continue;
                };
                if !child.downlinks.is_empty() || child.first_item.is_empty() || i == 0 {
                    continue;
                }
                match ordering.compare(&d.item, &child.first_item) {
                    Some(std::cmp::Ordering::Greater) => self.report(
                        a.blkno,
                        K::BtreeOrderInvalid,
                        format!("separator at offset {} sorts after the first key of its child block {}", d.offnum, child.blkno),
                        json!({"offset": d.offnum, "other_block": child.blkno}),
                    ),
                    Some(_) => {}
                    None => unknown += 1,
                }
            }
        }
        if unknown > 0 {
            self.out.not_order_checked =
                Some(format!("{unknown} key comparison(s) could not be made"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree_order::NotOrderChecked;
    use crate::extended::facts::Downlink;

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
}
