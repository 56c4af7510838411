//! Per-relation counts of a verification, as CHECKDB's "There are N rows in M pages for
//! object X": pages read and tuples seen per file, counted by each scan worker in its own
//! vector and merged once at the end, then summed per relation with the catalog's names.
//!
//! Tuples are counted on pages that passed the physical checks: for a heap, the `LP_NORMAL`
//! line pointers with storage (live or dead tuples, not redirects); for a B-tree, the items of
//! leaf pages without the high key; for a hash index, the items of bucket and overflow pages;
//! for a GiST index, the items of leaf pages. Other access methods get pages only.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::Catalog;
use crate::check::standard::PageFormat;
use crate::format::btree::{flags as bt, BtPageOpaque, P_NONE};
use crate::format::bytes::le_u16;
use crate::format::gist::flags::{F_DELETED, F_LEAF};
use crate::format::gist::GIST_OPAQUE_FLAGS;
use crate::format::hash::{page_type, HASHO_FLAG};
use crate::format::itemid::{line_pointers_into, ItemId, LpFlags};
use crate::format::page::PageHeader;
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;

/// `LH_OVERFLOW_PAGE | LH_BUCKET_PAGE` in `hasho_flag`.
const LH_TUPLE_PAGES: u16 = page_type::OVERFLOW | page_type::BUCKET;

/// Counts of one file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileTally {
    pub pages: u64,
    pub tuples: u64,
}

/// One worker's counts, per file of the plan.
#[derive(Debug, Default)]
pub struct Tally {
    files: Vec<FileTally>,
    /// Whether to count tuples (verbose runs), not only pages.
    tuples: bool,
    items: Vec<ItemId>,
}

impl Tally {
    /// Counts for `files` files when `tuples` (verbose runs, the only users of the counts);
    /// otherwise nothing is kept, so that a plan of many files costs no memory per worker.
    pub fn new(files: usize, tuples: bool) -> Tally {
        Tally {
            files: if tuples {
                vec![FileTally::default(); files]
            } else {
                Vec::new()
            },
            tuples,
            items: Vec::new(),
        }
    }

    /// Counts one block of `file`; `valid` when it passed the physical checks, `format` the
    /// page format the catalog gives the file.
    pub fn page(&mut self, file: usize, format: Option<&PageFormat>, page: &[u8], valid: bool) {
        let tuples = if valid && self.tuples {
            format.map_or(0, |f| self.tuples_on(f, page))
        } else {
            0
        };
        if let Some(t) = self.files.get_mut(file) {
            t.pages += 1;
            t.tuples += tuples;
        }
    }

    /// Adds another worker's counts.
    pub fn absorb(&mut self, other: Tally) {
        if self.files.len() < other.files.len() {
            self.files.resize(other.files.len(), FileTally::default());
        }
        for (a, b) in self.files.iter_mut().zip(other.files) {
            a.pages += b.pages;
            a.tuples += b.tuples;
        }
    }

    /// The counts per file of the plan.
    pub fn into_files(self) -> Vec<FileTally> {
        self.files
    }

    fn tuples_on(&mut self, format: &PageFormat, page: &[u8]) -> u64 {
        let Some(h) = PageHeader::parse(page) else {
            return 0;
        };
        line_pointers_into(page, &h, &mut self.items);
        let with_storage = || {
            self.items
                .iter()
                .filter(|i| i.lp_flags == LpFlags::Normal && i.lp_len > 0)
                .count() as u64
        };
        let special = h.pd_special as usize;
        match format {
            PageFormat::Heap(_) | PageFormat::Sequence(_) => with_storage(),
            PageFormat::Btree => match BtPageOpaque::parse(page, special) {
                Some(o)
                    if o.is_leaf()
                        && o.btpo_flags & (bt::BTP_DELETED | bt::BTP_HALF_DEAD | bt::BTP_META)
                            == 0 =>
                {
                    let high_key = u64::from(o.btpo_next != P_NONE);
                    (self.items.len() as u64).saturating_sub(high_key)
                }
                _ => 0,
            },
            PageFormat::Hash => match le_u16(page, special + HASHO_FLAG) {
                Some(flag) if flag & LH_TUPLE_PAGES != 0 => with_storage(),
                _ => 0,
            },
            PageFormat::Gist => match le_u16(page, special + GIST_OPAQUE_FLAGS) {
                Some(f) if f & F_LEAF != 0 && f & F_DELETED == 0 => with_storage(),
                _ => 0,
            },
            _ => 0,
        }
    }
}

/// Whether tuples are counted for a page format (otherwise the relation shows pages only).
fn counts_tuples(format: &PageFormat) -> bool {
    matches!(
        format,
        PageFormat::Heap(_)
            | PageFormat::Sequence(_)
            | PageFormat::Btree
            | PageFormat::Hash
            | PageFormat::Gist
    )
}

/// One relation's line of the verbose summary.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RelationSummary {
    pub database: Option<String>,
    pub database_oid: u32,
    pub relation: Option<String>,
    pub filenode: u32,
    pub kind: Option<String>,
    pub access_method: Option<String>,
    /// Blocks of the main fork.
    pub pages: u64,
    /// Blocks of all forks (main, free space map, visibility map, init).
    pub pages_all_forks: u64,
    /// Tuples (heap) or index entries (index) seen; `None` for access methods not counted.
    pub tuples: Option<u64>,
}

/// Sums the per-file counts into one line per relation, in file order.
pub fn relation_summaries(
    plan: &Plan,
    formats: &[Option<PageFormat>],
    tallies: &[FileTally],
    catalog: &Catalog,
) -> Vec<RelationSummary> {
    let mut out: BTreeMap<(u32, u32, u32), RelationSummary> = BTreeMap::new();
    for (i, f) in plan.dir.files.iter().enumerate() {
        let t = tallies.get(i).copied().unwrap_or_default();
        let db = f.location.db_oid();
        let node = f.name.relfilenode;
        let key = crate::catalog::file_key(f);
        let rel = catalog.relation_of(f);
        let entry = out.entry(key).or_insert_with(|| RelationSummary {
            database: catalog.databases.get(&db).map(|d| d.name.clone()),
            database_oid: db,
            relation: rel.map(|r| r.name.to_string()),
            filenode: node,
            kind: rel.map(|r| r.kind.name()),
            access_method: rel.and_then(|r| catalog.access_method(r).map(String::from)),
            pages: 0,
            pages_all_forks: 0,
            tuples: None,
        });
        entry.pages_all_forks += t.pages;
        if f.name.fork == ForkNumber::Main {
            entry.pages += t.pages;
            if formats
                .get(i)
                .and_then(Option::as_ref)
                .is_some_and(counts_tuples)
            {
                *entry.tuples.get_or_insert(0) += t.tuples;
            }
        }
    }
    out.into_values().collect()
}
