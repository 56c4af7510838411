//! What one heap tuple header says about its transactions: whether an id lies past the
//! cluster's bound or before the oldest valid one, the commit status of `t_xmin` (hint bits
//! first, then `pg_xact`), and whether `t_xmax` is a committed update. Shared by the tuple
//! checks (`heap.rs`) and the update-chain checks (`hot.rs`).

use super::{ClusterFacts, HeapRelation};
use crate::catalog::xact::{
    CommitLog, XidStatus, BOOTSTRAP_TRANSACTION_ID, FIRST_NORMAL_TRANSACTION_ID,
    FROZEN_TRANSACTION_ID,
};
use crate::format::heap::{infomask as im, HeapTupleHeader};

/// The commit status of a transaction id, as far as the files prove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    Committed,
    Aborted,
    /// Neither committed nor aborted in an exact commit log: a prepared transaction (or one
    /// cut off by a crash before a clean restart).
    InProgress,
}

/// `true` if `xid` is a normal xid at or after the cluster's bound.
pub fn in_future(xid: u32, facts: &ClusterFacts) -> bool {
    xid >= FIRST_NORMAL_TRANSACTION_ID && (xid.wrapping_sub(facts.next_xid) as i32) >= 0
}

/// `true` if the normal id `id` precedes the normal id `limit`, modulo 2^32.
pub fn precedes(id: u32, limit: u32) -> bool {
    id >= FIRST_NORMAL_TRANSACTION_ID
        && limit >= FIRST_NORMAL_TRANSACTION_ID
        && (id.wrapping_sub(limit) as i32) < 0
}

/// The oldest xid still valid in the relation: `relfrozenxid` when it is normal, else the
/// cluster's `oldestXid` (as `verify_heapam` takes it).
pub fn oldest_valid_xid(rel: &HeapRelation, facts: &ClusterFacts) -> u32 {
    if rel.relfrozenxid >= FIRST_NORMAL_TRANSACTION_ID {
        rel.relfrozenxid
    } else {
        facts.oldest_xid
    }
}

/// The oldest multixact still valid in the relation: `relminmxid`, else `oldestMulti`.
pub fn oldest_valid_multi(rel: &HeapRelation, facts: &ClusterFacts) -> u32 {
    if rel.relminmxid != 0 {
        rel.relminmxid
    } else {
        facts.oldest_multi
    }
}

/// `HEAP_XMAX_IS_LOCKED_ONLY`: the xmax only locked the tuple (also the pre-9.3 form, an
/// exclusive lock bit without a multixact).
pub fn xmax_is_locked_only(mask: u16) -> bool {
    mask & im::HEAP_XMAX_LOCK_ONLY != 0
        || mask & (im::HEAP_XMAX_IS_MULTI | im::HEAP_XMAX_EXCL_LOCK | im::HEAP_XMAX_KEYSHR_LOCK)
            == im::HEAP_XMAX_EXCL_LOCK
}

/// The frozen form of a 9.4+ tuple: both xmin hint bits.
pub fn xmin_frozen(mask: u16) -> bool {
    mask & (im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID)
        == im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID
}

/// The commit status of `t_xmin`, or `None` when the files cannot tell (an id outside the
/// valid range, a truncated commit log, or "in progress" in a commit log that may lag).
pub fn xmin_status(
    h: &HeapTupleHeader,
    rel: &HeapRelation,
    facts: &ClusterFacts,
    clog: &CommitLog,
) -> Option<Commit> {
    let mask = h.t_infomask;
    if mask & im::HEAP_XMIN_COMMITTED != 0 {
        return Some(Commit::Committed);
    }
    if mask & im::HEAP_XMIN_INVALID != 0 {
        return Some(Commit::Aborted);
    }
    match h.t_xmin {
        0 => return None,
        BOOTSTRAP_TRANSACTION_ID | FROZEN_TRANSACTION_ID => return Some(Commit::Committed),
        _ => {}
    }
    if in_future(h.t_xmin, facts) || precedes(h.t_xmin, oldest_valid_xid(rel, facts)) {
        return None;
    }
    xid_commit(h.t_xmin, facts, clog)
}

/// The status `pg_xact` records for a normal xid inside the valid range.
pub fn xid_commit(xid: u32, facts: &ClusterFacts, clog: &CommitLog) -> Option<Commit> {
    match clog.status(xid) {
        XidStatus::Committed => Some(Commit::Committed),
        XidStatus::Aborted => Some(Commit::Aborted),
        XidStatus::InProgress | XidStatus::SubCommitted if facts.clog_exact => {
            Some(Commit::InProgress)
        }
        _ => None,
    }
}

/// `true` if `t_xmax` is a plain (not multixact) xid that updated or deleted the tuple and is
/// known to have committed: only then does PostgreSQL follow `t_ctid` to a newer version.
pub fn xmax_committed_update(h: &HeapTupleHeader, facts: &ClusterFacts, clog: &CommitLog) -> bool {
    let mask = h.t_infomask;
    if mask & (im::HEAP_XMAX_INVALID | im::HEAP_XMAX_IS_MULTI) != 0 || xmax_is_locked_only(mask) {
        return false;
    }
    if mask & im::HEAP_XMAX_COMMITTED != 0 {
        return true;
    }
    h.t_xmax >= FIRST_NORMAL_TRANSACTION_ID
        && !in_future(h.t_xmax, facts)
        && xid_commit(h.t_xmax, facts, clog) == Some(Commit::Committed)
}

/// The later of two ids, modulo 2^32.
pub fn later(a: u32, b: u32) -> u32 {
    if (b.wrapping_sub(a) as i32) > 0 {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_wraps() {
        assert_eq!(later(10, 20), 20);
        assert_eq!(later(20, 10), 20);
        assert_eq!(later(u32::MAX - 5, 3), 3);
    }
}
