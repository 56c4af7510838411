//! The commit-log hint bits of one heap tuple against `pg_xact`: which hint contradicts the
//! commit status (`HEAP_XMIN_COMMITTED` on an aborted xmin, and the three other cases; on a
//! cluster shut down cleanly also a commit hint on a transaction `pg_xact` still shows in
//! progress), and the compact record of such a tuple that the scan writes and the merge reads
//! back.

use super::xids::{Statuses, XidWindow};
use crate::catalog::xact::XidStatus;
use crate::check::extended::facts::{Reader, Writer};
use crate::check::standard::xids::xmax_is_locked_only;
use crate::format::enums::byte_enum;
use crate::format::heap::{infomask as im, HeapTupleHeader};

byte_enum! {
    /// Which commit hint bit contradicts `pg_xact`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum HintConflict {
        /// `HEAP_XMIN_COMMITTED` (without `HEAP_XMIN_INVALID`) while xmin aborted.
        XminCommittedButAborted = 1,
        /// `HEAP_XMIN_INVALID` (without `HEAP_XMIN_COMMITTED`) while xmin committed.
        XminInvalidButCommitted = 2,
        /// `HEAP_XMAX_COMMITTED` on a plain xmax that aborted.
        XmaxCommittedButAborted = 3,
        /// `HEAP_XMAX_INVALID` on a plain updating xmax that committed.
        XmaxInvalidButCommitted = 4,
        /// `HEAP_XMIN_COMMITTED` (without `HEAP_XMIN_INVALID`) while `pg_xact` of a cluster shut
        /// down cleanly shows xmin in progress: the server sets the hint only once `pg_xact` says
        /// committed, and a clean shutdown writes every commit-log page, so the page that held the
        /// commit was lost (a lost write of `pg_xact`) or the hint is wrong.
        XminCommittedButInProgress = 5,
        /// `HEAP_XMAX_COMMITTED` on a plain xmax that updated or deleted the row, while `pg_xact` of
        /// a cluster shut down cleanly shows it in progress.
        XmaxCommittedButInProgress = 6,
    }
}

impl HintConflict {
    pub fn describe(self, xid: u32) -> String {
        match self {
            HintConflict::XminCommittedButAborted => {
                format!("HEAP_XMIN_COMMITTED is set but pg_xact says xmin {xid} aborted")
            }
            HintConflict::XminInvalidButCommitted => {
                format!("HEAP_XMIN_INVALID is set but pg_xact says xmin {xid} committed")
            }
            HintConflict::XmaxCommittedButAborted => {
                format!("HEAP_XMAX_COMMITTED is set but pg_xact says xmax {xid} aborted")
            }
            HintConflict::XmaxInvalidButCommitted => {
                format!("HEAP_XMAX_INVALID is set but pg_xact says xmax {xid} (an update or delete) committed")
            }
            HintConflict::XminCommittedButInProgress => format!(
                "HEAP_XMIN_COMMITTED is set but pg_xact says xmin {xid} is still in progress on a cluster shut down cleanly{IN_PROGRESS_CAUSE}"
            ),
            HintConflict::XmaxCommittedButInProgress => format!(
                "HEAP_XMAX_COMMITTED is set but pg_xact says xmax {xid} (an update or delete) is still in progress on a cluster shut down cleanly{IN_PROGRESS_CAUSE}"
            ),
        }
    }

    /// Whether `pg_xact` shows the transaction in progress (a lost commit-log page, when many
    /// tuples agree), rather than with the opposite outcome.
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            HintConflict::XminCommittedButInProgress | HintConflict::XmaxCommittedButInProgress
        )
    }

    /// The status `pg_xact` records, for `detail`.
    pub fn xact_status(self) -> &'static str {
        match self {
            HintConflict::XminCommittedButAborted | HintConflict::XmaxCommittedButAborted => {
                "aborted"
            }
            HintConflict::XminInvalidButCommitted | HintConflict::XmaxInvalidButCommitted => {
                "committed"
            }
            HintConflict::XminCommittedButInProgress | HintConflict::XmaxCommittedButInProgress => {
                "in_progress"
            }
        }
    }

    /// The hint bit's name, for `detail`.
    pub fn hint(self) -> &'static str {
        match self {
            HintConflict::XminCommittedButAborted => "HEAP_XMIN_COMMITTED",
            HintConflict::XminInvalidButCommitted => "HEAP_XMIN_INVALID",
            HintConflict::XmaxCommittedButAborted => "HEAP_XMAX_COMMITTED",
            HintConflict::XmaxInvalidButCommitted => "HEAP_XMAX_INVALID",
            HintConflict::XminCommittedButInProgress => "HEAP_XMIN_COMMITTED",
            HintConflict::XmaxCommittedButInProgress => "HEAP_XMAX_COMMITTED",
        }
    }
}

/// What the message of an in-progress conflict adds about its cause.
const IN_PROGRESS_CAUSE: &str =
    ": the commit was lost from pg_xact (a lost write of its page) or the hint bit is wrong";

/// One tuple whose hint bit contradicts `pg_xact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintProblem {
    pub offnum: u16,
    pub conflict: HintConflict,
    pub xid: u32,
}

impl HintProblem {
    pub fn write(&self, w: &mut Writer<'_>) {
        w.u16(self.offnum).u8(self.conflict as u8).u32(self.xid);
    }

    pub fn read(r: &mut Reader<'_>) -> Option<HintProblem> {
        Some(HintProblem {
            offnum: r.u16()?,
            conflict: HintConflict::from_byte(r.u8()?)?,
            xid: r.u32()?,
        })
    }
}

/// The hint bits of tuple `h` against `pg_xact`, for xids the window covers. Tuples moved by
/// a pre-9.0 `VACUUM FULL` are skipped (their xmin hints describe `xvac`), and so is the
/// `HEAP_XMAX_INVALID` hint of an xmax that only locked the row (set once the locker ended,
/// committed or not). A commit hint on an xid `pg_xact` shows in progress counts only on a
/// cluster shut down cleanly, for xmin and for an xmax that updated or deleted the row (a
/// prepared transaction is in progress too, but no server sets a commit hint before `pg_xact`
/// says committed: it contradicts the hint as much); "sub-committed" is never judged.
pub(super) fn hint_conflicts(
    h: &HeapTupleHeader,
    window: &XidWindow<'_>,
    clog: &Statuses<'_>,
) -> [Option<(HintConflict, u32)>; 2] {
    let mask = h.t_infomask;
    if mask & im::HEAP_MOVED != 0 {
        return [None, None];
    }
    // Only a hint that says one thing (committed or invalid, not both: frozen) can contradict
    // `pg_xact`; the log is read for those alone. "In progress" contradicts a commit hint only
    // where `pg_xact` is exact (a clean shutdown): anywhere else its page may lag.
    let exact = window.facts.clog_exact;
    let committed_hint = |xid: u32, aborted: HintConflict, in_progress: HintConflict| {
        if !window.covers(xid) {
            return None;
        }
        match clog.status(xid) {
            XidStatus::Aborted => Some((aborted, xid)),
            XidStatus::InProgress if exact => Some((in_progress, xid)),
            _ => None,
        }
    };
    let invalid_hint = |xid: u32, c: HintConflict| {
        (window.covers(xid) && clog.status(xid) == XidStatus::Committed).then_some((c, xid))
    };
    let xmin = match (
        mask & im::HEAP_XMIN_COMMITTED != 0,
        mask & im::HEAP_XMIN_INVALID != 0,
    ) {
        (true, false) => committed_hint(
            h.t_xmin,
            HintConflict::XminCommittedButAborted,
            HintConflict::XminCommittedButInProgress,
        ),
        (false, true) => invalid_hint(h.t_xmin, HintConflict::XminInvalidButCommitted),
        _ => None,
    };
    if mask & im::HEAP_XMAX_IS_MULTI != 0 {
        return [xmin, None];
    }
    let locked_only = xmax_is_locked_only(mask);
    let xmax = match (
        mask & im::HEAP_XMAX_COMMITTED != 0,
        mask & im::HEAP_XMAX_INVALID != 0,
    ) {
        (true, false) => committed_hint(
            h.t_xmax,
            HintConflict::XmaxCommittedButAborted,
            HintConflict::XmaxCommittedButInProgress,
        )
        // An xmax that only locked the row is not judged by "in progress".
        .filter(|(c, _)| !(locked_only && c.in_progress())),
        (false, true) if !locked_only => {
            invalid_hint(h.t_xmax, HintConflict::XmaxInvalidButCommitted)
        }
        _ => None,
    };
    [xmin, xmax]
}
