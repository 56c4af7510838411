//! Edits of `global/pg_control` with its CRC recomputed, as a forged or bit-flipped file with a
//! valid CRC would be: the state a cluster stopped in, or any 4-byte field.

use std::fs;
use std::io;
use std::path::Path;

/// Byte offset of `state` in `ControlFileData` (the same in 14-19).
const STATE_AT: usize = 16;
/// Where the search for the CRC starts and ends (it follows the fields, within the first 1 kB).
const CRC_SEARCH: std::ops::Range<usize> = 20..1024;

/// Sets `pg_control`'s `state` (1: shut down, 2: shut down in recovery, 6: in production, as a
/// crash leaves it) and recomputes its CRC, for the checks that depend on how the cluster
/// stopped. Panics when the file cannot be read, has no CRC, or cannot be written.
pub fn set_db_state(datadir: &Path, state: u32) {
    set_control_u32(datadir, STATE_AT, state);
}

/// Sets the little-endian `u32` at byte `at` of `pg_control` and recomputes its CRC (found where
/// the stored value matches the bytes before it). Panics as [`set_db_state`] does.
pub fn set_control_u32(datadir: &Path, at: usize, value: u32) {
    try_set_control_u32(datadir, at, value)
        .unwrap_or_else(|e| panic!("edit pg_control of {}: {e}", datadir.display()));
}

fn try_set_control_u32(datadir: &Path, at: usize, value: u32) -> io::Result<()> {
    let path = datadir.join("global/pg_control");
    let mut raw = fs::read(&path)?;
    let crc_at = crc_offset(&raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no CRC found"))?;
    let field = raw
        .get_mut(at..at + 4)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "field past the end"))?;
    field.copy_from_slice(&value.to_le_bytes());
    let crc = crc32c::crc32c(&raw[..crc_at]);
    raw[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    fs::write(&path, &raw)
}

/// The offset of the CRC: the first 4-byte-aligned one whose stored value is the CRC-32C of
/// the bytes before it.
fn crc_offset(raw: &[u8]) -> Option<usize> {
    CRC_SEARCH.step_by(4).find(|&at| {
        raw.get(at..at + 4)
            .is_some_and(|s| crc32c::crc32c(&raw[..at]).to_le_bytes() == s)
    })
}
