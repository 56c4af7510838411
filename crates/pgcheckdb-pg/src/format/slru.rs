//! The simple LRU directories (SLRUs): `pg_xact` (two status bits per transaction) and
//! `pg_multixact/offsets` (one `MultiXactOffset` per multixact), in segment files of
//! `SLRU_PAGES_PER_SEGMENT` pages.

/// `CLOG_XACTS_PER_BYTE`: transactions per byte of a clog page (two status bits each).
pub const CLOG_XACTS_PER_BYTE: u32 = 4;
/// `SLRU_PAGES_PER_SEGMENT`: pages in one segment file of an SLRU directory.
pub const SLRU_PAGES_PER_SEGMENT: u32 = 32;

/// `sizeof(MultiXactOffset)` in the PostgreSQL `major`: 64 bits from 19 on (each page of
/// `pg_multixact/offsets` then holds `BLCKSZ / 8` multixacts), 32 bits before.
pub fn multixact_offset_size(major: u32) -> u64 {
    if major >= 19 {
        8
    } else {
        4
    }
}
