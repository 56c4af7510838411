//! Everything pgcheckdb knows about PostgreSQL: the on-disk formats of pages and control files,
//! the data directory layout, the data checksum, and the checks run on them.
//!
//! Nothing here prints or parses arguments; the binary turns these results into output. The
//! modules are floors, each importing only the floors listed before it (ARCHITECTURE.md):
//! [`format`] → [`finding`] → [`datadir`] → [`catalog`] → [`plan`], [`scope`] → [`check`] →
//! [`verify`] → [`ops`].

pub mod catalog;
pub mod check;
pub mod datadir;
pub mod finding;
pub mod format;
#[doc(hidden)]
pub mod fuzzing;
pub mod ops;
pub mod plan;
pub mod scope;
pub mod verify;

#[cfg(test)]
mod test_pages;
