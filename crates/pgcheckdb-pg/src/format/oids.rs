//! OIDs fixed by PostgreSQL's catalog headers (`pg_class.h`, `pg_tablespace.h`, …): the
//! system catalogs the offline catalog reads and the two built-in tablespaces.

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
