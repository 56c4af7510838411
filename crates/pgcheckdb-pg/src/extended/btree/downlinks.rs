//! Downlinks of a B-tree: one per page but the root, to a live page one level down whose high
//! key is the parent's next separator; the half-dead page rules.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::{deleted, flagged, Check, INVALID_BLOCK, PIVOT_KEY_FROM};
use crate::extended::facts::PageFact;
use crate::finding::FindingKind as K;
use crate::layout::btree::{flags as bf, P_NONE};

impl Check<'_> {
    /// Every downlink points at a live page one level down whose high key is the parent's next
    /// separator; every live page but the root has exactly one downlink.
    pub(super) fn downlinks(&mut self) {
        let parents: Vec<&PageFact> = self
            .live_pages()
            .into_iter()
            .filter(|p| !p.downlinks.is_empty())
            .collect();
        for p in &parents {
            for i in 0..p.downlinks.len() {
                self.downlink(p, i);
            }
        }
        self.downlink_counts();
    }

    pub(super) fn downlink(&mut self, p: &PageFact, i: usize) {
        let d = &p.downlinks[i];
        let child_blk = d.child;
        let Some(child) = self.live(child_blk) else {
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
            self.level_mismatch(p, child);
        }
        if flagged(child, bf::BTP_INCOMPLETE_SPLIT | bf::BTP_HALF_DEAD)
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
    pub(super) fn level_mismatch(&mut self, p: &PageFact, child: &PageFact) {
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
    pub(super) fn downlink_counts(&mut self) {
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
        let pages = self.live_pages();
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
    pub(super) fn half_dead(&mut self) {
        let halves: Vec<&PageFact> = self
            .live_pages()
            .into_iter()
            .filter(|p| flagged(p, bf::BTP_HALF_DEAD))
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

    pub(super) fn top_parent_problem(&self, leaf: &PageFact, top: u32) -> Option<String> {
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
}
