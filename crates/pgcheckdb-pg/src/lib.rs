//! Everything pgcheckdb knows about PostgreSQL: the on-disk formats of pages and control files,
//! the data directory layout, the data checksum, and the checks run on them.
//!
//! Nothing here prints or parses arguments; the binary turns these results into output.

pub mod backup;
pub mod btree_order;
pub mod catalog;
pub mod checksum;
pub mod cluster;
pub mod confine;
pub mod control;
pub mod corrupt;
pub mod datadir;
pub mod enable;
pub mod extended;
pub mod finding;
#[doc(hidden)]
pub mod fuzzing;
pub mod hash_buckets;
pub mod inspect;
pub mod layout;
pub mod lock;
pub mod missing;
pub mod naming;
pub mod online;
pub mod page;
pub mod physical;
pub mod placement;
pub mod relfile;
pub mod relstats;
pub mod scope;
pub mod standard;
pub mod verify;

#[cfg(test)]
mod test_pages;
