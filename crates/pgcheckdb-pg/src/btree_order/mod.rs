//! The order of a B-tree index's keys, offline: what "key A sorts before key B" means for one
//! index, from the operator class and collation of each key column and `pg_index.indoption`
//! (DESC, NULLS FIRST). The standard level uses it for the keys inside one page, the extended
//! level across siblings and between a parent's separators and its child's keys.
//!
//! Keys whose type, operator class or collation has no comparator here are never guessed: the
//! index is reported as not order-checked, with the reason.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::catalog::{Catalog, RelationInfo};

/// How the keys of one B-tree index are ordered.
#[derive(Debug, Clone)]
pub struct IndexOrdering {
    key_columns: usize,
    unique: Option<Uniqueness>,
}

/// `indisunique` with `indnullsnotdistinct` (PostgreSQL 15+; false before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uniqueness {
    pub nulls_not_distinct: bool,
}

impl IndexOrdering {
    /// Number of key columns (`indnkeyatts`); INCLUDE columns are not keys and never compared.
    pub fn key_columns(&self) -> usize {
        self.key_columns
    }

    /// `Some` for a unique index.
    pub fn uniqueness(&self) -> Option<Uniqueness> {
        self.unique
    }

    /// Compares the keys of two index tuples given as whole items (the `IndexTupleData` header,
    /// null bitmap and data: the `lp_len` bytes at `lp_off` on the page). A pivot tuple whose
    /// key columns were truncated away sorts before every tuple that shares its remaining
    /// columns (the missing columns are "minus infinity", as nbtree compares them). `None` when
    /// a key cannot be decoded; a malformed tuple is reported by the page checks, not here.
    pub fn compare(&self, _a: &[u8], _b: &[u8]) -> Option<Ordering> {
        None
    }
}

/// Why an index's keys are not order-checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOrderChecked {
    /// The comparators are not built yet.
    NotImplemented,
}

/// The key order of B-tree index `index` of database `db_oid`, when every key column has a
/// comparator here.
pub fn ordering_for(
    _catalog: &Catalog,
    _db_oid: u32,
    _index: &RelationInfo,
) -> Result<Arc<IndexOrdering>, NotOrderChecked> {
    Err(NotOrderChecked::NotImplemented)
}
