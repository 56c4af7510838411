//! What a DBA sees of the command line: usage without a command, "did you mean", range checks
//! at parse time, flags only where a command honours them, `--version`, the man page and shell
//! completions; on a real PostgreSQL 16 cluster: `-q` silence, `-v` phases, findings grouped
//! per page with a cap (all of them in JSON), advice lines, the owning table of an index, and
//! the Prometheus metrics (stdout and an atomically replaced file).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use pgcheckdb_testkit::asserts::assert_status;
use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{Cluster, ClusterOptions, BLCKSZ};

use common::{bin, edit};

fn pgcheckdb(args: &[&str]) -> Run {
    run::pgcheckdb(&bin(), args, None)
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Exit 1, exactly one stderr line containing every needle, nothing on stdout.
fn assert_one_line(run: &Run, needles: &[&str]) {
    assert_status(run, 1, "usage error");
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 1, "one stderr line expected\n{run}");
    for n in needles {
        assert!(lines[0].contains(n), "stderr should contain {n:?}\n{run}");
    }
    assert!(run.stdout.trim().is_empty(), "nothing on stdout\n{run}");
}

#[test]
fn no_command_prints_usage_not_an_error() {
    for (args, usage) in [
        (&[][..], "Usage: pgcheckdb <COMMAND>"),
        (&["checksums"][..], "Usage: pgcheckdb checksums <COMMAND>"),
        (&["bench"][..], "Usage: pgcheckdb bench [OPTIONS] <COMMAND>"),
    ] {
        let run = pgcheckdb(args);
        assert_status(&run, 1, &format!("{args:?}"));
        assert!(
            run.stderr.contains(usage),
            "{args:?}: usage expected\n{run}"
        );
        assert!(
            run.stderr.contains("Commands:"),
            "{args:?}: commands listed\n{run}"
        );
        assert!(
            !run.stderr.contains("error:"),
            "{args:?}: not an error\n{run}"
        );
    }
}

#[test]
fn misspelt_commands_and_flags_get_did_you_mean() {
    assert_one_line(
        &pgcheckdb(&["verfy"]),
        &["'verfy'", "did you mean 'verify'?"],
    );
    assert_one_line(
        &pgcheckdb(&["checksums", "enabel"]),
        &["did you mean 'enable'?"],
    );
    assert_one_line(
        &pgcheckdb(&["bench", "checkpoints"]),
        &["did you mean 'checkpoint'?"],
    );
    assert_one_line(
        &pgcheckdb(&["verify", "--jbos", "2", "-D", "/tmp"]),
        &["'--jbos'", "did you mean '--jobs'?"],
    );
}

#[test]
fn numeric_flags_are_range_checked_when_parsed() {
    for (args, flag) in [
        (
            &["verify", "--max-rate", "0", "-D", "/tmp"][..],
            "--max-rate",
        ),
        (&["verify", "--max-rate", "-5", "-D", "/tmp"], "--max-rate"),
        (&["verify", "--max-rate", "NaN", "-D", "/tmp"], "--max-rate"),
        (
            &["verify", "--max-rate", "fast", "-D", "/tmp"],
            "--max-rate",
        ),
        (&["verify", "-j", "0", "-D", "/tmp"], "--jobs"),
        (&["checksums", "enable", "-j", "0", "-D", "/tmp"], "--jobs"),
        (&["demo", "--rows", "0"], "--rows"),
        (
            &[
                "corrupt",
                "-D",
                "/tmp",
                "--file",
                "x",
                "--block",
                "4294967295",
                "--how",
                "zero",
            ],
            "--block",
        ),
        (
            &[
                "corrupt", "-D", "/tmp", "--file", "x", "--block", "1", "--how", "tear",
                "--offset", "40000",
            ],
            "--offset",
        ),
        (
            &["inspect", "-D", "/tmp", "--file", "x", "--block", "-1"],
            "--block",
        ),
        (&["bench", "checksum-overhead", "--rows", "0"], "--rows"),
        (&["bench", "checksum-overhead", "--scans", "0"], "--scans"),
        (
            &["bench", "checkpoint", "--pg-version", "13"],
            "--pg-version",
        ),
        (&["bench", "verify-scaling", "--size-mb", "0"], "--size-mb"),
        (
            &["bench", "verify-scaling", "--max-jobs", "0"],
            "--max-jobs",
        ),
    ] {
        let run = pgcheckdb(args);
        assert_one_line(&run, &[flag, "invalid value"]);
        assert!(!run.stderr.contains("panicked"), "{args:?}\n{run}");
    }
}

#[test]
fn flags_are_offered_only_where_honoured() {
    for args in [
        &[
            "inspect", "-j", "2", "-D", "/tmp", "--file", "x", "--block", "0",
        ][..],
        &[
            "inspect",
            "--progress",
            "-D",
            "/tmp",
            "--file",
            "x",
            "--block",
            "0",
        ],
        &["inspect", "-q", "-D", "/tmp", "--file", "x", "--block", "0"],
        &["checksums", "status", "-j", "2", "-D", "/tmp"],
        &["checksums", "status", "--progress", "-D", "/tmp"],
        &["checksums", "disable", "-j", "2", "-D", "/tmp"],
        &["demo", "--format", "json"],
        &["demo", "-q"],
        &[
            "corrupt", "-j", "2", "-D", "/tmp", "--file", "x", "--block", "0", "--how", "zero",
        ],
        &["-j", "2", "verify", "-D", "/tmp"],
    ] {
        let run = pgcheckdb(args);
        assert_one_line(&run, &["unexpected argument"]);
    }
    let help = |args: &[&str]| pgcheckdb(args).stdout;
    let verify = help(&["verify", "--help"]);
    for flag in [
        "--jobs",
        "--format",
        "--progress",
        "--no-progress",
        "--quiet",
        "--verbose",
        "--metrics-file",
    ] {
        assert!(
            verify.contains(flag),
            "verify --help lacks {flag}\n{verify}"
        );
    }
    let status = help(&["checksums", "status", "--help"]);
    for flag in ["--jobs", "--progress", "--quiet", "--verbose"] {
        assert!(
            !status.contains(flag),
            "checksums status offers {flag}\n{status}"
        );
    }
    let demo = help(&["demo", "--help"]);
    assert!(!demo.contains("--format"), "{demo}");
}

#[test]
fn top_level_help_snapshot() {
    let run = pgcheckdb(&["--help"]);
    assert_status(&run, 0, "--help");
    assert_eq!(
        run.stdout,
        "DBCC CHECKDB for PostgreSQL: find and name damaged pages, offline, in parallel

Usage: pgcheckdb <COMMAND>

Commands:
  verify       Check every page of a data directory
  checksums    Show or switch the cluster's data checksums
  inspect      Show one page decoded: header, checksum, line pointers, tuple headers, special space
  corrupt      Damage one block of a stopped cluster on purpose (drills and tests)
  demo         Show everything on a throwaway cluster of the PostgreSQL installed here
  bench        Reproducible experiments on throwaway local clusters (checksum overhead, checkpoints, verify scaling)
  ledger       List the damage ledger: what is still damaged, new since the last run, repaired
  man          Print the manual page (roff) of pgcheckdb or of one command: `pgcheckdb man > pgcheckdb.1`
  completions  Print a shell completion script: `pgcheckdb completions bash > /etc/bash_completion.d/pgcheckdb`
  help         Print this message or the help of the given subcommand(s)

Options:
  -h, --help     Print help
  -V, --version  Print version

Exit status:
  0         nothing found (verify), or the command did what was asked
  1         could not run or finish: bad arguments, a running cluster, anything unreadable
  2         corruption found (verify; checksums enable when damaged pages are in the way)
  130, 143  interrupted by SIGINT, SIGTERM

The manual: `pgcheckdb man`, `pgcheckdb man verify` (each command has its page).
"
    );
    let status = pgcheckdb(&["checksums", "status", "--help"]);
    assert_eq!(
        status.stdout,
        "Show the checksum state recorded in pg_control

Usage: pgcheckdb checksums status [OPTIONS]

Options:
  -D, --pgdata <PGDATA>  Data directory (default: $PGDATA) [env: PGDATA=]
      --format <FORMAT>  Output format (json: JSON Lines ending in a summary line; see docs/OUTPUT.md) [default: text] [possible values: text, json]
  -h, --help             Print help
"
    );
}

#[test]
fn version_names_the_supported_postgresql_versions() {
    let run = pgcheckdb(&["--version"]);
    assert_status(&run, 0, "--version");
    let majors: Vec<String> = pgcheckdb_pg::format::control::SUPPORTED_MAJORS
        .map(|m| m.to_string())
        .collect();
    let (last, rest) = majors.split_last().expect("versions");
    let expected = format!(
        "pgcheckdb {} (reads data directories of PostgreSQL {} and {last})\n",
        env!("CARGO_PKG_VERSION"),
        rest.join(", ")
    );
    assert_eq!(run.stdout, expected);
}

#[test]
fn man_page_is_generated_and_committed_current() {
    let run = pgcheckdb(&["man"]);
    assert_status(&run, 0, "man");
    assert!(
        run.stdout.starts_with(".ie"),
        "roff expected\n{}",
        run.stdout
    );
    assert!(run.stdout.contains(".TH pgcheckdb 1"), "{}", run.stdout);
    let committed = std::fs::read_to_string(repo_file("docs/man/pgcheckdb.1")).unwrap_or_default();
    assert!(
        committed == run.stdout,
        "docs/man/pgcheckdb.1 is stale: regenerate it with `pgcheckdb man > docs/man/pgcheckdb.1`"
    );
    let verify = pgcheckdb(&["man", "verify"]);
    assert_status(&verify, 0, "man verify");
    assert!(
        verify.stdout.contains("pgcheckdb\\-verify") && verify.stdout.contains("max\\-rate"),
        "{}",
        verify.stdout
    );
    let enable = pgcheckdb(&["man", "checksums", "enable"]);
    assert!(enable.stdout.contains("dry\\-run"), "{}", enable.stdout);
    assert_one_line(&pgcheckdb(&["man", "verfy"]), &["no command \"verfy\""]);
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let run = pgcheckdb(&["completions", shell]);
        assert_status(&run, 0, shell);
        for word in [
            "pgcheckdb",
            "verify",
            "checksums",
            "max-rate",
            "metrics-file",
        ] {
            assert!(run.stdout.contains(word), "{shell} completion lacks {word}");
        }
    }
    assert_one_line(
        &pgcheckdb(&["completions", "tcsh"]),
        &["invalid value 'tcsh'"],
    );
}

#[test]
fn json_ends_with_a_summary_for_every_command() {
    for (args, command) in [
        (
            &[
                "checksums",
                "status",
                "-D",
                "/nonexistent/pgc",
                "--format",
                "json",
            ][..],
            "checksums status",
        ),
        (
            &[
                "checksums",
                "enable",
                "-D",
                "/nonexistent/pgc",
                "--format",
                "json",
            ],
            "checksums enable",
        ),
        (
            &[
                "checksums",
                "disable",
                "-D",
                "/nonexistent/pgc",
                "--format",
                "json",
            ],
            "checksums disable",
        ),
        (
            &[
                "inspect",
                "-D",
                "/nonexistent/pgc",
                "--file",
                "base/1/1",
                "--block",
                "0",
                "--format",
                "json",
            ],
            "inspect",
        ),
        (
            &[
                "bench",
                "checkpoint",
                "--pg-bin",
                "/nonexistent/pgc",
                "--format",
                "json",
            ],
            "bench",
        ),
    ] {
        let run = pgcheckdb(args);
        assert_status(&run, 1, command);
        let last = run.stdout.trim().lines().last().unwrap_or_default();
        let v: serde_json::Value =
            serde_json::from_str(last).unwrap_or_else(|e| panic!("{command}: {e}\n{run}"));
        assert_eq!(v["type"], "summary", "{run}");
        assert_eq!(v["command"], command, "{run}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{run}");
    }
}

/// A stopped PostgreSQL 16 cluster with checksums: table `public.t` (600 rows) and its
/// primary key `public.t_pkey`; returns the cluster and the two files.
fn small_cluster() -> (Cluster, PathBuf, PathBuf) {
    pgcheckdb_testkit::require_binaries(16);
    let mut cluster = Cluster::init_temp(&ClusterOptions::new(16, true)).expect("initdb 16");
    cluster.start().expect("start");
    cluster
        .psql(
            "postgres",
            "CREATE TABLE t (id int PRIMARY KEY, v text);
             INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 600) g;
             VACUUM t; CHECKPOINT;",
        )
        .expect("load");
    let heap = cluster
        .datadir()
        .join(cluster.relation_filepath("postgres", "t").expect("t"));
    let index = cluster.datadir().join(
        cluster
            .relation_filepath("postgres", "t_pkey")
            .expect("t_pkey"),
    );
    cluster.stop().expect("stop");
    (cluster, heap, index)
}

fn datadir(cluster: &Cluster) -> String {
    cluster.datadir().to_str().expect("utf-8").to_string()
}

#[test]
fn quiet_prints_nothing_on_a_clean_cluster_and_verbose_names_the_phases() {
    let (cluster, _, _) = small_cluster();
    let d = datadir(&cluster);
    let quiet = pgcheckdb(&["verify", "-D", &d, "-q", "--no-progress"]);
    assert_status(&quiet, 0, "verify -q");
    assert!(
        quiet.stdout.is_empty() && quiet.stderr.is_empty(),
        "-q on a clean cluster prints nothing\n{quiet}"
    );
    let normal = pgcheckdb(&["verify", "-D", &d, "--no-progress"]);
    assert!(
        normal.stdout.contains("pgcheckdb found no corruption"),
        "{normal}"
    );
    let verbose = pgcheckdb(&["verify", "-D", &d, "-v", "--no-progress"]);
    assert_status(&verbose, 0, "verify -v");
    for phase in [
        "read global/pg_control",
        "listed the data directory",
        "read the catalogs offline",
        "scanned the blocks",
        "named the findings",
    ] {
        let line = verbose
            .stderr_lines()
            .into_iter()
            .find(|l| l.contains(phase))
            .unwrap_or_else(|| panic!("no -v line for {phase:?}\n{verbose}"));
        assert!(line.ends_with(" s)"), "{phase} is timed: {line}");
    }
    assert!(
        verbose.stderr.contains("database \"postgres\""),
        "per-database counts\n{verbose}"
    );
    assert!(
        verbose.stderr.contains("shared catalogs (global/)"),
        "{verbose}"
    );
    assert!(
        !normal.stderr.contains("scanned the blocks"),
        "not without -v\n{normal}"
    );
    assert_one_line(
        &pgcheckdb(&["verify", "-D", &d, "-q", "-v"]),
        &["cannot be used with"],
    );
}

#[test]
fn findings_grouped_per_page_with_advice_and_owning_table() {
    let (cluster, heap, index) = small_cluster();
    let d = datadir(&cluster);
    // 40 line pointers of heap block 0 made not MAXALIGNed; a B-tree leaf claiming level 1.
    const BROKEN: u16 = 40;
    edit(&heap, 0, |p| {
        for n in 0..usize::from(BROKEN) {
            let at = 24 + 4 * n;
            let w = u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
            p[at..at + 4].copy_from_slice(&(w + 1).to_le_bytes());
        }
    });
    edit(&index, 1, |p| {
        p[BLCKSZ - 16 + 8..BLCKSZ - 16 + 12].copy_from_slice(&1u32.to_le_bytes())
    });
    let json = pgcheckdb(&["verify", "-D", &d, "--format", "json", "--no-progress"]);
    assert_status(&json, 2, "damaged");
    let heap_rel = heap
        .strip_prefix(cluster.datadir())
        .expect("rel")
        .to_string_lossy()
        .into_owned();
    let on_page: Vec<&serde_json::Value> = json
        .findings
        .iter()
        .filter(|f| f["file"] == heap_rel.as_str() && f["block"] == 0)
        .collect();
    assert_eq!(
        on_page.len(),
        usize::from(BROKEN),
        "JSON lists every finding of the page\n{json}"
    );
    let text = pgcheckdb(&["verify", "-D", &d, "--no-progress"]);
    assert_status(&text, 2, "damaged, text");
    let lines: Vec<&str> = text.stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.contains(&format!("{BROKEN} findings on block 0 of \"{heap_rel}\"")))
        .unwrap_or_else(|| panic!("no page group\n{text}"));
    assert!(
        lines[header].contains("relation \"public.t\""),
        "{}",
        lines[header]
    );
    let items: Vec<&&str> = lines[header + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(items.len(), 11, "10 findings then the rest counted\n{text}");
    assert!(
        items[0].starts_with("  offset 1: error: line_pointer_invalid:"),
        "{}",
        items[0]
    );
    assert_eq!(
        *items[10],
        format!(
            "  ... and {} more on this page (--format json lists every one)",
            BROKEN - 10
        )
    );
    let index_line = lines
        .iter()
        .find(|l| l.contains("btree_page_invalid"))
        .unwrap_or_else(|| panic!("no index finding\n{text}"));
    assert!(
        index_line.contains("relation \"public.t_pkey\", index of table \"public.t\""),
        "{index_line}"
    );
    let hints: Vec<&&str> = lines.iter().filter(|l| l.starts_with("hint: ")).collect();
    assert!(
        hints
            .iter()
            .any(|h| h.contains("REINDEX INDEX CONCURRENTLY public.t_pkey;")),
        "{text}"
    );
    assert!(
        hints
            .iter()
            .any(|h| h.contains("table damage (public.t)") && h.contains("restore")),
        "{text}"
    );
    assert!(
        hints
            .last()
            .is_some_and(|h| h.contains("minimum repair") && h.contains("restore from a backup")),
        "{text}"
    );
    // -q keeps the findings and hints, drops the closing sentence.
    let quiet = pgcheckdb(&["verify", "-D", &d, "-q", "--no-progress"]);
    assert_status(&quiet, 2, "damaged, -q");
    assert!(
        quiet.stdout.contains("btree_page_invalid") && !quiet.stdout.contains("pgcheckdb found"),
        "{quiet}"
    );
    assert!(quiet.stderr.is_empty(), "{quiet}");
}

/// Parses the exposition text: `name{labels} value` samples, checking HELP/TYPE lines.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    assert!(
        text.ends_with('\n'),
        "complete file ends with a newline:\n{text}"
    );
    let mut samples = BTreeMap::new();
    let mut typed = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert_eq!(kind, "gauge", "{line}");
            typed.insert(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample line {line:?}"));
        let name = series.split('{').next().expect("name");
        assert!(typed.contains(name), "sample before its TYPE: {line}");
        assert!(
            series.ends_with('}') && series.contains("pgdata=\""),
            "{line}"
        );
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        samples.insert(series.to_string(), v);
    }
    samples
}

fn sample(samples: &BTreeMap<String, f64>, name: &str, label: &str) -> f64 {
    *samples
        .iter()
        .find(|(k, _)| k.starts_with(&format!("{name}{{")) && k.contains(label))
        .unwrap_or_else(|| panic!("no {name} with {label}: {samples:#?}"))
        .1
}

#[test]
fn prometheus_metrics_on_stdout_and_in_an_atomic_file() {
    let (cluster, heap, _) = small_cluster();
    let d = datadir(&cluster);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pgcheckdb.prom");
    let f = file.to_str().expect("utf-8").to_string();

    let clean = pgcheckdb(&[
        "verify",
        "-D",
        &d,
        "--format",
        "prometheus",
        "--no-progress",
    ]);
    assert_status(&clean, 0, "prometheus");
    let m = parse_metrics(&clean.stdout);
    assert_eq!(sample(&m, "pgcheckdb_verify_exit_status", ""), 0.0);
    assert_eq!(
        sample(
            &m,
            "pgcheckdb_verify_findings_by_severity",
            "severity=\"error\""
        ),
        0.0
    );
    assert!(sample(&m, "pgcheckdb_verify_blocks_checked", "") > 0.0);
    // The label is the canonical path, however the directory was typed.
    let canonical = std::fs::canonicalize(&d)
        .expect("canonical")
        .display()
        .to_string();
    let typed = format!(
        "{d}/../{}/",
        std::path::Path::new(&d)
            .file_name()
            .expect("name")
            .to_string_lossy()
    );
    let run = pgcheckdb(&[
        "verify",
        "-D",
        &typed,
        "--format",
        "prometheus",
        "--no-progress",
    ]);
    assert_status(&run, 0, "prometheus, path typed another way");
    assert!(
        run.stdout.contains(&format!("pgdata=\"{canonical}\"")),
        "{}",
        run.stdout
    );

    edit(&heap, 0, |p| p[24] ^= 1); // lp_off of item 1 not MAXALIGNed
                                    // A reader polls the file while the runs replace it: every read is a whole file.
    let stop = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(&file) {
                    let m = parse_metrics(&text);
                    assert!(
                        m.keys()
                            .any(|k| k.starts_with("pgcheckdb_verify_last_run_timestamp_seconds")),
                        "{text}"
                    );
                    reads += 1;
                }
            }
            reads
        });
        for _ in 0..3 {
            let run = pgcheckdb(&[
                "verify",
                "-D",
                &d,
                "--metrics-file",
                &f,
                "--no-progress",
                "-q",
            ]);
            assert_status(&run, 2, "metrics file");
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().expect("reader")
    });
    assert!(reads > 0, "the reader saw the file");
    let m = parse_metrics(&std::fs::read_to_string(&file).expect("metrics file"));
    assert_eq!(sample(&m, "pgcheckdb_verify_exit_status", ""), 2.0);
    assert_eq!(
        sample(
            &m,
            "pgcheckdb_verify_findings",
            "kind=\"line_pointer_invalid\""
        ),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            "pgcheckdb_verify_findings_by_severity",
            "severity=\"error\""
        ),
        1.0
    );
    let success = sample(&m, "pgcheckdb_verify_last_success_timestamp_seconds", "");
    assert!(success > 1.7e9, "{success}");

    // A run that cannot check keeps the last success time and says exit 1.
    let moved = format!("{d}.moved");
    std::fs::rename(&d, &moved).expect("move datadir away");
    let failed = pgcheckdb(&["verify", "-D", &d, "--metrics-file", &f, "--no-progress"]);
    std::fs::rename(&moved, &d).expect("move back");
    assert_status(&failed, 1, "missing datadir");
    let m = parse_metrics(&std::fs::read_to_string(&file).expect("metrics file"));
    assert_eq!(sample(&m, "pgcheckdb_verify_exit_status", ""), 1.0);
    assert_eq!(sample(&m, "pgcheckdb_verify_complete", ""), 0.0);
    assert_eq!(
        sample(&m, "pgcheckdb_verify_last_success_timestamp_seconds", ""),
        success
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["pgcheckdb.prom"], "no temporary files left");
}

#[test]
fn quiet_on_corrupt_and_checksums_disable() {
    let (cluster, heap, _) = small_cluster();
    let d = datadir(&cluster);
    let file = heap.to_str().expect("utf-8");
    let loud = pgcheckdb(&[
        "corrupt", "-D", &d, "--file", file, "--block", "1", "--how", "header", "--yes",
    ]);
    assert_status(&loud, 0, "corrupt");
    assert!(loud.stdout.contains("damaged block 1"), "{loud}");
    let quiet = pgcheckdb(&[
        "corrupt", "-q", "-D", &d, "--file", file, "--block", "2", "--how", "header", "--yes",
    ]);
    assert_status(&quiet, 0, "corrupt -q");
    assert!(
        quiet.stdout.is_empty() && quiet.stderr.is_empty(),
        "{quiet}"
    );
    let disable = pgcheckdb(&["checksums", "disable", "-q", "-D", &d]);
    assert_status(&disable, 0, "disable -q");
    assert!(
        disable.stderr.is_empty(),
        "-q drops the standby warning\n{disable}"
    );
}

#[test]
fn output_contract_is_in_the_repository_and_complete() {
    let output = std::fs::read_to_string(repo_file("docs/OUTPUT.md")).expect("docs/OUTPUT.md");
    let readme = std::fs::read_to_string(repo_file("README.md")).expect("README.md");
    assert!(output.contains("Contract version"), "versioned");
    assert!(
        readme.contains("(docs/OUTPUT.md)"),
        "the README links docs/OUTPUT.md"
    );
    for kind in pgcheckdb_pg::finding::FindingKind::ALL {
        let cell = format!("| `{}` |", kind.name());
        assert!(
            output.contains(&cell),
            "docs/OUTPUT.md lacks kind {}",
            kind.name()
        );
        assert!(
            readme.contains(&cell),
            "README.md's table lacks kind {}",
            kind.name()
        );
    }
    for field in [
        "type",
        "kind",
        "severity",
        "file",
        "fork",
        "segment",
        "block",
        "offset",
        "attnum",
        "database",
        "relation",
        "detail",
        "message",
        "level",
        "postgres_version",
        "checksums",
        "corrupt_blocks",
        "findings",
        "seconds",
        "error",
        "command",
        "exit_status",
    ] {
        assert!(
            output.contains(&format!("`{field}`")),
            "docs/OUTPUT.md lacks field {field}"
        );
    }
    // Every metric the binary writes is documented.
    let metrics = pgcheckdb_report_metric_names();
    for name in metrics {
        assert!(
            output.contains(&format!("`{name}`")),
            "docs/OUTPUT.md lacks metric {name}"
        );
    }
}

/// The metric names of a real `--format prometheus` run's text (no cluster needed: the
/// summary of a failed run still carries them).
fn pgcheckdb_report_metric_names() -> Vec<String> {
    let run = pgcheckdb(&["verify", "-D", "/nonexistent/pgc", "--format", "prometheus"]);
    assert_status(&run, 1, "prometheus on a missing directory");
    let names: std::collections::BTreeSet<String> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 10, "{run}");
    names.into_iter().collect()
}

#[test]
fn docs_name_only_files_of_the_repository() {
    let root = repo_file("");
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    for doc in docs {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        for bad in ["/work/", "/home/", "/root/", "/Users/"] {
            assert!(
                !text.contains(bad),
                "{} holds a machine path ({bad})",
                doc.display()
            );
        }
        // Markdown links to local files must resolve.
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            let Some(end) = target.find(')') else {
                continue;
            };
            let link = target[..end].split('#').next().unwrap_or_default();
            if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let base = doc.parent().expect("dir");
            assert!(
                base.join(link).exists(),
                "{} links to missing {link}",
                doc.display()
            );
        }
    }
}
