//! `verify` on plain `pg_basebackup` copies taken under `pgbench` write load: accepted as
//! backups, no false positive on pages the server wrote during the copy (the backup's WAL
//! rewrites them), damage elsewhere found at its block, files changed after the backup found
//! through `backup_manifest`, the page-LSN fallback without WAL, and the refusals that name
//! `--online`. Cross-checked with `pg_verifybackup`.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pgcheckdb_testkit::asserts::{assert_problems, assert_status, key};
use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{loaded, Cluster, ClusterOptions};
use serde_json::Value;

const BLCKSZ: u64 = 8192;

/// A primary with data checksums, a pgbench database (scale 10) and a table pgbench never
/// touches (`cold`), frozen and checkpointed before any backup.
fn loaded_primary(major: u32) -> Cluster {
    let opts = ClusterOptions::new(major, true)
        .setting("checkpoint_timeout", "30s")
        .setting("max_wal_size", "256MB");
    let cold = "CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad \
                FROM generate_series(1, 5000) g; VACUUM FREEZE cold; CHECKPOINT;";
    loaded::pgbench_primary(&opts, 10, cold)
}

/// `pg_basebackup -D <work>/<name> -Fp -c fast` plus `extra` options.
fn base_backup(c: &Cluster, name: &str, extra: &[&str]) -> PathBuf {
    let dir = c.make_dir(name).expect("backup dir");
    let d = dir.display().to_string();
    let mut args: Vec<String> = c.conn_args();
    args.extend(["-D", &d, "-Fp", "-c", "fast"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    c.run_program("pg_basebackup", &refs)
        .expect("pg_basebackup");
    dir
}

/// A backup taken while pgbench runs (4 clients, the backup starting after 2 s): pgbench
/// must still be running when the backup ends (however long it took on a busy machine), and
/// is stopped then.
fn backup_under_load(c: &Cluster, name: &str, extra: &[&str]) -> PathBuf {
    let mut bench = c
        .spawn_pgbench("postgres", &["-c", "4", "-j", "2", "-T", "3600", "-n"])
        .expect("pgbench");
    std::thread::sleep(Duration::from_secs(2));
    let dir = base_backup(c, name, extra);
    let ended = bench.try_wait().expect("pgbench status");
    assert!(
        ended.is_none(),
        "pgbench ended during the backup: {ended:?}"
    );
    let _ = bench.kill();
    let _ = bench.wait();
    dir
}

fn verify_backup(c: &Cluster, dir: &Path, level: &str) -> Run {
    let d = dir.display().to_string();
    common::verify_json(&["-D", &d], level, &[], c.user())
}

fn backup_summary(run: &Run) -> &Value {
    &run.summary()["backup"]
}

/// `pg_verifybackup` on the same copy must agree that it is intact (or not).
fn pg_verifybackup(c: &Cluster, dir: &Path, extra: &[&str]) -> bool {
    let mut cmd = c.command("pg_verifybackup");
    cmd.args(extra).arg(dir);
    cmd.output().expect("run pg_verifybackup").status.success()
}

/// Flips one byte in the middle of block `block` of `rel` in the copy.
fn damage(dir: &Path, rel: &str, block: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(rel))
        .expect("open relation file");
    let at = block * BLCKSZ + 4000;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read");
    b[0] ^= 0x5A;
    f.write_all_at(&b, at).expect("write");
}

fn clean_under_load(major: u32) {
    let mut c = loaded_primary(major);
    if std::env::var_os("PGCHECKDB_KEEP_BACKUPS").is_some() {
        c.keep();
    }
    let cold = c.relation_filepath("postgres", "cold").expect("cold path");
    // The tables every pgbench transaction writes.
    let written: Vec<String> = ["pgbench_branches", "pgbench_tellers", "pgbench_history"]
        .iter()
        .map(|t| c.relation_filepath("postgres", t).expect("table path"))
        .collect();
    let mut last = PathBuf::new();
    let mut unverified_total = 0;
    for i in 0..3 {
        let dir = backup_under_load(&c, &format!("bk{i}"), &[]);
        for level in ["physical", "standard", "extended"] {
            let run = verify_backup(&c, &dir, level);
            assert_status(&run, 0, &format!("PG {major} backup {i} at {level}"));
            assert!(run.problems().is_empty(), "PG {major} backup {i}: {run}");
            let b = backup_summary(&run);
            assert_eq!(b["rule"], "wal_block_set", "{run}");
            assert!(b["wal_blocks"].as_u64().unwrap_or(0) > 0, "{run}");
            assert_eq!(b["manifest"]["mismatched"], 0, "{run}");
            assert!(
                b["manifest"]["checksums_verified"].as_u64().unwrap_or(0) > 100,
                "{run}"
            );
            assert_eq!(b["manifest"]["manifest_checksum_ok"], true, "{run}");
            unverified_total += b["replayed_blocks_unverified"].as_u64().unwrap_or(0);
            if level == "extended" {
                // The consistency rule: pgbench's tables are in flux, `cold` is judged across
                // pages (its visibility map, its index's TIDs).
                let ext = run.extended();
                assert!(ext["forks_in_flux"].as_u64().unwrap_or(0) >= 4, "{ext}");
                assert!(
                    ext["visibility_maps_checked"].as_u64().unwrap_or(0) >= 1,
                    "{ext}"
                );
                assert!(
                    ext["tid_indexes_checked"].as_u64().unwrap_or(0) >= 1,
                    "{ext}"
                );
            }
            if b["replayed_findings_set_aside"].as_u64().unwrap_or(0) > 0 {
                let verbose = [
                    "verify",
                    "-D",
                    &dir.display().to_string(),
                    "--level",
                    level,
                    "-v",
                    "--no-progress",
                ]
                .map(String::from);
                let v = run::pgcheckdb(&common::bin(), &verbose, c.user());
                for l in v.stderr.lines().filter(|l| l.contains("set aside")) {
                    eprintln!("  {l}");
                }
            }
            eprintln!(
                "PG {major} backup {i} {level}: {} blocks in {:.2} s, WAL {} records, {} blocks referenced, {} failing block(s) set aside ({} findings)",
                run.summary()["blocks"],
                run.summary()["seconds"].as_f64().unwrap_or(0.0),
                b["wal_records"],
                b["wal_blocks"],
                b["replayed_blocks_unverified"],
                b["replayed_findings_set_aside"]
            );
        }
        assert!(
            pg_verifybackup(&c, &dir, &[]),
            "pg_verifybackup on backup {i}"
        );
        last = dir;
    }
    eprintln!("PG {major}: {unverified_total} failing replayed block(s) set aside over 3 backups");

    // The text format says it in one line.
    let d = last.display().to_string();
    let text = run::pgcheckdb(
        &common::bin(),
        &["verify", "-D", &d, "--no-progress"],
        c.user(),
    );
    assert_status(&text, 0, "text output");
    let line = text
        .stdout
        .lines()
        .find(|l| l.starts_with("pgcheckdb: base backup from primary (start LSN "))
        .unwrap_or_else(|| panic!("no backup line\n{text}"));
    assert!(line.contains("rule wal_block_set"), "{line}");

    // A page torn in the copy that the backup's WAL rewrites (one pgbench changed after the
    // backup started: its pd_lsn is past the start, so a record of the backup's WAL names it)
    // is counted, not reported. The server computes the manifest's checksum over the bytes it
    // sent, torn or not: the manifest is removed here so that only the page check speaks.
    let bk0 = c.work_dir().join("bk0");
    std::fs::remove_file(bk0.join("backup_manifest")).expect("rm manifest");
    let (rel, block) = changed_page(&bk0, &written)
        .unwrap_or_else(|| panic!("bk0 holds no page of {written:?} changed after its start"));
    damage(&bk0, &rel, block);
    let run = verify_backup(&c, &bk0, "standard");
    assert_status(&run, 0, "torn replayed page");
    assert!(run.problems().is_empty(), "{run}");
    let b = backup_summary(&run);
    // At least the damaged page: the copy may hold other pages replay rewrites (torn, or an
    // extension not yet written), and nothing is reported, so the damaged one was set aside.
    let unverified = b["replayed_blocks_unverified"].as_u64();
    assert!(unverified >= Some(1), "{run}");
    assert!(b["manifest"].is_null(), "{run}");

    // Damage in a page no WAL record of the backup names: found at its block, and the
    // manifest sees the file changed; pg_verifybackup agrees the copy is not intact.
    damage(&last, &cold, 1);
    let run = verify_backup(&c, &last, "physical");
    assert_status(&run, 2, "damaged backup");
    let mut expected = std::collections::BTreeSet::new();
    expected.insert(key("checksum_mismatch", &cold, 1));
    expected.insert(run::Key::new("backup_manifest_mismatch", &cold, None));
    assert_problems(&run, &expected, "damaged backup");
    assert!(
        !pg_verifybackup(&c, &last, &[]),
        "pg_verifybackup must fail too"
    );

    // A file grown after the backup: a manifest finding only.
    let pgv = last.join("PG_VERSION");
    let mut text = std::fs::read(&pgv).expect("PG_VERSION");
    damage(&last, &cold, 1); // undo the flip
    text.extend_from_slice(b"\n");
    std::fs::write(&pgv, &text).expect("write PG_VERSION");
    let run = verify_backup(&c, &last, "physical");
    assert_status(&run, 2, "grown file");
    let mut expected = std::collections::BTreeSet::new();
    expected.insert(run::Key::new(
        "backup_manifest_mismatch",
        "PG_VERSION",
        None,
    ));
    assert_problems(&run, &expected, "grown file");

    // No WAL in the backup (taken under load): the page-LSN rule, stated. A damaged page
    // changed during the backup (pd_lsn past the start) is counted; the cold page is reported.
    let (dir, changed, changed_block) = nowal_backup_with_changed_page(&c, &written);
    let run = verify_backup(&c, &dir, "physical");
    assert_status(&run, 0, "-X none backup");
    let b = backup_summary(&run);
    assert_eq!(b["rule"], "page_lsn", "{run}");
    assert!(b["note"].as_str().unwrap_or("").contains("pd_lsn"), "{run}");
    assert!(pg_verifybackup(&c, &dir, &["-n"]), "pg_verifybackup -n");
    std::fs::remove_file(dir.join("backup_manifest")).expect("rm manifest");
    damage(&dir, &changed, changed_block);
    damage(&dir, &cold, 1);
    let run = verify_backup(&c, &dir, "physical");
    assert_status(&run, 2, "-X none, damaged");
    let mut expected = std::collections::BTreeSet::new();
    expected.insert(key("checksum_mismatch", &cold, 1));
    assert_problems(&run, &expected, "-X none, damaged");
    let unverified = backup_summary(&run)["replayed_blocks_unverified"].as_u64();
    assert!(unverified >= Some(1), "{run}");
    c.stop().expect("stop");
}

/// A `-X none` backup under load, with a page of its copy that changed after the backup
/// started (a `pd_lsn` past `backup_label`'s `START WAL LOCATION`) in one of the tables
/// pgbench writes (`rels`): the premise of the page-LSN step. Which pages pgbench changes
/// moves as it runs (a row's newest version leaves a full page for another one, and the old
/// page is then left alone), so the copy is searched for such a page; the backup is taken
/// again, a few times at most, if the copy has none.
fn nowal_backup_with_changed_page(c: &Cluster, rels: &[String]) -> (PathBuf, String, u64) {
    for attempt in 0..5 {
        let dir = backup_under_load(c, &format!("bk_nowal{attempt}"), &["-X", "none"]);
        if let Some((rel, block)) = changed_page(&dir, rels) {
            return (dir, rel, block);
        }
        eprintln!(
            "-X none backup {attempt}: no page of {rels:?} has a pd_lsn past the start; taking it again"
        );
    }
    panic!("five -X none backups under load: none copied a page pgbench changed after the start");
}

/// The first page of `rels` in the backup copy `dir` whose `pd_lsn` is past the backup's
/// start: one changed while the copy was made.
fn changed_page(dir: &Path, rels: &[String]) -> Option<(String, u64)> {
    let start = label_start_lsn(dir);
    rels.iter().find_map(|rel| {
        let path = dir.join(rel);
        let blocks = std::fs::metadata(&path).map_or(0, |m| m.len()) / BLCKSZ;
        (0..blocks)
            .find(|&b| page_lsn(&path, b) > start)
            .map(|b| (rel.clone(), b))
    })
}

/// `START WAL LOCATION` of a backup's `backup_label`, as a 64-bit LSN.
fn label_start_lsn(dir: &Path) -> u64 {
    let label = std::fs::read_to_string(dir.join("backup_label")).expect("backup_label");
    let text = label
        .lines()
        .find_map(|l| l.strip_prefix("START WAL LOCATION: "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no START WAL LOCATION in backup_label:\n{label}"));
    let (hi, lo) = text.split_once('/').expect("an LSN hi/lo");
    let hi = u64::from_str_radix(hi, 16).expect("LSN hi");
    let lo = u64::from_str_radix(lo, 16).expect("LSN lo");
    (hi << 32) | lo
}

/// The `pd_lsn` of block `blkno` of relation file `path`.
fn page_lsn(path: &Path, blkno: u64) -> u64 {
    let f = std::fs::File::open(path).expect("open relation file");
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, blkno * BLCKSZ)
        .expect("read pd_lsn");
    let xlogid = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
    let xrecoff = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as u64;
    (xlogid << 32) | xrecoff
}

pgcheckdb_testkit::version_tests! {
    clean_under_load;
    backups_under_load_pg14(14),
    backups_under_load_pg15(15),
    backups_under_load_pg16(16),
    backups_under_load_pg17(17),
    backups_under_load_pg18(18),
    backups_under_load_pg19(19),
}

/// A running cluster is refused, naming `--online`; once crashed (no backup_label), it is
/// checked as crash recovery will find it (tests/crash.rs has the rest).
#[test]
fn running_clusters_are_refused_naming_online_crashed_ones_checked() {
    let mut c = Cluster::init_temp(&ClusterOptions::new(16, true)).expect("initdb");
    c.start().expect("start");
    let run = common::verify_as(c.datadir(), 1, c.user());
    assert_status(&run, 1, "running cluster");
    assert!(run.stderr.contains("--online"), "{run}");
    assert!(run.stderr.contains("is running"), "{run}");
    c.stop_immediate().expect("crash");
    let run = common::verify_as(c.datadir(), 1, c.user());
    assert_status(&run, 0, "crashed cluster");
    assert_eq!(
        run.summary()["crash_recovery"]["rule"],
        "wal_block_set",
        "{run}"
    );
}
