//! `pg_xact` (the commit log): two status bits per transaction id, read on demand.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// Transactions per 8 KiB clog page: 4 per byte.
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

/// Reads `pg_xact` lazily, one segment file at a time, and caches it.
pub struct CommitLog {
    dir: PathBuf,
    blcksz: u32,
    segments: Mutex<HashMap<u32, Option<Vec<u8>>>>,
}

impl CommitLog {
    pub fn new(datadir: &std::path::Path, blcksz: u32) -> CommitLog {
        CommitLog {
            dir: datadir.join("pg_xact"),
            blcksz,
            segments: Mutex::new(HashMap::new()),
        }
    }

    /// The recorded status of `xid`.
    pub fn status(&self, xid: u32) -> XidStatus {
        match xid {
            INVALID_TRANSACTION_ID => return XidStatus::Aborted,
            BOOTSTRAP_TRANSACTION_ID | FROZEN_TRANSACTION_ID => return XidStatus::Committed,
            _ => {}
        }
        let per_page = self.blcksz * CLOG_XACTS_PER_BYTE;
        let page = xid / per_page;
        let segno = page / SLRU_PAGES_PER_SEGMENT;
        let byte = (page % SLRU_PAGES_PER_SEGMENT) as usize * self.blcksz as usize
            + ((xid % per_page) / CLOG_XACTS_PER_BYTE) as usize;
        let shift = 2 * (xid % CLOG_XACTS_PER_BYTE);
        let mut cache = match self.segments.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        let segment = cache.entry(segno).or_insert_with(|| self.load(segno));
        match segment.as_ref().and_then(|s| s.get(byte)) {
            Some(b) => match (b >> shift) & 3 {
                0 => XidStatus::InProgress,
                1 => XidStatus::Committed,
                2 => XidStatus::Aborted,
                _ => XidStatus::SubCommitted,
            },
            None => XidStatus::Unknown,
        }
    }

    fn load(&self, segno: u32) -> Option<Vec<u8>> {
        let file = File::open(self.dir.join(format!("{segno:04X}"))).ok()?;
        let len = file.metadata().ok()?.len() as usize;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, 0).ok()?;
        Some(buf)
    }
}
