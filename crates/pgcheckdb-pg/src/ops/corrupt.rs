//! Damage injectors: deliberate, reproducible corruption of one block of a relation file, for
//! tests and drills (`pgcheckdb corrupt`). Each injector works on one open [`SegmentFile`] (or,
//! for tests and fixtures, a file path), a block number *inside that file* and the block size,
//! and writes only the bytes it damages. `pgcheckdb corrupt` opens its file through
//! [`crate::ops::confine::WriteRoots::open`], so a write never goes through a link that leaves the
//! data directory unless the user named the tablespace it leads to.
//!
//! The page checksum covers the absolute block number of the fork, so [`recompute_checksum`]
//! takes that number separately; use [`segment_of`] to turn an absolute block number into a
//! segment number and a block inside the segment file. Call `recompute_checksum` after a
//! structural injection to make damage that only header or structure checks can see.
//!
//! These functions write to the cluster: only ever call them on a stopped, disposable cluster.

use std::fs::File;

use pgcheckdb_scan::open::open_regular;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::format::bytes::{le_u16, put_le_u16};
use crate::format::checksum::pg_checksum_page;
use crate::format::page::{
    PD_CHECKSUM_OFFSET, PD_FLAGS_OFFSET, PD_LOWER_OFFSET, PD_SPECIAL_OFFSET, PD_UPPER_OFFSET,
};

/// One kind of damage to a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// XOR the byte at `offset` with 0xFF.
    FlipByte { offset: usize },
    /// XOR bit `bit` (0-7) of the byte at `offset`.
    FlipBit { offset: usize, bit: u8 },
    /// Overwrite the block with a copy of block `source` of the same file (a misplaced write).
    CopyFrom { source: u64 },
    /// Zero the block from byte `from` to its end (a torn write that lost the tail).
    ZeroTail { from: usize },
    /// Set `pd_upper` to 0 and keep the rest (a non-zero "new" page).
    ZeroPdUpper,
    /// Break one header rule the server checks on read.
    Header(HeaderDamage),
    /// Zero the whole block.
    ZeroBlock,
    /// Fill the whole block with pseudo-random bytes from `seed`.
    Garbage { seed: u64 },
}

/// A header rule to break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderDamage {
    /// `pd_special = BLCKSZ + 8`.
    SpecialBeyondBlock,
    /// `pd_lower = pd_upper + 8` (lower above upper).
    LowerAboveUpper,
    /// Set a flag bit outside `PD_VALID_FLAG_BITS`.
    UnknownFlag,
}

/// One segment file of a relation fork, open for reading and writing: every injector reads and
/// writes through this one descriptor, so a file checked once (see
/// [`crate::ops::confine::WriteRoots::open`]) is the file written, whatever happens to its path.
#[derive(Debug)]
pub struct SegmentFile {
    file: File,
}

impl SegmentFile {
    /// Opens `path` (following symbolic links) for reading and writing, if it is a regular file.
    /// For tests and fixtures; `pgcheckdb corrupt` opens through
    /// [`crate::ops::confine::WriteRoots::open`] instead.
    pub fn open(path: &Path) -> io::Result<SegmentFile> {
        Ok(SegmentFile {
            file: open_regular(path, true)?,
        })
    }

    /// Wraps a descriptor already opened for reading and writing and checked to be a regular file.
    pub fn from_checked(file: File) -> SegmentFile {
        SegmentFile { file }
    }

    /// Applies `damage` to block `block` (counted inside the file).
    pub fn inject(&self, block: u64, blcksz: usize, damage: Damage) -> io::Result<()> {
        match damage {
            Damage::FlipByte { offset } => self.flip_bit_mask(block, blcksz, offset, 0xFF),
            Damage::FlipBit { offset, bit } => {
                self.flip_bit_mask(block, blcksz, offset, 1u8 << (bit & 7))
            }
            Damage::CopyFrom { source } => {
                let page = self.read_block(source, blcksz)?;
                self.write_block(block, &page)
            }
            Damage::ZeroTail { from } => self.modify(block, blcksz, |page| {
                page.get_mut(from..)
                    .ok_or_else(|| out_of_page(from, blcksz))?
                    .fill(0);
                Ok(())
            }),
            Damage::ZeroPdUpper => self.modify(block, blcksz, |page| {
                put_u16(page, PD_UPPER_OFFSET, 0);
                Ok(())
            }),
            Damage::Header(rule) => self.break_header(block, blcksz, rule),
            Damage::ZeroBlock => self.write_block(block, &vec![0u8; blcksz]),
            Damage::Garbage { seed } => self.write_block(block, &garbage(blcksz, seed)),
        }
    }

    /// Reads block `block` of the file; fails if the file has no such whole block.
    pub fn read_block(&self, block: u64, blcksz: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; blcksz];
        self.file
            .read_exact_at(&mut buf, block_offset(block, blcksz)?)?;
        Ok(buf)
    }

    /// Writes `page` (exactly one block) over block `block`, which must exist as a whole
    /// block, and syncs the data.
    pub fn write_block(&self, block: u64, page: &[u8]) -> io::Result<()> {
        let len = self.file.metadata()?.len();
        let end = block_offset(block, page.len())?.checked_add(page.len() as u64);
        if !matches!(end, Some(end) if end <= len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the file has no block {block} ({len} bytes)"),
            ));
        }
        self.file
            .write_all_at(page, block_offset(block, page.len())?)?;
        self.file.sync_data()
    }

    /// Stores the correct checksum for the block's current bytes, for absolute block number
    /// `absolute` of its fork: the damage left behind is then invisible to checksum checks.
    pub fn recompute_checksum(&self, block: u64, blcksz: usize, absolute: u64) -> io::Result<u16> {
        let blkno = u32::try_from(absolute).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("block number {absolute} is beyond 2^32"),
            )
        })?;
        let mut stored = 0;
        self.modify(block, blcksz, |page| {
            stored = pg_checksum_page(page, blkno);
            put_u16(page, PD_CHECKSUM_OFFSET, stored);
            Ok(())
        })?;
        Ok(stored)
    }

    /// XORs the byte at `offset` of the block with `mask`.
    fn flip_bit_mask(&self, block: u64, blcksz: usize, offset: usize, mask: u8) -> io::Result<()> {
        self.modify(block, blcksz, |page| {
            let byte = page
                .get_mut(offset)
                .ok_or_else(|| out_of_page(offset, blcksz))?;
            *byte ^= mask;
            Ok(())
        })
    }

    /// Breaks one header rule.
    fn break_header(&self, block: u64, blcksz: usize, rule: HeaderDamage) -> io::Result<()> {
        let size = u16::try_from(blcksz).ok();
        self.modify(block, blcksz, |page| {
            match rule {
                HeaderDamage::SpecialBeyondBlock => {
                    let beyond = size.and_then(|s| s.checked_add(8)).unwrap_or(u16::MAX);
                    put_u16(page, PD_SPECIAL_OFFSET, beyond);
                }
                HeaderDamage::LowerAboveUpper => {
                    let upper = get_u16(page, PD_UPPER_OFFSET, blcksz)?;
                    put_u16(page, PD_LOWER_OFFSET, upper.saturating_add(8));
                }
                HeaderDamage::UnknownFlag => {
                    let flags = get_u16(page, PD_FLAGS_OFFSET, blcksz)?;
                    put_u16(page, PD_FLAGS_OFFSET, flags | 0x0100);
                }
            }
            Ok(())
        })
    }

    /// Reads a block, lets `change` edit it, and writes it back.
    fn modify(
        &self,
        block: u64,
        blcksz: usize,
        change: impl FnOnce(&mut [u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        // PostgreSQL's block sizes: powers of two from 1 kB to 32 kB.
        if !blcksz.is_power_of_two() || !(1024..=32768).contains(&blcksz) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid block size {blcksz}"),
            ));
        }
        let mut page = self.read_block(block, blcksz)?;
        change(&mut page)?;
        self.write_block(block, &page)
    }
}

/// Applies `damage` to block `block` (counted inside the file) of `path`.
pub fn inject(path: &Path, block: u64, blcksz: usize, damage: Damage) -> io::Result<()> {
    SegmentFile::open(path)?.inject(block, blcksz, damage)
}

/// Splits an absolute block number into (segment number, block inside the segment file).
pub fn segment_of(absolute: u64, relseg_size: u64) -> (u64, u64) {
    (absolute / relseg_size, absolute % relseg_size)
}

/// The path of segment `segno` of the fork whose first segment is `base` (`16384`, `16384.1`, ...).
pub fn segment_path(base: &Path, segno: u64) -> PathBuf {
    if segno == 0 {
        return base.to_path_buf();
    }
    let mut name = base.as_os_str().to_os_string();
    name.push(format!(".{segno}"));
    PathBuf::from(name)
}

/// Reads block `block` of the file (opened for reading only); fails if the file has no such
/// whole block.
pub fn read_block(path: &Path, block: u64, blcksz: usize) -> io::Result<Vec<u8>> {
    let file = open_regular(path, false)?;
    let mut buf = vec![0u8; blcksz];
    file.read_exact_at(&mut buf, block_offset(block, blcksz)?)?;
    Ok(buf)
}

/// Writes `page` (exactly one block) over block `block` of the file.
pub fn write_block(path: &Path, block: u64, page: &[u8]) -> io::Result<()> {
    SegmentFile::open(path)?.write_block(block, page)
}

/// XORs the byte at `offset` of the block with `mask`.
pub fn flip_bit_mask(
    path: &Path,
    block: u64,
    blcksz: usize,
    offset: usize,
    mask: u8,
) -> io::Result<()> {
    SegmentFile::open(path)?.flip_bit_mask(block, blcksz, offset, mask)
}

/// Copies block `from` over block `to` in the same file.
pub fn copy_block(path: &Path, from: u64, to: u64, blcksz: usize) -> io::Result<()> {
    inject(path, to, blcksz, Damage::CopyFrom { source: from })
}

/// Zeroes the block from byte `from` to its end.
pub fn zero_tail(path: &Path, block: u64, blcksz: usize, from: usize) -> io::Result<()> {
    inject(path, block, blcksz, Damage::ZeroTail { from })
}

/// Sets `pd_upper` to 0 and keeps every other byte.
pub fn set_pd_upper_zero(path: &Path, block: u64, blcksz: usize) -> io::Result<()> {
    inject(path, block, blcksz, Damage::ZeroPdUpper)
}

/// Breaks one header rule.
pub fn break_header(path: &Path, block: u64, blcksz: usize, rule: HeaderDamage) -> io::Result<()> {
    inject(path, block, blcksz, Damage::Header(rule))
}

/// Zeroes the whole block.
pub fn zero_block(path: &Path, block: u64, blcksz: usize) -> io::Result<()> {
    inject(path, block, blcksz, Damage::ZeroBlock)
}

/// Fills the block with pseudo-random bytes (xorshift64* from `seed`).
pub fn fill_garbage(path: &Path, block: u64, blcksz: usize, seed: u64) -> io::Result<()> {
    inject(path, block, blcksz, Damage::Garbage { seed })
}

/// `blcksz` pseudo-random bytes (xorshift64* from `seed`).
fn garbage(blcksz: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut page = vec![0u8; blcksz];
    for chunk in page.chunks_mut(8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let word = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    page
}

/// Shortens the file by `bytes` (a partial trailing block unless `bytes` is a block multiple).
pub fn truncate_by(path: &Path, bytes: u64) -> io::Result<()> {
    let file = open_regular(path, true)?;
    let len = file.metadata()?.len();
    let new_len = len.checked_sub(bytes).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file is only {len} bytes, cannot cut {bytes}"),
        )
    })?;
    file.set_len(new_len)?;
    file.sync_all()
}

/// Sets the file length to `len` bytes.
pub fn truncate_to(path: &Path, len: u64) -> io::Result<()> {
    let file = open_regular(path, true)?;
    file.set_len(len)?;
    file.sync_all()
}

/// Stores the correct checksum for the block's current bytes, for absolute block number
/// `absolute` of its fork: the damage left behind is then invisible to checksum checks.
pub fn recompute_checksum(
    path: &Path,
    block: u64,
    blcksz: usize,
    absolute: u64,
) -> io::Result<u16> {
    SegmentFile::open(path)?.recompute_checksum(block, blcksz, absolute)
}

fn block_offset(block: u64, blcksz: usize) -> io::Result<u64> {
    block.checked_mul(blcksz as u64).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("block {block} is out of range"),
        )
    })
}

fn out_of_page(offset: usize, blcksz: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("offset {offset} is outside a {blcksz}-byte block"),
    )
}

/// The little-endian `u16` at `off`, or the error of an offset outside the block.
fn get_u16(page: &[u8], off: usize, blcksz: usize) -> io::Result<u16> {
    le_u16(page, off).ok_or_else(|| out_of_page(off, blcksz))
}

/// Writes a header field of a whole block (always inside it).
fn put_u16(page: &mut [u8], off: usize, value: u16) {
    let _ = put_le_u16(page, off, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::physical::{check_page, PageCheckConfig, PageProblem, PageVerdict};
    use crate::format::bytes::MAXIMUM_ALIGNOF;
    use crate::format::page::{DEFAULT_BLCKSZ as BS, PD_PAGESIZE_VERSION_OFFSET};

    const CFG: PageCheckConfig = PageCheckConfig {
        blcksz: BS,
        max_align: MAXIMUM_ALIGNOF,
        checksums: true,
    };

    /// A heap-like page with tuple bytes from 3000 to the end and a valid checksum for `blkno`.
    fn heap_page(blkno: u32, fill: u8) -> Vec<u8> {
        let mut p = vec![0u8; BS];
        put_u16(&mut p, PD_LOWER_OFFSET, 32);
        put_u16(&mut p, PD_UPPER_OFFSET, 3000);
        put_u16(&mut p, PD_SPECIAL_OFFSET, BS as u16);
        put_u16(&mut p, PD_PAGESIZE_VERSION_OFFSET, 0x2004);
        for (i, b) in p[3000..].iter_mut().enumerate() {
            *b = ((i % 251) as u8).wrapping_add(fill) | 1;
        }
        let c = pg_checksum_page(&p, blkno);
        put_u16(&mut p, PD_CHECKSUM_OFFSET, c);
        p
    }

    /// A file of `n` valid heap pages.
    fn relation_file(n: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("16384");
        let mut bytes = Vec::new();
        for b in 0..n {
            bytes.extend(heap_page(b, b as u8));
        }
        std::fs::write(&path, bytes).expect("write");
        (dir, path)
    }

    fn verdict(path: &Path, block: u64) -> PageVerdict {
        check_page(
            &CFG,
            &read_block(path, block, BS).expect("read"),
            block as u32,
        )
    }

    #[test]
    fn each_damage_gives_its_problem() {
        let (_dir, path) = relation_file(8);
        inject(&path, 1, BS, Damage::FlipByte { offset: 5000 }).unwrap();
        inject(&path, 5, BS, Damage::CopyFrom { source: 2 }).unwrap();
        inject(&path, 3, BS, Damage::ZeroTail { from: 4096 }).unwrap();
        inject(
            &path,
            4,
            BS,
            Damage::Header(HeaderDamage::SpecialBeyondBlock),
        )
        .unwrap();
        inject(&path, 6, BS, Damage::ZeroPdUpper).unwrap();
        inject(&path, 7, BS, Damage::ZeroBlock).unwrap();
        assert!(matches!(
            verdict(&path, 1),
            PageVerdict::Problem(PageProblem::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            verdict(&path, 5),
            PageVerdict::Problem(PageProblem::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            verdict(&path, 3),
            PageVerdict::Problem(PageProblem::TornPage {
                zero_from: 4096,
                ..
            })
        ));
        assert!(matches!(
            verdict(&path, 4),
            PageVerdict::Problem(PageProblem::InvalidHeader { .. })
        ));
        assert!(matches!(
            verdict(&path, 6),
            PageVerdict::Problem(PageProblem::NonzeroNewPage { .. })
        ));
        assert_eq!(verdict(&path, 7), PageVerdict::New);
        assert_eq!(verdict(&path, 0), PageVerdict::Valid);
        assert_eq!(
            read_block(&path, 5, BS).unwrap(),
            read_block(&path, 2, BS).unwrap()
        );
    }

    #[test]
    fn recomputed_checksum_leaves_only_structural_damage() {
        let (_dir, path) = relation_file(3);
        inject(&path, 2, BS, Damage::Header(HeaderDamage::LowerAboveUpper)).unwrap();
        recompute_checksum(&path, 2, BS, 2).unwrap();
        match verdict(&path, 2) {
            PageVerdict::Problem(PageProblem::InvalidHeader {
                checksum: Some(c), ..
            }) => assert_eq!(c.stored, c.calculated),
            other => panic!("{other:?}"),
        }
        inject(
            &path,
            1,
            BS,
            Damage::FlipBit {
                offset: 6000,
                bit: 3,
            },
        )
        .unwrap();
        recompute_checksum(&path, 1, BS, 1).unwrap();
        assert_eq!(verdict(&path, 1), PageVerdict::Valid);
    }

    #[test]
    fn garbage_and_truncation() {
        let (_dir, path) = relation_file(3);
        fill_garbage(&path, 1, BS, 42).unwrap();
        assert!(matches!(verdict(&path, 1), PageVerdict::Problem(_)));
        truncate_by(&path, 100).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * BS as u64 - 100);
        assert!(read_block(&path, 2, BS).is_err());
        assert!(
            inject(&path, 2, BS, Damage::ZeroBlock).is_err(),
            "no whole block 2 any more"
        );
        assert!(inject(&path, 0, BS, Damage::FlipByte { offset: BS }).is_err());
    }

    #[test]
    fn segments() {
        assert_eq!(segment_of(131072 + 5, 131072), (1, 5));
        assert_eq!(
            segment_path(Path::new("base/5/16384"), 0),
            PathBuf::from("base/5/16384")
        );
        assert_eq!(
            segment_path(Path::new("base/5/16384"), 2),
            PathBuf::from("base/5/16384.2")
        );
    }
}
