//! What a `Verifier` asks of the program that runs it: the [`Host`] hears each step
//! as an [`Event`] (and prints what it wants of it), shows the block scan's progress while a
//! caught signal cancels it, says which signal was caught, and connects to a running server
//! ([`Server`]: the queries `verify --online --dbname` makes).

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pgcheckdb_scan::Progress;

use crate::catalog::Catalog;
use crate::check::extended::ExtendedPlan;
use crate::check::structure::Structure;
use crate::finding::Finding;
use crate::format::control::ControlFile;
use crate::plan::Plan;
use crate::verify::online::OnlineSummary;
use crate::verify::options::Level;
use crate::verify::report::{BackupSummary, CrashSummary, VerifyReport};

/// An error of the host or of the server it connected to, passed on as it is.
pub type HostError = Box<dyn std::error::Error + Send + Sync>;

/// A signal that asked the run to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    /// Its number (the exit status is derived from it).
    pub number: i32,
    /// `SIGINT`, `SIGTERM`, ... for messages.
    pub name: String,
}

/// One step of the run, in the order the steps happen.
pub enum Event<'a> {
    /// `pg_control` was read; `shown` is the directory as named (a tar backup's, not its
    /// staging directory).
    ControlRead { shown: &'a Path },
    /// `--online` on a cluster whose server is not running: it is checked offline.
    NoServerRunning { datadir: &'a Path },
    /// Everything is checked that can be before the catalogs are read.
    Starting {
        control: &'a ControlFile,
        level: Level,
        jobs: usize,
    },
    /// The catalogs were read.
    CatalogsRead { catalog: &'a Catalog },
    /// The data directory was listed and the plan made.
    Listed {
        plan: &'a Plan,
        catalog: &'a Catalog,
    },
    /// The structure checks are planned (standard level and above).
    StructurePlanned {
        structure: &'a Structure<'a>,
        extended: Option<&'a ExtendedPlan>,
    },
    /// The block scan ended.
    Scanned {
        report: &'a VerifyReport,
        jobs: usize,
    },
    /// `--online`: the pages that failed were read again.
    Rechecked { online: &'a OnlineSummary },
    /// The findings got their database and relation names.
    Named,
    /// A base backup: the findings set aside because replay rewrites their blocks.
    SetAside { findings: &'a [Finding] },
    /// A base backup: its rules and manifest were applied.
    BackupChecked { backup: &'a BackupSummary },
    /// A crashed cluster: what crash recovery rewrites was set aside.
    CrashChecked { crash: &'a CrashSummary },
}

/// The block scan as the host shows its progress.
pub struct ScanView<'a> {
    pub plan: &'a Plan,
    pub catalog: &'a Catalog,
    /// Bytes to scan.
    pub total: u64,
    /// The scan's counters and cancel flag.
    pub progress: &'a Progress,
    /// Set when the scan must end as if a signal came (`--max-pause` ran out): the host stops
    /// the scan when it sees it.
    pub stop: Option<&'a AtomicBool>,
}

/// The program that runs a `Verifier`.
pub trait Host {
    /// Hears one step of the run.
    fn event(&mut self, event: Event<'_>);

    /// The signal caught since the run began, if any.
    fn interrupted(&self) -> Option<Signal>;

    /// Runs `scan` (exactly once), showing its progress and setting `view.progress.cancel`
    /// when a signal is caught meanwhile.
    fn watch_scan(&mut self, view: &ScanView<'_>, scan: &mut dyn FnMut());

    /// Connects to the running server (`--dbname`'s connection string).
    fn connect(&mut self, conninfo: &str) -> Result<Box<dyn Server + Send>, HostError>;
}

/// What `verify --online` asks of the running server.
pub trait Server {
    /// `system_identifier` of `pg_control_system()`.
    fn system_identifier(&mut self) -> Result<u64, HostError>;
    /// The server's `data_directory`; `None` when the role may not read it.
    fn data_directory(&mut self) -> Option<String>;
    /// The end of WAL now (a standby: received or replayed, whichever is further).
    fn end_of_wal(&mut self) -> Result<u64, HostError>;
    /// The first transaction id not yet completed, as a full (epoch-extended) id.
    fn next_completed_xid(&mut self) -> Result<u64, HostError>;
    /// The ids of `xids` (full ids) that committed (`true`) or aborted (`false`).
    fn ended_xacts(&mut self, xids: &[i64]) -> Result<Vec<(u64, bool)>, HostError>;
    /// Runs `CHECKPOINT`.
    fn checkpoint(&mut self) -> Result<(), HostError>;
    /// `checkpoint_timeout`: the longest wait for the next checkpoint.
    fn checkpoint_timeout(&mut self) -> Duration;
    /// The file number database `db` gives relation `oid` now, `None` when it is gone.
    fn filenode_in(&mut self, db: &str, oid: u32) -> Result<Option<u32>, HostError>;
    /// `pg_is_in_recovery()`: a standby.
    fn in_recovery(&mut self) -> Result<bool, HostError>;
    /// `pg_wal_replay_pause()`.
    fn pause_replay(&mut self) -> Result<(), HostError>;
    /// `pg_wal_replay_resume()`.
    fn resume_replay(&mut self) -> Result<(), HostError>;
    /// `pg_get_wal_replay_pause_state() = 'paused'`: replay has stopped, not only been asked to.
    fn replay_paused(&mut self) -> Result<bool, HostError>;
    /// `pg_last_wal_replay_lsn()` and `pg_last_wal_receive_lsn()` (none without streaming).
    fn replay_position(&mut self) -> Result<(u64, Option<u64>), HostError>;
}
