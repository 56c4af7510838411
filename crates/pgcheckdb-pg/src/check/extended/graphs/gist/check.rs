//! The cross-page check of one GiST index: the whole graph of one index (page flags, the
//! downlinks, the rightlinks of `F_FOLLOW_RIGHT` pages) is gathered in block order, then
//! checked at the end.

use crate::format::page::INVALID_BLOCK_NUMBER;
use std::collections::{HashMap, VecDeque};

use serde_json::json;

use super::{DOWNLINK_TAG, GIST_ROOT_BLKNO, PAGE_TAG};
use crate::check::extended::facts::Reader;
use crate::check::extended::graphs::{GraphCheck, GraphInfo, GraphProblem};
use crate::format::gist::flags;

/// What is known of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// No record: not read (or not yet seen).
    NotRead,
    Damaged,
    New,
    /// A sound GiST page and its flags.
    Page(u16),
}

impl Slot {
    /// A sound page that is not deleted: one a downlink may name.
    fn live(self) -> Option<u16> {
        match self {
            Slot::Page(f) if f & flags::F_DELETED == 0 => Some(f),
            _ => None,
        }
    }
}

/// One downlink: the internal page and tuple holding it, and the child it names.
#[derive(Debug, Clone, Copy)]
struct Downlink {
    parent: u32,
    offset: u16,
    child: u32,
}

/// The cross-page check of one GiST index.
pub struct Check {
    blocks: u64,
    slots: Vec<Slot>,
    /// Rightlinks of `F_FOLLOW_RIGHT` pages.
    follow_right: HashMap<u32, u32>,
    downlinks: Vec<Downlink>,
}

impl Check {
    pub fn new(info: &GraphInfo) -> Check {
        let n = usize::try_from(info.blocks).unwrap_or(0);
        Check {
            blocks: info.blocks,
            slots: vec![Slot::NotRead; n],
            follow_right: HashMap::new(),
            downlinks: Vec::new(),
        }
    }

    fn set(&mut self, blkno: u32, slot: Slot) {
        if let Some(s) = self.slots.get_mut(blkno as usize) {
            *s = slot;
        }
    }

    fn slot(&self, blkno: u32) -> Slot {
        self.slots
            .get(blkno as usize)
            .copied()
            .unwrap_or(Slot::NotRead)
    }

    /// Downlinks that name a block no downlink may name; the others (whose child is a sound
    /// live page, or could not be read) are kept in `self.downlinks`.
    fn bad_targets(&mut self, out: &mut Vec<GraphProblem>) {
        let blocks = self.blocks;
        let mut kept = Vec::with_capacity(self.downlinks.len());
        for d in std::mem::take(&mut self.downlinks) {
            let why = if d.child as u64 >= blocks {
                Some(format!("beyond the index's {blocks} blocks"))
            } else if d.child == GIST_ROOT_BLKNO {
                Some("the root page".to_string())
            } else {
                match self.slot(d.child) {
                    Slot::New => Some("an all-zero (never written) page".to_string()),
                    Slot::Page(f) if f & flags::F_DELETED != 0 => {
                        Some("a deleted page (F_DELETED)".to_string())
                    }
                    _ => None,
                }
            };
            match why {
                Some(why) => out.push(GraphProblem::new(
                    d.parent,
                    format!(
                        "downlink at offset {} names block {}: {why}",
                        d.offset, d.child
                    ),
                    json!({"offset": d.offset, "child": d.child}),
                )),
                None => kept.push(d),
            }
        }
        self.downlinks = kept;
    }

    /// Pages named by more than one downlink.
    fn shared_children(&self, out: &mut Vec<GraphProblem>) {
        let mut by_child: Vec<&Downlink> = self.downlinks.iter().collect();
        by_child.sort_by_key(|d| (d.child, d.parent, d.offset));
        for group in by_child.chunk_by(|a, b| a.child == b.child) {
            if group.len() < 2 {
                continue;
            }
            let parents: Vec<_> = group
                .iter()
                .map(|d| json!({"block": d.parent, "offset": d.offset}))
                .collect();
            out.push(GraphProblem::new(
                group[0].child,
                format!("page is named by {} downlinks", group.len()),
                json!({"parents": parents}),
            ));
        }
    }

    /// Depth from the root of every page reached through downlinks and the rightlinks of
    /// `F_FOLLOW_RIGHT` pages (same depth); `u32::MAX` for the others.
    fn depths(&self, children: &HashMap<u32, Vec<Downlink>>) -> Vec<u32> {
        let mut depth = vec![u32::MAX; self.slots.len()];
        let mut queue = VecDeque::new();
        depth[GIST_ROOT_BLKNO as usize] = 0;
        queue.push_back(GIST_ROOT_BLKNO);
        while let Some(b) = queue.pop_front() {
            let d = depth[b as usize];
            if let Some(&right) = self.follow_right.get(&b) {
                if self.slot(right).live().is_some() && depth[right as usize] == u32::MAX {
                    depth[right as usize] = d;
                    queue.push_front(right);
                }
            }
            for c in children.get(&b).into_iter().flatten() {
                if self.slot(c.child).live().is_some() && depth[c.child as usize] == u32::MAX {
                    depth[c.child as usize] = d + 1;
                    queue.push_back(c.child);
                }
            }
        }
        depth
    }

    /// Internal pages whose children are not leaves exactly at the leaves' depth.
    fn levels(&self, out: &mut Vec<GraphProblem>) {
        let Some(root_flags) = self.slots.first().and_then(|s| s.live()) else {
            return;
        };
        if root_flags & flags::F_LEAF != 0 {
            return;
        }
        let mut children: HashMap<u32, Vec<Downlink>> = HashMap::new();
        for d in &self.downlinks {
            children.entry(d.parent).or_default().push(*d);
        }
        let depth = self.depths(&children);
        let mut leaf_depths: HashMap<u32, u64> = HashMap::new();
        for (b, s) in self.slots.iter().enumerate() {
            if matches!(s.live(), Some(f) if f & flags::F_LEAF != 0) && depth[b] != u32::MAX {
                *leaf_depths.entry(depth[b]).or_default() += 1;
            }
        }
        let Some(leaf_depth) = leaf_depths
            .iter()
            .max_by_key(|&(d, n)| (*n, std::cmp::Reverse(*d)))
            .map(|(d, _)| *d)
        else {
            return;
        };
        let mut parents: Vec<_> = children.keys().copied().collect();
        parents.sort_unstable();
        for p in parents {
            let d = depth[p as usize];
            // A page at or below the leaves' depth is itself the wrong child of its parent,
            // reported there.
            if d == u32::MAX || d >= leaf_depth || self.slot(p).live().is_none() {
                continue;
            }
            let expect_leaf = d + 1 == leaf_depth;
            let wrong = children[&p].iter().find(|c| {
                matches!(self.slot(c.child).live(), Some(f) if (f & flags::F_LEAF != 0) != expect_leaf)
            });
            if let Some(c) = wrong {
                let what = if expect_leaf {
                    "an internal page at the depth of the index's leaves".to_string()
                } else {
                    format!("a leaf, but the index's leaves are at depth {leaf_depth}")
                };
                out.push(GraphProblem::new(
                    p,
                    format!(
                        "child block {} (offset {}) is at depth {} and is {what}",
                        c.child,
                        c.offset,
                        d + 1
                    ),
                    json!({"child": c.child, "offset": c.offset, "depth": d + 1,
                           "leaf_depth": leaf_depth}),
                ));
            }
        }
    }
}

impl GraphCheck for Check {
    fn record(&mut self, blkno: u32, body: &[u8]) {
        let mut r = Reader::body(body);
        match r.u8() {
            Some(PAGE_TAG) => {
                let (Some(f), Some(right)) = (r.u16(), r.u32()) else {
                    return;
                };
                self.set(blkno, Slot::Page(f));
                if f & flags::F_FOLLOW_RIGHT != 0
                    && f & flags::F_DELETED == 0
                    && right != INVALID_BLOCK_NUMBER
                {
                    self.follow_right.insert(blkno, right);
                }
            }
            Some(DOWNLINK_TAG) => {
                if let (Some(child), Some(offset)) = (r.u32(), r.u16()) {
                    self.downlinks.push(Downlink {
                        parent: blkno,
                        offset,
                        child,
                    });
                }
            }
            _ => {}
        }
    }

    fn damaged(&mut self, blkno: u32) {
        self.set(blkno, Slot::Damaged);
    }

    fn new_page(&mut self, blkno: u32) {
        self.set(blkno, Slot::New);
    }

    fn finish(mut self: Box<Self>) -> Vec<GraphProblem> {
        let mut out = Vec::new();
        if let Some(Slot::Page(f)) = self.slots.first() {
            if f & flags::F_DELETED != 0 {
                out.push(GraphProblem::new(
                    GIST_ROOT_BLKNO,
                    "the root page is marked deleted (F_DELETED)".into(),
                    json!({"flags": f}),
                ));
            }
        }
        self.bad_targets(&mut out);
        self.shared_children(&mut out);
        self.levels(&mut out);
        out.sort_by_key(|p| p.blkno);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(blocks: u64) -> GraphInfo {
        crate::check::extended::graphs::testing::info(
            crate::check::extended::graphs::GraphAm::Gist,
            blocks,
        )
    }

    fn page(c: &mut Check, b: u32, f: u16, right: u32) {
        let mut body = vec![PAGE_TAG];
        body.extend_from_slice(&f.to_be_bytes());
        body.extend_from_slice(&right.to_be_bytes());
        c.record(b, &body);
    }

    fn link(c: &mut Check, parent: u32, child: u32, off: u16) {
        let mut body = vec![DOWNLINK_TAG];
        body.extend_from_slice(&child.to_be_bytes());
        body.extend_from_slice(&off.to_be_bytes());
        c.record(parent, &body);
    }

    /// Root 0 -> internal 1, 2 -> leaves 3, 4 (under 1) and 5 (under 2).
    fn tree() -> Check {
        let mut c = Check::new(&info(7));
        page(&mut c, 0, 0, INVALID_BLOCK_NUMBER);
        link(&mut c, 0, 1, 1);
        link(&mut c, 0, 2, 2);
        page(&mut c, 1, 0, 2);
        link(&mut c, 1, 3, 1);
        link(&mut c, 1, 4, 2);
        page(&mut c, 2, 0, INVALID_BLOCK_NUMBER);
        link(&mut c, 2, 5, 1);
        for b in 3..6 {
            page(&mut c, b, flags::F_LEAF, INVALID_BLOCK_NUMBER);
        }
        c
    }

    fn blocks(c: Check) -> Vec<u64> {
        Box::new(c).finish().iter().map(|p| p.blkno).collect()
    }

    #[test]
    fn a_sound_tree_with_an_incomplete_split_and_a_deleted_page_is_clean() {
        let mut c = tree();
        // Leaf 5 split into 5 and 6; the downlink to 6 was never inserted.
        page(&mut c, 5, flags::F_LEAF | flags::F_FOLLOW_RIGHT, 6);
        page(&mut c, 6, flags::F_LEAF, INVALID_BLOCK_NUMBER);
        assert!(blocks(c).is_empty());
        let mut c = tree();
        page(
            &mut c,
            6,
            flags::F_LEAF | flags::F_DELETED,
            INVALID_BLOCK_NUMBER,
        );
        assert!(blocks(c).is_empty());
    }

    #[test]
    fn bad_downlinks_are_found_at_their_parent() {
        let mut c = tree();
        link(&mut c, 2, 9, 2); // beyond the index
        assert_eq!(blocks(c), vec![2]);
        let mut c = tree();
        link(&mut c, 2, 0, 2); // the root
        assert_eq!(blocks(c), vec![2]);
        let mut c = tree();
        page(
            &mut c,
            6,
            flags::F_LEAF | flags::F_DELETED,
            INVALID_BLOCK_NUMBER,
        );
        link(&mut c, 2, 6, 2);
        assert_eq!(blocks(c), vec![2]);
        let mut c = tree();
        c.new_page(6);
        link(&mut c, 2, 6, 2);
        assert_eq!(blocks(c), vec![2]);
        // A damaged child says nothing.
        let mut c = tree();
        c.damaged(6);
        link(&mut c, 2, 6, 2);
        assert!(blocks(c).is_empty());
    }

    #[test]
    fn shared_children_and_wrong_levels_are_found() {
        let mut c = tree();
        link(&mut c, 2, 4, 2);
        assert_eq!(blocks(c), vec![4]);
        // Leaf 3 is an internal page one level too low (its own child 6 is a leaf).
        let mut c = tree();
        page(&mut c, 3, 0, INVALID_BLOCK_NUMBER);
        link(&mut c, 3, 6, 1);
        page(&mut c, 6, flags::F_LEAF, INVALID_BLOCK_NUMBER);
        assert_eq!(blocks(c), vec![1]);
        // The root names a leaf directly.
        let mut c = tree();
        link(&mut c, 0, 6, 3);
        page(&mut c, 6, flags::F_LEAF, INVALID_BLOCK_NUMBER);
        assert_eq!(blocks(c), vec![0]);
    }
}
