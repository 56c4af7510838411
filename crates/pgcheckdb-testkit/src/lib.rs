//! Test fixtures on top of `pgcheckdb-cluster`: real clusters made by each PostgreSQL version's
//! `initdb` and loaded with SQL ([`standard_cluster`]), a runner that parses `pgcheckdb`'s JSON
//! Lines ([`run`]), a parser for `pg_checksums --check` ([`pg_checksums`]) and a snapshot of a data
//! directory's files to prove a command wrote nothing ([`snapshot`]).
//!
//! Missing PostgreSQL binaries are a test failure, never a skip: [`require_binaries`] panics with
//! the version and the install script to run.

pub mod fixture;
pub mod pg_checksums;
pub mod run;
pub mod snapshot;

pub use fixture::{standard_cluster, standard_cluster_with, FixtureOptions, StandardCluster};
pub use pgcheckdb_cluster::UpgradeMode;
pub use pgcheckdb_cluster::{Cluster, ClusterOptions, PgBinaries, RunAs};

/// The PostgreSQL major versions pgcheckdb supports and tests.
pub const MAJORS: [u32; 5] = [14, 15, 16, 17, 18];

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
