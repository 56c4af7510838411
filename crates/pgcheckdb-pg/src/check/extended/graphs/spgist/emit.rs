//! What one sound SP-GiST page says about the graph: the kind of each tuple, the leaf chains
//! of a leaf page, and the downlinks of an inner page's nodes.

use super::{is_root, Kind, PageProblem, LINK_TAG, PAGE_TAG, PROBLEM_TAG};
use crate::check::extended::graphs::Sink;
use crate::format::bytes::{le_u16, le_u32};
use crate::format::heap::ItemPointer;
use crate::format::index_tuple::{INDEX_SIZE_MASK, SIZE_OF_INDEX_TUPLE};
use crate::format::itemid::{line_pointers, ItemId};
use crate::format::page::PageHeader;
use crate::format::spgist::flags;
use crate::format::spgist::{SPGIST_DEAD, SPGIST_LIVE, SPGIST_REDIRECT};

/// `SGLT_GET_NEXTOFFSET`: the low 14 bits of a leaf tuple's `t_info` (at byte 4).
const NEXT_OFFSET_MASK: u16 = 0x3FFF;
/// `SGITHDRSZ`: the inner tuple header before its prefix and nodes.
const SGITHDRSZ: usize = 8;

/// Writes the graph facts of one sound SP-GiST page.
pub fn emit(page: &[u8], blkno: u32, sink: &mut Sink<'_>) {
    let Some(h) = PageHeader::parse(page) else {
        return;
    };
    let Some(page_flags) = le_u16(page, h.pd_special as usize) else {
        return;
    };
    let items = if page_flags & (flags::SPGIST_META | flags::SPGIST_DELETED) == 0 {
        line_pointers(page, &h)
    } else {
        Vec::new()
    };
    let tuples: Vec<Option<&[u8]>> = items.iter().map(|it| tuple(page, it)).collect();
    let mut problems = Vec::new();
    let kinds = if page_flags & (flags::SPGIST_META | flags::SPGIST_DELETED) != 0 {
        Vec::new()
    } else if page_flags & flags::SPGIST_LEAF == 0 {
        inner_kinds(&tuples)
    } else if is_root(blkno) {
        root_leaf_kinds(&tuples, &mut problems)
    } else {
        leaf_kinds(&tuples, &mut problems)
    };
    sink.push(blkno, |w| {
        w.u8(PAGE_TAG).u16(page_flags).bytes(&kinds);
    });
    if page_flags & (flags::SPGIST_META | flags::SPGIST_DELETED | flags::SPGIST_LEAF) == 0 {
        let nulls = u8::from(page_flags & flags::SPGIST_NULLS != 0);
        for (i, t) in tuples.iter().enumerate() {
            let offset = i as u16 + 1;
            if let Some(t) = t.filter(|_| kinds[i] == Kind::Inner as u8) {
                if downlinks(t, blkno, offset, nulls, sink).is_none() {
                    problems.push((PageProblem::NodesOverrun, [offset, 0, 0]));
                }
            }
        }
    }
    for (code, [a, b, c]) in problems {
        sink.push(blkno, |w| {
            w.u8(PROBLEM_TAG).u8(code as u8).u16(a).u16(b).u16(c);
        });
    }
}

/// The bytes of the tuple at `it`, if it has storage inside the page.
fn tuple<'p>(page: &'p [u8], it: &ItemId) -> Option<&'p [u8]> {
    if !it.has_storage() {
        return None;
    }
    page.get(it.lp_off as usize..it.lp_off as usize + it.lp_len as usize)
}

/// `tupstate`, the low two bits of the first word of every SP-GiST tuple.
fn tupstate(t: &[u8]) -> Option<u32> {
    le_u32(t, 0).map(|w| w & 0x3)
}

/// The kind of a tuple that is not live (the same on inner and leaf pages).
fn not_live(state: u32) -> Kind {
    match state {
        SPGIST_REDIRECT => Kind::Redirect,
        SPGIST_DEAD => Kind::Dead,
        _ => Kind::Placeholder,
    }
}

fn inner_kinds(tuples: &[Option<&[u8]>]) -> Vec<u8> {
    tuples
        .iter()
        .map(|t| match t.and_then(tupstate) {
            None => Kind::Nothing as u8,
            Some(SPGIST_LIVE) => Kind::Inner as u8,
            Some(s) => not_live(s) as u8,
        })
        .collect()
}

/// A live leaf tuple's `nextOffset`.
fn next_offset(t: &[u8]) -> Option<u16> {
    le_u16(t, 4).map(|v| v & NEXT_OFFSET_MASK)
}

/// A root that is a leaf: its tuples are live and not chained.
fn root_leaf_kinds(
    tuples: &[Option<&[u8]>],
    problems: &mut Vec<(PageProblem, [u16; 3])>,
) -> Vec<u8> {
    let mut kinds = Vec::with_capacity(tuples.len());
    for (i, t) in tuples.iter().enumerate() {
        let offset = i as u16 + 1;
        let Some(t) = t else {
            kinds.push(Kind::Nothing as u8);
            continue;
        };
        match (tupstate(t), next_offset(t)) {
            (Some(SPGIST_LIVE), Some(next)) => {
                if next != 0 {
                    problems.push((PageProblem::RootChained, [offset, next, 0]));
                }
                kinds.push(Kind::RootLeaf as u8);
            }
            (Some(s), _) if s != SPGIST_LIVE => {
                problems.push((PageProblem::RootNotLive, [offset, s as u16, 0]));
                kinds.push(not_live(s) as u8);
            }
            _ => kinds.push(Kind::Nothing as u8),
        }
    }
    kinds
}

/// A leaf page other than a root: the chains its live tuples form. A link to anything but a
/// live leaf tuple of the page, two links to one tuple and loops are problems; the kinds say
/// which live tuples are chain heads.
fn leaf_kinds(tuples: &[Option<&[u8]>], problems: &mut Vec<(PageProblem, [u16; 3])>) -> Vec<u8> {
    let n = tuples.len();
    let mut kinds = vec![Kind::Nothing as u8; n];
    let mut next = vec![0u16; n + 1];
    for (i, t) in tuples.iter().enumerate() {
        let Some(t) = t else { continue };
        match (tupstate(t), next_offset(t)) {
            (Some(SPGIST_LIVE), Some(nx)) => {
                kinds[i] = Kind::ChainHead as u8;
                next[i + 1] = nx;
            }
            (Some(s), _) if s != SPGIST_LIVE => kinds[i] = not_live(s) as u8,
            _ => {}
        }
    }
    // Predecessors along valid links.
    let mut pred = vec![0u16; n + 1];
    let links: Vec<(usize, usize)> = (1..=n)
        .filter(|&from| next[from] != 0)
        .map(|from| (from, next[from] as usize))
        .collect();
    for (from, to) in links {
        let live_target = to <= n
            && matches!(
                Kind::from_byte(kinds[to - 1]).unwrap_or(Kind::Nothing),
                Kind::ChainHead | Kind::ChainMember
            );
        if !live_target {
            problems.push((PageProblem::BadLink, [from as u16, to as u16, 0]));
            next[from] = 0;
        } else if pred[to] != 0 {
            problems.push((PageProblem::SharedLink, [from as u16, to as u16, pred[to]]));
            next[from] = 0;
        } else {
            pred[to] = from as u16;
            kinds[to - 1] = Kind::ChainMember as u8;
        }
    }
    // Walk each chain from its head; a live tuple no walk reaches is on a loop.
    let mut visited = vec![false; n + 1];
    for head in 1..=n {
        if kinds[head - 1] != Kind::ChainHead as u8 {
            continue;
        }
        let mut at = head;
        while at != 0 && !visited[at] {
            visited[at] = true;
            at = next[at] as usize;
        }
    }
    if let Some(on_loop) = (1..=n).find(|&i| kinds[i - 1] == Kind::ChainMember as u8 && !visited[i])
    {
        problems.push((PageProblem::Cycle, [on_loop as u16, 0, 0]));
    }
    kinds
}

/// Writes the valid downlinks of one live inner tuple, keyed by the block each names; `None`
/// when its nodes run past its end.
fn downlinks(t: &[u8], blkno: u32, offset: u16, nulls: u8, sink: &mut Sink<'_>) -> Option<()> {
    let word = le_u32(t, 0)?;
    let n_nodes = (word >> 3) & 0x1FFF;
    let prefix_size = (word >> 16) as usize;
    let mut at = SGITHDRSZ + prefix_size;
    for _ in 0..n_nodes {
        let tid = ItemPointer::parse(t, at)?;
        let size = (le_u16(t, at + 6)? & INDEX_SIZE_MASK) as usize;
        // A node is an `IndexTupleData`: `t_tid` then `t_info`, whose low 13 bits are its size.
        if size < SIZE_OF_INDEX_TUPLE || at + size > t.len() {
            return None;
        }
        // ItemPointerIsValid: a node without a child has offset 0.
        if tid.offset != 0 {
            sink.push(tid.block, |w| {
                w.u8(LINK_TAG)
                    .u16(tid.offset)
                    .u32(blkno)
                    .u16(offset)
                    .u8(nulls);
            });
        }
        at += size;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(state: u32, next: u16) -> Vec<u8> {
        let mut t = vec![0u8; 16];
        t[0..4].copy_from_slice(&(state | (16 << 2)).to_le_bytes());
        t[4..6].copy_from_slice(&next.to_le_bytes());
        t
    }

    fn kinds_of(ts: &[Vec<u8>]) -> (Vec<Kind>, Vec<(PageProblem, [u16; 3])>) {
        let refs: Vec<Option<&[u8]>> = ts.iter().map(|t| Some(t.as_slice())).collect();
        let mut problems = Vec::new();
        let k = leaf_kinds(&refs, &mut problems);
        (
            k.into_iter()
                .map(|b| Kind::from_byte(b).unwrap_or(Kind::Nothing))
                .collect(),
            problems,
        )
    }

    #[test]
    fn chains_give_heads_and_members() {
        // Chain 1 -> 3 -> 4, a DEAD head at 2, a placeholder at 5, a lone head at 6.
        let ts = [
            leaf(0, 3),
            leaf(2, 0),
            leaf(0, 4),
            leaf(0, 0),
            leaf(3, 0),
            leaf(0, 0),
        ];
        let (k, p) = kinds_of(&ts);
        use Kind::*;
        assert_eq!(
            k,
            vec![
                ChainHead,
                Dead,
                ChainMember,
                ChainMember,
                Placeholder,
                ChainHead
            ]
        );
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn bad_links_shared_links_and_loops_are_problems() {
        let (_, p) = kinds_of(&[leaf(0, 2), leaf(3, 0)]);
        assert_eq!(p, vec![(PageProblem::BadLink, [1, 2, 0])]);
        let (_, p) = kinds_of(&[leaf(0, 9)]);
        assert_eq!(p, vec![(PageProblem::BadLink, [1, 9, 0])]);
        let (_, p) = kinds_of(&[leaf(0, 3), leaf(0, 3), leaf(0, 0)]);
        assert_eq!(p, vec![(PageProblem::SharedLink, [2, 3, 1])]);
        let (_, p) = kinds_of(&[leaf(0, 0), leaf(0, 3), leaf(0, 2)]);
        assert_eq!(p, vec![(PageProblem::Cycle, [2, 0, 0])]);
    }
}
