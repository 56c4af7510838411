//! The re-reads of `verify --online`: every page that failed a check during the scan is read
//! again and judged by the rules of [`super::online`] (clean, gone, corrupt, or in flux), and the pages
//! whose `pd_lsn` lay beyond the end of WAL are read again against a newer end.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;
use std::time::Duration;

use serde_json::json;

use super::online::{lsn_text, page_lsn, NewerPage};
use crate::check::structure::Structure;
use crate::finding::{Finding, FindingKind, Severity};
use crate::plan::Plan;
use crate::verify::run::check_one_page;

/// Pauses between the reads of a failing page: a concurrent write has finished well before
/// the last one.
const PAUSES_MS: [u64; 3] = [10, 100, 500];

/// Kinds that come from the listing or the catalog, not from reading a block: they are judged
/// by [`super::keep_lasting`], not re-read here.
pub const LISTING_KINDS: &[FindingKind] = &[
    FindingKind::PartialBlock,
    FindingKind::SegmentGap,
    FindingKind::SegmentTooBig,
    FindingKind::ImpossibleSegment,
    FindingKind::UnexpectedFile,
    FindingKind::IrregularFile,
    FindingKind::ForeignVersionDirectory,
    FindingKind::TablespaceMissing,
    FindingKind::MissingDirectory,
    FindingKind::MissingFile,
    FindingKind::OrphanFile,
    FindingKind::CatalogUnreadable,
];

/// A page read again for the end-of-WAL check: `(file, block)`, its `pd_lsn` now, and its
/// findings when it was in flux.
type Suspect = ((usize, u64), u64, Option<Vec<Finding>>);

/// A page that still failed after the re-reads with a `pd_lsn` newer than the redo point.
#[derive(Debug, Clone)]
pub struct InFlux {
    pub file: usize,
    pub block: u64,
    pub lsn: u64,
    /// What the last read found.
    pub findings: Vec<Finding>,
}

/// The outcome of the re-reads.
#[derive(Debug, Default)]
pub struct Settled {
    /// Pages that failed, then passed.
    pub rechecked: u64,
    pub in_flux: Vec<InFlux>,
}

/// What reading a failing page again showed.
enum Verdict {
    Clean,
    /// The file or the block is no longer there (dropped, truncated).
    Gone,
    Failing {
        findings: Vec<Finding>,
        lsn: u64,
    },
}

/// The checks the re-reads run: the plan and the standard level's inputs (with facts taken
/// after the scan), if any.
pub struct Rechecker<'a> {
    pub plan: &'a Plan,
    pub structure: Option<&'a Structure<'a>>,
}

impl Rechecker<'_> {
    /// Reads one block of a plan file again; `None` when it is gone.
    fn read(&self, file: usize, block: u64) -> Option<Vec<u8>> {
        let f = &self.plan.dir.files[file];
        let bs = self.plan.control.blcksz as u64;
        let relseg = self.plan.control.relseg_size as u64;
        let handle = pgcheckdb_scan::open::open_regular(&f.path(), false).ok()?;
        let mut buf = vec![0u8; bs as usize];
        handle.read_exact_at(&mut buf, (block % relseg) * bs).ok()?;
        Some(buf)
    }

    fn judge(&self, file: usize, block: u64) -> Verdict {
        let mut last = Verdict::Gone;
        for pause in std::iter::once(0).chain(PAUSES_MS) {
            std::thread::sleep(Duration::from_millis(pause));
            let Some(page) = self.read(file, block) else {
                return Verdict::Gone;
            };
            let findings: Vec<Finding> =
                check_one_page(self.plan, self.structure, file, block, &page)
                    .into_iter()
                    .filter(|f| f.severity != Severity::Info)
                    .collect();
            if findings.is_empty() {
                return Verdict::Clean;
            }
            last = Verdict::Failing {
                findings,
                lsn: page_lsn(&page).unwrap_or(0),
            };
        }
        last
    }

    /// Takes every block finding out of `findings`, re-reads its page and puts back the
    /// findings of pages that keep failing with a `pd_lsn` at or below `redo`.
    pub fn failed_pages(&self, findings: &mut Vec<Finding>, redo: u64) -> Settled {
        let files: HashMap<String, usize> = (0..self.plan.dir.files.len())
            .map(|i| (self.plan.dir.files[i].rel_path(), i))
            .collect();
        let mut pages: BTreeMap<(usize, u64), ()> = BTreeMap::new();
        findings.retain(|f| {
            let Some(&file) = files.get(&f.file) else {
                return true;
            };
            if f.severity == Severity::Info || LISTING_KINDS.contains(&f.kind) {
                return true;
            }
            let Some(first) = f.block else { return true };
            let last = f.detail["last_block"].as_u64().unwrap_or(first).max(first);
            for b in first..=last {
                pages.insert((file, b), ());
            }
            false
        });
        let mut settled = Settled::default();
        for (file, block) in pages.into_keys() {
            self.settle(file, block, redo, findings, &mut settled);
        }
        settled
    }

    /// Re-reads the pages still in flux against a newer redo point (after a checkpoint).
    pub fn in_flux_pages(
        &self,
        in_flux: Vec<InFlux>,
        redo: u64,
        findings: &mut Vec<Finding>,
        settled: &mut Settled,
    ) {
        for p in in_flux {
            self.settle(p.file, p.block, redo, findings, settled);
        }
    }

    fn settle(
        &self,
        file: usize,
        block: u64,
        redo: u64,
        findings: &mut Vec<Finding>,
        settled: &mut Settled,
    ) {
        match self.judge(file, block) {
            Verdict::Clean => settled.rechecked += 1,
            Verdict::Gone => {}
            Verdict::Failing { findings: f, lsn } if lsn <= redo => findings.extend(f),
            Verdict::Failing { findings: f, lsn } => settled.in_flux.push(InFlux {
                file,
                block,
                lsn,
                findings: f,
            }),
        }
    }

    /// Pages whose `pd_lsn` was beyond the end of WAL `end` (noted by the scan, or in flux):
    /// each is read again, the end asked again (`end_now`), and a page still beyond it is a
    /// [`FindingKind::PageLsnInFuture`]; an in-flux page beyond it is corrupt, not in flux.
    pub fn lsn_beyond_end(
        &self,
        newer: &[NewerPage],
        settled: &mut Settled,
        end: u64,
        mut end_now: impl FnMut() -> Option<u64>,
        findings: &mut Vec<Finding>,
    ) {
        let unlogged = self.unlogged_files();
        let mut suspects: BTreeMap<(usize, u64), Option<Vec<Finding>>> = BTreeMap::new();
        for p in newer
            .iter()
            .filter(|p| p.lsn > end && !unlogged.contains(&p.file))
        {
            suspects.insert((p.file, p.block), None);
        }
        for p in settled.in_flux.iter().filter(|p| p.lsn > end) {
            suspects.insert((p.file, p.block), Some(p.findings.clone()));
        }
        if suspects.is_empty() {
            return;
        }
        let reread: Vec<Suspect> = suspects
            .into_iter()
            .filter_map(|(k, f)| Some((k, page_lsn(&self.read(k.0, k.1)?)?, f)))
            .collect();
        let Some(end) = end_now() else { return };
        for ((file, block), lsn, page_findings) in reread {
            if lsn <= end {
                continue;
            }
            findings.push(self.future_finding(file, block, lsn, end));
            if let Some(f) = page_findings {
                findings.extend(f);
                settled
                    .in_flux
                    .retain(|p| (p.file, p.block) != (file, block));
            }
        }
    }

    /// The files of unlogged relations (those with an `_init` fork): GiST pages of unlogged
    /// relations carry fake LSNs from their own counter, not WAL positions.
    fn unlogged_files(&self) -> std::collections::HashSet<usize> {
        let files = &self.plan.dir.files;
        let key = |i: usize| {
            let f = &files[i];
            let path = f.rel_path();
            let dir = path
                .rsplit_once('/')
                .map_or(String::new(), |(d, _)| d.to_string());
            (dir, f.name.relfilenode)
        };
        let with_init: std::collections::HashSet<_> = (0..files.len())
            .filter(|&i| files[i].name.fork == crate::format::relfile::ForkNumber::Init)
            .map(key)
            .collect();
        (0..files.len())
            .filter(|&i| with_init.contains(&key(i)))
            .collect()
    }

    fn future_finding(&self, file: usize, block: u64, lsn: u64, end: u64) -> Finding {
        let f = &self.plan.dir.files[file];
        let mut finding = Finding::for_file(
            FindingKind::PageLsnInFuture,
            Severity::Error,
            &f.rel_path(),
            format!(
                "page LSN {} is beyond the end of WAL {} (the server has not written that far)",
                lsn_text(lsn),
                lsn_text(end)
            ),
        )
        .with_detail(json!({"pd_lsn": lsn_text(lsn), "end_of_wal": lsn_text(end)}))
        .at_segment(f.name.segno);
        finding.fork = Some(f.name.fork);
        finding.block = Some(block);
        finding.database = Some(crate::finding::DatabaseRef {
            oid: Some(f.location.db_oid()),
            name: None,
        });
        finding.relation = Some(crate::finding::RelationRef {
            filenode: Some(f.name.relfilenode),
            ..Default::default()
        });
        finding
    }
}
