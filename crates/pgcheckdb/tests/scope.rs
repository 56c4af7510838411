//! Checking part of a cluster (pg_amcheck's `-d/-s/-t/-i` patterns and their exclusions,
//! dependent indexes and TOAST, pg_checksums' `-f`), `--estimate`, plain progress lines in
//! logs, the verbose per-relation summary and the JSON summary's timestamps, on real clusters.
//!
//! What a scope should select is asked of the server itself (`pg_index`, `reltoastrelid`,
//! `pg_relation_filepath`) while the fixture runs, and compared with the files the run read.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use pgcheckdb_pg::ops::corrupt::{self, Damage};
use pgcheckdb_testkit::asserts::assert_status;
use pgcheckdb_testkit::run::{pgcheckdb, Run};
use pgcheckdb_testkit::{standard_cluster, StandardCluster, BLCKSZ};
use serde_json::Value;

use common::bin;

/// `pgcheckdb verify -D <datadir> --format json --no-progress <args>`.
fn verify_with(datadir: &Path, args: &[&str]) -> Run {
    let dir = datadir.to_string_lossy().to_string();
    let mut all = vec![
        "verify",
        "-D",
        dir.as_str(),
        "--format",
        "json",
        "--no-progress",
    ];
    all.extend_from_slice(args);
    pgcheckdb(&bin(), &all, None)
}

/// The summary's `files`.
fn files_read(run: &Run) -> u64 {
    run.summary()["files"]
        .as_u64()
        .unwrap_or_else(|| panic!("no files in the summary\n{run}"))
}

/// The `relation` lines of a verbose JSON run.
fn relation_lines(run: &Run) -> Vec<Value> {
    run.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "relation")
        .collect()
}

/// `schema.name` of every relation line, with its database.
fn relation_names(run: &Run) -> BTreeSet<(String, String)> {
    relation_lines(run)
        .iter()
        .map(|v| {
            (
                v["database"].as_str().unwrap_or("").to_string(),
                v["relation"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// Main-fork paths (relative to the data directory) of the relations `where_sql` selects from
/// `pg_class c` in `db`, asked of the running server.
fn server_paths(sc: &mut StandardCluster, db: &str, where_sql: &str) -> Vec<String> {
    sc.cluster.start().expect("start");
    let sql = format!(
        "SELECT string_agg(pg_relation_filepath(c.oid), ',' ORDER BY c.oid) FROM pg_class c WHERE {where_sql}"
    );
    let list = sc.cluster.query_value(db, &sql).expect("query");
    sc.cluster.stop().expect("stop");
    list.split(',').map(str::to_string).collect()
}

/// Every file (all forks, all segments) of the relations whose main forks are `paths`.
fn files_of(datadir: &Path, paths: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in paths {
        let full = datadir.join(p);
        let dir = full.parent().expect("parent");
        let base = full
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .to_string();
            let rest = match name.strip_prefix(&base) {
                Some(r) => r,
                None => continue,
            };
            let rest = rest.split('.').next().unwrap_or("");
            if ["", "_fsm", "_vm", "_init"].contains(&rest) {
                out.insert(format!(
                    "{}/{name}",
                    Path::new(p).parent().unwrap().display()
                ));
            }
        }
    }
    out
}

/// `accounts`, its indexes, its TOAST table and the TOAST table's index.
const ACCOUNTS_AND_DEPENDENTS: &str = "c.oid = 'accounts'::regclass \
    OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'accounts'::regclass) \
    OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = 'accounts'::regclass) \
    OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = \
        (SELECT reltoastrelid FROM pg_class WHERE oid = 'accounts'::regclass))";

/// `-t accounts` reads exactly the files of accounts, its indexes and TOAST (with its index).
fn table_scope_reads_only_its_files(sc: &mut StandardCluster) {
    let paths = server_paths(sc, "postgres", ACCOUNTS_AND_DEPENDENTS);
    let expected = files_of(sc.datadir(), &paths);
    assert!(
        expected.len() >= 8,
        "accounts has 5 indexes and TOAST: {expected:?}"
    );
    let run = verify_with(sc.datadir(), &["-t", "accounts"]);
    assert_status(&run, 0, "-t accounts");
    assert_eq!(
        files_read(&run),
        expected.len() as u64,
        "-t accounts reads {expected:?}\n{run}"
    );
    let bytes: u64 = expected
        .iter()
        .map(|f| std::fs::metadata(sc.datadir().join(f)).expect("stat").len() / BLCKSZ as u64)
        .sum::<u64>()
        * BLCKSZ as u64;
    assert_eq!(run.summary()["bytes"].as_u64(), Some(bytes), "{run}");
}

#[test]
fn scope_selects_exactly_the_relations_asked_for_pg16() {
    let mut sc = standard_cluster(16, true);
    let datadir = sc.datadir().to_path_buf();
    table_scope_reads_only_its_files(&mut sc);

    // --no-dependent-indexes: the table and its TOAST; with --no-dependent-toast only the table.
    let table_and_toast = files_of(
        &datadir,
        &server_paths(
            &mut sc,
            "postgres",
            "c.oid = 'accounts'::regclass OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = 'accounts'::regclass) \
             OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = (SELECT reltoastrelid FROM pg_class WHERE oid = 'accounts'::regclass))",
        ),
    );
    let run = verify_with(&datadir, &["-t", "accounts", "--no-dependent-indexes"]);
    assert_eq!(files_read(&run), table_and_toast.len() as u64, "{run}");
    let table_only = files_of(&datadir, &[sc.rel("postgres", "accounts").to_string()]);
    let run = verify_with(
        &datadir,
        &[
            "-t",
            "accounts",
            "--no-dependent-indexes",
            "--no-dependent-toast",
            "-v",
        ],
    );
    assert_eq!(files_read(&run), table_only.len() as u64, "{run}");
    assert_eq!(
        relation_names(&run),
        BTreeSet::from([("postgres".to_string(), "public.accounts".to_string())])
    );

    // -f: pg_checksums' file number selects the same table's files.
    let node = Path::new(sc.rel("postgres", "accounts"))
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let run = verify_with(&datadir, &["-f", &node]);
    assert_status(&run, 0, "-f");
    assert_eq!(files_read(&run), table_only.len() as u64, "{run}");

    // -i: indexes only; a pattern with a wildcard.
    let run = verify_with(&datadir, &["-i", "accounts_*", "-v"]);
    let names: BTreeSet<String> = relation_names(&run).into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        names,
        [
            "public.accounts_brin",
            "public.accounts_bucket",
            "public.accounts_hash",
            "public.accounts_name_idx",
            "public.accounts_pkey"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        "{run}"
    );

    // -d: only that database (and the shared catalogs); --exclude-database leaves it out.
    let run = verify_with(&datadir, &["-d", "second", "-v"]);
    let dbs: BTreeSet<String> = relation_names(&run).into_iter().map(|(d, _)| d).collect();
    assert_eq!(
        dbs,
        BTreeSet::from(["".to_string(), "second".to_string()]),
        "{run}"
    );
    let run = verify_with(&datadir, &["--exclude-database", "sec*", "-v"]);
    let dbs: BTreeSet<String> = relation_names(&run).into_iter().map(|(d, _)| d).collect();
    assert!(
        !dbs.contains("second") && dbs.contains("postgres"),
        "{dbs:?}"
    );
    // db.schema.table: the database part matters.
    let run = verify_with(&datadir, &["-t", "second.public.other", "-v"]);
    assert_status(&run, 0, "second.public.other");
    assert!(relation_names(&run).contains(&("second".into(), "public.other".into())));
    let run = verify_with(&datadir, &["-t", "postgres.public.other"]);
    assert_status(&run, 1, "postgres.public.other matches nothing");

    // -s with an exclusion: excluded tables go, the rest of the schema stays.
    let run = verify_with(&datadir, &["-s", "public", "-T", "acc*", "-v"]);
    let names: BTreeSet<String> = relation_names(&run).into_iter().map(|(_, n)| n).collect();
    assert!(
        names.contains("public.small") && !names.contains("public.accounts"),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("public.") || n.starts_with("pg_toast.")),
        "{names:?}"
    );
    // -t with -I: the excluded index is not added as a dependent.
    let run = verify_with(&datadir, &["-t", "accounts", "-I", "accounts_pkey", "-v"]);
    let names: BTreeSet<String> = relation_names(&run).into_iter().map(|(_, n)| n).collect();
    assert!(
        names.contains("public.accounts_name_idx") && !names.contains("public.accounts_pkey"),
        "{names:?}"
    );
}

#[test]
fn names_fold_quotes_are_exact_and_unmatched_patterns_fail_pg16() {
    let mut sc = standard_cluster(16, false);
    sc.cluster.start().expect("start");
    sc.cluster
        .psql("postgres", "CREATE TABLE \"MixedCase\" (id int); INSERT INTO \"MixedCase\" SELECT generate_series(1, 100);")
        .expect("create");
    sc.cluster.stop().expect("stop");
    let datadir = sc.datadir().to_path_buf();

    // Unquoted: folded to lower case, so ACCOUNTS is accounts and MixedCase is mixedcase.
    let run = verify_with(
        &datadir,
        &[
            "-t",
            "ACCOUNTS",
            "--no-dependent-indexes",
            "--no-dependent-toast",
            "-v",
        ],
    );
    assert_status(&run, 0, "ACCOUNTS");
    assert!(relation_names(&run).contains(&("postgres".into(), "public.accounts".into())));
    let run = verify_with(&datadir, &["-t", "MixedCase"]);
    assert_status(&run, 1, "unquoted MixedCase");
    assert!(
        run.stderr
            .contains("no relations to check matching \"MixedCase\""),
        "{run}"
    );
    assert!(
        run.summary().get("error").is_some(),
        "JSON ends with a summary carrying the error\n{run}"
    );
    // Quoted: exact.
    let run = verify_with(&datadir, &["-t", "\"MixedCase\"", "-v"]);
    assert_status(&run, 0, "quoted MixedCase");
    assert_eq!(
        relation_names(&run),
        BTreeSet::from([("postgres".to_string(), "public.MixedCase".to_string())])
    );
    // Each kind of pattern that matches nothing is an error; --no-strict-names lets it pass
    // while another pattern matches.
    for (flag, pat, message) in [
        (
            "-d",
            "nosuchdb",
            "no databases to check matching \"nosuchdb\"",
        ),
        (
            "-s",
            "nosuchschema",
            "no relations to check in schemas matching \"nosuchschema\"",
        ),
        (
            "-t",
            "nosuch*",
            "no relations to check matching \"nosuch*\"",
        ),
        (
            "-i",
            "nosuchindex",
            "no indexes to check matching \"nosuchindex\"",
        ),
        (
            "-f",
            "4000000000",
            "no relation files to check with file number 4000000000",
        ),
    ] {
        let run = verify_with(&datadir, &[flag, pat]);
        assert_status(&run, 1, pat);
        assert!(run.stderr.contains(message), "{flag} {pat}: {run}");
    }
    let run = verify_with(
        &datadir,
        &["-t", "nosuch", "-t", "small", "--no-strict-names"],
    );
    assert_status(&run, 0, "--no-strict-names");
    assert!(files_read(&run) >= 1);
    let run = verify_with(&datadir, &["-t", "a.b.c.d"]);
    assert_status(&run, 1, "too many dotted names");
    assert!(run.stderr.contains("too many dotted names"), "{run}");
}

#[test]
fn damage_is_reported_only_inside_the_scope_pg16() {
    let sc = standard_cluster(16, true);
    let datadir = sc.datadir().to_path_buf();
    corrupt::inject(
        &sc.file("postgres", "accounts"),
        1,
        BLCKSZ,
        Damage::ZeroPdUpper,
    )
    .expect("damage accounts");
    corrupt::inject(
        &sc.file("postgres", "small"),
        1,
        BLCKSZ,
        Damage::ZeroPdUpper,
    )
    .expect("damage small");
    let damaged = |run: &Run| -> BTreeSet<String> {
        run.error_blocks()
            .into_iter()
            .map(|(file, _)| file)
            .collect()
    };
    let accounts = sc.rel("postgres", "accounts").to_string();
    let small = sc.rel("postgres", "small").to_string();
    let run = verify_with(&datadir, &["-t", "accounts"]);
    assert_status(&run, 2, "-t accounts");
    assert_eq!(damaged(&run), BTreeSet::from([accounts.clone()]), "{run}");
    let run = verify_with(&datadir, &["-t", "small"]);
    assert_eq!(damaged(&run), BTreeSet::from([small.clone()]), "{run}");
    let run = verify_with(&datadir, &["-d", "second"]);
    assert_status(&run, 0, "-d second");
    let run = verify_with(&datadir, &[]);
    assert_eq!(damaged(&run), BTreeSet::from([accounts, small]), "{run}");
    // A scoped run calls no unselected file an orphan and none missing.
    let run = verify_with(&datadir, &["-t", "small", "--no-dependent-indexes"]);
    let kinds: BTreeSet<&str> = run
        .findings
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(
        !kinds.contains("orphan_file") && !kinds.contains("missing_file"),
        "{run}"
    );

    // --estimate checks nothing: no findings, exit 0, the bytes a full run reads.
    let full_bytes = verify_with(&datadir, &[]).summary()["bytes"].as_u64();
    let run = verify_with(&datadir, &["--estimate"]);
    assert_status(&run, 0, "--estimate on a damaged cluster");
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 2, "{run}");
    assert_eq!(lines[0]["type"], "estimate");
    assert_eq!(lines[1]["type"], "summary");
    assert_eq!(lines[0]["bytes"].as_u64(), full_bytes, "{run}");
    let levels: Vec<&str> = lines[0]["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .filter_map(|l| l["level"].as_str())
        .collect();
    assert_eq!(levels, ["physical", "standard", "extended"]);
    // The extended level's cross-page work is not sampled: its estimate says it is a lower bound.
    let at_least: Vec<bool> = lines[0]["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| l["at_least"].is_string())
        .collect();
    assert_eq!(at_least, [false, false, true], "{run}");
    for l in lines[0]["levels"].as_array().expect("levels") {
        assert!(
            l["seconds"].as_f64().is_some_and(|s| s > 0.0 && s < 600.0),
            "{l}"
        );
        assert!(l["sample_bytes"].as_u64().is_some_and(|b| b > 0), "{l}");
    }
    assert!(run.findings.is_empty());
    // Scoped estimate: the scope's bytes.
    let scoped = verify_with(&datadir, &["-t", "accounts"]).summary()["bytes"].as_u64();
    let run = verify_with(&datadir, &["--estimate", "-t", "accounts"]);
    let first = run.first_json();
    assert_eq!(first["bytes"].as_u64(), scoped, "{run}");
    // Text form.
    let dir = datadir.to_string_lossy().to_string();
    let run = pgcheckdb(&bin(), &["verify", "-D", dir.as_str(), "--estimate"], None);
    assert_status(&run, 0, "text estimate");
    assert!(
        run.stdout.contains("nothing was checked")
            && run.stdout.contains("standard")
            && run.stdout.contains("in at least"),
        "{run}"
    );
}

#[test]
fn verbose_counts_pages_and_rows_per_relation_and_json_has_timestamps_pg16() {
    let mut sc = standard_cluster(16, false);
    sc.cluster.start().expect("start");
    let rows: u64 = sc
        .cluster
        .query_value("postgres", "SELECT count(*) FROM accounts")
        .expect("count")
        .parse()
        .expect("int");
    sc.cluster.stop().expect("stop");
    let datadir = sc.datadir().to_path_buf();
    let before = unix_now();
    let run = verify_with(&datadir, &["-v", "-t", "accounts"]);
    let after = unix_now();
    assert_status(&run, 0, "-v");
    let lines = relation_lines(&run);
    let line = |name: &str| {
        lines
            .iter()
            .find(|l| l["relation"] == name)
            .unwrap_or_else(|| panic!("no relation line for {name}\n{run}"))
    };
    let accounts = line("public.accounts");
    assert_eq!(
        accounts["pages"].as_u64(),
        Some(sc.blocks("postgres", "accounts", "main"))
    );
    assert_eq!(accounts["tuples"].as_u64(), Some(rows));
    assert_eq!(accounts["kind"], "table");
    let pkey = line("public.accounts_pkey");
    assert_eq!(
        pkey["pages"].as_u64(),
        Some(sc.blocks("postgres", "accounts_pkey", "main"))
    );
    assert_eq!(
        pkey["tuples"].as_u64(),
        Some(rows),
        "one index entry per row"
    );
    // Relation lines come before the summary, which is last.
    let last: Value = run.last_json();
    assert_eq!(last["type"], "summary");

    // Timestamps: RFC 3339 UTC, within the run, started <= finished.
    let started = parse_rfc3339(run.summary()["started_at"].as_str().expect("started_at"));
    let finished = parse_rfc3339(run.summary()["finished_at"].as_str().expect("finished_at"));
    assert!(
        before - 1.0 <= started && started <= finished && finished <= after + 1.0,
        "{before} {started} {finished} {after}"
    );

    // Without -v: no relation lines. Text -v: CHECKDB's sentence, on stderr.
    assert!(relation_lines(&verify_with(&datadir, &["-t", "accounts"])).is_empty());
    let dir = datadir.to_string_lossy().to_string();
    let run = pgcheckdb(
        &bin(),
        &[
            "verify",
            "-D",
            dir.as_str(),
            "-v",
            "-t",
            "accounts",
            "--no-progress",
        ],
        None,
    );
    let expect = format!(
        "there are {rows} rows in {} pages for public.accounts",
        sc.blocks("postgres", "accounts", "main")
    );
    // On stderr with the other -v lines, as the help says: `-v 2>>verify.log` logs them.
    assert!(
        run.stderr
            .contains(&format!("pgcheckdb: postgres: {expect}")),
        "{expect}\n{run}"
    );
    assert!(!run.stdout.contains("there are "), "{run}");
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fff]Z`, counted day by day from 1970.
fn parse_rfc3339(s: &str) -> f64 {
    let bad = || -> ! { panic!("not RFC 3339 UTC: {s}") };
    let (date, time) = s
        .strip_suffix('Z')
        .and_then(|t| t.split_once('T'))
        .unwrap_or_else(|| bad());
    let d: Vec<u64> = date
        .split('-')
        .map(|x| x.parse().unwrap_or_else(|_| bad()))
        .collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<u64> = hms
        .split(':')
        .map(|x| x.parse().unwrap_or_else(|_| bad()))
        .collect();
    assert!(
        d.len() == 3 && t.len() == 3 && (1..=12).contains(&d[1]) && t[0] < 24,
        "{s}"
    );
    let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let mut days = (1970..d[0])
        .map(|y| if leap(y) { 366 } else { 365 })
        .sum::<u64>();
    let month_days = [
        31,
        if leap(d[0]) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    days += month_days[..(d[1] - 1) as usize].iter().sum::<u64>() + d[2] - 1;
    let frac: f64 = format!("0.{frac}").parse().unwrap_or_else(|_| bad());
    (days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) as f64 + frac
}

#[test]
fn progress_lines_go_to_a_log_every_few_seconds_pg16() {
    let sc = standard_cluster(16, true);
    let dir = sc.datadir().to_string_lossy().to_string();
    // stderr is a pipe here, not a terminal: --progress gives plain lines. --max-rate keeps the
    // run longer than two intervals.
    let full = verify_with(sc.datadir(), &[]).summary()["bytes"]
        .as_u64()
        .expect("bytes");
    let rate_mb = (full as f64 / 1e6 / 12.0).max(0.5);
    let rate = format!("{rate_mb:.2}");
    let run = pgcheckdb(
        &bin(),
        &[
            "verify",
            "-D",
            dir.as_str(),
            "--progress",
            "--max-rate",
            rate.as_str(),
            "-j",
            "1",
        ],
        None,
    );
    assert_status(&run, 0, "--progress");
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("pgcheckdb: progress: "))
        .collect();
    assert!(
        lines.len() >= 2,
        "expected a line every 5 s of a ~12 s run\n{run}"
    );
    let percents: Vec<f64> = lines
        .iter()
        .map(|l| {
            l["pgcheckdb: progress: ".len()..]
                .split('%')
                .next()
                .unwrap()
                .parse()
                .expect("percent")
        })
        .collect();
    assert!(
        percents.windows(2).all(|w| w[0] < w[1]) && percents[0] > 0.0,
        "{lines:?}"
    );
    for l in &lines {
        assert!(l.contains(" blocks, in ") && l.contains("/s, ETA "), "{l}");
    }
    // No escape sequences of a bar in a log.
    assert!(!run.stderr.contains('\u{1b}'), "{run}");
    // Without --progress a log stays quiet.
    let run = pgcheckdb(
        &bin(),
        &["verify", "-D", dir.as_str(), "--max-rate", "200"],
        None,
    );
    assert!(!run.stderr.contains("progress:"), "{run}");
}

/// The basic `-t` selection on every supported version.
#[test]
fn table_scope_every_version() {
    for major in [14, 15, 17, 18, 19] {
        let mut sc = standard_cluster(major, major % 2 == 1);
        table_scope_reads_only_its_files(&mut sc);
    }
}

/// Ctrl-C while plain progress lines go to a log: an "interrupted" line right away, the
/// interruption error last (no progress line after it), exit 130.
#[test]
fn interrupt_with_progress_lines_pg16() {
    let sc = standard_cluster(16, false);
    let dir = sc.datadir().to_string_lossy().to_string();
    let child = std::process::Command::new(bin())
        .args([
            "verify",
            "-D",
            dir.as_str(),
            "--progress",
            "--max-rate",
            "1",
            "-j",
            "1",
        ])
        .env_remove("PGDATA")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(6500));
    // SAFETY: kill with the pid of our own child and a valid signal number.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0, "kill");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let progress = lines
        .iter()
        .position(|l| l.starts_with("pgcheckdb: progress: "));
    let told = lines
        .iter()
        .position(|l| l.starts_with("pgcheckdb: interrupted by SIGINT"))
        .unwrap_or_else(|| panic!("no interrupted line\n{stderr}"));
    assert!(
        progress.is_some_and(|p| p < told),
        "a progress line came first\n{stderr}"
    );
    assert!(
        !lines[told..]
            .iter()
            .any(|l| l.starts_with("pgcheckdb: progress: ")),
        "no progress after the interruption\n{stderr}"
    );
    let last = lines.last().expect("a line");
    assert!(
        last.contains("interrupted by SIGINT during the block scan"),
        "{stderr}"
    );
}
