//! `verify --online` on a running PostgreSQL 14-19 primary under `pgbench` write load with
//! autovacuum on, a 30 s checkpoint_timeout and CREATE / TRUNCATE / VACUUM FULL / DROP of
//! other tables in a loop: every run, at the physical and standard levels, with and without a
//! connection, has no error finding but the damage injected while the server runs into tables
//! it never touches (a flipped byte: `checksum_mismatch` at its block, or without data checksums
//! (PostgreSQL 18 here) a pd_special that is not MAXALIGNed: `invalid_header`; a `pd_lsn` beyond
//! the end of WAL with its checksum recomputed: `page_lsn_in_future` when a connection is given).
//!
//! With a connection, the standard level's runs ask the server for commit statuses `pg_xact` on
//! disk does not show yet, and a HOT chain judged only with them is found; a failing page in
//! flux is judged after the next checkpoint, asked for or waited for.
//!
//! Streaming standbys (PostgreSQL 16, 18 and 19) are checked the same way while their primary runs
//! the load.
//!
//! Wall time: every version and standby runs 3 minutes of load (pgbench scale 20); the test
//! harness runs two of them at a time.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{loaded, Cluster, ClusterOptions};

/// How long each load runs: three minutes, with `verify --online` repeated throughout.
const LOAD_SECS: u64 = 180;

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
    let cold = "CREATE TABLE cold_bad AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 3000) g; \
                CREATE TABLE cold_lsn AS SELECT g AS id, repeat('y', 200) AS pad FROM generate_series(1, 3000) g; \
                VACUUM FREEZE cold_bad; VACUUM FREEZE cold_lsn; CHECKPOINT;";
    loaded::pgbench_primary(&opts, 20, cold)
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
    flip_byte_of(path, FLIPPED_BLOCK);
}

/// A flipped byte in the tuple data of `block`, checksum left as it was.
fn flip_byte_of(path: &std::path::Path, block: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open the table's file");
    use std::os::unix::fs::FileExt;
    let at = block * 8192 + 5000;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read");
    b[0] ^= 0x5A;
    f.write_all_at(&b, at).expect("write");
}

fn verify_online(c: &Cluster, level: &str, connect: bool) -> Run {
    verify_online_with(c, level, connect, &[])
}

/// [`verify_online`] with more arguments.
fn verify_online_with(c: &Cluster, level: &str, connect: bool, more: &[&str]) -> Run {
    let d = c.datadir().display().to_string();
    let conninfo = c.conninfo();
    let mut extra: Vec<&str> = more.to_vec();
    if connect {
        extra.extend(["--dbname", conninfo.as_str()]);
    }
    common::verify_json(&["-D", &d, "--online"], level, &extra, c.user())
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

/// CREATE, fill, TRUNCATE, VACUUM FULL and DROP tables the verify runs did not plan for, and
/// write to an unlogged table's hash index (whose pages carry fake LSNs from 19 on), until
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
             INSERT INTO {t} SELECT g, md5(g::text) FROM generate_series(1, 5000) g; \
             CREATE UNLOGGED TABLE IF NOT EXISTS {UNLOGGED_HASHED} (id int); \
             CREATE INDEX IF NOT EXISTS {UNLOGGED_HASHED}_hash ON {UNLOGGED_HASHED} USING hash (id); \
             INSERT INTO {UNLOGGED_HASHED} SELECT g FROM generate_series(1, 1000) g; \
             DELETE FROM {UNLOGGED_HASHED} WHERE id % 2 = 0;"
        );
        c.psql("postgres", &sql).expect("churn");
        i += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The unlogged table [`churn`] writes through a hash index.
const UNLOGGED_HASHED: &str = "churn_unlogged";

fn online_under_load(major: u32, load_secs: u64, checksums: bool) {
    let c = loaded_primary(major, checksums);
    verify_under_load(major, &c, &c, load_secs);
    if major >= 19 {
        // The runs above saw an unlogged hash index with fake page LSNs (an unlogged-LSN
        // counter, not WAL positions; 18 left them 0/0): its metapage has one.
        c.psql("postgres", "CREATE EXTENSION IF NOT EXISTS pageinspect;")
            .expect("pageinspect");
        let lsn = c
            .query_value(
                "postgres",
                &format!("SELECT (page_header(get_raw_page('{UNLOGGED_HASHED}_hash', 0))).lsn"),
            )
            .expect("page_header of the unlogged hash index");
        assert_ne!(
            lsn, "0/0",
            "PostgreSQL {major}: the unlogged hash metapage has no fake LSN"
        );
    }
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
    let mut from_server = 0;
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
            let asked = &summary["xact_statuses_from_server"];
            if connect && level == "standard" {
                from_server += asked.as_u64().expect("xact_statuses_from_server");
            } else {
                assert!(asked.is_null(), "{what}: {run}");
            }
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
        "PostgreSQL {major}: {runs} online runs under load, {rechecked} block(s) re-checked, {in_flux} in flux, {from_server} transaction status(es) from the server"
    );
    // pgbench's transactions end faster than checkpoints write pg_xact out.
    assert!(from_server > 0, "no commit status was asked of the server");
}

pgcheckdb_testkit::version_tests! {
    online_under_load;
    online_under_load_pg14(14, LOAD_SECS, true),
    online_under_load_pg15(15, LOAD_SECS, true),
    online_under_load_pg16(16, LOAD_SECS, true),
    online_under_load_pg17(17, LOAD_SECS, true),
    online_under_load_pg18_no_checksums(18, LOAD_SECS, false),
    online_under_load_pg19(19, LOAD_SECS, true),
}

pgcheckdb_testkit::version_tests! {
    standby_under_load;
    online_standby_under_load_pg16(16, LOAD_SECS),
    online_standby_under_load_pg18(18, LOAD_SECS),
    online_standby_under_load_pg19(19, LOAD_SECS),
}

/// Sets `block` of the file at `path` to the server's current WAL insert position (newer than
/// the redo point, within WAL), checksum recomputed, then flips a byte of its tuple data, and
/// writes WAL after it: the page fails its checksum while it may be in flux.
fn damage_in_flux(c: &Cluster, path: &std::path::Path, block: u64) {
    let lsn = c
        .query_value("postgres", "SELECT pg_current_wal_insert_lsn()")
        .expect("insert LSN");
    let (hi, lo) = lsn.split_once('/').expect("an LSN");
    let hi = u32::from_str_radix(hi, 16).expect("LSN high half");
    let lo = u32::from_str_radix(lo, 16).expect("LSN low half");
    common::edit(path, block, |page| {
        page[0..4].copy_from_slice(&hi.to_le_bytes());
        page[4..8].copy_from_slice(&lo.to_le_bytes());
    });
    flip_byte_of(path, block);
    c.psql(
        "postgres",
        "INSERT INTO busy SELECT generate_series(1, 1000);",
    )
    .expect("WAL after the page's LSN");
}

/// A failing page with a `pd_lsn` newer than the redo point the scan began with is in flux:
/// from the files alone it is counted, not reported; with a connection it is read again after
/// the next checkpoint (waited for with `--no-checkpoint`, else asked for) and, still failing,
/// reported at its block.
#[test]
fn page_in_flux_is_judged_after_the_next_checkpoint() {
    let opts = ClusterOptions::new(15, true).setting("checkpoint_timeout", "30s");
    let mut c = Cluster::init_temp(&opts).expect("initdb");
    c.start().expect("start");
    c.psql(
        "postgres",
        "CREATE TABLE flux AS SELECT g AS id, repeat('z', 200) AS pad FROM generate_series(1, 1000) g; \
         CREATE TABLE busy (id int); VACUUM FREEZE flux; CHECKPOINT;",
    )
    .expect("tables");
    let file = c.relation_filepath("postgres", "flux").expect("path");
    let path = c.datadir().join(&file);
    damage_in_flux(&c, &path, 1);
    let at = |blocks: &[u64]| -> BTreeSet<(String, String, u64)> {
        blocks
            .iter()
            .map(|&b| ("checksum_mismatch".to_string(), file.clone(), b))
            .collect()
    };
    // Right after the checkpoint: no other one has begun since (checkpoint_timeout is 30 s).
    let files_only = verify_online(&c, "physical", false);
    assert_eq!(files_only.status, 0, "{files_only}");
    assert_eq!(files_only.summary()["in_flux_blocks"], 1, "{files_only}");
    let waited = verify_online_with(&c, "physical", true, &["--no-checkpoint"]);
    assert_eq!(waited.status, 2, "{waited}");
    assert_eq!(errors(&waited), at(&[1]), "{waited}");
    assert_eq!(waited.summary()["in_flux_blocks"], 0, "{waited}");
    assert!(
        waited.summary()["checkpoint_redo_lsn"].is_string(),
        "{waited}"
    );
    damage_in_flux(&c, &path, 2);
    let asked = verify_online(&c, "physical", true);
    assert_eq!(asked.status, 2, "{asked}");
    assert_eq!(errors(&asked), at(&[1, 2]), "{asked}");
    assert_eq!(asked.summary()["in_flux_blocks"], 0, "{asked}");
    assert!(
        asked.summary()["checkpoint_redo_lsn"].is_string(),
        "{asked}"
    );
}

/// With a connection, the standard level asks the server for the commit statuses `pg_xact` on
/// disk does not show yet (its pages reach disk at checkpoints): a HOT chain whose older
/// version's inserter aborted after the last checkpoint is found with it; from the files alone
/// that inserter's status is unknown and the chain cannot be judged.
#[test]
fn commit_status_the_files_lag_behind_is_asked_of_the_server() {
    let opts = ClusterOptions::new(17, true).setting("autovacuum", "off");
    let mut c = Cluster::init_temp(&opts).expect("initdb");
    c.start().expect("start");
    c.psql(
        "postgres",
        "CREATE TABLE chain (id int, v int) WITH (fillfactor = 50); INSERT INTO chain VALUES (1, 0);",
    )
    .expect("chain");
    c.psql("postgres", "UPDATE chain SET v = 1 WHERE id = 1;")
        .expect("HOT update");
    c.psql("postgres", "CHECKPOINT;").expect("checkpoint");
    // A transaction that aborts after the checkpoint: its status is in the server's memory only.
    let out = c
        .psql(
            "postgres",
            "\\t on\n\\a\nBEGIN;\nSELECT txid_current();\nROLLBACK;\n",
        )
        .expect("aborted transaction");
    let aborted: u32 = out.trim().parse().expect("txid_current");
    let file = c.relation_filepath("postgres", "chain").expect("path");
    // The older version (line pointer 1) now claims that aborted inserter, without hint bits.
    common::edit(&c.datadir().join(&file), 0, |page| {
        let lp = u32::from_le_bytes(page[24..28].try_into().expect("4 bytes"));
        let at = (lp & 0x7FFF) as usize;
        page[at..at + 4].copy_from_slice(&aborted.to_le_bytes());
        let mask = u16::from_le_bytes(page[at + 20..at + 22].try_into().expect("2 bytes"));
        page[at + 20..at + 22].copy_from_slice(&(mask & !0x0300).to_le_bytes());
    });
    let chain_errors = |run: &Run| {
        run.findings
            .iter()
            .filter(|f| f["severity"] == "error" && f["file"] == file.as_str())
            .count()
    };
    let files_only = verify_online(&c, "standard", false);
    assert_eq!(files_only.status, 0, "{files_only}");
    assert!(
        files_only.summary()["xact_statuses_from_server"].is_null(),
        "{files_only}"
    );
    let asked = verify_online(&c, "standard", true);
    assert_eq!(asked.status, 2, "{asked}");
    assert_eq!(chain_errors(&asked), 1, "{asked}");
    let found = &asked.findings[0];
    assert_eq!(found["kind"], "hot_chain_invalid", "{asked}");
    assert_eq!(found["block"], 0, "{asked}");
    assert!(
        found["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("aborted xmin {aborted}"))),
        "{asked}"
    );
    let from_server = asked.summary()["xact_statuses_from_server"]
        .as_u64()
        .expect("xact_statuses_from_server");
    assert!(from_server >= 1, "{asked}");
}

/// A connection to a server that runs another cluster is refused: its end of WAL and commit
/// statuses would be judged against the wrong files.
#[test]
fn a_connection_to_another_cluster_is_refused() {
    let opts = ClusterOptions::new(17, true);
    let mut mine = Cluster::init_temp(&opts).expect("initdb");
    mine.start().expect("start");
    let mut other = Cluster::init_temp(&opts).expect("initdb");
    other.start().expect("start");
    let d = mine.datadir().display().to_string();
    let conninfo = other.conninfo();
    let run = run::pgcheckdb(
        &common::bin(),
        &["verify", "-D", &d, "--online", "--dbname", &conninfo],
        mine.user(),
    );
    assert_eq!(run.status, 1, "{run}");
    assert!(run.stderr.contains("another cluster"), "{run}");
    assert_eq!(run.stderr.trim().lines().count(), 1, "{run}");
    // Its own server is accepted, also through a role that is no superuser (it may not read
    // data_directory, nor run CHECKPOINT).
    let own = verify_online(&mine, "standard", true);
    assert_eq!(own.status, 0, "{own}");
    mine.psql("postgres", "CREATE ROLE plain LOGIN;")
        .expect("role");
    let plain = format!("{} user=plain dbname=postgres", mine.conninfo());
    let run = common::verify_json(
        &["-D", &d, "--online"],
        "standard",
        &["--dbname", &plain, "--no-checkpoint"],
        mine.user(),
    );
    assert_eq!(run.status, 0, "{run}");
    assert_eq!(run.summary()["connection"], true, "{run}");
}

/// A copy of the cluster (same system identifier), started on its own and reached through a
/// role that may not read `data_directory`, cannot be told from the cluster's own server by
/// either: its end of WAL, behind the redo point the checked directory's `pg_control` records,
/// gives it away. The run is one tool error naming both LSNs, not a flood of
/// `page_lsn_in_future` findings. Every version.
#[test]
fn a_copy_whose_wal_is_behind_the_files_is_refused() {
    for major in pgcheckdb_testkit::MAJORS {
        let opts = ClusterOptions::new(major, major.is_multiple_of(2));
        let mut original = Cluster::init_temp(&opts).expect("initdb");
        original.start().expect("start");
        original
            .psql("postgres", "CREATE ROLE plain LOGIN;")
            .expect("role");
        let mut copy = Cluster::standby_of(&original).expect("pg_basebackup");
        std::fs::remove_file(copy.datadir().join("standby.signal")).expect("not a standby");
        copy.start().expect("start the copy");
        original
            .psql(
                "postgres",
                "CREATE TABLE moved_on AS SELECT g FROM generate_series(1, 300000) g; CHECKPOINT;",
            )
            .expect("write past the copy");
        let d = original.datadir().display().to_string();
        let plain = format!("{} user=plain dbname=postgres", copy.conninfo());
        let run = common::verify_json(
            &["-D", &d, "--online"],
            "standard",
            &["--dbname", &plain, "--no-checkpoint"],
            original.user(),
        );
        assert_eq!(run.status, 1, "PostgreSQL {major}\n{run}");
        let lines = run.stderr_lines();
        assert!(
            lines.len() == 1
                && lines[0].contains("its end of WAL")
                && lines[0].contains("redo point"),
            "PostgreSQL {major}: one line naming both LSNs\n{run}"
        );
        assert!(run.findings.is_empty(), "PostgreSQL {major}\n{run}");
        // The original's own server, through the same role, is accepted.
        let own = format!("{} user=plain dbname=postgres", original.conninfo());
        let run = common::verify_json(
            &["-D", &d, "--online"],
            "standard",
            &["--dbname", &own, "--no-checkpoint"],
            original.user(),
        );
        assert_eq!(run.status, 0, "PostgreSQL {major}\n{run}");
    }
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
