//! Heap -> index ("heapallindexed"): every heap tuple that must be indexed has an entry with
//! its TID and its key in each B-tree index of its table.
//!
//! Every leaf entry of such an index (each TID of a posting list too) and every HOT chain of
//! the table holding a certainly live tuple (extended/heap.rs) is fingerprinted: a 64-bit hash
//! of the normalised key ([`keys`]) and the heap TID (the chain's root). The block scan runs in
//! two phases for it (see `verify::run`), and the fingerprints meet in one of two ways, chosen
//! per table by the memory they need ([`Method`]):
//!
//! * [`Method::Exact`] — the table's heap in the first phase, its indexes in the second: per
//!   heap block, the sum of the live tuples' fingerprints less those of the entries naming
//!   them must be zero ([`exact`]); a block that is not is read again to name the tuples
//!   ([`diagnose`]). A lacking entry is missed with a chance of 2^-64.
//! * [`Method::Filter`] — when the sums do not fit: the indexes first, each entry put into a
//!   Bloom filter of the index ([`bloom`]), then each heap page looks up its live tuples'
//!   fingerprints. A finding is never a false alarm of the filter; a lacking entry is missed
//!   when its fingerprint happens to be in the filter, with the probability the summary states.
//!
//! Not checked, and counted: expression and partial indexes (their entries cannot be computed
//! offline), indexes storing another type than the column, indexes whose table is out of scope,
//! indexes with a page that failed its own checks (entries may be missing for that reason), and
//! tuples whose key value is in TOAST or missing from the tuple.

pub mod bloom;
pub mod diagnose;
pub mod exact;
pub mod keys;
pub mod probe;
pub mod report;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bloom::Bloom;
use exact::{LiveMap, Sums};
use keys::{form_of, KeyColumn, ValueForm};

use crate::catalog::attributes::Attribute;
use crate::catalog::index_meta::IndexMeta;
use crate::check::order::tuple::StoredAs;

/// Bits of filter per estimated entry when memory allows (about 1 % false positives).
pub const BITS_PER_ENTRY: u64 = 16;
/// Bytes of an index entry, at least: an 8-byte tuple header, a 4-byte key (MAXALIGNed to 16
/// with the header) and its 4-byte line pointer — the densest a leaf page is without posting
/// lists.
const MIN_ENTRY_BYTES: u64 = 20;
/// Rows per table page assumed when the table's rows were never counted (rows of about 80
/// bytes).
const ROWS_PER_PAGE_UNCOUNTED: f64 = 100.0;
/// Lacking entries reported one by one per index; beyond, the last finding gives the count.
pub const REPORTED_PER_INDEX: usize = 100;

/// A heap tuple the index lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lacking {
    pub heap_block: u32,
    pub heap_offset: u16,
    /// By sums: the index block of an entry that names the tuple with another key.
    pub other_key_at: Option<u32>,
}

/// One B-tree index checked for heap -> index.
#[derive(Debug)]
pub struct AllIndexed {
    /// `database: schema.name` of the index.
    pub name: String,
    /// The table's main fork (index into the plan's forks).
    pub heap_fork: usize,
    /// The index's main fork.
    pub index_fork: usize,
    /// Every column of an entry (key and INCLUDE columns).
    pub columns: Vec<KeyColumn>,
    /// How the index stores its columns (to walk its tuples).
    pub stored: Vec<StoredAs>,
    /// The table's columns (to deform its tuples).
    pub heap_attrs: Arc<[Attribute]>,
    /// The highest table attribute an entry needs.
    pub upto: usize,
    /// `(offset after t_hoff, length)` of the key in a heap tuple without NULLs, when the index
    /// has one fixed-width column of up to 8 bytes and every column before it in the table has
    /// a fixed width: read there without walking the tuple ([`heap_word`]).
    pub heap_word: Option<(usize, usize)>,
    pub method: Method,
    /// A page of the index failed its own checks or could not be read: entries may be lacking
    /// for that reason, so none is reported.
    pub incomplete: AtomicBool,
    pub entries: AtomicU64,
    /// TIDs of the TID check found valid on the spot: they name a live root
    /// ([`Method::Exact`] only), and need no fact.
    pub tids_confirmed: AtomicU64,
    pub tuples_checked: AtomicU64,
    pub tuples_not_checked: AtomicU64,
    /// The first [`REPORTED_PER_INDEX`] lacking entries, and how many in all.
    pub lacking: Mutex<Vec<Lacking>>,
    pub lacking_count: AtomicU64,
}

/// How the fingerprints of a table's heap and of its index meet (see the module comment).
#[derive(Debug)]
pub enum Method {
    /// Per-block sums; the live map is the table's, shared by its indexes.
    Exact {
        live: Arc<LiveMap>,
        sums: Sums,
    },
    Filter(Bloom),
}

/// The miss chance of [`Method::Exact`] for a block that lacks entries: 2^-64.
pub const EXACT_MISS_CHANCE: f64 = 1.0 / 18_446_744_073_709_551_616.0;

impl AllIndexed {
    /// The index's Bloom filter, when it has one.
    pub fn bloom(&self) -> Option<&Bloom> {
        match &self.method {
            Method::Filter(b) => Some(b),
            Method::Exact { .. } => None,
        }
    }

    /// The table's live map and the index's sums, when checked by sums.
    pub fn exact(&self) -> Option<(&LiveMap, &Sums)> {
        match &self.method {
            Method::Exact { live, sums } => Some((live, sums)),
            Method::Filter(_) => None,
        }
    }

    /// The chance that a lacking entry went unseen (for a filter, computed from its fill).
    pub fn miss_chance(&self) -> f64 {
        self.bloom()
            .map_or(EXACT_MISS_CHANCE, Bloom::false_positive_rate)
    }

    pub fn record_lacking(&self, l: Lacking) {
        if self.lacking_count.fetch_add(1, Ordering::Relaxed) < REPORTED_PER_INDEX as u64 {
            crate::check::extended::lock(&self.lacking).push(l);
        }
    }
}

/// What the plan knows of one candidate index.
pub struct Candidate<'a> {
    pub name: String,
    pub index_fork: usize,
    /// The index's table has another table access method than `heap`.
    pub other_table_am: bool,
    pub heap_fork: Option<usize>,
    pub meta: Option<&'a IndexMeta>,
    pub index_attrs: Option<&'a Arc<[Attribute]>>,
    pub heap_attrs: Option<&'a Arc<[Attribute]>>,
    pub index_blocks: u64,
    pub heap_blocks: u64,
    /// The table's row statistics.
    pub rows: RowStats,
}

/// The entries to size an index's filter for: what an index of `blocks` blocks of `blcksz`
/// bytes holds without posting lists, or, when larger, the table's rows as the planner
/// estimates them — `reltuples` per `relpages` (counted by the last VACUUM, ANALYZE or CREATE
/// INDEX) times the table's `heap_blocks` now — with a quarter more for dead versions. Posting
/// lists hold more entries per page; an underestimate only makes the filter fuller than
/// planned (the summary states the chance of a miss from the filter's actual fill).
pub fn estimated_entries(blocks: u64, blcksz: u64, rows: &RowStats) -> u64 {
    let by_size = blocks.max(1) * (blcksz / MIN_ENTRY_BYTES);
    let density = if rows.reltuples > 0.0 && rows.relpages > 0 {
        f64::from(rows.reltuples) / f64::from(rows.relpages)
    } else {
        ROWS_PER_PAGE_UNCOUNTED
    };
    let by_rows = (density * rows.heap_blocks.max(u64::from(rows.relpages)) as f64 * 1.25) as u64;
    by_size.max(by_rows)
}

/// The table's size and row count, for [`estimated_entries`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RowStats {
    pub relpages: u32,
    pub reltuples: f32,
    /// Blocks of the table's main fork now.
    pub heap_blocks: u64,
}

/// How an index is planned to be checked: by sums with the table's live map, or with a filter
/// of this many bits.
pub enum Planned {
    Exact(Arc<LiveMap>),
    Filter(u64),
}

/// The heap -> index check of `c`, or why it is not checked.
pub fn plan_index(c: &Candidate<'_>, planned: Planned) -> Result<AllIndexed, &'static str> {
    if c.other_table_am {
        return Err(crate::check::extended::catalog::OTHER_TABLE_AM);
    }
    let heap_fork = c.heap_fork.ok_or("its table is not in scope")?;
    let meta = c.meta.ok_or("no pg_index row")?;
    if meta.has_expressions_or_predicate {
        return Err("expression or partial index");
    }
    let index_attrs = c.index_attrs.ok_or("no index columns in pg_attribute")?;
    let heap_attrs = c.heap_attrs.ok_or("no table columns in pg_attribute")?;
    let natts = usize::try_from(meta.indnatts).map_err(|_| "no pg_index row")?;
    if natts == 0 || meta.indkey.len() < natts || index_attrs.len() < natts {
        return Err("no pg_index row");
    }
    let mut columns = Vec::with_capacity(natts);
    let mut stored = Vec::with_capacity(natts);
    for (i, index_attr) in index_attrs.iter().take(natts).enumerate() {
        let heap_attnum = usize::try_from(meta.indkey[i])
            .ok()
            .filter(|&n| n >= 1)
            .ok_or("expression or system column")?;
        let heap_attr = heap_attrs
            .get(heap_attnum - 1)
            .filter(|a| !a.dropped)
            .ok_or("a key column is not in pg_attribute")?;
        let form = form_of(heap_attr.attlen, index_attr.attlen)
            .ok_or("the index stores another type than the column")?;
        columns.push(KeyColumn { heap_attnum, form });
        stored.push(StoredAs {
            attlen: index_attr.attlen,
            align: index_attr.align,
        });
    }
    let upto = columns.iter().map(|k| k.heap_attnum).max().unwrap_or(0);
    let heap_word = heap_word(&columns, heap_attrs);
    Ok(AllIndexed {
        name: c.name.clone(),
        heap_fork,
        index_fork: c.index_fork,
        columns,
        stored,
        heap_attrs: heap_attrs.clone(),
        upto,
        heap_word,
        method: match planned {
            Planned::Exact(live) => Method::Exact {
                live,
                sums: Sums::new(c.heap_blocks),
            },
            Planned::Filter(bits) => Method::Filter(Bloom::with_bits(bits, c.heap_blocks)),
        },
        incomplete: AtomicBool::new(false),
        entries: AtomicU64::new(0),
        tids_confirmed: AtomicU64::new(0),
        tuples_checked: AtomicU64::new(0),
        tuples_not_checked: AtomicU64::new(0),
        lacking: Mutex::new(Vec::new()),
        lacking_count: AtomicU64::new(0),
    })
}

/// Where the one key column of `columns` lies in a heap tuple without NULLs, `(offset after
/// t_hoff, length)`: the fixed offset the server caches as `attcacheoff`, each column before it
/// of fixed width at its alignment. `None` unless the key is one fixed-width value of up to 8
/// bytes after fixed-width columns only.
pub fn heap_word(columns: &[KeyColumn], heap_attrs: &[Attribute]) -> Option<(usize, usize)> {
    let [KeyColumn {
        heap_attnum,
        form: ValueForm::Fixed,
    }] = columns
    else {
        return None;
    };
    let (before, key) = (
        heap_attrs.get(..heap_attnum - 1)?,
        heap_attrs.get(heap_attnum - 1)?,
    );
    let len = usize::try_from(key.attlen)
        .ok()
        .filter(|n| (1..=8).contains(n))?;
    let mut off = 0;
    for a in before {
        let width = usize::try_from(a.attlen).ok().filter(|&n| n > 0)?;
        off = crate::format::bytes::align_up(off, a.align) + width;
    }
    Some((crate::format::bytes::align_up(off, key.align), len))
}

/// Filter bits per index: [`BITS_PER_ENTRY`] per estimated entry, scaled down evenly when the
/// total would pass `budget_bytes`.
pub fn filter_bits(estimates: &[u64], budget_bytes: u64) -> Vec<u64> {
    let wanted: u64 = estimates.iter().map(|e| e * BITS_PER_ENTRY).sum();
    let budget_bits = budget_bytes.saturating_mul(8);
    estimates
        .iter()
        .map(|e| {
            let bits = e * BITS_PER_ENTRY;
            if wanted <= budget_bits {
                bits
            } else {
                (bits as f64 * budget_bits as f64 / wanted as f64) as u64
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_shrink_evenly_to_the_budget() {
        assert_eq!(filter_bits(&[100, 300], 1 << 20), vec![1600, 4800]);
        // 40,000 bits wanted, 2,496 allowed: each gets its share, the sum stays in budget.
        assert_eq!(filter_bits(&[1000, 3000], 312), vec![624, 1872]);
        let never = RowStats {
            relpages: 0,
            reltuples: -1.0,
            heap_blocks: 100,
        };
        assert_eq!(estimated_entries(10, 8192, &never), 12_500);
        // 200 rows per page counted on 100 pages; the table has 150 pages now.
        let counted = RowStats {
            relpages: 100,
            reltuples: 20_000.0,
            heap_blocks: 150,
        };
        assert_eq!(estimated_entries(10, 8192, &counted), 37_500);
    }
}
