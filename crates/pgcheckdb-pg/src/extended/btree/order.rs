//! Key order across B-tree pages, with the index's comparator from [`crate::btree_order`].

use serde_json::json;

use super::Check;
use crate::finding::FindingKind as K;

/// `BTREE_NOVAC_VERSION`: the first B-tree version whose keys include the heap TID.
const BTREE_HEAPKEYSPACE_VERSION: u32 = 4;

impl Check<'_> {
    /// Keys across pages with the index's comparator: a page's last key is not above its right
    /// sibling's first key or its high key above that first key, and a parent's separator is
    /// not above its leaf child's first key. Heap TIDs break ties only in a version 4
    /// ("heapkeyspace") index; in versions 2 and 3 equal keys may span pages in any TID order.
    pub(super) fn key_order(&mut self) {
        let ordering = match &self.info.ordering {
            Ok(o) => o.clone(),
            Err(why) => {
                self.out.not_order_checked = Some(format!("{why:?}"));
                return;
            }
        };
        let heapkeyspace = self
            .f
            .meta
            .is_some_and(|m| m.version >= BTREE_HEAPKEYSPACE_VERSION);
        let mut unknown = 0u64;
        let pages = self.live_pages();
        for a in &pages {
            if let Some(b) = self.live(a.btpo_next) {
                // An internal page's first data item is its "minus infinity" downlink, whose
                // key columns are truncated away: its first real key is the second data item.
                let right_first = match b.downlinks.is_empty() {
                    true => Some(&b.first_item),
                    false => b.downlinks.get(1).map(|d| &d.item),
                };
                if let Some(right_first) = right_first.filter(|k| {
                    b.btpo_prev == a.blkno && b.btpo_level == a.btpo_level && !k.is_empty()
                }) {
                    for (what, left) in [("last key", &a.last_item), ("high key", &a.high_key)] {
                        if left.is_empty() || (what == "last key" && !a.downlinks.is_empty()) {
                            continue;
                        }
                        match ordering.compare_in(left, right_first, heapkeyspace) {
                            Some(std::cmp::Ordering::Greater) => self.report(
                                b.blkno,
                                K::BtreeOrderInvalid,
                                format!("first key sorts before the {what} of its left sibling block {}", a.blkno),
                                json!({"other_block": a.blkno}),
                            ),
                            Some(_) => {}
                            None => unknown += 1,
                        }
                    }
                }
            }
            for (i, d) in a.downlinks.iter().enumerate().skip(1) {
                let Some(child) = self.live(d.child) else {
                    continue;
                };
                if !child.downlinks.is_empty() || child.first_item.is_empty() || i == 0 {
                    continue;
                }
                match ordering.compare_in(&d.item, &child.first_item, heapkeyspace) {
                    Some(std::cmp::Ordering::Greater) => self.report(
                        a.blkno,
                        K::BtreeOrderInvalid,
                        format!("separator at offset {} sorts after the first key of its child block {}", d.offnum, child.blkno),
                        json!({"offset": d.offnum, "other_block": child.blkno}),
                    ),
                    Some(_) => {}
                    None => unknown += 1,
                }
            }
        }
        if unknown > 0 {
            self.out.not_order_checked =
                Some(format!("{unknown} key comparison(s) could not be made"));
        }
    }
}
