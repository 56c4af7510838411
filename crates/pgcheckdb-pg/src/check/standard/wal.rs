//! The WAL in `pg_wal`, read only as far as the standard level needs it: the highest
//! transaction id (`xl_xid`) of the records from the last checkpoint's redo pointer to the end
//! of valid WAL. See `bounds.rs` for why that bounds the xids on disk.
//!
//! Records are followed by `xl_tot_len`; a record counts only when every page it spans has the
//! expected `xlp_pageaddr`, its `xl_prev` names the record before it and its CRC-32C matches,
//! so recycled segments and the zeroed tail of the last segment end the walk.

use pgcheckdb_scan::open::read_regular;
use std::fs;
use std::path::{Path, PathBuf};

use super::xids::later;
use crate::catalog::xact::FIRST_NORMAL_TRANSACTION_ID;
use crate::format::bytes::le_u32;
use crate::format::control::ControlFile;

/// `SizeOfXLogRecord`.
pub(crate) const SIZE_OF_XLOG_RECORD: usize = 24;
/// `offsetof(XLogRecord, xl_info)` and `offsetof(XLogRecord, xl_rmid)`.
pub(crate) const XL_INFO: usize = 16;
pub(crate) const XL_RMID: usize = 17;
/// `XLR_RMGR_INFO_MASK`: the resource manager's own bits of `xl_info`.
pub(crate) const XLR_RMGR_INFO_MASK: u8 = 0xF0;
/// `offsetof(XLogRecord, xl_crc)`: the header bytes the CRC covers.
const XL_CRC_OFFSET: usize = 20;
/// `MAXALIGN(SizeOfXLogShortPHD)` and `MAXALIGN(SizeOfXLogLongPHD)`.
const SHORT_PAGE_HEADER: u64 = 24;
const LONG_PAGE_HEADER: u64 = 40;
/// `RM_XLOG_ID` and its `XLOG_SWITCH` record: the rest of the segment is unused.
pub(crate) const RM_XLOG_ID: u8 = 0;
pub(crate) const XLOG_SWITCH: u8 = 0x40;
/// Longest record accepted (`XLogRecordMaxSize` is 1020 MB).
const MAX_RECORD: u32 = 1020 * 1024 * 1024;

/// The highest normal `xl_xid` (modulo 2^32, relative to `reference`) in the valid WAL from
/// `pg_control`'s redo pointer on; `None` when no record there is readable.
pub fn newest_xid(control: &ControlFile, datadir: &Path, reference: u32) -> Option<u32> {
    let mut reader = WalReader::open(datadir.join("pg_wal"), control.xlog_seg_size as u64)?;
    let mut lsn = control.redo;
    let mut prev = None;
    let mut newest: Option<u32> = None;
    let mut record = Vec::new();
    while let Some((start, next)) = reader.record(lsn, prev, &mut record) {
        let xid = le_u32(&record, 4).unwrap_or(0);
        if xid >= FIRST_NORMAL_TRANSACTION_ID {
            newest = Some(later(newest.unwrap_or(reference.wrapping_sub(1)), xid));
        }
        prev = Some(start);
        let switch = record.get(XL_RMID) == Some(&RM_XLOG_ID)
            && record
                .get(XL_INFO)
                .is_some_and(|info| info & XLR_RMGR_INFO_MASK == XLOG_SWITCH);
        lsn = if switch {
            (next / reader.seg_size + u64::from(next % reader.seg_size != 0)) * reader.seg_size
        } else {
            next.next_multiple_of(8)
        };
    }
    newest
}

/// Reads WAL bytes by LSN, one segment file in memory at a time.
pub(crate) struct WalReader {
    dir: PathBuf,
    pub(crate) seg_size: u64,
    /// `XLOG_BLCKSZ`, from the first segment's long page header.
    page_size: u64,
    segno: Option<u64>,
    segment: Vec<u8>,
}

impl WalReader {
    pub(crate) fn open(dir: PathBuf, seg_size: u64) -> Option<WalReader> {
        if !seg_size.is_power_of_two() {
            return None;
        }
        Some(WalReader {
            dir,
            seg_size,
            page_size: 0,
            segno: None,
            segment: Vec::new(),
        })
    }

    /// Reads the record at `lsn` into `out` and returns its start (past a page header when `lsn`
    /// begins a page: `xl_prev` names that position) and the LSN just past it, if it is valid.
    pub(crate) fn record(
        &mut self,
        lsn: u64,
        prev: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Option<(u64, u64)> {
        self.load(lsn / self.seg_size)?;
        let lsn = if lsn.is_multiple_of(self.page_size) {
            lsn + self.page_header(lsn)?
        } else {
            lsn
        };
        out.clear();
        self.read(lsn, SIZE_OF_XLOG_RECORD, out)?;
        let tot_len = le_u32(out, 0)?;
        let xl_prev = u64::from(le_u32(out, 8)?) | (u64::from(le_u32(out, 12)?) << 32);
        if (tot_len as usize) < SIZE_OF_XLOG_RECORD || tot_len > MAX_RECORD {
            return None;
        }
        if prev.is_some_and(|p| p != xl_prev) {
            return None;
        }
        out.clear();
        let end = self.read(lsn, tot_len as usize, out)?;
        // `tot_len` covers the header: both parts are there.
        let crc = crc32c::crc32c(out.get(SIZE_OF_XLOG_RECORD..)?);
        let crc = crc32c::crc32c_append(crc, out.get(..XL_CRC_OFFSET)?);
        (Some(crc) == le_u32(out, XL_CRC_OFFSET)).then_some((lsn, end))
    }

    /// Appends `len` record bytes starting at `lsn` to `out`, skipping page headers; returns
    /// the LSN after them.
    fn read(&mut self, mut lsn: u64, mut len: usize, out: &mut Vec<u8>) -> Option<u64> {
        while len > 0 {
            self.load(lsn / self.seg_size)?;
            let page = self.page_size;
            if lsn.is_multiple_of(page) {
                lsn += self.page_header(lsn)?;
            }
            let in_seg = (lsn % self.seg_size) as usize;
            let take = ((page - lsn % page) as usize).min(len);
            out.extend_from_slice(self.segment.get(in_seg..in_seg + take)?);
            lsn += take as u64;
            len -= take;
        }
        Some(lsn)
    }

    /// The length of the page header at page start `lsn`, if its `xlp_pageaddr` is `lsn`.
    fn page_header(&self, lsn: u64) -> Option<u64> {
        let at = (lsn % self.seg_size) as usize;
        let addr = u64::from(le_u32(&self.segment, at + 8)?)
            | (u64::from(le_u32(&self.segment, at + 12)?) << 32);
        if addr != lsn {
            return None;
        }
        Some(if lsn.is_multiple_of(self.seg_size) {
            LONG_PAGE_HEADER
        } else {
            SHORT_PAGE_HEADER
        })
    }

    /// Makes segment `segno` the one in memory.
    fn load(&mut self, segno: u64) -> Option<()> {
        if self.segno == Some(segno) {
            return Some(());
        }
        self.segno = None;
        let bytes = read_regular(&self.segment_path(segno)?, self.seg_size).ok()?;
        if bytes.len() as u64 != self.seg_size {
            return None;
        }
        // xlp_xlog_blcksz of the long header that opens every segment.
        let page_size = le_u32(&bytes, 36)? as u64;
        if !page_size.is_power_of_two() || !(1024..=65536).contains(&page_size) {
            return None;
        }
        self.page_size = page_size;
        self.segment = bytes;
        self.segno = Some(segno);
        Some(())
    }

    /// The regular file of segment `segno` on the highest timeline that has one.
    fn segment_path(&self, segno: u64) -> Option<PathBuf> {
        let per_id = (1u64 << 32) / self.seg_size;
        let suffix = format!("{:08X}{:08X}", segno / per_id, segno % per_id);
        let mut best: Option<(u32, PathBuf)> = None;
        for entry in fs::read_dir(&self.dir).ok()?.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() != 24 || !name.ends_with(&suffix) {
                continue;
            }
            let Ok(tli) = u32::from_str_radix(&name[..8], 16) else {
                continue;
            };
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            if best.as_ref().is_none_or(|(t, _)| tli > *t) {
                best = Some((tli, entry.path()));
            }
        }
        best.map(|(_, p)| p)
    }
}
