//! `verify --online --dbname ... --pause-replay`: a standby whose WAL replay this run pauses, so
//! that its files stand still at one point of the WAL and are checked at full depth, as a
//! crashed cluster is (docs/CHECKS.md, "The consistency rule"). Replay is resumed on every way
//! out: at the end, on an error, on SIGINT or SIGTERM (the run stops and drops the
//! [`ReplayPause`]), and by a watchdog with a connection of its own when `--max-pause` runs out.
//! Only `SIGKILL` leaves replay paused (the summary of every run says when it paused).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::error::VerifyError;
use super::host::Server;

/// How long replay may take to stop after `pg_wal_replay_pause()` (it finishes the record it
/// applies).
const PAUSE_WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

/// A standby's replay, paused by this run.
pub struct ReplayPause {
    since: Instant,
    /// `pg_last_wal_replay_lsn()` once paused: where the files stand.
    pub replay_lsn: u64,
    /// `pg_last_wal_receive_lsn()` then: WAL received but not replayed.
    pub receive_lsn: Option<u64>,
    /// Set by the watchdog when `--max-pause` ran out and it resumed replay.
    expired: Arc<AtomicBool>,
    stop: Option<mpsc::Sender<()>>,
    watchdog: Option<JoinHandle<()>>,
}

impl ReplayPause {
    /// Pauses replay on `server` (a standby), waits until it stopped, and starts the watchdog
    /// on `guard` (a second connection to the same server) that resumes it after `max`.
    pub fn start(
        server: &mut dyn Server,
        guard: Box<dyn Server + Send>,
        max: Duration,
    ) -> Result<ReplayPause, VerifyError> {
        if !server.in_recovery()? {
            return Err(VerifyError::Refused(
                "--pause-replay pauses a standby's WAL replay; the server reached with --dbname is not in recovery (a primary)".into(),
            ));
        }
        server.pause_replay()?;
        let asked = Instant::now();
        while !server.replay_paused()? {
            if asked.elapsed() > PAUSE_WAIT {
                let _ = server.resume_replay();
                return Err(VerifyError::Refused(format!(
                    "WAL replay did not pause within {} s; it was resumed",
                    PAUSE_WAIT.as_secs()
                )));
            }
            std::thread::sleep(POLL);
        }
        let (replay_lsn, receive_lsn) = server.replay_position()?;
        let expired = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel();
        let watchdog = watch(guard, max, stopped, Arc::clone(&expired));
        Ok(ReplayPause {
            since: Instant::now(),
            replay_lsn,
            receive_lsn,
            expired,
            stop: Some(stop),
            watchdog: Some(watchdog),
        })
    }

    /// The flag the watchdog sets when `--max-pause` ran out.
    pub fn expired(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.expired)
    }

    /// How long replay has been paused.
    pub fn paused_for(&self) -> Duration {
        self.since.elapsed()
    }

    /// After the scan: replay must still be paused where it stopped, or the files moved
    /// under the checks.
    pub fn check_still(&self, server: &mut dyn Server, max: Duration) -> Result<(), String> {
        if self.expired.load(Ordering::SeqCst) {
            return Err(format!(
                "WAL replay was resumed after --max-pause ({} s) ran out, before the checks ended: the files changed under them and nothing is concluded; allow a longer pause or narrow the run",
                max.as_secs()
            ));
        }
        let now = server.replay_position().map_err(|e| e.to_string())?.0;
        let paused = server.replay_paused().map_err(|e| e.to_string())?;
        if !paused || now != self.replay_lsn {
            return Err(
                "WAL replay went on during the run (someone resumed it): the files changed under the checks and nothing is concluded".into(),
            );
        }
        Ok(())
    }

    /// Resumes replay on `server` and stops the watchdog.
    pub fn resume(&mut self, server: &mut dyn Server) -> Result<(), VerifyError> {
        self.stop_watchdog();
        server.resume_replay()?;
        Ok(())
    }

    fn stop_watchdog(&mut self) {
        drop(self.stop.take());
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
    }
}

impl Drop for ReplayPause {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

/// The watchdog: resumes replay through `guard` when `max` passes before it is told to stop
/// (the sender dropped), and always once it stops, so that replay never stays paused after
/// the run, whatever way it ends.
fn watch(
    mut guard: Box<dyn Server + Send>,
    max: Duration,
    stopped: mpsc::Receiver<()>,
    expired: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(max) {
            expired.store(true, Ordering::SeqCst);
        }
        let _ = guard.resume_replay();
    })
}
