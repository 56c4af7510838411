//! The visibility map and the commit-log hint bits against the heap (extended level).
//!
//! * [`plan`]: every heap table (tables, TOAST tables, materialized views) gets its heap pages
//!   summarised and its hint bits checked; on a cluster shut down cleanly its `_vm` fork is
//!   read in the same scan too.
//! * [`scan`]: per heap page, one compact summary when something could matter
//!   (`PD_ALL_VISIBLE` clear, a tuple not visible to everyone or not frozen, an all-zero page)
//!   and one record per tuple whose hint bit contradicts `pg_xact`; per visibility-map page,
//!   one record per run of heap blocks with the same set bits. Both are keyed by heap block,
//!   so they meet in one sorted stream.
//! * [`xids`]: a table's window of transaction ids and the cached `pg_xact` lookups.
//! * [`hints`]: which commit hint bit of a tuple contradicts `pg_xact`, and its record.
//! * [`merge`]: per table, a single pass over that stream joins each run of set bits with the
//!   heap pages it covers, and turns hint-bit records into findings.
//!
//! The map may lag behind the heap only in the safe direction (a bit clear while the page is
//! all-visible). A set bit must be backed by the heap page: `PD_ALL_VISIBLE` set, every tuple
//! visible to everyone (all-visible) or never needing freezing (all-frozen), as
//! `pg_visibility`'s `pg_check_visible` and `pg_check_frozen` define them.

pub mod emit;
pub mod hints;
pub mod merge;
pub mod plan;
pub mod scan;
pub mod xids;

pub use plan::{VmInfo, VmPlan};
