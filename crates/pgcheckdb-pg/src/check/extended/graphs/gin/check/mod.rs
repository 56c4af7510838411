//! The cross-page check of one GIN index: the pages' facts and links are kept in memory, then
//! checked as [`super`] describes once every record was given: the links ([`links`]), the
//! trees they make ([`trees`]) and the pending list ([`pending`]).

use std::collections::HashMap;
use std::ops::Range;

use serde_json::json;

mod links;
mod pending;
mod trees;

use super::flags::*;
use super::{LinkKind, PageFact, PageIssue, Tag};
use crate::check::extended::facts::Reader;
use crate::check::extended::graphs::{GraphCheck, GraphInfo, GraphProblem};

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
        self.out.push(GraphProblem::new(blkno, message, detail));
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
        match Tag::from_byte(tag) {
            Some(Tag::Meta) => {
                if let (Some(head), Some(tail)) = (r.u32(), r.u32()) {
                    self.meta = Some((head, tail));
                }
            }
            Some(Tag::Page) => {
                self.read_page(blkno, &mut r);
            }
            Some(Tag::Link) => {
                self.read_link(blkno, &mut r);
            }
            None => {}
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

    /// What [`super::emit`] found inside single pages.
    fn check_page_issues(&mut self) {
        for b in 0..self.slots.len() as u32 {
            let s = self.slots[b as usize];
            if s.seen != Seen::Sound {
                continue;
            }
            let message = match PageIssue::from_byte(s.fact.issue).unwrap_or(PageIssue::None) {
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
