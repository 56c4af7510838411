//! `backup_label`: the text file a base backup carries in its root, written by the server when
//! the backup stops (or, in PostgreSQL 14's exclusive mode, when it starts). It names the
//! checkpoint the backup starts from; recovery of the copy begins at its redo pointer
//! (`START WAL LOCATION`), and the pages the server wrote while the files were copied are made
//! whole again by replaying the WAL from there.

use crate::format::lsn::Lsn;

/// The file's name in the data directory (PostgreSQL's `BACKUP_LABEL_FILE`).
pub const BACKUP_LABEL_FILE: &str = "backup_label";

/// The largest `backup_label` read: the real one is a few hundred bytes.
pub const MAX_LABEL_BYTES: u64 = 64 << 10;

/// Where the backup was taken (`BACKUP FROM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupFrom {
    Primary,
    Standby,
}

impl BackupFrom {
    pub fn name(self) -> &'static str {
        match self {
            BackupFrom::Primary => "primary",
            BackupFrom::Standby => "standby",
        }
    }
}

/// The fields of `backup_label` pgcheckdb uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupLabel {
    /// `START WAL LOCATION`: the redo pointer of the backup's starting checkpoint.
    pub start_lsn: Lsn,
    /// `CHECKPOINT LOCATION`: the checkpoint record itself.
    pub checkpoint_lsn: Lsn,
    /// `START TIMELINE`.
    pub start_timeline: u32,
    /// `BACKUP FROM`; absent before PostgreSQL 9.6, primary then.
    pub backup_from: BackupFrom,
    /// `BACKUP METHOD` (`streamed`, `pg_start_backup`).
    pub method: Option<String>,
    /// `START TIME`, as written.
    pub start_time: Option<String>,
    /// `LABEL`.
    pub label: Option<String>,
    /// `INCREMENTAL FROM LSN` (PostgreSQL 17+): the copy holds only changed blocks.
    pub incremental_from: Option<Lsn>,
}

/// Why `backup_label` could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("backup_label has no \"{0}\" line")]
    Missing(&'static str),
    #[error("backup_label line \"{0}\" is not in the expected form")]
    Malformed(String),
}

/// Parses the text of a `backup_label`.
pub fn parse_label(text: &str) -> Result<BackupLabel, LabelError> {
    let mut start_lsn = None;
    let mut checkpoint_lsn = None;
    let mut start_timeline = None;
    let mut backup_from = BackupFrom::Primary;
    let mut method = None;
    let mut start_time = None;
    let mut label = None;
    let mut incremental_from = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(": ") else {
            continue;
        };
        let bad = || LabelError::Malformed(line.chars().take(120).collect());
        match key {
            // "0/2000028 (file 000000010000000000000002)"
            "START WAL LOCATION" => {
                let lsn = value.split_whitespace().next().unwrap_or("");
                start_lsn = Some(Lsn::parse(lsn).ok_or_else(bad)?);
            }
            "CHECKPOINT LOCATION" => checkpoint_lsn = Some(Lsn::parse(value).ok_or_else(bad)?),
            "START TIMELINE" => {
                start_timeline = Some(value.trim().parse::<u32>().map_err(|_| bad())?)
            }
            "BACKUP FROM" => {
                backup_from = match value.trim() {
                    "primary" => BackupFrom::Primary,
                    "standby" => BackupFrom::Standby,
                    _ => return Err(bad()),
                }
            }
            "BACKUP METHOD" => method = Some(value.trim().to_string()),
            "START TIME" => start_time = Some(value.trim().to_string()),
            "LABEL" => label = Some(value.to_string()),
            "INCREMENTAL FROM LSN" => incremental_from = Some(Lsn::parse(value).ok_or_else(bad)?),
            _ => {}
        }
    }
    Ok(BackupLabel {
        start_lsn: start_lsn.ok_or(LabelError::Missing("START WAL LOCATION"))?,
        checkpoint_lsn: checkpoint_lsn.ok_or(LabelError::Missing("CHECKPOINT LOCATION"))?,
        // Written since PostgreSQL 9.x; the copy's own timeline is 1 when absent.
        start_timeline: start_timeline.unwrap_or(1),
        backup_from,
        method,
        start_time,
        label,
        incremental_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG16: &str = "START WAL LOCATION: 0/A000028 (file 00000001000000000000000A)\n\
CHECKPOINT LOCATION: 0/A000060\n\
BACKUP METHOD: streamed\n\
BACKUP FROM: primary\n\
START TIME: 2026-11-23 20:00:00 UTC\n\
LABEL: pg_basebackup base backup\n\
START TIMELINE: 1\n";

    #[test]
    fn a_pg_basebackup_label_parses() {
        let l = parse_label(PG16).expect("parse");
        assert_eq!(l.start_lsn, Lsn(0xA00_0028));
        assert_eq!(l.checkpoint_lsn, Lsn(0xA00_0060));
        assert_eq!(l.start_timeline, 1);
        assert_eq!(l.backup_from, BackupFrom::Primary);
        assert_eq!(l.method.as_deref(), Some("streamed"));
        assert_eq!(l.label.as_deref(), Some("pg_basebackup base backup"));
        assert_eq!(l.incremental_from, None);
        assert_eq!(l.start_lsn.to_string(), "0/A000028");
    }

    #[test]
    fn standby_incremental_and_broken_labels() {
        let text = PG16.replace("BACKUP FROM: primary", "BACKUP FROM: standby")
            + "INCREMENTAL FROM LSN: 1/20\nINCREMENTAL FROM TLI: 1\n";
        let l = parse_label(&text).expect("parse");
        assert_eq!(l.backup_from, BackupFrom::Standby);
        assert_eq!(l.incremental_from, Some(Lsn(0x1_0000_0020)));
        assert_eq!(
            parse_label("CHECKPOINT LOCATION: 0/1\n"),
            Err(LabelError::Missing("START WAL LOCATION"))
        );
        assert!(matches!(
            parse_label(&PG16.replace("0/A000060", "zz")),
            Err(LabelError::Malformed(_))
        ));
    }

    #[test]
    fn lsn_round_trips() {
        assert_eq!(Lsn::parse("16/B374D848"), Some(Lsn(0x16_B374_D848)));
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn::parse("nope"), None);
    }
}
