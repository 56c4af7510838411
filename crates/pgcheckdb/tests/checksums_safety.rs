//! Data safety of `checksums enable|disable` and `corrupt` on real clusters (`initdb` of
//! PostgreSQL 14–19, filled with SQL): the tool never claims what did not happen.
//!
//! * the lock: a server started (`pg_ctl start` as the cluster's user) while `enable` runs
//!   refuses ("lock file ... already exists"), `enable` completes, then the server starts with
//!   checksums on and every row as before (each of 14–19); the same while `disable` or `corrupt`
//!   hold the lock; a second `enable` is refused naming the first one's pid;
//! * refusals before any write, each exiting 1 with the path named, `pg_control` unchanged and
//!   the cluster starting afterwards with checksums off and every row intact: an unreadable
//!   database directory, tablespace directory or relation file (run as the non-root owner), a
//!   dangling, looping or unmounted tablespace, a FIFO where a relation file, `postmaster.pid`,
//!   `PG_VERSION`, `pg_control`, `pg_filenode.map` or a `pg_xact` segment should be (status,
//!   verify and inspect must not hang either), a full disk (a small tmpfs) and writes failing
//!   mid-run (`RLIMIT_FSIZE`);
//! * SIGINT / SIGTERM during `enable`: exit 130 / 143, one line, a JSON summary, the lock
//!   removed, checksums off;
//! * a failed fsync of `pg_control` (injected) reports an unknown state and how to check it.
//!
//! The hidden test hooks used: `PGCHECKDB_TEST_DELAY_MS` (pause per chunk read by `enable`),
//! `PGCHECKDB_TEST_HOLD_LOCK_MS` (pause after taking the lock), and
//! `PGCHECKDB_TEST_FAIL_CONTROL_FSYNC`. Missing PostgreSQL binaries fail these tests.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use pgcheckdb_pg::format::control::{ChecksumState, ControlFile};
use pgcheckdb_testkit::fixture::{standard_cluster, StandardCluster};
use pgcheckdb_testkit::guard::mkfifo;
use pgcheckdb_testkit::{Cluster, ClusterOptions, RunAs};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_pgcheckdb"))
}

/// A pgcheckdb command line: arguments, environment, user.
struct Pg {
    cmd: Command,
}

impl Pg {
    fn new(args: &[&str], datadir: &Path) -> Pg {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .arg("-D")
            .arg(datadir)
            .arg("--no-progress")
            .env_remove("PGDATA")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Pg { cmd }
    }

    fn env(mut self, key: &str, value: &str) -> Pg {
        self.cmd.env(key, value);
        self
    }

    fn user(mut self, user: Option<&RunAs>) -> Pg {
        if let Some(u) = user {
            u.apply(&mut self.cmd);
            self.cmd.current_dir("/");
        }
        self
    }

    fn spawn(mut self) -> Child {
        self.cmd.spawn().expect("spawn pgcheckdb")
    }

    /// Runs to the end within `limit` (killed and failed otherwise: a hang is a bug).
    fn run(self, limit: Duration, what: &str) -> Done {
        wait(self.spawn(), limit, what)
    }
}

/// A finished run.
struct Done {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Done {
    fn show(&self) -> String {
        format!(
            "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    /// The last stdout line parsed as JSON (the summary).
    fn summary(&self) -> serde_json::Value {
        let last = self.stdout.lines().last().unwrap_or("");
        serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("last stdout line is not JSON ({e}):\n{}", self.show()))
    }
}

fn wait(mut child: Child, limit: Duration, what: &str) -> Done {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what}: still running after {limit:?} (hang): stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        sleep(Duration::from_millis(20));
    }
    let out: Output = child.wait_with_output().expect("output");
    Done {
        status: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const MINUTE: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_secs(20);

fn lock_path(datadir: &Path) -> PathBuf {
    datadir.join("postmaster.pid")
}

/// Waits until pgcheckdb's lock is in place; returns its text.
fn wait_for_lock(datadir: &Path, child: &mut Child) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(lock_path(datadir)) {
            if text.contains("pgcheckdb") {
                return text;
            }
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("pgcheckdb ended ({status}) before its lock was seen");
        }
        assert!(start.elapsed() < MINUTE, "no lock file appeared");
        sleep(Duration::from_millis(10));
    }
}

/// The bytes of `pg_control`; empty when it is not a regular file (a test's FIFO: reading it
/// would block the test itself).
fn control_bytes(datadir: &Path) -> Vec<u8> {
    let path = datadir.join("global/pg_control");
    if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    fs::read(path).expect("read pg_control")
}

fn checksum_state(datadir: &Path) -> ChecksumState {
    ControlFile::read_from_datadir(datadir)
        .expect("pg_control readable")
        .checksum_state()
}

/// Row count and a hash of the full contents of the tables, read through the server.
fn fingerprint(c: &Cluster) -> String {
    let mut out = String::new();
    for (db, table) in [
        ("postgres", "accounts"),
        ("postgres", "docs"),
        ("postgres", "vacuumed"),
        ("postgres", "in_space"),
        ("second", "other"),
    ] {
        let v = c
            .query_value(
                db,
                &format!(
                    "SELECT count(*) || ':' || md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM {table} x"
                ),
            )
            .unwrap_or_else(|e| panic!("could not read {db}.{table}: {e}"));
        out.push_str(&format!("{db}.{table}={v}\n"));
    }
    assert!(out.contains("accounts=20000:"), "{out}");
    out
}

/// Starts the server, checks `data_checksums` and the contents, stops it.
fn assert_starts_intact(c: &mut Cluster, want_checksums: &str, before: &str, when: &str) {
    c.start()
        .unwrap_or_else(|e| panic!("server did not start {when}: {e}"));
    let on = c
        .query_value("postgres", "SHOW data_checksums")
        .expect("SHOW data_checksums");
    let now = fingerprint(c);
    c.stop().expect("stop");
    assert_eq!(on, want_checksums, "data_checksums {when}");
    assert_eq!(now, before, "table contents changed {when}");
}

fn build(major: u32) -> (StandardCluster, String) {
    let mut sc = standard_cluster(major, false);
    sc.cluster.start().expect("start");
    let before = fingerprint(&sc.cluster);
    sc.cluster.stop().expect("stop");
    (sc, before)
}

// ---------------------------------------------------------------------------------------------
// The lock against a concurrent server start
// ---------------------------------------------------------------------------------------------

fn server_cannot_start_while_enable_runs(major: u32) {
    let (mut sc, before) = build(major);
    let datadir = sc.datadir().to_path_buf();
    let mut child = Pg::new(
        &["checksums", "enable", "-j", "1", "--format", "json"],
        &datadir,
    )
    .env("PGCHECKDB_TEST_DELAY_MS", "4")
    .spawn();
    let lock = wait_for_lock(&datadir, &mut child);
    assert_eq!(
        lock.lines().next(),
        Some(child.id().to_string().as_str()),
        "postmaster.pid must hold enable's pid on its first line:\n{lock}"
    );
    sleep(Duration::from_millis(300));
    let started = sc.cluster.start();
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "enable ended before the server start was tried: the test did not overlap them"
    );
    let err = match started {
        Ok(()) => panic!("PostgreSQL {major}: the server started while enable was running"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("lock file \"postmaster.pid\" already exists"),
        "PostgreSQL {major}: the server must refuse because of the lock:\n{err}"
    );
    let done = wait(child, Duration::from_secs(300), "enable");
    assert_eq!(done.status, Some(0), "{}", done.show());
    assert_eq!(done.summary()["outcome"], "enabled", "{}", done.show());
    assert!(
        !lock_path(&datadir).exists(),
        "the lock must be removed at the end"
    );
    assert_eq!(checksum_state(&datadir), ChecksumState::On);
    assert_starts_intact(&mut sc.cluster, "on", &before, "after enable");
}

pgcheckdb_testkit::version_tests! {
    server_cannot_start_while_enable_runs;
    server_cannot_start_while_enable_runs_pg14(14),
    server_cannot_start_while_enable_runs_pg15(15),
    server_cannot_start_while_enable_runs_pg16(16),
    server_cannot_start_while_enable_runs_pg17(17),
    server_cannot_start_while_enable_runs_pg18(18),
    server_cannot_start_while_enable_runs_pg19(19),
}

/// Starts `args` holding the lock for a while, tries to start the server meanwhile, and
/// returns the finished run.
fn start_during(sc: &mut StandardCluster, args: &[&str]) -> Done {
    let datadir = sc.datadir().to_path_buf();
    let mut child = Pg::new(args, &datadir)
        .env("PGCHECKDB_TEST_HOLD_LOCK_MS", "3000")
        .spawn();
    wait_for_lock(&datadir, &mut child);
    let started = sc.cluster.start();
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "{args:?} ended before the server start was tried"
    );
    let err = match started {
        Ok(()) => panic!("the server started while {args:?} held the lock"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("already exists"), "{err}");
    let done = wait(child, MINUTE, &format!("{args:?}"));
    assert!(!lock_path(&datadir).exists(), "lock left by {args:?}");
    done
}

#[test]
fn server_cannot_start_while_disable_or_corrupt_hold_the_lock() {
    let (mut sc, before) = build(17);
    let datadir = sc.datadir().to_path_buf();
    let done = Pg::new(&["checksums", "enable", "-j", "2"], &datadir).run(MINUTE, "enable");
    assert_eq!(done.status, Some(0), "{}", done.show());

    let done = start_during(&mut sc, &["checksums", "disable", "--format", "json"]);
    assert_eq!(done.status, Some(0), "{}", done.show());
    assert_eq!(done.summary()["outcome"], "disabled");
    assert_eq!(checksum_state(&datadir), ChecksumState::Off);
    assert_starts_intact(&mut sc.cluster, "off", &before, "after disable");

    let small = sc.rel("postgres", "small").to_string();
    let done = start_during(
        &mut sc,
        &[
            "corrupt", "--file", &small, "--block", "1", "--how", "flip-bit", "--yes",
        ],
    );
    assert_eq!(done.status, Some(0), "{}", done.show());
    assert!(done.stdout.contains("damaged block 1"), "{}", done.show());
    // The damage is in `small`, not in the fingerprinted tables.
    assert_starts_intact(&mut sc.cluster, "off", &before, "after corrupt");
}

#[test]
fn second_enable_is_refused_naming_the_first() {
    let (mut sc, before) = build(17);
    let datadir = sc.datadir().to_path_buf();
    let mut first = Pg::new(&["checksums", "enable", "-j", "1"], &datadir)
        .env("PGCHECKDB_TEST_DELAY_MS", "4")
        .spawn();
    wait_for_lock(&datadir, &mut first);
    let second = Pg::new(&["checksums", "enable", "--format", "json"], &datadir).run(SHORT, "2nd");
    assert_eq!(second.status, Some(1), "{}", second.show());
    let want = format!("another pgcheckdb (pid {}", first.id());
    assert!(second.stderr.contains(&want), "{}", second.show());
    assert_eq!(second.stderr.lines().count(), 1, "{}", second.show());
    assert_eq!(second.summary()["outcome"], "refused", "{}", second.show());
    assert_eq!(second.summary()["checksums"], "off", "{}", second.show());
    // verify refuses too, naming the holder (it never writes, so it takes no lock itself).
    let v = Pg::new(&["verify"], &datadir).run(SHORT, "verify");
    assert_eq!(v.status, Some(1), "{}", v.show());
    assert!(v.stderr.contains(&want), "{}", v.show());
    let first = wait(first, Duration::from_secs(300), "first enable");
    assert_eq!(first.status, Some(0), "{}", first.show());
    assert_starts_intact(&mut sc.cluster, "on", &before, "after the first enable");
}

// ---------------------------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------------------------

#[test]
fn sigint_and_sigterm_stop_enable_with_checksums_off() {
    let (mut sc, before) = build(17);
    let datadir = sc.datadir().to_path_buf();
    let control = control_bytes(&datadir);
    for (signal, code, name) in [
        (libc::SIGINT, 130, "SIGINT"),
        (libc::SIGTERM, 143, "SIGTERM"),
    ] {
        let mut child = Pg::new(
            &["checksums", "enable", "-j", "1", "--format", "json"],
            &datadir,
        )
        .env("PGCHECKDB_TEST_DELAY_MS", "4")
        .spawn();
        wait_for_lock(&datadir, &mut child);
        sleep(Duration::from_millis(500));
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let done = wait(child, MINUTE, name);
        assert_eq!(done.status, Some(code), "{name}: {}", done.show());
        let lines: Vec<&str> = done
            .stderr
            .lines()
            .filter(|l| l.contains("interrupted"))
            .collect();
        assert_eq!(lines.len(), 1, "{}", done.show());
        assert!(
            lines[0].contains("data checksums are still off; rerun to finish"),
            "{}",
            done.show()
        );
        let summary = done.summary();
        assert_eq!(summary["outcome"], "interrupted", "{}", done.show());
        assert_eq!(summary["signal"], name);
        assert_eq!(summary["checksums"], "off");
        assert!(
            summary["blocks"].as_u64().unwrap_or(0) > 0,
            "the scan had started: {}",
            done.show()
        );
        assert!(!lock_path(&datadir).exists(), "{name}: lock left behind");
        assert_eq!(
            control_bytes(&datadir),
            control,
            "{name}: pg_control changed"
        );
    }
    assert_starts_intact(
        &mut sc.cluster,
        "off",
        &before,
        "after the interrupted runs",
    );
    let done = Pg::new(&["checksums", "enable"], &datadir).run(MINUTE, "rerun");
    assert_eq!(done.status, Some(0), "{}", done.show());
    assert_starts_intact(&mut sc.cluster, "on", &before, "after the rerun");
}

#[test]
fn failed_control_fsync_says_the_state_is_unknown() {
    let (sc, _) = build(16);
    let datadir = sc.datadir();
    let done = Pg::new(&["checksums", "enable", "--format", "json"], datadir)
        .env("PGCHECKDB_TEST_FAIL_CONTROL_FSYNC", "1")
        .run(MINUTE, "enable");
    assert_eq!(done.status, Some(1), "{}", done.show());
    assert!(done.stderr.contains("UNKNOWN"), "{}", done.show());
    assert!(
        done.stderr.contains("pgcheckdb checksums status")
            && done.stderr.contains("pg_controldata"),
        "{}",
        done.show()
    );
    assert!(!done.stderr.contains("still off"), "{}", done.show());
    assert_eq!(done.summary()["checksums"], "unknown", "{}", done.show());
    assert!(!lock_path(datadir).exists());
}

// ---------------------------------------------------------------------------------------------
// Refusals: everything enable cannot see
// ---------------------------------------------------------------------------------------------

/// Runs `enable` (as `user`), expects exit 1 naming every one of `names`, and `pg_control` and
/// the lock as before.
fn assert_refused(datadir: &Path, user: Option<&RunAs>, names: &[&str], what: &str) {
    let control = control_bytes(datadir);
    let done = Pg::new(&["checksums", "enable", "--format", "json"], datadir)
        .user(user)
        .run(MINUTE, what);
    assert_eq!(done.status, Some(1), "{what}: {}", done.show());
    for name in names {
        assert!(
            done.stderr.contains(name),
            "{what}: the error must name {name}:\n{}",
            done.show()
        );
    }
    assert_eq!(
        done.summary()["outcome"],
        "refused",
        "{what}: {}",
        done.show()
    );
    assert_eq!(
        control_bytes(datadir),
        control,
        "{what}: pg_control changed"
    );
    assert!(
        !lock_path(datadir).exists()
            || fs::symlink_metadata(lock_path(datadir))
                .map(|m| !m.is_file())
                .unwrap_or(false),
        "{what}: lock left behind"
    );
}

fn tablespace_link(datadir: &Path) -> PathBuf {
    let entry = fs::read_dir(datadir.join("pg_tblspc"))
        .expect("pg_tblspc")
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .expect("a tablespace link");
    entry.path()
}

fn version_dir(tablespace_dir: &Path) -> PathBuf {
    fs::read_dir(tablespace_dir)
        .expect("tablespace dir")
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with("PG_"))
        .expect("PG_ directory")
        .path()
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn unreadable_directories_files_and_tablespaces_are_refused_by_path() {
    let (mut sc, before) = build(17);
    let datadir = sc.datadir().to_path_buf();
    let owner = sc.cluster.user().cloned();
    assert!(
        owner.is_some(),
        "these tests run as root with a postgres user"
    );
    let user = owner.as_ref();

    // chmod 000 on a database directory, enable run as the non-root owner.
    let db_dir = datadir.join(sc.rel_dir("second", "other"));
    let db_rel = db_dir
        .strip_prefix(&datadir)
        .expect("rel")
        .display()
        .to_string();
    chmod(&db_dir, 0o000);
    assert_refused(&datadir, user, &[&db_rel], "unreadable database directory");
    chmod(&db_dir, 0o700);

    // chmod 000 on the tablespace's PG_ directory.
    let vdir = version_dir(&sc.tablespace_dir);
    let vname = vdir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    chmod(&vdir, 0o000);
    assert_refused(&datadir, user, &[&vname], "unreadable tablespace directory");
    chmod(&vdir, 0o700);

    // chmod 000 on one relation file.
    let accounts = sc.rel("postgres", "accounts").to_string();
    chmod(&datadir.join(&accounts), 0o000);
    assert_refused(&datadir, user, &[&accounts], "unreadable relation file");
    chmod(&datadir.join(&accounts), 0o600);

    // Dangling tablespace link (the disk is gone), a looping one, an unmounted one (the mount
    // point is there, empty).
    let link = tablespace_link(&datadir);
    let link_name = format!(
        "pg_tblspc/{}",
        link.file_name().expect("name").to_string_lossy()
    );
    let target = fs::read_link(&link).expect("link target");
    let moved = sc.tablespace_dir.with_extension("away");
    fs::rename(&sc.tablespace_dir, &moved).expect("move tablespace away");
    assert_refused(&datadir, None, &[&link_name], "dangling tablespace link");
    fs::create_dir(&sc.tablespace_dir).expect("empty mount point");
    assert_refused(&datadir, None, &[&link_name], "unmounted tablespace");
    fs::remove_dir(&sc.tablespace_dir).expect("remove mount point");
    fs::rename(&moved, &sc.tablespace_dir).expect("tablespace back");
    fs::remove_file(&link).expect("remove link");
    symlink(&link, &link).expect("looping link");
    assert_refused(&datadir, None, &[&link_name], "looping tablespace link");
    fs::remove_file(&link).expect("remove loop");
    symlink(&target, &link).expect("restore link");

    assert_eq!(checksum_state(&datadir), ChecksumState::Off);
    assert_starts_intact(&mut sc.cluster, "off", &before, "after the refusals");
}

#[test]
fn fifos_are_refused_by_enable_and_hang_no_command() {
    let (mut sc, before) = build(17);
    let datadir = sc.datadir().to_path_buf();
    let accounts = sc.rel("postgres", "accounts").to_string();
    let postgres_db = sc.rel_dir("postgres", "accounts").display().to_string();
    let map = format!("{postgres_db}/pg_filenode.map");
    let control = control_bytes(&datadir);
    let places = [
        accounts.as_str(),
        "postmaster.pid",
        "PG_VERSION",
        "global/pg_control",
        "global/pg_filenode.map",
        map.as_str(),
        "pg_xact/0000",
    ];
    for place in places {
        let path = datadir.join(place);
        let saved = datadir.join(format!("{place}.saved").replace('/', "_"));
        let existed = path.exists();
        if existed {
            fs::rename(&path, &saved).expect("save");
        }
        mkfifo(&path);
        assert_refused(&datadir, None, &[place], &format!("FIFO as {place}"));
        // Read-only commands: they may report or refuse, but must end, and never exit 0 when
        // the FIFO sits where they read.
        let status = Pg::new(&["checksums", "status"], &datadir).run(SHORT, "status");
        let verify = Pg::new(&["verify", "--format", "json"], &datadir).run(SHORT, "verify");
        let inspect = Pg::new(&["inspect", "--file", &accounts, "--block", "0"], &datadir)
            .run(SHORT, "inspect");
        match place {
            "global/pg_control" => {
                for run in [&status, &verify, &inspect] {
                    assert_eq!(run.status, Some(1), "{place}: {}", run.show());
                    assert!(run.stderr.contains("pg_control"), "{}", run.show());
                }
            }
            "postmaster.pid" => {
                assert_eq!(verify.status, Some(1), "{}", verify.show());
                assert!(
                    verify.stderr.contains("postmaster.pid"),
                    "{}",
                    verify.show()
                );
            }
            p if p == accounts => {
                assert_eq!(verify.status, Some(2), "{}", verify.show());
                assert!(
                    verify.stdout.contains("irregular_file") && verify.stdout.contains(p),
                    "{}",
                    verify.show()
                );
                assert_eq!(inspect.status, Some(1), "{}", inspect.show());
            }
            // The other files are not read by every command: ending is what is asked.
            _ => {}
        }
        fs::remove_file(&path).expect("remove fifo");
        if existed {
            fs::rename(&saved, &path).expect("restore");
        }
    }
    assert_eq!(control_bytes(&datadir), control, "pg_control changed");
    assert_starts_intact(&mut sc.cluster, "off", &before, "after the FIFO refusals");
}

// ---------------------------------------------------------------------------------------------
// Full disk and failing writes
// ---------------------------------------------------------------------------------------------

/// A tmpfs mounted for the test, unmounted and its mount point removed on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str, owner: Option<&RunAs>) -> Tmpfs {
        fs::create_dir_all(dir).expect("mount point");
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(ok.success(), "could not mount a tmpfs (root is required)");
        if let Some(u) = owner {
            u.chown(dir).expect("chown mount point");
        }
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}

/// A small cluster of PostgreSQL 17 on its own tmpfs (mounted at a directory named by `name`), with a table of 20 000 rows.
fn cluster_on_tmpfs(name: &str, size: &str) -> (Tmpfs, Cluster, String) {
    let mount = std::env::temp_dir().join(format!("pgcheckdb-{name}-{}", std::process::id()));
    let owner = RunAs::detect().expect("user");
    let fs_guard = Tmpfs::mount(&mount, size, owner.as_ref());
    let opts = ClusterOptions::new(17, false).throwaway();
    let mut c = Cluster::init_with(&opts, &mount.join("work")).expect("initdb on tmpfs");
    c.start().expect("start");
    c.psql(
        "postgres",
        "CREATE TABLE t (id int, v text); INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 20000) g;",
    )
    .expect("fill");
    let before = c
        .query_value(
            "postgres",
            "SELECT count(*) || md5(string_agg(v, ',' ORDER BY id)) FROM t",
        )
        .expect("fingerprint");
    c.stop().expect("stop");
    (fs_guard, c, before)
}

fn table_after(c: &mut Cluster, want_checksums: &str) -> String {
    c.start().expect("start after the failed run");
    assert_eq!(
        c.query_value("postgres", "SHOW data_checksums")
            .expect("show"),
        want_checksums
    );
    let v = c
        .query_value(
            "postgres",
            "SELECT count(*) || md5(string_agg(v, ',' ORDER BY id)) FROM t",
        )
        .expect("read t");
    c.stop().expect("stop");
    v
}

#[test]
fn full_disk_refuses_enable_and_changes_nothing() {
    let (fs_guard, mut c, before) = cluster_on_tmpfs("full", "160m");
    let datadir = c.datadir().to_path_buf();
    // Fill the file system to the last byte.
    let filler = fs_guard.0.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "status=none"])
        .arg(format!("of={}", filler.display()))
        .stderr(Stdio::null())
        .status();
    let _ = Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=4k",
            "status=none",
            "oflag=append",
            "conv=notrunc",
        ])
        .arg(format!("of={}", filler.display()))
        .stderr(Stdio::null())
        .status();
    let control = control_bytes(&datadir);
    let done =
        Pg::new(&["checksums", "enable", "--format", "json"], &datadir).run(MINUTE, "enable");
    assert_eq!(done.status, Some(1), "{}", done.show());
    assert!(
        done.stderr.contains("No space left on device"),
        "{}",
        done.show()
    );
    assert!(done.stderr.contains("postmaster.pid"), "{}", done.show());
    assert_eq!(done.summary()["outcome"], "refused", "{}", done.show());
    assert_eq!(done.summary()["checksums"], "off", "{}", done.show());
    assert_eq!(control_bytes(&datadir), control);
    assert!(
        !lock_path(&datadir).exists(),
        "half-written lock left behind"
    );
    fs::remove_file(&filler).expect("free the disk");
    assert_eq!(table_after(&mut c, "off"), before);
}

#[test]
fn writes_failing_mid_run_leave_checksums_off() {
    let (_fs, mut c, before) = cluster_on_tmpfs("fsize", "200m");
    let datadir = c.datadir().to_path_buf();
    let control = control_bytes(&datadir);
    // Writes at or beyond 256 kB fail with EFBIG: the pages of every larger file.
    let mut cmd = Command::new("prlimit");
    cmd.arg("--fsize=262144")
        .arg("--")
        .arg(bin())
        .args([
            "checksums",
            "enable",
            "-j",
            "1",
            "--format",
            "json",
            "--no-progress",
            "-D",
        ])
        .arg(&datadir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let done = wait(
        cmd.spawn().expect("prlimit"),
        MINUTE,
        "enable under RLIMIT_FSIZE",
    );
    assert_eq!(done.status, Some(1), "{}", done.show());
    assert!(done.stderr.contains("could not write"), "{}", done.show());
    assert!(done.stderr.contains("File too large"), "{}", done.show());
    assert!(done.stderr.contains("NOT enabled"), "{}", done.show());
    assert_eq!(done.summary()["outcome"], "incomplete", "{}", done.show());
    assert_eq!(control_bytes(&datadir), control);
    assert!(!lock_path(&datadir).exists());
    assert_eq!(table_after(&mut c, "off"), before);
}
