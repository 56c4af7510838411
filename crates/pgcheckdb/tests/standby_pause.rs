//! `verify --online --dbname ... --pause-replay` on a streaming standby whose primary runs
//! pgbench: replay paused, the files checked at every level (the extended one included) as
//! they stand, damage found at its block, replay resumed at the end, on SIGINT, on SIGTERM and
//! when `--max-pause` runs out; a primary is refused.

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgcheckdb_testkit::asserts::{assert_problems, assert_status, key};
use pgcheckdb_testkit::run::{Key, Run};
use pgcheckdb_testkit::{loaded, Cluster, ClusterOptions};

const DAMAGED: u64 = 3;

const COLD: &str =
    "CREATE TABLE cold AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 5000) g;
CREATE INDEX cold_t ON cold (t);
VACUUM FREEZE cold;
CHECKPOINT;";

/// A primary (checksums, pgbench scale 2, `cold`) and its running standby, caught up.
fn primary_and_standby(major: u32) -> (Cluster, Cluster) {
    let opts = ClusterOptions::new(major, true);
    let primary = loaded::pgbench_primary(&opts, 2, COLD);
    let mut standby = Cluster::standby_of(&primary).expect("standby");
    standby.start().expect("start standby");
    standby.wait_for_replay(&primary).expect("replay");
    (primary, standby)
}

/// Flips a byte of block [`DAMAGED`] of `cold` in the standby's files (the standby never read
/// it: no buffer holds it).
fn damage_cold(primary: &Cluster, standby: &Cluster) -> Key {
    let file = primary.relation_filepath("postgres", "cold").expect("path");
    let path = standby.datadir().join(&file);
    let mut page = common::read_block(&path, DAMAGED);
    page[4000] ^= 0x5A;
    common::write_block(&path, DAMAGED, &page, false);
    key("checksum_mismatch", &file, DAMAGED)
}

fn args(standby: &Cluster, level: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "verify",
        "-D",
        &standby.datadir().display().to_string(),
        "--online",
        "--dbname",
        &format!("{} dbname=postgres", standby.conninfo()),
        "--pause-replay",
        "--level",
        level,
        "--format",
        "json",
        "--no-progress",
    ]
    .map(String::from)
    .to_vec();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn pause_state(standby: &Cluster) -> String {
    standby
        .query_value("postgres", "SELECT pg_get_wal_replay_pause_state()")
        .expect("pause state")
}

fn paused_standby(major: u32) {
    let (primary, mut standby) = primary_and_standby(major);
    let expected: BTreeSet<Key> = [damage_cold(&primary, &standby)].into_iter().collect();
    let mut bench = primary
        .spawn_pgbench("postgres", &["-c", "2", "-T", "3600", "-n"])
        .expect("pgbench");
    std::thread::sleep(Duration::from_secs(2));
    for level in ["physical", "standard", "extended"] {
        let what = format!("PostgreSQL {major} paused standby, {level}");
        let run: Run = pgcheckdb_testkit::run::pgcheckdb(
            &common::bin(),
            &args(&standby, level, &[]),
            standby.user(),
        );
        assert_status(&run, 2, &what);
        assert_problems(&run, &expected, &what);
        let s = run.summary();
        assert_eq!(s["crash_recovery"]["paused_standby"], true, "{run}");
        assert_eq!(s["crash_recovery"]["rule"], "wal_block_set", "{run}");
        assert!(s["replay_paused_at_lsn"].is_string(), "{run}");
        assert!(s["replay_lag_bytes"].is_u64(), "{run}");
        assert!(s["pause_seconds"].as_f64().unwrap_or(-1.0) >= 0.0, "{run}");
        if level == "extended" {
            let ext = run.extended();
            assert!(
                ext["tid_indexes_checked"].as_u64().unwrap_or(0) >= 1,
                "{ext}"
            );
            assert!(ext["forks_in_flux"].as_u64().unwrap_or(0) >= 4, "{ext}");
        }
        assert_eq!(
            pause_state(&standby),
            "not paused",
            "{what}: replay resumed"
        );
    }
    let ended = bench.try_wait().expect("pgbench status");
    assert!(ended.is_none(), "pgbench ended during the runs: {ended:?}");
    let _ = bench.kill();
    let _ = bench.wait();
    standby.stop().expect("stop standby");
}

pgcheckdb_testkit::version_tests! {
    paused_standby;
    paused_standby_pg14(14),
    paused_standby_pg15(15),
    paused_standby_pg16(16),
    paused_standby_pg17(17),
    paused_standby_pg18(18),
    paused_standby_pg19(19),
}

/// A slow run (`--max-rate`) of the standby, started in the background.
fn spawn_slow(standby: &Cluster, extra: &[&str]) -> Child {
    let mut cmd = Command::new(common::bin());
    cmd.args(args(
        standby,
        "extended",
        &[&["--max-rate", "0.2"], extra].concat(),
    ))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(user) = standby.user() {
        user.apply(&mut cmd);
        cmd.current_dir("/");
    }
    cmd.spawn().expect("spawn verify")
}

/// Waits until the standby reports its replay paused.
fn wait_paused(standby: &Cluster) {
    let start = Instant::now();
    while pause_state(standby) != "paused" {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "replay never paused"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Replay is resumed on SIGINT and SIGTERM (exit 130, 143), and when `--max-pause` runs out
/// (a tool error naming it); a primary is refused.
#[test]
fn replay_is_resumed_on_every_way_out_pg17() {
    let (primary, mut standby) = primary_and_standby(17);
    for (signal, status) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let child = spawn_slow(&standby, &[]);
        wait_paused(&standby);
        // SAFETY: sends a signal to the child this test started.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(status), "{out:?}");
        assert_eq!(pause_state(&standby), "not paused", "after signal {signal}");
    }
    let child = spawn_slow(&standby, &["--max-pause", "2s"]);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--max-pause"), "{stderr}");
    assert_eq!(pause_state(&standby), "not paused", "after --max-pause");
    // A primary has no replay to pause.
    let run = pgcheckdb_testkit::run::pgcheckdb(
        &common::bin(),
        &args(&primary, "standard", &[]),
        primary.user(),
    );
    assert_status(&run, 1, "--pause-replay on a primary");
    assert!(run.stderr.contains("not in recovery"), "{run}");
    standby.stop().expect("stop standby");
}
