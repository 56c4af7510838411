//! The standard level on churned clusters: pgbench with updates (HOT chains), deletes, VACUUM,
//! TRUNCATE, VACUUM FULL, ALTER TABLE ADD/DROP COLUMN, TOAST values, NULLs, every index access
//! method, a sequence and an unlogged table — on every supported version, with and without data
//! checksums. A healthy cluster must give no error and no warning at the standard level: every
//! structure check is exercised against real pages the server wrote.

mod common;

use pgcheckdb_testkit::{loaded, run, Cluster};

use common::bin;

pgcheckdb_testkit::version_tests! {
    scenario;
    churn_pg14(14),
    churn_pg15(15),
    churn_pg16(16),
    churn_pg17(17),
    churn_pg18(18),
    churn_pg19(19),
}

const CHURN_SQL: &str = "
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE wide (id int PRIMARY KEY, a int, b text, c numeric, d timestamptz DEFAULT now(), e bool, f float8, g int8[]);
INSERT INTO wide SELECT g, g % 97, CASE WHEN g % 5 = 0 THEN NULL ELSE md5(g::text) END, g * 1.25,
    now() - g * interval '1 minute', g % 2 = 0, g / 3.0, ARRAY[g, g + 1, g + 2] FROM generate_series(1, 20000) g;
UPDATE wide SET a = a + 1 WHERE id % 7 = 0;
UPDATE wide SET b = repeat(md5(id::text), 300) WHERE id % 50 = 0;
DELETE FROM wide WHERE id % 11 = 0;
ALTER TABLE wide ADD COLUMN h text DEFAULT 'fast default';
ALTER TABLE wide ADD COLUMN i int;
UPDATE wide SET i = id WHERE id % 3 = 0;
ALTER TABLE wide DROP COLUMN c;
INSERT INTO wide (id, a, b, h) SELECT g, 1, 'after drop', NULL FROM generate_series(20001, 21000) g;
VACUUM wide;
CREATE INDEX wide_hash ON wide USING hash (a);
CREATE INDEX wide_brin ON wide USING brin (id);
CREATE INDEX wide_gin ON wide USING gin (g);
CREATE INDEX wide_trgm ON wide USING gist (b gist_trgm_ops);
CREATE TABLE pts (id serial PRIMARY KEY, p point, r int4range, t text);
INSERT INTO pts (p, r, t) SELECT point(g % 100, g / 100), int4range(g, g + 10), 'text ' || g FROM generate_series(1, 5000) g;
CREATE INDEX pts_spgist ON pts USING spgist (p);
CREATE INDEX pts_gist ON pts USING gist (r);
CREATE INDEX pts_spgist_text ON pts USING spgist (t);
DELETE FROM pts WHERE id % 4 = 0;
VACUUM pts;
CREATE TABLE big_toast (id int, doc text);
INSERT INTO big_toast SELECT g, (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 200) i) FROM generate_series(1, 300) g;
UPDATE big_toast SET doc = doc || 'x' WHERE id % 2 = 0;
DELETE FROM big_toast WHERE id % 3 = 0;
CREATE TABLE trunc_t AS SELECT g AS id FROM generate_series(1, 5000) g;
TRUNCATE trunc_t;
INSERT INTO trunc_t SELECT generate_series(1, 100);
CREATE TABLE vf AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 5000) g;
DELETE FROM vf WHERE id % 2 = 0;
VACUUM FULL vf;
CREATE UNLOGGED TABLE unlogged_c (id int PRIMARY KEY, v text);
INSERT INTO unlogged_c SELECT g, md5(g::text) FROM generate_series(1, 1000) g;
CREATE SEQUENCE churn_seq;
SELECT nextval('churn_seq') FROM generate_series(1, 100);
CREATE MATERIALIZED VIEW mv AS SELECT a, count(*) FROM wide GROUP BY a;
REFRESH MATERIALIZED VIEW mv;
VACUUM FREEZE pts;
ANALYZE;
";

fn scenario(major: u32) {
    for checksums in [true, false] {
        let mut cluster = loaded::started(major, checksums);
        pgbench(&cluster);
        cluster
            .psql("postgres", CHURN_SQL)
            .unwrap_or_else(|e| panic!("churn SQL on {major}: {e}"));
        cluster
            .stop()
            .unwrap_or_else(|e| panic!("stop {major}: {e}"));
        let run = run::pgcheckdb(
            &bin(),
            &[
                "verify",
                "--level",
                "standard",
                "--format",
                "json",
                "-j",
                "2",
                "-D",
                &cluster.datadir().display().to_string(),
            ],
            None,
        );
        let problems: Vec<String> = run.problems().iter().map(|f| f.to_string()).collect();
        assert!(problems.is_empty(), "PostgreSQL {major} (checksums {checksums}): healthy churned cluster has findings:\n{}\n{run}", problems.join("\n"));
        assert_eq!(run.status, 0, "{run}");
        let summary = run.summary();
        assert_eq!(summary["level"], "standard", "{run}");
        assert!(summary["blocks"].as_u64().unwrap_or(0) > 1000, "{run}");
        // The extended level's cross-page checks are silent on the same cluster too.
        let datadir = cluster.datadir().display().to_string();
        let args = [
            "verify", "--level", "extended", "--format", "json", "-j", "2", "-D", &datadir,
        ];
        let ext = run::pgcheckdb(&bin(), &args, None);
        let problems: Vec<String> = ext.problems().iter().map(|f| f.to_string()).collect();
        assert!(problems.is_empty(), "PostgreSQL {major} (checksums {checksums}): extended level on a healthy churned cluster:\n{}\n{ext}", problems.join("\n"));
        assert_eq!(ext.status, 0, "{ext}");
        assert!(
            ext.summary()["extended"]["indexes_checked"]
                .as_u64()
                .unwrap_or(0)
                > 100,
            "{ext}"
        );
    }
}

/// `pgbench -i` then a short TPC-B-like run: updates make HOT chains and dead tuples.
fn pgbench(cluster: &Cluster) {
    cluster
        .pgbench("postgres", &["-i", "-s", "2", "-q"])
        .unwrap_or_else(|e| panic!("pgbench -i: {e}"));
    cluster
        .pgbench("postgres", &["-c", "2", "-t", "400", "-n"])
        .unwrap_or_else(|e| panic!("pgbench run: {e}"));
    cluster
        .psql(
            "postgres",
            "VACUUM pgbench_accounts; DELETE FROM pgbench_history WHERE aid % 2 = 0;",
        )
        .unwrap_or_else(|e| panic!("vacuum: {e}"));
}
