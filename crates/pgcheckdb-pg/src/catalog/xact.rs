//! `pg_xact` (the commit log): two status bits per transaction id. The whole directory is
//! loaded once (a few MB even for old clusters) so that lookups from every worker are lock-free.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

/// Transactions per byte of a clog page.
const CLOG_XACTS_PER_BYTE: u32 = 4;
/// `SLRU_PAGES_PER_SEGMENT`.
const SLRU_PAGES_PER_SEGMENT: u32 = 32;

/// `XidStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XidStatus {
    InProgress,
    Committed,
    Aborted,
    SubCommitted,
    /// The clog segment holding it is gone (truncated) or unreadable.
    Unknown,
}

/// Special transaction ids.
pub const INVALID_TRANSACTION_ID: u32 = 0;
pub const BOOTSTRAP_TRANSACTION_ID: u32 = 1;
pub const FROZEN_TRANSACTION_ID: u32 = 2;
/// `FirstNormalTransactionId`.
pub const FIRST_NORMAL_TRANSACTION_ID: u32 = 3;

/// The commit log, read into memory.
#[derive(Debug, Default)]
pub struct CommitLog {
    blcksz: u32,
    /// Segment number -> file contents.
    segments: HashMap<u32, Vec<u8>>,
}

impl CommitLog {
    /// Loads every segment file of `<datadir>/pg_xact`; unreadable files are simply absent.
    pub fn new(datadir: &Path, blcksz: u32) -> CommitLog {
        let mut segments = HashMap::new();
        if let Ok(entries) = fs::read_dir(datadir.join("pg_xact")) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(segno) = name.to_str().and_then(|n| u32::from_str_radix(n, 16).ok())
                else {
                    continue;
                };
                if let Ok(bytes) = fs::read(entry.path()) {
                    segments.insert(segno, bytes);
                }
            }
        }
        CommitLog { blcksz, segments }
    }

    /// A commit log from segment images (`segno -> bytes`) instead of `pg_xact`; for tests and
    /// fuzzing.
    #[doc(hidden)]
    pub fn from_segments(blcksz: u32, segments: HashMap<u32, Vec<u8>>) -> CommitLog {
        CommitLog { blcksz, segments }
    }

    /// The recorded status of `xid`.
    pub fn status(&self, xid: u32) -> XidStatus {
        match xid {
            INVALID_TRANSACTION_ID => return XidStatus::Aborted,
            BOOTSTRAP_TRANSACTION_ID | FROZEN_TRANSACTION_ID => return XidStatus::Committed,
            _ => {}
        }
        let per_page = self.blcksz * CLOG_XACTS_PER_BYTE;
        // An empty log (`CommitLog::default()`) has no block size and knows no xid.
        let Some(page) = xid.checked_div(per_page) else {
            return XidStatus::Unknown;
        };
        let segno = page / SLRU_PAGES_PER_SEGMENT;
        let byte = (page % SLRU_PAGES_PER_SEGMENT) as usize * self.blcksz as usize
            + ((xid % per_page) / CLOG_XACTS_PER_BYTE) as usize;
        let shift = 2 * (xid % CLOG_XACTS_PER_BYTE);
        match self.segments.get(&segno).and_then(|s| s.get(byte)) {
            Some(b) => match (b >> shift) & 3 {
                0 => XidStatus::InProgress,
                1 => XidStatus::Committed,
                2 => XidStatus::Aborted,
                _ => XidStatus::SubCommitted,
            },
            None => XidStatus::Unknown,
        }
    }
}
