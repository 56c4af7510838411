//! B-tree pages (`nbtree`): special space, metapage, page flags and level, sibling links, item
//! bounds, index tuple sizes and posting-list order; the key order with the opclass comparators
//! is in [`super::btree_keys`].

use serde_json::json;

use super::{is_aligned, max_align, ClusterFacts, Inputs, Scratch, StructureProblem};
use crate::finding::FindingKind as K;
use crate::format::btree::{
    flags as bf, BtMetaPage, BtPageOpaque, BTREE_MAGIC, BTREE_MIN_VERSION, BTREE_VERSION,
    BT_IS_POSTING, BT_OFFSET_MASK, BT_SPECIAL_SIZE, P_NONE,
};
use crate::format::bytes::le_u16;
use crate::format::heap::{ItemPointer, SIZE_OF_ITEM_POINTER};
use crate::format::index_tuple::{
    INDEX_ALT_TID_MASK, INDEX_SIZE_MASK, SIZE_OF_INDEX_TUPLE, T_INFO_OFFSET,
};
use crate::format::itemid::{line_pointers_into, ItemId, LpFlags};
use crate::format::page::PageHeader;
use crate::format::special::MAX_BT_CYCLE_ID;

/// All page-local checks of one B-tree page.
pub fn check_btree_page(
    page: &[u8],
    h: &PageHeader,
    blkno: u64,
    inputs: &Inputs<'_>,
    scratch: &mut Scratch,
    out: &mut Vec<StructureProblem>,
) {
    let (facts, fork_blocks) = (inputs.facts, inputs.file.fork_blocks);
    let special_size = facts.blcksz - h.pd_special as usize;
    if special_size != BT_SPECIAL_SIZE {
        out.push(page_problem(format!(
            "special space is {special_size} bytes, a B-tree page has {BT_SPECIAL_SIZE}"
        )));
        return;
    }
    let Some(opaque) = BtPageOpaque::parse(page, h.pd_special as usize) else {
        return;
    };
    if blkno == 0 {
        let before = out.len();
        check_metapage(page, &opaque, fork_blocks, out);
        if let Some(order) = &inputs.file.btree_order {
            match out.len() == before {
                true => order.version.learn_from_metapage(page),
                false => order.version.distrust_metapage(),
            }
        }
        return;
    }
    check_opaque(&opaque, blkno, fork_blocks, out);
    if opaque.btpo_flags & bf::BTP_DELETED != 0 {
        return;
    }
    line_pointers_into(page, h, &mut scratch.items);
    check_items(page, h, &opaque, &scratch.items, facts, out);
    if let Some(order) = &inputs.file.btree_order {
        super::btree_keys::check_key_order(page, h, &opaque, &scratch.items, order, out);
    }
}

fn page_problem(message: String) -> StructureProblem {
    StructureProblem::error(K::BtreePageInvalid, message)
}

fn check_metapage(
    page: &[u8],
    opaque: &BtPageOpaque,
    fork_blocks: u64,
    out: &mut Vec<StructureProblem>,
) {
    if opaque.btpo_flags & bf::BTP_META == 0 {
        out.push(page_problem(format!(
            "block 0 is not flagged as the metapage (btpo_flags {:#06x})",
            opaque.btpo_flags
        )));
        return;
    }
    let Some(meta) = BtMetaPage::parse(page) else {
        return;
    };
    if meta.btm_magic != BTREE_MAGIC {
        out.push(page_problem(format!(
            "metapage magic {:#x}, expected {BTREE_MAGIC:#x}",
            meta.btm_magic
        )));
    } else if !(BTREE_MIN_VERSION..=BTREE_VERSION).contains(&meta.btm_version) {
        out.push(page_problem(format!(
            "metapage version {} is not between {BTREE_MIN_VERSION} and {BTREE_VERSION}",
            meta.btm_version
        )));
    } else if meta.btm_root as u64 >= fork_blocks || meta.btm_fastroot as u64 >= fork_blocks {
        out.push(
            page_problem(format!(
                "metapage root {} / fast root {} beyond the index's {fork_blocks} blocks",
                meta.btm_root, meta.btm_fastroot
            ))
            .detail(json!({"btm_root": meta.btm_root, "btm_fastroot": meta.btm_fastroot})),
        );
    }
}

/// Flags, level and sibling links of a non-meta page.
fn check_opaque(o: &BtPageOpaque, blkno: u64, fork_blocks: u64, out: &mut Vec<StructureProblem>) {
    let f = o.btpo_flags;
    let detail = json!({"btpo_prev": o.btpo_prev, "btpo_next": o.btpo_next, "btpo_level": o.btpo_level, "btpo_flags": f});
    let mut problem = |m: String| out.push(page_problem(m).detail(detail.clone()));
    if f & bf::BTP_META != 0 {
        problem(format!("block {blkno} is flagged as a metapage"));
    }
    if o.btpo_cycleid > MAX_BT_CYCLE_ID {
        problem(format!(
            "btpo_cycleid {:#06x} is above the largest cycle id",
            o.btpo_cycleid
        ));
    }
    let deleted = f & bf::BTP_DELETED != 0;
    if deleted && f & bf::BTP_HALF_DEAD != 0 {
        problem("page is flagged both deleted and half-dead".into());
    }
    if !deleted && f & bf::BTP_HAS_FULLXID != 0 {
        problem("page that is not deleted has BTP_HAS_FULLXID".into());
    }
    if !deleted {
        let leaf = f & bf::BTP_LEAF != 0;
        if leaf != (o.btpo_level == 0) {
            problem(format!(
                "{} page has level {}",
                if leaf { "leaf" } else { "internal" },
                o.btpo_level
            ));
        }
        if !leaf && f & bf::BTP_HALF_DEAD != 0 {
            problem("internal page is half-dead".into());
        }
    }
    for (name, link) in [("btpo_prev", o.btpo_prev), ("btpo_next", o.btpo_next)] {
        if link != P_NONE && (link as u64 >= fork_blocks || link as u64 == blkno) {
            problem(format!("{name} {link} points outside the index ({fork_blocks} blocks) or at the page itself"));
        }
    }
}

/// Line pointers and index tuples of a live page.
fn check_items(
    page: &[u8],
    h: &PageHeader,
    o: &BtPageOpaque,
    items: &[ItemId],
    facts: &ClusterFacts,
    out: &mut Vec<StructureProblem>,
) {
    let max_items = (facts.blcksz - crate::format::page::SIZE_OF_PAGE_HEADER_DATA)
        / (max_align(SIZE_OF_INDEX_TUPLE, facts.max_align) + 4);
    if items.len() > max_items {
        out.push(page_problem(format!(
            "{} line pointers, more than MaxIndexTuplesPerPage {max_items}",
            items.len()
        )));
        return;
    }
    // Once per page, not per item: it divides by MAXALIGN.
    let limit = bt_max_item_size(facts);
    for item in items {
        if let Err(message) = check_item(page, h, o, item, facts.max_align, limit) {
            out.push(
                StructureProblem::error(K::BtreeItemInvalid, message)
                    .at(item.offnum)
                    .detail(json!({"lp_off": item.lp_off, "lp_len": item.lp_len})),
            );
        }
    }
}

fn check_item(
    page: &[u8],
    h: &PageHeader,
    o: &BtPageOpaque,
    item: &ItemId,
    max_align: usize,
    limit: usize,
) -> Result<(), String> {
    if matches!(item.lp_flags, LpFlags::Unused | LpFlags::Redirect) || item.lp_len == 0 {
        return Err(format!(
            "{:?} line pointer with lp_len {} on a B-tree page",
            item.lp_flags, item.lp_len
        ));
    }
    let (off, len) = (item.lp_off as usize, item.lp_len as usize);
    let tuple = match item.storage(page) {
        Some(tuple)
            if is_aligned(off, max_align)
                && off >= h.pd_upper as usize
                && off + len <= h.pd_special as usize =>
        {
            tuple
        }
        _ => {
            return Err(format!(
                "item at {off} with lp_len {len} is outside the item area {}..{}",
                h.pd_upper, h.pd_special
            ))
        }
    };
    let t_info = le_u16(tuple, T_INFO_OFFSET).ok_or("index tuple shorter than its header")?;
    let size = (t_info & INDEX_SIZE_MASK) as usize;
    if size != len {
        return Err(format!(
            "index tuple size {size} in t_info differs from lp_len {len} (torn page?)"
        ));
    }
    if size > limit {
        return Err(format!(
            "index tuple of {size} bytes exceeds the largest B-tree item {limit}"
        ));
    }
    if o.is_leaf() && t_info & INDEX_ALT_TID_MASK != 0 {
        check_posting_list(tuple)?;
    }
    Ok(())
}

/// `BTMaxItemSizeNoHeapTid`: a third of a page less overhead (2712 for 8 KiB), the larger of
/// the two limits, so that no legal tuple is flagged.
fn bt_max_item_size(facts: &ClusterFacts) -> usize {
    let ma = facts.max_align;
    let usable = facts.blcksz
        - max_align(crate::format::page::SIZE_OF_PAGE_HEADER_DATA + 3 * 4, ma)
        - max_align(BT_SPECIAL_SIZE, ma);
    (usable / 3 / ma) * ma
}

/// A posting-list tuple's TIDs must fit in the tuple and be strictly ascending.
fn check_posting_list(tuple: &[u8]) -> Result<(), String> {
    let offset_field = le_u16(tuple, 4).ok_or("tuple too short")?;
    if offset_field & BT_IS_POSTING == 0 {
        return Ok(()); // a pivot (high key) on a leaf page
    }
    let count = (offset_field & BT_OFFSET_MASK) as usize;
    let start = ItemPointer::parse(tuple, 0)
        .map(|p| p.block as usize)
        .ok_or("tuple too short")?;
    let end = start + count * SIZE_OF_ITEM_POINTER;
    if count < 2 || end > tuple.len() {
        return Err(format!(
            "posting list of {count} TIDs at offset {start} does not fit in the {}-byte tuple",
            tuple.len()
        ));
    }
    let tids: Vec<(u32, u16)> = (0..count)
        .filter_map(|i| {
            ItemPointer::parse(tuple, start + i * SIZE_OF_ITEM_POINTER).map(|p| (p.block, p.offset))
        })
        .collect();
    match tids.windows(2).position(|w| w[0] >= w[1]) {
        Some(i) => Err(format!(
            "posting list TIDs out of order at position {}: ({},{}) then ({},{})",
            i + 1,
            tids[i].0,
            tids[i].1,
            tids[i + 1].0,
            tids[i + 1].1
        )),
        None => Ok(()),
    }
}
