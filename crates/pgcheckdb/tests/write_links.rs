//! Writes never go through a link that leaves the data directory (issue 25, item 4), on real
//! clusters of PostgreSQL 14–19 with a tablespace outside the data directory:
//!
//! * `corrupt --file` on a relation file that is a symbolic link to a file outside the data
//!   directory (and `--file` naming that outside file directly) is refused with one line on
//!   stderr and exit 1; the outside file's bytes are unchanged;
//! * on a `cp -a` copy of a stopped cluster, whose `pg_tblspc/OID` link still leads to the
//!   original's tablespace, `corrupt --relation` of a table in that tablespace is refused and the
//!   original's file is unchanged; naming the tablespace (`--tablespace OID` or its directory)
//!   allows it, and the write then lands in the shared file; a table in the copy's own `base/`
//!   is damaged as before, in the copy only;
//! * `checksums enable` on that copy while the original server runs and holds a file of the
//!   shared tablespace open is refused, naming the tablespace and a process id that really holds
//!   such a file open, and nothing in the copy or the tablespace changes.
//!
//! Missing PostgreSQL binaries fail these tests.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread::sleep;
use std::time::{Duration, Instant};

use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::snapshot::{differences, snapshot};
use pgcheckdb_testkit::{loaded, Cluster, BLCKSZ, MAJORS};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pgcheckdb"))
}

fn pgcheckdb(args: &[&str]) -> Run {
    run::pgcheckdb(&bin(), args, None)
}

/// A stopped cluster of `major` (checksums off) with table `near` in the default tablespace and
/// table `far` in tablespace `far`, whose directory is `spc` in the cluster's work directory.
struct Fixture {
    cluster: Cluster,
    /// The tablespace's directory (what `pg_tblspc/OID` links to).
    spc: PathBuf,
    spc_oid: String,
    /// `base/<db>/<node>` of `near`.
    near: String,
    /// `pg_tblspc/<oid>/PG_.../<db>/<node>` of `far`.
    far: String,
}

impl Fixture {
    fn new(major: u32) -> Fixture {
        let mut cluster = loaded::started(major, false);
        let spc = cluster.make_dir("spc").expect("tablespace directory");
        cluster
            .psql(
                "postgres",
                &format!("CREATE TABLESPACE far LOCATION '{}';", spc.display()),
            )
            .expect("create tablespace");
        // Frozen and checkpointed: reading the tables later sets no hint bit, so a running
        // server leaves their files alone.
        cluster
            .psql(
                "postgres",
                "CREATE TABLE near AS SELECT g AS id, repeat('n', 200) AS pad FROM generate_series(1, 2000) g;\n\
                 CREATE TABLE far TABLESPACE far AS SELECT g AS id, repeat('f', 200) AS pad FROM generate_series(1, 2000) g;\n\
                 VACUUM FREEZE near;\nVACUUM FREEZE far;\nCHECKPOINT;",
            )
            .expect("load");
        let near = cluster.relation_filepath("postgres", "near").expect("near");
        let far = cluster.relation_filepath("postgres", "far").expect("far");
        let spc_oid = cluster
            .query_value(
                "postgres",
                "SELECT oid FROM pg_tablespace WHERE spcname = 'far'",
            )
            .expect("tablespace oid");
        assert!(
            far.starts_with(&format!("pg_tblspc/{spc_oid}/")),
            "far is in the tablespace: {far}"
        );
        cluster
            .stop()
            .unwrap_or_else(|e| panic!("stop {major}: {e}"));
        Fixture {
            cluster,
            spc,
            spc_oid,
            near,
            far,
        }
    }

    fn datadir(&self) -> &Path {
        self.cluster.datadir()
    }

    /// `far`'s file in the tablespace directory itself (not through any link).
    fn far_in_spc(&self) -> PathBuf {
        let prefix = format!("pg_tblspc/{}/", self.spc_oid);
        self.spc
            .join(self.far.strip_prefix(&prefix).expect("far's path"))
    }

    /// `cp -a` of the stopped data directory into the work directory: its `pg_tblspc/OID`
    /// link still leads to `spc`.
    fn copy(&self) -> PathBuf {
        let copy = self.cluster.work_dir().join("copy");
        let out = Command::new("cp")
            .arg("-a")
            .arg(self.datadir())
            .arg(&copy)
            .output()
            .expect("run cp -a");
        assert!(out.status.success(), "cp -a: {out:?}");
        let link = fs::read_link(copy.join("pg_tblspc").join(&self.spc_oid)).expect("copied link");
        assert_eq!(
            link, self.spc,
            "the copy's tablespace link leads to the original's"
        );
        copy
    }
}

/// `corrupt -D datadir --block 0 --how zero --yes` plus `target`.
fn corrupt_zero(datadir: &Path, target: &[&str]) -> Run {
    let d = datadir.display().to_string();
    let mut args = vec![
        "corrupt", "-D", &d, "--block", "0", "--how", "zero", "--yes",
    ];
    args.extend_from_slice(target);
    pgcheckdb(&args)
}

/// Exit 1, one line on stderr containing each of `words`, nothing on stdout.
fn assert_refused(run: &Run, words: &[&str], what: &str) {
    assert_eq!(run.status, 1, "{what}: expected a refusal\n{run}");
    assert_eq!(run.stderr.lines().count(), 1, "{what}: one line\n{run}");
    for w in words {
        assert!(
            run.stderr.contains(w),
            "{what}: stderr must say {w:?}\n{run}"
        );
    }
    assert!(run.stdout.is_empty(), "{what}: nothing on stdout\n{run}");
}

fn zero_block_0(path: &Path) -> bool {
    let bytes = fs::read(path).expect("read");
    bytes[..BLCKSZ].iter().all(|&b| b == 0)
}

#[test]
fn corrupt_file_through_a_symlink_out_of_the_data_directory_is_refused() {
    for major in MAJORS {
        let fx = Fixture::new(major);
        let datadir = fx.datadir();
        // near's file moves out of the data directory; a symlink takes its place.
        let outside_dir = fx.cluster.make_dir("outside").expect("outside dir");
        let node = Path::new(&fx.near).file_name().expect("node");
        let outside = outside_dir.join(node);
        fs::rename(datadir.join(&fx.near), &outside).expect("move near's file out");
        symlink(&outside, datadir.join(&fx.near)).expect("symlink");
        let before = fs::read(&outside).expect("read outside");

        let through_link = corrupt_zero(datadir, &["--file", &fx.near]);
        assert_refused(
            &through_link,
            &[&fx.near, "outside the data directory"],
            &format!("PostgreSQL {major}: --file through a symlink"),
        );
        let absolute = outside.display().to_string();
        let direct = corrupt_zero(datadir, &["--file", &absolute]);
        assert_refused(
            &direct,
            &["outside the data directory"],
            &format!("PostgreSQL {major}: --file naming the outside file"),
        );
        let by_name = corrupt_zero(datadir, &["--relation", "near"]);
        assert_refused(
            &by_name,
            &["outside the data directory"],
            &format!("PostgreSQL {major}: --relation whose file is a symlink"),
        );
        assert!(
            fs::read(&outside).expect("read outside") == before,
            "PostgreSQL {major}: the outside file was changed"
        );
    }
}

#[test]
fn corrupt_on_a_copy_does_not_write_into_the_originals_tablespace_unless_named() {
    for major in MAJORS {
        let fx = Fixture::new(major);
        let copy = fx.copy();
        let far_file = fx.far_in_spc();
        let near_original = fx.datadir().join(&fx.near);
        let far_before = fs::read(&far_file).expect("read far");
        let near_before = fs::read(&near_original).expect("read near");
        let what = |w: &str| format!("PostgreSQL {major}: {w}");

        let refused = corrupt_zero(&copy, &["--relation", "far"]);
        assert_refused(
            &refused,
            &[
                &format!("tablespace {}", fx.spc_oid),
                "--tablespace",
                &fx.far,
            ],
            &what("--relation far on the copy"),
        );
        let by_file = corrupt_zero(&copy, &["--file", &fx.far]);
        assert_refused(
            &by_file,
            &["--tablespace"],
            &what("--file of far on the copy"),
        );
        // Another tablespace named does not open this one.
        let other = corrupt_zero(&copy, &["--relation", "far", "--tablespace", "1"]);
        assert_eq!(other.status, 1, "{}\n{other}", what("--tablespace 1"));
        assert!(
            fs::read(&far_file).expect("read far") == far_before,
            "{}",
            what("the original's tablespace file was changed")
        );
        // On the original itself, too, the tablespace must be named.
        let on_original = corrupt_zero(fx.datadir(), &["--relation", "far"]);
        assert_refused(
            &on_original,
            &["--tablespace"],
            &what("--relation far on the original"),
        );
        assert!(fs::read(&far_file).expect("read far") == far_before);

        // The copy's own files are written as before, and only the copy's.
        let near = corrupt_zero(&copy, &["--relation", "near"]);
        assert_eq!(near.status, 0, "{}\n{near}", what("near on the copy"));
        assert!(
            zero_block_0(&copy.join(&fx.near)),
            "{}",
            what("near zeroed")
        );
        assert!(fs::read(&near_original).expect("read") == near_before);

        // Named, by OID or by directory, the tablespace is written: the shared file.
        let by_oid = corrupt_zero(&copy, &["--relation", "far", "--tablespace", &fx.spc_oid]);
        assert_eq!(by_oid.status, 0, "{}\n{by_oid}", what("--tablespace OID"));
        assert!(zero_block_0(&far_file), "{}", what("far zeroed by OID"));
        let spc = fx.spc.display().to_string();
        let d = copy.display().to_string();
        let by_dir = pgcheckdb(&[
            "corrupt",
            "-D",
            &d,
            "--relation",
            "far",
            "--block",
            "1",
            "--how",
            "flip-bit",
            "--yes",
            "--tablespace",
            &spc,
        ]);
        assert_eq!(by_dir.status, 0, "{}\n{by_dir}", what("--tablespace DIR"));
        let after = fs::read(&far_file).expect("read far");
        assert_ne!(
            after[BLCKSZ..2 * BLCKSZ],
            far_before[BLCKSZ..2 * BLCKSZ],
            "{}",
            what("block 1 of far flipped")
        );
    }
}

/// Process ids (not ours) holding a file open under `dir`, from `/proc/*/fd`.
fn holders(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .filter_map(|fd| fs::read_link(fd.path()).ok())
            .any(|target| target.starts_with(dir));
        if holds && pid != me {
            pids.push(pid);
        }
    }
    pids
}

/// A psql session on the running original that has read `far` and stays connected.
fn reader_of_far(cluster: &Cluster, spc: &Path) -> Child {
    let child = cluster
        .spawn_psql(
            "postgres",
            "SELECT count(*) FROM far; SELECT pg_sleep(600);",
        )
        .expect("spawn psql");
    let start = Instant::now();
    while holders(spc).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no process holds a file of the tablespace open"
        );
        sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn checksums_enable_on_a_copy_refuses_while_the_original_holds_the_tablespace_open() {
    for major in MAJORS {
        let mut fx = Fixture::new(major);
        let copy = fx.copy();
        fx.cluster
            .start()
            .unwrap_or_else(|e| panic!("start {major}: {e}"));
        let mut reader = reader_of_far(&fx.cluster, &fx.spc);
        let before = snapshot(&copy).expect("snapshot the copy and its tablespace");
        let d = copy.display().to_string();
        let run = pgcheckdb(&["checksums", "enable", "-D", &d, "--no-progress"]);
        let pids = holders(&fx.spc);
        let _ = reader.kill();
        let _ = reader.wait();
        let what = format!("PostgreSQL {major}: enable on the copy");
        assert_eq!(run.status, 1, "{what}: expected a refusal\n{run}");
        assert!(
            run.stderr.contains(&format!("tablespace {}", fx.spc_oid)),
            "{what}: the tablespace is named\n{run}"
        );
        assert!(
            pids.iter()
                .any(|p| run.stderr.contains(&format!("pid {p} "))),
            "{what}: a process holding the tablespace open ({pids:?}) is named\n{run}"
        );
        let after = snapshot(&copy).expect("snapshot again");
        let changed = differences(&before, &after);
        assert!(changed.is_empty(), "{what}: changed {changed:#?}\n{run}");
        assert!(
            !copy.join("postmaster.pid").exists(),
            "{what}: lock left behind"
        );
        fx.cluster
            .stop()
            .unwrap_or_else(|e| panic!("stop {major}: {e}"));
    }
}
