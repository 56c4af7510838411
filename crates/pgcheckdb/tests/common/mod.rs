//! Helpers shared by the integration tests: the binary under test, verify runs with clear
//! failure messages, and small assertions on findings.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pgcheckdb_testkit::run::{self, Key, Run};
use pgcheckdb_testkit::RunAs;

/// The `pgcheckdb` binary built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pgcheckdb"))
}

/// `pgcheckdb verify --level physical --format json -j <jobs>` on `datadir`.
pub fn verify(datadir: &Path, jobs: u32) -> Run {
    run::verify(&bin(), datadir, jobs, None)
}

/// The same, run as `user`.
pub fn verify_as(datadir: &Path, jobs: u32, user: Option<&RunAs>) -> Run {
    run::verify(&bin(), datadir, jobs, user)
}

/// Asserts the exit status, showing the whole run otherwise.
pub fn assert_status(run: &Run, expected: i32, what: &str) {
    assert_eq!(
        run.status, expected,
        "{what}: expected exit {expected}\n{run}"
    );
}

/// Asserts a clean run: exit 0 and no error or warning finding.
pub fn assert_clean(run: &Run, what: &str) {
    assert_status(run, 0, what);
    assert!(run.problems().is_empty(), "{what}: problems found\n{run}");
}

/// Asserts that the error and warning findings are exactly `expected`.
pub fn assert_problems(run: &Run, expected: &BTreeSet<Key>, what: &str) {
    let got = run.problem_keys();
    let missing: Vec<String> = expected.difference(&got).map(|k| k.to_string()).collect();
    let extra: Vec<String> = got.difference(expected).map(|k| k.to_string()).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: findings differ\n  missing: {missing:#?}\n  unexpected: {extra:#?}\n{run}"
    );
}

/// The finding with this key; panics if absent.
pub fn finding<'a>(run: &'a Run, key: &Key) -> &'a serde_json::Value {
    run.findings
        .iter()
        .find(|f| run::key_of(f) == *key)
        .unwrap_or_else(|| panic!("no finding {key}\n{run}"))
}

/// A key.
pub fn key(kind: &str, file: &str, block: u64) -> Key {
    Key::new(kind, file, Some(block))
}

/// Makes sure the `en_US.UTF-8` libc locale exists (compiling it with `localedef` from the
/// `locales` package's definitions when it does not): the B-tree order tests need a collation
/// whose order differs from byte order. Fails loudly when it cannot.
///
/// Tests run in parallel threads and test binaries in parallel processes; two `localedef`s
/// writing the one locale archive at once leave it corrupt (every program using the locale
/// then crashes), so the check and the compilation hold an exclusive lock on a file beside the
/// archive's directory, across processes.
pub fn ensure_libc_locale() {
    use std::os::unix::io::AsRawFd;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("pgcheckdb-tests-localedef.lock"))
        .expect("open the localedef lock file");
    // SAFETY: a valid descriptor; the lock is released when `lock` is closed.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "lock the localedef lock file");
    let listed = std::process::Command::new("locale")
        .arg("-a")
        .output()
        .expect("run locale -a");
    let have = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l.eq_ignore_ascii_case("en_US.utf8") || l == "en_US.UTF-8");
    if have {
        return;
    }
    let out = std::process::Command::new("localedef")
        .args(["-i", "en_US", "-f", "UTF-8", "en_US.UTF-8"])
        .output()
        .expect("run localedef (the test needs the en_US.UTF-8 locale)");
    assert!(
        out.status.success(),
        "localedef en_US.UTF-8 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A stopped cluster of `major` (with data checksums when `checksums`), autovacuum off, loaded
/// with `sql`, and the data-directory-relative paths of `tables` (database `postgres`).
pub fn loaded_cluster(
    major: u32,
    checksums: bool,
    sql: &str,
    tables: &[&str],
) -> (pgcheckdb_testkit::Cluster, Vec<String>) {
    pgcheckdb_testkit::require_binaries(major);
    let opts = pgcheckdb_testkit::ClusterOptions::new(major, checksums)
        .throwaway()
        .setting("autovacuum", "off");
    let mut c = pgcheckdb_testkit::Cluster::init_temp(&opts)
        .unwrap_or_else(|e| panic!("initdb {major}: {e}"));
    c.start().unwrap_or_else(|e| panic!("start {major}: {e}"));
    c.psql("postgres", sql)
        .unwrap_or_else(|e| panic!("load {major}: {e}"));
    let paths = tables
        .iter()
        .map(|t| c.relation_filepath("postgres", t).expect("relation path"))
        .collect();
    c.stop().unwrap_or_else(|e| panic!("stop {major}: {e}"));
    (c, paths)
}

/// `verify <target...> --level <level> --format json --no-progress -j 2 <extra...>`, run as
/// `user`: `target` says what is verified (`["-D", dir]`, `["--backup", dir]`, ...).
pub fn verify_json(target: &[&str], level: &str, extra: &[&str], user: Option<&RunAs>) -> Run {
    let mut args = vec!["verify"];
    args.extend_from_slice(target);
    args.extend_from_slice(&[
        "--level",
        level,
        "--format",
        "json",
        "--no-progress",
        "-j",
        "2",
    ]);
    args.extend_from_slice(extra);
    run::pgcheckdb(&bin(), &args, user)
}

/// `verify --level extended --format json --no-progress -j 2` on `datadir`, plus `extra`.
pub fn verify_extended(datadir: &Path, extra: &[&str]) -> Run {
    let dir = datadir.display().to_string();
    verify_json(&["-D", &dir], "extended", extra, None)
}

/// Reads block `block` of the relation file at `path`, lets `change` edit it, writes it back
/// and recomputes its checksum (so that only the edit is damage).
pub fn edit(path: &Path, block: u64, change: impl FnOnce(&mut [u8])) {
    use pgcheckdb_pg::ops::corrupt;
    use pgcheckdb_testkit::BLCKSZ;
    let mut page = corrupt::read_block(path, block, BLCKSZ).expect("read block");
    change(&mut page);
    corrupt::write_block(path, block, &page).expect("write block");
    corrupt::recompute_checksum(path, block, BLCKSZ, block).expect("recompute checksum");
}

/// `pg_amcheck --heapallindexed --parent-check` on database `postgres` of the running
/// `cluster` (amcheck created if needed); its success and its stdout and stderr together.
pub fn amcheck_heapallindexed(cluster: &pgcheckdb_testkit::Cluster) -> (bool, String) {
    cluster
        .psql("postgres", "CREATE EXTENSION IF NOT EXISTS amcheck;")
        .expect("create extension amcheck");
    let sock = cluster.socket_dir().display().to_string();
    let out = cluster
        .command("pg_amcheck")
        .args([
            "-h",
            &sock,
            "-U",
            "postgres",
            "-d",
            "postgres",
            "--heapallindexed",
            "--parent-check",
        ])
        .output()
        .expect("run pg_amcheck");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Sets `pg_control`'s `state` (1: shut down, 2: shut down in recovery, 6: in production, as a
/// crash leaves it) and recomputes its CRC, for the checks that depend on how the cluster
/// stopped.
pub fn set_db_state(datadir: &Path, state: u32) {
    set_control_u32(datadir, 16, state);
}

/// Sets the little-endian `u32` at byte `at` of `pg_control` and recomputes its CRC (found where
/// the stored value matches), as a forged or bit-flipped file with a valid CRC would be.
pub fn set_control_u32(datadir: &Path, at: usize, value: u32) {
    let path = datadir.join("global/pg_control");
    let mut raw = std::fs::read(&path).expect("read pg_control");
    let stored = |raw: &[u8], at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
    let crc_at = (20..1024)
        .step_by(4)
        .find(|&at| crc32c::crc32c(&raw[..at]) == stored(&raw, at))
        .expect("the CRC of pg_control");
    raw[at..at + 4].copy_from_slice(&value.to_le_bytes());
    let crc = crc32c::crc32c(&raw[..crc_at]);
    raw[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &raw).expect("write pg_control");
}

/// Block `b` of relation file `path`.
pub fn read_block(path: &Path, b: u64) -> Vec<u8> {
    pgcheckdb_pg::ops::corrupt::read_block(path, b, pgcheckdb_testkit::BLCKSZ).expect("read block")
}

/// The little-endian `u16` at byte `at` of a page.
pub fn u16_at(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}

/// The little-endian `u32` at byte `at` of a page.
pub fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

/// Runs `sql` (meant to read a whole index) on the started cluster and says whether the
/// server raised an error, for the cross-check tables of docs/CHECKS.md.
pub fn query_through_index(cluster: &pgcheckdb_testkit::Cluster, sql: &str) -> String {
    let sock = cluster.socket_dir().display().to_string();
    let out = cluster
        .command("psql")
        .args([
            "-X", "-h", &sock, "-U", "postgres", "-d", "postgres", "-c", sql,
        ])
        .output()
        .expect("run psql");
    let err = String::from_utf8_lossy(&out.stderr);
    match err.lines().find(|l| l.starts_with("ERROR")) {
        Some(line) => format!("a query through the index fails: {line}"),
        None => "a query through the index runs without error".to_string(),
    }
}

/// The `index_graph_invalid` finding at `block` of relation file `file` whose message says
/// `says`, if the run has one.
pub fn graph_finding<'a>(
    run: &'a Run,
    file: &str,
    block: u64,
    says: &str,
) -> Option<&'a serde_json::Value> {
    run.findings.iter().find(|f| {
        f["kind"] == "index_graph_invalid"
            && f["file"] == file
            && f["block"] == block
            && f["message"].as_str().unwrap_or("").contains(says)
    })
}

/// The damaged run found exactly one problem, `index_graph_invalid` at `block` of `file`, and
/// its text says `says`.
pub fn assert_only_graph_finding(run: &Run, file: &str, block: u64, says: &str, what: &str) {
    assert_eq!(run.status, 2, "{what}\n{run}");
    let expected: BTreeSet<_> = [key("index_graph_invalid", file, block)].into();
    assert_problems(run, &expected, what);
    let text = run.findings_text().join("\n");
    assert!(text.contains(says), "{what}: expected {says:?}\n{text}");
}
