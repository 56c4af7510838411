//! The DBA's command line, round 2: `inspect` refuses a name several databases hold and gives
//! one verdict with `verify`'s standard level; `--dbname` as psql reads it and a failed
//! connection that says where and why; `-v` lines on stderr; the manual's sections and
//! two-word commands; `verify /path` and `-D` with `--backup`; `checksums disable -q`; no
//! Rust debug names in `inspect`; the visibility-map hint's SQL names the table. Real clusters of PostgreSQL 17 (missing binaries fail).

mod common;

use std::process::Command;

use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::run::{self, Run};

use common::bin;

fn pgcheckdb(args: &[&str]) -> Run {
    run::pgcheckdb(&bin(), args, None)
}

/// stderr is one `pgcheckdb: error:` line holding every one of `parts`.
fn assert_one_error(run: &Run, parts: &[&str]) {
    assert_eq!(run.status, 1, "{run}");
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 1, "one line expected\n{run}");
    assert!(lines[0].starts_with("pgcheckdb: error: "), "{run}");
    for p in parts {
        assert!(lines[0].contains(p), "{p:?} missing\n{run}");
    }
}

const SQL: &str = "CREATE TABLE t (id int, v text);
INSERT INTO t SELECT g, 'value ' || g FROM generate_series(1, 2000) g;";

#[test]
fn inspect_refuses_a_name_several_databases_hold_and_lists_them() {
    let (c, _) = loaded_cluster(17, false, SQL, &["t"]);
    let d = c.datadir().display().to_string();
    let ambiguous = pgcheckdb(&[
        "inspect",
        "-D",
        &d,
        "--relation",
        "pg_class",
        "--block",
        "0",
    ]);
    assert_one_error(
        &ambiguous,
        &[
            "\"pg_class\" names 3 relations",
            "pg_catalog.pg_class in databases \"postgres\", \"template0\", \"template1\"",
            "--database",
        ],
    );
    let corrupt = pgcheckdb(&[
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
    ]);
    assert_one_error(&corrupt, &["\"pg_class\" names 3 relations"]);
    // Named with its database, it is that database's pg_class.
    let one = pgcheckdb(&[
        "inspect",
        "-D",
        &d,
        "--relation",
        "pg_class",
        "-d",
        "postgres",
        "--block",
        "0",
    ]);
    assert_eq!(one.status, 0, "{one}");
    assert!(
        one.stdout
            .contains("database postgres, relation pg_catalog.pg_class"),
        "{one}"
    );
    // A shared catalog is one relation, whatever database names it.
    let shared = pgcheckdb(&[
        "inspect",
        "-D",
        &d,
        "--relation",
        "pg_database",
        "--block",
        "0",
    ]);
    assert_eq!(shared.status, 0, "{shared}");
}

#[test]
fn inspect_gives_the_verdict_of_verify_standard_level() {
    let (c, paths) = loaded_cluster(17, false, SQL, &["t"]);
    let d = c.datadir().display().to_string();
    let file = c.datadir().join(&paths[0]);
    // Line pointer 2 of block 0 points past the page: the page header is sound.
    common::edit(&file, 0, |page| {
        let at = 24 + 4;
        let word = u32::from_le_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]]);
        let word = (word & !0x7fff) | 0x7ff0;
        page[at..at + 4].copy_from_slice(&word.to_le_bytes());
    });
    let verify = common::verify_level(c.datadir(), "standard");
    assert_eq!(verify.status, 2, "{verify}");
    let found = verify
        .find_at("line_pointer_invalid", &paths[0], 0)
        .unwrap_or_else(|| panic!("verify finds the line pointer\n{verify}"));
    assert_eq!(found["offset"], 2, "{verify}");

    let text = pgcheckdb(&["inspect", "-D", &d, "--relation", "t", "--block", "0"]);
    assert_eq!(text.status, 0, "{text}");
    assert!(
        text.stdout
            .contains("verdict: line_pointer_invalid at line pointer 2: "),
        "inspect must agree with verify\n{text}"
    );
    assert!(!text.stdout.contains("verdict: valid"), "{text}");
    // No Rust names: PostgreSQL's line pointer states, a page kind in words.
    assert!(text.stdout.contains(": LP_NORMAL off "), "{text}");
    assert!(!text.stdout.contains("HeapLike"), "{text}");
    assert!(!text.stdout.contains(": Normal off"), "{text}");

    let json = pgcheckdb(&[
        "inspect",
        "-D",
        &d,
        "--relation",
        "t",
        "--block",
        "0",
        "--format",
        "json",
    ]);
    let page = json.first_json();
    let problems = page["page"]["problems"].as_array().expect("problems");
    assert!(
        problems
            .iter()
            .any(|p| p["kind"] == "line_pointer_invalid" && p["offset"] == 2),
        "{json}"
    );
    // An intact page of the same table is valid at both.
    let intact = pgcheckdb(&["inspect", "-D", &d, "--relation", "t", "--block", "1"]);
    assert!(intact.stdout.contains("verdict: valid\n"), "{intact}");
}

#[test]
fn dbname_is_a_database_name_and_a_failed_connection_says_why() {
    let (mut c, _) = loaded_cluster(17, true, SQL, &["t"]);
    c.start().expect("start");
    let d = c.datadir().display().to_string();
    let args = c.conn_args();
    let (host, port, user) = (&args[1], &args[3], &args[5]);
    let run_with = |dbname: &str, pghost: &str| {
        let mut cmd = Command::new(bin());
        cmd.args([
            "verify",
            "-D",
            &d,
            "--online",
            "--dbname",
            dbname,
            "--no-progress",
            "-q",
        ])
        .env_remove("PGDATA")
        .env_remove("PGDATABASE")
        .env("PGHOST", pghost)
        .env("PGPORT", port)
        .env("PGUSER", user);
        if let Some(u) = c.user() {
            u.apply(&mut cmd);
            cmd.current_dir("/");
        }
        run::parse(cmd.output().expect("run pgcheckdb"))
    };
    // A bare name is a database, as psql's --dbname postgres.
    let named = run_with("postgres", host);
    assert_eq!(named.status, 0, "{named}");
    assert!(!named.stderr.contains("connection string"), "{named}");
    // A failure names the socket tried and the reason.
    let nowhere = tempfile::tempdir().expect("tempdir");
    let missing = nowhere.path().join("no-socket-here");
    let failed = run_with("postgres", &missing.display().to_string());
    assert_one_error(
        &failed,
        &[
            "could not connect to the server: connection to server on socket",
            &format!("{}/.s.PGSQL.{port}", missing.display()),
            "No such file or directory",
        ],
    );
    c.stop().expect("stop");
}

#[test]
fn verbose_lines_go_to_stderr() {
    let (c, _) = loaded_cluster(17, false, SQL, &["t"]);
    let d = c.datadir().display().to_string();
    let run = pgcheckdb(&["verify", "-D", &d, "-v", "--no-progress"]);
    assert_eq!(run.status, 0, "{run}");
    assert!(
        run.stderr
            .contains("pgcheckdb: postgres: there are 2000 rows in "),
        "{run}"
    );
    assert!(
        !run.stdout.contains("there are "),
        "-v lines on stdout\n{run}"
    );
    // stdout keeps the report alone: the closing sentence, no per-relation lines.
    assert!(run.stdout.lines().count() < 10, "{run}");
}

#[test]
fn checksums_disable_quiet_prints_nothing() {
    let (c, _) = loaded_cluster(17, true, SQL, &["t"]);
    let d = c.datadir().display().to_string();
    let run = pgcheckdb(&["checksums", "disable", "-q", "-D", &d]);
    assert_eq!(run.status, 0, "{run}");
    assert_eq!(run.stdout, "", "{run}");
    assert_eq!(run.stderr, "", "{run}");
    let status = pgcheckdb(&["checksums", "status", "-D", &d]);
    assert!(status.stdout.contains("Data checksums: off"), "{status}");
}

#[test]
fn verify_arguments_say_what_to_type() {
    let positional = pgcheckdb(&["verify", "/some/data"]);
    assert_one_error(
        &positional,
        &[
            "unexpected argument '/some/data'",
            "did you mean '-D /some/data'?",
        ],
    );
    let both = pgcheckdb(&["verify", "-D", "/some/data", "--backup", "/some/backup"]);
    assert_one_error(&both, &["-D and --backup cannot be used together"]);
    assert_eq!(both.stdout, "", "{both}");
    // $PGDATA with --backup is no conflict: --backup chooses (and fails here on the path).
    let mut cmd = Command::new(bin());
    cmd.args(["verify", "--backup", "/no/such/backup", "--no-progress"])
        .env("PGDATA", "/no/such/data");
    let env = run::parse(cmd.output().expect("run"));
    assert_eq!(env.status, 1, "{env}");
    assert!(!env.stderr.contains("cannot be used together"), "{env}");
}

#[test]
fn the_manual_has_its_sections_and_two_word_commands() {
    let man = pgcheckdb(&["man"]);
    assert_eq!(man.status, 0, "{man}");
    for section in [
        ".SH \"EXIT STATUS\"",
        ".SH EXAMPLES",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH \"SEE ALSO\"",
    ] {
        assert!(man.stdout.contains(section), "{section} missing");
    }
    let spaced = pgcheckdb(&["man", "checksums enable"]);
    assert_eq!(spaced.status, 0, "{spaced}");
    assert!(
        spaced.stdout.contains("pgcheckdb\\-checksums\\-enable"),
        "{spaced}"
    );
    assert_eq!(
        spaced.stdout,
        pgcheckdb(&["man", "checksums", "enable"]).stdout
    );
    assert!(spaced.stdout.contains(".SH \"EXIT STATUS\""), "{spaced}");
    let help = pgcheckdb(&["--help"]);
    assert!(help.stdout.contains("Exit status:"), "{help}");
    assert!(
        help.stdout.contains("  2         corruption found"),
        "{help}"
    );
    let verify_help = pgcheckdb(&["verify", "--help"]);
    assert!(verify_help.stdout.contains("Exit status:"), "{verify_help}");
}

#[test]
fn the_visibility_map_hint_names_the_table() {
    let (c, paths) = loaded_cluster(17, false, &format!("{SQL}\nVACUUM t;"), &["t"]);
    let d = c.datadir().display().to_string();
    let vm = format!("{}_vm", paths[0]);
    let damage = pgcheckdb(&[
        "corrupt", "-D", &d, "--file", &vm, "--block", "0", "--how", "header", "--yes", "-q",
    ]);
    assert_eq!(damage.status, 0, "{damage}");
    let run = pgcheckdb(&["verify", "-D", &d, "--no-progress"]);
    assert_eq!(run.status, 2, "{run}");
    let hint = run
        .stdout
        .lines()
        .find(|l| l.contains("visibility map damage"))
        .unwrap_or_else(|| panic!("no visibility map hint\n{run}"));
    assert!(
        hint.contains("SELECT pg_truncate_visibility_map('public.t'); VACUUM public.t;"),
        "{run}"
    );
    assert!(!hint.contains("<table>"), "{run}");
}
