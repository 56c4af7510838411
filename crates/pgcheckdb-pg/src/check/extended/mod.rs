//! The extended level: checks that need more than one page, made without a second read of the
//! data files (DBCC CHECKDB's design). The flow is plan -> scan -> facts -> merge -> findings:
//!
//! * [`plan`] decides, from the catalog, what each file contributes: B-tree indexes (every
//!   page), heap tables (tuple liveness for uniqueness, line-pointer summaries for the index ->
//!   heap TIDs, TOAST pointers, visibility and hint bits), TOAST relations (chunks), visibility
//!   maps, and hash, GiST, SP-GiST and GIN indexes (their heap TIDs).
//! * The scan runs the indexes checked for heap -> index first ([`allindexed`]): their entries
//!   fill a filter each that the heap pages of the second phase look their tuples up in.
//! * During the block scan each worker turns every page that passed the physical and standard
//!   checks into compact facts ([`emit`], encoded by [`facts`]); a page that failed them leaves
//!   a "damaged" mark, so that nothing is concluded from it.
//! * Facts go to sorted runs kept in memory up to a budget and spilled to a temporary
//!   directory beyond it ([`spill`]).
//! * After the scan, a k-way merge of the runs yields each relation's facts, and the relations
//!   are checked in parallel: the B-tree's links, levels, downlinks and keys ([`btree`]),
//!   uniqueness joined with the heap's tuple liveness ([`unique`]), every index's heap TIDs
//!   against its table's line pointers ([`tids`]), the TOAST values of live rows against their
//!   chunks ([`toast`]), and every heap table's visibility map and commit hint bits ([`vm`]);
//!   heap -> index reports the entries its filters lacked ([`allindexed`]), and the pages of
//!   hash, GiST, SP-GiST, GIN and BRIN indexes must link up as their access method builds
//!   them ([`graphs`]).

pub mod allindexed;
pub mod btree;
pub mod catalog;
pub mod emit;
pub mod facts;
pub mod graphs;
pub mod heap;
pub mod merge;
pub mod plan;
pub mod prefetch;
pub mod report;
pub mod spill;
pub mod tids;
pub mod toast;
pub mod unique;
pub mod unique_scan;
pub mod vm;

use std::path::PathBuf;

use serde::Serialize;

pub use plan::ExtendedPlan;

/// Locks a mutex the merge threads share. A thread that panicked while holding it left
/// nothing half-written that the others could misread (each pushes whole results), so its
/// poison is ignored and the panic itself surfaces when the threads are joined.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value of a mutex the merge threads shared, poisoned or not (see [`lock`]).
pub(crate) fn unlocked<T>(m: std::sync::Mutex<T>) -> T {
    m.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// How the extended level may use memory and disk.
#[derive(Debug, Clone)]
pub struct ExtendedConfig {
    /// Budget for facts held in memory (all workers together), in bytes.
    pub memory: u64,
    /// Where spill files go (a private subdirectory is made in it and removed afterwards).
    pub temp_dir: PathBuf,
    /// List the indexes whose keys were not order-checked, with the reason.
    pub verbose: bool,
}

/// The default `--memory`: 1 GiB.
pub const DEFAULT_MEMORY: u64 = 1 << 30;

/// The smallest `--memory`: half of it goes to heap -> index, and with less than 16 kB there
/// the filter of even a small table would miss most of the entries an index lacks.
pub const MIN_MEMORY: u64 = 32 << 10;

/// A heap -> index miss chance at which a Bloom filter is no check of its index: the index is
/// counted as not checked (and still listed as weak).
pub const USELESS_MISS_CHANCE: f64 = 0.5;

/// The extended level's part of the summary.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExtendedSummary {
    /// Facts the scan emitted.
    pub facts: u64,
    /// Bytes of facts written to spill files.
    pub spilled_bytes: u64,
    /// Spill files written (all removed at the end).
    pub spill_files: u64,
    /// B-tree indexes whose structure was checked.
    pub indexes_checked: u64,
    /// Unique B-tree indexes checked for duplicates of live rows.
    pub unique_indexes_checked: u64,
    /// B-tree indexes whose keys were not compared across pages (no comparator for a key
    /// column's type, operator class or collation).
    pub keys_not_order_checked: u64,
    /// With `--verbose`: those indexes and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_order_checked: Option<Vec<NotOrderCheckedIndex>>,
    /// Seconds the merge phase took.
    pub merge_seconds: f64,
    /// B-tree indexes checked for an entry of every live heap tuple (heap -> index).
    pub all_indexed_checked: u64,
    /// B-tree indexes not checked for it (expression or partial indexes, tables out of scope,
    /// indexes with damaged pages, ...).
    pub all_indexed_not_checked: u64,
    /// Live heap tuples looked up in an index (one per tuple and index).
    pub all_indexed_tuples: u64,
    /// Live heap tuples not looked up (a key value in TOAST or not in the tuple).
    pub all_indexed_tuples_not_checked: u64,
    /// Of the indexes checked, those checked by exact per-block sums (the others by a Bloom
    /// filter, when the sums of their table did not fit in `--memory`).
    pub all_indexed_exact: u64,
    /// The highest chance, over the indexes checked, that an entry an index lacks is not
    /// noticed: its fingerprint found in a filter by chance, or 2^-64 per heap block by sums.
    pub all_indexed_miss_chance: f64,
    /// With `--verbose`: the indexes not checked for heap -> index and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_indexed_skipped: Option<Vec<NotOrderCheckedIndex>>,
    /// The indexes whose filter misses a lacking entry with a chance above 2 % (a filter
    /// fuller than planned, or shrunk by `--memory`), with that chance: the check ran
    /// weakened. Always present after a run (empty when none). An index whose chance reaches
    /// 50 % is listed here but not counted as checked: it is in `all_indexed_not_checked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_indexed_weak: Option<Vec<WeakFilter>>,
    /// Indexes (B-tree, hash, GiST, SP-GiST, GIN) whose heap TIDs were checked against
    /// their table's line pointers.
    pub tid_indexes_checked: u64,
    /// Indexes whose heap TIDs were not checked (table out of scope, invalid index, cluster
    /// not shut down cleanly); with `--verbose` listed in `tids_not_checked_indexes`.
    pub tid_indexes_not_checked: u64,
    /// Heap TIDs of index entries checked.
    pub tids_checked: u64,
    /// Heap TIDs not checked: into heap pages that failed a check or were not read, or in
    /// index entries that did not decode.
    pub tids_not_checked: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tids_not_checked_indexes: Option<Vec<NotOrderCheckedIndex>>,
    /// TOAST relations whose chunks were checked against their table's live pointers (none
    /// unless the cluster was shut down cleanly).
    pub toast_relations_checked: u64,
    /// TOAST values with a live pointer that were checked.
    pub toast_values_checked: u64,
    /// TOAST chunks that no live row points at (each relation's count is an info finding).
    pub toast_chunks_unreferenced: u64,
    /// TOAST values whose chunks were not checked for presence, because a page of their TOAST
    /// relation could not be used (its findings say why).
    pub toast_values_presence_unchecked: u64,
    /// Heap tables whose tuples' commit hint bits were checked against `pg_xact`.
    pub hint_bits_tables_checked: u64,
    /// Heap tables whose visibility map was compared with their pages.
    pub visibility_maps_checked: u64,
    /// Why no visibility map was compared (a cluster not shut down cleanly).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility_maps_not_checked: Option<String>,
    /// Hash, GiST, SP-GiST, GIN and BRIN indexes whose graph was checked across pages.
    pub index_graphs_checked: u64,
    /// Such indexes whose graph was not checked (a cluster not shut down cleanly); with
    /// `--verbose` listed in `index_graphs_not_checked_indexes`.
    pub index_graphs_not_checked: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_graphs_not_checked_indexes: Option<Vec<NotOrderCheckedIndex>>,
    /// A crashed cluster or a base backup: forks (of relations in scope) whose pages WAL
    /// replay rewrites; no cross-page fact about them is judged (docs/CHECKS.md, "The
    /// consistency rule"). Absent when the rule does not apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forks_in_flux: Option<u64>,
    /// Of those, B-tree indexes left out of every B-tree cross-page check (structure,
    /// uniqueness, heap -> index, TIDs); with `--verbose` listed in `btree_in_flux_indexes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub btree_indexes_in_flux: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub btree_in_flux_indexes: Option<Vec<String>>,
    /// Of those, tables whose visibility map was not compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility_maps_in_flux: Option<u64>,
}

/// One index whose keys were not order-checked.
#[derive(Debug, Clone, Serialize)]
pub struct NotOrderCheckedIndex {
    pub index: String,
    pub reason: String,
}

/// An index whose heap -> index filter misses more than planned.
#[derive(Debug, Clone, Serialize)]
pub struct WeakFilter {
    pub index: String,
    pub miss_chance: f64,
    /// Fingerprints inserted and the filter's bits.
    pub entries: u64,
    pub bits: u64,
}

/// Parses a size such as `64MB`, `1G`, `512k` or `1048576` (bytes); units are powers of 1024
/// (`k`, `M`, `G`, `T`, with an optional `B` or `iB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size \"{text}\": expected a number such as 64MB or 1G"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let factor: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => {
            return Err(format!(
                "invalid size \"{text}\": unknown unit (use k, MB, G or T)"
            ))
        }
    };
    let bytes = value * factor as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("invalid size \"{text}\""));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("64MB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("0").is_err());
    }
}
