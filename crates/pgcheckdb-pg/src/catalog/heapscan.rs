//! Reading the live rows of a small heap relation (a system catalog) straight from its files:
//! every `LP_NORMAL` tuple of every sane page, filtered by the visibility rules that hold in a
//! cleanly shut-down cluster (hint bits first, then `pg_xact`).

use std::path::Path;

use super::xact::{CommitLog, XidStatus};
use crate::layout::heap::{infomask as im, HeapTupleHeader};
use crate::layout::itemid::{line_pointers, LpFlags};
use crate::page::PageHeader;

/// A visible catalog row: its header and its data area (from `t_hoff` to the end of the tuple).
pub struct Row<'a> {
    pub header: HeapTupleHeader,
    pub data: &'a [u8],
}

/// What went wrong while reading a catalog file (the rest of the file is still read).
#[derive(Debug, Default)]
pub struct ScanTrouble {
    /// Blocks skipped because their header is not sane.
    pub bad_blocks: Vec<u32>,
}

/// Reads the main fork of a relation (all segments) under `dir` with file number `filenode`.
/// Only regular files are opened: a FIFO in a catalog's place is an error, never a hang.
pub fn read_relation(dir: &Path, filenode: u32) -> std::io::Result<Vec<u8>> {
    let mut data = read_regular_file(&dir.join(filenode.to_string()))?;
    for segno in 1.. {
        match read_regular_file(&dir.join(format!("{filenode}.{segno}"))) {
            Ok(more) if !more.is_empty() => data.extend(more),
            _ => break,
        }
    }
    Ok(data)
}

fn read_regular_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    pgcheckdb_scan::open::open_regular(path, false)?.read_to_end(&mut data)?;
    Ok(data)
}

/// `HEAP_XMAX_IS_LOCKED_ONLY`.
fn xmax_is_lock_only(mask: u16) -> bool {
    const HEAP_LOCK_MASK: u16 = im::HEAP_XMAX_EXCL_LOCK | im::HEAP_XMAX_KEYSHR_LOCK;
    mask & im::HEAP_XMAX_LOCK_ONLY != 0
        || mask & (im::HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK) == im::HEAP_XMAX_EXCL_LOCK
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

/// Calls `f` for every visible row of the relation image `data`.
pub fn for_each_visible_row(
    data: &[u8],
    blcksz: usize,
    max_align: usize,
    clog: &CommitLog,
    mut f: impl FnMut(Row<'_>),
) -> ScanTrouble {
    let mut trouble = ScanTrouble::default();
    for (blkno, page) in data.chunks_exact(blcksz).enumerate() {
        let Some(header) = PageHeader::parse(page) else {
            continue;
        };
        if header.is_new() {
            continue;
        }
        if header.server_rule_violation(blcksz, max_align).is_some() {
            trouble.bad_blocks.push(blkno as u32);
            continue;
        }
        for item in line_pointers(page, &header) {
            if item.lp_flags != LpFlags::Normal {
                continue;
            }
            let (start, len) = (item.lp_off as usize, item.lp_len as usize);
            let Some(tuple) = page.get(start..start + len) else {
                continue;
            };
            let Some(h) = HeapTupleHeader::parse(tuple) else {
                continue;
            };
            let hoff = h.t_hoff as usize;
            if hoff > tuple.len() || !is_visible(&h, clog) {
                continue;
            }
            f(Row {
                data: &tuple[hoff..],
                header: h,
            });
        }
    }
    trouble
}
