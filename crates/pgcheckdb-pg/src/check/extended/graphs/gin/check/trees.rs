//! The trees the links make: the entry tree walked from its root, each posting tree from the
//! root its entry leaf names; leaves at one depth; entry-tree pages all reached.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use serde_json::json;

use super::{describe, level_word, Check, Seen, NONE};
use crate::check::extended::graphs::gin::flags::*;
use crate::check::extended::graphs::gin::{LinkKind, PageFact, GIN_ROOT_BLKNO};
use crate::format::page::INVALID_BLOCK_NUMBER;

impl Check {
    /// Walks the entry tree from its root and each posting tree from its root named by a
    /// reached entry leaf; checks that each tree's leaves are at one depth. False when the
    /// entry tree could not be walked (its root unknown or not an entry page).
    pub(super) fn walk_entry_tree(&mut self, by_parent: &HashMap<u32, Range<usize>>) -> bool {
        let Some(root) = self.fact(GIN_ROOT_BLKNO).copied() else {
            return false;
        };
        if !root.is_entry() {
            self.problem(
                GIN_ROOT_BLKNO,
                format!(
                    "block {GIN_ROOT_BLKNO}, the entry tree's root, is {}",
                    describe(&root)
                ),
                json!({"flags": root.flags}),
            );
            return false;
        }
        let members = self.walk(GIN_ROOT_BLKNO, LinkKind::EntryDownlink, by_parent);
        self.check_depths(GIN_ROOT_BLKNO, &members, "entry tree");
        let roots: Vec<u32> = members
            .iter()
            .filter_map(|b| by_parent.get(b))
            .flat_map(|r| self.links[r.clone()].iter())
            .filter(|l| l.kind == LinkKind::PostingRoot)
            .filter(|l| self.slots.get(l.child as usize).map(|s| s.parent) == Some(l.parent))
            .map(|l| l.child)
            .collect();
        for root in roots {
            let members = self.walk(root, LinkKind::DataDownlink, by_parent);
            self.check_depths(root, &members, "posting tree");
        }
        true
    }

    /// The pages of the tree rooted at `root`, reached by links of `kind` (each child by its
    /// one recorded parent); entry-tree pages also by the rightlink of a page whose split was
    /// not finished, at that page's depth. Marks each with its tree and depth.
    fn walk(
        &mut self,
        root: u32,
        kind: LinkKind,
        by_parent: &HashMap<u32, Range<usize>>,
    ) -> Vec<u32> {
        let mut members = Vec::new();
        let mut queue = VecDeque::from([(root, 0u16, NONE)]);
        while let Some((b, depth, via)) = queue.pop_front() {
            let Some(s) = self.slots.get_mut(b as usize) else {
                continue;
            };
            if s.tree != NONE {
                continue;
            }
            (s.tree, s.depth, s.via) = (root, depth, via);
            members.push(b);
            let f = s.fact;
            for l in by_parent
                .get(&b)
                .map_or(&[][..], |r| &self.links[r.clone()])
            {
                let child_of_b = self.slots.get(l.child as usize).map(|c| c.parent) == Some(b);
                if l.kind == kind && child_of_b {
                    queue.push_back((l.child, depth.saturating_add(1), b));
                }
            }
            if kind == LinkKind::EntryDownlink
                && f.is(GIN_INCOMPLETE_SPLIT)
                && f.rightlink != INVALID_BLOCK_NUMBER
            {
                let r = f.rightlink;
                let orphan_entry = self.fact(r).is_some_and(PageFact::is_entry)
                    && self.slots[r as usize].parent == NONE;
                if orphan_entry {
                    queue.push_back((r, depth, b));
                }
            }
        }
        members
    }

    /// Every leaf of one tree at the depth of its shallowest leaf, every internal page above.
    fn check_depths(&mut self, root: u32, members: &[u32], tree: &str) {
        let leaf_depth = members
            .iter()
            .map(|&b| &self.slots[b as usize])
            .filter(|s| s.fact.is_leaf())
            .map(|s| s.depth)
            .min();
        let Some(leaf_depth) = leaf_depth else {
            return;
        };
        for &b in members {
            let s = self.slots[b as usize];
            let leaf = s.fact.is_leaf();
            if leaf == (s.depth == leaf_depth) && (leaf || s.depth < leaf_depth) {
                continue;
            }
            self.problem(
                if s.via == NONE { b } else { s.via },
                format!(
                    "links to block {b}, a {} page at depth {} of the {tree} with root {root}, \
                     whose leaves are at depth {leaf_depth}",
                    level_word(leaf),
                    s.depth
                ),
                json!({"child": b, "tree_root": root, "depth": s.depth, "leaf_depth": leaf_depth}),
            );
        }
    }

    /// With every block read and sound (or all zeros), every entry-tree page was reached.
    pub(super) fn check_entry_reachability(&mut self) {
        if self
            .slots
            .iter()
            .any(|s| matches!(s.seen, Seen::Unread | Seen::Damaged))
        {
            return;
        }
        for b in 0..self.slots.len() as u32 {
            let s = self.slots[b as usize];
            if s.seen == Seen::Sound && s.fact.is_entry() && s.tree == NONE {
                self.problem(
                    b,
                    "entry-tree page reached neither from the root by downlinks nor by the \
                     rightlink of a page whose split was not finished"
                        .into(),
                    json!({"flags": s.fact.flags}),
                );
            }
        }
    }
}
