//! The content step of `checksums enable`: before a page whose header the server accepts gets a
//! checksum, it must also pass the standard level's structure checks (the same
//! [`check_page_structure`] `verify --level standard` runs, with each file's page format from
//! the offline catalog) and must not be an image of another block of its fork
//! ([`crate::check::placement`], the `t_ctid` evidence `verify` uses without data checksums). A page
//! that fails either is **rejected**: its findings are collected here, and the stamper leaves
//! it without a checksum, so a checksum never blesses a page that is already damaged.

use crate::check::placement::misplaced_by_ctid;
use crate::check::standard::{check_page_structure, Inputs, Scratch, StructureProblem};
use crate::check::structure::Structure;
use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::plan::Plan;

/// Per-worker state of the content checks.
pub(super) struct Judge<'a> {
    plan: &'a Plan,
    /// `None` with `--skip-structure-checks`: only the placement evidence is looked at.
    structure: Option<&'a Structure<'a>>,
    scratch: Scratch,
    problems: Vec<StructureProblem>,
    /// Findings of the pages judged so far (errors of rejected pages, warnings of stamped ones).
    pub(super) findings: Vec<Finding>,
}

impl<'a> Judge<'a> {
    pub(super) fn new(plan: &'a Plan, structure: Option<&'a Structure<'a>>) -> Self {
        Judge {
            plan,
            structure,
            scratch: Scratch::default(),
            problems: Vec::new(),
            findings: Vec::new(),
        }
    }

    /// Whether the page at absolute block `blkno` of plan file `file` must not be stamped.
    /// Its problems (error and warning severity) are added to [`Judge::findings`].
    pub(super) fn rejects(&mut self, file: usize, blkno: u64, page: &[u8]) -> bool {
        let damaged_structure = self.check_structure(file, blkno, page);
        let misplaced = self.check_placement(file, blkno, page);
        damaged_structure || misplaced
    }

    /// Runs the structure checks; true when one of them found an error.
    fn check_structure(&mut self, file: usize, blkno: u64, page: &[u8]) -> bool {
        let Some(structure) = self.structure else {
            return false;
        };
        let Some(fs) = structure.files.get(file).and_then(Option::as_ref) else {
            return false;
        };
        let inputs = Inputs {
            file: fs,
            facts: &structure.facts,
            clog: structure.clog,
        };
        let mut problems = std::mem::take(&mut self.problems);
        check_page_structure(page, blkno, &inputs, &mut self.scratch, &mut problems);
        let mut damaged = false;
        for p in problems.drain(..) {
            let message = match p.severity {
                Severity::Error => {
                    damaged = true;
                    format!("{}; not stamped", p.message)
                }
                Severity::Warning => format!("{}; the server accepts it, stamped", p.message),
                Severity::Info => continue,
            };
            let mut finding = file_finding(
                self.plan,
                file,
                Some(blkno),
                p.kind,
                p.severity,
                message,
                p.detail,
            );
            finding.offset = p.offset;
            finding.attnum = p.attnum;
            self.findings.push(finding);
        }
        self.problems = problems;
        damaged
    }

    /// True when the page's tuples name another block in `t_ctid` and the page at that block
    /// corroborates it: the page is an image of that block written at the wrong place.
    fn check_placement(&mut self, file: usize, blkno: u64, page: &[u8]) -> bool {
        let fork = self.plan.fork_of_file[file];
        if !self.placement_applies(file, fork) {
            return false;
        }
        let max_align = self.plan.control.max_align as usize;
        let fork_blocks = self.plan.fork_blocks[fork];
        let Some(evidence) = misplaced_by_ctid(page, blkno, fork_blocks, max_align, |b| {
            self.plan.read_fork_block(fork, b)
        }) else {
            return false;
        };
        let message = format!("{}; not stamped", evidence.message);
        let detail = evidence.detail;
        let finding = file_finding(
            self.plan,
            file,
            Some(blkno),
            FindingKind::MisplacedPage,
            Severity::Error,
            message,
            detail,
        );
        self.findings.push(finding);
        true
    }

    /// Main forks of heap relations, or of relations the catalog does not describe (the page's
    /// shape decides), as in `verify`.
    fn placement_applies(&self, file: usize, fork: usize) -> bool {
        crate::check::structure::placement_applies(self.plan, self.structure, file, fork)
    }
}

/// A finding about block `blkno` (or the whole file) of plan file `file`, with its database
/// and relation file named.
pub(super) fn file_finding(
    plan: &Plan,
    file: usize,
    blkno: Option<u64>,
    kind: FindingKind,
    severity: Severity,
    message: String,
    detail: serde_json::Value,
) -> Finding {
    let f = &plan.dir.files[file];
    let mut finding = Finding::for_file(kind, severity, &f.rel_path(), message)
        .with_detail(detail)
        .at_segment(f.name.segno);
    finding.fork = Some(f.name.fork);
    finding.block = blkno;
    finding.database = Some(DatabaseRef {
        oid: Some(f.location.db_oid()),
        name: None,
    });
    finding.relation = Some(RelationRef {
        filenode: Some(f.name.relfilenode),
        ..Default::default()
    });
    finding
}
