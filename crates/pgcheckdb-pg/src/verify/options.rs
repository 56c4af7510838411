//! How a verification runs: the check level and the scan's options.

use serde::Serialize;

/// Check level (docs/CHECKS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Physical,
    Standard,
    Extended,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Physical => "physical",
            Level::Standard => "standard",
            Level::Extended => "extended",
        }
    }
}

/// How to run a verification.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    pub jobs: usize,
    pub level: Level,
    pub max_bytes_per_sec: Option<u64>,
    /// Largest work unit (a block range of one segment file), in bytes. Units are made smaller
    /// on small clusters so that every worker gets at least [`MIN_UNITS_PER_JOB`] of them.
    pub unit_bytes: u64,
    /// Bytes per read.
    pub chunk_bytes: usize,
    /// Count tuples per relation for the verbose summary ([`crate::verify::relstats`]).
    pub count_tuples: bool,
    /// `verify --online`: the server runs ([`crate::verify::online`]); pages with `pd_lsn` above
    /// `lsn_floor` are noted.
    pub online: Option<crate::verify::online::ScanOptions>,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            jobs: 1,
            level: Level::Physical,
            max_bytes_per_sec: None,
            // 32 MiB rather than 8: with cold caches each worker's reads stay sequential for
            // longer (2.4 GB cluster, -j 2: 3-9 % less time; warm: no change), see
            // docs/PERFORMANCE.md.
            unit_bytes: 32 << 20,
            chunk_bytes: 256 << 10,
            count_tuples: false,
            online: None,
        }
    }
}

/// Fewest work units per worker: the last units of a scan then leave at most a small fraction
/// of the work to a single worker.
pub const MIN_UNITS_PER_JOB: u64 = 16;
