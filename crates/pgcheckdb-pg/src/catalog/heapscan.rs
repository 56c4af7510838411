//! Reading the live rows of a heap relation (a system catalog) straight from its files:
//! every `LP_NORMAL` tuple of every sane page, filtered by the visibility rules that hold in a
//! cleanly shut-down cluster (hint bits first, then `pg_xact`). Files are read one page at a
//! time, so a huge (or hostile, sparse) catalog file costs one page of memory.

use std::io::{self, Read};
use std::path::Path;

use pgcheckdb_scan::open::open_regular;

use super::xact::{CommitLog, XidStatus};
use crate::format::heap::{infomask as im, HeapTupleHeader};
use crate::format::itemid::{line_pointers, LpFlags};
use crate::format::page::PageHeader;

/// A visible catalog row: its header and its data area (from `t_hoff` to the end of the tuple).
pub struct Row<'a> {
    pub header: HeapTupleHeader,
    pub data: &'a [u8],
}

/// What went wrong while reading a catalog file (the rest of the file is still read).
#[derive(Debug, Default)]
pub struct ScanTrouble {
    /// The first [`ScanTrouble::LISTED`] blocks skipped because their header is not sane.
    pub bad_blocks: Vec<u32>,
    /// How many blocks were skipped.
    pub bad_count: u64,
}

impl ScanTrouble {
    /// Bad block numbers kept for the message.
    pub const LISTED: usize = 20;

    fn note_bad(&mut self, blkno: u32) {
        self.bad_count += 1;
        if self.bad_blocks.len() < Self::LISTED {
            self.bad_blocks.push(blkno);
        }
    }
}

/// Calls `page_fn(blkno, page)` for every whole page of the main fork of relation `filenode`
/// under `dir`, all segments in order, reading one page at a time. Only regular files are
/// opened; the first segment must exist, the list of segments ends at the first absent one.
/// A trailing partial page is ignored, as the server ignores it.
pub fn for_each_page(
    dir: &Path,
    filenode: u32,
    blcksz: usize,
    mut page_fn: impl FnMut(u32, &[u8]),
) -> io::Result<()> {
    let mut page = vec![0u8; blcksz];
    let mut blkno = 0u32;
    for segno in 0u32.. {
        let name = match segno {
            0 => filenode.to_string(),
            n => format!("{filenode}.{n}"),
        };
        let file = match open_regular(&dir.join(name), false) {
            Ok(f) => f,
            Err(e) if segno > 0 && e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(e),
        };
        let mut reader = io::BufReader::with_capacity(blcksz.max(64 << 10), file);
        let mut pages_in_segment = 0u64;
        while read_page(&mut reader, &mut page)? {
            page_fn(blkno, &page);
            blkno = blkno.saturating_add(1);
            pages_in_segment += 1;
        }
        if pages_in_segment == 0 {
            break;
        }
    }
    Ok(())
}

/// Fills `page`; false at the end of the file (a partial last page counts as the end).
fn read_page(reader: &mut impl Read, page: &mut [u8]) -> io::Result<bool> {
    let mut done = 0;
    while done < page.len() {
        match reader.read(&mut page[done..]) {
            Ok(0) => return Ok(false),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// `HEAP_XMAX_IS_LOCKED_ONLY`.
fn xmax_is_lock_only(mask: u16) -> bool {
    mask & im::HEAP_XMAX_LOCK_ONLY != 0
        || mask & (im::HEAP_XMAX_IS_MULTI | im::HEAP_LOCK_MASK) == im::HEAP_XMAX_EXCL_LOCK
}

/// Whether the inserting transaction committed.
fn xmin_committed(h: &HeapTupleHeader, clog: &CommitLog) -> bool {
    let mask = h.t_infomask;
    if mask & im::HEAP_XMIN_COMMITTED != 0 {
        return true;
    }
    if mask & im::HEAP_XMIN_INVALID != 0 {
        return false;
    }
    clog.status(h.t_xmin) == XidStatus::Committed
}

/// Whether a committed deleter or updater removed the row.
fn xmax_removed(h: &HeapTupleHeader, clog: &CommitLog) -> bool {
    let mask = h.t_infomask;
    if mask & im::HEAP_XMAX_INVALID != 0 || h.t_xmax == 0 || xmax_is_lock_only(mask) {
        return false;
    }
    if mask & im::HEAP_XMAX_IS_MULTI != 0 {
        // An updating multixact on a catalog row is rare; keep the row and let duplicates be
        // resolved by the caller.
        return false;
    }
    mask & im::HEAP_XMAX_COMMITTED != 0 || clog.status(h.t_xmax) == XidStatus::Committed
}

/// The row version a clean-shutdown snapshot sees.
pub fn is_visible(h: &HeapTupleHeader, clog: &CommitLog) -> bool {
    xmin_committed(h, clog) && !xmax_removed(h, clog)
}

/// What a row is to a clean-shutdown snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    /// Inserted by a committed transaction and not removed.
    Visible,
    /// Inserted by a transaction that never committed: still in progress in `pg_xact` (a
    /// prepared transaction, or one a crash interrupted) or aborted. Carries `t_xmin`.
    Uncommitted(u32),
}

/// The row's state, or `None` for a removed row or one whose inserter is unknown.
fn row_state(h: &HeapTupleHeader, clog: &CommitLog) -> Option<RowState> {
    if is_visible(h, clog) {
        return Some(RowState::Visible);
    }
    if xmin_committed(h, clog) {
        return None;
    }
    let aborted_hint = h.t_infomask & im::HEAP_XMIN_INVALID != 0;
    match clog.status(h.t_xmin) {
        _ if aborted_hint => Some(RowState::Uncommitted(h.t_xmin)),
        XidStatus::InProgress | XidStatus::Aborted => Some(RowState::Uncommitted(h.t_xmin)),
        _ => None,
    }
}

/// Calls `f` for every visible row of the relation image `data`.
pub fn for_each_visible_row(
    data: &[u8],
    blcksz: usize,
    max_align: usize,
    clog: &CommitLog,
    mut f: impl FnMut(Row<'_>),
) -> ScanTrouble {
    for_each_row(data, blcksz, max_align, clog, |row, state| {
        if state == RowState::Visible {
            f(row);
        }
    })
}

/// Calls `f` for every visible or uncommitted row of the relation image `data`.
pub fn for_each_row(
    data: &[u8],
    blcksz: usize,
    max_align: usize,
    clog: &CommitLog,
    mut f: impl FnMut(Row<'_>, RowState),
) -> ScanTrouble {
    let mut trouble = ScanTrouble::default();
    for (blkno, page) in data.chunks_exact(blcksz).enumerate() {
        rows_of_page(page, blkno as u32, max_align, clog, &mut trouble, &mut f);
    }
    trouble
}

/// Calls `f` for every visible row of one page; a page with a bad header is noted in
/// `trouble` and skipped.
pub fn visible_rows_of_page(
    page: &[u8],
    blkno: u32,
    max_align: usize,
    clog: &CommitLog,
    trouble: &mut ScanTrouble,
    f: &mut impl FnMut(Row<'_>),
) {
    rows_of_page(page, blkno, max_align, clog, trouble, &mut |row, state| {
        if state == RowState::Visible {
            f(row);
        }
    });
}

/// Calls `f` for every visible or uncommitted row of one page, with its state; a page with a
/// bad header is noted in `trouble` and skipped.
/// The header of a catalog page whose rows can be read: `None` for a new page or one that
/// cannot be parsed, and for a page breaking the server's rules, which is noted in `trouble`.
pub fn usable_page_header(
    page: &[u8],
    blkno: u32,
    max_align: usize,
    trouble: &mut ScanTrouble,
) -> Option<PageHeader> {
    let header = PageHeader::parse(page)?;
    if header.is_new() {
        return None;
    }
    if header
        .server_rule_violation(page.len(), max_align)
        .is_some()
    {
        trouble.note_bad(blkno);
        return None;
    }
    Some(header)
}

pub fn rows_of_page(
    page: &[u8],
    blkno: u32,
    max_align: usize,
    clog: &CommitLog,
    trouble: &mut ScanTrouble,
    f: &mut impl FnMut(Row<'_>, RowState),
) {
    let Some(header) = usable_page_header(page, blkno, max_align, trouble) else {
        return;
    };
    for item in line_pointers(page, &header) {
        if item.lp_flags != LpFlags::Normal {
            continue;
        }
        let Some(tuple) = item.storage(page) else {
            continue;
        };
        let Some(h) = HeapTupleHeader::parse(tuple) else {
            continue;
        };
        let hoff = h.t_hoff as usize;
        let Some(data) = tuple.get(hoff..) else {
            continue;
        };
        let Some(state) = row_state(&h, clog) else {
            continue;
        };
        f(Row { data, header: h }, state);
    }
}
