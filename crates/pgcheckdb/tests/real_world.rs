//! Healthy clusters in the states real installations are in, which nobody designed for
//! pgcheckdb: after crash recovery, a standby shut down in recovery (with its primary holding an
//! open and a prepared transaction), and clusters upgraded with `pg_upgrade` from 14 to 18 and
//! from 18 to 19. `verify --level standard` must exit 0 with no error or warning finding on
//! each, and so must
//! `--level extended` on the two shut down cleanly (where `pg_xact` is exact: commit hints on
//! transactions it shows in progress would be reported). The larger
//! real-world shapes (the regression database, 5,000 relations, ...) are in the sweep
//! (docs/SWEEP.md).

mod common;

use std::collections::BTreeMap;
use std::process::Child;
use std::thread::sleep;
use std::time::Duration;

use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::{require_binaries, Cluster, ClusterOptions, UpgradeMode};

pgcheckdb_testkit::version_tests! {
    crash_recovered;
    crash_recovered_pg14(14),
    crash_recovered_pg15(15),
    crash_recovered_pg16(16),
    crash_recovered_pg17(17),
    crash_recovered_pg18(18),
    crash_recovered_pg19(19),
}

pgcheckdb_testkit::version_tests! {
    standby_shut_down_in_recovery;
    standby_shut_down_in_recovery_pg14(14),
    standby_shut_down_in_recovery_pg15(15),
    standby_shut_down_in_recovery_pg16(16),
    standby_shut_down_in_recovery_pg17(17),
    standby_shut_down_in_recovery_pg18(18),
    standby_shut_down_in_recovery_pg19(19),
}

#[test]
fn pg_upgrade_14_to_18() {
    upgraded(14, 18, "");
}

/// 18 to 19: pg_upgrade rewrites `pg_multixact` into 19's 64-bit offsets (and long `members`
/// segment names), which the standard level's multixact bound reads; the old cluster has
/// multixacts (a row locked, then updated in a subtransaction) whose members the upgraded
/// tuples still name.
#[test]
fn pg_upgrade_18_to_19() {
    upgraded(18, 19, MULTIXACT_SQL);
}

/// A cluster of `from` filled with pgbench, the shapes and `extra_sql`, upgraded to `to` with
/// `pg_upgrade` (copy mode), changed there with DML and VACUUM: clean at the standard and the
/// extended level.
fn upgraded(from: u32, to: u32, extra_sql: &str) {
    require_binaries(from);
    require_binaries(to);
    let mut old = started(&ClusterOptions::new(from, true).setting("fsync", "off"));
    must(
        old.pgbench("postgres", &["-q", "-i", "-s", "1"]),
        &format!("pgbench -i on {from}"),
    );
    must(
        old.psql("postgres", SHAPES_SQL),
        &format!("shapes SQL on {from}"),
    );
    must(
        old.pgbench("postgres", &["-t", "200", "-c", "2"]),
        &format!("pgbench on {from}"),
    );
    if !extra_sql.is_empty() {
        must(
            old.psql("postgres", extra_sql),
            &format!("more SQL on {from}"),
        );
    }
    must(old.stop(), &format!("stop {from}"));
    let what = format!("pg_upgrade {from} -> {to}");
    let mut new = must(old.upgrade_to(to, UpgradeMode::Copy), &what);
    must(new.start(), &format!("start upgraded {to}"));
    must(
        new.psql("postgres", AFTER_UPGRADE_SQL),
        &format!("DML and VACUUM on {to}"),
    );
    must(new.stop(), &format!("stop upgraded {to}"));
    assert_clean(
        &verify_standard(&new),
        &format!("{what}, then DML and VACUUM on {to}"),
    );
    // pg_upgrade copies pg_xact and keeps the pages' hint bits: they must still agree.
    let extended = verify_level(&new, "extended");
    assert_clean(&extended, &format!("{what}, extended level"));
    assert_eq!(
        extended.summary()["not_structure_checked"][0]["relation"],
        "public.shapes_bloom",
        "the bloom index is checked at the physical level only\n{extended}"
    );
}

/// Multixacts: rows locked FOR KEY SHARE and then updated in a subtransaction of the same
/// transaction (two xids on one tuple), in several transactions; some rows keep a multixact
/// xmax, the lockers' rows only a locking one.
const MULTIXACT_SQL: &str = "
CREATE TABLE multi (id int PRIMARY KEY, v int);
INSERT INTO multi SELECT g, 0 FROM generate_series(1, 200) g;
BEGIN; SELECT count(*) FROM (SELECT * FROM multi WHERE id <= 50 FOR KEY SHARE) l;
SAVEPOINT a; UPDATE multi SET v = v + 1 WHERE id <= 25; COMMIT;
BEGIN; SELECT count(*) FROM (SELECT * FROM multi WHERE id > 100 FOR SHARE) l;
SAVEPOINT a; UPDATE multi SET v = v + 1 WHERE id > 150; RELEASE a;
SAVEPOINT b; SELECT count(*) FROM (SELECT * FROM multi WHERE id > 120 FOR UPDATE) l; COMMIT;
";

/// Every index access method, TOAST, a sequence, a matview, an unlogged and a partitioned table.
const SHAPES_SQL: &str = "
CREATE EXTENSION bloom;
CREATE SEQUENCE s_plain;
SELECT nextval('s_plain') FROM generate_series(1, 10);
CREATE TABLE shapes (id serial PRIMARY KEY, n int, t text, arr int[], pt point, r int4range, big text);
INSERT INTO shapes (n, t, arr, pt, r, big)
SELECT g, md5(g::text), ARRAY[g, g % 7], point(g % 100, g / 100), int4range(g, g + 10),
       CASE WHEN g % 100 = 0 THEN (SELECT string_agg(md5((g * i)::text), '') FROM generate_series(1, 200) i) END
FROM generate_series(1, 5000) g;
CREATE INDEX shapes_hash ON shapes USING hash (n);
CREATE INDEX shapes_gist ON shapes USING gist (r);
CREATE INDEX shapes_gin ON shapes USING gin (arr);
CREATE INDEX shapes_spgist ON shapes USING spgist (pt);
CREATE INDEX shapes_brin ON shapes USING brin (id);
CREATE INDEX shapes_bloom ON shapes USING bloom (n);
CREATE MATERIALIZED VIEW shapes_mv AS SELECT n % 10 AS k, count(*) FROM shapes GROUP BY 1;
CREATE UNLOGGED TABLE shapes_unlogged AS SELECT g AS id FROM generate_series(1, 1000) g;
CREATE TABLE parts (id int, v text) PARTITION BY RANGE (id);
CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (1000);
CREATE TABLE parts_2 PARTITION OF parts FOR VALUES FROM (1000) TO (2000);
CREATE INDEX ON parts (id);
INSERT INTO parts SELECT g, md5(g::text) FROM generate_series(0, 1999) g;
UPDATE shapes SET n = n + 1 WHERE id % 5 = 0;
DELETE FROM shapes WHERE id % 17 = 0;
VACUUM shapes;
";

const AFTER_UPGRADE_SQL: &str = "
INSERT INTO shapes (n, t) SELECT g, 'upgraded ' || g FROM generate_series(1, 1000) g;
UPDATE shapes SET t = t || '!' WHERE id % 4 = 0;
DELETE FROM shapes WHERE id % 23 = 0;
UPDATE shapes SET big = repeat(md5(id::text), 300) WHERE id % 101 = 0;
INSERT INTO shapes_unlogged SELECT generate_series(1001, 2000);
REFRESH MATERIALIZED VIEW shapes_mv;
SELECT nextval('s_plain');
VACUUM ANALYZE;
";

/// pgbench traffic, `pg_ctl stop -m immediate` in the middle of it, a start (crash recovery)
/// and a clean stop.
fn crash_recovered(major: u32) {
    require_binaries(major);
    let mut cluster = started(&ClusterOptions::new(major, true).setting("fsync", "off"));
    must(
        cluster.pgbench("postgres", &["-q", "-i", "-s", "1"]),
        "pgbench -i",
    );
    must(cluster.psql("postgres", SHAPES_SQL), "shapes SQL");
    let bench = must(
        cluster.spawn_pgbench("postgres", &["-T", "6", "-c", "2"]),
        "pgbench",
    );
    sleep(Duration::from_secs(2));
    must(
        cluster.psql("postgres", "DELETE FROM shapes WHERE id % 3 = 0;"),
        "DELETE during pgbench",
    );
    must(cluster.stop_immediate(), "pg_ctl stop -m immediate");
    reap(bench);
    assert_eq!(
        cluster_state(&cluster),
        "in production",
        "PostgreSQL {major}: the immediate stop should leave the cluster unclean"
    );
    must(cluster.start(), "start (crash recovery)");
    must(cluster.psql("postgres", "VACUUM;"), "VACUUM after recovery");
    must(cluster.stop(), "clean stop");
    assert_eq!(cluster_state(&cluster), "shut down");
    assert_clean(
        &verify_standard(&cluster),
        &format!("PostgreSQL {major}, crash-recovered"),
    );
    // Shut down cleanly after the crash: the transactions the crash cut off stay "in
    // progress" in pg_xact for good, and the commit hints of the others must agree with it.
    assert_clean(
        &verify_level(&cluster, "extended"),
        &format!("PostgreSQL {major}, crash-recovered, extended level"),
    );
}

/// A streaming standby stopped while its primary runs pgbench, holds a long open transaction
/// and a prepared transaction that created a table, after a checkpoint on the primary and a
/// restartpoint on the standby. Its pg_control says "shut down in recovery".
fn standby_shut_down_in_recovery(major: u32) {
    require_binaries(major);
    let opts = ClusterOptions::new(major, true)
        .setting("fsync", "off")
        .setting("max_prepared_transactions", "10");
    let mut primary = started(&opts);
    must(
        primary.pgbench("postgres", &["-q", "-i", "-s", "1"]),
        "pgbench -i",
    );
    must(
        primary.pgbench("postgres", &["-t", "100", "-c", "2"]),
        "pgbench",
    );
    let mut standby = must(Cluster::standby_of(&primary), "pg_basebackup -R");
    must(standby.start(), "start standby");
    let bench = must(
        primary.spawn_pgbench("postgres", &["-T", "5", "-c", "2"]),
        "pgbench",
    );
    let long = must(
        primary.spawn_psql(
            "postgres",
            "BEGIN; CREATE TABLE long_open AS SELECT generate_series(1, 1000) a; SELECT pg_sleep(600); COMMIT;",
        ),
        "long transaction",
    );
    must(
        primary.psql(
            "postgres",
            "BEGIN; CREATE TABLE prepared_t (id int PRIMARY KEY, v text);
             INSERT INTO prepared_t SELECT g, md5(g::text) FROM generate_series(1, 500) g;
             PREPARE TRANSACTION 'real_world';",
        ),
        "prepared transaction",
    );
    // A checkpoint on the primary in the middle of the traffic: the standby's restartpoint
    // then writes pages that hold xids newer than the nextXid its pg_control records.
    must(
        primary.psql("postgres", "CHECKPOINT;"),
        "checkpoint on the primary",
    );
    sleep(Duration::from_secs(2));
    must(standby.wait_for_replay(&primary), "standby replay");
    must(
        standby.psql("postgres", "CHECKPOINT;"),
        "restartpoint on the standby",
    );
    must(standby.stop(), "stop standby while the primary runs");
    assert_eq!(cluster_state(&standby), "shut down in recovery");
    reap(bench);
    must(primary.stop(), "stop primary");
    reap(long);
    let standby_run = verify_standard(&standby);
    let primary_run = verify_standard(&primary);
    let failures: Vec<String> = [
        unclean(
            &standby_run,
            &format!("PostgreSQL {major}, standby shut down in recovery"),
        ),
        unclean(
            &primary_run,
            &format!("PostgreSQL {major}, primary with a prepared transaction"),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A started cluster made with `opts`.
fn started(opts: &ClusterOptions) -> Cluster {
    let mut cluster = must(Cluster::init_temp(opts), "initdb");
    must(cluster.start(), "start");
    cluster
}

/// The value of a cluster-management step, or a panic naming the step.
fn must<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Waits for a background client; it may have failed when its server stopped under it.
fn reap(mut child: Child) {
    let _ = child.wait();
}

/// "Database cluster state" from `pg_controldata`.
fn cluster_state(cluster: &Cluster) -> String {
    let datadir = cluster.datadir().display().to_string();
    let out = must(
        cluster.run_program("pg_controldata", &[&datadir]),
        "pg_controldata",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Database cluster state:"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| panic!("no cluster state in pg_controldata output:\n{text}"))
}

/// `verify --level standard --format json --no-progress -j 2` on the cluster.
fn verify_standard(cluster: &Cluster) -> Run {
    verify_level(cluster, "standard")
}

/// `verify --level <level> --format json -j 2` on `cluster`.
fn verify_level(cluster: &Cluster, level: &str) -> Run {
    common::verify_level(cluster.datadir(), level)
}

/// Exit 0, no error or warning finding, and a summary showing the standard level read files.
fn assert_clean(run: &Run, what: &str) {
    if let Some(failure) = unclean(run, what) {
        panic!("{failure}");
    }
}

/// Why `run` is not a clean standard-level verify of a healthy cluster, if it is not.
fn unclean(run: &Run, what: &str) -> Option<String> {
    let problems: Vec<String> = run.problems().iter().map(|f| f.to_string()).collect();
    if !problems.is_empty() {
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for f in run.problems() {
            *by_kind
                .entry(f["kind"].as_str().unwrap_or("?"))
                .or_default() += 1;
        }
        return Some(format!(
            "{what}: healthy cluster has {} error/warning findings ({by_kind:?}), first ones:\n{}\n--- exit {} ---\n{}",
            problems.len(),
            problems[..problems.len().min(20)].join("\n"),
            run.status,
            run.stderr
        ));
    }
    if run.status != 0 {
        return Some(format!(
            "{what}: exit status {}, expected 0\n{run}",
            run.status
        ));
    }
    let Some(summary) = &run.summary else {
        return Some(format!("{what}: no summary line\n{run}"));
    };
    if summary["files"].as_u64().unwrap_or(0) == 0 {
        return Some(format!("{what}: not a run over files: {summary}"));
    }
    None
}
