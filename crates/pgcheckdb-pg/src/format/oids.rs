//! OIDs fixed by PostgreSQL's catalog headers (`pg_class.h`, `pg_tablespace.h`, `pg_am.dat`,
//! …): the system catalogs the offline catalog reads, the two built-in tablespaces and the
//! built-in access methods.

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

/// Built-in access method OIDs (`pg_am`): `HEAP_TABLE_AM_OID`, `BTREE_AM_OID`, …
pub mod am_oid {
    pub const HEAP: u32 = 2;
    pub const BTREE: u32 = 403;
    pub const HASH: u32 = 405;
    pub const GIST: u32 = 783;
    pub const GIN: u32 = 2742;
    pub const SPGIST: u32 = 4000;
    pub const BRIN: u32 = 3580;
}
