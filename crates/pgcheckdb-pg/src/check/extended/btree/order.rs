//! Key order across B-tree pages with the index's comparator from [`crate::check::order`],
//! checked where the keys meet in the stream: a page's last key and high key against its
//! right sibling's first key (at the left page's block), a parent's separator against its
//! leaf child's first key (at the child's block).

use std::cmp::Ordering;

use serde_json::json;

use super::block::Block;
use super::{IndexCheck, Phase, Where};
use crate::finding::FindingKind as K;

impl IndexCheck<'_> {
    /// Heap TIDs break ties only in a version 4 ("heapkeyspace") index; in versions 2 and 3
    /// equal keys may span pages in any TID order.
    pub(super) fn key_order(&mut self, b: &Block<'_>) {
        let Some(ordering) = self.ordering.clone() else {
            return;
        };
        let Some(p) = b.live() else {
            return;
        };
        let heapkeyspace = self.heapkeyspace();
        for r in &b.right {
            if r.from != p.btpo_next || r.level != p.btpo_level || r.first_key.is_empty() {
                continue;
            }
            // An internal page's last key is not compared: only its high key bounds it.
            for (sub, what, left) in [(0, "last key", p.last), (1, "high key", p.high_key)] {
                if left.is_empty() {
                    continue;
                }
                match ordering.compare_in(left, r.first_key, heapkeyspace) {
                    Some(Ordering::Greater) => self.candidate(
                        Where::new(Phase::KeyOrder, b.blkno, sub).level(r.level),
                        r.from,
                        K::BtreeOrderInvalid,
                        format!(
                            "first key sorts before the {what} of its left sibling block {}",
                            b.blkno
                        ),
                        json!({"other_block": b.blkno}),
                    ),
                    Some(_) => {}
                    None => self.unknown += 1,
                }
            }
        }
        // A leaf child: its first key is not below the separator of its downlink (the
        // parent's first downlink is "minus infinity").
        if p.ndownlinks != 0 || p.first.is_empty() {
            return;
        }
        for d in b
            .downs
            .iter()
            .filter(|d| d.index > 0 && !d.separator.is_empty())
        {
            match ordering.compare_in(d.separator, p.first, heapkeyspace) {
                Some(Ordering::Greater) => self.candidate(
                    Where::new(Phase::KeyOrder, d.parent, 2 + d.index as u32).level(d.parent_level),
                    d.parent,
                    K::BtreeOrderInvalid,
                    format!(
                        "separator at offset {} sorts after the first key of its child block {}",
                        d.offnum, b.blkno
                    ),
                    json!({"offset": d.offnum, "other_block": b.blkno}),
                ),
                Some(_) => {}
                None => self.unknown += 1,
            }
        }
    }
}
