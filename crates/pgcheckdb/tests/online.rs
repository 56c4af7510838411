//! `verify --online` on a running PostgreSQL 14-18 primary under `pgbench` write load with
//! autovacuum on, a 30 s checkpoint_timeout and CREATE / TRUNCATE / VACUUM FULL / DROP of
//! other tables in a loop: every run, at the physical and standard levels, with and without a
//! connection, has no error finding but the damage injected while the server runs into tables
//! it never touches (a flipped byte: `checksum_mismatch` at its block, or without data checksums
//! (PostgreSQL 18 here) a pd_special that is not MAXALIGNed: `invalid_header`; a `pd_lsn` beyond
//! the end of WAL with its checksum recomputed: `page_lsn_in_future` when a connection is given).
//!
//! A streaming standby (PostgreSQL 16) is checked the same way while its primary runs the load.
//!
//! Wall time: PostgreSQL 17 carries the long run (3 minutes of load), the other versions and the
//! standby a 40-second one; all use pgbench scale 20.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{Cluster, ClusterOptions};

/// The block of `cold_bad` whose byte is flipped (checksum left stale).
const FLIPPED_BLOCK: u64 = 3;
/// The block of `cold_lsn` whose `pd_lsn` is set beyond the end of WAL (checksum recomputed).
const FUTURE_BLOCK: u64 = 2;

/// A primary with or without data checksums, pgbench scale 20 and two frozen, checkpointed
/// tables the load never touches.
fn loaded_primary(major: u32, checksums: bool) -> Cluster {
    let opts = ClusterOptions::new(major, checksums)
        .setting("checkpoint_timeout", "30s")
        .setting("max_wal_size", "256MB")
        .setting("autovacuum_naptime", "5s");
    let mut c = Cluster::init_temp(&opts).expect("initdb");
    c.start().expect("start");
    c.pgbench("postgres", &["-i", "-q", "-s", "20"])
        .expect("pgbench -i");
    c.psql(
        "postgres",
        "CREATE TABLE cold_bad AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 3000) g; \
         CREATE TABLE cold_lsn AS SELECT g AS id, repeat('y', 200) AS pad FROM generate_series(1, 3000) g; \
         VACUUM FREEZE cold_bad; VACUUM FREEZE cold_lsn; CHECKPOINT;",
    )
    .expect("cold tables");
    c
}

/// Damages the two cold tables in place while the server runs; returns their files and the
/// kind the first damage is found as.
fn inject_damage(c: &Cluster) -> (String, String, &'static str) {
    let bad = c.relation_filepath("postgres", "cold_bad").expect("path");
    let lsn = c.relation_filepath("postgres", "cold_lsn").expect("path");
    let dir = c.datadir();
    if !c.checksums() {
        // No checksum to fail: pd_special made odd (not MAXALIGNed).
        common::edit(&dir.join(&bad), FLIPPED_BLOCK, |page| {
            page[16..18].copy_from_slice(&8191u16.to_le_bytes());
        });
    } else {
        flip_byte(&dir.join(&bad));
    }
    // pd_lsn far beyond the end of WAL (xlogid 0x7000), checksum recomputed.
    common::edit(&dir.join(&lsn), FUTURE_BLOCK, |page| {
        page[0..4].copy_from_slice(&0x7000u32.to_le_bytes());
    });
    let kind = if c.checksums() {
        "checksum_mismatch"
    } else {
        "invalid_header"
    };
    (bad, lsn, kind)
}

/// A flipped byte in the tuple data of [`FLIPPED_BLOCK`], checksum left as it was.
fn flip_byte(path: &std::path::Path) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open cold_bad");
    use std::os::unix::fs::FileExt;
    let at = FLIPPED_BLOCK * 8192 + 5000;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read");
    b[0] ^= 0x5A;
    f.write_all_at(&b, at).expect("write");
}

fn verify_online(c: &Cluster, level: &str, connect: bool) -> Run {
    let d = c.datadir().display().to_string();
    let conninfo = c.conninfo();
    let extra: &[&str] = if connect {
        &["--dbname", conninfo.as_str()]
    } else {
        &[]
    };
    common::verify_json(&["-D", &d, "--online"], level, extra, c.user())
}

/// Every error finding as `(kind, file, block)`.
fn errors(run: &Run) -> BTreeSet<(String, String, u64)> {
    run.findings
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| {
            (
                f["kind"].as_str().unwrap_or("?").to_string(),
                f["file"].as_str().unwrap_or("?").to_string(),
                f["block"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

/// Sets the flag when dropped (also while a panic unwinds).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// CREATE, fill, TRUNCATE, VACUUM FULL and DROP tables the verify runs did not plan for, until
/// `stop`.
fn churn(c: &Cluster, stop: &AtomicBool) {
    let mut i = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let t = format!("churn_{}", i % 4);
        let sql = format!(
            "DROP TABLE IF EXISTS {t}; \
             CREATE TABLE {t} AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 20000) g; \
             CREATE INDEX ON {t} (v); \
             DELETE FROM {t} WHERE id % 3 = 0; VACUUM {t}; \
             VACUUM FULL {t}; TRUNCATE {t}; \
             INSERT INTO {t} SELECT g, md5(g::text) FROM generate_series(1, 5000) g;"
        );
        c.psql("postgres", &sql).expect("churn");
        i += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn online_under_load(major: u32, load_secs: u64, checksums: bool) {
    let c = loaded_primary(major, checksums);
    verify_under_load(major, &c, &c, load_secs);
}

/// A streaming standby of a loaded primary, checked while the primary runs the load.
fn standby_under_load(major: u32, load_secs: u64) {
    let primary = loaded_primary(major, true);
    let mut standby = Cluster::standby_of(&primary).expect("pg_basebackup -R");
    standby.start().expect("start standby");
    standby.wait_for_replay(&primary).expect("standby replay");
    verify_under_load(major, &primary, &standby, load_secs);
    let in_recovery = standby
        .query_value("postgres", "SELECT pg_is_in_recovery()")
        .expect("pg_is_in_recovery");
    assert_eq!(in_recovery, "t", "the standby was checked in recovery");
}

/// Runs the load on `primary` for `load_secs` and `verify --online` on `c` (the primary or a
/// standby of it) again and again meanwhile.
fn verify_under_load(major: u32, primary: &Cluster, c: &Cluster, load_secs: u64) {
    let (bad, lsn, kind) = inject_damage(c);
    let flipped = (kind.to_string(), bad.clone(), FLIPPED_BLOCK);
    let future = ("page_lsn_in_future".to_string(), lsn.clone(), FUTURE_BLOCK);
    let secs = load_secs.to_string();
    let mut bench = primary
        .spawn_pgbench("postgres", &["-c", "4", "-j", "2", "-T", &secs, "-n"])
        .expect("pgbench");
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(load_secs);
    let mut runs = 0;
    let mut in_flux = 0;
    let mut rechecked = 0;
    std::thread::scope(|s| {
        s.spawn(|| churn(primary, &stop));
        // A failed assertion must stop the churn too, or the scope never ends.
        let _stop_churn = StopOnDrop(&stop);
        let mut i = 0;
        while Instant::now() < deadline || runs < 4 {
            let (level, connect) = [
                ("physical", false),
                ("standard", true),
                ("standard", false),
                ("physical", true),
            ][i % 4];
            i += 1;
            let run = verify_online(c, level, connect);
            let what = format!("PostgreSQL {major}, run {runs}, {level}, connection {connect}");
            assert_eq!(run.status, 2, "{what}: {run}");
            let mut expected = BTreeSet::from([flipped.clone()]);
            if connect {
                expected.insert(future.clone());
            }
            assert_eq!(errors(&run), expected, "{what}: {run}");
            let summary = run.summary();
            assert_eq!(summary["online"], true, "{what}: {run}");
            assert_eq!(summary["connection"], connect, "{what}: {run}");
            assert!(summary["start_redo_lsn"].is_string(), "{what}: {run}");
            in_flux += summary["in_flux_blocks"].as_u64().expect("in_flux_blocks");
            rechecked += summary["rechecked_blocks"]
                .as_u64()
                .expect("rechecked_blocks");
            runs += 1;
        }
    });
    let status = bench.wait().expect("wait pgbench");
    assert!(status.success(), "pgbench failed: {status}");
    eprintln!(
        "PostgreSQL {major}: {runs} online runs under load, {rechecked} block(s) re-checked, {in_flux} in flux"
    );
}

#[test]
fn online_under_load_pg14() {
    online_under_load(14, 40, true);
}

#[test]
fn online_under_load_pg15() {
    online_under_load(15, 40, true);
}

#[test]
fn online_under_load_pg16() {
    online_under_load(16, 40, true);
}

#[test]
fn online_under_load_pg17_three_minutes() {
    online_under_load(17, 180, true);
}

#[test]
fn online_under_load_pg18_no_checksums() {
    online_under_load(18, 40, false);
}

#[test]
fn online_standby_under_load_pg16() {
    standby_under_load(16, 40);
}

#[test]
fn running_cluster_without_online_is_refused_naming_it() {
    let opts = ClusterOptions::new(17, true);
    let mut c = Cluster::init_temp(&opts).expect("initdb");
    c.start().expect("start");
    let d = c.datadir().display().to_string();
    let run = run::pgcheckdb(&common::bin(), &["verify", "-D", &d], c.user());
    assert_eq!(run.status, 1, "{run}");
    assert!(run.stderr.contains("--online"), "{run}");
    assert!(!run.stderr.contains("not supported"), "{run}");
    let ext = run::pgcheckdb(
        &common::bin(),
        &["verify", "-D", &d, "--online", "--level", "extended"],
        c.user(),
    );
    assert_eq!(ext.status, 1, "{ext}");
    assert_eq!(ext.stderr.trim().lines().count(), 1, "{ext}");
    // A crashed cluster is no running server: --online refuses it too.
    c.stop_immediate().expect("crash");
    let crashed = run::pgcheckdb(&common::bin(), &["verify", "-D", &d, "--online"], c.user());
    assert_eq!(crashed.status, 1, "{crashed}");
    assert!(crashed.stderr.contains("running"), "{crashed}");
    // A cleanly stopped one is checked offline, saying so.
    c.start().expect("restart");
    c.stop().expect("stop");
    let stopped = run::pgcheckdb(&common::bin(), &["verify", "-D", &d, "--online"], c.user());
    assert_eq!(stopped.status, 0, "{stopped}");
    assert!(stopped.stderr.contains("checking it offline"), "{stopped}");
}
