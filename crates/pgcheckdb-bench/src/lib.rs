//! `pgcheckdb bench`: reproducible experiments on throwaway local clusters.
//!
//! - [`experiments::checksum_overhead`]: data checksums on vs off (insert + update, and the
//!   worst case of sequential scans through a tiny buffer pool), with WAL volume.
//! - [`experiments::checkpoint`]: a `CHECKPOINT` every K rows vs automatic checkpoints.
//! - [`experiments::verify_scaling`]: `pgcheckdb verify` GB/s per `-j` and level, beside
//!   `pg_checksums --check` and `pg_amcheck`.
//!
//! The pieces: [`stats`] (mean, median, standard deviation, ratio of means with Fieller's 95%
//! interval), [`schedule`] (interleaved run plan and the [`schedule::Executor`] trait),
//! [`workloads`] (the SQL), [`pg`] (choosing the installation; WAL and checkpoint counters per
//! version), [`report`] (what an experiment measured), [`output`] and [`chart`] (text tables, CSV, JSON, PNG), and [`guard`] (Ctrl-C stops
//! and removes the clusters, exit 130).

pub mod chart;
pub mod experiments;
pub mod guard;
pub mod output;
pub mod pg;
pub mod report;
pub mod schedule;
pub mod stats;
pub mod workloads;

pub use experiments::{CommonOpts, Outcome};
