//! Throwaway local PostgreSQL clusters for tests, `pgcheckdb demo` and `pgcheckdb bench`.
//!
//! [`PgBinaries::find`] locates the programs of one PostgreSQL major version, [`RunAs`] picks the
//! unprivileged user the server runs as when we are root, and [`Cluster`] makes a cluster with
//! `initdb` in a private directory, starts and stops it (Unix socket only, no TCP), runs SQL with
//! `psql` and removes everything when dropped.

mod binaries;
mod cluster;
mod derived;
mod error;
mod exec;
mod user;

pub use binaries::{PgBinaries, INSTALL_HINT};
pub use cluster::{Cluster, ClusterOptions};
pub use derived::UpgradeMode;
pub use error::{Error, Result};
pub use user::RunAs;
