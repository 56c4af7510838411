//! The transaction-id and multixact-id bounds the heap checks compare tuples against: the
//! newest ids the files on disk can legitimately hold (from `pg_control`, the `pg_xact` and
//! `pg_multixact/offsets` extents and the WAL in `pg_wal`) and the oldest ones still valid.
//!
//! Why not just `pg_control`'s `nextXid`: it is `checkPointCopy.nextXid`, the value at the
//! last checkpoint (on a standby, the last *replayed* checkpoint). Only a primary that shut
//! down cleanly wrote that checkpoint after its last transaction. Anywhere else (a standby
//! shut down in recovery, a crashed primary) data pages flushed after the checkpoint hold
//! newer transaction ids, and comparing against `nextXid` floods healthy clusters with
//! `xid_invalid` findings and skips the attribute checks of every newer tuple.
//!
//! Bounds the files really obey:
//! * **The WAL.** A data page reaches disk only after the WAL up to its LSN (a primary's
//!   write-ahead rule; a standby replays only WAL it has flushed). Every transaction id written
//!   into a tuple is the `xl_xid` of the record that wrote it, so the highest `xl_xid` from the
//!   checkpoint's redo pointer to the end of valid WAL bounds every xid on disk.
//!   Not every xid is some record's `xl_xid`: subtransactions of a transaction that wrote no
//!   WAL of its own (unlogged tables, `wal_level = minimal` with a table created in the same
//!   transaction) appear only inside commit records, which are not decoded. The next bound
//!   covers them once their commit-log page is on disk.
//! * **The `pg_xact` extent.** The server zeroes the commit-log page of a transaction id before
//!   it hands the id out; when that page is on disk, every id up to its last one may exist.
//!   This also covers a `pg_wal` that does not hold the whole tail (a restored backup).
//! * **The `pg_multixact/offsets` extent**, the same for multixact ids.
//!
//! Outside a clean shutdown the files can still lag (a commit-log page only in the crashed
//! server's memory), so ids past the bound are warnings there, not errors.
//!
//! A cleanly shut-down primary keeps `nextXid` exact (its shutdown checkpoint follows every
//! transaction), so damage just past it is still found; everything else takes the maximum of
//! `nextXid` and the bounds above. Ids compare modulo 2^32 as PostgreSQL compares them.

use std::fs;
use std::path::Path;

use super::xids::later;
use super::ClusterFacts;
use crate::finding::Severity;
use crate::format::control::{ControlFile, DbState};
use crate::format::slru::{multixact_offset_size, CLOG_XACTS_PER_BYTE, SLRU_PAGES_PER_SEGMENT};

/// Builds the cluster facts of the standard level from `pg_control` and the files that bound
/// the transaction and multixact ids.
pub fn cluster_facts(control: &ControlFile, datadir: &Path) -> ClusterFacts {
    let next_xid = control.next_xid as u32;
    let exact = control.state == DbState::Shutdowned;
    let (next_xid_bound, next_multi_bound) = if exact {
        (next_xid, control.next_multi)
    } else {
        newest_ids(control, datadir)
    };
    ClusterFacts {
        blcksz: control.blcksz as usize,
        max_align: control.max_align as usize,
        next_xid: next_xid_bound,
        next_multi: next_multi_bound,
        oldest_xid: control.oldest_xid,
        oldest_multi: control.oldest_multi,
        clog_exact: exact,
        xid_severity: if exact {
            Severity::Error
        } else {
            Severity::Warning
        },
    }
}

/// The first transaction id and multixact id the files cannot hold, for a cluster that did
/// not shut down cleanly.
fn newest_ids(control: &ControlFile, datadir: &Path) -> (u32, u32) {
    let blcksz = control.blcksz as u64;
    let mut xid = control.next_xid as u32;
    let xids_per_page = blcksz * u64::from(CLOG_XACTS_PER_BYTE);
    if let Some(end) = slru_extent_end(&datadir.join("pg_xact"), blcksz, xids_per_page, xid) {
        xid = later(xid, end);
    }
    if let Some(wal_xid) = super::wal::newest_xid(control, datadir, xid) {
        xid = later(xid, wal_xid.wrapping_add(1));
    }
    let mut multi = control.next_multi;
    let multis_per_page = blcksz / multixact_offset_size(control.major.unwrap_or(0));
    let offsets = datadir.join("pg_multixact").join("offsets");
    if let Some(end) = slru_extent_end(&offsets, blcksz, multis_per_page, multi) {
        multi = later(multi, end);
    }
    (xid, multi)
}

/// The first id past the last page of the SLRU directory `dir` that is on disk, following the
/// segments on from the one holding `next - 1` (ids wrap around at 2^32, segment numbers with
/// them). `None` when that segment is not there.
fn slru_extent_end(dir: &Path, blcksz: u64, ids_per_page: u64, next: u32) -> Option<u32> {
    let ids_per_segment = ids_per_page * u64::from(SLRU_PAGES_PER_SEGMENT);
    let segments = (1u64 << 32).div_ceil(ids_per_segment);
    let mut segno = next.wrapping_sub(1) as u64 / ids_per_segment;
    let mut end = None;
    for _ in 0..segments {
        let Some(pages) = segment_pages(dir, segno, blcksz) else {
            break;
        };
        end = Some(((segno * ids_per_segment + pages * ids_per_page) % (1u64 << 32)) as u32);
        if pages < u64::from(SLRU_PAGES_PER_SEGMENT) {
            break;
        }
        segno = (segno + 1) % segments;
    }
    end
}

/// Whole pages in SLRU segment `segno` of `dir` (named with 4 or more hex digits), if it is a
/// regular file.
fn segment_pages(dir: &Path, segno: u64, blcksz: u64) -> Option<u64> {
    for width in [4usize, 5, 6, 15] {
        let path = dir.join(format!("{segno:0width$X}"));
        if let Ok(meta) = fs::symlink_metadata(&path) {
            if meta.is_file() {
                return Some((meta.len() / blcksz).min(u64::from(SLRU_PAGES_PER_SEGMENT)));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slru_extent_follows_full_segments() {
        let dir = tempfile::tempdir().unwrap();
        let page = 8192u64;
        let per_page = page * u64::from(CLOG_XACTS_PER_BYTE);
        fs::write(dir.path().join("0000"), vec![0u8; (32 * page) as usize]).unwrap();
        fs::write(dir.path().join("0001"), vec![0u8; (3 * page) as usize]).unwrap();
        let end = slru_extent_end(dir.path(), page, per_page, 1000).unwrap();
        assert_eq!(end as u64, (32 + 3) * per_page);
        assert_eq!(
            slru_extent_end(dir.path(), page, per_page, 3_000_000_000),
            None
        );
    }
}
