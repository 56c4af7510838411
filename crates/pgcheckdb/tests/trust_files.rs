//! Files pgcheckdb writes and reads outside the data directory, names it prints, and the
//! confirmation of `corrupt` (issue 25, items 2, 3, 5 and 7):
//!
//! - `--metrics-file` never writes through a link planted at its temporary name in a shared
//!   directory, and leaves a regular 0644 file;
//! - a FIFO, or a link to `/dev/zero`, at the metrics path is one clear error (exit 1), without
//!   hanging and within a bounded address space, and nothing is written in its place;
//! - terminal escape sequences in a file name of the data directory (and in the `-D` path)
//!   come out escaped in the text on stdout and stderr, never raw; JSON carries them as JSON;
//! - `corrupt` without `--yes` refuses at once when stdin is a pipe, also with "yes" piped in,
//!   and writes nothing.
//!
//! All of this is about the tool's own files, names and prompts; it runs on a real cluster of
//! every supported version (data checksums on every other one) all the same.

mod common;

use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pgcheckdb_testkit::asserts::assert_status;
use pgcheckdb_testkit::guard::{self, mkfifo, Guard};
use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::snapshot::{differences, snapshot};
use pgcheckdb_testkit::{Cluster, ClusterOptions};

use common::bin;

/// How long a run may take before it counts as a hang (a run on this cluster takes well under
/// a second).
const HANG: Duration = Duration::from_secs(30);

/// The metrics file's name in the shared directory.
const METRICS: &str = "pgcheckdb.prom";

/// Runs pgcheckdb with `args`; kills it and fails the test if it runs longer than [`HANG`].
fn run(args: &[&str], start: Guard<'_>) -> Run {
    guard::run(&bin(), args, HANG, start)
}

/// A stopped cluster of `major` with one small table, and the table's file.
fn cluster(major: u32) -> (Cluster, PathBuf) {
    pgcheckdb_testkit::require_binaries(major);
    let mut cluster =
        Cluster::init_temp(&ClusterOptions::new(major, major.is_multiple_of(2))).expect("initdb");
    cluster.start().expect("start");
    cluster
        .psql(
            "postgres",
            "CREATE TABLE t (id int, v text);
             INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 500) g;
             CHECKPOINT;",
        )
        .expect("load");
    let heap = cluster
        .datadir()
        .join(cluster.relation_filepath("postgres", "t").expect("t"));
    cluster.stop().expect("stop");
    (cluster, heap)
}

/// A directory every user may write to, as `/tmp` (mode 1777).
fn shared_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).expect("chmod 1777");
    dir
}

fn verify_with_metrics(datadir: &Path, metrics: &Path, start: Guard<'_>) -> Run {
    let d = datadir.to_str().expect("utf-8");
    let m = metrics.to_str().expect("utf-8");
    run(
        &[
            "verify",
            "-D",
            d,
            "--metrics-file",
            m,
            "--no-progress",
            "-j",
            "2",
        ],
        start,
    )
}

#[test]
fn trust_files_on_every_version() {
    for major in pgcheckdb_testkit::MAJORS {
        let (cluster, heap) = cluster(major);
        metrics_file_is_not_written_through_a_planted_link(cluster.datadir());
        odd_previous_metrics_files_are_one_error(cluster.datadir());
        names_are_escaped_in_text(cluster.datadir());
        corrupt_refuses_a_pipe_at_once(cluster.datadir(), &heap);
    }
}

/// Item 2: root runs verify with `--metrics-file` in a shared directory where another user
/// planted a link at the temporary name the file used to get (`.NAME.<pid>.tmp`) pointing at
/// a root-owned file. The pid is known before pgcheckdb starts (a stopped shell that execs
/// it), so the link is planted at exactly that name.
fn metrics_file_is_not_written_through_a_planted_link(datadir: &Path) {
    let shared = shared_dir();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let victim = elsewhere.path().join("victim");
    fs::write(&victim, "root's own file\n").expect("victim");
    let metrics = shared.path().join(METRICS);
    let planted = std::cell::RefCell::new(None);
    let plant = |pid: u32| {
        let link = shared.path().join(format!(".{METRICS}.{pid}.tmp"));
        symlink(&victim, &link).expect("plant the link");
        *planted.borrow_mut() = Some(link);
    };
    let r = verify_with_metrics(
        datadir,
        &metrics,
        Guard {
            before_exec: Some(&plant),
            ..Guard::default()
        },
    );
    assert_status(&r, 0, "verify with --metrics-file");
    assert_eq!(
        fs::read_to_string(&victim).expect("victim"),
        "root's own file\n",
        "the victim was written through the planted link\n{r}"
    );
    let link = planted.borrow().clone().expect("a link was planted");
    assert_eq!(
        fs::read_link(&link).expect("the planted link is still a link"),
        victim
    );
    let meta = fs::symlink_metadata(&metrics).expect("metrics file");
    assert!(meta.file_type().is_file(), "a regular metrics file");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o644, "mode 0644");
    let text = fs::read_to_string(&metrics).expect("read metrics");
    assert!(
        text.contains("pgcheckdb_verify_exit_status{") && text.ends_with('\n'),
        "{text}"
    );
    let mut names: Vec<String> = fs::read_dir(shared.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let expected_link = link
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        names,
        [expected_link, METRICS.to_string()],
        "no temporary file left"
    );
}

/// Item 3: a FIFO at the metrics path must not hang the run, a link to `/dev/zero` must not
/// grow memory without bound (256 MiB of address space); both are one error line naming the
/// path, exit 1, the findings still printed, and the thing at the path left as it was.
fn odd_previous_metrics_files_are_one_error(datadir: &Path) {
    let shared = shared_dir();
    let metrics = shared.path().join(METRICS);
    let shown = metrics.display().to_string();

    mkfifo(&metrics);
    let r = verify_with_metrics(datadir, &metrics, Guard::default());
    assert_one_metrics_error(&r, &shown, "it is a FIFO, not a regular file");
    assert!(
        fs::symlink_metadata(&metrics)
            .expect("stat")
            .file_type()
            .is_fifo(),
        "the FIFO is left alone"
    );
    fs::remove_file(&metrics).expect("remove the FIFO");

    symlink("/dev/zero", &metrics).expect("link to /dev/zero");
    let r = verify_with_metrics(
        datadir,
        &metrics,
        Guard {
            address_space: Some(256 << 20),
            ..Guard::default()
        },
    );
    assert_one_metrics_error(&r, &shown, "it is a symbolic link, not a regular file");
    assert_eq!(
        fs::read_link(&metrics).expect("still a link"),
        Path::new("/dev/zero")
    );
    fs::remove_file(&metrics).expect("remove the link");

    // A file too large to be a metrics file (2 MiB) is refused too, and kept.
    fs::write(&metrics, vec![b'#'; 2 << 20]).expect("big file");
    let r = verify_with_metrics(datadir, &metrics, Guard::default());
    assert_one_metrics_error(
        &r,
        &shown,
        "file is 2097152 bytes, more than the 1048576 expected",
    );
    assert_eq!(fs::metadata(&metrics).expect("stat").len(), 2 << 20);
}

/// Exit 1, the run's closing sentence on stdout, and exactly one error line on stderr: the
/// metrics error naming `path` and `why`.
fn assert_one_metrics_error(r: &Run, path: &str, why: &str) {
    assert_status(r, 1, why);
    assert!(
        r.stdout.contains("pgcheckdb found no corruption"),
        "the findings are still printed\n{r}"
    );
    let errors: Vec<&str> = r
        .stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with("pgcheckdb: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line\n{r}");
    let expected = format!(
        "could not read the previous metrics file \"{path}\" ({why}): no metrics were written"
    );
    assert!(errors[0].contains(&expected), "expected {expected:?}\n{r}");
}

/// Item 5: a file in the database directory named with a title-setting sequence, another with
/// a screen-clearing one, and the data directory reached through a link named with one:
/// nothing raw reaches the terminal, the escaped forms do, and JSON keeps the real names.
fn names_are_escaped_in_text(datadir: &Path) {
    let db_dir = fs::read_dir(datadir.join("base"))
        .expect("list base")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("1259").exists())
        .expect("a database directory");
    let title = db_dir.join("\u{1b}]0;pwned\u{7}");
    let clear = db_dir.join("\u{1b}[2J");
    fs::write(&title, b"x").expect("hostile file");
    fs::write(&clear, b"x").expect("hostile file");
    let links = tempfile::tempdir().expect("tempdir");
    let hostile_d = links.path().join("\u{1b}[2Jdata\ndir");
    symlink(datadir, &hostile_d).expect("link to the data directory");
    let d = hostile_d.to_str().expect("utf-8");

    let text = run(
        &["verify", "-D", d, "-v", "--no-progress"],
        Guard::default(),
    );
    assert_status(&text, 0, "unexpected files are info findings");
    for stream in [&text.stdout, &text.stderr] {
        assert!(!stream.contains('\u{1b}'), "a raw ESC was printed\n{text}");
        assert!(!stream.contains('\u{7}'), "a raw BEL was printed\n{text}");
    }
    assert!(
        text.stdout.contains("\\x1b]0;pwned\\x07") && text.stdout.contains("\\x1b[2J\""),
        "the escaped names are on stdout\n{text}"
    );
    assert!(
        text.stderr.contains("\\x1b[2Jdata\\x0adir"),
        "the escaped -D path is on stderr, the newline in it escaped\n{text}"
    );
    assert!(
        text.stderr.lines().all(|l| !l.starts_with("dir")),
        "a newline in a name does not start a line\n{text}"
    );

    let missing = links.path().join("\u{1b}]0;pwned\u{7}");
    let m = missing.to_str().expect("utf-8");
    let error = run(&["verify", "-D", m, "--no-progress"], Guard::default());
    assert_status(&error, 1, "missing data directory");
    assert!(
        !error.stderr.contains('\u{1b}') && error.stderr.contains("\\x1b]0;pwned\\x07"),
        "the error line escapes the path\n{error}"
    );

    let json = run(
        &["verify", "-D", d, "--format", "json", "--no-progress"],
        Guard::default(),
    );
    assert_status(&json, 0, "JSON");
    assert!(!json.stdout.contains('\u{1b}'), "{json}");
    let files: Vec<String> = json
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "unexpected_file")
        .filter_map(|v| v["file"].as_str().map(str::to_string))
        .collect();
    for name in ["\u{1b}]0;pwned\u{7}", "\u{1b}[2J"] {
        assert!(
            files.iter().any(|f| f.ends_with(&format!("/{name}"))),
            "JSON names {name:?} as it is: {files:?}\n{json}"
        );
    }
    fs::remove_file(&title).expect("remove");
    fs::remove_file(&clear).expect("remove");
}

/// Item 7: `corrupt` without `--yes` with stdin a pipe: refused at once, whether the pipe
/// stays open and silent (a reader would wait for ever) or carries "yes"; nothing written.
fn corrupt_refuses_a_pipe_at_once(datadir: &Path, heap: &Path) {
    let d = datadir.to_str().expect("utf-8");
    let file = heap.to_str().expect("utf-8");
    let args = [
        "corrupt", "-D", d, "--file", file, "--block", "0", "--how", "zero",
    ];
    let before = snapshot(datadir).expect("snapshot");
    for (what, start) in [
        (
            "a silent open pipe",
            Guard {
                stdin_held_open: true,
                ..Guard::default()
            },
        ),
        (
            "echo yes |",
            Guard {
                stdin: Some(b"yes\n"),
                ..Guard::default()
            },
        ),
    ] {
        let started = Instant::now();
        let r = run(&args, start);
        assert_status(&r, 1, what);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: refused at once, not after {:?}\n{r}",
            started.elapsed()
        );
        let lines = r.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: one line\n{r}");
        assert!(
            lines[0].starts_with("pgcheckdb: error:")
                && lines[0].contains("stdin is not a terminal: pass --yes"),
            "{what}\n{r}"
        );
        assert!(r.stdout.is_empty(), "{what}\n{r}");
        let after = snapshot(datadir).expect("snapshot");
        assert!(
            differences(&before, &after).is_empty(),
            "{what}: the data directory changed: {:?}",
            differences(&before, &after)
        );
    }
}
