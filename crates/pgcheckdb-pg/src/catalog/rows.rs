//! Decoding catalog rows: the columns pgcheckdb reads from `pg_class`, `pg_attribute`,
//! `pg_database`, `pg_namespace`/`pg_am` and `pg_index` rows, by each version's layout.

use foldhash::HashMap;

use super::*;
use crate::format::bytes::{range, until_nul};
use crate::format::oids::am_oid;
use attributes::{align_of, Attribute, PgAttributeLayout};
use heapscan::RowState;
use layouts::{PgClassLayout, PgDatabaseLayout, NAMEDATALEN, OID_THEN_NAME};

/// A `name` column: NUL-padded, at most `NAMEDATALEN - 1` bytes.
pub(super) fn name_at(b: &[u8], off: usize) -> Option<String> {
    let s = until_nul(range(b, off, NAMEDATALEN)?);
    Some(String::from_utf8_lossy(s).into_owned())
}

/// Built-in access methods, used when `pg_am` cannot be read.
pub(super) fn builtin_am(oid: u32) -> Option<&'static str> {
    Some(match oid {
        am_oid::HEAP => "heap",
        am_oid::BTREE => "btree",
        am_oid::HASH => "hash",
        am_oid::GIST => "gist",
        am_oid::GIN => "gin",
        am_oid::SPGIST => "spgist",
        am_oid::BRIN => "brin",
        _ => return None,
    })
}

/// Columns `1..=relnatts` in order, or `None` if any is missing or doubled.
pub(super) fn complete_columns<T>(rows: Option<Vec<(i16, T)>>, relnatts: i16) -> Option<Vec<T>> {
    let mut rows = rows?;
    rows.sort_by_key(|(n, _)| *n);
    let dense = rows.len() == relnatts.max(0) as usize
        && rows
            .iter()
            .enumerate()
            .all(|(i, (n, _))| *n as usize == i + 1);
    dense.then(|| rows.into_iter().map(|(_, a)| a).collect())
}

/// The `relname`s of one database's `pg_class` rows in one buffer: a multi-tenant database
/// has hundreds of thousands of rows, and a string of its own for each would be the largest
/// part of them.
#[derive(Default)]
pub(super) struct RelNames(String);

/// Where one row's `relname` lies in its [`RelNames`].
#[derive(Debug, Clone, Copy)]
pub(super) struct RelName {
    start: u32,
    len: u16,
}

impl RelNames {
    /// Appends the `name` column at `off` of `d` (as [`name_at`] reads it).
    fn push_name_at(&mut self, d: &[u8], off: usize) -> Option<RelName> {
        let s = until_nul(range(d, off, NAMEDATALEN)?);
        let start = u32::try_from(self.0.len()).ok()?;
        self.0.push_str(&String::from_utf8_lossy(s));
        let len = u16::try_from(self.0.len() - start as usize).ok()?;
        Some(RelName { start, len })
    }

    pub(super) fn get(&self, n: RelName) -> &str {
        let start = n.start as usize;
        self.0.get(start..start + n.len as usize).unwrap_or("")
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
}

/// A `pg_class` row as read, before names are resolved.
#[derive(Clone)]
pub(super) struct ClassRow {
    pub(super) oid: u32,
    /// In the [`RelNames`] the row was read into.
    pub(super) relname: RelName,
    pub(super) relnamespace: u32,
    pub(super) relam: u32,
    pub(super) relfilenode: u32,
    pub(super) reltablespace: u32,
    pub(super) relpages: u32,
    pub(super) reltuples: f32,
    pub(super) reltoastrelid: u32,
    pub(super) relisshared: bool,
    pub(super) relpersistence: u8,
    pub(super) relkind: RelKind,
    pub(super) relnatts: i16,
    pub(super) relfrozenxid: u32,
    pub(super) relminmxid: u32,
    pub(super) state: RowState,
}

/// One `pg_class` row's columns, `None` if the row is too short for them.
/// Its `relname` goes to `names`.
pub(super) fn class_row(
    d: &[u8],
    l: &PgClassLayout,
    state: RowState,
    names: &mut RelNames,
) -> Option<ClassRow> {
    let byte = |off: usize| d.get(off).copied();
    Some(ClassRow {
        oid: le_u32(d, l.oid)?,
        // (A row too short for a later column leaves its name unused in `names`.)
        relname: names.push_name_at(d, l.relname)?,
        relnamespace: le_u32(d, l.relnamespace)?,
        relam: le_u32(d, l.relam)?,
        relfilenode: le_u32(d, l.relfilenode)?,
        reltablespace: le_u32(d, l.reltablespace)?,
        relpages: le_u32(d, l.relpages)?,
        reltuples: f32::from_bits(le_u32(d, l.reltuples)?),
        reltoastrelid: le_u32(d, l.reltoastrelid)?,
        relisshared: byte(l.relisshared)? != 0,
        relpersistence: byte(l.relpersistence)?,
        relkind: RelKind::from_byte(byte(l.relkind)?),
        relnatts: le_i16(d, l.relnatts)?,
        relfrozenxid: le_u32(d, l.relfrozenxid)?,
        relminmxid: le_u32(d, l.relminmxid)?,
        state,
    })
}

/// One `pg_attribute` row: `(attrelid, attnum, column)`.
pub(super) fn attribute_row(
    d: &[u8],
    l: &PgAttributeLayout,
    types: &HashMap<u32, String>,
) -> Option<(u32, i16, Attribute)> {
    let attnum = le_i16(d, l.attnum)?;
    let attr = Attribute {
        name: name_at(d, l.attname)?,
        type_name: le_u32(d, l.atttypid).and_then(|t| types.get(&t).cloned()),
        attlen: le_i16(d, l.attlen)?,
        align: align_of(*d.get(l.attalign)?)?,
        dropped: *d.get(l.attisdropped)? != 0,
    };
    Some((le_u32(d, l.attrelid)?, attnum, attr))
}

/// One `pg_database` row.
pub(super) fn database_row(d: &[u8], l: &PgDatabaseLayout) -> Option<DatabaseInfo> {
    Some(DatabaseInfo {
        oid: le_u32(d, l.oid)?,
        name: name_at(d, l.datname)?,
        tablespace: le_u32(d, l.dattablespace)?,
        frozenxid: le_u32(d, l.datfrozenxid)?,
        invalid: le_u32(d, l.datconnlimit).map(|v| v as i32) == Some(DATCONNLIMIT_INVALID_DB),
    })
}

/// `(oid, name)` of a catalog row that starts with them (pg_namespace, pg_am, ...).
pub(super) fn oid_name_row(d: &[u8]) -> Option<(u32, String)> {
    Some((le_u32(d, OID_THEN_NAME.0)?, name_at(d, OID_THEN_NAME.1)?))
}

/// `(indexrelid, indrelid)` of a `pg_index` row.
pub(super) fn index_row(d: &[u8]) -> Option<(u32, u32)> {
    Some((
        le_u32(d, layouts::pg_index::INDEXRELID)?,
        le_u32(d, layouts::pg_index::INDRELID)?,
    ))
}
