//! The physical check of one block: new (all-zero) pages, the page header rules the server
//! applies on read, the data checksum, and the classification of damage (torn, misplaced, ...).

use serde_json::json;

use crate::format::bytes::le_u32;
use crate::format::checksum::{checksum_from_raw, matching_block_numbers, raw_block_sum};
use crate::format::heap::T_HOFF_OFFSET;
use crate::format::itemid::{max_offset_number, ItemId, SIZE_OF_ITEM_ID};
use crate::format::page::{
    is_all_zero, zero_prefix_len, zero_tail_sector_start, HeaderRule, PageHeader, SECTOR_SIZE,
    SIZE_OF_PAGE_HEADER_DATA,
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
/// it in bulk ([`crate::format::checksum::raw_block_sums`]); `raw_sum` is called only when the
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
    if let Some(zero_from) = torn_tail(&header, page, checksum_failed.is_some()) {
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
/// zero to its end: the mark of a write that stopped after the first sectors.
///
/// With a failed checksum (`damage_proven`) the damage is certain and a zero tail cutting into
/// the data or special area names it. Without that proof, zero bytes at the end of a page are
/// normal when they are the last bytes of a tuple (a `bytea` of zeros, a zero-padded value), so
/// the page is called torn only when the zero range holds bytes that can never be zero
/// ([`zero_range_breaks_page`]).
fn torn_tail(header: &PageHeader, page: &[u8], damage_proven: bool) -> Option<usize> {
    if header.pd_upper >= header.pd_special {
        return None;
    }
    let zero_from = zero_tail_sector_start(page);
    if zero_from < SECTOR_SIZE || zero_from >= page.len() {
        return None;
    }
    let torn = if damage_proven {
        zero_from < header.pd_special as usize
    } else {
        zero_range_breaks_page(header, page, zero_from)
    };
    torn.then_some(zero_from)
}

/// Whether the all-zero range `[zero_from, end)` covers bytes a valid page never has zero,
/// judged from the page alone (no catalog):
/// * the whole storage of an item a line pointer points at (every access method's tuple starts
///   with a non-zero header: a heap tuple's `t_hoff`, an index tuple's size in `t_info`);
/// * on a page without special space (a heap page), a tuple header's `t_hoff`, which is at
///   least 24;
/// * the whole special space, where every index access method keeps non-zero flags or its page
///   id, and a sequence its magic.
fn zero_range_breaks_page(header: &PageHeader, page: &[u8], zero_from: usize) -> bool {
    let special = header.pd_special as usize;
    if special < page.len() && special >= zero_from {
        return true;
    }
    let heap_shaped = special == page.len();
    (0..max_offset_number(header)).any(|i| {
        let Some(word) = le_u32(page, SIZE_OF_PAGE_HEADER_DATA + i * SIZE_OF_ITEM_ID) else {
            return false;
        };
        let item = ItemId::from_word(i as u16 + 1, word);
        if !item.has_storage() || (item.lp_off as usize) < SIZE_OF_PAGE_HEADER_DATA {
            return false;
        }
        let start = item.lp_off as usize;
        let header_cut = heap_shaped
            && item.lp_len as usize > T_HOFF_OFFSET
            && start + T_HOFF_OFFSET >= zero_from;
        start >= zero_from || header_cut
    })
}

/// Misplaced-page evidence for a checksum mismatch.
///
/// A damaged page's stored checksum matches some other block number by chance: checksums take
/// the 65,535 values 1..=65535, so each of the fork's other `N − 1` blocks matches with
/// probability 1/65535 and the expected number of chance matches is
/// `E = (N − 1) / 65535` ([`expected_false_matches`]): 0.044 for a 2,858-block table. A matching
/// block number alone is therefore claimed as the page's true place only when `E` is below
/// [`MisplacedEvidence::MAX_EXPECTED_FALSE`] (1 in 10,000, forks of at most 7 blocks); otherwise
/// the claim needs a fact beyond the 16-bit coincidence: an identical copy at the candidate, or
/// the page's own tuples naming the candidate in `t_ctid` ([`crate::check::placement`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MisplacedEvidence {
    /// Other block numbers of the fork whose checksum equals the stored one.
    pub candidates: Vec<u32>,
    /// Expected number of candidates from chance alone, `(N − 1) / 65535`.
    pub expected_false_matches: f64,
    /// A candidate block whose current content is byte-identical to this page.
    pub identical_copy_at: Option<u32>,
    /// The block this page's not-updated tuples name in `t_ctid`, kept when it is a candidate
    /// or when the page found at that block corroborates it.
    pub ctid_claim: Option<u32>,
}

/// Why a page is called misplaced, and at which block it belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MisplacedBasis {
    /// The block holds a byte-identical copy.
    IdenticalCopy(u32),
    /// The page's tuples name the block in `t_ctid`.
    Ctid(u32),
    /// The only candidate, in a fork so small that a chance match is below 1 in 10,000.
    Checksum(u32),
}

impl MisplacedBasis {
    /// The block the page belongs at.
    pub fn block(self) -> u32 {
        match self {
            MisplacedBasis::IdenticalCopy(b)
            | MisplacedBasis::Ctid(b)
            | MisplacedBasis::Checksum(b) => b,
        }
    }

    /// Name used in finding details (`evidence`).
    pub fn name(self) -> &'static str {
        match self {
            MisplacedBasis::IdenticalCopy(_) => "identical_copy",
            MisplacedBasis::Ctid(_) => "t_ctid",
            MisplacedBasis::Checksum(_) => "checksum",
        }
    }
}

/// Expected chance matches of a 16-bit page checksum among the other blocks of an
/// `fork_blocks`-block fork: `(N − 1) / 65535`.
pub fn expected_false_matches(fork_blocks: u32) -> f64 {
    fork_blocks.saturating_sub(1) as f64 / 65535.0
}

impl MisplacedEvidence {
    /// Most candidates compared byte for byte with the page.
    pub const MAX_CANDIDATES: usize = 3;
    /// Claim on the checksum alone only when chance explains a candidate this rarely.
    pub const MAX_EXPECTED_FALSE: f64 = 1e-4;

    /// Looks for block numbers of the fork (`0..fork_blocks`) where this page's stored checksum
    /// would be right, and for the block its tuples name. `read_block` fetches another block of
    /// the fork to compare contents.
    pub fn gather(
        page: &[u8],
        checksum: &ChecksumPair,
        blkno: u32,
        fork_blocks: u32,
        max_align: usize,
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
        let ctid_claim = crate::check::placement::claimed_block(page, blkno, max_align)
            .filter(|c| c.claims_block < fork_blocks)
            .filter(|c| {
                candidates.contains(&c.claims_block)
                    || read_block(c.claims_block).is_some_and(|other| {
                        crate::check::placement::corroborates(page, blkno, c, &other, max_align)
                            .is_some()
                    })
            })
            .map(|c| c.claims_block);
        MisplacedEvidence {
            candidates,
            expected_false_matches: expected_false_matches(fork_blocks),
            identical_copy_at,
            ctid_claim,
        }
    }

    /// The basis for calling the page misplaced, if the evidence goes beyond a coincidence.
    pub fn basis(&self) -> Option<MisplacedBasis> {
        if let Some(b) = self.identical_copy_at {
            return Some(MisplacedBasis::IdenticalCopy(b));
        }
        if let Some(b) = self.ctid_claim {
            return Some(MisplacedBasis::Ctid(b));
        }
        match self.candidates.as_slice() {
            [b] if self.expected_false_matches < Self::MAX_EXPECTED_FALSE => {
                Some(MisplacedBasis::Checksum(*b))
            }
            _ => None,
        }
    }

    /// True when the evidence is strong enough to call the page misplaced.
    pub fn is_convincing(&self) -> bool {
        self.basis().is_some()
    }

    /// JSON detail fields of a `misplaced_page` finding.
    pub fn detail(&self) -> serde_json::Value {
        let mut d = json!({
            "candidates": self.shown_candidates(),
            "expected_false_matches": self.rounded_expectation(),
            "identical_copy_at": self.identical_copy_at,
        });
        if let Some(basis) = self.basis() {
            d["claims_block"] = json!(basis.block());
            d["evidence"] = json!(basis.name());
        }
        d
    }

    /// JSON detail fields of a `checksum_mismatch` finding whose stored checksum would be right
    /// elsewhere, without evidence that the page belongs there; `None` when no block matches.
    pub fn mismatch_detail(&self) -> Option<serde_json::Value> {
        (!self.candidates.is_empty()).then(|| {
            json!({
                "candidate_blocks": self.shown_candidates(),
                "candidate_count": self.candidates.len(),
                "expected_false_matches": self.rounded_expectation(),
            })
        })
    }

    /// At most 20 candidates, for the report.
    fn shown_candidates(&self) -> &[u32] {
        &self.candidates[..self.candidates.len().min(20)]
    }

    /// Four significant decimals, or the value itself when smaller (so it never shows as 0).
    fn rounded_expectation(&self) -> f64 {
        let r = (self.expected_false_matches * 1e4).round() / 1e4;
        if r == 0.0 {
            self.expected_false_matches
        } else {
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checksum::pg_checksum_page;

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
        let ev =
            MisplacedEvidence::gather(&p, &checksum, 3, 10, 8, |b| (b == 2).then(|| p.clone()));
        assert_eq!(ev.candidates, vec![2]);
        assert_eq!(ev.identical_copy_at, Some(2));
        assert!(ev.is_convincing());
    }

    const NO_SUMS: PageCheckConfig = PageCheckConfig {
        checksums: false,
        ..CFG
    };

    /// Seven in-place 1 KiB tuples of block 3 (`pd_upper` 1024); the first, at 7168, has its
    /// 1000 data bytes from 7192 to the end zero, like a `bytea` of zeros.
    fn page_with_zero_valued_tuple() -> Vec<u8> {
        use crate::test_pages::{heap_page_with_tuples_of, TupleSpec};
        let specs: Vec<TupleSpec> = (1..=7).map(|o| TupleSpec::inserted(3, o)).collect();
        let mut p = heap_page_with_tuples_of(&specs, 1024);
        p[7192..].fill(0);
        p
    }

    #[test]
    fn tuple_ending_in_zeros_is_not_torn_without_checksums() {
        let p = page_with_zero_valued_tuple();
        assert_eq!(zero_tail_sector_start(&p), 7680);
        assert_eq!(check_page(&NO_SUMS, &p, 3), PageVerdict::Valid);
        // With checksums a failed checksum proves damage: the same zero tail is torn.
        let mut q = p.clone();
        set_checksum(&mut q, 4);
        assert!(matches!(
            check_page(&CFG, &q, 3),
            PageVerdict::Problem(PageProblem::TornPage {
                zero_from: 7680,
                checksum: Some(_),
                ..
            })
        ));
    }

    #[test]
    fn tear_over_tuple_headers_or_special_space_is_torn_without_checksums() {
        // Zero from 7168: tuple 1's header is gone.
        let mut p = page_with_zero_valued_tuple();
        p[7168..].fill(0);
        assert!(matches!(
            check_page(&NO_SUMS, &p, 3),
            PageVerdict::Problem(PageProblem::TornPage {
                zero_from: 7168,
                checksum: None,
                ..
            })
        ));
        // Zero from 4096 (`corrupt --how tear`): tuples 2-4 are gone.
        let mut p = page_with_zero_valued_tuple();
        p[4096..].fill(0);
        assert!(matches!(
            check_page(&NO_SUMS, &p, 3),
            PageVerdict::Problem(PageProblem::TornPage {
                zero_from: 4096,
                ..
            })
        ));
        // 1032-byte tuples, the first at 7160: zero from 7168 keeps its first 8 bytes but
        // not its t_hoff (byte 22).
        use crate::test_pages::{heap_page_with_tuples_of, TupleSpec};
        let specs: Vec<TupleSpec> = (1..=7).map(|o| TupleSpec::inserted(3, o)).collect();
        let mut p = heap_page_with_tuples_of(&specs, 1032);
        p[7168..].fill(0);
        assert!(matches!(
            check_page(&NO_SUMS, &p, 3),
            PageVerdict::Problem(PageProblem::TornPage {
                zero_from: 7168,
                ..
            })
        ));
        // An index-shaped page (16-byte special space) whose special space is zero.
        let mut idx = page_with_zero_valued_tuple();
        idx[16..18].copy_from_slice(&8176u16.to_le_bytes());
        assert!(matches!(
            check_page(&NO_SUMS, &idx, 3),
            PageVerdict::Problem(PageProblem::TornPage { .. })
        ));
    }

    /// A page of block `at` whose stored checksum is set for block `right_for`.
    fn mismatch(page: &mut [u8], right_for: u32, at: u32) -> ChecksumPair {
        set_checksum(page, right_for);
        match check_page(&CFG, page, at) {
            PageVerdict::Problem(PageProblem::ChecksumMismatch { checksum }) => checksum,
            other => panic!("{other:?}"),
        }
    }

    /// Five in-place 64-byte tuples of block 3.
    fn in_place_page() -> Vec<u8> {
        use crate::test_pages::{heap_page_with_tuples, TupleSpec};
        let specs: Vec<TupleSpec> = (1..=5).map(|o| TupleSpec::inserted(3, o)).collect();
        heap_page_with_tuples(&specs)
    }

    #[test]
    fn a_chance_candidate_in_a_large_fork_is_not_misplaced() {
        // Damage whose stored checksum happens to be right for block 1234 of 3,000.
        let mut p = in_place_page();
        let c = mismatch(&mut p, 1234, 3);
        let ev = MisplacedEvidence::gather(&p, &c, 3, 3000, 8, |_| None);
        assert!(ev.candidates.contains(&1234));
        assert_eq!(ev.basis(), None);
        assert!((ev.expected_false_matches - 2999.0 / 65535.0).abs() < 1e-12);
        assert!(ev.mismatch_detail().is_some());
        // In a 5-block fork a chance match is below 1 in 10,000: the checksum alone suffices.
        let ev = MisplacedEvidence::gather(&p, &c, 3, 5, 8, |_| None);
        assert_eq!(ev.candidates, Vec::<u32>::new());
        let mut q = in_place_page();
        let c = mismatch(&mut q, 4, 3);
        let ev = MisplacedEvidence::gather(&q, &c, 3, 5, 8, |_| None);
        assert_eq!(ev.basis(), Some(MisplacedBasis::Checksum(4)));
    }

    #[test]
    fn tuples_naming_the_candidate_make_it_misplaced() {
        use crate::test_pages::{heap_page_with_tuples, TupleSpec};
        let specs: Vec<TupleSpec> = (1..=5).map(|o| TupleSpec::inserted(1234, o)).collect();
        let mut p = heap_page_with_tuples(&specs);
        let c = mismatch(&mut p, 1234, 3);
        let ev = MisplacedEvidence::gather(&p, &c, 3, 3000, 8, |_| None);
        assert_eq!(ev.basis(), Some(MisplacedBasis::Ctid(1234)));
        assert_eq!(ev.detail()["claims_block"], 1234);
        assert_eq!(ev.detail()["evidence"], "t_ctid");
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
