//! Planning the standard level's key-order check: for each B-tree index of the plan, its
//! [`IndexOrdering`] and whether its metapage says version 4 (heap TIDs are part of the key),
//! or why its keys are not order-checked.

use std::collections::HashMap;
use std::sync::Arc;

use super::{ordering_for_align, IndexOrdering, NotOrderChecked};
use crate::catalog::{Catalog, RelationInfo};
use crate::layout::btree::{BtMetaPage, BTREE_MAGIC};
use crate::verify::Plan;

/// `BTREE_NOVAC_VERSION`: from version 4 on, heap TIDs are the last key ("heapkeyspace").
const BTREE_HEAPKEYSPACE_VERSION: u32 = 4;

/// What the key-order check of one B-tree index needs.
#[derive(Debug, Clone)]
pub struct BtreeOrderCheck {
    pub ordering: Arc<IndexOrdering>,
    /// Version 4+: equal keys are ordered by heap TID.
    pub heapkeyspace: bool,
}

/// The order checks of the plan's B-tree indexes, one per fork.
pub struct BtreeOrders<'a> {
    plan: &'a Plan,
    catalog: &'a Catalog,
    by_fork: HashMap<usize, Option<BtreeOrderCheck>>,
    /// Indexes not order-checked: `(schema.name, database oid, why)`.
    pub skipped: Vec<(String, u32, NotOrderChecked)>,
}

impl<'a> BtreeOrders<'a> {
    pub fn new(plan: &'a Plan, catalog: &'a Catalog) -> BtreeOrders<'a> {
        BtreeOrders {
            plan,
            catalog,
            by_fork: HashMap::new(),
            skipped: Vec::new(),
        }
    }

    /// The order check of the main fork `fork` of B-tree index `rel` in database `db_oid`.
    pub fn of(&mut self, fork: usize, db_oid: u32, rel: &RelationInfo) -> Option<BtreeOrderCheck> {
        if let Some(found) = self.by_fork.get(&fork) {
            return found.clone();
        }
        let max_align = self.plan.control.max_align as usize;
        let check = match ordering_for_align(self.catalog, db_oid, rel, max_align) {
            Ok(ordering) => Some(BtreeOrderCheck {
                ordering,
                heapkeyspace: self.heapkeyspace(fork),
            }),
            Err(why) => {
                self.skipped.push((rel.name.clone(), db_oid, why));
                None
            }
        };
        self.by_fork.insert(fork, check.clone());
        check
    }

    /// Whether the metapage says version 4 or later; false when it cannot be read (then only
    /// the keys are compared, never the heap TIDs: no false finding either way).
    fn heapkeyspace(&self, fork: usize) -> bool {
        self.plan
            .read_fork_block(fork, 0)
            .and_then(|page| BtMetaPage::parse(&page))
            .is_some_and(|m| {
                m.btm_magic == BTREE_MAGIC && m.btm_version >= BTREE_HEAPKEYSPACE_VERSION
            })
    }
}
