//! `pgcheckdb checksums enable|disable|status` on real clusters made by `initdb` of
//! PostgreSQL 14–19 and filled with SQL (tables, indexes, TOAST, a tablespace outside the data
//! directory, a relation larger than one segment).
//!
//! * round trip per version: enable → `pg_checksums --check` of the same version passes, the
//!   server starts with `data_checksums = on`, every table reads back the same, `pgcheckdb verify`
//!   finds nothing; disable → the server starts with checksums off, data the same; enable again;
//! * `pg_control` after enable and disable is the file `pg_checksums --enable|--disable` of the
//!   same version writes (but for its time and CRC), on clusters made with and without checksums;
//! * refusals (running server, unclean shutdown, already on, already off) exit 1 with one line
//!   and change nothing;
//! * damaged pages make `enable` refuse to switch pg_control (exit 2) and are named;
//!   `--allow-damaged` switches anyway and leaves them unstamped;
//! * crash test: `enable` killed with SIGKILL at random moments (≥ 20 times; more with
//!   `PGCHECKDB_CRASH_ITERATIONS`, seed with `PGCHECKDB_CRASH_SEED`); after each kill pg_control
//!   says off (or on only after a complete run), the server starts and the data is intact; a
//!   final rerun completes and `pg_checksums --check` passes.
//!
//! Missing PostgreSQL binaries fail these tests (scripts/install-postgres.sh installs them).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgcheckdb_pg::format::control::{ChecksumState, ControlFile};
use pgcheckdb_testkit::fixture::{standard_cluster_with, FixtureOptions, StandardCluster};
use pgcheckdb_testkit::run::{pgcheckdb, Key, Run};
use pgcheckdb_testkit::snapshot::{differences, snapshot};
use pgcheckdb_testkit::{pg_checksums, Cluster, BLCKSZ};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_pgcheckdb"))
}

fn run(args: &[&str], datadir: &Path) -> Run {
    let mut all: Vec<&str> = args.to_vec();
    let d = datadir.to_str().expect("utf-8 path");
    all.extend(["-D", d, "--no-progress"]);
    pgcheckdb(bin(), &all, None)
}

fn enable_json(datadir: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["checksums", "enable", "-j", "2", "--format", "json"];
    args.extend(extra);
    run(&args, datadir)
}

fn checksum_state(datadir: &Path) -> ChecksumState {
    ControlFile::read_from_datadir(datadir)
        .expect("pg_control readable")
        .checksum_state()
}

fn build(major: u32, big: bool) -> StandardCluster {
    standard_cluster_with(FixtureOptions {
        major,
        checksums: false,
        big_relation: big,
    })
    .unwrap_or_else(|e| panic!("could not build the PostgreSQL {major} test cluster: {e}"))
}

/// Tables of the standard cluster whose contents are compared, by database.
const POSTGRES_TABLES: [&str; 9] = [
    "accounts",
    "docs",
    "small",
    "trunc_me",
    "vacuumed",
    "unlogged_t",
    "mv_totals",
    "in_space",
    "seq_ids",
];

/// A fingerprint of the contents of every table (row count, sum and xor of row hashes), read
/// with sequential scans (heap and TOAST), plus index scans of the `accounts` indexes and of
/// `in_space`'s primary key (in the tablespace). Needs the server running.
fn fingerprint(c: &Cluster, extra_tables: &[&str]) -> String {
    let mut out = String::new();
    let row_hash = |db: &str, table: &str| {
        c.query_value(
            db,
            &format!(
                "SELECT count(*) || ':' || coalesce(sum(hashtext(x::text)::bigint), 0) || ':' || \
                 coalesce(bit_xor(hashtext(x::text)), 0) FROM (SELECT * FROM {table}) x"
            ),
        )
        .unwrap_or_else(|e| panic!("could not read table {table} in {db}: {e}"))
    };
    for t in POSTGRES_TABLES.iter().chain(extra_tables) {
        out.push_str(&format!("{t}={}\n", row_hash("postgres", t)));
    }
    out.push_str(&format!("second.other={}\n", row_hash("second", "other")));
    let indexed = c
        .psql(
            "postgres",
            "SET enable_seqscan = off; SET enable_bitmapscan = off;
             SELECT md5(string_agg(id::text, ',' ORDER BY id)) AS pkey FROM accounts WHERE id > 0;
             SELECT md5(string_agg(name, ',' ORDER BY name)) AS name_idx FROM accounts WHERE name > '';
             SELECT md5(string_agg(id::text, ',' ORDER BY id)) AS in_space_pkey FROM in_space WHERE id > 0;",
        )
        .expect("index scans");
    out.push_str(&indexed);
    assert!(
        out.contains("accounts=20000:"),
        "unexpected fingerprint:\n{out}"
    );
    out
}

fn assert_pg_checksums_passes(c: &Cluster, when: &str) {
    let check = pg_checksums::check(c);
    assert!(
        check.status == 0
            && check.bad_blocks.is_empty()
            && check.stdout.contains("Bad checksums:  0"),
        "pg_checksums --check (PostgreSQL {}) failed {when}:\n{}\n{}",
        c.major(),
        check.stdout,
        check.stderr
    );
}

fn assert_verify_clean(datadir: &Path, when: &str) {
    let v = pgcheckdb_testkit::run::verify(bin(), datadir, 2, None);
    assert_eq!(v.status, 0, "pgcheckdb verify found something {when}:\n{v}");
    assert!(
        v.problems().is_empty(),
        "pgcheckdb verify problems {when}:\n{v}"
    );
}

/// A `CHECKPOINT` on the running server, so that it has nothing left to write while a
/// refusal is checked to change no file. Since 19 a plain `SELECT` (the fingerprint's scans)
/// prunes on access and sets visibility-map bits, WAL-logged and written by the server in the
/// background: without it the server's own write to `pg_wal` could land between the two
/// snapshots.
fn quiesce(c: &Cluster) {
    c.psql("postgres", "CHECKPOINT;").expect("CHECKPOINT");
}

fn server_setting(c: &Cluster, name: &str) -> String {
    c.query_value("postgres", &format!("SHOW {name}"))
        .expect("SHOW")
}

/// One refusal: exit 1, one `pgcheckdb: error:` line naming `why`, nothing changed on disk.
fn assert_refused(datadir: &Path, args: &[&str], why: &str) {
    let before = snapshot(datadir).expect("snapshot");
    let r = run(args, datadir);
    let after = snapshot(datadir).expect("snapshot");
    assert_eq!(r.status, 1, "{args:?} should be refused ({why}):\n{r}");
    let lines = r.stderr_lines();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: one line on stderr expected:\n{r}"
    );
    assert!(
        lines[0].starts_with("pgcheckdb: error: ") && lines[0].contains(why),
        "{args:?}: expected an error naming {why:?}:\n{r}"
    );
    assert!(
        r.stdout.is_empty(),
        "{args:?}: nothing on stdout expected:\n{r}"
    );
    assert_eq!(
        differences(&before, &after),
        Vec::<String>::new(),
        "{args:?} changed files"
    );
}

/// Enable, check, disable, check, enable again on a filled cluster of `major`.
fn round_trip(major: u32) {
    let mut sc = build(major, true);
    let datadir = sc.datadir().to_path_buf();
    assert_eq!(checksum_state(&datadir), ChecksumState::Off);
    sc.cluster.start().expect("start");
    let before = fingerprint(&sc.cluster, &["big"]);
    // Refused while the server runs.
    quiesce(&sc.cluster);
    assert_refused(&datadir, &["checksums", "enable"], "a server is running");
    sc.cluster.stop().expect("stop");

    let status = run(&["checksums", "status", "--format", "json"], &datadir);
    assert_eq!(status.status, 0, "{status}");
    let status: serde_json::Value =
        serde_json::from_str(status.stdout.lines().next().unwrap_or_default())
            .expect("status JSON");
    assert_eq!(status["checksums"], "off");
    assert_eq!(status["postgres_version"], major);

    assert_refused(&datadir, &["checksums", "disable"], "already disabled");

    // A dry run writes nothing.
    let snap = snapshot(&datadir).expect("snapshot");
    let dry = enable_json(&datadir, &["--dry-run"]);
    assert_eq!(dry.status, 0, "{dry}");
    assert_eq!(dry.summary()["outcome"], "dry_run");
    assert!(
        dry.summary()["blocks_rewritten"].as_u64().unwrap() > 140_000,
        "{dry}"
    );
    assert_eq!(
        differences(&snap, &snapshot(&datadir).expect("snapshot")),
        Vec::<String>::new()
    );

    let on = enable_json(&datadir, &[]);
    assert_eq!(on.status, 0, "enable failed on PostgreSQL {major}:\n{on}");
    let s = on.summary();
    assert_eq!(s["outcome"], "enabled", "{on}");
    assert_eq!(s["checksums"], "on");
    assert_eq!(s["damaged_blocks"], 0);
    assert!(s["blocks_rewritten"].as_u64().unwrap() > 140_000, "{on}");
    assert!(s["files"].as_u64().unwrap() > 100, "{on}");
    assert!(
        on.stderr.contains("standbys"),
        "the standby warning is missing:\n{on}"
    );
    assert_eq!(checksum_state(&datadir), ChecksumState::On);
    assert_pg_checksums_passes(&sc.cluster, "after enable");
    assert_verify_clean(&datadir, "after enable");
    assert_refused(&datadir, &["checksums", "enable"], "already enabled");

    sc.cluster.start().expect("server starts after enable");
    assert_eq!(server_setting(&sc.cluster, "data_checksums"), "on");
    assert_eq!(
        fingerprint(&sc.cluster, &["big"]),
        before,
        "data changed by enable (PostgreSQL {major})"
    );
    quiesce(&sc.cluster);
    assert_refused(&datadir, &["checksums", "disable"], "a server is running");
    sc.cluster.stop().expect("stop");

    let off = run(&["checksums", "disable"], &datadir);
    assert_eq!(off.status, 0, "{off}");
    assert!(
        off.stdout.contains("Checksums disabled in cluster"),
        "{off}"
    );
    assert_eq!(checksum_state(&datadir), ChecksumState::Off);
    sc.cluster.start().expect("server starts after disable");
    assert_eq!(server_setting(&sc.cluster, "data_checksums"), "off");
    assert_eq!(
        fingerprint(&sc.cluster, &["big"]),
        before,
        "data changed by disable (PostgreSQL {major})"
    );
    sc.cluster.stop().expect("stop");

    // Enabling again finds the checksums still right: almost nothing is rewritten.
    let again = enable_json(&datadir, &[]);
    assert_eq!(again.status, 0, "{again}");
    let s = again.summary();
    assert!(
        s["blocks_already_valid"].as_u64().unwrap() > 140_000,
        "{again}"
    );
    assert!(s["blocks_rewritten"].as_u64().unwrap() < 1000, "{again}");
    assert_pg_checksums_passes(&sc.cluster, "after the second enable");
}

#[test]
fn round_trip_pg14() {
    round_trip(14);
}

#[test]
fn round_trip_pg15() {
    round_trip(15);
}

#[test]
fn round_trip_pg16() {
    round_trip(16);
}

#[test]
fn round_trip_pg17() {
    round_trip(17);
}

#[test]
fn round_trip_pg18() {
    round_trip(18);
}

#[test]
fn round_trip_pg19() {
    round_trip(19);
}

/// `global/pg_control` of a stopped cluster.
fn control_bytes(datadir: &Path) -> Vec<u8> {
    std::fs::read(datadir.join("global/pg_control")).expect("read pg_control")
}

/// `pg_checksums --enable|--disable` of the cluster's own version.
fn pg_checksums_switch(c: &Cluster, how: &str) {
    let out = c
        .command("pg_checksums")
        .arg(how)
        .arg("-D")
        .arg(c.datadir())
        .output()
        .expect("run pg_checksums");
    assert!(
        out.status.success(),
        "pg_checksums {how} (PostgreSQL {}) failed:\n{}",
        c.major(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pg_control` as `ours` and `theirs` wrote it is the same file, byte for byte, except the
/// `time` each stamped (bytes 24..32) and so the CRC; both CRCs are valid.
fn assert_same_control(ours: &[u8], theirs: &[u8], what: &str) {
    let parsed = ControlFile::parse(ours.to_vec(), "pgcheckdb's pg_control")
        .unwrap_or_else(|e| panic!("{what}: pgcheckdb's pg_control: {e}"));
    ControlFile::parse(theirs.to_vec(), "pg_checksums's pg_control")
        .unwrap_or_else(|e| panic!("{what}: pg_checksums's pg_control: {e}"));
    let crc = pgcheckdb_pg::format::control::crc_offset_for(parsed.pg_control_version)
        .expect("a known layout");
    assert_eq!(ours.len(), theirs.len(), "{what}: file sizes");
    let differing: Vec<usize> = (0..ours.len())
        .filter(|&i| ours[i] != theirs[i] && !(24..32).contains(&i) && !(crc..crc + 4).contains(&i))
        .collect();
    assert!(
        differing.is_empty(),
        "{what}: pg_control differs from pg_checksums's at bytes {differing:?}"
    );
}

/// `checksums enable` and `disable` write the `pg_control` that `pg_checksums --enable` and
/// `--disable` of the same version write, on a cluster made with and one made without data
/// checksums: on 19 only `data_checksum_version` (at 268) changes and
/// `data_checksum_version_init` (at 264) keeps initdb's choice; before 19 the one field at 252.
/// Each tool starts from the same state: pgcheckdb's result is compared, then pg_checksums
/// switches the cluster to the other state for the next step.
#[test]
fn control_file_is_written_as_pg_checksums_writes_it_on_every_version() {
    for major in pgcheckdb_testkit::MAJORS {
        for initdb_checksums in [false, true] {
            let c = Cluster::init_temp(&pgcheckdb_testkit::ClusterOptions::new(
                major,
                initdb_checksums,
            ))
            .expect("initdb");
            let d = c.datadir();
            let what = |step: &str| {
                format!("PostgreSQL {major}, initdb checksums {initdb_checksums}, {step}")
            };
            // Two switches in each direction, starting from initdb's state.
            let order: [(&str, &str, ChecksumState); 2] = if initdb_checksums {
                [
                    ("disable", "--disable", ChecksumState::Off),
                    ("enable", "--enable", ChecksumState::On),
                ]
            } else {
                [
                    ("enable", "--enable", ChecksumState::On),
                    ("disable", "--disable", ChecksumState::Off),
                ]
            };
            for (ours, theirs, state) in order {
                let before = control_bytes(d);
                let r = run(&["checksums", ours], d);
                assert_eq!(r.status, 0, "{}: {r}", what(ours));
                assert_eq!(checksum_state(d), state, "{}", what(ours));
                let by_pgcheckdb = control_bytes(d);
                std::fs::write(d.join("global/pg_control"), &before).expect("restore pg_control");
                pg_checksums_switch(&c, theirs);
                assert_same_control(&by_pgcheckdb, &control_bytes(d), &what(ours));
            }
        }
    }
}

/// The first process id of `postmaster.pid`.
fn postmaster_pid(datadir: &Path) -> i32 {
    let text = std::fs::read_to_string(datadir.join("postmaster.pid")).expect("postmaster.pid");
    text.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("pid")
}

#[test]
fn unclean_shutdown_is_refused() {
    let mut sc = build(15, false);
    let datadir = sc.datadir().to_path_buf();
    sc.cluster.start().expect("start");
    // Crash the server: pg_control keeps "in production", postmaster.pid names a dead process.
    let pid = postmaster_pid(&datadir);
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    let deadline = Instant::now() + Duration::from_secs(30);
    while pgcheckdb_pg::ops::cluster::process_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the other server processes notice and exit.
    std::thread::sleep(Duration::from_millis(500));
    assert_refused(&datadir, &["checksums", "enable"], "not shut down cleanly");
    assert_refused(&datadir, &["checksums", "disable"], "not shut down cleanly");
    // Recover (crash recovery) and stop cleanly; then enable works.
    // (The killed server's other processes may take a moment to exit: retry.)
    let mut started = false;
    for _ in 0..20 {
        let mut start = sc.cluster.command("pg_ctl");
        start
            .arg("-D")
            .arg(&datadir)
            .arg("-l")
            .arg(sc.cluster.log_file())
            .args(["-w", "start"]);
        if start
            .stdout(Stdio::null())
            .status()
            .expect("pg_ctl")
            .success()
        {
            started = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(started, "the crashed server does not start again");
    sc.cluster.stop().expect("stop after recovery");
    let on = enable_json(&datadir, &[]);
    assert_eq!(on.status, 0, "{on}");
    assert_pg_checksums_passes(&sc.cluster, "after enable following recovery");
}

#[test]
fn damaged_pages_block_the_switch_and_are_named() {
    use pgcheckdb_pg::ops::corrupt::{break_header, read_block, set_pd_upper_zero, HeaderDamage};
    let mut sc = build(15, false);
    let datadir = sc.datadir().to_path_buf();
    let small = sc.file("postgres", "small");
    let trunc = sc.file("postgres", "trunc_me");
    break_header(&small, 2, BLCKSZ, HeaderDamage::LowerAboveUpper).expect("damage small");
    set_pd_upper_zero(&trunc, 1, BLCKSZ).expect("damage trunc_me");
    let damaged_small = read_block(&small, 2, BLCKSZ).expect("read");
    let damaged_trunc = read_block(&trunc, 1, BLCKSZ).expect("read");
    let expected = [
        Key::new("invalid_header", sc.rel("postgres", "small"), Some(2)),
        Key::new("nonzero_new_page", sc.rel("postgres", "trunc_me"), Some(1)),
    ];
    let damage_keys = |r: &Run| -> Vec<Key> {
        let mut keys: Vec<Key> = r
            .findings
            .iter()
            .filter(|f| f["severity"] == "error")
            .map(pgcheckdb_testkit::run::key_of)
            .collect();
        keys.sort();
        keys
    };

    // A dry run names them and writes nothing.
    let snap = snapshot(&datadir).expect("snapshot");
    let dry = enable_json(&datadir, &["--dry-run"]);
    assert_eq!(dry.status, 2, "{dry}");
    assert_eq!(damage_keys(&dry), expected.to_vec(), "{dry}");
    assert_eq!(
        differences(&snap, &snapshot(&datadir).expect("snapshot")),
        Vec::<String>::new()
    );

    // enable: the sane pages are stamped, pg_control is left at off, exit 2.
    let refused = enable_json(&datadir, &[]);
    assert_eq!(refused.status, 2, "{refused}");
    assert_eq!(refused.summary()["outcome"], "refused_damaged", "{refused}");
    assert_eq!(refused.summary()["damaged_blocks"], 2, "{refused}");
    assert_eq!(damage_keys(&refused), expected.to_vec(), "{refused}");
    assert!(refused.stderr.contains("NOT enabled"), "{refused}");
    assert_eq!(checksum_state(&datadir), ChecksumState::Off);
    assert_eq!(
        read_block(&small, 2, BLCKSZ).expect("read"),
        damaged_small,
        "a damaged page was written"
    );
    assert_eq!(
        read_block(&trunc, 1, BLCKSZ).expect("read"),
        damaged_trunc,
        "a damaged page was written"
    );
    // The cluster still starts with checksums off and reads its undamaged tables.
    sc.cluster.start().expect("start after refused enable");
    assert_eq!(server_setting(&sc.cluster, "data_checksums"), "off");
    assert_eq!(
        sc.cluster
            .query_value("postgres", "SELECT count(*) FROM accounts")
            .expect("query"),
        "20000"
    );
    sc.cluster.stop().expect("stop");

    // Text output names the blocks too.
    let text = run(&["checksums", "enable", "--dry-run"], &datadir);
    assert_eq!(text.status, 2, "{text}");
    assert!(
        text.stdout.contains(sc.rel("postgres", "small")) && text.stdout.contains("invalid_header"),
        "{text}"
    );

    // --allow-damaged switches anyway; the damaged pages stay unstamped and stay findings.
    let forced = enable_json(&datadir, &["--allow-damaged"]);
    assert_eq!(forced.status, 2, "{forced}");
    assert_eq!(forced.summary()["outcome"], "enabled", "{forced}");
    assert_eq!(checksum_state(&datadir), ChecksumState::On);
    assert_eq!(read_block(&small, 2, BLCKSZ).expect("read"), damaged_small);
    let v = pgcheckdb_testkit::run::verify(bin(), &datadir, 2, None);
    assert_eq!(v.status, 2, "{v}");
    let mut blocks: Vec<(String, u64)> = v.error_blocks().into_iter().collect();
    blocks.sort();
    assert_eq!(
        blocks,
        vec![
            (sc.rel("postgres", "small").to_string(), 2),
            (sc.rel("postgres", "trunc_me").to_string(), 1)
        ],
        "{v}"
    );
}

/// A small deterministic generator (xorshift64*), so a failing crash run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// ~220 MB of heap so that an enable run lasts long enough to be killed in every phase.
const CRASH_FILL_SQL: &str = "BEGIN;
CREATE TABLE filler (id int PRIMARY KEY, pad text);
INSERT INTO filler SELECT g, repeat(md5(g::text), 14) FROM generate_series(1, 400000) g;
COMMIT;";

fn copy_dir(from: &Path, to: &Path) {
    if to.exists() {
        std::fs::remove_dir_all(to).expect("remove old copy");
    }
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp")
        .success();
    assert!(ok, "cp -a {} {} failed", from.display(), to.display());
}

#[test]
fn enable_killed_at_random_moments_loses_nothing_and_reruns_complete() {
    let iterations: usize = std::env::var("PGCHECKDB_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let seed: u64 = std::env::var("PGCHECKDB_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        })
        | 1;
    eprintln!("crash test: {iterations} iterations, PGCHECKDB_CRASH_SEED={seed}");
    let mut rng = Rng(seed);

    let mut sc = build(15, false);
    let datadir = sc.datadir().to_path_buf();
    sc.cluster.start().expect("start");
    sc.cluster.psql("postgres", CRASH_FILL_SQL).expect("fill");
    let before = fingerprint(&sc.cluster, &["filler"]);
    sc.cluster.stop().expect("stop");
    let pristine = sc.cluster.work_dir().join("pristine");
    copy_dir(&datadir, &pristine);

    // Calibrate: one complete run, then back to the checksum-less copy.
    let t = Instant::now();
    let full = enable_json(&datadir, &[]);
    let full_time = t.elapsed();
    assert_eq!(full.status, 0, "{full}");
    eprintln!("crash test: a complete run takes {full_time:?}");
    copy_dir(&pristine, &datadir);

    // Kill points spread over a whole run. Every third iteration starts again from the
    // checksum-less copy, so kills land in fresh runs (mostly writing) and in resumed ones.
    let mut horizon_us = (full_time.as_micros() as u64).max(20_000);
    let (mut kills, mut completed, mut i) = (0usize, 0usize, 0usize);
    while kills < iterations {
        assert!(
            i < 3 * iterations,
            "only {kills} of {i} runs could be killed before they finished"
        );
        let delay = Duration::from_micros(rng.next() % horizon_us);
        let iteration_started = Instant::now();
        let mut child = Command::new(bin())
            .args([
                "checksums",
                "enable",
                "-j",
                "2",
                "-q",
                "--no-progress",
                "-D",
            ])
            .arg(&datadir)
            .env_remove("PGDATA")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pgcheckdb");
        std::thread::sleep(delay);
        if child.try_wait().expect("try_wait").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        } else {
            // Runs are faster than calibrated (less load, or resumed): aim earlier.
            horizon_us = (delay.as_micros() as u64 * 9 / 10).max(20_000);
        }
        let status = child.wait_with_output().expect("wait");
        let state = checksum_state(&datadir);
        let when = format!("iteration {i} (PGCHECKDB_CRASH_SEED={seed}, delay {delay:?})");
        match state {
            ChecksumState::Off => {
                assert!(!status.status.success(), "{when}: exit 0 but checksums off")
            }
            ChecksumState::On => {
                // Only a run that got past the final pg_control write turns checksums on, and
                // then every page must be right.
                completed += 1;
                assert_pg_checksums_passes(&sc.cluster, &when);
            }
            other => panic!("{when}: unexpected checksum state {other}"),
        }
        sc.cluster
            .start()
            .unwrap_or_else(|e| panic!("{when}: server does not start: {e}"));
        let now = fingerprint(&sc.cluster, &["filler"]);
        sc.cluster.stop().expect("stop");
        assert_eq!(now, before, "{when}: data changed");
        if state == ChecksumState::On || i % 3 == 2 {
            copy_dir(&pristine, &datadir);
        }
        if std::env::var_os("PGCHECKDB_CRASH_VERBOSE").is_some() {
            eprintln!(
                "crash test: iteration {i}: delay {delay:?}, {state}, {:?}",
                iteration_started.elapsed()
            );
        }
        i += 1;
    }
    eprintln!(
        "crash test: {i} runs, {kills} killed with SIGKILL, {completed} completed before the kill"
    );

    // The rerun completes.
    let last = enable_json(&datadir, &[]);
    assert_eq!(last.status, 0, "{last}");
    assert_eq!(checksum_state(&datadir), ChecksumState::On);
    assert_pg_checksums_passes(&sc.cluster, "after the final rerun");
    assert_verify_clean(&datadir, "after the final rerun");
    sc.cluster.start().expect("start");
    assert_eq!(server_setting(&sc.cluster, "data_checksums"), "on");
    assert_eq!(fingerprint(&sc.cluster, &["filler"]), before);
    sc.cluster.stop().expect("stop");
}
