//! Line pointers (`ItemIdData`) of heap and index pages: each item's storage must lie between
//! `pd_upper` and `pd_special`, MAXALIGNed, long enough, and apart from every other item's.
//! Heap pages call the single checks; the hash, GiST, GIN and SP-GiST pages that hold index
//! tuples run `check_index_items`.

use serde_json::json;

use super::{is_aligned, max_align, ClusterFacts, Scratch, StructureProblem};
use crate::finding::{FindingKind as K, Severity};
use crate::format::index_tuple::SIZE_OF_INDEX_TUPLE;
use crate::format::itemid::{line_pointers_into, ItemId, LpFlags};
use crate::format::page::PageHeader;

/// The line pointers of an index page that holds index tuples: no redirects (only heap pages
/// have them), bounds and overlap as on a heap page.
pub fn check_index_items(
    page: &[u8],
    h: &PageHeader,
    facts: &ClusterFacts,
    scratch: &mut Scratch,
    out: &mut Vec<StructureProblem>,
) {
    let Scratch { items, storage, .. } = scratch;
    line_pointers_into(page, h, items);
    storage.clear();
    if (h.pd_lower as usize) > (h.pd_upper as usize) {
        return; // reported by the physical level
    }
    for item in items.iter() {
        match item.lp_flags {
            LpFlags::Unused => check_unused(item, out),
            LpFlags::Redirect => out.push(
                StructureProblem::error(
                    K::LinePointerInvalid,
                    format!(
                        "index page has a redirect line pointer (to offset {})",
                        item.lp_off
                    ),
                )
                .at(item.offnum),
            ),
            LpFlags::Dead if item.lp_len == 0 => {}
            LpFlags::Normal | LpFlags::Dead => {
                if let Some(range) = check_item_bounds(h, item, SIZE_OF_INDEX_TUPLE, facts, out) {
                    storage.push((range, item.offnum));
                }
            }
        }
    }
    check_overlap(storage, out);
}

/// An `LP_UNUSED` line pointer keeps no offset or length.
pub fn check_unused(item: &ItemId, out: &mut Vec<StructureProblem>) {
    if item.lp_len != 0 || item.lp_off != 0 {
        out.push(
            StructureProblem::error(
                K::LinePointerInvalid,
                format!(
                    "unused line pointer has lp_off {} lp_len {}",
                    item.lp_off, item.lp_len
                ),
            )
            .severity(Severity::Warning)
            .at(item.offnum),
        );
    }
}

/// Bounds of an item with storage, whose `LP_NORMAL` items hold at least `min_len` bytes;
/// returns its aligned byte range when it is inside the page.
pub fn check_item_bounds(
    h: &PageHeader,
    item: &ItemId,
    min_len: usize,
    facts: &ClusterFacts,
    out: &mut Vec<StructureProblem>,
) -> Option<(usize, usize)> {
    let (off, len) = (item.lp_off as usize, item.lp_len as usize);
    let problem = if !is_aligned(off, facts.max_align) {
        Some(format!("lp_off {off} is not MAXALIGNed"))
    } else if item.lp_flags == LpFlags::Normal && len < min_len {
        Some(format!(
            "lp_len {len} is shorter than the smallest item ({min_len})"
        ))
    } else if off < h.pd_upper as usize {
        Some(format!(
            "lp_off {off} is inside the free space (pd_upper {})",
            h.pd_upper
        ))
    } else if off + len > h.pd_special as usize {
        Some(format!(
            "item at {off} with lp_len {len} runs past pd_special {}",
            h.pd_special
        ))
    } else {
        None
    };
    match problem {
        Some(message) => {
            out.push(
                StructureProblem::error(K::LinePointerInvalid, message)
                    .at(item.offnum)
                    .detail(json!({"lp_off": off, "lp_len": len})),
            );
            None
        }
        None => Some((
            off,
            off + max_align(len, facts.max_align).min(h.pd_special as usize - off),
        )),
    }
}

/// No two items' storage may overlap (ranges `((start, end), offnum)`).
pub fn check_overlap(storage: &mut [((usize, usize), u16)], out: &mut Vec<StructureProblem>) {
    // Items are usually stored from the end of the page downwards in line pointer order, so
    // the list is already in descending order: reverse it instead of sorting.
    if storage.windows(2).all(|w| w[0] > w[1]) {
        storage.reverse();
    } else {
        storage.sort_unstable();
    }
    for pair in storage.windows(2) {
        let ((_, end_a), a) = pair[0];
        let ((start_b, _), b) = pair[1];
        if start_b < end_a {
            out.push(
                StructureProblem::error(
                    K::LinePointerOverlap,
                    format!("storage of line pointer {b} overlaps line pointer {a}"),
                )
                .at(b)
                .detail(json!({"other": a})),
            );
        }
    }
}
