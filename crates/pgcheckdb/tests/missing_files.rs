//! Relation files that the catalog promises but the data directory lacks, on real clusters of
//! every supported version: the main file of a table, of an index of every access method, of a
//! TOAST table, a sequence, a materialized view, a table in a tablespace and a table of a second
//! database, the `_init` fork of an unlogged table and the first segment of a relation whose
//! second segment exists are each a `missing_file` error naming the relation; `pg_amcheck`
//! fails on the same files. A healthy cluster has none. The files of a prepared transaction
//! (a table, and one created in a subtransaction) are named as such, not as crash leftovers.
//! The zero bucket pages a hash index allocates ahead of use are no `interior_zero_pages`,
//! while a zeroed heap block still is. A database without its directory is one finding.

mod common;

use std::collections::BTreeSet;
use std::fs;

use pgcheckdb_testkit::asserts::assert_status;
use pgcheckdb_testkit::{standard_cluster, StandardCluster, BLCKSZ};
use serde_json::Value;

use common::verify;

pgcheckdb_testkit::version_tests! {
    scenario;
    missing_files_pg14(14, true),
    missing_files_pg15(15, false),
    missing_files_pg16(16, true),
    missing_files_pg17(17, false),
    missing_files_pg18(18, true),
    missing_files_pg19(19, false),
}

const GID: &str = "px-missing";

const GROWN_HASH_SQL: &str = "
CREATE TABLE grown (id int);
CREATE INDEX grown_hash ON grown USING hash (id);
INSERT INTO grown SELECT generate_series(1, 30000);
";

/// A relation whose file is removed, and what the finding must say.
struct Removed {
    db: &'static str,
    relation: &'static str,
    /// `main` or `init`.
    fork: &'static str,
    kind: &'static str,
    /// Expected name; `None`: a TOAST table (`pg_toast.pg_toast_<oid>`).
    name: Option<&'static str>,
}

const fn removed(relation: &'static str, kind: &'static str, name: &'static str) -> Removed {
    Removed {
        db: "postgres",
        relation,
        fork: "main",
        kind,
        name: Some(name),
    }
}

const REMOVED: [Removed; 13] = [
    removed("accounts", "table", "public.accounts"),
    removed("accounts_pkey", "index", "public.accounts_pkey"),
    removed("accounts_hash", "index", "public.accounts_hash"),
    removed("accounts_brin", "index", "public.accounts_brin"),
    removed("vacuumed_gin", "index", "public.vacuumed_gin"),
    removed("shapes_gist", "index", "public.shapes_gist"),
    removed("shapes_spgist", "index", "public.shapes_spgist"),
    Removed {
        db: "postgres",
        relation: "docs_toast",
        fork: "main",
        kind: "toast_table",
        name: None,
    },
    removed("seq_ids", "sequence", "public.seq_ids"),
    removed("mv_totals", "materialized_view", "public.mv_totals"),
    removed("in_space", "table", "public.in_space"),
    Removed {
        db: "postgres",
        relation: "unlogged_t",
        fork: "init",
        kind: "table",
        name: Some("public.unlogged_t"),
    },
    Removed {
        db: "second",
        relation: "other",
        fork: "main",
        kind: "table",
        name: Some("public.other"),
    },
];

fn grown_hash_file(sc: &mut StandardCluster) -> String {
    sc.cluster.start().expect("start");
    let file = sc
        .cluster
        .relation_filepath("postgres", "grown_hash")
        .expect("grown_hash file");
    sc.cluster.stop().expect("stop");
    file
}

/// `small` loses segment 0 but keeps its data as segment 1.
const MOVED: &str = "small";
/// `trunc_me` gets a zeroed block inside it.
const ZEROED: (&str, u64) = ("trunc_me", 3);

fn scenario(major: u32, checksums: bool) {
    let mut sc = standard_cluster(major, checksums);
    let prepared = prepare_transaction(&mut sc);
    let hash_rel = grown_hash_file(&mut sc);
    healthy(&sc, &prepared, &hash_rel);
    damage(&sc);
    let run = verify(sc.datadir(), 2);
    assert_status(&run, 2, "cluster with missing files");
    let (reported, names) = check_missing(&sc, &run);
    let zeroed = sc.rel("postgres", ZEROED.0);
    assert!(
        run.findings
            .iter()
            .any(|f| f["kind"] == "interior_zero_pages"
                && f["file"] == zeroed
                && f["block"] == ZEROED.1),
        "no interior_zero_pages for the zeroed heap block\n{run}"
    );
    amcheck_cross_check(&mut sc, &reported, &names);
    missing_database_directory(&sc);
}

/// Without its directory, database `second` is one `missing_file` for the directory.
fn missing_database_directory(sc: &StandardCluster) {
    let other = sc.rel("second", "other");
    let (dir, _) = other.rsplit_once('/').expect("directory of second");
    fs::remove_dir_all(sc.datadir().join(dir)).expect("remove the directory of second");
    let run = verify(sc.datadir(), 2);
    assert_status(&run, 2, "cluster without the directory of a database");
    let in_second: Vec<&Value> = of_kind(&run, "missing_file")
        .into_iter()
        .filter(|f| f["database"]["name"] == "second")
        .collect();
    assert_eq!(in_second.len(), 1, "{in_second:#?}\n{run}");
    let f = in_second[0];
    assert_eq!(f["file"], dir, "{f}");
    assert_eq!(f["severity"], "error", "{f}");
    assert_eq!(f["detail"]["directory"], true, "{f}");
}

/// Enables prepared transactions, prepares one that creates `prep_t` and (in a subtransaction)
/// `prep_sub`, and shuts down cleanly. Returns the two files.
fn prepare_transaction(sc: &mut StandardCluster) -> [String; 2] {
    let c = &mut sc.cluster;
    c.start().expect("start");
    c.psql(
        "postgres",
        "ALTER SYSTEM SET max_prepared_transactions = 4;",
    )
    .expect("enable prepared transactions");
    c.stop().expect("stop");
    c.start().expect("restart");
    // A hash index that grows by bucket splits (one built on a full table is sized up front).
    c.psql("postgres", GROWN_HASH_SQL)
        .expect("grow a hash index");
    let out = c
        .psql(
            "postgres",
            &format!(
                "BEGIN;
                 CREATE TABLE prep_t (id int, v text);
                 INSERT INTO prep_t SELECT g, md5(g::text) FROM generate_series(1, 500) g;
                 SAVEPOINT s1;
                 CREATE TABLE prep_sub (id int);
                 INSERT INTO prep_sub SELECT generate_series(1, 300);
                 RELEASE SAVEPOINT s1;
                 \\t on
                 \\a
                 SELECT 'PATH ' || pg_relation_filepath('prep_t');
                 SELECT 'PATH ' || pg_relation_filepath('prep_sub');
                 PREPARE TRANSACTION '{GID}';"
            ),
        )
        .expect("prepare transaction");
    c.stop().expect("stop with a prepared transaction");
    let paths: Vec<String> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("PATH "))
        .map(str::to_string)
        .collect();
    let [t, sub] = paths.as_slice() else {
        panic!("expected two file paths from psql, got {out:?}");
    };
    [t.clone(), sub.clone()]
}

fn healthy(sc: &StandardCluster, prepared: &[String; 2], hash_rel: &str) {
    let run = verify(sc.datadir(), 2);
    assert_status(&run, 0, "healthy cluster with a prepared transaction");
    let missing: Vec<&Value> = of_kind(&run, "missing_file");
    assert!(missing.is_empty(), "healthy cluster: {missing:#?}\n{run}");
    for (file, name) in prepared.iter().zip(["public.prep_t", "public.prep_sub"]) {
        let f = run
            .findings
            .iter()
            .find(|f| f["file"] == file.as_str())
            .unwrap_or_else(|| panic!("no finding for {file} of the prepared transaction\n{run}"));
        assert_eq!(f["kind"], "orphan_file", "{f}");
        assert_eq!(f["severity"], "info", "{f}");
        assert_eq!(f["relation"]["name"], name, "{f}");
        assert_eq!(f["detail"]["reason"], "prepared_transaction", "{f}");
        assert_eq!(f["detail"]["gid"], GID, "{f}");
        let message = f["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("prepared transaction") && message.contains(GID),
            "{f}"
        );
        assert!(!message.contains("crash"), "{f}");
    }
    // The hash index has zero bucket pages before its last used page, and they are not reported.
    let hash = sc.datadir().join(hash_rel);
    let bytes = fs::read(&hash).expect("read hash index");
    let pages: Vec<&[u8]> = bytes.chunks_exact(BLCKSZ).collect();
    let last_used = pages.iter().rposition(|p| p.iter().any(|&b| b != 0));
    let interior_zero = pages
        .iter()
        .take(last_used.unwrap_or(0))
        .filter(|p| p.iter().all(|&b| b == 0))
        .count();
    assert!(
        interior_zero > 0,
        "precondition: the hash index has no zero pages before its last used page"
    );
    let zero = of_kind(&run, "interior_zero_pages");
    assert!(
        zero.iter().all(|f| f["file"] != hash_rel),
        "hash index bucket pages reported: {zero:#?}"
    );
}

fn of_kind<'a>(run: &'a pgcheckdb_testkit::run::Run, kind: &str) -> Vec<&'a Value> {
    run.findings.iter().filter(|f| f["kind"] == kind).collect()
}

fn damage(sc: &StandardCluster) {
    for r in &REMOVED {
        let path = sc.fork_file(r.db, r.relation, r.fork, 0);
        fs::remove_file(&path).unwrap_or_else(|e| panic!("remove {}: {e}", path.display()));
    }
    let small = sc.file("postgres", MOVED);
    fs::rename(&small, sc.fork_file("postgres", MOVED, "main", 1)).expect("move small to .1");
    let zeroed = sc.file("postgres", ZEROED.0);
    let mut bytes = fs::read(&zeroed).expect("read trunc_me");
    let at = ZEROED.1 as usize * BLCKSZ;
    bytes[at..at + BLCKSZ].fill(0);
    fs::write(&zeroed, bytes).expect("zero a block of trunc_me");
}

/// Every removed file is one `missing_file` error naming its relation, and nothing else is.
/// Returns the reported files.
fn check_missing(
    sc: &StandardCluster,
    run: &pgcheckdb_testkit::run::Run,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let missing = of_kind(run, "missing_file");
    let reported: BTreeSet<String> = missing
        .iter()
        .map(|f| f["file"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut expected: BTreeSet<String> = REMOVED
        .iter()
        .map(|r| sc.fork_rel(r.db, r.relation, r.fork, 0))
        .collect();
    expected.insert(sc.rel("postgres", MOVED).to_string());
    assert_eq!(reported, expected, "missing_file findings\n{run}");
    assert_eq!(missing.len(), expected.len(), "one finding per file\n{run}");
    for r in &REMOVED {
        let file = sc.fork_rel(r.db, r.relation, r.fork, 0);
        let f = missing
            .iter()
            .find(|f| f["file"] == file.as_str())
            .expect("reported");
        assert_eq!(f["severity"], "error", "{f}");
        assert_eq!(f["fork"], r.fork, "{f}");
        assert_eq!(f["database"]["name"], r.db, "{f}");
        assert_eq!(f["relation"]["kind"], r.kind, "{f}");
        let name = f["relation"]["name"].as_str().unwrap_or_default();
        match r.name {
            Some(n) => assert_eq!(name, n, "{f}"),
            None => assert!(name.starts_with("pg_toast.pg_toast_"), "{f}"),
        }
        assert!(
            f["message"].as_str().unwrap_or_default().contains(name),
            "{f}"
        );
    }
    let moved = missing
        .iter()
        .find(|f| f["file"] == sc.rel("postgres", MOVED))
        .expect("reported");
    assert_eq!(moved["relation"]["name"], "public.small", "{moved}");
    assert_eq!(
        moved["detail"]["later_segments"],
        serde_json::json!([1]),
        "{moved}"
    );
    let names = missing
        .iter()
        .filter_map(|f| f["relation"]["name"].as_str().map(str::to_string))
        .collect();
    (reported, names)
}

/// `pg_amcheck` on the damaged cluster: every file it cannot open is one pgcheckdb reported,
/// every index it finds without a main fork one pgcheckdb named, and it fails on the removed
/// table and B-tree index.
fn amcheck_cross_check(
    sc: &mut StandardCluster,
    reported: &BTreeSet<String>,
    names: &BTreeSet<String>,
) {
    sc.cluster.start().expect("start damaged cluster");
    sc.cluster
        .psql(
            "postgres",
            &format!("ROLLBACK PREPARED '{GID}'; CREATE EXTENSION IF NOT EXISTS amcheck;"),
        )
        .expect("rollback prepared, create amcheck");
    let sock = sc.cluster.work_dir().join("sock").display().to_string();
    let out = sc
        .cluster
        .command("pg_amcheck")
        .args(["-h", sock.as_str(), "-U", "postgres", "--all"])
        .output()
        .expect("run pg_amcheck");
    sc.cluster.stop().expect("stop");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let unopened: BTreeSet<String> = text
        .split("could not open file \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect();
    // `index "accounts_pkey" lacks a main relation fork`, under `btree index "postgres.public.accounts_pkey":`.
    let lines: Vec<&str> = text.lines().collect();
    let no_fork: BTreeSet<String> = lines
        .windows(2)
        .filter(|w| w[1].contains("lacks a main relation fork"))
        .filter_map(|w| w[0].split('"').nth(1))
        .filter_map(|q| q.split_once('.').map(|(_, rel)| rel.to_string()))
        .collect();
    let accounts = sc.rel("postgres", "accounts");
    assert!(
        unopened.contains(accounts),
        "pg_amcheck did not fail on accounts ({accounts}):\n{text}"
    );
    assert!(
        no_fork.contains("public.accounts_pkey"),
        "pg_amcheck did not fail on accounts_pkey:\n{text}"
    );
    for rel in &no_fork {
        assert!(
            names.contains(rel),
            "pg_amcheck found no main fork for {rel}, pgcheckdb did not report it:\n{text}"
        );
    }
    for file in &unopened {
        assert!(
            reported.contains(file),
            "pg_amcheck could not open {file}, pgcheckdb did not report it:\n{text}"
        );
    }
    eprintln!("pg_amcheck could not open {unopened:?}, found no main fork of {no_fork:?}");
}
