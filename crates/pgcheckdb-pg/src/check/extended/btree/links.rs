//! The links of a B-tree, checked where the stream meets their target block: the metapage's
//! root and fast root, sibling links both ways, deleted pages unlinked and not from the future.

use serde_json::json;

use super::block::Block;
use super::records::{LeftRec, RightRec};
use super::{IndexCheck, Phase, PrevMismatch, Unless, Where};
use crate::finding::FindingKind as K;
use crate::format::btree::{flags as bf, P_NONE};

impl IndexCheck<'_> {
    /// A deleted page (PostgreSQL 14+, `BTP_HAS_FULLXID`) stores the next full transaction id
    /// of the moment it was deleted; a value newer than the cluster's `nextXid` is impossible.
    pub(super) fn deleted_xid(&mut self, b: &Block<'_>) {
        let (Some(next), Some(p)) = (self.next_full_xid, b.deleted()) else {
            return;
        };
        let Some(x) = p.safexid.filter(|&x| x > next) else {
            return;
        };
        self.candidate(
            Where::new(Phase::DeletedXids, b.blkno, 0).level(p.btpo_level),
            b.blkno,
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

    /// A link from live page `from` to deleted page `b` whose own link (`agrees`) still
    /// returns it: the deleted flag is the odd fact (a deleted page is unlinked from its
    /// siblings and parent in the same step), so it is reported at the deleted page.
    pub(super) fn deleted_but_linked(
        &mut self,
        w: Where,
        b: &Block<'_>,
        agrees: bool,
        from: u32,
        link: &str,
    ) -> bool {
        let Some(d) = b.deleted() else {
            return false;
        };
        if !agrees {
            return false;
        }
        self.candidate(
            w.level(d.btpo_level),
            b.blkno,
            K::BtreeLinkInvalid,
            format!("page is flagged deleted, but block {from} still points at it ({link}); a deleted page is unlinked from its siblings and parent"),
            json!({"btpo_flags": d.btpo_flags, "other_block": from, "link": link}),
        );
        true
    }

    /// The metapage's view of this block: it is the root or fast root the metapage names, at
    /// the level it records; no page is above the root's level or flagged root but another.
    pub(super) fn metapage_block(&mut self, b: &Block<'_>) {
        let Some(meta) = self.meta else {
            return;
        };
        if meta.root != P_NONE && b.blkno == meta.root {
            self.root_seen = true;
            self.meta_target(b, "root", meta.level, true, 0);
        }
        if meta.fastroot != P_NONE && b.blkno == meta.fastroot {
            self.fastroot_seen = true;
            self.meta_target(b, "fast root", meta.fastlevel, false, 1);
        }
        let Some(p) = b.live() else {
            return;
        };
        let (blkno, level) = (b.blkno, p.btpo_level);
        if meta.root != P_NONE && level > meta.level {
            self.candidate(
                Where::new(Phase::Metapage, blkno, 2).level(level),
                blkno,
                K::BtreeLevelInvalid,
                format!("page has level {level}, above the root's level {} (metapage root is block {})", meta.level, meta.root),
                json!({"btpo_level": level, "other_block": 0, "btm_root": meta.root, "btm_level": meta.level}),
            );
        }
        if p.flagged(bf::BTP_ROOT) && blkno != meta.root {
            self.candidate(
                Where::new(Phase::Metapage, blkno, 3).level(level),
                blkno,
                K::BtreeLinkInvalid,
                format!("page is flagged BTP_ROOT but the metapage (block 0) names block {} as the root", meta.root),
                json!({"other_block": 0, "btm_root": meta.root}),
            );
        }
    }

    /// The metapage's root or fast root `b` must be a live page of `level`; the root must
    /// also be flagged and have no siblings (unless its split is incomplete).
    fn meta_target(&mut self, b: &Block<'_>, what: &str, level: u32, is_root: bool, sub: u32) {
        let target = b.blkno;
        let w = Where::new(Phase::Metapage, 0, sub);
        let Some(p) = b.live() else {
            if let Some(why) = b.not_live_reason() {
                self.meta_target_missing(what, target, level, sub, why);
            }
            return;
        };
        if p.btpo_level != level {
            self.candidate(
                w.clone(),
                0,
                K::BtreeLevelInvalid,
                format!(
                    "metapage says the {what} block {target} is at level {level}, but the page has level {}",
                    p.btpo_level
                ),
                json!({"other_block": target, "btm_level": level, "btpo_level": p.btpo_level}),
            );
        }
        let incomplete = p.flagged(bf::BTP_INCOMPLETE_SPLIT);
        if is_root && !incomplete {
            let not_root = !p.flagged(bf::BTP_ROOT);
            let siblings = p.btpo_prev != P_NONE || p.btpo_next != P_NONE;
            if not_root || siblings {
                self.candidate(
                    w,
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

    /// The metapage names a root or fast root that is not a live page.
    pub(super) fn meta_target_missing(
        &mut self,
        what: &str,
        target: u32,
        level: u32,
        sub: u32,
        why: String,
    ) {
        self.candidate(
            Where::new(Phase::Metapage, 0, sub),
            0,
            K::BtreeLinkInvalid,
            format!("metapage {what} is block {target}, but {why}"),
            json!({"other_block": target, "btm_level": level}),
        );
    }

    /// Live page `a.from` names this block `b` as `btpo_next`: `b` must name it back. When it
    /// does not, the page whose link no neighbour supports is blamed.
    pub(super) fn next_link(&mut self, b: &Block<'_>, a: &LeftRec) {
        let w = Where::new(Phase::Siblings, a.from, 0);
        let b_blk = b.blkno;
        let Some(bp) = b.live() else {
            let agrees = b.deleted().is_some_and(|d| d.btpo_prev == a.from);
            if self.deleted_but_linked(w.clone(), b, agrees, a.from, "btpo_next") {
                return;
            }
            if let Some(why) = b.not_live_reason() {
                self.candidate(
                    w.level(a.level),
                    a.from,
                    K::BtreeLinkInvalid,
                    format!("btpo_next is {b_blk}, but {why}"),
                    json!({"btpo_next": b_blk, "other_block": b_blk}),
                );
            }
            return;
        };
        if bp.btpo_prev == a.from {
            return;
        }
        let c_blk = bp.btpo_prev;
        let w = w.unless(Unless::Damaged(c_blk));
        // Block C names B as its right sibling too.
        if b.left.iter().any(|l| l.from == c_blk) {
            self.candidate(
                w.level(a.level),
                a.from,
                K::BtreeLinkInvalid,
                format!("btpo_next is {b_blk}, but block {b_blk}'s btpo_prev is {c_blk}, whose btpo_next is {b_blk}"),
                json!({"btpo_next": b_blk, "other_block": b_blk, "other_btpo_prev": c_blk}),
            );
        } else {
            self.candidate(
                w.level(bp.btpo_level),
                b_blk,
                K::BtreeLinkInvalid,
                format!("btpo_prev is {c_blk}, but block {} has btpo_next {b_blk} and block {c_blk} does not", a.from),
                json!({"btpo_prev": c_blk, "other_block": a.from}),
            );
        }
    }

    /// Live page `r.from` names this block `c` as `btpo_prev`: `c` must name it back. When it
    /// does not, who is blamed also depends on the claims `r.from` received, so the decision
    /// waits for the end of the stream.
    pub(super) fn prev_link(&mut self, c: &Block<'_>, r: &RightRec<'_>) {
        let w = Where::new(Phase::Siblings, r.from, 1);
        let c_blk = c.blkno;
        let Some(cp) = c.live() else {
            let agrees = c.deleted().is_some_and(|d| d.btpo_next == r.from);
            if self.deleted_but_linked(w.clone(), c, agrees, r.from, "btpo_prev") {
                return;
            }
            if let Some(why) = c.not_live_reason() {
                self.candidate(
                    w.level(r.level),
                    r.from,
                    K::BtreeLinkInvalid,
                    format!("btpo_prev is {c_blk}, but {why}"),
                    json!({"btpo_prev": c_blk, "other_block": c_blk}),
                );
            }
            return;
        };
        if cp.btpo_next == r.from {
            return;
        }
        let d = cp.btpo_next;
        self.prev_mismatches.push(PrevMismatch {
            b: r.from,
            b_level: r.level,
            c: c_blk,
            c_level: cp.btpo_level,
            d,
            d_supports_c: c.right.iter().any(|x| x.from == d),
        });
    }

    /// Decides a [`PrevMismatch`] once every block has passed.
    pub(super) fn prev_mismatch(&mut self, m: &PrevMismatch) {
        if self.damaged.contains(&m.d) {
            return;
        }
        let (b, c, d) = (m.b, m.c, m.d);
        // Another page whose btpo_next is B also says B's btpo_prev is the wrong link.
        let b_claimed = self.claimed_by_other.get(&b).copied().unwrap_or(false);
        let w = Where::new(Phase::Siblings, b, 1);
        if m.d_supports_c || b_claimed {
            self.candidate(
                w.level(m.b_level),
                b,
                K::BtreeLinkInvalid,
                format!(
                    "btpo_prev is {c}, but block {c}'s btpo_next is {d}, whose btpo_prev is {c}"
                ),
                json!({"btpo_prev": c, "other_block": c, "other_btpo_next": d}),
            );
        } else {
            self.candidate(
                w.level(m.c_level),
                c,
                K::BtreeLinkInvalid,
                format!("btpo_next is {d}, but block {b} has btpo_prev {c} and block {d} does not"),
                json!({"btpo_next": d, "other_block": b}),
            );
        }
    }
}
