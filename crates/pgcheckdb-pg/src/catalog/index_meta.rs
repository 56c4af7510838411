//! What the order of a B-tree index's keys depends on, read from the catalogs' files:
//! `pg_index` (key columns, operator classes, collations, `indoption`, uniqueness),
//! `pg_opclass`, `pg_opfamily`, `pg_collation`, and the default collation's locale from
//! `pg_database`. Column offsets per major version are data in [`super::layouts`]; the
//! comparators that use these facts live in the check floor (`check::order`).

use foldhash::HashMap;
use std::path::Path;

use super::layouts::{
    order_layouts_for, order_oids, pg_opclass, pg_opfamily, OrderLayouts, PgCollationLayout,
    PgDatabaseLocaleLayout, PgIndexOrderLayout,
};
use super::{name_at, DatabaseInfo, Reader};
use crate::format::bytes::{le_i16, le_u32};
use crate::format::datum::{VECTOR_DIM1, VECTOR_HEADER, VECTOR_NDIM};
use crate::format::enums::byte_enum;

/// One `pg_index` row, as far as key order needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexMeta {
    pub indnatts: i16,
    /// Key columns; the columns after them are INCLUDE columns, never ordered.
    pub indnkeyatts: i16,
    pub indisunique: bool,
    /// PostgreSQL 15+; false before.
    pub indnullsnotdistinct: bool,
    /// Table column numbers, 0 for an expression.
    pub indkey: Vec<i16>,
    /// Collation per column (0 for a type that is not collatable).
    pub indcollation: Vec<u32>,
    /// Operator class per key column.
    pub indclass: Vec<u32>,
    /// Per-column flags (`INDOPTION_DESC`, `INDOPTION_NULLS_FIRST`).
    pub indoption: Vec<i16>,
    /// `indexprs` or `indpred` is not NULL: an expression or a partial index, whose entries
    /// cannot be computed from a heap tuple offline.
    pub has_expressions_or_predicate: bool,
}

/// One `pg_opclass` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpClass {
    pub name: String,
    /// Access method (`pg_am` oid; 403 is btree).
    pub method: u32,
    pub namespace: u32,
    pub family: u32,
    /// The type the class orders.
    pub intype: u32,
}

/// One `pg_opfamily` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpFamily {
    pub name: String,
    pub method: u32,
}

byte_enum! {
    /// `collprovider` / `datlocprovider`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum CollProvider {
        /// `d`: the database's default collation.
        Default = b'd',
        /// `c`: the C library's locales.
        Libc = b'c',
        /// `i`: ICU.
        Icu = b'i',
        /// `b`: PostgreSQL's built-in provider (17+).
        Builtin = b'b',
        _ => Other(u8),
    }
}

/// One `pg_collation` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collation {
    pub name: String,
    pub provider: CollProvider,
    pub deterministic: bool,
    /// `collcollate`, for libc collations (NULL or empty for the others).
    pub collate: Option<String>,
}

/// The default collation of one database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseLocale {
    pub provider: CollProvider,
    /// `datcollate` (`LC_COLLATE` of a libc database).
    pub collate: String,
}

/// Everything the key order of the cluster's B-tree indexes depends on. Keys are
/// `(database oid, object oid)`: operator classes and collations are per database.
#[derive(Debug, Default)]
pub struct OrderCatalog {
    pub indexes: HashMap<(u32, u32), IndexMeta>,
    pub opclasses: HashMap<(u32, u32), OpClass>,
    pub opfamilies: HashMap<(u32, u32), OpFamily>,
    pub collations: HashMap<(u32, u32), Collation>,
    pub databases: HashMap<u32, DatabaseLocale>,
}

impl OrderCatalog {
    /// The `pg_index` row of index `oid` in database `db_oid`; for a shared index (`db_oid`
    /// 0), the row of any database (they all hold the same one), with that database's oid.
    pub fn index(&self, db_oid: u32, oid: u32) -> Option<(u32, &IndexMeta)> {
        if db_oid != 0 {
            return self.indexes.get(&(db_oid, oid)).map(|m| (db_oid, m));
        }
        let mut dbs: Vec<u32> = self.databases.keys().copied().collect();
        dbs.sort_unstable();
        dbs.into_iter()
            .find_map(|db| self.indexes.get(&(db, oid)).map(|m| (db, m)))
    }
}

/// A variable-length column at `off` of a catalog row's data area: its payload and the offset
/// after it. Handles the 1-byte short header and the int-aligned 4-byte header of an
/// uncompressed value; `None` for anything else (compressed or external values are not
/// expected in these columns).
pub fn varlena_at(d: &[u8], off: usize) -> Option<(&[u8], usize)> {
    let first = *d.get(off)?;
    if !off.is_multiple_of(4) && first == 0 {
        // Alignment padding before a 4-byte header.
        return varlena_at(d, (off + 3) & !3);
    }
    if first & 0x01 == 0x01 {
        let len = (first >> 1) as usize;
        if first == 0x01 || len < 1 {
            return None; // external TOAST pointer
        }
        return Some((d.get(off + 1..off + len)?, off + len));
    }
    if !off.is_multiple_of(4) || first & 0x03 != 0 {
        return None;
    }
    let header = le_u32(d, off)?;
    let len = (header >> 2) as usize;
    if len < 4 {
        return None;
    }
    Some((d.get(off + 4..off + len)?, off + len))
}

/// The number of values of an `int2vector`/`oidvector` payload (one dimension or none).
fn vector_len(payload: &[u8]) -> Option<usize> {
    let ndim = le_u32(payload, VECTOR_NDIM)?;
    match ndim {
        0 => Some(0),
        1 => usize::try_from(le_u32(payload, VECTOR_DIM1)?).ok(),
        _ => None,
    }
}

fn int2vector(payload: &[u8]) -> Option<Vec<i16>> {
    let n = vector_len(payload)?;
    (0..n)
        .map(|i| le_i16(payload, VECTOR_HEADER + 2 * i))
        .collect()
}

fn oidvector(payload: &[u8]) -> Option<Vec<u32>> {
    let n = vector_len(payload)?;
    (0..n)
        .map(|i| le_u32(payload, VECTOR_HEADER + 4 * i))
        .collect()
}

/// `(indexrelid, row)` of a `pg_index` row.
fn index_meta_row(d: &[u8], l: &PgIndexOrderLayout) -> Option<(u32, IndexMeta)> {
    let byte = |off: usize| d.get(off).copied();
    let (indkey, next) = varlena_at(d, l.indkey)?;
    let (indcollation, next) = varlena_at(d, next)?;
    let (indclass, next) = varlena_at(d, next)?;
    let (indoption, end) = varlena_at(d, next)?;
    let meta = IndexMeta {
        indnatts: le_i16(d, l.indnatts)?,
        indnkeyatts: le_i16(d, l.indnkeyatts)?,
        indisunique: byte(l.indisunique)? != 0,
        indnullsnotdistinct: match l.indnullsnotdistinct {
            Some(off) => byte(off)? != 0,
            None => false,
        },
        indkey: int2vector(indkey)?,
        indcollation: oidvector(indcollation)?,
        indclass: oidvector(indclass)?,
        indoption: int2vector(indoption)?,
        has_expressions_or_predicate: false,
    };
    // `indexprs` and `indpred` are the last columns: data after `indoption` is one of them
    // (an expression column also shows as 0 in `indkey`).
    let meta = IndexMeta {
        has_expressions_or_predicate: d.len() > end || meta.indkey.contains(&0),
        ..meta
    };
    Some((le_u32(d, super::layouts::pg_index::INDEXRELID)?, meta))
}

fn opclass_row(d: &[u8]) -> Option<(u32, OpClass)> {
    let class = OpClass {
        name: name_at(d, pg_opclass::OPCNAME)?,
        method: le_u32(d, pg_opclass::OPCMETHOD)?,
        namespace: le_u32(d, pg_opclass::OPCNAMESPACE)?,
        family: le_u32(d, pg_opclass::OPCFAMILY)?,
        intype: le_u32(d, pg_opclass::OPCINTYPE)?,
    };
    Some((le_u32(d, pg_opclass::OID)?, class))
}

fn opfamily_row(d: &[u8]) -> Option<(u32, OpFamily)> {
    let family = OpFamily {
        name: name_at(d, pg_opfamily::OPFNAME)?,
        method: le_u32(d, pg_opfamily::OPFMETHOD)?,
    };
    Some((le_u32(d, pg_opfamily::OID)?, family))
}

/// A locale name stored as `name` (14) or as a NOT NULL `text` (15+).
fn locale_text(d: &[u8], off: usize, is_name: bool) -> Option<String> {
    if is_name {
        return name_at(d, off);
    }
    let (payload, _) = varlena_at(d, off)?;
    Some(String::from_utf8_lossy(payload).into_owned())
}

fn collation_row(d: &[u8], l: &PgCollationLayout) -> Option<(u32, Collation)> {
    let provider = CollProvider::from_byte(*d.get(l.collprovider)?);
    // `collcollate` may be NULL in 15+ except for libc collations; only those read it.
    let collate = match provider {
        CollProvider::Libc => Some(locale_text(d, l.collcollate, l.collcollate_is_name)?),
        _ => None,
    };
    let coll = Collation {
        name: name_at(d, l.collname)?,
        provider,
        deterministic: *d.get(l.collisdeterministic)? != 0,
        collate,
    };
    Some((le_u32(d, l.oid)?, coll))
}

/// The default collation's provider and `datcollate` of a `pg_database` row.
pub fn database_locale_row(d: &[u8], l: &PgDatabaseLocaleLayout) -> Option<DatabaseLocale> {
    let provider = match l.datlocprovider {
        Some(off) => CollProvider::from_byte(*d.get(off)?),
        None => CollProvider::Libc,
    };
    Some(DatabaseLocale {
        provider,
        collate: locale_text(d, l.datcollate, l.datcollate_is_name)?,
    })
}

/// The order layouts of this cluster's version.
pub(super) fn layouts(major: Option<u32>) -> Option<OrderLayouts> {
    major.and_then(order_layouts_for)
}

impl Reader<'_> {
    /// Reads `pg_index`, `pg_opclass`, `pg_opfamily` and `pg_collation` of one database.
    /// `node_of` gives a catalog's file number. Rows that cannot be decoded are left out: their
    /// indexes are then not order-checked.
    pub(super) fn read_order_meta(
        &mut self,
        db: &DatabaseInfo,
        dir: &Path,
        node_of: &dyn Fn(u32) -> Option<u32>,
    ) {
        let Some(l) = layouts(self.control.major) else {
            return;
        };
        let mut found = OrderCatalog::default();
        if let Some(node) = node_of(crate::format::oids::PG_INDEX) {
            self.scan(dir, node, "pg_index", |row| {
                found.indexes.extend(
                    index_meta_row(row.data, &l.pg_index).map(|(oid, m)| ((db.oid, oid), m)),
                );
            });
        }
        if let Some(node) = node_of(order_oids::PG_OPCLASS) {
            self.scan(dir, node, "pg_opclass", |row| {
                found
                    .opclasses
                    .extend(opclass_row(row.data).map(|(oid, c)| ((db.oid, oid), c)));
            });
        }
        if let Some(node) = node_of(order_oids::PG_OPFAMILY) {
            self.scan(dir, node, "pg_opfamily", |row| {
                found
                    .opfamilies
                    .extend(opfamily_row(row.data).map(|(oid, f)| ((db.oid, oid), f)));
            });
        }
        if let Some(node) = node_of(order_oids::PG_COLLATION) {
            self.scan(dir, node, "pg_collation", |row| {
                found.collations.extend(
                    collation_row(row.data, &l.pg_collation).map(|(oid, c)| ((db.oid, oid), c)),
                );
            });
        }
        let order = &mut self.catalog.order;
        order.indexes.extend(found.indexes);
        order.opclasses.extend(found.opclasses);
        order.opfamilies.extend(found.opfamilies);
        order.collations.extend(found.collations);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_varlena_headers() {
        // 1-byte header: length 4 including the header.
        let d = [0x09, b'a', b'b', b'c', 0];
        assert_eq!(varlena_at(&d, 0), Some((&b"abc"[..], 4)));
        // Padding then a 4-byte header of total length 6.
        let mut d = vec![0u8; 4];
        d.extend_from_slice(&(6u32 << 2).to_le_bytes());
        d.extend_from_slice(b"xy");
        assert_eq!(varlena_at(&d, 1), Some((&b"xy"[..], 10)));
        // External pointer.
        assert_eq!(varlena_at(&[0x01, 18], 0), None);
    }
}
