//! Downlinks of a B-tree, checked at the child's block: one per page but the root, to a live
//! page one level down whose high key is the parent's next separator.

use crate::format::page::INVALID_BLOCK_NUMBER;
use serde_json::{json, Value};

use super::block::Block;
use super::records::{Bound, DownlinkRec, PageRec, PIVOT_KEY_FROM};
use super::{IndexCheck, Phase, Unless, Where};
use crate::finding::FindingKind as K;
use crate::format::btree::{flags as bf, P_NONE};

impl IndexCheck<'_> {
    /// Downlink `d` points at this block: a live page one level down whose high key is the
    /// parent's next separator.
    pub(super) fn downlink(&mut self, child: &Block<'_>, d: &DownlinkRec<'_>) {
        let w = Where::new(Phase::Downlinks, d.parent, d.index as u32);
        let child_blk = child.blkno;
        let Some(c) = child.live() else {
            let agrees = child.deleted().is_some();
            if self.deleted_but_linked(w.clone(), child, agrees, d.parent, "downlink") {
                return;
            }
            if let Some(why) = child.not_live_reason() {
                self.candidate(
                    w.level(d.parent_level),
                    d.parent,
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
        let level_ok = c.btpo_level.wrapping_add(1) == d.parent_level;
        if !level_ok {
            self.level_mismatch(w.clone(), child, c, d);
        }
        if c.flagged(bf::BTP_INCOMPLETE_SPLIT | bf::BTP_HALF_DEAD)
            || c.btpo_next == P_NONE
            || !level_ok
        {
            return;
        }
        let matches = d
            .expected_high
            .is_some_and(|e| c.high_key.get(PIVOT_KEY_FROM..) == Some(e));
        if !matches {
            let bound = match d.bound {
                Bound::NextPivot => format!("the pivot at offset {}", d.bound_offnum),
                Bound::ParentHighKey => "the parent's high key".to_string(),
                Bound::Nothing => {
                    "nothing (the parent is the rightmost page of its level)".to_string()
                }
            };
            self.candidate(
                w.level(d.parent_level),
                d.parent,
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
    /// siblings (those that name it back) have the level the parent expects, otherwise the
    /// parent.
    fn level_mismatch(&mut self, w: Where, b: &Block<'_>, c: &PageRec<'_>, d: &DownlinkRec<'_>) {
        let expected = d.parent_level.wrapping_sub(1);
        let left = b
            .left
            .iter()
            .filter(|l| l.from == c.btpo_prev)
            .map(|l| l.level);
        let right = b
            .right
            .iter()
            .filter(|r| r.from == c.btpo_next)
            .map(|r| r.level);
        let child_is_odd = left.chain(right).any(|l| l == expected);
        if child_is_odd {
            self.candidate(
                w.level(c.btpo_level),
                b.blkno,
                K::BtreeLevelInvalid,
                format!("page has level {}, but its parent block {} (level {}) and its siblings are at level {expected}", c.btpo_level, d.parent, d.parent_level),
                json!({"btpo_level": c.btpo_level, "expected_level": expected, "other_block": d.parent}),
            );
        } else {
            self.candidate(
                w.level(d.parent_level),
                d.parent,
                K::BtreeLevelInvalid,
                format!("page has level {}, but its child block {} has level {}", d.parent_level, b.blkno, c.btpo_level),
                json!({"btpo_level": d.parent_level, "child_level": c.btpo_level, "other_block": b.blkno}),
            );
        }
    }

    /// Exactly one downlink per live page, with nbtree's exceptions: the root, the right half
    /// of an incomplete split, a half-dead leaf that is its own top parent and the top parent
    /// of a half-dead leaf.
    pub(super) fn downlink_count(&mut self, b: &Block<'_>) {
        let (Some(meta), Some(c)) = (self.meta, b.live()) else {
            return;
        };
        if b.blkno == meta.root {
            return;
        }
        let w = Where::new(Phase::DownlinkCounts, b.blkno, 0).level(c.btpo_level);
        match b.downs.len() {
            0 => {
                let right_half = b
                    .left
                    .iter()
                    .any(|l| l.from == c.btpo_prev && l.flags & bf::BTP_INCOMPLETE_SPLIT != 0);
                let own_top =
                    c.flagged(bf::BTP_HALF_DEAD) && c.top_parent == Some(INVALID_BLOCK_NUMBER);
                // The root level has none.
                if right_half || own_top || !b.tops.is_empty() || c.btpo_level >= meta.level {
                    return;
                }
                // A downlink may sit on a damaged page.
                self.candidate(
                    w.unless(Unless::AnyDamaged),
                    b.blkno,
                    K::BtreeDownlinkInvalid,
                    format!("no page of level {} has a downlink to this page (btpo_prev {}, btpo_next {})", c.btpo_level + 1, c.btpo_prev, c.btpo_next),
                    json!({"btpo_prev": c.btpo_prev, "btpo_next": c.btpo_next, "other_block": c.btpo_prev}),
                );
            }
            1 => {}
            n => {
                let from: Vec<Value> = b
                    .downs
                    .iter()
                    .map(|d| json!({"block": d.parent, "offset": d.offnum}))
                    .collect();
                let parents: Vec<u32> = b.downs.iter().map(|d| d.parent).collect();
                let list = parents
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ");
                let other = parents[1];
                self.candidate(
                    w.unless(Unless::ParentReported(parents)),
                    b.blkno,
                    K::BtreeDownlinkInvalid,
                    format!(
                        "{n} downlinks point at this page (from blocks {list}), a page has one"
                    ),
                    json!({"downlinks": from, "other_block": other}),
                );
            }
        }
    }
}
