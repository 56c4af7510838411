//! Where the fixed-width columns of the system catalogs sit inside a row's data area, per
//! PostgreSQL major version. Each layout is data: one table per catalog and version range.

/// `NAMEDATALEN`: bytes of a `name` column.
pub const NAMEDATALEN: usize = 64;

/// `pg_class` columns pgcheckdb reads.
#[derive(Debug, Clone, Copy)]
pub struct PgClassLayout {
    pub oid: usize,
    pub relname: usize,
    pub relnamespace: usize,
    pub relam: usize,
    pub relfilenode: usize,
    pub reltablespace: usize,
    pub reltoastrelid: usize,
    pub relisshared: usize,
    pub relpersistence: usize,
    pub relkind: usize,
    pub relnatts: usize,
    pub relfrozenxid: usize,
    pub relminmxid: usize,
}

/// 14–17.
pub const PG_CLASS_14: PgClassLayout = PgClassLayout {
    oid: 0,
    relname: 4,
    relnamespace: 68,
    relam: 84,
    relfilenode: 88,
    reltablespace: 92,
    reltoastrelid: 108,
    relisshared: 113,
    relpersistence: 114,
    relkind: 115,
    relnatts: 116,
    relfrozenxid: 132,
    relminmxid: 136,
};

/// 18: `relallfrozen` added at 108 moves the later columns by 4.
pub const PG_CLASS_18: PgClassLayout = PgClassLayout {
    reltoastrelid: 112,
    relisshared: 117,
    relpersistence: 118,
    relkind: 119,
    relnatts: 120,
    relfrozenxid: 136,
    relminmxid: 140,
    ..PG_CLASS_14
};

/// `pg_database` columns pgcheckdb reads.
#[derive(Debug, Clone, Copy)]
pub struct PgDatabaseLayout {
    pub oid: usize,
    pub datname: usize,
    pub datfrozenxid: usize,
    pub dattablespace: usize,
    pub datconnlimit: usize,
}

/// 14: `datcollate`/`datctype` are `name` columns in the fixed part.
pub const PG_DATABASE_14: PgDatabaseLayout = PgDatabaseLayout {
    oid: 0,
    datname: 4,
    datfrozenxid: 216,
    dattablespace: 224,
    datconnlimit: 208,
};
/// 15–18.
pub const PG_DATABASE_15: PgDatabaseLayout = PgDatabaseLayout {
    oid: 0,
    datname: 4,
    datfrozenxid: 84,
    dattablespace: 92,
    datconnlimit: 80,
};

/// `pg_index` columns pgcheckdb reads: the same in 14–18.
pub mod pg_index {
    pub const INDEXRELID: usize = 0;
    pub const INDRELID: usize = 4;
}

/// `pg_namespace`, `pg_am`, `pg_type` and `pg_tablespace` start with `oid` then a `name`: the
/// same in 14–18.
pub const OID_THEN_NAME: (usize, usize) = (0, 4);

/// The layouts of one major version.
#[derive(Debug, Clone, Copy)]
pub struct CatalogLayouts {
    pub pg_class: PgClassLayout,
    pub pg_database: PgDatabaseLayout,
}

/// Layouts for a major version, `None` if unknown.
pub fn layouts_for(major: u32) -> Option<CatalogLayouts> {
    match major {
        14 => Some(CatalogLayouts {
            pg_class: PG_CLASS_14,
            pg_database: PG_DATABASE_14,
        }),
        15..=17 => Some(CatalogLayouts {
            pg_class: PG_CLASS_14,
            pg_database: PG_DATABASE_15,
        }),
        18 => Some(CatalogLayouts {
            pg_class: PG_CLASS_18,
            pg_database: PG_DATABASE_15,
        }),
        _ => None,
    }
}

/// Fixed OIDs of the catalogs read to bootstrap.
pub mod oids {
    pub const PG_DATABASE: u32 = 1262;
    pub const PG_CLASS: u32 = 1259;
    pub const PG_ATTRIBUTE: u32 = 1249;
    pub const PG_TYPE: u32 = 1247;
    pub const PG_INDEX: u32 = 2610;
    pub const PG_NAMESPACE: u32 = 2615;
    pub const PG_AM: u32 = 2601;
    pub const PG_TABLESPACE: u32 = 1213;
    /// `DEFAULTTABLESPACE_OID` (pg_default) and `GLOBALTABLESPACE_OID` (pg_global).
    pub const DEFAULTTABLESPACE: u32 = 1663;
    pub const GLOBALTABLESPACE: u32 = 1664;
}
