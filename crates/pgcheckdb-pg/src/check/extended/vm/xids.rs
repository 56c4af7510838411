//! The transaction ids of one table that `pg_xact` still answers for, and `pg_xact` lookups
//! that remember the last answer: what the heap summaries and the hint-bit check read.

use std::cell::Cell;

use crate::catalog::xact::{CommitLog, XidStatus, FIRST_NORMAL_TRANSACTION_ID};
use crate::check::standard::xids::{in_future, precedes};
use crate::check::standard::ClusterFacts;

/// The transaction ids `pg_xact` still answers for in one table: from its `relfrozenxid` (or
/// the cluster's oldest xid) up to, not including, the newest xid the files allow.
#[derive(Debug, Clone, Copy)]
pub struct XidWindow<'a> {
    pub oldest: u32,
    pub facts: &'a ClusterFacts,
}

impl<'a> XidWindow<'a> {
    pub fn new(relfrozenxid: u32, facts: &'a ClusterFacts) -> XidWindow<'a> {
        let oldest = if relfrozenxid >= FIRST_NORMAL_TRANSACTION_ID {
            relfrozenxid
        } else {
            facts.oldest_xid
        };
        XidWindow { oldest, facts }
    }

    /// `xid` is a normal xid inside the window.
    pub fn covers(&self, xid: u32) -> bool {
        xid >= FIRST_NORMAL_TRANSACTION_ID
            && !in_future(xid, self.facts)
            && !precedes(xid, self.oldest)
    }
}

/// `pg_xact` lookups that remember the last answer: the tuples of a page mostly share their
/// inserting transaction.
pub struct Statuses<'a> {
    clog: &'a CommitLog,
    last: Cell<Option<(u32, XidStatus)>>,
}

impl<'a> Statuses<'a> {
    pub fn new(clog: &'a CommitLog) -> Statuses<'a> {
        Statuses {
            clog,
            last: Cell::new(None),
        }
    }

    pub fn status(&self, xid: u32) -> XidStatus {
        match self.last.get() {
            Some((x, status)) if x == xid => status,
            _ => {
                let status = self.clog.status(xid);
                self.last.set(Some((xid, status)));
                status
            }
        }
    }
}
