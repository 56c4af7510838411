//! The damage ledger (`verify --ledger`, `pgcheckdb ledger`; docs/LEDGER.md) on real clusters
//! of PostgreSQL 17 with data checksums (the ledger reads nothing version-specific: the
//! findings it records are those of every version's own tests):
//!
//! - a local SQLite ledger at its default place (`$XDG_STATE_HOME`): a clean run records
//!   nothing; two damaged blocks are `new`; a run at a lower level or over another scope
//!   repairs nothing; a whole-cluster run after one block is rewritten with its original bytes
//!   lists it `repaired` and the other still `open`; a third damage is `new` again; the
//!   Prometheus output carries the counts; the file is 0600 in a 0700 directory;
//! - a ledger inside the data directory, or at a symbolic link, is refused with exit 1 and one
//!   line, and nothing is written there;
//! - a central ledger in a real PostgreSQL server (started by the testkit): six runs of four
//!   hosts at once create the schema once and record every host's damage once, and `ledger`
//!   lists them across hosts; a repair on one host leaves the others open.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pgcheckdb_testkit::loaded;
use pgcheckdb_testkit::run::{self, Run};
use serde_json::Value;

const MAJOR: u32 = 17;

const SQL: &str =
    "CREATE TABLE t AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 3000) g; \
                   CREATE TABLE u AS SELECT g AS id FROM generate_series(1, 1000) g; \
                   VACUUM FREEZE t; VACUUM FREEZE u; CHECKPOINT;";

/// Runs the binary with `args` and `XDG_STATE_HOME=state`.
fn pgcheckdb(args: &[&str], state: &Path) -> Run {
    let out = Command::new(common::bin())
        .args(args)
        .env_remove("PGDATA")
        .env("NO_COLOR", "1")
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::null())
        .output()
        .expect("run pgcheckdb");
    run::parse(out)
}

/// `verify -D dir --format json --no-progress -j 2 --level level --ledger [ledger] extra...`.
fn verify(dir: &Path, level: &str, ledger: &[&str], extra: &[&str], state: &Path) -> Run {
    let d = dir.display().to_string();
    let mut args = vec![
        "verify",
        "-D",
        &d,
        "--level",
        level,
        "--format",
        "json",
        "--no-progress",
        "-j",
        "2",
        "--ledger",
    ];
    args.extend_from_slice(ledger);
    args.extend_from_slice(extra);
    pgcheckdb(&args, state)
}

/// The summary's `ledger` counts: (new, open, repaired).
fn counts(run: &Run) -> (u64, u64, u64) {
    let l = &run.summary()["ledger"];
    assert!(l.is_object(), "no ledger counts in {}", run.stdout);
    (
        l["new"].as_u64().unwrap(),
        l["open"].as_u64().unwrap(),
        l["repaired"].as_u64().unwrap(),
    )
}

/// `pgcheckdb ledger --format json [extra]`: the entries as (status, host, file, block).
/// A listed entry: status, host, relation file, block.
type Entry = (String, String, String, u64);

fn listed(extra: &[&str], state: &Path) -> (Vec<Value>, Vec<Entry>) {
    let mut args = vec!["ledger", "--format", "json"];
    args.extend_from_slice(extra);
    let run = pgcheckdb(&args, state);
    assert_eq!(run.status, 0, "ledger: {}{}", run.stdout, run.stderr);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.last().unwrap()["type"], "summary", "{}", run.stdout);
    let clusters = lines
        .iter()
        .filter(|l| l["type"] == "ledger_cluster")
        .cloned()
        .collect();
    let mut entries: Vec<_> = lines
        .iter()
        .filter(|l| l["type"] == "ledger_entry")
        .map(|l| {
            (
                l["status"].as_str().unwrap().to_string(),
                l["host"].as_str().unwrap().to_string(),
                l["file"].as_str().unwrap().to_string(),
                l["block"].as_u64().unwrap(),
            )
        })
        .collect();
    entries.sort();
    (clusters, entries)
}

/// Flips a byte in the tuple data of `block`, checksum left as it was; the original page.
fn damage(path: &Path, block: u64) -> Vec<u8> {
    let original = common::read_block(path, block);
    let mut page = original.clone();
    page[6000] ^= 0x5a;
    common::write_block(path, block, &page, false);
    original
}

fn entry(status: &str, host: &str, file: &str, block: u64) -> Entry {
    (status.into(), host.into(), file.into(), block)
}

#[test]
fn sqlite_ledger_new_open_repaired() {
    let (cluster, file, path) = loaded::loaded_relation(MAJOR, true, SQL, "t");
    let dir = cluster.datadir().to_path_buf();
    let tmp = tempfile::tempdir().expect("tempdir");
    let state = tmp.path().join("state");
    let host = ["--ledger-host", "db1"];

    // A clean run: the default file is created, private, and records nothing.
    let r = verify(&dir, "standard", &[], &host, &state);
    assert_eq!(r.status, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(counts(&r), (0, 0, 0));
    let db = state.join("pgcheckdb/ledger.sqlite");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600, "ledger file mode");
    assert_eq!(
        mode(&state.join("pgcheckdb")),
        0o700,
        "ledger directory mode"
    );

    // Two damaged blocks: both new.
    let original3 = damage(&path, 3);
    damage(&path, 5);
    let r = verify(&dir, "standard", &[], &host, &state);
    assert_eq!(r.status, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(counts(&r), (2, 2, 0));
    let (clusters, entries) = listed(&[], &state);
    assert_eq!(
        entries,
        vec![entry("new", "db1", &file, 3), entry("new", "db1", &file, 5)]
    );
    assert_eq!(clusters.len(), 1);
    assert_eq!(clusters[0]["open"], 2);

    // Block 3 rewritten with its original bytes. A physical run is a lower level than the
    // one that found the damage and a run over table u another scope: neither repairs it.
    common::write_block(&path, 3, &original3, false);
    let r = verify(&dir, "physical", &[], &host, &state);
    assert_eq!(r.status, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(counts(&r), (0, 2, 0), "a lower level repairs nothing");
    let r = verify(
        &dir,
        "standard",
        &[],
        &["--ledger-host", "db1", "-t", "u"],
        &state,
    );
    assert_eq!(r.status, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(counts(&r), (0, 2, 0), "another scope repairs nothing");
    let (_, entries) = listed(&[], &state);
    assert_eq!(
        entries,
        vec![
            entry("open", "db1", &file, 3),
            entry("open", "db1", &file, 5)
        ]
    );

    // A whole-cluster run at the same level: block 3 repaired, block 5 still open; the
    // Prometheus output says so.
    let d = dir.display().to_string();
    let r = pgcheckdb(
        &[
            "verify",
            "-D",
            &d,
            "--format",
            "prometheus",
            "--no-progress",
            "--ledger",
            "--ledger-host",
            "db1",
        ],
        &state,
    );
    assert_eq!(r.status, 2, "{}{}", r.stdout, r.stderr);
    for line in [
        "pgcheckdb_verify_ledger_new{pgdata=\"DIR\"} 0",
        "pgcheckdb_verify_ledger_open{pgdata=\"DIR\"} 1",
        "pgcheckdb_verify_ledger_repaired{pgdata=\"DIR\"} 1",
    ] {
        let line = line.replace("DIR", &d);
        assert!(
            r.stdout.lines().any(|l| l == line),
            "{line} in {}",
            r.stdout
        );
    }
    // The example alert rules name only metrics pgcheckdb writes.
    let rules = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/alerts/pgcheckdb.rules.yml"),
    )
    .expect("docs/alerts/pgcheckdb.rules.yml");
    let names: std::collections::BTreeSet<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("pgcheckdb_verify_"))
        .collect();
    assert!(names.contains("pgcheckdb_verify_ledger_new"), "{names:?}");
    for name in names {
        let sample = format!("{name}{{");
        assert!(
            r.stdout.contains(&sample),
            "the rules name {name}, which is not written:\n{}",
            r.stdout
        );
    }
    let (_, entries) = listed(&[], &state);
    assert_eq!(
        entries,
        vec![
            entry("open", "db1", &file, 5),
            entry("repaired", "db1", &file, 3)
        ]
    );

    // New damage: new again; the repair of the run before is history (--all).
    damage(&path, 7);
    let r = verify(&dir, "standard", &[], &host, &state);
    assert_eq!(counts(&r), (1, 2, 0));
    let (_, entries) = listed(&[], &state);
    assert_eq!(
        entries,
        vec![
            entry("new", "db1", &file, 7),
            entry("open", "db1", &file, 5)
        ]
    );
    let (_, entries) = listed(&["--all"], &state);
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert!(entries.contains(&entry("repaired", "db1", &file, 3)));

    // The text report of verify ends with the ledger's counts.
    let r = pgcheckdb(
        &[
            "verify",
            "-D",
            &d,
            "--no-progress",
            "--ledger",
            "--ledger-host",
            "db1",
        ],
        &state,
    );
    assert_eq!(r.status, 2, "{}{}", r.stdout, r.stderr);
    let expected = format!(
        "pgcheckdb: the ledger \"{}\": 0 new, 2 open, 0 repaired",
        db.display()
    );
    assert_eq!(
        r.stdout.lines().last(),
        Some(expected.as_str()),
        "{}",
        r.stdout
    );

    // The text listing names the relation and the status.
    let text = pgcheckdb(&["ledger"], &state);
    assert_eq!(text.status, 0);
    assert!(
        text.stdout.contains("2 open (0 new), 0 repaired")
            && text.stdout.contains(&format!(
                "open     error checksum_mismatch: {file} main block 7"
            )),
        "{}",
        text.stdout
    );
}

#[test]
fn ledger_refused_inside_the_data_directory_and_at_a_link() {
    let (cluster, _file, path) = loaded::loaded_relation(MAJOR, true, SQL, "t");
    let dir = cluster.datadir().to_path_buf();
    damage(&path, 2);
    let tmp = tempfile::tempdir().expect("tempdir");

    // Inside the data directory (also through `..`): refused before the run, nothing written.
    let inside = dir.join("base/../ledger.sqlite");
    let r = verify(
        &dir,
        "physical",
        &[inside.to_str().unwrap()],
        &[],
        tmp.path(),
    );
    assert_eq!(r.status, 1, "{}{}", r.stdout, r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].contains("inside the data directory"),
        "{}",
        r.stderr
    );
    assert!(!dir.join("ledger.sqlite").exists());

    // A symbolic link at the ledger's place: the run is reported, the ledger refused, exit 1
    // although corruption was found; the link's target is not touched.
    let target = tmp.path().join("target");
    std::fs::write(&target, b"not a ledger").unwrap();
    let link: PathBuf = tmp.path().join("ledger.sqlite");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let r = verify(&dir, "physical", &[link.to_str().unwrap()], &[], tmp.path());
    assert_eq!(r.status, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.findings.len(), 1, "the run's findings are still printed");
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].starts_with("pgcheckdb: error: could not record the run in the ledger")
            && lines[0].contains("symbolic link"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"not a ledger");

    // A ledger that does not exist yet cannot be listed: exit 1, one line, nothing created.
    let missing = tmp.path().join("none.sqlite");
    let r = pgcheckdb(
        &["ledger", "--ledger", missing.to_str().unwrap()],
        tmp.path(),
    );
    assert_eq!(r.status, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    assert!(!missing.exists());

    // Three runs at once into one new local ledger: they take turns, none fails.
    let shared = tmp.path().join("shared.sqlite");
    let d = dir.display().to_string();
    let children: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|h| {
            Command::new(common::bin())
                .args([
                    "verify",
                    "-D",
                    &d,
                    "--level",
                    "physical",
                    "--format",
                    "json",
                    "--no-progress",
                    "-j",
                    "1",
                    "--ledger",
                    shared.to_str().unwrap(),
                    "--ledger-host",
                    h,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in children {
        let r = run::parse(child.wait_with_output().unwrap());
        assert_eq!(r.status, 2, "{}{}", r.stdout, r.stderr);
        assert!(r.stderr.is_empty(), "{}", r.stderr);
        assert_eq!(counts(&r), (1, 1, 0));
    }
    let (clusters, entries) = listed(&["--ledger", shared.to_str().unwrap()], tmp.path());
    assert_eq!(clusters.len(), 3, "{clusters:?}");
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert!(
        entries.iter().all(|e| e.0 == "new" && e.3 == 2),
        "{entries:?}"
    );
}

#[test]
fn central_ledger_concurrent_hosts() {
    // The central database: a real server (the test fails when PostgreSQL is missing).
    let central = loaded::started(14, false);
    let conninfo = format!("{} dbname=postgres", central.conninfo());
    let (cluster, file, path) = loaded::loaded_relation(MAJOR, true, SQL, "t");
    let dir = cluster.datadir().to_path_buf();
    let original = damage(&path, 4);
    damage(&path, 9);
    let tmp = tempfile::tempdir().expect("tempdir");

    // Six runs at once on an empty database: four hosts, db0 three times.
    let d = dir.display().to_string();
    let hosts = ["db0", "db1", "db2", "db3", "db0", "db0"];
    let children: Vec<_> = hosts
        .iter()
        .map(|h| {
            Command::new(common::bin())
                .args([
                    "verify",
                    "-D",
                    &d,
                    "--level",
                    "physical",
                    "--format",
                    "json",
                    "--no-progress",
                    "-j",
                    "1",
                    "--ledger",
                    &conninfo,
                    "--ledger-host",
                    h,
                ])
                .env("XDG_STATE_HOME", tmp.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut news = Vec::new();
    for (h, child) in hosts.iter().zip(children) {
        let r = run::parse(child.wait_with_output().unwrap());
        assert_eq!(r.status, 2, "{h}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.is_empty(), "{h}: {}", r.stderr);
        let (new, open, repaired) = counts(&r);
        assert_eq!((open, repaired), (2, 0), "{h}");
        news.push((*h, new));
    }
    // Each host's damage was new exactly once: db0's three runs took turns.
    let db0_new: u64 = news
        .iter()
        .filter(|(h, _)| *h == "db0")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(db0_new, 2, "{news:?}");
    let q = |sql: &str| central.query_value("postgres", sql).expect(sql);
    assert_eq!(q("SELECT count(*) FROM pgcheckdb_runs"), "6");
    assert_eq!(
        q("SELECT count(*) FROM pgcheckdb_damage WHERE repaired_run IS NULL"),
        "8"
    );
    let sysid = q("SELECT count(DISTINCT system_identifier) FROM pgcheckdb_damage");
    assert_eq!(sysid, "1");

    // `ledger` lists across hosts: db0's last run saw its damage again (open), the others'
    // first run found it (new).
    let (clusters, entries) = listed(&["--ledger", &conninfo], tmp.path());
    assert_eq!(clusters.len(), 4, "{clusters:?}");
    let mut expected = vec![
        entry("open", "db0", &file, 4),
        entry("open", "db0", &file, 9),
    ];
    for h in ["db1", "db2", "db3"] {
        expected.push(entry("new", h, &file, 4));
        expected.push(entry("new", h, &file, 9));
    }
    expected.sort();
    assert_eq!(entries, expected);

    // Block 4 repaired, seen by db1 alone: only db1's entry is repaired.
    common::write_block(&path, 4, &original, false);
    let r = verify(
        &dir,
        "physical",
        &[&conninfo],
        &["--ledger-host", "db1"],
        tmp.path(),
    );
    assert_eq!(r.status, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(counts(&r), (0, 1, 1));
    let (_, entries) = listed(&["--ledger", &conninfo], tmp.path());
    assert!(
        entries.contains(&entry("repaired", "db1", &file, 4)),
        "{entries:?}"
    );
    assert!(
        entries.contains(&entry("open", "db1", &file, 9)),
        "{entries:?}"
    );
    assert!(
        entries.contains(&entry("open", "db0", &file, 4)),
        "{entries:?}"
    );
    assert!(
        entries.contains(&entry("new", "db2", &file, 4)),
        "{entries:?}"
    );
}
