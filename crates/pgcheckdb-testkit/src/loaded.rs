//! Small clusters built for one test: a throwaway `initdb` of one version with autovacuum off
//! (so that nothing but the test's own SQL changes a page), loaded with the test's SQL, and the
//! lookups and load a test runs on them (relation file paths, pgbench with custom scripts).
//! Each helper panics naming the step and the version that failed.

use std::fs;
use std::path::PathBuf;

use pgcheckdb_cluster::{Cluster, ClusterOptions};

use crate::require_binaries;

/// The options of a test's own cluster: throwaway, autovacuum off.
pub fn options(major: u32, checksums: bool) -> ClusterOptions {
    ClusterOptions::new(major, checksums)
        .throwaway()
        .setting("autovacuum", "off")
}

/// A started cluster made with `opts`.
pub fn started_with(opts: &ClusterOptions) -> Cluster {
    let major = opts.major;
    let mut cluster = Cluster::init_temp(opts).unwrap_or_else(|e| panic!("initdb {major}: {e}"));
    cluster
        .start()
        .unwrap_or_else(|e| panic!("start {major}: {e}"));
    cluster
}

/// A started cluster of `major` (with data checksums when `checksums`), autovacuum off.
/// Missing binaries of `major` fail the test ([`require_binaries`]).
pub fn started(major: u32, checksums: bool) -> Cluster {
    require_binaries(major);
    started_with(&options(major, checksums))
}

/// A stopped cluster of `major` (with data checksums when `checksums`), autovacuum off, loaded
/// with `sql`, and the data-directory-relative paths of `tables` (database `postgres`).
pub fn loaded_cluster(
    major: u32,
    checksums: bool,
    sql: &str,
    tables: &[&str],
) -> (Cluster, Vec<String>) {
    let mut c = started(major, checksums);
    let paths = load_and_stop(&mut c, sql, tables);
    (c, paths)
}

/// A started cluster made with `opts`, its database `postgres` initialized by
/// `pgbench -i -q -s <scale>`, then loaded with `sql`: a primary for load while it runs.
pub fn pgbench_primary(opts: &ClusterOptions, scale: u32, sql: &str) -> Cluster {
    let c = started_with(opts);
    c.pgbench("postgres", &["-i", "-q", "-s", &scale.to_string()])
        .expect("pgbench -i");
    c.psql("postgres", sql).expect("load");
    c
}

/// [`loaded_cluster`] with one relation of interest: the stopped cluster, the relation's file
/// relative to the data directory, and its absolute path.
pub fn loaded_relation(
    major: u32,
    checksums: bool,
    sql: &str,
    relation: &str,
) -> (Cluster, String, PathBuf) {
    let (cluster, mut paths) = loaded_cluster(major, checksums, sql, &[relation]);
    let file = paths.remove(0);
    let path = cluster.datadir().join(&file);
    (cluster, file, path)
}

/// Runs `sql` in database `postgres` of the started `cluster`, looks up the
/// data-directory-relative paths of `tables`, and stops it; the paths.
pub fn load_and_stop(cluster: &mut Cluster, sql: &str, tables: &[&str]) -> Vec<String> {
    let major = cluster.major();
    cluster
        .psql("postgres", sql)
        .unwrap_or_else(|e| panic!("load {major}: {e}"));
    let paths = tables
        .iter()
        .map(|t| {
            cluster
                .relation_filepath("postgres", t)
                .expect("relation path")
        })
        .collect();
    cluster
        .stop()
        .unwrap_or_else(|e| panic!("stop {major}: {e}"));
    paths
}

/// The main fork's path of relation `name` of database `postgres`, relative to the data
/// directory; a stopped cluster is started for the lookup and stopped again.
pub fn relation_path(cluster: &mut Cluster, name: &str) -> String {
    let was_running = cluster.is_running();
    if !was_running {
        cluster.start().expect("start");
    }
    let rel = cluster
        .relation_filepath("postgres", name)
        .expect("relation path");
    if !was_running {
        cluster.stop().expect("stop");
    }
    rel
}

/// One pgbench script: its SQL and its weight (`-f file@weight`).
pub type Script<'a> = (&'a str, u32);

/// Runs `pgbench <connection> <args> -f <script>@<weight>... postgres` on the running
/// `cluster` (with `PGOPTIONS=<options>` when given), the scripts written to files of a
/// directory named after `name` in the system temp dir, removed afterwards; panics with
/// pgbench's stderr when it fails.
pub fn pgbench_scripts(
    cluster: &Cluster,
    name: &str,
    args: &[&str],
    scripts: &[Script<'_>],
    options: Option<&str>,
) {
    let dir = std::env::temp_dir().join(format!("pgcheckdb-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("script dir");
    let mut cmd = cluster.command("pgbench");
    cmd.args(cluster.conn_args()).args(args);
    for (i, (sql, weight)) in scripts.iter().enumerate() {
        let file: PathBuf = dir.join(format!("script{i}.sql"));
        fs::write(&file, sql).expect("script");
        cmd.arg("-f").arg(format!("{}@{weight}", file.display()));
    }
    if let Some(options) = options {
        cmd.env("PGOPTIONS", options);
    }
    let out = cmd.arg("postgres").output().expect("run pgbench");
    let _ = fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "pgbench: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
