//! `verify` never claims "no corruption" when it did not look: damage to the data directory's
//! layout (tablespace links, `pg_tblspc/`, `pg_xact/`, a directory where a relation file is
//! named) is a finding; what pgcheckdb may not read is a tool error (exit 1) with a JSON
//! summary that carries it; hostile file names and sparse files do not make it allocate
//! without bound; FIFOs never make it hang; Ctrl-C / SIGTERM stop it with 130 / 143.
//!
//! Everything here is about the data directory's layout and the tool's own behaviour, which
//! is the same for every supported version, so one version (16) is used for the real cluster.
//! The version refusals use a PostgreSQL 14 cluster (pg_control version 1300, shared with 13)
//! rewritten to look like 13, since PostgreSQL 13 binaries are not part of the test matrix, and
//! a PostgreSQL 19 cluster rewritten to look like a 20 that pgcheckdb does not know.

mod common;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pgcheckdb_testkit::asserts::assert_status;
use pgcheckdb_testkit::guard::{self, mkfifo, Guard};
use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::{standard_cluster, Cluster, ClusterOptions, RunAs, StandardCluster};
use serde_json::Value;

use common::bin;

/// How long any run may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(120);

/// Runs pgcheckdb; kills it and fails the test if it runs longer than [`HANG`].
fn run(args: &[&str], limits: Guard<'_>) -> Run {
    guard::run(&bin(), args, HANG, limits)
}

/// `verify -D <datadir> --format json --no-progress <extra...>`, guarded.
fn verify_json_with(datadir: &Path, extra: &[&str], limits: Guard<'_>) -> Run {
    let d = datadir.to_string_lossy();
    let mut args = vec!["verify", "-D", &d, "--format", "json", "--no-progress"];
    args.extend_from_slice(extra);
    run(&args, limits)
}

fn verify_json(datadir: &Path, limits: Guard<'_>) -> Run {
    verify_json_with(datadir, &["-j", "2"], limits)
}

fn verify(datadir: &Path) -> Run {
    verify_json(datadir, Guard::default())
}

/// Exit 2 with an error finding of `kind` at `file`.
fn assert_error_finding(run: &Run, kind: &str, file: &str, what: &str) {
    assert_status(run, 2, what);
    assert!(
        run.of_kind(kind)
            .iter()
            .any(|f| f["file"] == file && f["severity"] == "error"),
        "{what}: expected an error finding {kind} at {file}\n{run}"
    );
}

/// Exit 1, one `pgcheckdb: error:` line on stderr containing `needle`, and a JSON summary as
/// the last stdout line with an `error` containing `needle`.
fn assert_tool_error(run: &Run, needle: &str, what: &str) {
    assert_status(run, 1, what);
    assert!(
        run.stderr_lines()
            .iter()
            .any(|l| l.starts_with("pgcheckdb: error:") && l.contains(needle)),
        "{what}: stderr should say {needle:?}\n{run}"
    );
    let last = run.stdout.lines().last().unwrap_or_default();
    let summary: Value = serde_json::from_str(last)
        .unwrap_or_else(|_| panic!("{what}: the last stdout line is not JSON\n{run}"));
    assert_eq!(summary["type"], "summary", "{what}\n{run}");
    assert!(
        summary["error"]
            .as_str()
            .is_some_and(|e| e.contains(needle)),
        "{what}: the summary's error should say {needle:?}\n{run}"
    );
}

/// Moves `path` aside for the duration of `f`.
fn without<T>(path: &Path, f: impl FnOnce() -> T) -> T {
    let aside = path.with_extension("pgcheckdb-test-aside");
    fs::rename(path, &aside).expect("move aside");
    let out = f();
    fs::rename(&aside, path).expect("move back");
    out
}

/// Replaces `path` by what `make` creates for the duration of `f`.
fn replaced<T>(path: &Path, make: impl FnOnce(&Path), f: impl FnOnce() -> T) -> T {
    without(path, || {
        make(path);
        let out = f();
        if path.is_dir() {
            fs::remove_dir_all(path).expect("remove replacement");
        } else {
            fs::remove_file(path).expect("remove replacement");
        }
        out
    })
}

/// Gives `path` mode `mode` for the duration of `f`.
fn with_mode<T>(path: &Path, mode: u32, f: impl FnOnce() -> T) -> T {
    let old = fs::metadata(path).expect("stat").permissions().mode();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    let out = f();
    fs::set_permissions(path, fs::Permissions::from_mode(old)).expect("chmod back");
    out
}

fn the_tablespace_link(sc: &StandardCluster) -> PathBuf {
    let dir = sc.datadir().join("pg_tblspc");
    let entry = fs::read_dir(&dir)
        .expect("list pg_tblspc")
        .flatten()
        .next()
        .expect("the fixture has a tablespace");
    entry.path()
}

/// The unprivileged user the permission cases run as (permission bits do not bind root).
fn unprivileged(sc: &StandardCluster) -> &RunAs {
    sc.cluster.user().expect(
        "the permission cases need to run as root, to switch to an unprivileged user that permission bits bind",
    )
}

/// `pg_class` of database "postgres": a mapped catalog whose file number is its oid, 1259,
/// until a `VACUUM FULL` of it (the fixture runs none).
fn pg_class_file(sc: &StandardCluster) -> String {
    format!("{}/1259", sc.rel_dir("postgres", "accounts").display())
}

#[test]
fn verify_honesty_pg16() {
    let sc = standard_cluster(16, true);
    let healthy = verify(sc.datadir());
    assert_status(&healthy, 0, "healthy cluster");
    layout_damage_is_a_finding(&sc);
    pg_xact_and_multixact(&sc);
    permission_problems_are_tool_errors(&sc);
    stray_and_missing_segments_once(&sc);
    hostile_sizes_stay_bounded(&sc);
    fifos_never_hang(&sc);
    signals_stop_with_a_summary(&sc);
    let healthy = verify(sc.datadir());
    assert_status(&healthy, 0, "healthy cluster after every case was undone");
}

/// Item 5: dangling and looping tablespace links, a removed `pg_tblspc/`, a relation file
/// replaced by a directory.
fn layout_damage_is_a_finding(sc: &StandardCluster) {
    let link = the_tablespace_link(sc);
    let rel = format!(
        "pg_tblspc/{}",
        link.file_name().unwrap_or_default().to_string_lossy()
    );
    let dangling = replaced(
        &link,
        |p| symlink("/nonexistent/pgcheckdb-tablespace", p).expect("symlink"),
        || verify(sc.datadir()),
    );
    assert_error_finding(
        &dangling,
        "tablespace_missing",
        &rel,
        "dangling tablespace link",
    );
    let looping = replaced(
        &link,
        |p| symlink(p, p).expect("symlink"),
        || verify(sc.datadir()),
    );
    assert_error_finding(
        &looping,
        "tablespace_missing",
        &rel,
        "looping tablespace link",
    );
    let tblspc = sc.datadir().join("pg_tblspc");
    let removed = without(&tblspc, || verify(sc.datadir()));
    assert_error_finding(
        &removed,
        "missing_directory",
        "pg_tblspc",
        "removed pg_tblspc",
    );
    let accounts = sc.file("postgres", "accounts");
    let dir = replaced(
        &accounts,
        |p| fs::create_dir(p).expect("mkdir"),
        || verify(sc.datadir()),
    );
    assert_error_finding(
        &dir,
        "irregular_file",
        sc.rel("postgres", "accounts"),
        "relation file replaced by a directory",
    );
}

/// Item 5: without `pg_xact/` (or `pg_multixact/`) the server does not start and commit status
/// is unknown: an error finding, never a clean run.
fn pg_xact_and_multixact(sc: &StandardCluster) {
    for dir in ["pg_xact", "pg_multixact"] {
        let run = without(&sc.datadir().join(dir), || verify(sc.datadir()));
        let file = if dir == "pg_xact" {
            "pg_xact"
        } else {
            "pg_multixact/offsets"
        };
        assert_error_finding(&run, "missing_directory", file, &format!("removed {dir}"));
    }
}

/// Item 7: what the tool may not read is a tool error naming "permission denied", never
/// corruption (`bad_relmap`) and never "missing".
fn permission_problems_are_tool_errors(sc: &StandardCluster) {
    let user = unprivileged(sc);
    let as_user = Guard {
        user: Some(user),
        ..Guard::default()
    };
    let db = sc.datadir().join(sc.rel_dir("postgres", "accounts"));
    let run = with_mode(&db, 0o000, || verify_json(sc.datadir(), as_user));
    assert_tool_error(&run, "ermission denied", "unreadable database directory");
    assert!(
        run.of_kind("bad_relmap").is_empty() && run.problems().is_empty(),
        "an unreadable directory is no evidence of corruption\n{run}"
    );
    let run = with_mode(sc.datadir(), 0o000, || verify_json(sc.datadir(), as_user));
    assert_tool_error(&run, "ermission denied", "unreadable data directory");
    assert!(!run.stderr.contains("missing"), "{run}");
    let xact = sc.datadir().join("pg_xact");
    let run = with_mode(&xact, 0o000, || verify_json(sc.datadir(), as_user));
    assert_tool_error(&run, "ermission denied", "unreadable pg_xact");
    let d = sc.datadir().to_string_lossy().into_owned();
    let text = with_mode(&db, 0o000, || {
        run_text(&["verify", "-D", &d, "--no-progress"], as_user)
    });
    assert_status(&text, 1, "unreadable database directory, text");
    assert!(
        !text.stdout.contains("no corruption ("),
        "an incomplete run must not say it found no corruption\n{text}"
    );
}

fn run_text(args: &[&str], limits: Guard<'_>) -> Run {
    run(args, limits)
}

/// Item 14: a stray segment-named file is reported once, a missing run of middle segments once.
fn stray_and_missing_segments_once(sc: &StandardCluster) {
    let stray = sc.datadir().join("global/99990.123");
    fs::write(&stray, b"abc").expect("write stray file");
    let run = verify(sc.datadir());
    fs::remove_file(&stray).expect("remove stray file");
    assert_status(&run, 2, "stray global/99990.123");
    let about: Vec<&Value> = run
        .findings
        .iter()
        .filter(|f| {
            f["file"]
                .as_str()
                .is_some_and(|p| p.starts_with("global/99990"))
        })
        .collect();
    let gaps = run.of_kind("segment_gap");
    assert_eq!(gaps.len(), 1, "one segment_gap for segments 0..=122\n{run}");
    assert_eq!(gaps[0]["detail"]["missing_segments"], 123, "{run}");
    assert_eq!(
        about.len(),
        2,
        "the gap and the partial block, nothing else\n{run}"
    );
    assert_eq!(run.of_kind("partial_block").len(), 1, "{run}");

    // A relation whose segments 1..=4 are missing before a one-block segment 5.
    let rel = sc.rel("postgres", "accounts");
    let seg5 = sc.fork_file("postgres", "accounts", "main", 5);
    fs::write(&seg5, vec![0u8; 8192]).expect("write segment 5");
    let run = verify(sc.datadir());
    fs::remove_file(&seg5).expect("remove segment 5");
    let gaps = run.of_kind("segment_gap");
    let missing: Vec<&&Value> = gaps
        .iter()
        .filter(|f| f["detail"]["missing_segments"].is_u64())
        .collect();
    assert_eq!(
        missing.len(),
        1,
        "one finding for the run of missing segments\n{run}"
    );
    assert_eq!(missing[0]["file"], format!("{rel}.1"), "{run}");
    assert_eq!(missing[0]["detail"]["missing_segments"], 4, "{run}");
    assert_eq!(missing[0]["detail"]["last_missing_segment"], 4, "{run}");
}

/// Item 13b: hostile names and sparse files under a 256 MB address-space cap.
fn hostile_sizes_stay_bounded(sc: &StandardCluster) {
    let capped = Guard {
        address_space: Some(256 << 20),
        ..Guard::default()
    };
    let db = sc.datadir().join(sc.rel_dir("postgres", "accounts"));
    let hostile = db.join("99990.4000000000");
    fs::write(&hostile, vec![0u8; 8192]).expect("write hostile file");
    let run = verify_json(sc.datadir(), capped);
    fs::remove_file(&hostile).expect("remove hostile file");
    assert!(run.summary.is_some(), "verify must finish\n{run}");
    let impossible = run.of_kind("impossible_segment");
    assert_eq!(impossible.len(), 1, "{run}");
    assert!(
        run.of_kind("segment_gap").is_empty(),
        "no gaps planned up to it\n{run}"
    );
    assert_status(&run, 0, "an impossible segment is a warning");

    // pg_class of the database, extended to 1.125 GiB of holes (past one segment, so it is a
    // finding; more than the cap, so reading it whole would fail): read page by page.
    let class = pg_class_file(sc);
    let path = sc.datadir().join(&class);
    let good = fs::read(&path).expect("read pg_class");
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open pg_class");
    file.set_len(1152 << 20).expect("extend pg_class");
    let run = verify_json(sc.datadir(), capped);
    fs::write(&path, &good).expect("restore pg_class");
    file.set_len(good.len() as u64).expect("truncate pg_class");
    assert!(run.summary.is_some(), "verify must finish\n{run}");
    assert_error_finding(&run, "segment_too_big", &class, "sparse 1.125 GiB pg_class");
    assert_eq!(
        run.of_kind("segment_too_big")[0]["relation"]["name"],
        "pg_catalog.pg_class",
        "the catalog was still read, so findings are named\n{run}"
    );
}

/// Item 3: a FIFO where a file is read never makes verify, inspect or status hang.
fn fifos_never_hang(sc: &StandardCluster) {
    let d = sc.datadir().to_string_lossy().into_owned();
    let class = pg_class_file(sc);
    let rel = sc.rel("postgres", "accounts").to_string();
    let db_dir = sc
        .rel_dir("postgres", "accounts")
        .to_string_lossy()
        .into_owned();
    // (file, expected exit status of verify, what must be said)
    let cases: [(String, i32, &str); 8] = [
        (rel.clone(), 2, "irregular_file"),
        (class.clone(), 2, "irregular_file"),
        ("postmaster.pid".into(), 1, "postmaster.pid"),
        ("PG_VERSION".into(), 1, "PG_VERSION"),
        ("global/pg_control".into(), 1, "FIFO"),
        ("global/pg_filenode.map".into(), 2, "irregular_file"),
        (format!("{db_dir}/pg_filenode.map"), 2, "irregular_file"),
        ("pg_xact/0000".into(), 2, "irregular_file"),
    ];
    for (file, status, needle) in cases {
        let path = sc.datadir().join(&file);
        let make = |p: &Path| mkfifo(p);
        let verify_run = if path.exists() {
            replaced(&path, make, || verify(sc.datadir()))
        } else {
            mkfifo(&path);
            let r = verify(sc.datadir());
            fs::remove_file(&path).expect("remove FIFO");
            r
        };
        let what = format!("FIFO at {file}");
        assert_status(&verify_run, status, &what);
        if status == 2 {
            assert!(
                verify_run
                    .of_kind(needle)
                    .iter()
                    .any(|f| f["file"] == file.as_str()),
                "{what}: expected {needle} at {file}\n{verify_run}"
            );
        } else {
            assert_tool_error(&verify_run, needle, &what);
        }
    }
    let inspect = replaced(&sc.datadir().join(&rel), mkfifo, || {
        run(
            &["inspect", "-D", &d, "--file", &rel, "--block", "0"],
            Guard::default(),
        )
    });
    assert_status(&inspect, 1, "inspect of a FIFO");
    assert!(inspect.stderr.contains("FIFO"), "{inspect}");
    let status = replaced(&sc.datadir().join("global/pg_control"), mkfifo, || {
        run(&["checksums", "status", "-D", &d], Guard::default())
    });
    assert_status(&status, 1, "status with a FIFO pg_control");
    assert!(status.stderr.contains("FIFO"), "{status}");
}

/// Item 13c: SIGINT and SIGTERM during the scan (slowed by --max-rate) stop verify with one
/// line saying where it was, exit 130 / 143, and a JSON summary with the error.
fn signals_stop_with_a_summary(sc: &StandardCluster) {
    for (sig, code, name) in [
        (libc::SIGINT, 130, "SIGINT"),
        (libc::SIGTERM, 143, "SIGTERM"),
    ] {
        let run = verify_json_with(
            sc.datadir(),
            &["--max-rate", "1"],
            Guard {
                signal: Some((sig, Duration::from_secs(2))),
                ..Guard::default()
            },
        );
        assert_status(&run, code, name);
        let lines = run.stderr_lines();
        assert_eq!(
            lines.len(),
            1,
            "one line saying what state it was in\n{run}"
        );
        assert!(
            lines[0].contains(name) && lines[0].contains("interrupted"),
            "{run}"
        );
        let error = run.summary()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(error.contains(name), "{run}");
    }
}

/// Item 7: a PostgreSQL 13 cluster (and an unknown catalog version) is refused with exit 1.
#[test]
fn unknown_versions_are_refused() {
    let opts = ClusterOptions::new(14, false).throwaway();
    let cluster = Cluster::init_temp(&opts).expect("initdb 14");
    let datadir = cluster.datadir();
    let control_path = datadir.join("global/pg_control");
    let good = fs::read(&control_path).expect("read pg_control");
    // PostgreSQL 13's catalog version, with pg_control version 1300 (13-16 share it).
    for (catversion, pg_version, needle) in [
        (202007201u32, "13\n", "PostgreSQL 13 is not supported"),
        (202107999u32, "14\n", "unknown PostgreSQL version"),
    ] {
        let mut bad = good.clone();
        bad[12..16].copy_from_slice(&catversion.to_le_bytes());
        let crc = crc32c::crc32c(&bad[..288]);
        bad[288..292].copy_from_slice(&crc.to_le_bytes());
        fs::write(&control_path, &bad).expect("write pg_control");
        fs::write(datadir.join("PG_VERSION"), pg_version).expect("write PG_VERSION");
        let run = verify(datadir);
        fs::write(&control_path, &good).expect("restore pg_control");
        fs::write(datadir.join("PG_VERSION"), "14\n").expect("restore PG_VERSION");
        assert_tool_error(&run, needle, needle);
        assert!(run.findings.is_empty(), "{run}");
    }
    assert_status(&verify(datadir), 0, "restored PostgreSQL 14 cluster");
}

/// A version newer than pgcheckdb knows is refused with one line by every command that reads
/// a data directory, and nothing is written: a PostgreSQL 19 cluster rewritten to look like a
/// "PostgreSQL 20" (its formats unknown), once with a new `pg_control_version` (2000, the CRC
/// where 19 keeps it) and once with 19's control-file layout (1905) but a catalog version no
/// release has and `PG_VERSION` 20: the layout is 19's, the version file says otherwise.
#[test]
fn a_newer_version_than_pgcheckdb_knows_is_refused() {
    let opts = ClusterOptions::new(19, true).throwaway();
    let cluster = Cluster::init_temp(&opts).expect("initdb 19");
    let datadir = cluster.datadir();
    let d = datadir.to_string_lossy().into_owned();
    let control_path = datadir.join("global/pg_control");
    let good = fs::read(&control_path).expect("read pg_control");
    for (pg_control_version, catversion, needle) in [
        (2000u32, 202710011u32, "unsupported pg_control_version 2000"),
        (1905u32, 202710011u32, "PG_VERSION says 20"),
    ] {
        let mut bad = good.clone();
        bad[8..12].copy_from_slice(&pg_control_version.to_le_bytes());
        bad[12..16].copy_from_slice(&catversion.to_le_bytes());
        let crc = crc32c::crc32c(&bad[..308]);
        bad[308..312].copy_from_slice(&crc.to_le_bytes());
        fs::write(&control_path, &bad).expect("write pg_control");
        fs::write(datadir.join("PG_VERSION"), "20\n").expect("write PG_VERSION");
        let what = format!("pg_control_version {pg_control_version}, catalog {catversion}");
        let run_verify = verify(datadir);
        assert_tool_error(&run_verify, needle, &what);
        assert!(run_verify.findings.is_empty(), "{run_verify}");
        assert_eq!(run_verify.stderr_lines().len(), 1, "one line\n{run_verify}");
        for args in [
            vec!["verify", "-D", &d, "--level", "extended"],
            vec![
                "inspect",
                "-D",
                &d,
                "--relation",
                "pg_class",
                "--block",
                "0",
            ],
            vec!["checksums", "status", "-D", &d],
            vec!["checksums", "disable", "-D", &d],
            vec!["checksums", "enable", "-D", &d],
            vec![
                "corrupt",
                "-D",
                &d,
                "--relation",
                "pg_class",
                "--block",
                "0",
                "--how",
                "zero",
                "--yes",
            ],
        ] {
            let r = run(&args, Guard::default());
            assert_status(&r, 1, &format!("{what}: {args:?}"));
            let lines = r.stderr_lines();
            assert!(
                lines.len() == 1
                    && lines[0].starts_with("pgcheckdb: error:")
                    && lines[0].contains(needle),
                "{what}: {args:?}: one error line saying {needle:?} expected\n{r}"
            );
        }
        assert_eq!(
            fs::read(&control_path).expect("read"),
            bad,
            "{what}: pg_control written"
        );
    }
    fs::write(&control_path, &good).expect("restore pg_control");
    fs::write(datadir.join("PG_VERSION"), "19\n").expect("restore PG_VERSION");
    assert_status(&verify(datadir), 0, "restored PostgreSQL 19 cluster");
}
