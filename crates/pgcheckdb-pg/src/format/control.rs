//! `global/pg_control`: the cluster's control file (`ControlFileData`), for PostgreSQL 14–19.
//!
//! Reads the fields pgcheckdb needs, checks the CRC-32C and the sanity rules, and can write the
//! file back with a new `data_checksum_version` (used by `checksums enable|disable`).

use crate::format::bytes::{le_f64, le_u32, le_u64};
use crate::format::slru::SLRU_PAGES_PER_SEGMENT;
use crate::format::toast::toast_max_chunk_size;
use pgcheckdb_scan::open::read_regular;
use std::fmt;
use std::path::Path;

/// Size of the control file on disk (`PG_CONTROL_FILE_SIZE`).
pub const PG_CONTROL_FILE_SIZE: usize = 8192;
/// Smallest file that can hold `ControlFileData` in every supported version.
pub const CONTROL_FILE_DATA_SIZE: usize = 296;
/// `floatFormat` must hold exactly this value (`FLOATFORMAT_VALUE`).
const FLOATFORMAT_VALUE: f64 = 1_234_567.0;

/// Byte offsets of the `ControlFileData` fields before `checkPointCopy.nextXid`: the same in
/// every supported version.
mod offset {
    pub const SYSTEM_IDENTIFIER: usize = 0;
    pub const PG_CONTROL_VERSION: usize = 8;
    pub const CATALOG_VERSION_NO: usize = 12;
    pub const STATE: usize = 16;
    pub const TIME: usize = 24;
    pub const CHECKPOINT: usize = 32;
    pub const REDO: usize = 40;
}

/// Byte offsets of the later `ControlFileData` fields pgcheckdb reads, in one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FieldOffsets {
    next_xid: usize,
    next_oid: usize,
    next_multi: usize,
    oldest_xid: usize,
    oldest_multi: usize,
    min_recovery_point: usize,
    max_align: usize,
    float_format: usize,
    blcksz: usize,
    relseg_size: usize,
    /// `slru_pages_per_segment` (PostgreSQL 19+).
    slru_pages_per_segment: Option<usize>,
    xlog_blcksz: usize,
    xlog_seg_size: usize,
    name_data_len: usize,
    index_max_keys: usize,
    toast_max_chunk_size: usize,
    loblksize: usize,
    float8_by_val: usize,
    data_checksum_version: usize,
}

/// PostgreSQL 13–18 (`pg_control_version` 1300, 1700, 1800).
const FIELDS_13: FieldOffsets = FieldOffsets {
    next_xid: 64,
    next_oid: 72,
    next_multi: 76,
    oldest_xid: 84,
    oldest_multi: 92,
    min_recovery_point: 136,
    max_align: 204,
    float_format: 208,
    blcksz: 216,
    relseg_size: 220,
    slru_pages_per_segment: None,
    xlog_blcksz: 224,
    xlog_seg_size: 228,
    name_data_len: 232,
    index_max_keys: 236,
    toast_max_chunk_size: 240,
    loblksize: 244,
    float8_by_val: 248,
    data_checksum_version: 252,
};

/// PostgreSQL 19 (`pg_control_version` 1905): `checkPointCopy` gained
/// `logicalDecodingEnabled` and a 64-bit `nextMultiOffset`, the file gained
/// `slru_pages_per_segment` and `data_checksum_version_init`; every field from `nextXid` on
/// moved.
const FIELDS_19: FieldOffsets = FieldOffsets {
    next_xid: 72,
    next_oid: 80,
    next_multi: 84,
    oldest_xid: 96,
    oldest_multi: 104,
    min_recovery_point: 144,
    max_align: 212,
    float_format: 216,
    blcksz: 224,
    relseg_size: 228,
    slru_pages_per_segment: Some(232),
    xlog_blcksz: 236,
    xlog_seg_size: 240,
    name_data_len: 244,
    index_max_keys: 248,
    toast_max_chunk_size: 252,
    loblksize: 256,
    float8_by_val: 260,
    data_checksum_version: 268,
};

/// One supported layout of the control file, keyed by `pg_control_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ControlLayout {
    pg_control_version: u32,
    crc_offset: usize,
    fields: FieldOffsets,
}

/// Layouts pgcheckdb can read: 1300 (PostgreSQL 13–16), 1700 (17), 1800 (18) and 1905 (19).
const LAYOUTS: [ControlLayout; 4] = [
    ControlLayout {
        pg_control_version: 1300,
        crc_offset: 288,
        fields: FIELDS_13,
    },
    ControlLayout {
        pg_control_version: 1700,
        crc_offset: 288,
        fields: FIELDS_13,
    },
    ControlLayout {
        pg_control_version: 1800,
        crc_offset: 292,
        fields: FIELDS_13,
    },
    ControlLayout {
        pg_control_version: 1905,
        crc_offset: 308,
        fields: FIELDS_19,
    },
];

/// The offset of the CRC in the layout of `pg_control_version`, if pgcheckdb reads it.
pub fn crc_offset_for(pg_control_version: u32) -> Option<usize> {
    LAYOUTS
        .iter()
        .find(|l| l.pg_control_version == pg_control_version)
        .map(|l| l.crc_offset)
}

/// Catalog versions of the released majors; they tell 14, 15 and 16 apart (all 1300).
const CATALOG_VERSIONS: [(u32, u32); 6] = [
    (202107181, 14),
    (202209061, 15),
    (202307071, 16),
    (202406281, 17),
    (202506291, 18),
    (202610061, 19),
];

/// `DBState`: what the server last recorded about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbState {
    Startup,
    Shutdowned,
    ShutdownedInRecovery,
    Shutdowning,
    InCrashRecovery,
    InArchiveRecovery,
    InProduction,
    Unknown(u32),
}

impl DbState {
    fn from_raw(raw: u32) -> DbState {
        match raw {
            0 => DbState::Startup,
            1 => DbState::Shutdowned,
            2 => DbState::ShutdownedInRecovery,
            3 => DbState::Shutdowning,
            4 => DbState::InCrashRecovery,
            5 => DbState::InArchiveRecovery,
            6 => DbState::InProduction,
            other => DbState::Unknown(other),
        }
    }

    /// True for the two states `pg_checksums` accepts: the server shut down cleanly.
    pub fn is_clean_shutdown(self) -> bool {
        matches!(self, DbState::Shutdowned | DbState::ShutdownedInRecovery)
    }
}

/// Whether `pg_control`'s state is one a base backup has: copied from a primary ("in
/// production") or from a standby ("in archive recovery").
pub fn state_of_a_backup(state: DbState) -> bool {
    matches!(state, DbState::InProduction | DbState::InArchiveRecovery)
}

impl fmt::Display for DbState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            DbState::Startup => "starting up",
            DbState::Shutdowned => "shut down",
            DbState::ShutdownedInRecovery => "shut down in recovery",
            DbState::Shutdowning => "shutting down",
            DbState::InCrashRecovery => "in crash recovery",
            DbState::InArchiveRecovery => "in archive recovery",
            DbState::InProduction => "in production",
            DbState::Unknown(v) => return write!(f, "unrecognized status code {v}"),
        };
        f.write_str(text)
    }
}

/// `data_checksum_version`, including PostgreSQL 19's in-progress states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumState {
    Off,
    On,
    InProgressOff,
    InProgressOn,
    Unknown(u32),
}

impl ChecksumState {
    /// `PG_DATA_CHECKSUM_VERSION`, the value that means "on".
    pub const ON_VERSION: u32 = 1;

    fn from_raw(raw: u32) -> ChecksumState {
        match raw {
            0 => ChecksumState::Off,
            1 => ChecksumState::On,
            2 => ChecksumState::InProgressOff,
            3 => ChecksumState::InProgressOn,
            other => ChecksumState::Unknown(other),
        }
    }

    /// The stable name used in output (`off`, `on`, `inprogress-on`, ...).
    pub fn name(self) -> String {
        match self {
            ChecksumState::Off => "off".into(),
            ChecksumState::On => "on".into(),
            ChecksumState::InProgressOff => "inprogress-off".into(),
            ChecksumState::InProgressOn => "inprogress-on".into(),
            ChecksumState::Unknown(v) => format!("unknown({v})"),
        }
    }
}

impl fmt::Display for ChecksumState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Why a control file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ControlFileError {
    /// The operating system's error is part of the message, not a separate source, so that it
    /// is said once.
    #[error("could not read control file \"{path}\": {error}")]
    Io { path: String, error: std::io::Error },
    #[error("control file \"{path}\" is too short ({len} bytes, need at least {need})")]
    TooShort {
        path: String,
        len: usize,
        need: usize,
    },
    #[error("control file \"{path}\" has the wrong byte order (pg_control_version {version:#x})")]
    ByteOrder { path: String, version: u32 },
    #[error("control file \"{path}\" has unsupported pg_control_version {version} (pgcheckdb reads PostgreSQL 14-19)")]
    UnsupportedVersion { path: String, version: u32 },
    #[error("control file \"{path}\" is corrupt: CRC is {stored:#010x}, calculated {calculated:#010x} (torn or damaged pg_control)")]
    Crc {
        path: String,
        stored: u32,
        calculated: u32,
    },
    #[error("control file \"{path}\" is not sane: {what}")]
    Insane { path: String, what: String },
}

/// The parsed control file.
#[derive(Debug, Clone)]
pub struct ControlFile {
    /// The file as read (at least `CONTROL_FILE_DATA_SIZE` bytes); kept for rewriting.
    raw: Vec<u8>,
    crc_offset: usize,
    fields: FieldOffsets,
    pub system_identifier: u64,
    pub pg_control_version: u32,
    pub catalog_version_no: u32,
    /// Major version from the catalog version, when it is a released one.
    pub major: Option<u32>,
    pub state: DbState,
    pub time: i64,
    pub checkpoint: u64,
    pub redo: u64,
    pub next_xid: u64,
    pub next_oid: u32,
    /// `checkPointCopy.nextMulti`.
    pub next_multi: u32,
    /// `checkPointCopy.oldestXid`.
    pub oldest_xid: u32,
    /// `checkPointCopy.oldestMulti`.
    pub oldest_multi: u32,
    pub min_recovery_point: u64,
    pub max_align: u32,
    pub blcksz: u32,
    pub relseg_size: u32,
    /// `xlog_blcksz`: the WAL's page size.
    pub xlog_blcksz: u32,
    pub xlog_seg_size: u32,
    /// `nameDataLen`: `NAMEDATALEN` of the build that made the cluster.
    pub name_data_len: u32,
    /// `indexMaxKeys`: `INDEX_MAX_KEYS`, which sizes an index tuple's null bitmap.
    pub index_max_keys: u32,
    /// `toast_max_chunk_size`: `TOAST_MAX_CHUNK_SIZE`.
    pub toast_max_chunk_size: u32,
    /// `loblksize`: `LOBLKSIZE`, a quarter of the block size.
    pub loblksize: u32,
    /// `float8ByVal`, a bool stored in one byte.
    pub float8_by_val: u8,
    /// `slru_pages_per_segment` (PostgreSQL 19+; before, the build's `SLRU_PAGES_PER_SEGMENT`).
    pub slru_pages_per_segment: Option<u32>,
    pub data_checksum_version: u32,
}

/// The field at `off` of bytes [`ControlFile::parse`] has checked to reach past the layout's
/// CRC, which every field offset lies below (0 past them).
fn read_u32(b: &[u8], off: usize) -> u32 {
    le_u32(b, off).unwrap_or(0)
}

/// As [`read_u32`].
fn read_u64(b: &[u8], off: usize) -> u64 {
    le_u64(b, off).unwrap_or(0)
}

/// `INDEX_MAX_KEYS` of the builds pgcheckdb reads (PostgreSQL's default).
pub const INDEX_MAX_KEYS: usize = 32;
/// `NAMEDATALEN` of the builds pgcheckdb reads (PostgreSQL's default): bytes of a `name`.
pub const NAMEDATALEN: usize = 64;
/// `relseg_size` can be at most `MaxBlockNumber`'s range.
const MAX_RELSEG_SIZE: u32 = u32::MAX >> 1;

/// Largest `pg_control` read: PostgreSQL writes `PG_CONTROL_FILE_SIZE` (8192) bytes.
const MAX_CONTROL_FILE_LEN: u64 = 64 << 10;

impl ControlFile {
    /// Reads `global/pg_control` under `datadir`.
    pub fn read_from_datadir(datadir: &Path) -> Result<ControlFile, ControlFileError> {
        Self::read(&datadir.join("global").join("pg_control"))
    }

    /// Reads and validates a control file.
    pub fn read(path: &Path) -> Result<ControlFile, ControlFileError> {
        let shown = path.display().to_string();
        let bytes =
            read_regular(path, MAX_CONTROL_FILE_LEN).map_err(|error| ControlFileError::Io {
                path: shown.clone(),
                error,
            })?;
        Self::parse(bytes, &shown)
    }

    /// Parses and validates control-file bytes; `path` is only used in messages.
    pub fn parse(raw: Vec<u8>, path: &str) -> Result<ControlFile, ControlFileError> {
        let path = path.to_string();
        if raw.len() < CONTROL_FILE_DATA_SIZE {
            return Err(ControlFileError::TooShort {
                path,
                len: raw.len(),
                need: CONTROL_FILE_DATA_SIZE,
            });
        }
        let version = read_u32(&raw, offset::PG_CONTROL_VERSION);
        if version.is_multiple_of(65536) && version / 65536 != 0 {
            return Err(ControlFileError::ByteOrder { path, version });
        }
        let layout = LAYOUTS
            .iter()
            .find(|l| l.pg_control_version == version)
            .ok_or(ControlFileError::UnsupportedVersion {
                path: path.clone(),
                version,
            })?;
        if raw.len() < layout.crc_offset + 4 {
            return Err(ControlFileError::TooShort {
                path,
                len: raw.len(),
                need: layout.crc_offset + 4,
            });
        }
        let stored = read_u32(&raw, layout.crc_offset);
        let calculated = crc32c::crc32c(&raw[..layout.crc_offset]);
        if stored != calculated {
            return Err(ControlFileError::Crc {
                path,
                stored,
                calculated,
            });
        }
        let catalog_version_no = read_u32(&raw, offset::CATALOG_VERSION_NO);
        let f = layout.fields;
        let control = ControlFile {
            crc_offset: layout.crc_offset,
            fields: f,
            system_identifier: read_u64(&raw, offset::SYSTEM_IDENTIFIER),
            pg_control_version: version,
            catalog_version_no,
            major: major_for(version, catalog_version_no),
            state: DbState::from_raw(read_u32(&raw, offset::STATE)),
            time: read_u64(&raw, offset::TIME) as i64,
            checkpoint: read_u64(&raw, offset::CHECKPOINT),
            redo: read_u64(&raw, offset::REDO),
            next_xid: read_u64(&raw, f.next_xid),
            next_oid: read_u32(&raw, f.next_oid),
            next_multi: read_u32(&raw, f.next_multi),
            oldest_xid: read_u32(&raw, f.oldest_xid),
            oldest_multi: read_u32(&raw, f.oldest_multi),
            min_recovery_point: read_u64(&raw, f.min_recovery_point),
            max_align: read_u32(&raw, f.max_align),
            blcksz: read_u32(&raw, f.blcksz),
            relseg_size: read_u32(&raw, f.relseg_size),
            xlog_blcksz: read_u32(&raw, f.xlog_blcksz),
            xlog_seg_size: read_u32(&raw, f.xlog_seg_size),
            name_data_len: read_u32(&raw, f.name_data_len),
            index_max_keys: read_u32(&raw, f.index_max_keys),
            toast_max_chunk_size: read_u32(&raw, f.toast_max_chunk_size),
            loblksize: read_u32(&raw, f.loblksize),
            float8_by_val: raw[f.float8_by_val],
            slru_pages_per_segment: f.slru_pages_per_segment.map(|o| read_u32(&raw, o)),
            data_checksum_version: read_u32(&raw, f.data_checksum_version),
            raw,
        };
        control
            .check_sanity()
            .map_err(|what| ControlFileError::Insane { path, what })?;
        Ok(control)
    }

    /// The rules the server applies to `pg_control` at start-up, for the values any build of
    /// PostgreSQL can have: each broken rule is refused with the field's name. Fields that
    /// follow from another (`loblksize`, `toast_max_chunk_size` from `blcksz`) must agree with
    /// it, so that one forged or flipped field is caught rather than read as page damage.
    fn check_sanity(&self) -> Result<(), String> {
        let float = le_f64(&self.raw, self.fields.float_format)
            .ok_or("floatFormat unreadable".to_string())?;
        if float != FLOATFORMAT_VALUE {
            return Err(format!(
                "floatFormat is {float}, expected {FLOATFORMAT_VALUE}"
            ));
        }
        if let DbState::Unknown(v) = self.state {
            return Err(format!("state {v} is not a DBState"));
        }
        if !matches!(self.max_align, 4 | 8) {
            return Err(format!("maxAlign {} is not 4 or 8", self.max_align));
        }
        if !self.blcksz.is_power_of_two() || !(1024..=32768).contains(&self.blcksz) {
            return Err(format!(
                "blcksz {} is not a power of two in 1024..32768",
                self.blcksz
            ));
        }
        if self.relseg_size == 0 || self.relseg_size > MAX_RELSEG_SIZE {
            return Err(format!(
                "relseg_size {} is not in 1..{MAX_RELSEG_SIZE}",
                self.relseg_size
            ));
        }
        if !self.xlog_blcksz.is_power_of_two() || !(1024..=65536).contains(&self.xlog_blcksz) {
            return Err(format!(
                "xlog_blcksz {} is not a power of two in 1024..65536",
                self.xlog_blcksz
            ));
        }
        if !self.xlog_seg_size.is_power_of_two()
            || !(1 << 20..=1 << 30).contains(&self.xlog_seg_size)
        {
            return Err(format!(
                "xlog_seg_size {} is not a power of two in 1MB..1GB",
                self.xlog_seg_size
            ));
        }
        self.check_build_constants()
    }

    /// The build's constants that pgcheckdb's readers depend on, and the fields derived from
    /// the block size.
    fn check_build_constants(&self) -> Result<(), String> {
        if self.name_data_len as usize != NAMEDATALEN {
            return Err(format!(
                "nameDataLen {} is not {NAMEDATALEN} (pgcheckdb reads catalogs of builds with the default NAMEDATALEN)",
                self.name_data_len
            ));
        }
        if self.index_max_keys as usize != INDEX_MAX_KEYS {
            return Err(format!(
                "indexMaxKeys {} is not {INDEX_MAX_KEYS} (pgcheckdb reads index tuples of builds with the default INDEX_MAX_KEYS)",
                self.index_max_keys
            ));
        }
        if self.loblksize != self.blcksz / 4 {
            return Err(format!(
                "loblksize {} does not match blcksz {} (it is always blcksz / 4): one of the two is wrong",
                self.loblksize, self.blcksz
            ));
        }
        let chunk = toast_max_chunk_size(self.blcksz as usize, self.max_align as usize);
        if chunk != Some(self.toast_max_chunk_size) {
            return Err(format!(
                "toast_max_chunk_size {} does not match blcksz {} and maxAlign {} (expected {}): one of them is wrong",
                self.toast_max_chunk_size,
                self.blcksz,
                self.max_align,
                chunk.map_or("none".into(), |c| c.to_string())
            ));
        }
        if self.float8_by_val > 1 {
            return Err(format!("float8ByVal {} is not a bool", self.float8_by_val));
        }
        match self.slru_pages_per_segment {
            Some(pages) if pages != SLRU_PAGES_PER_SEGMENT => Err(format!(
                "slru_pages_per_segment {pages} is not {SLRU_PAGES_PER_SEGMENT} (pgcheckdb reads pg_xact and pg_multixact of builds with the default SLRU_PAGES_PER_SEGMENT)"
            )),
            _ => Ok(()),
        }
    }

    pub fn checksum_state(&self) -> ChecksumState {
        ChecksumState::from_raw(self.data_checksum_version)
    }

    /// Block size in bytes, as a `usize` for buffer arithmetic.
    pub fn block_size(&self) -> usize {
        self.blcksz as usize
    }

    /// Tablespace version directory name, `PG_<major>_<catversion>`, if the major is known.
    pub fn tablespace_version_directory(&self) -> Option<String> {
        self.major
            .map(|m| format!("PG_{m}_{}", self.catalog_version_no))
    }

    /// The control-file bytes with a new `data_checksum_version`, a new `time` and a fresh CRC,
    /// padded to `PG_CONTROL_FILE_SIZE`, ready to be written in place.
    pub fn with_checksum_version(&self, version: u32, now: i64) -> Vec<u8> {
        let mut out = vec![0u8; PG_CONTROL_FILE_SIZE];
        let n = self.crc_offset + 4;
        out[..n].copy_from_slice(&self.raw[..n]);
        let at = self.fields.data_checksum_version;
        out[at..at + 4].copy_from_slice(&version.to_le_bytes());
        out[offset::TIME..offset::TIME + 8].copy_from_slice(&now.to_le_bytes());
        let crc = crc32c::crc32c(&out[..self.crc_offset]);
        out[self.crc_offset..self.crc_offset + 4].copy_from_slice(&crc.to_le_bytes());
        out
    }
}

/// Major version for a control-file version and catalog version.
fn major_for(pg_control_version: u32, catalog_version_no: u32) -> Option<u32> {
    if let Some((_, major)) = CATALOG_VERSIONS
        .iter()
        .find(|(cat, _)| *cat == catalog_version_no)
    {
        return Some(*major);
    }
    match pg_control_version {
        1700 => Some(17),
        1800 => Some(18),
        1905 => Some(19),
        _ => None,
    }
}

/// The major versions pgcheckdb knows the on-disk formats of.
pub const SUPPORTED_MAJORS: std::ops::RangeInclusive<u32> = 14..=19;

impl ControlFile {
    /// The cluster's major version when pgcheckdb supports it; otherwise why not, in one
    /// sentence. `pg_version` is what the `PG_VERSION` file says.
    pub fn supported_major(&self, pg_version: u32) -> Result<u32, String> {
        let ids = format!(
            "pg_control version {}, catalog version {}, PG_VERSION {pg_version}",
            self.pg_control_version, self.catalog_version_no
        );
        let (lo, hi) = (SUPPORTED_MAJORS.start(), SUPPORTED_MAJORS.end());
        match self.major {
            Some(major) if SUPPORTED_MAJORS.contains(&major) => Ok(major),
            Some(major) => Err(format!(
                "PostgreSQL {major} is not supported ({ids}): pgcheckdb reads PostgreSQL {lo} to {hi}"
            )),
            None if !SUPPORTED_MAJORS.contains(&pg_version) => Err(format!(
                "PostgreSQL {pg_version} is not supported ({ids}): pgcheckdb reads PostgreSQL {lo} to {hi}"
            )),
            None => Err(format!(
                "unknown PostgreSQL version ({ids}): the catalog version is not that of a released PostgreSQL {lo} to {hi}, so the on-disk formats are not known"
            )),
        }
    }
}

/// Reads the `PG_VERSION` file of a data directory (`"15\n"`): its major version, or why it
/// could not be read (missing, not a regular file, unreadable, not a number).
pub fn read_pg_version_file(datadir: &Path) -> Result<u32, String> {
    let bytes = read_regular(&datadir.join("PG_VERSION"), 64)
        .map_err(|e| format!("could not read \"PG_VERSION\": {e}"))?;
    let text = String::from_utf8_lossy(&bytes);
    text.trim().parse().map_err(|_| {
        format!(
            "\"PG_VERSION\" does not hold a version number: {:?}",
            text.trim()
        )
    })
}

/// Reads the `PG_VERSION` file of a data directory (`"15\n"`), if present and numeric.
pub fn read_pg_version(datadir: &Path) -> Option<u32> {
    let bytes = read_regular(&datadir.join("PG_VERSION"), 64).ok()?;
    String::from_utf8(bytes).ok()?.trim().parse().ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A control file image with the given version, its fields and CRC where the version's
    /// layout has them.
    pub(crate) fn image(version: u32, catversion: u32, checksum: u32) -> Vec<u8> {
        let layout = LAYOUTS
            .iter()
            .find(|l| l.pg_control_version == version)
            .unwrap_or(&LAYOUTS[0]);
        let f = layout.fields;
        let mut b = vec![0u8; PG_CONTROL_FILE_SIZE];
        let mut put = |at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        put(8, version);
        put(12, catversion);
        put(16, 1);
        put(f.max_align, 8);
        put(f.blcksz, 8192);
        put(f.relseg_size, 131072);
        put(f.xlog_blcksz, 8192);
        put(f.xlog_seg_size, 16 << 20);
        put(f.name_data_len, 64);
        put(f.index_max_keys, 32);
        put(f.toast_max_chunk_size, 1996);
        put(f.loblksize, 2048);
        put(f.data_checksum_version, checksum);
        if let Some(at) = f.slru_pages_per_segment {
            put(at, 32);
        }
        b[f.float_format..f.float_format + 8].copy_from_slice(&FLOATFORMAT_VALUE.to_le_bytes());
        b[f.float8_by_val] = 1;
        let crc_off = layout.crc_offset;
        let crc = crc32c::crc32c(&b[..crc_off]);
        b[crc_off..crc_off + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn crc32c_vector() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn parses_each_layout() {
        for (v, cat, major) in [
            (1300, 202107181, 14),
            (1300, 202307071, 16),
            (1700, 202406281, 17),
            (1800, 202506291, 18),
            (1905, 202610061, 19),
        ] {
            let c = ControlFile::parse(image(v, cat, 1), "x").expect("valid image");
            assert_eq!(c.major, Some(major));
            assert_eq!(
                (c.blcksz, c.relseg_size, c.toast_max_chunk_size),
                (8192, 131072, 1996)
            );
            assert_eq!(c.checksum_state(), ChecksumState::On);
            assert_eq!(c.state, DbState::Shutdowned);
        }
    }

    #[test]
    fn nineteen_has_its_own_offsets_and_slru_segment_size() {
        let c = ControlFile::parse(image(1905, 202610061, 0), "x").expect("valid image");
        assert_eq!(c.slru_pages_per_segment, Some(32));
        assert_eq!(c.checksum_state(), ChecksumState::Off);
        // Switching writes data_checksum_version at 268 and the CRC at 308; the rest stays.
        let on = c.with_checksum_version(1, 7);
        assert_eq!(&on[268..272], &1u32.to_le_bytes());
        assert_eq!(
            &on[264..268],
            &[0; 4],
            "data_checksum_version_init is left alone"
        );
        let again = ControlFile::parse(on, "x").expect("rewritten image parses");
        assert_eq!((again.checksum_state(), again.time), (ChecksumState::On, 7));
        let mut b = image(1905, 202610061, 0);
        b[232..236].copy_from_slice(&16u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..308]);
        b[308..312].copy_from_slice(&crc.to_le_bytes());
        let err = ControlFile::parse(b, "x").expect_err("16 pages per SLRU segment");
        assert!(
            err.to_string().contains("slru_pages_per_segment 16"),
            "{err}"
        );
        let short = image(1905, 202610061, 0)[..300].to_vec();
        assert!(matches!(
            ControlFile::parse(short, "x"),
            Err(ControlFileError::TooShort { need: 312, .. })
        ));
    }

    #[test]
    fn a_newer_version_than_19_is_refused() {
        let b = image(2000, 202710011, 0);
        let err = ControlFile::parse(b, "x").expect_err("20 is not known");
        assert!(
            err.to_string().contains("pgcheckdb reads PostgreSQL 14-19"),
            "{err}"
        );
    }

    /// A 19 whose catalog version is not rc1's (a beta, or a release that bumped it after rc1)
    /// is read as 19 by its `pg_control_version`: the catalog version alone cannot tell a later
    /// 19 from a newer major that kept the layout; `PG_VERSION` does (the commands refuse a
    /// control file whose major disagrees with it).
    #[test]
    fn a_1905_control_file_of_another_catalog_version_is_19() {
        for cat in [202605011, 202611201] {
            let c = ControlFile::parse(image(1905, cat, 0), "x").expect("valid image");
            assert_eq!(c.major, Some(19), "catalog version {cat}");
        }
    }

    #[test]
    fn torn_file_is_a_crc_error() {
        let mut b = image(1300, 202209061, 0);
        b[40] ^= 1;
        assert!(matches!(
            ControlFile::parse(b, "x"),
            Err(ControlFileError::Crc { .. })
        ));
    }

    #[test]
    fn unknown_version_is_refused() {
        let b = image(1902, 202605131, 0);
        assert!(matches!(
            ControlFile::parse(b, "x"),
            Err(ControlFileError::UnsupportedVersion { .. })
        ));
    }

    #[test]
    fn rewrite_round_trips() {
        let c = ControlFile::parse(image(1800, 202506291, 0), "x").expect("valid");
        let out = c.with_checksum_version(1, 42);
        let d = ControlFile::parse(out, "x").expect("rewritten file valid");
        assert_eq!(d.checksum_state(), ChecksumState::On);
        assert_eq!(d.time, 42);
    }

    /// `image` with the little-endian `u32` at `off` replaced and the CRC made valid again.
    fn with_field(version: u32, off: usize, value: u32) -> Vec<u8> {
        let mut b = image(version, 202506291, 1);
        b[off..off + 4].copy_from_slice(&value.to_le_bytes());
        let crc_off = if version == 1800 { 292 } else { 288 };
        let crc = crc32c::crc32c(&b[..crc_off]);
        b[crc_off..crc_off + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn each_start_up_rule_names_its_field() {
        for (off, value, field) in [
            (FIELDS_13.xlog_blcksz, 1, "xlog_blcksz"),
            (FIELDS_13.blcksz, 4096, "loblksize"),
            (FIELDS_13.blcksz, 8000, "blcksz"),
            (FIELDS_13.relseg_size, 0, "relseg_size"),
            (FIELDS_13.xlog_seg_size, 12345, "xlog_seg_size"),
            (FIELDS_13.name_data_len, 32, "nameDataLen"),
            (FIELDS_13.index_max_keys, 64, "indexMaxKeys"),
            (FIELDS_13.toast_max_chunk_size, 2000, "toast_max_chunk_size"),
            (FIELDS_13.loblksize, 4096, "loblksize"),
            (offset::STATE, 99, "state"),
            (FIELDS_13.max_align, 2, "maxAlign"),
        ] {
            match ControlFile::parse(with_field(1800, off, value), "x") {
                Err(ControlFileError::Insane { what, .. }) => {
                    assert!(what.starts_with(field), "{field}: {what}")
                }
                other => panic!("{field} = {value} accepted: {other:?}"),
            }
        }
        let mut b = image(1300, 202209061, 1);
        b[FIELDS_13.float8_by_val] = 7;
        let crc = crc32c::crc32c(&b[..288]);
        b[288..292].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            ControlFile::parse(b, "x"),
            Err(ControlFileError::Insane { what, .. }) if what.starts_with("float8ByVal")
        ));
    }

    #[test]
    fn a_consistent_other_block_size_is_read() {
        let mut b = image(1800, 202506291, 1);
        b[FIELDS_13.blcksz..FIELDS_13.blcksz + 4].copy_from_slice(&4096u32.to_le_bytes());
        b[FIELDS_13.loblksize..FIELDS_13.loblksize + 4].copy_from_slice(&1024u32.to_le_bytes());
        b[FIELDS_13.toast_max_chunk_size..FIELDS_13.toast_max_chunk_size + 4]
            .copy_from_slice(&972u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..292]);
        b[292..296].copy_from_slice(&crc.to_le_bytes());
        let c = ControlFile::parse(b, "x").expect("a 4 kB build's control file");
        assert_eq!((c.blcksz, c.toast_max_chunk_size), (4096, 972));
    }

    #[test]
    fn in_progress_states_have_names() {
        let c = ControlFile::parse(image(1800, 202506291, 3), "x").expect("valid");
        assert_eq!(c.checksum_state().name(), "inprogress-on");
    }
}
