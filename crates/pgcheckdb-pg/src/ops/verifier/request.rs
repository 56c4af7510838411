//! What one `verify` run is asked to do: the [`VerifyRequest`] a program builds from its
//! command line.

use std::path::PathBuf;

use crate::scope::ScopeOptions;
use crate::verify::options::Level;

/// One `verify` run.
#[derive(Debug, Clone)]
pub struct VerifyRequest {
    /// `-D` (or `$PGDATA`): the data directory; `None` when neither was given.
    pub pgdata: Option<PathBuf>,
    /// `--backup`: a base backup, plain (a directory) or tar format (archives); it wins over
    /// `pgdata`.
    pub backup: Option<PathBuf>,
    pub level: Level,
    /// `--online`: the cluster's server is running.
    pub online: Option<OnlineRequest>,
    /// Worker threads.
    pub jobs: usize,
    /// `--max-rate`, in bytes per second.
    pub max_bytes_per_sec: Option<u64>,
    /// `-v`: tuples counted, the per-relation summaries made, the extended level's lists kept.
    pub verbose: bool,
    /// `--estimate`: a timed sample instead of a check.
    pub estimate: bool,
    pub scope: ScopeOptions,
    /// `--memory` of the extended level (its default otherwise).
    pub memory: Option<u64>,
    /// `--temp-dir` of the extended level (the system's temporary directory otherwise).
    pub temp_dir: Option<PathBuf>,
}

/// `--online`'s options.
#[derive(Debug, Clone, Default)]
pub struct OnlineRequest {
    /// `--dbname`: a connection string to the running server.
    pub dbname: Option<String>,
    /// Whether a `CHECKPOINT` may be asked for (not `--no-checkpoint`).
    pub checkpoint_allowed: bool,
    /// `--pause-replay` (a standby): its WAL replay paused for the run, at most `max_pause`.
    pub pause_replay: bool,
    /// `--max-pause`.
    pub max_pause: std::time::Duration,
}
