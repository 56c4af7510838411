//! The page step of `checksums enable`: what to do with each block (leave, stamp, report as
//! damaged) and the per-worker scan visitor that stamps, counts and collects findings.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;

use serde_json::json;

use pgcheckdb_scan::{DirtyRange, Visitor};

use super::judge::{file_finding, Judge};
use super::sync::start_range_writeback;
use crate::check::physical::{check_page, PageCheckConfig, PageProblem, PageVerdict};
use crate::check::structure::Structure;
use crate::finding::{Finding, FindingKind, Severity};
use crate::format::bytes::{le_u16, put_le_u16};
use crate::format::checksum::pg_checksum_page;
use crate::format::page::PD_CHECKSUM_OFFSET;
use crate::format::page::SECTOR_SIZE;
use crate::plan::Plan;

/// The decision for one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockAction {
    /// All zero: left alone.
    New,
    /// The stored checksum is already right.
    AlreadyValid { warning: Option<PageProblem> },
    /// `pd_checksum` must be set to this value.
    Stamp {
        checksum: u16,
        warning: Option<PageProblem>,
    },
    /// The server rejects this page whatever its checksum: report, never stamp.
    Damaged(PageProblem),
    /// The server accepts the header, but the page fails the standard level's structure checks
    /// or is an image of another block ([`super::judge`]): report, never stamp.
    Rejected,
}

/// Decides what `enable` does with one block at absolute block number `blkno`.
pub fn classify_block(page: &[u8], blkno: u32, blcksz: usize, max_align: usize) -> BlockAction {
    let cfg = PageCheckConfig {
        blcksz,
        max_align,
        checksums: false,
    };
    let warning = match check_page(&cfg, page, blkno) {
        PageVerdict::New => return BlockAction::New,
        PageVerdict::Valid => None,
        PageVerdict::Problem(
            p @ (PageProblem::NonzeroNewPage { .. } | PageProblem::InvalidHeader { .. }),
        ) => return BlockAction::Damaged(p),
        PageVerdict::Problem(p) => Some(p),
    };
    let checksum = pg_checksum_page(page, blkno);
    // A page too short for its header was refused above: `pd_checksum` is there.
    let stored = le_u16(page, PD_CHECKSUM_OFFSET);
    if stored == Some(checksum) {
        BlockAction::AlreadyValid { warning }
    } else {
        BlockAction::Stamp { checksum, warning }
    }
}

/// Stamps every sane page of `data` (whole blocks, the first at absolute block `first_blkno`)
/// and returns the byte ranges that changed, adjacent blocks coalesced into one range.
pub fn stamp_chunk(
    data: &mut [u8],
    first_blkno: u64,
    blcksz: usize,
    max_align: usize,
    on_block: impl FnMut(u64, &[u8], &BlockAction),
) -> Vec<DirtyRange> {
    stamp_chunk_judged(data, first_blkno, blcksz, max_align, |_, _| false, on_block)
}

/// [`stamp_chunk`] with a content check: a page the header checks would stamp (or find already
/// stamped) is [`BlockAction::Rejected`] when `rejects(blkno, page)` says so, and left as it is.
pub fn stamp_chunk_judged(
    data: &mut [u8],
    first_blkno: u64,
    blcksz: usize,
    max_align: usize,
    mut rejects: impl FnMut(u64, &[u8]) -> bool,
    mut on_block: impl FnMut(u64, &[u8], &BlockAction),
) -> Vec<DirtyRange> {
    let mut dirty: Vec<DirtyRange> = Vec::new();
    for (i, page) in data.chunks_exact_mut(blcksz).enumerate() {
        let blkno = first_blkno + i as u64;
        let mut action = classify_block(page, blkno as u32, blcksz, max_align);
        if matches!(
            action,
            BlockAction::Stamp { .. } | BlockAction::AlreadyValid { .. }
        ) && rejects(blkno, page)
        {
            action = BlockAction::Rejected;
        }
        if let BlockAction::Stamp { checksum, .. } = action {
            // Whole blocks of `blcksz`: `pd_checksum` is always inside.
            let _ = put_le_u16(page, PD_CHECKSUM_OFFSET, checksum);
            let start = i * blcksz;
            match dirty.last_mut() {
                Some(last) if last.end == start => last.end += blcksz,
                _ => dirty.push(start..start + blcksz),
            }
        }
        on_block(blkno, page, &action);
    }
    dirty
}

/// Per-worker state of the enable scan.
pub(super) struct Stamper<'a> {
    pub(super) plan: &'a Plan,
    /// The content checks of pages the header checks accept.
    judge: Judge<'a>,
    /// Actions of the current chunk, noted after it was stamped.
    actions: Vec<(u64, BlockAction)>,
    pub(super) write: bool,
    pub(super) findings: Vec<Finding>,
    pub(super) tool_errors: Vec<String>,
    pub(super) blocks: u64,
    pub(super) new_pages: u64,
    pub(super) rewritten: u64,
    pub(super) already_valid: u64,
    pub(super) damaged: u64,
    pub(super) warnings: u64,
    pub(super) files_written: BTreeSet<usize>,
    /// Test-only pause before each chunk (see `test_unit_delay`).
    delay: Option<std::time::Duration>,
}

impl<'a> Stamper<'a> {
    pub(super) fn new(plan: &'a Plan, structure: Option<&'a Structure<'a>>, write: bool) -> Self {
        Stamper {
            plan,
            judge: Judge::new(plan, structure),
            actions: Vec::new(),
            write,
            findings: Vec::new(),
            tool_errors: Vec::new(),
            blocks: 0,
            new_pages: 0,
            rewritten: 0,
            already_valid: 0,
            damaged: 0,
            warnings: 0,
            files_written: BTreeSet::new(),
            delay: None,
        }
    }

    pub(super) fn with_delay(mut self, delay: Option<std::time::Duration>) -> Self {
        self.delay = delay;
        self
    }

    pub(super) fn absorb(&mut self, o: Stamper<'a>) {
        self.findings.extend(o.findings);
        self.findings.extend(o.judge.findings);
        self.tool_errors.extend(o.tool_errors);
        self.blocks += o.blocks;
        self.new_pages += o.new_pages;
        self.rewritten += o.rewritten;
        self.already_valid += o.already_valid;
        self.damaged += o.damaged;
        self.warnings += o.warnings;
        self.files_written.extend(o.files_written);
    }

    fn note(&mut self, file: usize, blkno: u64, action: &BlockAction) {
        self.blocks += 1;
        let warning = match action {
            BlockAction::New => {
                self.new_pages += 1;
                None
            }
            BlockAction::AlreadyValid { warning } => {
                self.already_valid += 1;
                warning.as_ref()
            }
            BlockAction::Stamp { warning, .. } => {
                self.rewritten += 1;
                warning.as_ref()
            }
            BlockAction::Damaged(problem) => {
                self.damaged += 1;
                let f = self.block_finding(file, blkno, problem, Severity::Error);
                self.findings.push(f);
                None
            }
            // The judge holds the findings.
            BlockAction::Rejected => {
                self.damaged += 1;
                None
            }
        };
        if let Some(problem) = warning {
            self.warnings += 1;
            let f = self.block_finding(file, blkno, problem, Severity::Warning);
            self.findings.push(f);
        }
    }

    fn block_finding(
        &self,
        file: usize,
        blkno: u64,
        problem: &PageProblem,
        severity: Severity,
    ) -> Finding {
        let (kind, message, detail) = match problem {
            PageProblem::NonzeroNewPage { zero_prefix } => (
                FindingKind::NonzeroNewPage,
                format!("pd_upper is 0 but the page is not all zero (first non-zero byte at offset {zero_prefix}); not stamped"),
                json!({"zero_prefix": zero_prefix, "sector_aligned": *zero_prefix > 0 && zero_prefix % SECTOR_SIZE == 0}),
            ),
            PageProblem::InvalidHeader { rule, text, .. } => (
                FindingKind::InvalidHeader,
                format!("invalid page header: {text}; not stamped"),
                json!({"rule": rule.name()}),
            ),
            PageProblem::TornPage { zero_from, pd_upper, .. } => (
                FindingKind::TornPage,
                format!("page may be torn: zero from byte {zero_from} to the end, but tuple data starts at pd_upper {pd_upper}; the server accepts it, stamped"),
                json!({"zero_from": zero_from, "pd_upper": pd_upper}),
            ),
            PageProblem::SuspiciousHeader { rule, text } => (
                FindingKind::SuspiciousHeader,
                format!("unusual page header: {text}; the server accepts it, stamped"),
                json!({"rule": rule.name()}),
            ),
            PageProblem::ChecksumMismatch { checksum } => (
                FindingKind::ChecksumMismatch,
                format!("checksum {} expected {}", checksum.calculated, checksum.stored),
                json!({}),
            ),
        };
        file_finding(
            self.plan,
            file,
            Some(blkno),
            kind,
            severity,
            message,
            detail,
        )
    }
}

impl Visitor for Stamper<'_> {
    fn chunk(&mut self, file: usize, offset: u64, data: &mut [u8]) -> Vec<DirtyRange> {
        if let Some(d) = self.delay {
            std::thread::sleep(d);
        }
        let control = &self.plan.control;
        let (bs, align) = (control.blcksz as usize, control.max_align as usize);
        let first = self
            .plan
            .absolute_block(&self.plan.dir.files[file], offset / bs as u64);
        let judge = &mut self.judge;
        let actions = &mut self.actions;
        let dirty = stamp_chunk_judged(
            data,
            first,
            bs,
            align,
            |blkno, page| judge.rejects(file, blkno, page),
            |blkno, _, action| actions.push((blkno, action.clone())),
        );
        let mut actions = std::mem::take(&mut self.actions);
        for (blkno, action) in actions.drain(..) {
            self.note(file, blkno, &action);
        }
        self.actions = actions;
        if !self.write {
            return Vec::new();
        }
        if !dirty.is_empty() {
            self.files_written.insert(file);
        }
        dirty
    }

    fn read_failed(&mut self, file: usize, offset: u64, err: &io::Error) {
        let f = &self.plan.dir.files[file];
        self.tool_errors.push(format!(
            "could not read \"{}\" at offset {offset}: {err}",
            f.rel_path()
        ));
    }

    fn open_failed(&mut self, file: usize, err: &io::Error) {
        let f = &self.plan.dir.files[file];
        self.tool_errors
            .push(format!("could not open \"{}\": {err}", f.rel_path()));
    }

    fn short_file(&mut self, file: usize, offset: u64) {
        let f = &self.plan.dir.files[file];
        self.tool_errors.push(format!(
            "file \"{}\" shrank to {offset} bytes during the run",
            f.rel_path()
        ));
    }

    fn written(&mut self, _file: usize, handle: &File, offset: u64, len: u64) {
        // Start writing the range to disk now, so that the fsync at the end has little left
        // to wait for and the disk works while the CPUs checksum.
        start_range_writeback(handle, offset, len);
    }

    fn write_failed(&mut self, file: usize, offset: u64, err: &io::Error) {
        let f = &self.plan.dir.files[file];
        self.tool_errors.push(format!(
            "could not write \"{}\" at offset {offset}: {err}",
            f.rel_path()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::physical::ChecksumPair;
    use crate::format::page::DEFAULT_BLCKSZ as BS;

    /// A heap-like page with tuple bytes at the end and `pd_checksum` zero (written with checksums off).
    fn heap_page(seed: u8) -> Vec<u8> {
        crate::test_pages::heap_like_page(seed)
    }

    fn stored(page: &[u8]) -> u16 {
        u16::from_le_bytes([page[8], page[9]])
    }

    #[test]
    fn new_page_is_left_alone() {
        assert_eq!(classify_block(&[0u8; BS], 7, BS, 8), BlockAction::New);
    }

    #[test]
    fn sane_page_gets_the_checksum_for_its_absolute_block() {
        let p = heap_page(0);
        let want = pg_checksum_page(&p, 131077);
        assert_eq!(
            classify_block(&p, 131077, BS, 8),
            BlockAction::Stamp {
                checksum: want,
                warning: None
            }
        );
    }

    #[test]
    fn page_with_right_checksum_is_not_rewritten() {
        let mut p = heap_page(0);
        let c = pg_checksum_page(&p, 3);
        p[8..10].copy_from_slice(&c.to_le_bytes());
        assert_eq!(
            classify_block(&p, 3, BS, 8),
            BlockAction::AlreadyValid { warning: None }
        );
        // ...but the same page at another block number needs a new one.
        assert!(matches!(
            classify_block(&p, 4, BS, 8),
            BlockAction::Stamp { .. }
        ));
    }

    #[test]
    fn stale_checksum_from_a_page_modified_later_is_replaced() {
        let mut p = heap_page(0);
        let c = pg_checksum_page(&p, 3);
        p[8..10].copy_from_slice(&c.to_le_bytes());
        p[5000] ^= 0xFF; // the server changed the page while checksums were off
        let BlockAction::Stamp { checksum, .. } = classify_block(&p, 3, BS, 8) else {
            panic!("expected stamp")
        };
        assert_ne!(checksum, c);
    }

    #[test]
    fn nonzero_page_with_pd_upper_zero_is_damage() {
        let mut p = vec![0u8; BS];
        p[100] = 1;
        assert_eq!(
            classify_block(&p, 0, BS, 8),
            BlockAction::Damaged(PageProblem::NonzeroNewPage { zero_prefix: 100 })
        );
    }

    #[test]
    fn bad_header_is_damage_and_never_stamped() {
        let mut p = heap_page(0);
        p[12..14].copy_from_slice(&4000u16.to_le_bytes()); // pd_lower > pd_upper
        let before = p.clone();
        assert!(matches!(
            classify_block(&p, 0, BS, 8),
            BlockAction::Damaged(PageProblem::InvalidHeader { .. })
        ));
        let dirty = stamp_chunk(&mut p, 0, BS, 8, |_, _, _| {});
        assert!(dirty.is_empty());
        assert_eq!(p, before);
        for (off, val) in [(10usize, 0x0100u16), (16, 8193), (16, 8180)] {
            let mut q = heap_page(0);
            q[off..off + 2].copy_from_slice(&val.to_le_bytes());
            assert!(
                matches!(
                    classify_block(&q, 0, BS, 8),
                    BlockAction::Damaged(PageProblem::InvalidHeader { .. })
                ),
                "{off} {val}"
            );
        }
    }

    #[test]
    fn torn_looking_page_is_stamped_with_a_warning() {
        let mut p = heap_page(0);
        p[4096..].fill(0);
        match classify_block(&p, 1, BS, 8) {
            BlockAction::Stamp {
                warning:
                    Some(PageProblem::TornPage {
                        zero_from: 4096, ..
                    }),
                ..
            } => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn adjacent_dirty_blocks_coalesce_into_one_range() {
        // Blocks: stamp, stamp, new, stamp, already valid, damaged, stamp, stamp, stamp.
        let mut pages: Vec<Vec<u8>> = vec![heap_page(1), heap_page(2), vec![0u8; BS], heap_page(3)];
        let mut valid = heap_page(4);
        let c = pg_checksum_page(&valid, 104);
        valid[8..10].copy_from_slice(&c.to_le_bytes());
        pages.push(valid);
        let mut damaged = vec![0u8; BS];
        damaged[9] = 1;
        pages.push(damaged);
        pages.extend([heap_page(5), heap_page(6), heap_page(7)]);
        let mut data: Vec<u8> = pages.concat();
        let original = data.clone();
        let mut seen = Vec::new();
        let dirty = stamp_chunk(&mut data, 100, BS, 8, |b, _, a| {
            seen.push((b, std::mem::discriminant(a)))
        });
        assert_eq!(dirty, vec![0..2 * BS, 3 * BS..4 * BS, 6 * BS..9 * BS]);
        assert_eq!(seen.len(), 9);
        assert_eq!(seen[0].0, 100);
        for (i, page) in data.chunks_exact(BS).enumerate() {
            let blk = 100 + i as u32;
            match i {
                2 | 5 => assert_eq!(
                    page,
                    &original[i * BS..(i + 1) * BS],
                    "block {i} must be untouched"
                ),
                _ => {
                    assert_eq!(stored(page), pg_checksum_page(page, blk), "block {i}");
                    // Only pd_checksum changed.
                    assert_eq!(page[..8], original[i * BS..i * BS + 8]);
                    assert_eq!(page[10..], original[i * BS + 10..(i + 1) * BS]);
                }
            }
        }
        // A second pass finds nothing to do: a rerun resumes for the price of a read.
        assert!(stamp_chunk(&mut data, 100, BS, 8, |_, _, _| {}).is_empty());
    }

    #[test]
    fn stamped_page_passes_the_physical_check_with_checksums_on() {
        let mut p = heap_page(9);
        stamp_chunk(&mut p, 42, BS, 8, |_, _, _| {});
        let cfg = PageCheckConfig {
            blcksz: BS,
            max_align: 8,
            checksums: true,
        };
        assert_eq!(check_page(&cfg, &p, 42), PageVerdict::Valid);
        let pair = ChecksumPair {
            stored: stored(&p),
            calculated: pg_checksum_page(&p, 42),
            raw: 0,
        };
        assert_eq!(pair.stored, pair.calculated);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_pages_never_panic_and_only_pd_checksum_changes(bytes in proptest::collection::vec(proptest::num::u8::ANY, BS), blk in 0u64..u32::MAX as u64) {
            let mut page = bytes.clone();
            let dirty = stamp_chunk(&mut page, blk, BS, 8, |_, _, _| {});
            proptest::prop_assert_eq!(&page[..8], &bytes[..8]);
            proptest::prop_assert_eq!(&page[10..], &bytes[10..]);
            if dirty.is_empty() {
                proptest::prop_assert_eq!(&page, &bytes);
            }
        }
    }
}
