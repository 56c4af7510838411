//! The cross-page check of one SP-GiST index: each block's downlinks arrive right after the
//! block's own page record (both keyed by that block), so each downlink is checked against
//! the tuple it names while that block is current, and the chain heads no downlink named are
//! known when the block ends. Memory: the current block's tuple kinds and downlinks, and the
//! blocks with unreached chains.

use serde_json::{json, Value};

use super::{Kind, PageProblem, LINK_TAG, PAGE_TAG, PROBLEM_TAG};
use crate::check::extended::facts::Reader;
use crate::check::extended::graphs::{GraphCheck, GraphInfo, GraphProblem};
use crate::format::spgist::flags;
use crate::format::spgist::SPGIST_LAST_FIXED_BLKNO;

/// What is known of the current block.
#[derive(Debug, Default)]
enum Block {
    /// No record yet: not read (a downlink to it concludes nothing).
    #[default]
    NotRead,
    Damaged,
    New,
    /// A sound page: its flags and the kind of each of its tuples.
    Page {
        flags: u16,
        kinds: Vec<Kind>,
    },
}

/// One downlink naming the current block.
#[derive(Debug, Clone, Copy)]
struct Link {
    offset: u16,
    parent: u32,
    parent_offset: u16,
}

/// The cross-page check of one SP-GiST index.
pub struct Check {
    blocks: u64,
    current: Option<u32>,
    block: Block,
    /// Downlinks accepted for the current block.
    links: Vec<Link>,
    /// Offsets of the current block that some downlink names, accepted or not.
    named: Vec<u16>,
    /// Blocks seen with some record (below `blocks`), and whether one was damaged.
    seen: u64,
    any_damaged: bool,
    /// Leaf pages with live chain heads no downlink names: (block, first such offset, count).
    unreached: Vec<(u32, u16, u32)>,
    out: Vec<GraphProblem>,
}

impl Check {
    pub fn new(info: &GraphInfo) -> Check {
        Check {
            blocks: info.blocks,
            current: None,
            block: Block::NotRead,
            links: Vec::new(),
            named: Vec::new(),
            seen: 0,
            any_damaged: false,
            unreached: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Makes `blkno` the current block, closing the previous one.
    fn at(&mut self, blkno: u32) {
        if self.current == Some(blkno) {
            return;
        }
        self.close_block();
        self.current = Some(blkno);
        self.block = Block::NotRead;
        self.links.clear();
        self.named.clear();
    }

    /// Marks the current block as read (once).
    fn read_as(&mut self, blkno: u32, block: Block) {
        self.at(blkno);
        if matches!(self.block, Block::NotRead) && (blkno as u64) < self.blocks {
            self.seen += 1;
        }
        self.block = block;
    }

    /// The end of the current block: tuples named by several downlinks, and chain heads
    /// named by none.
    fn close_block(&mut self) {
        let Some(blkno) = self.current else {
            return;
        };
        let mut links = std::mem::take(&mut self.links);
        let mut named = std::mem::take(&mut self.named);
        let Block::Page { kinds, .. } = std::mem::take(&mut self.block) else {
            return;
        };
        links.sort_by_key(|l| (l.offset, l.parent, l.parent_offset));
        for group in links.chunk_by(|a, b| a.offset == b.offset) {
            if group.len() > 1 {
                let parents: Vec<Value> = group
                    .iter()
                    .map(|l| json!({"block": l.parent, "offset": l.parent_offset}))
                    .collect();
                self.out.push(GraphProblem::new(
                    blkno,
                    format!(
                        "the tuple at offset {} is named by {} downlinks",
                        group[0].offset,
                        group.len()
                    ),
                    json!({"offset": group[0].offset, "parents": parents}),
                ));
            }
        }
        named.sort_unstable();
        let mut unreached = kinds
            .iter()
            .enumerate()
            .filter(|&(i, k)| {
                *k == Kind::ChainHead && named.binary_search(&(i as u16 + 1)).is_err()
            })
            .map(|(i, _)| i as u16 + 1);
        if let Some(first) = unreached.next() {
            self.unreached
                .push((blkno, first, 1 + unreached.count() as u32));
        }
    }

    /// Checks one downlink naming the current block `blkno`; keeps it if it is sound.
    fn link(&mut self, blkno: u32, link: Link, parent_nulls: bool) {
        self.named.push(link.offset);
        let why = if blkno as u64 >= self.blocks {
            Some(format!("beyond the index's {} blocks", self.blocks))
        } else if blkno <= SPGIST_LAST_FIXED_BLKNO {
            Some("the metapage or a root page, which no downlink names".to_string())
        } else {
            match &self.block {
                Block::NotRead | Block::Damaged => None,
                Block::New => Some("an all-zero (never written) page".to_string()),
                Block::Page { flags: f, kinds } => target_problem(*f, kinds, link, parent_nulls),
            }
        };
        match why {
            Some(why) => self.out.push(GraphProblem::new(
                link.parent,
                format!(
                    "downlink of the inner tuple at offset {} names ({blkno},{}): {why}",
                    link.parent_offset, link.offset
                ),
                json!({"offset": link.parent_offset, "child": blkno,
                       "child_offset": link.offset}),
            )),
            None if matches!(self.block, Block::Page { .. }) => self.links.push(link),
            None => {}
        }
    }

    fn page_problem(&mut self, blkno: u32, r: &mut Reader<'_>) {
        let (Some(code), Some(a), Some(b), Some(c)) = (r.u8(), r.u16(), r.u16(), r.u16()) else {
            return;
        };
        let Some(code) = PageProblem::from_byte(code) else {
            return;
        };
        let (message, detail) = match code {
            PageProblem::BadLink => (
                format!("leaf tuple at offset {a} links to offset {b}, which holds no live leaf tuple"),
                json!({"offset": a, "next_offset": b}),
            ),
            PageProblem::SharedLink => (
                format!("leaf tuples at offsets {c} and {a} both link to offset {b}"),
                json!({"offset": a, "next_offset": b, "other_offset": c}),
            ),
            PageProblem::Cycle => (
                format!("the leaf chain through offset {a} loops"),
                json!({"offset": a}),
            ),
            PageProblem::RootNotLive => (
                format!("the root leaf page holds a tuple that is not live at offset {a} (tupstate {b})"),
                json!({"offset": a, "tupstate": b}),
            ),
            PageProblem::RootChained => (
                format!("root leaf tuple at offset {a} links to offset {b}; root tuples are not chained"),
                json!({"offset": a, "next_offset": b}),
            ),
            PageProblem::NodesOverrun => (
                format!("the nodes of the inner tuple at offset {a} run past its end"),
                json!({"offset": a}),
            ),
        };
        self.out.push(GraphProblem::new(blkno, message, detail));
    }
}

/// Why a downlink may not name `link.offset` of a sound page with `flags` and `kinds`.
fn target_problem(flags: u16, kinds: &[Kind], link: Link, parent_nulls: bool) -> Option<String> {
    if flags & flags::SPGIST_META != 0 {
        return Some("a metapage".into());
    }
    if flags & flags::SPGIST_DELETED != 0 {
        return Some("a deleted page (SPGIST_DELETED)".into());
    }
    let nulls = flags & flags::SPGIST_NULLS != 0;
    if nulls != parent_nulls {
        let tree = |n: bool| if n { "nulls" } else { "non-null" };
        return Some(format!(
            "a page of the {} tree, but the parent is in the {} tree (SPGIST_NULLS)",
            tree(nulls),
            tree(parent_nulls)
        ));
    }
    let Some(kind) = kinds.get((link.offset as usize).wrapping_sub(1)).copied() else {
        return Some(format!("the page has {} line pointers", kinds.len()));
    };
    let ok = if flags & flags::SPGIST_LEAF != 0 {
        matches!(kind, Kind::ChainHead | Kind::Dead)
    } else {
        kind == Kind::Inner
    };
    (!ok).then(|| format!("{}, not what a downlink names", kind.describe()))
}

impl GraphCheck for Check {
    fn record(&mut self, blkno: u32, body: &[u8]) {
        let mut r = Reader::body(body);
        match r.u8() {
            Some(PAGE_TAG) => {
                let (Some(f), Some(kinds)) = (r.u16(), r.bytes()) else {
                    return;
                };
                let kinds = kinds
                    .iter()
                    .map(|&b| Kind::from_byte(b).unwrap_or(Kind::Nothing))
                    .collect();
                self.read_as(blkno, Block::Page { flags: f, kinds });
            }
            Some(LINK_TAG) => {
                let (Some(offset), Some(parent), Some(parent_offset), Some(nulls)) =
                    (r.u16(), r.u32(), r.u16(), r.u8())
                else {
                    return;
                };
                self.at(blkno);
                let link = Link {
                    offset,
                    parent,
                    parent_offset,
                };
                self.link(blkno, link, nulls != 0);
            }
            Some(PROBLEM_TAG) => {
                self.at(blkno);
                self.page_problem(blkno, &mut r);
            }
            _ => {}
        }
    }

    fn damaged(&mut self, blkno: u32) {
        self.any_damaged = true;
        self.read_as(blkno, Block::Damaged);
    }

    fn new_page(&mut self, blkno: u32) {
        self.read_as(blkno, Block::New);
    }

    fn finish(mut self: Box<Self>) -> Vec<GraphProblem> {
        self.close_block();
        // A chain head no downlink names is wrong only if every page that could hold its
        // downlink was read and sound.
        if !self.any_damaged && self.seen == self.blocks {
            for &(blkno, first, count) in &self.unreached {
                self.out.push(GraphProblem::new(
                    blkno,
                    format!(
                        "{count} leaf chain(s) no downlink names, the first at offset {first}: \
                         their live tuples are unreachable"
                    ),
                    json!({"offset": first, "chains": count}),
                ));
            }
        }
        let mut out = self.out;
        out.sort_by_key(|p| p.blkno);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::extended::graphs::GraphAm;

    fn check(blocks: u64) -> Box<Check> {
        Box::new(Check::new(&crate::check::extended::graphs::testing::info(
            GraphAm::SpGist,
            blocks,
        )))
    }

    fn page(c: &mut Check, b: u32, f: u16, kinds: &[Kind]) {
        let mut body = vec![PAGE_TAG];
        body.extend_from_slice(&f.to_be_bytes());
        body.extend_from_slice(&(kinds.len() as u16).to_be_bytes());
        body.extend(kinds.iter().map(|&k| k as u8));
        c.record(b, &body);
    }

    fn link(c: &mut Check, b: u32, off: u16, parent: u32, poff: u16, nulls: bool) {
        let mut body = vec![LINK_TAG];
        body.extend_from_slice(&off.to_be_bytes());
        body.extend_from_slice(&parent.to_be_bytes());
        body.extend_from_slice(&poff.to_be_bytes());
        body.push(u8::from(nulls));
        c.record(b, &body);
    }

    /// Meta 0, root 1 (inner) -> inner tuple (3,1) -> leaf chains (4,1) and (4,3); nulls
    /// root 2 a leaf.
    fn index(c: &mut Check) {
        page(c, 0, flags::SPGIST_META, &[]);
        page(c, 1, 0, &[Kind::Inner]);
        page(
            c,
            2,
            flags::SPGIST_LEAF | flags::SPGIST_NULLS,
            &[Kind::RootLeaf],
        );
        page(c, 3, 0, &[Kind::Inner, Kind::Redirect]);
        link(c, 3, 1, 1, 1, false);
        use Kind::*;
        page(
            c,
            4,
            flags::SPGIST_LEAF,
            &[ChainHead, ChainMember, Dead, Placeholder],
        );
        link(c, 4, 1, 3, 1, false);
        link(c, 4, 3, 3, 1, false);
    }

    fn blocks(c: Box<Check>) -> Vec<u64> {
        c.finish().iter().map(|p| p.blkno).collect()
    }

    #[test]
    fn a_sound_index_is_clean() {
        let mut c = check(5);
        index(&mut c);
        assert!(blocks(c).is_empty());
    }

    #[test]
    fn bad_downlinks_are_found_at_their_parent() {
        // Beyond the index, a root page, a chain member, a placeholder (appended after the
        // block's own records, as the sort would put them).
        for (b, off) in [(9, 1), (4, 2), (4, 4)] {
            let mut c = check(5);
            index(&mut c);
            link(&mut c, b, off, 3, 1, false);
            let found = blocks(c);
            assert!(found.contains(&3), "({b},{off}): {found:?}");
        }
        let mut c = check(5);
        page(&mut c, 0, flags::SPGIST_META, &[]);
        page(&mut c, 1, 0, &[Kind::Inner]);
        link(&mut c, 1, 1, 3, 1, false);
        assert_eq!(blocks(c), vec![3]);
        // The wrong tree.
        let mut c = check(5);
        index(&mut c);
        link(&mut c, 4, 1, 3, 1, true);
        assert!(blocks(c).contains(&3));
    }

    #[test]
    fn shared_and_unreached_chains_are_found_at_the_leaf() {
        let mut c = check(5);
        index(&mut c);
        link(&mut c, 4, 1, 3, 1, false);
        assert_eq!(blocks(c), vec![4]);
        // Without the downlink to (4,1) its chain is unreached...
        let mut c = check(5);
        page(&mut c, 0, flags::SPGIST_META, &[]);
        page(&mut c, 1, 0, &[Kind::Inner]);
        page(&mut c, 2, flags::SPGIST_LEAF | flags::SPGIST_NULLS, &[]);
        page(&mut c, 3, 0, &[Kind::Inner]);
        link(&mut c, 3, 1, 1, 1, false);
        page(&mut c, 4, flags::SPGIST_LEAF, &[Kind::ChainHead]);
        assert_eq!(blocks(c), vec![4]);
        // ... unless a page was damaged.
        let mut c = check(5);
        page(&mut c, 0, flags::SPGIST_META, &[]);
        page(&mut c, 1, 0, &[Kind::Inner]);
        page(&mut c, 2, flags::SPGIST_LEAF | flags::SPGIST_NULLS, &[]);
        c.damaged(3);
        page(&mut c, 4, flags::SPGIST_LEAF, &[Kind::ChainHead]);
        assert!(blocks(c).is_empty());
    }
}
