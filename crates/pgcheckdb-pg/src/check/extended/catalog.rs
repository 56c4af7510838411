//! The `pg_index` columns the extended level needs (`indrelid`, `indnatts`, `indnkeyatts`,
//! `indisunique`, `indnullsnotdistinct`, `indisvalid`), read from each database's `pg_index`
//! file with the catalog reader's visibility rules. Their offsets are fixed: the row starts
//! with fixed-width columns in every version 14-18 (`indnullsnotdistinct` appeared in 15).

use std::collections::HashMap;
use std::path::Path;

use crate::catalog::heapscan::{for_each_page, visible_rows_of_page, ScanTrouble};
use crate::catalog::layouts::pg_index;
use crate::catalog::{Catalog, FileKey};
use crate::format::bytes::{le_u16, le_u32};
use crate::format::oids;
use crate::format::oids::am_oid;

/// One `pg_index` row, as far as the extended level uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRow {
    pub indexrelid: u32,
    pub indrelid: u32,
    pub indnatts: u16,
    pub indnkeyatts: u16,
    pub indisunique: bool,
    pub indnullsnotdistinct: bool,
    pub indisvalid: bool,
}

/// Decodes the fixed head of a `pg_index` row of PostgreSQL `major`.
pub fn parse_index_row(d: &[u8], major: u32) -> Option<IndexRow> {
    let bool_at = |o: usize| d.get(o).map(|&b| b != 0);
    let (nnd, valid) = if major >= 15 {
        (
            bool_at(pg_index::INDNULLSNOTDISTINCT)?,
            pg_index::INDISVALID_15,
        )
    } else {
        (false, pg_index::INDISVALID_14)
    };
    Some(IndexRow {
        indexrelid: le_u32(d, pg_index::INDEXRELID)?,
        indrelid: le_u32(d, pg_index::INDRELID)?,
        indnatts: le_u16(d, pg_index::INDNATTS)?,
        indnkeyatts: le_u16(d, pg_index::INDNKEYATTS)?,
        indisunique: bool_at(pg_index::INDISUNIQUE)?,
        indnullsnotdistinct: nnd,
        indisvalid: bool_at(valid)?,
    })
}

/// Every database's `pg_index` rows by `(database oid, indexrelid)`. A database whose
/// `pg_index` cannot be read gives no rows (its indexes are then not checked for uniqueness).
pub fn read_index_rows(
    datadir: &Path,
    catalog: &Catalog,
    major: u32,
    blcksz: usize,
    max_align: usize,
    version_dir: &str,
) -> HashMap<(u32, u32), IndexRow> {
    let mut rows = HashMap::new();
    for db in catalog.databases.keys() {
        let Some((key, _)) = catalog
            .relations
            .iter()
            .find(|(k, r)| k.0 == *db && r.oid == oids::PG_INDEX)
        else {
            continue;
        };
        let dir = datadir.join(Catalog::relation_dir(*key, version_dir));
        let mut trouble = ScanTrouble::default();
        let _ = for_each_page(&dir, key.2, blcksz, |blkno, page| {
            visible_rows_of_page(
                page,
                blkno,
                max_align,
                &catalog.clog,
                &mut trouble,
                &mut |row| {
                    if let Some(r) = parse_index_row(row.data, major) {
                        rows.insert((*db, r.indexrelid), r);
                    }
                },
            );
        });
    }
    rows
}

/// Whether the relation of `key` has the `heap` table access method: only then are its pages
/// heap pages, whose tuples the checks that follow an index into its table read. A table of
/// another access method has no page format pgcheckdb knows
/// ([`crate::check::standard::PageFormat::for_relation`]).
pub fn is_heap_table(catalog: &Catalog, key: &FileKey) -> bool {
    catalog
        .relations
        .get(key)
        .is_some_and(|r| r.relam == am_oid::HEAP)
}

/// Why an index of a table of another table access method than `heap` is left out of the
/// checks that read its table's tuples.
pub const OTHER_TABLE_AM: &str =
    "its table is of another table access method than heap: its pages are not read as heap pages";

/// The pg_index row of index `oid` in database `db` (a shared index: any database's row).
pub fn find_row(rows: &HashMap<(u32, u32), IndexRow>, db: u32, oid: u32) -> Option<IndexRow> {
    if let Some(r) = rows.get(&(db, oid)) {
        return Some(*r);
    }
    if db == 0 {
        return rows.values().find(|r| r.indexrelid == oid).copied();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_rows_decode_per_version() {
        let mut d = vec![0u8; 24];
        d[0..4].copy_from_slice(&16400u32.to_le_bytes());
        d[4..8].copy_from_slice(&16384u32.to_le_bytes());
        d[8..10].copy_from_slice(&2u16.to_le_bytes());
        d[10..12].copy_from_slice(&1u16.to_le_bytes());
        d[12] = 1; // indisunique
        d[13] = 1; // 15+: indnullsnotdistinct; 14: indisprimary
        d[17] = 1; // 14: indisvalid; 15+: indisclustered
        let r14 = parse_index_row(&d, 14).unwrap();
        assert!(r14.indisunique && r14.indisvalid && !r14.indnullsnotdistinct);
        assert_eq!((r14.indrelid, r14.indnatts, r14.indnkeyatts), (16384, 2, 1));
        let r15 = parse_index_row(&d, 15).unwrap();
        assert!(r15.indnullsnotdistinct && !r15.indisvalid);
        assert_eq!(parse_index_row(&d[..10], 16), None);
    }
}
