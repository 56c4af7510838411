//! `verify` on crashed clusters (docs/CHECKS.md, "The consistency rule"): a primary stopped
//! with `pg_ctl stop -m immediate` under pgbench and DDL churn (CREATE/DROP/TRUNCATE, VACUUM
//! FULL, CREATE INDEX CONCURRENTLY, an unlogged table) is checked at every level without being
//! started: no false finding, the damage planted before the crash in a table nothing wrote
//! found at its block, what crash recovery rewrites counted; started, recovered and stopped,
//! the same cluster gives the same findings.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use pgcheckdb_testkit::asserts::{assert_problems, assert_status, key};
use pgcheckdb_testkit::run::{Key, Run};
use pgcheckdb_testkit::{loaded, Cluster, ClusterOptions};

const LEVELS: [&str; 3] = ["physical", "standard", "extended"];
/// The block of `cold` that is damaged.
const DAMAGED: u64 = 3;

/// A table nothing writes after it is made (`cold`, with a B-tree, a hash and a GIN index), an
/// unlogged table the churn writes, and pgbench's tables (scale 2).
const SCHEMA: &str = "
CREATE TABLE cold AS SELECT g AS id, md5(g::text) AS t, ARRAY[g % 7, g % 11] AS a
  FROM generate_series(1, 3000) g;
CREATE INDEX cold_t ON cold (t);
CREATE INDEX cold_h ON cold USING hash (id);
CREATE INDEX cold_a ON cold USING gin (a);
CREATE UNLOGGED TABLE ul (id int, t text);
CREATE INDEX ul_id ON ul (id);
VACUUM (FREEZE, ANALYZE) cold;
CHECKPOINT;
";

/// One pgbench transaction of DDL churn; pgbench sends each command on its own, so
/// `CREATE INDEX CONCURRENTLY` runs outside a transaction block.
const CHURN: &str = "\\set n random(1, 1000000000)
CREATE TABLE churn_:n (a int, b text);
INSERT INTO churn_:n SELECT g, md5(g::text) FROM generate_series(1, 400) g;
CREATE INDEX ON churn_:n (b);
TRUNCATE churn_:n;
INSERT INTO churn_:n SELECT g, md5(g::text) FROM generate_series(1, 200) g;
CREATE INDEX CONCURRENTLY churn_ci_:n ON churn_:n (a);
INSERT INTO ul SELECT g, md5(g::text) FROM generate_series(1, 200) g;
VACUUM FULL pgbench_tellers;
DROP TABLE churn_:n;
";

/// Damages block [`DAMAGED`] of `cold` in the stopped cluster: a flipped byte with checksums
/// (`checksum_mismatch`), else a `pd_upper` past `pd_special` (the page header check).
fn damage(c: &Cluster, file: &str, checksums: bool) -> Key {
    let path = c.datadir().join(file);
    let mut page = common::read_block(&path, DAMAGED);
    let found = if checksums {
        page[4000] ^= 0x5A;
        key("checksum_mismatch", file, DAMAGED)
    } else {
        page[14..16].copy_from_slice(&0x2100u16.to_le_bytes());
        key("invalid_header", file, DAMAGED)
    };
    common::write_block(&path, DAMAGED, &page, false);
    found
}

/// Runs pgbench (4 clients) and the churn (1 client) for a few seconds, then stops the server
/// with `-m immediate` while both still run.
fn crash_under_load(c: &mut Cluster) {
    let dir = c.make_dir("churn").expect("script dir");
    let script = dir.join("churn.sql");
    fs::write(&script, CHURN).expect("churn script");
    let s = script.display().to_string();
    let mut bench = c
        .spawn_pgbench("postgres", &["-c", "4", "-j", "2", "-T", "3600", "-n"])
        .expect("pgbench");
    let mut churn = c
        .spawn_pgbench("postgres", &["-c", "1", "-T", "3600", "-n", "-f", &s])
        .expect("churn");
    std::thread::sleep(Duration::from_secs(6));
    let running = (
        bench.try_wait().expect("status"),
        churn.try_wait().expect("status"),
    );
    assert!(
        matches!(running, (None, None)),
        "the load ended before the crash: {running:?}"
    );
    c.stop_immediate().expect("crash");
    for child in [&mut bench, &mut churn] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn verify(c: &Cluster, level: &str, extra: &[&str]) -> Run {
    let d = c.datadir().display().to_string();
    common::verify_json(&["-D", &d], level, extra, c.user())
}

fn crashed_cluster(major: u32, checksums: bool) {
    let opts = ClusterOptions::new(major, checksums).setting("checkpoint_timeout", "30s");
    let mut c = loaded::pgbench_primary(&opts, 2, SCHEMA);
    let cold = c.relation_filepath("postgres", "cold").expect("cold path");
    c.stop().expect("stop");
    let expected: BTreeSet<Key> = [damage(&c, &cold, checksums)].into_iter().collect();
    c.start().expect("start");
    crash_under_load(&mut c);
    let what = |level: &str| format!("PostgreSQL {major} (checksums {checksums}) crashed, {level}");
    for level in LEVELS {
        let run = verify(&c, level, &[]);
        assert_status(&run, 2, &what(level));
        assert_problems(&run, &expected, &what(level));
        let crash = &run.summary()["crash_recovery"];
        assert_eq!(crash["state"], "in production", "{run}");
        assert_eq!(crash["rule"], "wal_block_set", "{run}");
        assert!(crash["wal_blocks"].as_u64().unwrap_or(0) > 10, "{run}");
        assert!(crash["wal_relations"].as_u64().unwrap_or(0) >= 4, "{run}");
        assert!(
            run.stderr.is_empty() || !run.stderr.contains("error"),
            "{run}"
        );
        if level == "extended" {
            let ext = run.extended();
            // pgbench's tables, the churn's and the unlogged table are in flux; cold is not.
            assert!(ext["forks_in_flux"].as_u64().unwrap_or(0) >= 8, "{ext}");
            assert!(
                ext["btree_indexes_in_flux"].as_u64().unwrap_or(0) >= 3,
                "{ext}"
            );
            assert!(
                ext["index_graphs_checked"].as_u64().unwrap_or(0) >= 2,
                "{ext}"
            );
            assert!(
                ext["tid_indexes_checked"].as_u64().unwrap_or(0) >= 3,
                "{ext}"
            );
            assert!(
                ext["visibility_maps_checked"].as_u64().unwrap_or(0) >= 1,
                "{ext}"
            );
        }
    }
    // The text output says what was set aside and why.
    let d = c.datadir().display().to_string();
    let text = pgcheckdb_testkit::run::pgcheckdb(
        &common::bin(),
        &["verify", "-D", &d, "--no-progress"],
        c.user(),
    );
    assert!(
        text.stdout
            .contains("checked as crash recovery will find it"),
        "{text}"
    );
    // Recovered and shut down cleanly: the same findings, and nothing set aside.
    c.start().expect("crash recovery");
    c.stop().expect("stop");
    for level in LEVELS {
        let run = verify(&c, level, &[]);
        assert_status(&run, 2, &format!("{} after recovery", what(level)));
        assert_problems(&run, &expected, &format!("{} after recovery", what(level)));
        assert!(run.summary().get("crash_recovery").is_none(), "{run}");
    }
}

pgcheckdb_testkit::version_tests! {
    crashed_cluster;
    crashed_pg14(14, true),
    crashed_pg15(15, true),
    crashed_pg16(16, true),
    crashed_pg17(17, true),
    crashed_pg18(18, true),
    crashed_pg19(19, true),
    crashed_no_checksums_pg16(16, false),
    crashed_no_checksums_pg19(19, false),
}

/// Without the WAL from the redo point, PostgreSQL could not recover the cluster: pages newer
/// than the redo point are set aside, and nothing is judged across pages.
#[test]
fn crashed_without_its_wal_judges_by_page_lsn() {
    let opts = ClusterOptions::new(17, true).setting("checkpoint_timeout", "30s");
    let mut c = loaded::pgbench_primary(&opts, 1, SCHEMA);
    crash_under_load(&mut c);
    let wal = c.datadir().join("pg_wal");
    for entry in fs::read_dir(&wal).expect("pg_wal") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            fs::remove_file(&path).expect("remove WAL segment");
        }
    }
    let run = verify(&c, "extended", &[]);
    assert_status(&run, 0, "crashed without WAL");
    assert_eq!(run.summary()["crash_recovery"]["rule"], "page_lsn", "{run}");
    let ext = run.extended();
    assert_eq!(ext["tid_indexes_checked"], 0, "{ext}");
    assert_eq!(ext["index_graphs_checked"], 0, "{ext}");
}

/// A server whose `postmaster.pid` is out of sight (removed here; in another PID namespace it
/// names a process this one cannot see) looks crashed, but keeps writing: the WAL grows while
/// the files are read, and the run ends with a tool error instead of a verdict.
#[test]
fn a_running_server_without_its_lock_file_is_caught() {
    let opts = ClusterOptions::new(17, true).setting("checkpoint_timeout", "30s");
    let mut c = loaded::pgbench_primary(&opts, 2, SCHEMA);
    let mut bench = c
        .spawn_pgbench("postgres", &["-c", "2", "-T", "3600", "-n"])
        .expect("pgbench");
    std::thread::sleep(Duration::from_secs(1));
    let pid_file = c.datadir().join("postmaster.pid");
    let hidden = c.datadir().join("postmaster.pid.hidden");
    fs::rename(&pid_file, &hidden).expect("hide postmaster.pid");
    // Slow enough (2 MB/s over ~40 MB) that pgbench writes WAL during the scan.
    let run = verify(&c, "standard", &["--max-rate", "2"]);
    fs::rename(&hidden, &pid_file).expect("restore postmaster.pid");
    let _ = bench.kill();
    let _ = bench.wait();
    assert_status(&run, 1, "a running server without postmaster.pid");
    assert!(run.stderr.contains("changed while it was read"), "{run}");
    // The postmaster looks for its lock file once a minute and stops at once when it is gone:
    // it may have stopped already.
    let _ = c.stop();
}
