//! Bad input that needs no PostgreSQL: a missing directory, a directory that is not a data
//! directory, bad flags. Each is one line on stderr and exit status 1.

mod common;

use pgcheckdb_testkit::asserts::assert_status;
use pgcheckdb_testkit::run::{self, Run};

use common::bin;

fn pgcheckdb(args: &[&str]) -> Run {
    run::pgcheckdb(&bin(), args, None)
}

fn assert_one_error_line(run: &Run, needle: &str) {
    assert_status(run, 1, needle);
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 1, "exactly one stderr line expected\n{run}");
    assert!(
        lines[0].contains(needle),
        "stderr should mention {needle:?}\n{run}"
    );
    // With --format json the only stdout line is the summary carrying the error.
    match &run.summary {
        Some(summary) => {
            assert_eq!(run.stdout.trim().lines().count(), 1, "{run}");
            assert!(
                summary["error"]
                    .as_str()
                    .is_some_and(|e| e.contains(needle)),
                "the summary should carry the error\n{run}"
            );
        }
        None => assert!(
            run.stdout.trim().is_empty(),
            "nothing on stdout expected\n{run}"
        ),
    }
}

#[test]
fn missing_directory() {
    let run = pgcheckdb(&[
        "verify",
        "-D",
        "/nonexistent/pgcheckdb-test",
        "--format",
        "json",
        "--level",
        "physical",
    ]);
    assert_one_error_line(&run, "/nonexistent/pgcheckdb-test");
}

#[test]
fn not_a_data_directory() {
    let dir = std::env::temp_dir().join(format!("pgcheckdb-not-datadir-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("base")).expect("mkdir");
    let d = dir.to_string_lossy().into_owned();
    let run = pgcheckdb(&[
        "verify", "-D", &d, "--format", "json", "--level", "physical",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_one_error_line(&run, "not a PostgreSQL data directory");
}

#[test]
fn no_data_directory_given() {
    let run = pgcheckdb(&["verify", "--format", "json"]);
    assert_one_error_line(&run, "PGDATA");
}

#[test]
fn unknown_flag() {
    let run = pgcheckdb(&["verify", "--no-such-flag", "-D", "/tmp"]);
    assert_one_error_line(&run, "--no-such-flag");
}

#[test]
fn bad_flag_values() {
    for args in [
        &["verify", "-j", "0", "-D", "/tmp"][..],
        &["verify", "--level", "deep", "-D", "/tmp"],
        &["verify", "--format", "xml", "-D", "/tmp"],
    ] {
        let run = pgcheckdb(args);
        assert_status(&run, 1, &args.join(" "));
        assert_eq!(
            run.stderr_lines().len(),
            1,
            "exactly one stderr line expected for {args:?}\n{run}"
        );
    }
}

/// `--memory` below what the heap -> index check needs, and the extended level's flags at
/// another level (where they would be silently ignored), are one error line each.
#[test]
fn memory_and_temp_dir_are_checked() {
    for (args, says) in [
        (
            &[
                "verify", "--level", "extended", "--memory", "10", "-D", "/tmp",
            ][..],
            "at least 32kB",
        ),
        (
            &[
                "verify", "--level", "extended", "--memory", "31k", "-D", "/tmp",
            ],
            "at least 32kB",
        ),
        (
            &["verify", "--memory", "1G", "-D", "/tmp"],
            "--memory applies to the extended level only",
        ),
        (
            &[
                "verify",
                "--physical-only",
                "--temp-dir",
                "/tmp",
                "-D",
                "/tmp",
            ],
            "--temp-dir applies to the extended level only",
        ),
        (
            &[
                "verify", "--level", "standard", "--memory", "64MB", "--format", "json", "-D",
                "/tmp",
            ],
            "--memory applies",
        ),
    ] {
        let run = pgcheckdb(args);
        assert_status(&run, 1, &args.join(" "));
        let lines = run.stderr_lines();
        assert!(
            lines.len() == 1 && lines[0].contains(says),
            "one line saying {says:?} expected for {args:?}\n{run}"
        );
    }
}
