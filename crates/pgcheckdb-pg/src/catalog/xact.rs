//! `pg_xact` (the commit log): two status bits per transaction id. The whole directory is
//! loaded once (a few MB even for old clusters) so that lookups from every worker are lock-free.
//! What cannot be loaded is never silent: a missing or irregular directory or segment is a
//! finding, one pgcheckdb may not read is a tool error.

use foldhash::{HashMap, HashMapExt};
use std::fs;
use std::io;
use std::path::Path;

use pgcheckdb_scan::open::{file_type_name, not_regular};
use serde_json::json;

use crate::finding::{Finding, FindingKind, Severity};
use crate::format::slru::{CLOG_XACTS_PER_BYTE, SLRU_PAGES_PER_SEGMENT};

/// Largest `pg_xact` segment read: 32 pages of the largest block size (32 kB).
const MAX_SEGMENT_LEN: u64 = SLRU_PAGES_PER_SEGMENT as u64 * 32768;

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

/// What kept parts of `pg_xact` from being loaded.
#[derive(Debug, Default)]
pub struct ClogTrouble {
    pub findings: Vec<Finding>,
    pub tool_errors: Vec<String>,
}

/// The commit log directory, relative to the data directory.
const PG_XACT: &str = "pg_xact";

/// Directories next to `pg_xact` that the server needs to start and that hold transaction
/// state the checks would use (multixact members and offsets).
const REQUIRED_XACT_DIRS: [&str; 3] = [PG_XACT, "pg_multixact/offsets", "pg_multixact/members"];

impl ClogTrouble {
    fn io(&mut self, rel: &str, what: &str, e: &io::Error) {
        if e.kind() == io::ErrorKind::PermissionDenied {
            self.tool_errors
                .push(format!("could not read \"{rel}\": {e}"));
            return;
        }
        let (kind, message, detail) = match (e.kind(), not_regular(e)) {
            (_, Some(file_type)) => (
                FindingKind::IrregularFile,
                format!("\"{rel}\" is a {file_type} where {what} is named; it was not read: transaction status from it is unknown"),
                json!({"file_type": file_type}),
            ),
            (io::ErrorKind::NotFound, None) => (
                FindingKind::MissingDirectory,
                format!("\"{rel}\" is missing from the data directory: the server cannot start, and transaction status is unknown"),
                json!({}),
            ),
            _ => (
                FindingKind::CatalogUnreadable,
                format!("could not read {what} \"{rel}\": {e}; transaction status from it is unknown"),
                json!({"os_error": e.raw_os_error()}),
            ),
        };
        self.findings
            .push(Finding::for_file(kind, Severity::Error, rel, message).with_detail(detail));
    }
}

impl CommitLog {
    /// Loads every segment file of `<datadir>/pg_xact`, and checks that the multixact
    /// directories exist. Whatever could not be loaded is in the returned [`ClogTrouble`];
    /// lookups of transactions in it answer [`XidStatus::Unknown`].
    pub fn load(datadir: &Path, blcksz: u32) -> (CommitLog, ClogTrouble) {
        let mut trouble = ClogTrouble::default();
        for rel in REQUIRED_XACT_DIRS {
            match fs::metadata(datadir.join(rel)) {
                Ok(m) if m.is_dir() => {}
                Ok(m) => trouble.findings.push(
                    Finding::for_file(
                        FindingKind::IrregularFile,
                        Severity::Error,
                        rel,
                        format!(
                            "\"{rel}\" is a {} where a directory is named: the server cannot start",
                            file_type_name(&m.file_type())
                        ),
                    )
                    .with_detail(json!({"file_type": file_type_name(&m.file_type())})),
                ),
                Err(e) => trouble.io(rel, "a directory", &e),
            }
        }
        let mut segments = HashMap::new();
        match fs::read_dir(datadir.join(PG_XACT)) {
            Ok(entries) => {
                for entry in entries {
                    let entry = match entry {
                        Ok(entry) => entry,
                        Err(e) => {
                            trouble.io(PG_XACT, "the commit log directory", &e);
                            break;
                        }
                    };
                    let name = entry.file_name();
                    let Some(segno) = name
                        .to_str()
                        .filter(|n| n.len() >= 4 && n.bytes().all(|b| b.is_ascii_hexdigit()))
                        .and_then(|n| u32::from_str_radix(n, 16).ok())
                    else {
                        continue;
                    };
                    let rel = format!("{PG_XACT}/{}", name.to_string_lossy());
                    match pgcheckdb_scan::open::read_regular(&entry.path(), MAX_SEGMENT_LEN) {
                        Ok(bytes) => {
                            segments.insert(segno, bytes);
                        }
                        Err(e) => trouble.io(&rel, "a commit log segment", &e),
                    }
                }
            }
            // A missing or irregular pg_xact was reported above.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.kind() == io::ErrorKind::NotADirectory => {}
            Err(e) => trouble.io(PG_XACT, "the commit log directory", &e),
        }
        (CommitLog { blcksz, segments }, trouble)
    }

    /// A commit log from segment images (`segno -> bytes`) instead of `pg_xact`; for tests and
    /// fuzzing.
    #[doc(hidden)]
    pub fn from_segments(
        blcksz: u32,
        segments: impl IntoIterator<Item = (u32, Vec<u8>)>,
    ) -> CommitLog {
        CommitLog {
            blcksz,
            segments: segments.into_iter().collect(),
        }
    }

    /// Records that `xid` committed or aborted, as the running server says where the files
    /// on disk lag behind it (`verify --online` with a connection). Other statuses are not
    /// final and are not recorded; an empty log (no block size) records nothing.
    pub fn record(&mut self, xid: u32, status: XidStatus) {
        let bits = match status {
            XidStatus::Committed => 1u8,
            XidStatus::Aborted => 2,
            _ => return,
        };
        let Some((segno, byte, shift)) = self.position(xid) else {
            return;
        };
        let segment = self.segments.entry(segno).or_default();
        if segment.len() <= byte {
            segment.resize(byte + 1, 0);
        }
        segment[byte] = (segment[byte] & !(3 << shift)) | (bits << shift);
    }

    /// The segment, byte in it and bit shift of `xid`'s status; `None` for an empty log.
    fn position(&self, xid: u32) -> Option<(u32, usize, u32)> {
        let per_page = self.blcksz * CLOG_XACTS_PER_BYTE;
        let page = xid.checked_div(per_page)?;
        let segno = page / SLRU_PAGES_PER_SEGMENT;
        let byte = (page % SLRU_PAGES_PER_SEGMENT) as usize * self.blcksz as usize
            + ((xid % per_page) / CLOG_XACTS_PER_BYTE) as usize;
        Some((segno, byte, 2 * (xid % CLOG_XACTS_PER_BYTE)))
    }

    /// Where `xid`'s status lies: the `pg_xact` segment file (relative to the data directory)
    /// and the page in it; `None` for an empty log.
    pub fn page_of(&self, xid: u32) -> Option<(String, u32)> {
        xact_page(xid, self.blcksz)
    }

    /// The recorded status of `xid`.
    pub fn status(&self, xid: u32) -> XidStatus {
        match xid {
            INVALID_TRANSACTION_ID => return XidStatus::Aborted,
            BOOTSTRAP_TRANSACTION_ID | FROZEN_TRANSACTION_ID => return XidStatus::Committed,
            _ => {}
        }
        // An empty log (`CommitLog::default()`) has no block size and knows no xid.
        let Some((segno, byte, shift)) = self.position(xid) else {
            return XidStatus::Unknown;
        };
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

/// The `pg_xact` segment file (`pg_xact/0000`, relative to the data directory) and the page in
/// it that hold `xid`'s status, for pages of `blcksz` bytes; `None` for a zero block size.
pub fn xact_page(xid: u32, blcksz: u32) -> Option<(String, u32)> {
    let page = xid.checked_div(blcksz.checked_mul(CLOG_XACTS_PER_BYTE)?)?;
    let segno = page / SLRU_PAGES_PER_SEGMENT;
    Some((
        format!("{PG_XACT}/{segno:04X}"),
        page % SLRU_PAGES_PER_SEGMENT,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xact_pages_and_segments() {
        // 32768 xids a page of 8 kB, 32 pages a segment.
        assert_eq!(xact_page(1000, 8192), Some(("pg_xact/0000".into(), 0)));
        assert_eq!(xact_page(32768, 8192), Some(("pg_xact/0000".into(), 1)));
        assert_eq!(
            xact_page(32768 * 32 + 5, 8192),
            Some(("pg_xact/0001".into(), 0))
        );
        assert_eq!(xact_page(u32::MAX, 8192), Some(("pg_xact/0FFF".into(), 31)));
        assert_eq!(xact_page(1000, 0), None);
    }
}

#[cfg(test)]
mod log_tests {
    use super::*;

    #[test]
    fn recorded_statuses_overwrite_what_the_files_lag_behind() {
        let segment = vec![0u8; 8192 * SLRU_PAGES_PER_SEGMENT as usize];
        let mut clog = CommitLog::from_segments(8192, [(0, segment)]);
        assert_eq!(clog.status(1000), XidStatus::InProgress);
        clog.record(1000, XidStatus::Committed);
        clog.record(1001, XidStatus::Aborted);
        clog.record(1002, XidStatus::InProgress); // not final: not recorded
        assert_eq!(clog.status(1000), XidStatus::Committed);
        assert_eq!(clog.status(1001), XidStatus::Aborted);
        assert_eq!(clog.status(999), XidStatus::InProgress);
        clog.record(1001, XidStatus::Committed);
        assert_eq!(clog.status(1001), XidStatus::Committed);
        assert_eq!(clog.status(1000), XidStatus::Committed);
        // A segment the files do not have yet.
        let far = 8192 * CLOG_XACTS_PER_BYTE * SLRU_PAGES_PER_SEGMENT + 5;
        assert_eq!(clog.status(far), XidStatus::Unknown);
        clog.record(far, XidStatus::Committed);
        assert_eq!(clog.status(far), XidStatus::Committed);
        let mut empty = CommitLog::default();
        empty.record(1000, XidStatus::Committed);
        assert_eq!(empty.status(1000), XidStatus::Unknown);
    }
}
