//! The standard page header (`PageHeaderData`) shared by every relation page, and the header
//! rules the server applies when it reads a page (`PageIsVerified`).

use crate::format::bytes::{le_u16, le_u32};

/// `SizeOfPageHeaderData`: bytes before the line-pointer array.
pub const SIZE_OF_PAGE_HEADER_DATA: usize = 24;
/// `offsetof(PageHeaderData, pd_checksum)`.
pub const PD_CHECKSUM_OFFSET: usize = 8;
/// `offsetof(PageHeaderData, pd_flags)`.
pub const PD_FLAGS_OFFSET: usize = 10;
/// `offsetof(PageHeaderData, pd_lower)`.
pub const PD_LOWER_OFFSET: usize = 12;
/// `offsetof(PageHeaderData, pd_upper)`.
pub const PD_UPPER_OFFSET: usize = 14;
/// `offsetof(PageHeaderData, pd_special)`.
pub const PD_SPECIAL_OFFSET: usize = 16;
/// `offsetof(PageHeaderData, pd_pagesize_version)`.
pub const PD_PAGESIZE_VERSION_OFFSET: usize = 18;
/// `offsetof(PageHeaderData, pd_prune_xid)`.
pub const PD_PRUNE_XID_OFFSET: usize = 20;
/// `PG_PAGE_LAYOUT_VERSION` in the low byte of `pd_pagesize_version`.
pub const PG_PAGE_LAYOUT_VERSION: u16 = 4;
/// `PD_ALL_VISIBLE` in `pd_flags`: every tuple on the page is visible to everyone.
pub const PD_ALL_VISIBLE: u16 = 0x0004;
/// `PD_VALID_FLAG_BITS`: `PD_HAS_FREE_LINES | PD_PAGE_FULL | PD_ALL_VISIBLE`.
pub const PD_VALID_FLAG_BITS: u16 = 0x0007;
/// `BLCKSZ` of a default build, the block size of test and fuzzing fixtures; a cluster's
/// own block size is `blcksz` in pg_control.
pub const DEFAULT_BLCKSZ: usize = 8192;
/// `InvalidBlockNumber`: no block (a missing sibling, rightlink or chain link).
pub const INVALID_BLOCK_NUMBER: u32 = u32::MAX;
/// `MaxBlockNumber`: the largest block number a fork can have (`InvalidBlockNumber` - 1).
pub const MAX_BLOCK_NUMBER: u64 = INVALID_BLOCK_NUMBER as u64 - 1;
/// Disk sector size used to recognise torn writes.
pub const SECTOR_SIZE: usize = 512;

/// The 24-byte page header, decoded (little-endian hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PageHeader {
    pub pd_lsn: u64,
    pub pd_checksum: u16,
    pub pd_flags: u16,
    pub pd_lower: u16,
    pub pd_upper: u16,
    pub pd_special: u16,
    pub pd_pagesize_version: u16,
    pub pd_prune_xid: u32,
}

impl PageHeader {
    /// Decodes the header; `None` if the page is shorter than a header.
    pub fn parse(page: &[u8]) -> Option<PageHeader> {
        if page.len() < SIZE_OF_PAGE_HEADER_DATA {
            return None;
        }
        // `pd_lsn` is a `PageXLogRecPtr`: `xlogid` then `xrecoff`.
        let xlogid = le_u32(page, 0)? as u64;
        let xrecoff = le_u32(page, 4)? as u64;
        Some(PageHeader {
            pd_lsn: (xlogid << 32) | xrecoff,
            pd_checksum: le_u16(page, PD_CHECKSUM_OFFSET)?,
            pd_flags: le_u16(page, PD_FLAGS_OFFSET)?,
            pd_lower: le_u16(page, PD_LOWER_OFFSET)?,
            pd_upper: le_u16(page, PD_UPPER_OFFSET)?,
            pd_special: le_u16(page, PD_SPECIAL_OFFSET)?,
            pd_pagesize_version: le_u16(page, PD_PAGESIZE_VERSION_OFFSET)?,
            pd_prune_xid: le_u32(page, PD_PRUNE_XID_OFFSET)?,
        })
    }

    /// `PageIsNew`: `pd_upper == 0`.
    pub fn is_new(&self) -> bool {
        self.pd_upper == 0
    }

    /// Page size encoded in `pd_pagesize_version`.
    pub fn page_size(&self) -> usize {
        (self.pd_pagesize_version & 0xFF00) as usize
    }

    /// Layout version encoded in `pd_pagesize_version`.
    pub fn layout_version(&self) -> u16 {
        self.pd_pagesize_version & 0x00FF
    }

    /// The first header rule the server would reject the page for, if any.
    pub fn server_rule_violation(&self, blcksz: usize, max_align: usize) -> Option<HeaderRule> {
        let (lower, upper, special) = (
            self.pd_lower as usize,
            self.pd_upper as usize,
            self.pd_special as usize,
        );
        if self.pd_flags & !PD_VALID_FLAG_BITS != 0 {
            Some(HeaderRule::UnknownFlagBits)
        } else if lower > upper {
            Some(HeaderRule::LowerAboveUpper)
        } else if upper > special {
            Some(HeaderRule::UpperAboveSpecial)
        } else if special > blcksz {
            Some(HeaderRule::SpecialBeyondBlock)
        } else if max_align != 0 && special % max_align != 0 {
            Some(HeaderRule::SpecialMisaligned)
        } else {
            None
        }
    }

    /// Stricter rules PostgreSQL never breaks when it writes a page but does not check on read.
    pub fn strict_rule_violation(&self, blcksz: usize) -> Option<HeaderRule> {
        if self.page_size() != blcksz {
            Some(HeaderRule::WrongPageSize)
        } else if self.layout_version() != PG_PAGE_LAYOUT_VERSION {
            Some(HeaderRule::WrongLayoutVersion)
        } else if (self.pd_lower as usize) < SIZE_OF_PAGE_HEADER_DATA {
            Some(HeaderRule::LowerInsideHeader)
        } else {
            None
        }
    }
}

/// A named page-header rule, as reported in findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderRule {
    UnknownFlagBits,
    LowerAboveUpper,
    UpperAboveSpecial,
    SpecialBeyondBlock,
    SpecialMisaligned,
    WrongPageSize,
    WrongLayoutVersion,
    LowerInsideHeader,
}

impl HeaderRule {
    /// Stable snake_case name for JSON `detail.rule`.
    pub fn name(self) -> &'static str {
        match self {
            HeaderRule::UnknownFlagBits => "pd_flags_unknown_bits",
            HeaderRule::LowerAboveUpper => "pd_lower_above_pd_upper",
            HeaderRule::UpperAboveSpecial => "pd_upper_above_pd_special",
            HeaderRule::SpecialBeyondBlock => "pd_special_beyond_block",
            HeaderRule::SpecialMisaligned => "pd_special_not_maxaligned",
            HeaderRule::WrongPageSize => "pd_pagesize_version_size",
            HeaderRule::WrongLayoutVersion => "pd_pagesize_version_layout",
            HeaderRule::LowerInsideHeader => "pd_lower_inside_header",
        }
    }

    /// Human description with the offending values.
    pub fn describe(self, h: &PageHeader, blcksz: usize) -> String {
        match self {
            HeaderRule::UnknownFlagBits => format!("pd_flags {:#06x} has unknown bits", h.pd_flags),
            HeaderRule::LowerAboveUpper => {
                format!("pd_lower {} > pd_upper {}", h.pd_lower, h.pd_upper)
            }
            HeaderRule::UpperAboveSpecial => {
                format!("pd_upper {} > pd_special {}", h.pd_upper, h.pd_special)
            }
            HeaderRule::SpecialBeyondBlock => {
                format!("pd_special {} > block size {}", h.pd_special, blcksz)
            }
            HeaderRule::SpecialMisaligned => {
                format!("pd_special {} is not MAXALIGNed", h.pd_special)
            }
            HeaderRule::WrongPageSize => {
                format!(
                    "pd_pagesize_version {:#06x} gives page size {} not {}",
                    h.pd_pagesize_version,
                    h.page_size(),
                    blcksz
                )
            }
            HeaderRule::WrongLayoutVersion => {
                format!(
                    "pd_pagesize_version {:#06x} gives layout version {} not {}",
                    h.pd_pagesize_version,
                    h.layout_version(),
                    PG_PAGE_LAYOUT_VERSION
                )
            }
            HeaderRule::LowerInsideHeader => format!(
                "pd_lower {} < header size {}",
                h.pd_lower, SIZE_OF_PAGE_HEADER_DATA
            ),
        }
    }
}

/// True if every byte of the page is zero.
#[inline]
pub fn is_all_zero(page: &[u8]) -> bool {
    // Compare in 8-byte words; the compiler vectorises this.
    let (chunks, rest) = page.split_at(page.len() & !7);
    chunks
        .chunks_exact(8)
        .all(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) == 0)
        && rest.iter().all(|&b| b == 0)
}

/// Number of leading zero bytes.
pub fn zero_prefix_len(page: &[u8]) -> usize {
    page.iter().position(|&b| b != 0).unwrap_or(page.len())
}

/// Offset where the trailing run of zero bytes begins, rounded up to a sector boundary: the page
/// is zero from the returned offset to its end. Returns `page.len()` if no whole sector is zero.
pub fn zero_tail_sector_start(page: &[u8]) -> usize {
    let last_nonzero_end = page.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    last_nonzero_end.div_ceil(SECTOR_SIZE) * SECTOR_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_page() -> Vec<u8> {
        let mut p = vec![0u8; 8192];
        p[12..20].copy_from_slice(&[0x18, 0x00, 0x00, 0x20, 0x00, 0x20, 0x04, 0x20]);
        p
    }

    #[test]
    fn initialised_page_is_sane() {
        let h = PageHeader::parse(&empty_page()).expect("header");
        assert_eq!(h.pd_lower, 24);
        assert_eq!(h.server_rule_violation(8192, 8), None);
        assert_eq!(h.strict_rule_violation(8192), None);
    }

    #[test]
    fn rules_are_named_in_order() {
        let mut p = empty_page();
        p[12..14].copy_from_slice(&9000u16.to_le_bytes());
        let h = PageHeader::parse(&p).expect("header");
        assert_eq!(
            h.server_rule_violation(8192, 8),
            Some(HeaderRule::LowerAboveUpper)
        );
        p[10] = 0x80;
        let h = PageHeader::parse(&p).expect("header");
        assert_eq!(
            h.server_rule_violation(8192, 8),
            Some(HeaderRule::UnknownFlagBits)
        );
    }

    #[test]
    fn zero_tail_rounds_to_sector() {
        let mut p = vec![1u8; 8192];
        p[4096..].fill(0);
        assert_eq!(zero_tail_sector_start(&p), 4096);
        p[4095] = 0;
        assert_eq!(zero_tail_sector_start(&p), 4096);
        p[5000] = 1;
        assert_eq!(zero_tail_sector_start(&p), 5120);
        assert!(!is_all_zero(&p));
        assert!(is_all_zero(&[0u8; 8192]));
        assert_eq!(zero_prefix_len(&p), 0);
    }
}
