//! Where the fixed-width columns of the system catalogs sit inside a row's data area, per
//! PostgreSQL major version. Each layout is data: one table per catalog and version range.

/// `NAMEDATALEN`: bytes of a `name` column (pg_control records the cluster's).
pub use crate::format::control::NAMEDATALEN;

/// `pg_class` columns pgcheckdb reads.
#[derive(Debug, Clone, Copy)]
pub struct PgClassLayout {
    pub oid: usize,
    pub relname: usize,
    pub relnamespace: usize,
    pub relam: usize,
    pub relfilenode: usize,
    pub reltablespace: usize,
    /// `relpages` (int4) and `reltuples` (float4): the planner's size and row count as of the
    /// last VACUUM, ANALYZE or CREATE INDEX (`reltuples` -1 when never counted).
    pub relpages: usize,
    pub reltuples: usize,
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
    relpages: 96,
    reltuples: 100,
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

/// Byte offsets of the `pg_index` columns pgcheckdb reads: the same in 14–18 up to
/// `indisunique`; `indnullsnotdistinct` exists from 15 on and moves `indisvalid`.
pub mod pg_index {
    pub const INDEXRELID: usize = 0;
    pub const INDRELID: usize = 4;
    pub const INDNATTS: usize = 8;
    pub const INDNKEYATTS: usize = 10;
    pub const INDISUNIQUE: usize = 12;
    /// PostgreSQL 15+.
    pub const INDNULLSNOTDISTINCT: usize = 13;
    /// After `indisunique`, [`INDNULLSNOTDISTINCT`] (15+), `indisprimary`, `indisexclusion`,
    /// `indimmediate`, `indisclustered`.
    pub const INDISVALID_14: usize = 17;
    pub const INDISVALID_15: usize = 18;
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
        // 19's pg_class and pg_database are 18's, column for column.
        18 | 19 => Some(CatalogLayouts {
            pg_class: PG_CLASS_18,
            pg_database: PG_DATABASE_15,
        }),
        _ => None,
    }
}

/// `pg_index` columns the key order needs. The fixed part ends after the `indis*` flags (one
/// more in 15+, `indnullsnotdistinct`); in both layouts `indkey` (an `int2vector`) starts at
/// byte 24 and `indcollation`, `indclass` (`oidvector`s) and `indoption` (`int2vector`)
/// follow it, each int-aligned with a 4-byte varlena header (these types are stored plain).
#[derive(Debug, Clone, Copy)]
pub struct PgIndexOrderLayout {
    pub indnatts: usize,
    pub indnkeyatts: usize,
    pub indisunique: usize,
    /// PostgreSQL 15+.
    pub indnullsnotdistinct: Option<usize>,
    /// The first variable-length column, `indkey`.
    pub indkey: usize,
}

/// 14.
pub const PG_INDEX_ORDER_14: PgIndexOrderLayout = PgIndexOrderLayout {
    indnatts: 8,
    indnkeyatts: 10,
    indisunique: 12,
    indnullsnotdistinct: None,
    indkey: 24,
};
/// 15–18.
pub const PG_INDEX_ORDER_15: PgIndexOrderLayout = PgIndexOrderLayout {
    indnullsnotdistinct: Some(13),
    ..PG_INDEX_ORDER_14
};

/// `pg_opclass` columns: the same in 14–18.
pub mod pg_opclass {
    pub const OID: usize = 0;
    pub const OPCMETHOD: usize = 4;
    pub const OPCNAME: usize = 8;
    pub const OPCNAMESPACE: usize = 72;
    pub const OPCFAMILY: usize = 80;
    pub const OPCINTYPE: usize = 84;
}

/// `pg_opfamily` columns: the same in 14–18.
pub mod pg_opfamily {
    pub const OID: usize = 0;
    pub const OPFMETHOD: usize = 4;
    pub const OPFNAME: usize = 8;
}

/// `pg_collation` columns. The fixed part is the same in 14–18; `collcollate` is a `name` at
/// 84 in 14 and the first (nullable) `text` column from 84 on in 15+.
#[derive(Debug, Clone, Copy)]
pub struct PgCollationLayout {
    pub oid: usize,
    pub collname: usize,
    pub collprovider: usize,
    pub collisdeterministic: usize,
    pub collcollate: usize,
    /// `collcollate` is a `name` (14) rather than `text` (15+).
    pub collcollate_is_name: bool,
}

/// 14.
pub const PG_COLLATION_14: PgCollationLayout = PgCollationLayout {
    oid: 0,
    collname: 4,
    collprovider: 76,
    collisdeterministic: 77,
    collcollate: 84,
    collcollate_is_name: true,
};
/// 15–18.
pub const PG_COLLATION_15: PgCollationLayout = PgCollationLayout {
    collcollate_is_name: false,
    ..PG_COLLATION_14
};

/// Where `pg_database` keeps the default collation's locale.
#[derive(Debug, Clone, Copy)]
pub struct PgDatabaseLocaleLayout {
    /// `datlocprovider` (15+); 14 has only libc.
    pub datlocprovider: Option<usize>,
    pub datcollate: usize,
    /// `datcollate` is a `name` (14) rather than the first `text` column (15+).
    pub datcollate_is_name: bool,
}

/// 14.
pub const PG_DATABASE_LOCALE_14: PgDatabaseLocaleLayout = PgDatabaseLocaleLayout {
    datlocprovider: None,
    datcollate: 76,
    datcollate_is_name: true,
};
/// 15–18.
pub const PG_DATABASE_LOCALE_15: PgDatabaseLocaleLayout = PgDatabaseLocaleLayout {
    datlocprovider: Some(76),
    datcollate: 96,
    datcollate_is_name: false,
};

/// The layouts the B-tree key order reads, per major version.
#[derive(Debug, Clone, Copy)]
pub struct OrderLayouts {
    pub pg_index: PgIndexOrderLayout,
    pub pg_collation: PgCollationLayout,
    pub pg_database: PgDatabaseLocaleLayout,
}

/// Order layouts for a major version, `None` if unknown.
pub fn order_layouts_for(major: u32) -> Option<OrderLayouts> {
    match major {
        14 => Some(OrderLayouts {
            pg_index: PG_INDEX_ORDER_14,
            pg_collation: PG_COLLATION_14,
            pg_database: PG_DATABASE_LOCALE_14,
        }),
        // 19's pg_index, pg_collation and pg_database are 18's.
        15..=19 => Some(OrderLayouts {
            pg_index: PG_INDEX_ORDER_15,
            pg_collation: PG_COLLATION_15,
            pg_database: PG_DATABASE_LOCALE_15,
        }),
        _ => None,
    }
}

/// Fixed OIDs of the catalogs the key order reads (bootstrap-assigned, the same in 14–18).
pub mod order_oids {
    pub const PG_OPCLASS: u32 = 2616;
    pub const PG_OPFAMILY: u32 = 2753;
    pub const PG_COLLATION: u32 = 3456;
}
