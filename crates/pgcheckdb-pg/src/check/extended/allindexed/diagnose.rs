//! After the scan, the heap blocks whose sums did not balance ([`super::exact`]) are read
//! again to name their tuples: each such heap page's live tuples are fingerprinted one by one,
//! the index's leaf pages are read again for the entries that name a live root of those
//! blocks, and the two are matched. A live tuple no entry matches lacks its entry (as the
//! filter method reports it); an entry that matches no live tuple holds a key its tuple does
//! not have, or is there twice.
//!
//! This reads the index once more and a few heap pages: it happens only when the sums found
//! something.

use std::collections::{HashMap, HashSet};

use super::probe::{walk_leaf, Entry, LeafPage, TupleKeys};
use super::{AllIndexed, Lacking};
use crate::catalog::xact::CommitLog;
use crate::check::extended::heap::{for_each_live_chain, HeapTuples};
use crate::format::btree::BtPageOpaque;
use crate::format::itemid::line_pointers_into;
use crate::format::page::PageHeader;
use crate::plan::Plan;

/// An index entry that names a live root but matches none of the tuple's fingerprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extra {
    pub heap_block: u32,
    pub heap_offset: u16,
    pub index_block: u32,
}

/// Names the tuples of the unbalanced `blocks` of `idx` (checked by sums): the lacking ones
/// go to the index's lacking list, the entries with no tuple are returned. Fails when a page
/// cannot be read again.
pub fn diagnose(
    plan: &Plan,
    idx: &AllIndexed,
    clog: &CommitLog,
    max_align: usize,
    blocks: &[u32],
) -> Result<Vec<Extra>, String> {
    let Some((live, _)) = idx.exact() else {
        return Ok(Vec::new());
    };
    let wanted: HashSet<u32> = blocks.iter().copied().collect();
    let mut index: HashMap<u32, Vec<(u16, u64, u32)>> = HashMap::new();
    let mut pending: Vec<Entry> = Vec::new();
    let mut index_reader = ForkReader::new(plan, idx.index_fork);
    for index_block in 1..plan.fork_blocks[idx.index_fork] {
        let page = index_reader.block(index_block as u32)?;
        leaf_entries(idx, page, max_align, &mut pending);
        for e in pending.iter().filter(|e| wanted.contains(&e.block)) {
            if live.is_live(e.block, e.offset) {
                let at = index.entry(e.block).or_default();
                at.push((e.offset, e.fingerprint, index_block as u32));
            }
        }
    }
    let mut extras = Vec::new();
    let mut heap_reader = ForkReader::new(plan, idx.heap_fork);
    for &blkno in blocks {
        let tuples = heap_fingerprints(idx, blkno, heap_reader.block(blkno)?, clog);
        let entries = index.remove(&blkno).unwrap_or_default();
        let (lacking, extra) = unmatched(&tuples, &entries);
        for (heap_offset, other_key_at) in lacking {
            idx.record_lacking(Lacking {
                heap_block: blkno,
                heap_offset,
                other_key_at,
            });
        }
        extras.extend(extra.into_iter().map(|(heap_offset, index_block)| Extra {
            heap_block: blkno,
            heap_offset,
            index_block,
        }));
    }
    Ok(extras)
}

/// Matches a block's live tuples `(root, fingerprint)` with the entries naming them
/// `(offset, fingerprint, index block)`, each entry one tuple at most. Returns the tuples no
/// entry matches, each with the index block of an unmatched entry naming it if any (an entry
/// with another key: the one corruption seen from both sides), and the unmatched entries that
/// name a tuple with an entry of its own, as `(offset, index block)`.
#[allow(clippy::type_complexity)]
pub fn unmatched(
    tuples: &[(u16, u64)],
    entries: &[(u16, u64, u32)],
) -> (Vec<(u16, Option<u32>)>, Vec<(u16, u32)>) {
    let mut left: HashMap<(u16, u64), Vec<u32>> = HashMap::new();
    for &(offset, fp, index_block) in entries {
        left.entry((offset, fp)).or_default().push(index_block);
    }
    let mut lacking: Vec<u16> = Vec::new();
    for &(root, fp) in tuples {
        if left.get_mut(&(root, fp)).and_then(Vec::pop).is_none() {
            lacking.push(root);
        }
    }
    let mut others: Vec<(u16, u32)> = left
        .into_iter()
        .flat_map(|((offset, _), blocks)| blocks.into_iter().map(move |b| (offset, b)))
        .collect();
    others.sort_unstable();
    lacking.sort_unstable();
    let with_block = lacking
        .iter()
        .map(|&root| {
            let at = others.iter().find(|o| o.0 == root).map(|o| o.1);
            (root, at)
        })
        .collect();
    others.retain(|o| lacking.binary_search(&o.0).is_err());
    (with_block, others)
}

/// The (root, fingerprint) of each certainly live tuple of a heap page for `idx`; a tuple
/// whose key cannot be hashed is left out (its block was set aside and is not diagnosed).
fn heap_fingerprints(
    idx: &AllIndexed,
    blkno: u32,
    page: &[u8],
    clog: &CommitLog,
) -> Vec<(u16, u64)> {
    let Some(h) = PageHeader::parse(page) else {
        return Vec::new();
    };
    let mut items = Vec::new();
    line_pointers_into(page, &h, &mut items);
    let tuples = HeapTuples {
        page,
        blkno,
        items: &items,
    };
    let mut values = Vec::new();
    let mut out = Vec::new();
    for_each_live_chain(&tuples, clog, |root, _member, tuple, h| {
        let mut keys = TupleKeys::new(tuple, h, &idx.heap_attrs, idx.upto, &mut values);
        if let Some(key) = keys.key(idx) {
            out.push((root, super::keys::fingerprint(key, blkno, root)));
        }
    });
    out
}

/// The entries of a live leaf page onto `pending` (cleared; left empty for any other page).
fn leaf_entries(idx: &AllIndexed, page: &[u8], max_align: usize, pending: &mut Vec<Entry>) {
    pending.clear();
    let Some(h) = PageHeader::parse(page) else {
        return;
    };
    let Some(opaque) = BtPageOpaque::parse(page, h.pd_special as usize) else {
        return;
    };
    if !opaque.is_live_leaf() {
        return;
    }
    let mut items = Vec::new();
    line_pointers_into(page, &h, &mut items);
    let leaf = LeafPage {
        page,
        opaque: &opaque,
        items: &items,
        max_align,
    };
    // The page passed its checks in the scan; one that no longer walks gives no entries.
    if walk_leaf(idx, leaf, pending, None).is_none() {
        pending.clear();
    }
}

/// Reads blocks of one fork of the plan again, keeping the segment file last opened.
struct ForkReader<'p> {
    plan: &'p Plan,
    fork: usize,
    open: Option<(u32, std::fs::File)>,
    page: Vec<u8>,
}

impl<'p> ForkReader<'p> {
    fn new(plan: &'p Plan, fork: usize) -> Self {
        ForkReader {
            plan,
            fork,
            open: None,
            page: vec![0; plan.control.blcksz as usize],
        }
    }

    /// Block `blkno`, read from its segment file.
    fn block(&mut self, blkno: u32) -> Result<&[u8], String> {
        use std::os::unix::fs::FileExt;
        let relseg = u64::from(self.plan.control.relseg_size.max(1));
        let (segno, file) = self.plan.segment_of_block(self.fork, u64::from(blkno));
        let file = file.ok_or_else(|| format!("no segment {segno} for block {blkno}"))?;
        let again = |e: std::io::Error| {
            format!(
                "could not read block {blkno} of {} again: {e}",
                file.rel_path()
            )
        };
        if self.open.as_ref().is_none_or(|(n, _)| *n != segno) {
            let f = pgcheckdb_scan::open::open_regular(&file.path(), false).map_err(again)?;
            self.open = Some((segno, f));
        }
        let Some((_, f)) = &self.open else {
            return Err(format!("no open segment {segno}"));
        };
        let offset = (u64::from(blkno) % relseg) * self.page.len() as u64;
        f.read_exact_at(&mut self.page, offset).map_err(again)?;
        Ok(&self.page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_and_entries_match_one_to_one() {
        // Root 1 matched; root 2 lacks (its entry, at index block 8, has another key); root
        // 3 matched once and its entry is there twice; root 4 lacks.
        let tuples = [(1, 10), (2, 20), (3, 30), (4, 40)];
        let entries = [(1, 10, 7), (2, 99, 8), (3, 30, 9), (3, 30, 12)];
        let (lacking, extra) = unmatched(&tuples, &entries);
        assert_eq!(lacking, vec![(2, Some(8)), (4, None)]);
        assert_eq!(extra, vec![(3, 9)]);
        assert_eq!(
            unmatched(&tuples[..3], &[]),
            (vec![(1, None), (2, None), (3, None)], vec![])
        );
        assert_eq!(unmatched(&[], &[]), (vec![], vec![]));
    }
}
