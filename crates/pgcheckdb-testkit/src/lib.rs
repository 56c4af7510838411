//! Test fixtures on top of `pgcheckdb-cluster`: real clusters made by each PostgreSQL version's
//! `initdb` and loaded with SQL ([`standard_cluster`], or a test's own [`loaded`] cluster), a
//! runner that parses `pgcheckdb`'s JSON Lines ([`run`]) and one that guards against hangs
//! ([`guard`]), assertions on a run ([`asserts`]), PostgreSQL's own checkers for cross-checks
//! ([`pg_checksums`], [`amcheck`]), little-endian page fields ([`bytes`]), edits of
//! `pg_control` ([`control`]), the libc locale the order tests need ([`locale`]), a snapshot of
//! a data directory's files to prove a command wrote nothing ([`snapshot`]), and one `#[test]`
//! per version ([`version_tests!`]).
//!
//! Missing PostgreSQL binaries are a test failure, never a skip: [`require_binaries`] panics with
//! the version and the install script to run.

pub mod amcheck;
pub mod asserts;
pub mod bytes;
pub mod control;
pub mod fixture;
pub mod guard;
pub mod loaded;
pub mod locale;
pub mod pg_checksums;
pub mod run;
pub mod snapshot;

pub use fixture::{standard_cluster, standard_cluster_with, FixtureOptions, StandardCluster};
pub use loaded::loaded_cluster;
pub use pgcheckdb_cluster::UpgradeMode;
pub use pgcheckdb_cluster::{Cluster, ClusterOptions, PgBinaries, RunAs};

/// The PostgreSQL major versions pgcheckdb supports and tests.
pub const MAJORS: [u32; 6] = [14, 15, 16, 17, 18, 19];

/// Block size of the test clusters (the default build).
pub const BLCKSZ: usize = 8192;
/// Blocks per segment file of the test clusters (the default build).
pub const RELSEG_SIZE: u64 = 131072;

/// The binaries of `major`; panics naming the version and the install script when they are missing.
pub fn require_binaries(major: u32) -> PgBinaries {
    match PgBinaries::find(major) {
        Ok(bin) => bin,
        Err(e) => panic!(
            "PostgreSQL {major} is required by this test and is missing: {e}\n\
             Install it with: sudo bash scripts/install-postgres.sh"
        ),
    }
}

/// One `#[test]` per entry, each calling `$scenario` with the entry's arguments: a scenario
/// run on every version (and with and without data checksums) as tests of their own, so that
/// each can be run, and fail, alone.
///
/// ```ignore
/// pgcheckdb_testkit::version_tests! {
///     scenario;
///     tids_pg14_checksums(14, true),
///     tids_pg15_no_checksums(15, false),
/// }
/// ```
#[macro_export]
macro_rules! version_tests {
    ($scenario:path; $($(#[$meta:meta])* $name:ident($($arg:expr),* $(,)?)),+ $(,)?) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                $scenario($($arg),*);
            }
        )+
    };
}
