//! The cross-page check of one GIN index: the pages' facts and links are kept in memory, then
//! checked as [`super`] describes once every record was given.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use serde_json::json;

use super::flags::*;
use super::{tid_text, LinkKind, PageFact, PageIssue, Tag, GIN_ROOT_BLKNO, INVALID_BLOCK};
use crate::extended::facts::Reader;
use crate::extended::graphs::{GraphCheck, GraphInfo, GraphProblem};

/// No block (no parent, no tree).
const NONE: u32 = u32::MAX;

/// What is known of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Seen {
    /// No record: the block was not read, nothing may be concluded from it.
    #[default]
    Unread,
    Damaged,
    /// All zeros.
    New,
    /// A sound page whose fact is in [`Slot::fact`].
    Sound,
}

/// One block's fact and its place in the graph.
#[derive(Debug, Clone, Copy)]
struct Slot {
    seen: Seen,
    fact: PageFact,
    /// The page holding the one link to this page whose target kind is right.
    parent: u32,
    /// The root of the tree (entry tree or posting tree) reaching this page, and how deep;
    /// [`NONE`] when not reached from the entry tree's root.
    tree: u32,
    depth: u16,
    /// The page whose link (downlink, or rightlink of an unfinished split) reached it.
    via: u32,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            seen: Seen::Unread,
            fact: PageFact::default(),
            parent: NONE,
            tree: NONE,
            depth: 0,
            via: NONE,
        }
    }
}

/// One link, as recorded.
#[derive(Debug, Clone, Copy)]
struct Link {
    parent: u32,
    child: u32,
    kind: LinkKind,
    bounded: bool,
    key: u64,
}

/// The cross-page check of one GIN index.
pub struct Check {
    slots: Vec<Slot>,
    links: Vec<Link>,
    /// The metapage's pending list (`head`, `tail`).
    meta: Option<(u32, u32)>,
    out: Vec<GraphProblem>,
}

impl Check {
    pub fn new(info: &GraphInfo) -> Check {
        let blocks = info.blocks.min(u32::MAX as u64) as usize;
        Check {
            slots: vec![Slot::default(); blocks],
            links: Vec::new(),
            meta: None,
            out: Vec::new(),
        }
    }

    fn mark(&mut self, blkno: u32, seen: Seen) {
        if let Some(s) = self.slots.get_mut(blkno as usize) {
            s.seen = seen;
        }
    }

    /// The fact of a sound block.
    fn fact(&self, blkno: u32) -> Option<&PageFact> {
        let s = self.slots.get(blkno as usize)?;
        (s.seen == Seen::Sound).then_some(&s.fact)
    }

    fn problem(&mut self, blkno: u32, message: String, detail: serde_json::Value) {
        self.out.push(GraphProblem {
            blkno: blkno as u64,
            message,
            detail,
        });
    }

    fn read_page(&mut self, blkno: u32, r: &mut Reader<'_>) -> Option<()> {
        let fact = PageFact {
            flags: r.u16()?,
            rightlink: r.u32()?,
            issue: r.u8()?,
            issue_at: r.u16()?,
            has_range: r.u8()? != 0,
            lo: r.u64()?,
            hi: r.u64()?,
        };
        let s = self.slots.get_mut(blkno as usize)?;
        s.seen = Seen::Sound;
        s.fact = fact;
        Some(())
    }

    fn read_link(&mut self, parent: u32, r: &mut Reader<'_>) -> Option<()> {
        let child = r.u32()?;
        let kind = LinkKind::from_byte(r.u8()?)?;
        let bounded = r.u8()? != 0;
        let key = r.u64()?;
        self.links.push(Link {
            parent,
            child,
            kind,
            bounded,
            key,
        });
        Some(())
    }
}

impl GraphCheck for Check {
    fn record(&mut self, blkno: u32, body: &[u8]) {
        let mut r = Reader::body(body);
        let Some(tag) = r.u8() else {
            return;
        };
        if tag == Tag::Meta as u8 {
            if let (Some(head), Some(tail)) = (r.u32(), r.u32()) {
                self.meta = Some((head, tail));
            }
        } else if tag == Tag::Page as u8 {
            self.read_page(blkno, &mut r);
        } else if tag == Tag::Link as u8 {
            self.read_link(blkno, &mut r);
        }
    }

    fn damaged(&mut self, blkno: u32) {
        self.mark(blkno, Seen::Damaged);
    }

    fn new_page(&mut self, blkno: u32) {
        self.mark(blkno, Seen::New);
    }

    fn finish(mut self: Box<Self>) -> Vec<GraphProblem> {
        self.check_links();
        let by_parent = links_by_parent(&self.links);
        if self.walk_entry_tree(&by_parent) {
            self.check_entry_reachability();
        }
        self.check_rightlinks();
        self.check_bounds();
        self.check_pending_list();
        self.check_page_issues();
        let mut out = std::mem::take(&mut self.out);
        out.sort_by_key(|p| p.blkno);
        out
    }
}

/// Each parent's links, as a range of `links` (they arrive in parent order).
fn links_by_parent(links: &[Link]) -> HashMap<u32, Range<usize>> {
    let mut map: HashMap<u32, Range<usize>> = HashMap::new();
    for (i, l) in links.iter().enumerate() {
        map.entry(l.parent)
            .and_modify(|r| r.end = i + 1)
            .or_insert(i..i + 1);
    }
    map
}

/// What a page is, in words.
fn describe(f: &PageFact) -> &'static str {
    if f.is(GIN_META) {
        "the metapage"
    } else if f.is(GIN_DELETED) {
        "a deleted page"
    } else if f.is(GIN_LIST) {
        "a pending-list page"
    } else if f.is(GIN_DATA) {
        if f.is_leaf() {
            "a posting-tree leaf page"
        } else {
            "an internal posting-tree page"
        }
    } else if f.is_leaf() {
        "an entry-tree leaf page"
    } else {
        "an internal entry-tree page"
    }
}

fn level_word(leaf: bool) -> &'static str {
    if leaf {
        "leaf"
    } else {
        "internal"
    }
}

impl Check {
    /// Where a link or rightlink leads, when that can be judged: `Err` with the reason it is
    /// wrong whatever the page's kind (beyond the index, all zeros), `Ok(None)` when the
    /// block is unknown (not read, damaged), else its fact.
    fn target(&self, blkno: u32) -> Result<Option<PageFact>, String> {
        let Some(s) = self.slots.get(blkno as usize) else {
            return Err(format!(
                "block {blkno}, beyond the index's {} blocks",
                self.slots.len()
            ));
        };
        match s.seen {
            Seen::Unread | Seen::Damaged => Ok(None),
            Seen::New => Err(format!("block {blkno}, an all-zero (new) page")),
            Seen::Sound => Ok(Some(s.fact)),
        }
    }

    /// Every link: inside the index, at a page of the right kind, the only link to it; the
    /// children of one page all leaves or all internal pages.
    fn check_links(&mut self) {
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

    /// Walks the entry tree from its root and each posting tree from its root named by a
    /// reached entry leaf; checks that each tree's leaves are at one depth. False when the
    /// entry tree could not be walked (its root unknown or not an entry page).
    fn walk_entry_tree(&mut self, by_parent: &HashMap<u32, Range<usize>>) -> bool {
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
                && f.rightlink != INVALID_BLOCK
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
    fn check_entry_reachability(&mut self) {
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

    /// Rightlinks of entry-tree pages, and of posting-tree pages reached by downlinks.
    fn check_rightlinks(&mut self) {
        for b in 0..self.slots.len() as u32 {
            let s = self.slots[b as usize];
            if s.seen != Seen::Sound || s.fact.rightlink == INVALID_BLOCK {
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
    fn check_bounds(&mut self) {
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

    /// The pending list: from the metapage's head through rightlinks, live pending-list pages
    /// up to the tail, whose rightlink ends the list.
    fn check_pending_list(&mut self) {
        let Some((head, tail)) = self.meta else {
            return;
        };
        if head == INVALID_BLOCK {
            return;
        }
        let (mut from, mut cur) = (0u32, head);
        for _ in 0..=self.slots.len() {
            let f = match self.target(cur) {
                Err(wrong) => {
                    self.problem(
                        from,
                        format!("pending list leads to {wrong}"),
                        json!({"next": cur}),
                    );
                    return;
                }
                Ok(None) => return,
                Ok(Some(f)) => f,
            };
            if !f.is(GIN_LIST) || f.is(GIN_DELETED) {
                self.problem(
                    from,
                    format!("pending list leads to block {cur}, {}", describe(&f)),
                    json!({"next": cur, "next_flags": f.flags}),
                );
                return;
            }
            if cur == tail {
                if f.rightlink != INVALID_BLOCK {
                    self.problem(
                        cur,
                        format!(
                            "the pending list's tail has rightlink {}, not the list's end",
                            f.rightlink
                        ),
                        json!({"right": f.rightlink}),
                    );
                }
                return;
            }
            if f.rightlink == INVALID_BLOCK {
                self.problem(
                    cur,
                    format!("the pending list ends here, before its tail {tail}"),
                    json!({"tail": tail}),
                );
                return;
            }
            (from, cur) = (cur, f.rightlink);
        }
        self.problem(
            0,
            format!("the pending list from block {head} loops without reaching its tail {tail}"),
            json!({"head": head, "tail": tail}),
        );
    }

    /// What [`super::emit`] found inside single pages.
    fn check_page_issues(&mut self) {
        for b in 0..self.slots.len() as u32 {
            let s = self.slots[b as usize];
            if s.seen != Seen::Sound {
                continue;
            }
            let message = match PageIssue::from_byte(s.fact.issue) {
                PageIssue::None => continue,
                PageIssue::TidsOutOfOrder => {
                    format!("heap TID {} does not ascend", s.fact.issue_at + 1)
                }
                PageIssue::KeysOutOfOrder => {
                    format!(
                        "posting item {} has a key below the one before",
                        s.fact.issue_at
                    )
                }
            };
            self.problem(b, message, json!({"item": s.fact.issue_at}));
        }
    }
}
