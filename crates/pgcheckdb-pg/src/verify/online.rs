//! `verify --online`: checking the files of a running server. The block scan reads pages the
//! server may be writing at the same moment, so a page that fails a check is not yet a finding:
//! this module owns the rules that turn the scan's results into findings.
//!
//! * `pg_control` is rewritten while it is read: it is re-read until its CRC verifies
//!   ([`read_control_settled`]).
//! * A page that fails any check is re-read ([`recheck`]); one that then passes was torn or
//!   half-updated by a concurrent write. One that keeps failing with a `pd_lsn` newer than the
//!   redo point of the checkpoint current when the scan began may legitimately be in flux; one
//!   that keeps failing with an older `pd_lsn` is corrupt.
//! * With the end of WAL known (a connection), a page whose `pd_lsn` lies beyond it is corrupt
//!   ([`crate::finding::FindingKind::PageLsnInFuture`]), never in flux.
//! * Findings that come from the listing or the catalog (missing segments, partial blocks,
//!   missing or orphan files) stand only when a second listing and catalog read after the
//!   scan show them too ([`keep_lasting`]): files appear, vanish, grow and shrink meanwhile.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::finding::Finding;
use crate::format::control::{ControlFile, ControlFileError};

/// Times `pg_control` is read before a CRC error is believed.
const CONTROL_READS: usize = 200;

/// Reads `pg_control`, again while its CRC does not verify (the server rewrites it in place).
pub fn read_control_settled(datadir: &Path) -> Result<ControlFile, ControlFileError> {
    let mut last = ControlFile::read_from_datadir(datadir);
    for _ in 1..CONTROL_READS {
        match last {
            Err(ControlFileError::Crc { .. }) => {
                std::thread::sleep(Duration::from_millis(10));
                last = ControlFile::read_from_datadir(datadir);
            }
            _ => break,
        }
    }
    last
}

/// An LSN as PostgreSQL prints it (`16/B374D848`).
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses an LSN as PostgreSQL prints it.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.trim().split_once('/')?;
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    (hi <= u32::MAX as u64 && lo <= u32::MAX as u64).then_some((hi << 32) | lo)
}

/// What the block scan does differently online.
#[derive(Debug, Clone, Copy)]
pub struct ScanOptions {
    /// Pages with a `pd_lsn` above this are noted for the end-of-WAL check (`u64::MAX`: none).
    pub lsn_floor: u64,
}

/// A page the scan saw with a `pd_lsn` above the floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewerPage {
    /// Index of the file in the plan.
    pub file: usize,
    /// Absolute block number in the fork.
    pub block: u64,
    pub lsn: u64,
}

/// What one scan worker noted online.
#[derive(Debug, Default)]
pub struct ScanNotes {
    floor: u64,
    pub newer: Vec<NewerPage>,
}

impl ScanNotes {
    pub fn new(opts: ScanOptions) -> ScanNotes {
        ScanNotes {
            floor: opts.lsn_floor,
            newer: Vec::new(),
        }
    }

    /// Notes the page when its `pd_lsn` is above the floor.
    pub fn page(&mut self, file: usize, block: u64, page: &[u8]) {
        if self.floor == u64::MAX {
            return;
        }
        if let Some(lsn) = page_lsn(page).filter(|&l| l > self.floor) {
            self.newer.push(NewerPage { file, block, lsn });
        }
    }

    pub fn absorb(&mut self, other: ScanNotes) {
        self.newer.extend(other.newer);
    }
}

/// `pd_lsn` of a page (`xlogid`, `xrecoff`), `None` for a short buffer.
pub fn page_lsn(page: &[u8]) -> Option<u64> {
    crate::format::page::PageHeader::parse(page).map(|h| h.pd_lsn)
}

/// The online part of the summary (flattened into it: `online: true`, ...).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OnlineSummary {
    pub online: bool,
    /// Redo point of the checkpoint current when the scan began.
    pub start_redo_lsn: String,
    /// The end of WAL asked of the server after the scan (a standby: received or replayed);
    /// absent without a connection.
    pub end_of_wal_lsn: Option<String>,
    /// Redo point after the checkpoint the in-flux pages were re-read after; absent when none
    /// was needed or possible.
    pub checkpoint_redo_lsn: Option<String>,
    /// Whether a connection to the server was used.
    pub connection: bool,
    /// Pages that failed a check and still could not be verified after the re-reads (their
    /// `pd_lsn` is newer than the redo point): not findings.
    pub in_flux_blocks: u64,
    /// Pages that failed a check during the scan and passed when re-read.
    pub rechecked_blocks: u64,
    /// Transactions whose commit or abort the server gave where `pg_xact` on disk did not
    /// show it yet (standard level, with a connection); absent otherwise.
    pub xact_statuses_from_server: Option<u64>,
    /// `--pause-replay`: where the standby's replay was paused, the WAL received but not
    /// replayed then (bytes), and how long the pause lasted (seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_paused_at_lsn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_lag_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_seconds: Option<f64>,
}

impl OnlineSummary {
    /// The one line of text output.
    pub fn text_line(&self) -> String {
        let wal = match &self.end_of_wal_lsn {
            Some(l) => format!("end of WAL {l}"),
            None => "no connection (end of WAL unknown)".to_string(),
        };
        let ckpt = match &self.checkpoint_redo_lsn {
            Some(l) => format!(", checkpoint redo {l}"),
            None => String::new(),
        };
        let xacts = match self.xact_statuses_from_server {
            Some(n) => format!("; {n} transaction status(es) from the server"),
            None => String::new(),
        };
        let pause = match (&self.replay_paused_at_lsn, self.pause_seconds) {
            (Some(at), Some(secs)) => format!(
                "; standby replay paused at {at} for {secs:.1} s ({} bytes received and not replayed), then resumed",
                self.replay_lag_bytes.unwrap_or(0)
            ),
            _ => String::new(),
        };
        format!(
            "online: start redo {}, {wal}{ckpt}; {} block(s) re-checked after a failed read, {} block(s) in flux (changing, not verified){xacts}{pause}",
            self.start_redo_lsn, self.rechecked_blocks, self.in_flux_blocks
        )
    }
}

/// The identity of a finding across two listings.
fn lasting_key(f: &Finding) -> (&'static str, String, Option<u64>) {
    (f.kind.name(), f.file.clone(), f.block)
}

/// Keeps a finding of `doubtful` (from the listing or the catalog, read while the server ran)
/// only when `fresh` (the same read after the scan) has it too; the other findings stay.
pub fn keep_lasting(findings: &mut Vec<Finding>, doubtful: &[Finding], fresh: &[Finding]) {
    let doubtful: HashSet<_> = doubtful.iter().map(lasting_key).collect();
    let fresh: HashSet<_> = fresh.iter().map(lasting_key).collect();
    findings.retain(|f| {
        let key = lasting_key(f);
        !doubtful.contains(&key) || fresh.contains(&key)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_file_torn_by_a_rewrite_is_read_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("global")).expect("global");
        let path = dir.path().join("global/pg_control");
        let good = crate::format::control::tests::image(1700, 202406281, 1);
        let mut torn = good.clone();
        torn[40] ^= 1;
        std::fs::write(&path, &torn).expect("torn pg_control");
        let rewriter = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                std::fs::write(&path, good).expect("rewritten pg_control");
            })
        };
        let control = read_control_settled(dir.path()).expect("read once rewritten");
        assert_eq!(control.major, Some(17));
        rewriter.join().expect("rewriter");
        // A CRC that never verifies is believed after the re-reads.
        std::fs::write(&path, &torn).expect("torn pg_control");
        assert!(matches!(
            read_control_settled(dir.path()),
            Err(ControlFileError::Crc { .. })
        ));
    }

    #[test]
    fn lsns_print_and_parse_like_postgres() {
        assert_eq!(lsn_text(0x16_B374_D848), "16/B374D848");
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("nonsense"), None);
        assert_eq!(parse_lsn("1FFFFFFFF/0"), None);
    }

    #[test]
    fn text_line_says_the_lsns_and_counts() {
        let s = OnlineSummary {
            online: true,
            start_redo_lsn: "0/5A0012C8".into(),
            end_of_wal_lsn: Some("0/5E3A1F00".into()),
            checkpoint_redo_lsn: None,
            connection: true,
            in_flux_blocks: 2,
            rechecked_blocks: 12,
            xact_statuses_from_server: Some(310),
            replay_paused_at_lsn: None,
            replay_lag_bytes: None,
            pause_seconds: None,
        };
        assert_eq!(
            s.text_line(),
            "online: start redo 0/5A0012C8, end of WAL 0/5E3A1F00; 12 block(s) re-checked after a failed read, 2 block(s) in flux (changing, not verified); 310 transaction status(es) from the server"
        );
        let paused = OnlineSummary {
            replay_paused_at_lsn: Some("0/5E3A0000".into()),
            replay_lag_bytes: Some(7936),
            pause_seconds: Some(4.25),
            ..s
        };
        assert!(
            paused.text_line().ends_with(
                "; standby replay paused at 0/5E3A0000 for 4.2 s (7936 bytes received and not replayed), then resumed"
            ),
            "{}",
            paused.text_line()
        );
    }

    #[test]
    fn listing_findings_stand_only_when_the_second_read_has_them() {
        use crate::finding::{FindingKind, Severity};
        let f = |kind, file: &str| Finding::for_file(kind, Severity::Error, file, String::new());
        let gone = f(FindingKind::MissingFile, "base/5/100");
        let lasting = f(FindingKind::MissingFile, "base/5/200");
        let page = f(FindingKind::ChecksumMismatch, "base/5/300");
        let mut findings = vec![gone.clone(), lasting.clone(), page.clone()];
        keep_lasting(
            &mut findings,
            &[gone, lasting.clone()],
            std::slice::from_ref(&lasting),
        );
        assert_eq!(findings, vec![lasting, page]);
    }

    #[test]
    fn notes_keep_only_pages_above_the_floor() {
        let mut page = vec![0u8; 8192];
        page[0..4].copy_from_slice(&1u32.to_le_bytes());
        page[4..8].copy_from_slice(&0x10u32.to_le_bytes());
        let mut notes = ScanNotes::new(ScanOptions { lsn_floor: 1 << 32 });
        notes.page(3, 7, &page);
        assert_eq!(
            notes.newer,
            vec![NewerPage {
                file: 3,
                block: 7,
                lsn: (1 << 32) | 0x10
            }]
        );
        let mut none = ScanNotes::new(ScanOptions {
            lsn_floor: u64::MAX,
        });
        none.page(3, 7, &page);
        assert!(none.newer.is_empty());
    }
}
