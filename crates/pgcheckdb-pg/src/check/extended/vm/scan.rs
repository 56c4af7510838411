//! The scan side of the visibility and hint-bit checks: what one heap page or one
//! visibility-map page contributes, as compact records.
//!
//! A heap page gives a [`PageSummary`] only when a set map bit could be wrong about it: its
//! `PD_ALL_VISIBLE` flag is clear, it holds a line pointer that is certainly not visible to
//! everyone or that still needs freezing, or it is all zero. A healthy all-visible, all-frozen
//! page (what `VACUUM (FREEZE)` leaves) gives nothing. Tuple status follows the snapshot of a
//! cluster shut down cleanly: hint bits first, then `pg_xact`, and `pg_xact` only for xids it
//! still covers (from `relfrozenxid`, or the cluster's oldest xid, up to the newest xid the
//! files allow). Whatever cannot be decided (multixact updaters, pre-9.0 `VACUUM FULL` moves,
//! xids outside that window) is never counted against the page.
//!
//! A visibility-map page gives one [`MapRun`] per run of heap blocks with the same non-zero
//! bits, so a frozen table costs one record per map page.

use super::hints::hint_conflicts;
pub use super::hints::{HintConflict, HintProblem};
use super::xids::{Statuses, XidWindow};
use crate::catalog::xact::{CommitLog, XidStatus, FIRST_NORMAL_TRANSACTION_ID};
use crate::check::extended::facts::{Reader, Writer};
use crate::check::extended::heap::HeapTuples;
use crate::check::standard::xids::{xmax_is_locked_only, xmin_frozen};
use crate::format::enums::byte_enum;
use crate::format::heap::{infomask as im, HeapTupleHeader};
use crate::format::itemid::LpFlags;
use crate::format::page::{PD_ALL_VISIBLE, SIZE_OF_PAGE_HEADER_DATA};
use crate::format::vm::{HEAPBLOCKS_PER_BYTE, VM_ALL_FROZEN, VM_ALL_VISIBLE};

byte_enum! {
    /// The first byte of a [`super::super::facts::Family::Visibility`] record's body: a map run
    /// sorts before the heap page it starts at.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Tag {
        MapRun = 0,
        HeapPage = 1,
    }
}

/// `HEAPBLOCKS_PER_PAGE`: heap blocks one map page covers.
pub fn heapblocks_per_page(blcksz: usize) -> u64 {
    ((blcksz - SIZE_OF_PAGE_HEADER_DATA) * HEAPBLOCKS_PER_BYTE) as u64
}

byte_enum! {
    /// Why a line pointer keeps its page from being all-visible or all-frozen.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Why {
        /// `LP_DEAD`: neither visible nor frozen.
        LpDead = 1,
        /// xmin aborted (hint bit `HEAP_XMIN_INVALID` or `pg_xact`), or invalid.
        XminAborted = 2,
        /// xmin never committed: `pg_xact` shows it in progress after a clean shutdown.
        XminNotCommitted = 3,
        /// Deleted or updated by a committed transaction.
        XmaxCommitted = 4,
        /// xmin is a normal xid, not frozen.
        XminNotFrozen = 5,
        /// xmax is a normal xid (it must be cleared by freezing).
        XmaxNotFrozen = 6,
        /// xmax is a multixact.
        MultiNotFrozen = 7,
        /// `xvac` of a moved tuple is a normal xid.
        XvacNotFrozen = 8,
    }
}

impl Why {
    /// What the line pointer is, for a message.
    pub fn describe(self, xid: u32) -> String {
        match self {
            Why::LpDead => "is LP_DEAD".into(),
            Why::XminAborted => format!("has xmin {xid}, which aborted"),
            Why::XminNotCommitted => format!("has xmin {xid}, which never committed"),
            Why::XmaxCommitted => format!("was deleted or updated by xmax {xid}, which committed"),
            Why::XminNotFrozen => format!("has xmin {xid}, which is not frozen"),
            Why::XmaxNotFrozen => format!("has xmax {xid}, which freezing would have cleared"),
            Why::MultiNotFrozen => {
                format!("has multixact xmax {xid}, which freezing would have cleared")
            }
            Why::XvacNotFrozen => format!("has xvac {xid}, which is not frozen"),
        }
    }
}

/// The first line pointer of a page that breaks a rule, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offence {
    pub offnum: u16,
    pub why: Why,
    pub xid: u32,
}

/// Flag bits of a [`PageSummary`] record.
mod summary_flags {
    pub const PD_ALL_VISIBLE: u8 = 0x01;
    pub const ALL_ZERO: u8 = 0x02;
    pub const NOT_VISIBLE: u8 = 0x04;
    pub const NOT_FROZEN: u8 = 0x08;
}

/// What a set map bit needs to know about one heap page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageSummary {
    pub pd_all_visible: bool,
    /// The page is all zero (never written, or a lost write).
    pub all_zero: bool,
    /// The first line pointer certainly not visible to everyone.
    pub not_visible: Option<Offence>,
    /// The first line pointer that still needs freezing.
    pub not_frozen: Option<Offence>,
}

impl PageSummary {
    /// Whether a set map bit could be wrong about this page (else no record is written).
    pub fn matters(&self) -> bool {
        self.all_zero
            || !self.pd_all_visible
            || self.not_visible.is_some()
            || self.not_frozen.is_some()
    }

    pub fn write(&self, w: &mut Writer<'_>) {
        use summary_flags as f;
        let mut flags = 0;
        for (on, bit) in [
            (self.pd_all_visible, f::PD_ALL_VISIBLE),
            (self.all_zero, f::ALL_ZERO),
            (self.not_visible.is_some(), f::NOT_VISIBLE),
            (self.not_frozen.is_some(), f::NOT_FROZEN),
        ] {
            if on {
                flags |= bit;
            }
        }
        w.u8(Tag::HeapPage as u8).u8(flags);
        for o in [self.not_visible, self.not_frozen].into_iter().flatten() {
            w.u16(o.offnum).u8(o.why as u8).u32(o.xid);
        }
    }

    /// Reads the body after the tag.
    pub fn read(r: &mut Reader<'_>) -> Option<PageSummary> {
        use summary_flags as f;
        let flags = r.u8()?;
        let mut offence = |on: bool| -> Option<Option<Offence>> {
            if !on {
                return Some(None);
            }
            Some(Some(Offence {
                offnum: r.u16()?,
                why: Why::from_byte(r.u8()?)?,
                xid: r.u32()?,
            }))
        };
        let not_visible = offence(flags & f::NOT_VISIBLE != 0)?;
        let not_frozen = offence(flags & f::NOT_FROZEN != 0)?;
        Some(PageSummary {
            pd_all_visible: flags & f::PD_ALL_VISIBLE != 0,
            all_zero: flags & f::ALL_ZERO != 0,
            not_visible,
            not_frozen,
        })
    }
}

/// A run of heap blocks `[start, end)` whose map bits are all `bits` (non-zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapRun {
    pub start: u32,
    pub end: u32,
    pub bits: u8,
}

impl MapRun {
    /// The body after the head (whose block is `start`).
    pub fn write(&self, w: &mut Writer<'_>) {
        w.u8(Tag::MapRun as u8).u32(self.end).u8(self.bits);
    }

    /// Reads the body after the tag.
    pub fn read(start: u32, r: &mut Reader<'_>) -> Option<MapRun> {
        Some(MapRun {
            start,
            end: r.u32()?,
            bits: r.u8()?,
        })
    }
}

/// The runs of set bits of map page `vm_block`, into `out` (cleared first).
pub fn map_runs(page: &[u8], vm_block: u32, blcksz: usize, out: &mut Vec<MapRun>) {
    out.clear();
    let first = vm_block as u64 * heapblocks_per_page(blcksz);
    let Some(map) = page.get(SIZE_OF_PAGE_HEADER_DATA..blcksz) else {
        return;
    };
    for (i, &byte) in map.iter().enumerate() {
        if byte == 0 {
            continue;
        }
        for k in 0..HEAPBLOCKS_PER_BYTE {
            let bits = (byte >> (2 * k)) & (VM_ALL_VISIBLE | VM_ALL_FROZEN);
            if bits == 0 {
                continue;
            }
            let Ok(heap) = u32::try_from(first + (i * HEAPBLOCKS_PER_BYTE + k) as u64) else {
                return; // past MaxBlockNumber: no heap block can be there
            };
            match out.last_mut() {
                Some(r) if r.end == heap && r.bits == bits => r.end = heap + 1,
                _ => out.push(MapRun {
                    start: heap,
                    end: heap + 1,
                    bits,
                }),
            }
        }
    }
}

/// A tuple's visibility to everyone, as far as the files decide it.
enum Seen {
    Everyone,
    NotEveryone(Why, u32),
    Unknown,
}

/// Whether the tuple `h` is visible to every snapshot of a cleanly shut-down cluster.
fn seen_by_everyone(h: &HeapTupleHeader, window: &XidWindow<'_>, clog: &Statuses<'_>) -> Seen {
    let mask = h.t_infomask;
    if mask & im::HEAP_MOVED != 0 {
        return Seen::Unknown;
    }
    if !xmin_frozen(mask) && mask & im::HEAP_XMIN_COMMITTED == 0 {
        if mask & im::HEAP_XMIN_INVALID != 0 || h.t_xmin == 0 {
            return Seen::NotEveryone(Why::XminAborted, h.t_xmin);
        }
        if h.t_xmin >= FIRST_NORMAL_TRANSACTION_ID {
            if !window.covers(h.t_xmin) {
                return Seen::Unknown;
            }
            match clog.status(h.t_xmin) {
                XidStatus::Committed => {}
                XidStatus::Aborted => return Seen::NotEveryone(Why::XminAborted, h.t_xmin),
                XidStatus::InProgress if window.facts.clog_exact => {
                    return Seen::NotEveryone(Why::XminNotCommitted, h.t_xmin)
                }
                _ => return Seen::Unknown,
            }
        }
    }
    if mask & im::HEAP_XMAX_INVALID != 0 || xmax_is_locked_only(mask) {
        return Seen::Everyone;
    }
    if mask & im::HEAP_XMAX_IS_MULTI != 0 {
        return Seen::Unknown; // an updater inside a multixact: pg_multixact is not read
    }
    if h.t_xmax == 0 {
        return Seen::Everyone;
    }
    if mask & im::HEAP_XMAX_COMMITTED != 0 {
        return Seen::NotEveryone(Why::XmaxCommitted, h.t_xmax);
    }
    if !window.covers(h.t_xmax) {
        return Seen::Unknown;
    }
    match clog.status(h.t_xmax) {
        XidStatus::Aborted => Seen::Everyone,
        XidStatus::Committed => Seen::NotEveryone(Why::XmaxCommitted, h.t_xmax),
        // Never committed: a crashed deleter (the row is live) or a prepared one (not yet).
        _ => Seen::Unknown,
    }
}

/// `heap_tuple_needs_eventual_freeze`: the xid that still needs freezing, if any.
fn needs_freeze(h: &HeapTupleHeader) -> Option<(Why, u32)> {
    let mask = h.t_infomask;
    let normal = |x: u32| x >= FIRST_NORMAL_TRANSACTION_ID;
    if !xmin_frozen(mask) && normal(h.t_xmin) {
        return Some((Why::XminNotFrozen, h.t_xmin));
    }
    if mask & im::HEAP_XMAX_IS_MULTI != 0 {
        if h.t_xmax != 0 {
            return Some((Why::MultiNotFrozen, h.t_xmax));
        }
    } else if normal(h.t_xmax) {
        return Some((Why::XmaxNotFrozen, h.t_xmax));
    }
    // `t_field3` holds xvac for a moved tuple.
    (mask & im::HEAP_MOVED != 0 && normal(h.t_field3)).then_some((Why::XvacNotFrozen, h.t_field3))
}

/// What the scan of one heap page should compute.
#[derive(Debug, Clone, Copy)]
pub struct HeapPageWork<'a> {
    pub summary: bool,
    pub hints: bool,
    pub window: XidWindow<'a>,
    pub clog: &'a CommitLog,
}

/// Walks the line pointers of a heap page once: its visibility summary into `summary` (when
/// asked; the tuples only when `PD_ALL_VISIBLE` is set) and its hint-bit conflicts into `hints`
/// (cleared first).
pub fn heap_page(
    tuples: &HeapTuples<'_>,
    pd_flags: u16,
    work: &HeapPageWork<'_>,
    summary: &mut PageSummary,
    hints: &mut Vec<HintProblem>,
) {
    *summary = PageSummary {
        pd_all_visible: pd_flags & PD_ALL_VISIBLE != 0,
        ..PageSummary::default()
    };
    hints.clear();
    let statuses = Statuses::new(work.clog);
    // With `PD_ALL_VISIBLE` clear any set map bit is already wrong: the flag says it all, and
    // the tuples are not walked for it.
    let mut want_summary = work.summary && summary.pd_all_visible;
    // The commit fields of the last tuple that raised nothing. Tuples of one page mostly
    // share them (one load, one transaction): such tuples are passed over.
    let mut quiet: Option<(u16, u32, u32)> = None;
    for item in tuples.items {
        match item.lp_flags {
            LpFlags::Unused | LpFlags::Redirect => continue,
            LpFlags::Dead => {
                if want_summary {
                    let o = Offence {
                        offnum: item.offnum,
                        why: Why::LpDead,
                        xid: 0,
                    };
                    summary.not_visible.get_or_insert(o);
                    summary.not_frozen.get_or_insert(o);
                }
            }
            LpFlags::Normal => {
                let Some((_, h)) = tuples.tuple(item.offnum) else {
                    continue;
                };
                // What the checks read of a tuple: the same as the last tuple's, which raised
                // nothing, raises nothing (only the first offence is kept).
                let fields = (h.t_infomask, h.t_xmin, h.t_xmax);
                if quiet == Some(fields) {
                    continue;
                }
                let before = (summary.not_visible, summary.not_frozen, hints.len());
                if want_summary {
                    note_tuple(&h, item.offnum, &work.window, &statuses, summary);
                }
                if work.hints {
                    for (conflict, xid) in hint_conflicts(&h, &work.window, &statuses)
                        .into_iter()
                        .flatten()
                    {
                        hints.push(HintProblem {
                            offnum: item.offnum,
                            conflict,
                            xid,
                        });
                    }
                }
                // A moved tuple's checks also read `t_field3` (xvac): never passed over.
                let raised = before != (summary.not_visible, summary.not_frozen, hints.len());
                quiet = (!raised && h.t_infomask & im::HEAP_MOVED == 0).then_some(fields);
            }
        }
        want_summary &= summary.not_visible.is_none() || summary.not_frozen.is_none();
        if !want_summary && !work.hints {
            break;
        }
    }
}

/// Adds one tuple's visibility and freezing to the page's summary.
fn note_tuple(
    h: &HeapTupleHeader,
    offnum: u16,
    window: &XidWindow<'_>,
    statuses: &Statuses<'_>,
    s: &mut PageSummary,
) {
    if s.not_visible.is_none() {
        if let Seen::NotEveryone(why, xid) = seen_by_everyone(h, window, statuses) {
            s.not_visible = Some(Offence { offnum, why, xid });
        }
    }
    if s.not_frozen.is_none() {
        if let Some((why, xid)) = needs_freeze(h) {
            s.not_frozen = Some(Offence { offnum, why, xid });
        }
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
