//! What the structure checks need, gathered once before the scan: the page format each file
//! must hold (from the catalog), the cluster facts (xid bounds, commit log, collations), the
//! B-tree key orders and the extended level's plan; and the relations only the physical
//! checks cover.

use serde::Serialize;

use crate::catalog::xact::CommitLog;
use crate::catalog::Catalog;
use crate::check::order::plan::BtreeOrders;
use crate::check::order::NotOrderChecked;
use crate::check::standard::{ClusterFacts, FileStructure, PageFormat};
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;

/// A relation with storage that only the physical checks covered: pgcheckdb knows no page
/// format for its access method (an index of `bloom`, `rum` or any other extension, a table
/// of another table access method).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotStructureChecked {
    /// Database name (its oid when `pg_database` did not name it).
    pub database: String,
    /// `schema.name`.
    pub relation: String,
    /// `table`, `index`, `toast_table`, `materialized_view`.
    pub kind: String,
    /// The access method's name, when `pg_am` gave one.
    pub access_method: Option<String>,
    pub reason: String,
}

impl NotStructureChecked {
    /// `rel` (of database `db_oid`), when it has storage but no page format pgcheckdb checks.
    fn of(catalog: &Catalog, db_oid: u32, rel: &crate::catalog::RelationInfo) -> Option<Self> {
        if !rel.kind.has_storage() || PageFormat::for_relation(rel, ForkNumber::Main).is_some() {
            return None;
        }
        let am = catalog.access_method(rel).map(str::to_string);
        let what = match rel.kind {
            crate::catalog::RelKind::Index => "index access method",
            _ => "table access method",
        };
        let reason = match &am {
            Some(name) => format!("{what} \"{name}\" unknown to pgcheckdb"),
            None => format!("{what} with oid {} unknown to pgcheckdb", rel.relam),
        };
        let database = match catalog.databases.get(&db_oid) {
            Some(db) => db.name.clone(),
            None if db_oid == 0 => "(shared catalogs)".into(),
            None => format!("database {db_oid}"),
        };
        Some(NotStructureChecked {
            database,
            relation: rel.name.to_string(),
            kind: rel.kind.name(),
            access_method: am,
            reason,
        })
    }
}

/// The relations of the plan's main forks that only the physical checks cover, sorted by
/// database and name.
fn not_structure_checked(plan: &Plan, catalog: &Catalog) -> Vec<NotStructureChecked> {
    let mut out: Vec<NotStructureChecked> = plan
        .forks
        .iter()
        .filter(|fork| fork.fork == ForkNumber::Main)
        .filter_map(|fork| {
            let f = plan.dir.files.get(fork.segments().start)?;
            let rel = catalog.relation_of(f)?;
            NotStructureChecked::of(catalog, f.location.db_oid(), rel)
        })
        .collect();
    out.sort_by(|a, b| (&a.database, &a.relation).cmp(&(&b.database, &b.relation)));
    out
}

/// Whether the `t_ctid` placement evidence applies to `file` (of fork `fork`): main forks of
/// heap relations, or of relations the catalog does not describe (the page's shape decides).
pub(crate) fn placement_applies(
    plan: &Plan,
    structure: Option<&Structure<'_>>,
    file: usize,
    fork: usize,
) -> bool {
    if plan.forks[fork].fork != crate::format::relfile::ForkNumber::Main {
        return false;
    }
    let format = structure
        .and_then(|s| s.files.get(file))
        .and_then(Option::as_ref)
        .map(|fs| &fs.format);
    matches!(format, None | Some(PageFormat::Heap(_)))
}

/// Inputs of the standard level: what each file must hold, and the cluster facts.
pub struct Structure<'c> {
    /// Per file of the plan: its page format, or `None` when it has no structure checks.
    pub files: Vec<Option<FileStructure>>,
    pub facts: ClusterFacts,
    pub clog: &'c CommitLog,
    /// B-tree indexes whose keys are not order-checked: `(schema.name, database oid, why)`.
    pub not_order_checked: Vec<(String, u32, NotOrderChecked)>,
    /// The extended level's plan: its facts are emitted during the scan and merged after it.
    pub extended: Option<&'c crate::check::extended::ExtendedPlan>,
    /// Relations in scope with storage that only the physical checks cover.
    pub not_structure_checked: Vec<NotStructureChecked>,
}

impl<'c> Structure<'c> {
    /// Derives every file's page format from the catalog. A large plan is cut, at fork
    /// boundaries, into parts that threads take one after another (80,000 files: 50 ms on one
    /// core, before the scan can start; B-tree indexes cost more than the rest, so the parts
    /// are many and small for the threads to end together).
    pub fn from_catalog(plan: &Plan, catalog: &'c Catalog) -> Structure<'c> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(plan.forks.len() / PARALLEL_STRUCTURE_MIN_FORKS + 1);
        let (files, not_order_checked) = match threads {
            1 => file_structures(plan, catalog, 0..plan.forks.len()),
            _ => file_structures_in_parallel(plan, catalog, threads),
        };
        let facts = crate::check::standard::bounds::cluster_facts(&plan.control, &plan.datadir);
        Structure {
            files,
            facts,
            clog: &catalog.clog,
            not_order_checked,
            extended: None,
            not_structure_checked: not_structure_checked(plan, catalog),
        }
    }
}

/// [`file_structures`] of every fork, on `threads` threads.
fn file_structures_in_parallel(plan: &Plan, catalog: &Catalog, threads: usize) -> StructurePart {
    let ranges: Vec<_> = fork_ranges(plan.forks.len(), threads * PARTS_PER_THREAD).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut parts: Vec<(usize, StructurePart)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(forks) = ranges.get(i) else {
                            return done;
                        };
                        done.push((i, file_structures(plan, catalog, forks.clone())));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    parts.sort_unstable_by_key(|(i, _)| *i);
    let mut files = Vec::with_capacity(plan.dir.files.len());
    let mut not_order_checked = Vec::new();
    for (_, (part_files, skipped)) in parts {
        files.extend(part_files);
        not_order_checked.extend(skipped);
    }
    (files, not_order_checked)
}

/// A B-tree index whose keys are not order-checked: `(schema.name, database oid, why)`.
type NotOrderCheckedIndex = (String, u32, NotOrderChecked);

/// Forks below which one thread derives the structure of every file.
const PARALLEL_STRUCTURE_MIN_FORKS: usize = 8192;

/// Parts of the plan per thread deriving the structure.
const PARTS_PER_THREAD: usize = 16;

/// The structure of the files of some forks, and the indexes among them not order-checked.
type StructurePart = (Vec<Option<FileStructure>>, Vec<NotOrderCheckedIndex>);

/// `forks` fork indexes cut into `parts` consecutive ranges, in order.
fn fork_ranges(forks: usize, parts: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let parts = parts.max(1);
    (0..parts).map(move |p| forks * p / parts..forks * (p + 1) / parts)
}

/// The structure of every file of the forks `forks`, in file order, and the B-tree indexes
/// among them whose keys are not order-checked.
fn file_structures(plan: &Plan, catalog: &Catalog, forks: std::ops::Range<usize>) -> StructurePart {
    let mut orders = BtreeOrders::new(plan, catalog);
    let files = plan.forks[forks]
        .iter()
        .flat_map(|fork| fork.segments())
        .map(|i| {
            let f = &plan.dir.files[i];
            let rel = catalog.relation_of(f)?;
            let format = PageFormat::for_relation(rel, f.name.fork)?;
            let btree_order = match format {
                PageFormat::Btree if f.name.fork == ForkNumber::Main => {
                    orders.of(plan.fork_of_file[i], f.location.db_oid(), rel)
                }
                _ => None,
            };
            Some(FileStructure {
                format,
                fork_blocks: plan.fork_blocks[plan.fork_of_file[i]],
                btree_order,
            })
        })
        .collect();
    (files, orders.skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_ranges_cover_every_fork_once_in_order() {
        for (forks, parts) in [(0, 1), (5, 32), (8192, 32), (80_950, 32), (7, 3), (1, 1)] {
            let ranges: Vec<_> = fork_ranges(forks, parts).collect();
            assert_eq!(ranges.len(), parts);
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(forks));
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            let longest = ranges.iter().map(|r| r.len()).max().unwrap_or(0);
            assert!(longest <= forks.div_ceil(parts), "{forks} forks in {parts}");
        }
    }
}
