//! What a `verify` run hands back to be printed ([`Outcome`]): the report of a run, or the
//! estimate of `--estimate`. Neither carries timestamps: the program that prints them keeps
//! the clock and sets `started_at` and `finished_at`.

use std::path::PathBuf;

use super::host::Signal;
use crate::verify::estimate::Estimate;
use crate::verify::relstats::RelationSummary;
use crate::verify::report::{Summary, VerifyReport};

/// The end of a run.
pub enum Outcome {
    /// A run that checked (maybe stopped by a signal: see [`Finished::interrupted`]).
    Report(Finished),
    /// `--estimate`: nothing was checked.
    Estimate {
        estimate: Estimate,
        summary: Summary,
    },
}

/// A run that got through the scan.
pub struct Finished {
    /// The findings, tool errors and summary (whose `error` is the first tool error).
    pub report: VerifyReport,
    /// `-v`: what was read of each relation.
    pub relations: Option<Vec<RelationSummary>>,
    /// The directory as named: a tar backup's, not its staging directory.
    pub shown: PathBuf,
    /// The signal that stopped the scan, if one did.
    pub interrupted: Option<Interrupted>,
    /// `pg_control`'s system identifier: which cluster was checked (the damage ledger's key).
    pub system_identifier: u64,
}

/// A scan stopped by a signal: the findings cover only the part checked.
pub struct Interrupted {
    pub signal: Signal,
    /// Bytes scanned when it stopped.
    pub bytes_done: u64,
    /// Bytes the scan was to read.
    pub bytes_total: u64,
}
