//! The links one by one: where each downlink, posting-tree root and rightlink leads, and
//! whether a posting-tree downlink's key bounds what is below it.

use serde_json::json;

use super::{describe, level_word, Check, Seen, NONE};
use crate::check::extended::graphs::gin::flags::*;
use crate::check::extended::graphs::gin::{tid_text, LinkKind};
use crate::format::page::INVALID_BLOCK_NUMBER;

impl Check {
    /// Every link: inside the index, at a page of the right kind, the only link to it; the
    /// children of one page all leaves or all internal pages.
    pub(super) fn check_links(&mut self) {
        let links = std::mem::take(&mut self.links);
        let mut level_of_children: Option<(u32, u32, bool)> = None;
        let mut mixed_reported = NONE;
        for l in &links {
            let what = l.kind.name();
            let f = match self.target(l.child) {
                Err(wrong) => {
                    self.problem(
                        l.parent,
                        format!("{what} to {wrong}"),
                        json!({"child": l.child, "link": what}),
                    );
                    continue;
                }
                Ok(None) => continue,
                Ok(Some(f)) => f,
            };
            let right_kind = match l.kind {
                LinkKind::EntryDownlink => f.is_entry(),
                LinkKind::PostingRoot | LinkKind::DataDownlink => f.is_live_data(),
            };
            if !right_kind {
                self.problem(
                    l.parent,
                    format!("{what} to block {}, {}", l.child, describe(&f)),
                    json!({"child": l.child, "link": what, "child_flags": f.flags}),
                );
                continue;
            }
            let other = self.slots[l.child as usize].parent;
            if other != NONE {
                self.problem(
                    l.parent,
                    format!(
                        "{what} to block {}, which block {other} also links to",
                        l.child
                    ),
                    json!({"child": l.child, "link": what, "other_parent": other}),
                );
                continue;
            }
            self.slots[l.child as usize].parent = l.parent;
            if l.kind == LinkKind::PostingRoot {
                continue;
            }
            match level_of_children {
                Some((p, first, leaf)) if p == l.parent => {
                    if leaf != f.is_leaf() && mixed_reported != p {
                        mixed_reported = p;
                        self.problem(
                            p,
                            format!(
                                "children of one page on two levels: block {first} is a {} \
                                 page, block {} a {} page",
                                level_word(leaf),
                                l.child,
                                level_word(f.is_leaf())
                            ),
                            json!({"child": l.child, "other_child": first}),
                        );
                    }
                }
                _ => level_of_children = Some((l.parent, l.child, f.is_leaf())),
            }
        }
        self.links = links;
    }

    /// Rightlinks of entry-tree pages, and of posting-tree pages reached by downlinks.
    pub(super) fn check_rightlinks(&mut self) {
        for b in 0..self.slots.len() as u32 {
            let s = self.slots[b as usize];
            if s.seen != Seen::Sound || s.fact.rightlink == INVALID_BLOCK_NUMBER {
                continue;
            }
            let entry = s.fact.is_entry();
            let reached_data = s.fact.is_live_data() && s.tree != NONE;
            if !entry && !reached_data {
                continue;
            }
            let r = s.fact.rightlink;
            let t = match self.target(r) {
                Err(wrong) => {
                    self.problem(b, format!("rightlink to {wrong}"), json!({"right": r}));
                    continue;
                }
                Ok(None) => continue,
                Ok(Some(t)) => t,
            };
            if !entry && t.is(GIN_DELETED) {
                continue;
            }
            let same_kind = if entry {
                t.is_entry()
            } else {
                t.is_live_data()
            };
            let ts = self.slots[r as usize];
            let wrong = if !same_kind {
                Some(format!("rightlink to block {r}, {}", describe(&t)))
            } else if t.is_leaf() != s.fact.is_leaf() {
                Some(format!(
                    "rightlink of a {} page to block {r}, a {} page",
                    level_word(s.fact.is_leaf()),
                    level_word(t.is_leaf())
                ))
            } else if s.tree != NONE && ts.tree != NONE && (ts.tree, ts.depth) != (s.tree, s.depth)
            {
                Some(format!(
                    "rightlink from depth {} of the tree with root {} to block {r}, at depth {} \
                     of the tree with root {}",
                    s.depth, s.tree, ts.depth, ts.tree
                ))
            } else {
                None
            };
            if let Some(message) = wrong {
                self.problem(b, message, json!({"right": r, "right_flags": t.flags}));
                continue;
            }
            let ordered_pair = !entry && t.is_leaf() && ts.tree == s.tree;
            if ordered_pair && s.fact.has_range && t.has_range && t.lo <= s.fact.hi {
                self.problem(
                    r,
                    format!(
                        "first heap TID {} is not above {}, the last of its left sibling {b}",
                        tid_text(t.lo),
                        tid_text(s.fact.hi)
                    ),
                    json!({"left": b}),
                );
            }
        }
    }

    /// The key of each posting-tree downlink of a reached page bounds its child's TIDs/keys.
    pub(super) fn check_bounds(&mut self) {
        let links = std::mem::take(&mut self.links);
        for l in &links {
            if l.kind != LinkKind::DataDownlink || !l.bounded {
                continue;
            }
            let reached = self
                .slots
                .get(l.parent as usize)
                .is_some_and(|p| p.tree != NONE);
            let Some(c) = self.slots.get(l.child as usize).copied() else {
                continue;
            };
            if !reached || c.parent != l.parent || !c.fact.has_range || c.fact.hi <= l.key {
                continue;
            }
            let what = if c.fact.is_leaf() { "heap TID" } else { "key" };
            self.problem(
                l.child,
                format!(
                    "{what} {} above {}, the key of its downlink in block {}",
                    tid_text(c.fact.hi),
                    tid_text(l.key),
                    l.parent
                ),
                json!({"parent": l.parent}),
            );
        }
        self.links = links;
    }
}
