//! After the stream: the decisions that needed two blocks, the checks of blocks the stream
//! never met (a root that is not there), the per-level leftmost/rightmost counts, and the
//! candidate problems turned into findings — in the order of a whole-tree walk, one per page
//! and kind, dropping those a damaged page may have caused.

use std::collections::HashSet;

use serde_json::json;

use super::block::not_in_use;
use super::problem::Problem;
use super::{Candidate, IndexCheck, IndexOutcome, Phase, Unless, Where};
use crate::finding::FindingKind as K;
use crate::format::btree::P_NONE;

impl IndexCheck<'_> {
    pub(super) fn resolve(&mut self) -> IndexOutcome {
        self.unmet_roots();
        for m in std::mem::take(&mut self.prev_mismatches) {
            self.prev_mismatch(&m);
        }
        for (leaf, top, level) in std::mem::take(&mut self.chains) {
            self.single_child_chain(leaf, top, level);
        }
        let mut found = std::mem::take(&mut self.found);
        found.sort_by_key(|c| (c.phase, c.at, c.sub));
        let mut out = IndexOutcome::default();
        let mut reported: HashSet<(u32, K)> = HashSet::new();
        let mut reported_levels: HashSet<u32> = HashSet::new();
        let (walked, order): (Vec<Candidate>, Vec<Candidate>) =
            found.into_iter().partition(|c| c.phase < Phase::Levels);
        for c in walked {
            if self.applies(&c, &reported) && reported.insert((c.problem.blkno, c.problem.kind)) {
                reported_levels.extend(c.level);
                out.problems.push(c.problem);
            }
        }
        for p in self.level_problems(&reported_levels) {
            if reported.insert((p.blkno, p.kind)) {
                out.problems.push(p);
            }
        }
        for c in order {
            if reported.insert((c.problem.blkno, c.problem.kind)) {
                out.problems.push(c.problem);
            }
        }
        out
    }

    fn applies(&self, c: &Candidate, reported: &HashSet<(u32, K)>) -> bool {
        match &c.unless {
            Unless::Nothing => true,
            Unless::Damaged(b) => !self.damaged.contains(b),
            Unless::AnyDamaged => self.damaged.is_empty(),
            Unless::ParentReported(parents) => !parents
                .iter()
                .any(|&p| reported.contains(&(p, K::BtreeDownlinkInvalid))),
        }
    }

    /// A root or fast root the stream never met has no fact at all.
    fn unmet_roots(&mut self) {
        let Some(meta) = self.meta else {
            return;
        };
        if meta.root != P_NONE && !self.root_seen {
            self.meta_target_missing("root", meta.root, meta.level, 0, not_in_use(meta.root));
        }
        if meta.fastroot != P_NONE && !self.fastroot_seen {
            let why = not_in_use(meta.fastroot);
            self.meta_target_missing("fast root", meta.fastroot, meta.fastlevel, 1, why);
        }
    }

    /// The top parent of a half-dead leaf leads down to it through pages with one downlink
    /// each: walking up from the leaf through single-child parents reaches the top parent.
    fn single_child_chain(&mut self, leaf: u32, top: u32, top_level: u32) {
        let mut at = leaf;
        for _ in 0..=top_level {
            if at == top {
                return;
            }
            match self.single_parent.get(&at) {
                Some(&parent) => at = parent,
                None => break,
            }
        }
        if at == top {
            return;
        }
        self.candidate(
            Where::new(Phase::HalfDead, leaf, 0),
            leaf,
            K::BtreeDownlinkInvalid,
            format!(
                "half-dead page names block {top} as its top parent, but its single-child chain does not lead to block {leaf} (block {at} has no parent with exactly one downlink)"
            ),
            json!({"top_parent": top, "other_block": top}),
        );
    }

    /// Each level is one chain: with sibling links agreeing at every page and one downlink
    /// per page, that is one page with `btpo_prev` P_NONE and one with `btpo_next` P_NONE.
    /// Reported once per level, only when no page of the level was reported already and no
    /// page of the index is damaged.
    fn level_problems(&self, reported_levels: &HashSet<u32>) -> Vec<Problem> {
        let mut out = Vec::new();
        if !self.damaged.is_empty() {
            return out;
        }
        for (&level, c) in &self.levels {
            if reported_levels.contains(&level) {
                continue;
            }
            for (end, link, (count, blocks)) in [
                ("leftmost", "btpo_prev", &c.leftmost),
                ("rightmost", "btpo_next", &c.rightmost),
            ] {
                let problem = match blocks.as_slice() {
                    [] => Problem {
                        blkno: c.first_block,
                        kind: K::BtreeLinkInvalid,
                        message: format!("no page of level {level} has {link} P_NONE: the level has no {end} page"),
                        detail: json!({"level": level, "pages": c.pages}),
                    },
                    [_] => continue,
                    [first, second, ..] => Problem {
                        blkno: *second,
                        kind: K::BtreeLinkInvalid,
                        message: format!("page has {link} P_NONE as block {first} has: level {level} has {count} {end} pages, so it is not one chain"),
                        detail: json!({"level": level, "other_block": first, "pages": c.pages, "pages_without_link": count}),
                    },
                };
                out.push(problem);
                break;
            }
        }
        out
    }
}
