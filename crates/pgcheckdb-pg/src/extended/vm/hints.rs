//! The commit-log hint bits of one heap tuple against `pg_xact`: which hint contradicts the
//! commit status (`HEAP_XMIN_COMMITTED` on an aborted xmin, and the three other cases), and
//! the compact record of such a tuple that the scan writes and the merge reads back.

use super::scan::{Statuses, XidWindow, HEAP_MOVED};
use crate::catalog::xact::XidStatus;
use crate::extended::facts::{Reader, Writer};
use crate::layout::heap::{infomask as im, HeapTupleHeader};
use crate::standard::xids::xmax_is_locked_only;

/// Which commit hint bit contradicts `pg_xact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HintConflict {
    /// `HEAP_XMIN_COMMITTED` (without `HEAP_XMIN_INVALID`) while xmin aborted.
    XminCommittedButAborted = 1,
    /// `HEAP_XMIN_INVALID` (without `HEAP_XMIN_COMMITTED`) while xmin committed.
    XminInvalidButCommitted = 2,
    /// `HEAP_XMAX_COMMITTED` on a plain xmax that aborted.
    XmaxCommittedButAborted = 3,
    /// `HEAP_XMAX_INVALID` on a plain updating xmax that committed.
    XmaxInvalidButCommitted = 4,
}

impl HintConflict {
    pub fn from_byte(b: u8) -> Option<HintConflict> {
        Some(match b {
            1 => HintConflict::XminCommittedButAborted,
            2 => HintConflict::XminInvalidButCommitted,
            3 => HintConflict::XmaxCommittedButAborted,
            4 => HintConflict::XmaxInvalidButCommitted,
            _ => return None,
        })
    }

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
        }
    }

    /// The hint bit's name, for `detail`.
    pub fn hint(self) -> &'static str {
        match self {
            HintConflict::XminCommittedButAborted => "HEAP_XMIN_COMMITTED",
            HintConflict::XminInvalidButCommitted => "HEAP_XMIN_INVALID",
            HintConflict::XmaxCommittedButAborted => "HEAP_XMAX_COMMITTED",
            HintConflict::XmaxInvalidButCommitted => "HEAP_XMAX_INVALID",
        }
    }
}

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
/// committed or not).
pub(super) fn hint_conflicts(
    h: &HeapTupleHeader,
    window: &XidWindow<'_>,
    clog: &Statuses<'_>,
) -> [Option<(HintConflict, u32)>; 2] {
    let mask = h.t_infomask;
    if mask & HEAP_MOVED != 0 {
        return [None, None];
    }
    // Only a hint that says one thing (committed or invalid, not both: frozen) can contradict
    // `pg_xact`; the log is read for those alone.
    let conflict = |xid: u32, contradicting: XidStatus, c: HintConflict| {
        (window.covers(xid) && clog.status(xid) == contradicting).then_some((c, xid))
    };
    let xmin = match (
        mask & im::HEAP_XMIN_COMMITTED != 0,
        mask & im::HEAP_XMIN_INVALID != 0,
    ) {
        (true, false) => conflict(
            h.t_xmin,
            XidStatus::Aborted,
            HintConflict::XminCommittedButAborted,
        ),
        (false, true) => conflict(
            h.t_xmin,
            XidStatus::Committed,
            HintConflict::XminInvalidButCommitted,
        ),
        _ => None,
    };
    if mask & im::HEAP_XMAX_IS_MULTI != 0 {
        return [xmin, None];
    }
    let xmax = match (
        mask & im::HEAP_XMAX_COMMITTED != 0,
        mask & im::HEAP_XMAX_INVALID != 0,
    ) {
        (true, false) => conflict(
            h.t_xmax,
            XidStatus::Aborted,
            HintConflict::XmaxCommittedButAborted,
        ),
        (false, true) if !xmax_is_locked_only(mask) => conflict(
            h.t_xmax,
            XidStatus::Committed,
            HintConflict::XmaxInvalidButCommitted,
        ),
        _ => None,
    };
    [xmin, xmax]
}
