//! `pg_filenode.map`: the relation mapper file that gives the file numbers of mapped catalogs
//! (pg_class, pg_database, their indexes, ...), whose `pg_class.relfilenode` is 0.

use foldhash::HashMap;
use std::path::Path;

use crate::format::bytes::le_u32;

/// `RELMAPPER_FILEMAGIC`.
pub const RELMAPPER_FILEMAGIC: u32 = 0x592717;

/// One version of the file format.
struct RelMapLayout {
    file_size: usize,
    max_mappings: usize,
    crc_offset: usize,
}

/// 14–15: 62 mappings in 512 bytes; 16+: 64 mappings in 524 bytes.
const LAYOUTS: [RelMapLayout; 2] = [
    RelMapLayout {
        file_size: 512,
        max_mappings: 62,
        crc_offset: 504,
    },
    RelMapLayout {
        file_size: 524,
        max_mappings: 64,
        crc_offset: 520,
    },
];

/// Why a map file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RelMapError {
    #[error("could not read: {0}")]
    Io(#[from] std::io::Error),
    #[error("size {0} is not that of a relation map file (512 or 524 bytes)")]
    Size(usize),
    #[error("magic {0:#x} is wrong")]
    Magic(u32),
    #[error("num_mappings {0} is out of range")]
    Count(i32),
    #[error("CRC mismatch: stored {stored:#010x}, calculated {calculated:#010x}")]
    Crc { stored: u32, calculated: u32 },
}

/// The little-endian `u32` at `off`. Every offset read is inside the file sizes of
/// [`LAYOUTS`], which [`parse_relmap`] checks first; a shorter file is a size error.
fn u32_at(b: &[u8], off: usize) -> Result<u32, RelMapError> {
    le_u32(b, off).ok_or(RelMapError::Size(b.len()))
}

/// Parses a map file's bytes into `oid -> file number`.
pub fn parse_relmap(bytes: &[u8]) -> Result<HashMap<u32, u32>, RelMapError> {
    let layout = LAYOUTS
        .iter()
        .find(|l| l.file_size == bytes.len())
        .ok_or(RelMapError::Size(bytes.len()))?;
    let magic = u32_at(bytes, 0)?;
    if magic != RELMAPPER_FILEMAGIC {
        return Err(RelMapError::Magic(magic));
    }
    let count = u32_at(bytes, 4)? as i32;
    if count < 0 || count as usize > layout.max_mappings {
        return Err(RelMapError::Count(count));
    }
    let stored = u32_at(bytes, layout.crc_offset)?;
    // The CRC itself was read just above: the bytes before it are all there.
    let calculated = crc32c::crc32c(bytes.get(..layout.crc_offset).unwrap_or_default());
    if stored != calculated {
        return Err(RelMapError::Crc { stored, calculated });
    }
    (0..count as usize)
        .map(|i| Ok((u32_at(bytes, 8 + 8 * i)?, u32_at(bytes, 12 + 8 * i)?)))
        .collect()
}

/// Reads `<dir>/pg_filenode.map`.
pub fn read_relmap(dir: &Path) -> Result<HashMap<u32, u32>, RelMapError> {
    parse_relmap(&pgcheckdb_scan::open::read_regular(
        &dir.join("pg_filenode.map"),
        64 << 10,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(size: usize, crc_off: usize, maps: &[(u32, u32)]) -> Vec<u8> {
        let mut b = vec![0u8; size];
        b[0..4].copy_from_slice(&RELMAPPER_FILEMAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(maps.len() as u32).to_le_bytes());
        for (i, (oid, node)) in maps.iter().enumerate() {
            b[8 + 8 * i..12 + 8 * i].copy_from_slice(&oid.to_le_bytes());
            b[12 + 8 * i..16 + 8 * i].copy_from_slice(&node.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..crc_off]);
        b[crc_off..crc_off + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn both_formats() {
        for (size, crc) in [(512, 504), (524, 520)] {
            let m = parse_relmap(&image(size, crc, &[(1259, 16494), (1249, 1249)])).expect("valid");
            assert_eq!(m.get(&1259), Some(&16494));
        }
    }

    #[test]
    fn damage_is_detected() {
        let mut b = image(512, 504, &[(1259, 1259)]);
        b[9] ^= 1;
        assert!(matches!(parse_relmap(&b), Err(RelMapError::Crc { .. })));
        assert!(matches!(
            parse_relmap(&b[..500]),
            Err(RelMapError::Size(500))
        ));
    }
}
