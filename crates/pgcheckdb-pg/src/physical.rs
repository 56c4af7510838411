//! The physical check of one block: new (all-zero) pages, the page header rules the server
//! applies on read, the data checksum, and the classification of damage (torn, misplaced, ...).

use serde_json::json;

use crate::checksum::{checksum_from_raw, matching_block_numbers, raw_block_sum};
use crate::page::{
    is_all_zero, zero_prefix_len, zero_tail_sector_start, HeaderRule, PageHeader, SECTOR_SIZE,
};

/// Cluster facts the block check needs.
#[derive(Debug, Clone, Copy)]
pub struct PageCheckConfig {
    pub blcksz: usize,
    pub max_align: usize,
    /// `data_checksum_version == 1`: verify `pd_checksum`.
    pub checksums: bool,
}

/// The stored and the calculated checksum of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumPair {
    pub stored: u16,
    pub calculated: u16,
    /// The raw block sum before the block number was mixed in.
    pub raw: u32,
}

/// What is wrong with a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageProblem {
    /// `pd_upper == 0` but not all zero.
    NonzeroNewPage { zero_prefix: usize },
    /// A header rule the server checks on read is broken.
    InvalidHeader {
        rule: HeaderRule,
        text: String,
        checksum: Option<ChecksumPair>,
    },
    /// Header sane, data area zero from a sector boundary to the end.
    TornPage {
        zero_from: usize,
        pd_upper: u16,
        checksum: Option<ChecksumPair>,
    },
    /// Header sane, checksum wrong.
    ChecksumMismatch { checksum: ChecksumPair },
    /// A rule PostgreSQL never breaks but the server does not check.
    SuspiciousHeader { rule: HeaderRule, text: String },
}

/// The outcome of checking one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageVerdict {
    Valid,
    /// All zero: an unused page, counted not checked.
    New,
    Problem(PageProblem),
}

/// Checks one block at absolute block number `blkno` of its fork.
pub fn check_page(cfg: &PageCheckConfig, page: &[u8], blkno: u32) -> PageVerdict {
    check_page_with_sum(cfg, page, blkno, || raw_block_sum(page))
}

/// [`check_page`] with the page's raw block sum supplied by the caller, who may have computed
/// it in bulk ([`crate::checksum::raw_block_sums`]); `raw_sum` is called only when the
/// checksum is needed and must return `raw_block_sum(page)`.
pub fn check_page_with_sum(
    cfg: &PageCheckConfig,
    page: &[u8],
    blkno: u32,
    raw_sum: impl FnOnce() -> u32,
) -> PageVerdict {
    let Some(header) = PageHeader::parse(page) else {
        return PageVerdict::Problem(PageProblem::NonzeroNewPage { zero_prefix: 0 });
    };
    if header.is_new() {
        if is_all_zero(page) {
            return PageVerdict::New;
        }
        return PageVerdict::Problem(PageProblem::NonzeroNewPage {
            zero_prefix: zero_prefix_len(page),
        });
    }
    let checksum = cfg.checksums.then(|| {
        let raw = raw_sum();
        ChecksumPair {
            stored: header.pd_checksum,
            calculated: checksum_from_raw(raw, blkno),
            raw,
        }
    });
    let checksum_failed = checksum.filter(|c| c.stored != c.calculated);
    if let Some(rule) = header.server_rule_violation(cfg.blcksz, cfg.max_align) {
        let text = rule.describe(&header, cfg.blcksz);
        return PageVerdict::Problem(PageProblem::InvalidHeader {
            rule,
            text,
            checksum,
        });
    }
    if checksum.is_some() && checksum_failed.is_none() {
        return strict_verdict(&header, cfg.blcksz);
    }
    if let Some(zero_from) = torn_tail(&header, page) {
        return PageVerdict::Problem(PageProblem::TornPage {
            zero_from,
            pd_upper: header.pd_upper,
            checksum: checksum_failed,
        });
    }
    match checksum_failed {
        Some(checksum) => PageVerdict::Problem(PageProblem::ChecksumMismatch { checksum }),
        None => strict_verdict(&header, cfg.blcksz),
    }
}

fn strict_verdict(header: &PageHeader, blcksz: usize) -> PageVerdict {
    match header.strict_rule_violation(blcksz) {
        Some(rule) => PageVerdict::Problem(PageProblem::SuspiciousHeader {
            rule,
            text: rule.describe(header, blcksz),
        }),
        None => PageVerdict::Valid,
    }
}

/// The sector offset from which a page that should hold data (`pd_upper < pd_special`) is all
/// zero to its end, cutting into the data or special area: the mark of a write that stopped
/// after the first sectors.
fn torn_tail(header: &PageHeader, page: &[u8]) -> Option<usize> {
    if header.pd_upper >= header.pd_special {
        return None;
    }
    let zero_from = zero_tail_sector_start(page);
    (zero_from >= SECTOR_SIZE && zero_from < header.pd_special as usize).then_some(zero_from)
}

/// Misplaced-page evidence for a checksum mismatch.
#[derive(Debug, Clone, PartialEq)]
pub struct MisplacedEvidence {
    /// Other block numbers of the fork whose checksum equals the stored one.
    pub candidates: Vec<u32>,
    /// Expected number of candidates from chance alone, `nblocks / 65535`.
    pub expected_false_matches: f64,
    /// A candidate block whose current content is byte-identical to this page.
    pub identical_copy_at: Option<u32>,
}

impl MisplacedEvidence {
    /// Most candidates for which a misplaced write is still claimed.
    pub const MAX_CANDIDATES: usize = 3;
    /// Claim on the checksum alone only when chance explains a candidate this rarely.
    pub const MAX_EXPECTED_FALSE: f64 = 0.1;

    /// Looks for block numbers of the fork (`0..fork_blocks`) where this page's stored checksum
    /// would be right. `read_block` fetches a candidate block to compare contents.
    pub fn gather(
        page: &[u8],
        checksum: &ChecksumPair,
        blkno: u32,
        fork_blocks: u32,
        mut read_block: impl FnMut(u32) -> Option<Vec<u8>>,
    ) -> MisplacedEvidence {
        let candidates = matching_block_numbers(checksum.raw, checksum.stored, fork_blocks, blkno);
        let identical_copy_at = if candidates.len() <= Self::MAX_CANDIDATES {
            candidates
                .iter()
                .copied()
                .find(|&b| read_block(b).is_some_and(|other| other == page))
        } else {
            None
        };
        MisplacedEvidence {
            candidates,
            expected_false_matches: fork_blocks as f64 / 65535.0,
            identical_copy_at,
        }
    }

    /// True when the evidence is strong enough to call the page misplaced.
    pub fn is_convincing(&self) -> bool {
        !self.candidates.is_empty()
            && self.candidates.len() <= Self::MAX_CANDIDATES
            && (self.identical_copy_at.is_some()
                || self.expected_false_matches <= Self::MAX_EXPECTED_FALSE)
    }

    /// JSON detail fields.
    pub fn detail(&self) -> serde_json::Value {
        json!({
            "candidates": self.candidates,
            "expected_false_matches": (self.expected_false_matches * 1e4).round() / 1e4,
            "identical_copy_at": self.identical_copy_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::pg_checksum_page;

    const CFG: PageCheckConfig = PageCheckConfig {
        blcksz: 8192,
        max_align: 8,
        checksums: true,
    };

    /// A heap-like page: header, two line pointers, tuple bytes at the end, checksum set.
    fn heap_page(blkno: u32) -> Vec<u8> {
        let mut p = crate::test_pages::heap_like_page(0);
        set_checksum(&mut p, blkno);
        p
    }

    fn set_checksum(p: &mut [u8], blkno: u32) {
        let c = pg_checksum_page(p, blkno);
        p[8..10].copy_from_slice(&c.to_le_bytes());
    }

    #[test]
    fn valid_and_new_pages() {
        assert_eq!(check_page(&CFG, &heap_page(3), 3), PageVerdict::Valid);
        assert_eq!(check_page(&CFG, &[0u8; 8192], 3), PageVerdict::New);
    }

    #[test]
    fn flipped_bit_is_a_checksum_mismatch() {
        let mut p = heap_page(3);
        p[7500] ^= 0x10;
        assert!(matches!(
            check_page(&CFG, &p, 3),
            PageVerdict::Problem(PageProblem::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn zero_tail_is_torn() {
        let mut p = heap_page(3);
        p[4096..].fill(0);
        match check_page(&CFG, &p, 3) {
            PageVerdict::Problem(PageProblem::TornPage { zero_from, .. }) => {
                assert_eq!(zero_from, 4096)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn nonzero_new_page() {
        let mut p = vec![0u8; 8192];
        p[5000] = 1;
        assert_eq!(
            check_page(&CFG, &p, 0),
            PageVerdict::Problem(PageProblem::NonzeroNewPage { zero_prefix: 5000 })
        );
    }

    #[test]
    fn bad_header_is_named_even_without_checksums() {
        let mut p = heap_page(3);
        p[16..18].copy_from_slice(&8193u16.to_le_bytes());
        let cfg = PageCheckConfig {
            checksums: false,
            ..CFG
        };
        match check_page(&cfg, &p, 3) {
            PageVerdict::Problem(PageProblem::InvalidHeader { rule, .. }) => {
                assert_eq!(rule, HeaderRule::SpecialBeyondBlock)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn copy_of_another_block_is_misplaced() {
        let p = heap_page(2);
        let PageVerdict::Problem(PageProblem::ChecksumMismatch { checksum }) =
            check_page(&CFG, &p, 3)
        else {
            panic!("expected mismatch");
        };
        let ev = MisplacedEvidence::gather(&p, &checksum, 3, 10, |b| (b == 2).then(|| p.clone()));
        assert_eq!(ev.candidates, vec![2]);
        assert_eq!(ev.identical_copy_at, Some(2));
        assert!(ev.is_convincing());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_pages_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 8192), blk in 0u32..u32::MAX, checksums: bool) {
            let cfg = PageCheckConfig { checksums, ..CFG };
            let _ = check_page(&cfg, &bytes, blk);
        }

        #[test]
        fn headers_from_arbitrary_fields_never_panic(fields in proptest::collection::vec(proptest::num::u8::ANY, 24), fill: u8) {
            let mut page = vec![fill; 8192];
            page[..24].copy_from_slice(&fields);
            let _ = check_page(&CFG, &page, 1);
        }
    }
}
