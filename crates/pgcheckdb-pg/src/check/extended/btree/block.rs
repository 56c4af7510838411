//! One block's facts as the stream delivers them: the page's own fact (or its damaged mark)
//! and every claim other pages make about it; each check that needs this block runs here.

use crate::format::page::INVALID_BLOCK_NUMBER;
use serde_json::json;

use super::records::{DownlinkRec, LeftRec, PageRec, Record, RightRec, RunRec};
use super::{IndexCheck, LevelCount, Phase, Where};
use crate::check::extended::unique::RunsAt;
use crate::finding::FindingKind as K;
use crate::format::btree::{flags as bf, P_NONE};

/// Everything known about one block.
#[derive(Debug, Default)]
pub(crate) struct Block<'r> {
    pub blkno: u32,
    pub damaged: bool,
    pub page: Option<PageRec<'r>>,
    /// Live pages naming this block as `btpo_next`.
    pub left: Vec<LeftRec>,
    /// Live pages naming this block as `btpo_prev`.
    pub right: Vec<RightRec<'r>>,
    /// Downlinks to this block, from live parents.
    pub downs: Vec<DownlinkRec<'r>>,
    /// Live half-dead leaves naming this block as their top parent.
    pub tops: Vec<u32>,
    pub first_run: Option<RunRec<'r>>,
    pub last_runs: Vec<RunRec<'r>>,
}

impl<'r> Block<'r> {
    fn gather(blkno: u32, recs: Vec<Record<'r>>) -> Block<'r> {
        let mut b = Block {
            blkno,
            ..Block::default()
        };
        for rec in recs {
            match rec {
                Record::Damaged => b.damaged = true,
                Record::Page(p) => b.page = Some(p),
                Record::Left(l) => b.left.push(l),
                Record::Right(r) => b.right.push(r),
                Record::Downlink(d) => b.downs.push(d),
                Record::TopParent(t) => b.tops.push(t.leaf),
                Record::FirstRun(r) => b.first_run = Some(r),
                Record::LastRun(r) => b.last_runs.push(r),
            }
        }
        b
    }

    /// The page, when it is live (not deleted, not damaged).
    pub fn live(&self) -> Option<&PageRec<'r>> {
        self.page.as_ref().filter(|p| !p.deleted())
    }

    /// The page, when it is flagged deleted.
    pub fn deleted(&self) -> Option<&PageRec<'r>> {
        self.page.as_ref().filter(|p| p.deleted())
    }

    /// What this block is, for messages about a link to it that is not a live page; `None`
    /// when it is damaged (reported by its own checks; nothing concluded).
    pub fn not_live_reason(&self) -> Option<String> {
        let blkno = self.blkno;
        if self.damaged {
            return None;
        }
        Some(match self.page {
            Some(_) => format!("block {blkno} is a deleted page"),
            None => not_in_use(blkno),
        })
    }
}

/// Why a block with no fact at all is not a live page.
pub(super) fn not_in_use(blkno: u32) -> String {
    match blkno {
        0 => "block 0 is the metapage".to_string(),
        _ => format!("block {blkno} is not a B-tree page in use (all zero or missing)"),
    }
}

impl IndexCheck<'_> {
    /// Every check that needs block `blkno`'s facts.
    pub(super) fn block(&mut self, blkno: u32, recs: Vec<Record<'_>>) {
        let b = Block::gather(blkno, recs);
        if b.damaged {
            self.damaged.insert(blkno);
        }
        self.metapage_block(&b);
        self.deleted_xid(&b);
        for a in &b.left {
            self.next_link(&b, a);
        }
        for r in &b.right {
            self.prev_link(&b, r);
        }
        self.note_claims(&b);
        for d in &b.downs {
            self.downlink(&b, d);
        }
        self.downlink_count(&b);
        self.half_dead(&b);
        self.key_order(&b);
        self.count_level(&b);
        self.unique.block(&RunsAt {
            blkno: b.blkno,
            first_run: b.first_run.as_ref(),
            last_runs: &b.last_runs,
            live_leaf_prev: b.live().filter(|p| p.btpo_level == 0).map(|p| p.btpo_prev),
        });
    }

    /// What a later decision needs from this block: whether a page other than its
    /// `btpo_prev` names it as right sibling, and its parent when that parent has no other
    /// child.
    fn note_claims(&mut self, b: &Block<'_>) {
        let Some(p) = b.live() else {
            return;
        };
        if p.btpo_prev != P_NONE && !b.left.iter().any(|l| l.from == p.btpo_prev) {
            let other = b.left.iter().any(|l| l.from != p.btpo_prev);
            self.claimed_by_other.insert(b.blkno, other);
        }
        // Only the links a half-dead leaf's way up can take: from the leaf, and from pages
        // with a single child themselves.
        let on_chain = p.flagged(bf::BTP_HALF_DEAD) || p.ndownlinks == 1;
        if let ([d], true) = (b.downs.as_slice(), on_chain) {
            if d.siblings == 1 {
                self.single_parent.insert(b.blkno, d.parent);
            }
        }
    }

    /// Per level: how many pages are leftmost and rightmost.
    fn count_level(&mut self, b: &Block<'_>) {
        let Some(p) = b.live() else {
            return;
        };
        let c = self
            .levels
            .entry(p.btpo_level)
            .or_insert_with(|| LevelCount {
                first_block: b.blkno,
                ..LevelCount::default()
            });
        c.pages += 1;
        for (end, link) in [
            (&mut c.leftmost, p.btpo_prev),
            (&mut c.rightmost, p.btpo_next),
        ] {
            if link == P_NONE {
                end.0 += 1;
                if end.1.len() < 2 {
                    end.1.push(b.blkno);
                }
            }
        }
    }

    /// A half-dead leaf that is its own top parent has no downlink; a page named as a top
    /// parent is live, has no downlink, and leads down to the leaf through single children.
    fn half_dead(&mut self, b: &Block<'_>) {
        if let Some(p) = b.live() {
            let own_top =
                p.flagged(bf::BTP_HALF_DEAD) && p.top_parent == Some(INVALID_BLOCK_NUMBER);
            if let (true, Some(d)) = (own_top, b.downs.first()) {
                self.candidate(
                    Where::new(Phase::HalfDead, b.blkno, 0).level(p.btpo_level),
                    b.blkno,
                    K::BtreeDownlinkInvalid,
                    format!(
                        "half-dead page is its own top parent but block {} still has a downlink to it",
                        d.parent
                    ),
                    json!({"top_parent": INVALID_BLOCK_NUMBER, "other_block": d.parent}),
                );
            }
        }
        for &leaf in &b.tops {
            if let Some(why) = self.top_parent_problem(b, leaf) {
                let top = b.blkno;
                self.candidate(
                    Where::new(Phase::HalfDead, leaf, 0),
                    leaf,
                    K::BtreeDownlinkInvalid,
                    format!("half-dead page names block {top} as its top parent, but {why}"),
                    json!({"top_parent": top, "other_block": top}),
                );
            }
        }
    }

    /// What is wrong with block `top` as the top parent of half-dead `leaf`, as far as this
    /// block tells; the way down to the leaf is followed when the stream has passed.
    fn top_parent_problem(&mut self, top: &Block<'_>, leaf: u32) -> Option<String> {
        let Some(t) = top.live() else {
            return top.not_live_reason();
        };
        if let Some(d) = top.downs.first() {
            return Some(format!(
                "block {} still has a downlink from block {}",
                top.blkno, d.parent
            ));
        }
        self.chains.push((leaf, top.blkno, t.btpo_level));
        None
    }
}
