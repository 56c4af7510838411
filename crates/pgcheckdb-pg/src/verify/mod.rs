//! `verify`: runs the block checks of a plan in parallel (or over a stream of blocks), merges
//! the findings into one report, and the steps after the scan: the re-reads of a running
//! server, names for the findings, missing and orphan files, per-relation tallies; and the
//! timed sample of `--estimate`.

mod checker;
pub mod estimate;
pub mod missing;
pub mod naming;
pub mod online;
pub mod options;
pub mod recheck;
pub mod relstats;
pub mod report;
pub mod run;
mod runs;
