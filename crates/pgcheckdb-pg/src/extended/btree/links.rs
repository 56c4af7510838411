//! The links of a B-tree: the metapage's root and fast root, sibling links both ways, each
//! level one chain, deleted pages unlinked and not from the future.

use std::collections::{BTreeMap, HashSet};

use serde_json::json;

use super::{deleted, flagged, Check};
use crate::extended::facts::PageFact;
use crate::finding::FindingKind as K;
use crate::layout::btree::{flags as bf, P_NONE};

impl Check<'_> {
    /// A deleted page (PostgreSQL 14+, `BTP_HAS_FULLXID`) stores the next full transaction id
    /// of the moment it was deleted; a value newer than the cluster's `nextXid` is impossible.
    pub(super) fn deleted_xids(&mut self, next: u64) {
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
    pub(super) fn deleted_but_linked(
        &mut self,
        target: u32,
        agrees: impl Fn(&PageFact) -> bool,
        from: u32,
        link: &str,
    ) -> bool {
        let Some(d) = self.f.pages.get(&target).filter(|p| deleted(p)) else {
            return false;
        };
        if !agrees(d) {
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

    pub(super) fn metapage(&mut self) {
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
    pub(super) fn meta_target(&mut self, what: &str, target: u32, level: u32, is_root: bool) {
        let detail = json!({"other_block": target, "btm_level": level});
        let Some(p) = self.live(target) else {
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
        let incomplete = flagged(p, bf::BTP_INCOMPLETE_SPLIT);
        if is_root && !incomplete {
            let not_root = !flagged(p, bf::BTP_ROOT);
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
    pub(super) fn siblings(&mut self) {
        let live = self.live_pages();
        for a in &live {
            if a.btpo_next != P_NONE {
                self.next_link(a);
            }
            if a.btpo_prev != P_NONE {
                self.prev_link(a);
            }
        }
    }

    pub(super) fn next_link(&mut self, a: &PageFact) {
        let b_blk = a.btpo_next;
        let Some(b) = self.live(b_blk) else {
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

    pub(super) fn prev_link(&mut self, b: &PageFact) {
        let c_blk = b.btpo_prev;
        let Some(c) = self.live(c_blk) else {
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

    /// Each level is one chain: walking `btpo_next` from the page with `btpo_prev` P_NONE
    /// reaches every live page of the level. Reported once per level, and only when no link of
    /// the level was reported already.
    pub(super) fn levels(&mut self) {
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
}
