//! Clean-up on Ctrl-C. Every cluster a bench makes is wrapped in a [`Guarded`], which records
//! how to stop it (`pg_ctl -m immediate stop`) and where its work directory is. The SIGINT /
//! SIGTERM handler (installed once by [`install_handler`]) stops every recorded cluster, removes
//! its directory and exits with status 130. Normal exits go through `Drop` as usual.

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use anyhow::{Context, Result};
use pgcheckdb_cluster::{Cluster, ClusterOptions};

/// Exit status after an interrupt (docs/OUTPUT.md, "Exit status").
pub const EXIT_INTERRUPTED: i32 = 130;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static LIVE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// How to get rid of one cluster from the signal handler.
struct Entry {
    id: u64,
    stop: Command,
    work_dir: PathBuf,
}

/// True once Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Installs the Ctrl-C handler (once per process).
pub fn install_handler() -> Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        result = ctrlc::set_handler(on_interrupt).context("could not install the Ctrl-C handler");
    });
    result
}

fn on_interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
    eprintln!("pgcheckdb: interrupted, stopping the benchmark clusters");
    cleanup_all();
    std::process::exit(EXIT_INTERRUPTED);
}

/// Stops every live cluster and removes its work directory.
fn cleanup_all() {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    for entry in live.iter_mut() {
        let _ = entry
            .stop
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&entry.work_dir);
    }
    live.clear();
}

/// A cluster that the Ctrl-C handler knows how to stop and remove.
#[derive(Debug)]
pub struct Guarded {
    /// Always `Some` until dropped.
    cluster: Option<Cluster>,
    id: u64,
}

impl Guarded {
    /// `initdb` a new cluster in a temporary directory and record it.
    pub fn init(opts: &ClusterOptions) -> Result<Guarded> {
        let cluster = Cluster::init_temp(opts).with_context(|| {
            format!(
                "could not create a PostgreSQL {} cluster (checksums {})",
                opts.major,
                if opts.checksums { "on" } else { "off" }
            )
        })?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut stop = cluster.command("pg_ctl");
        stop.arg("-D")
            .arg(cluster.datadir())
            .args(["-m", "immediate", "-w", "stop"]);
        let entry = Entry {
            id,
            stop,
            work_dir: cluster.work_dir().to_path_buf(),
        };
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
        Ok(Guarded {
            cluster: Some(cluster),
            id,
        })
    }
}

impl Deref for Guarded {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        self.cluster.as_ref().expect("cluster present until drop")
    }
}

impl DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Cluster {
        self.cluster.as_mut().expect("cluster present until drop")
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // The cluster's own Drop stops the server and removes the directory; only then is the
        // handler's entry removed, so an interrupt during the stop still cleans up.
        drop(self.cluster.take());
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|e| e.id != self.id);
    }
}
