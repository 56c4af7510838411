//! The extended level finds B-tree damage that is only visible between pages. On a real,
//! churned cluster of every supported version (deleted rows, VACUUM with page deletion,
//! non-HOT updates leaving dead duplicates in the primary key, posting lists), verify
//! `--level extended` must first report nothing; then one class of damage is injected into
//! each of several identical three-level indexes (checksum recomputed), and each must be found
//! at the right relation and block with the other page named. The same damaged cluster is
//! checked with a small `--memory` (the facts spill to disk) with identical findings, and with
//! `pg_amcheck --heapallindexed --parent-check` (`--checkunique` on 17+), whose results are
//! printed for docs/CHECKS.md.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::btree::{flags as bf, BtPageOpaque, P_NONE};
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::amcheck::yes_no;
use pgcheckdb_testkit::asserts::{assert_healthy_extended, assert_message_names, assert_spilled};
use pgcheckdb_testkit::bytes::{put_u16, put_u32};
use pgcheckdb_testkit::loaded::{self, relation_path};
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::run::{self, Place, Run};
use pgcheckdb_testkit::{amcheck, require_binaries, Cluster, BLCKSZ};

use common::btree::{meta, pages, Page};
use common::{bin, edit, verify_extended, verify_spilled};

pgcheckdb_testkit::version_tests! {
    scenario;
    extended_pg14_checksums(14, true),
    extended_pg15_no_checksums(15, false),
    extended_pg16_checksums(16, true),
    extended_pg17_no_checksums(17, false),
    extended_pg18_checksums(18, true),
    extended_pg18_no_checksums(18, false),
    extended_pg19_checksums(19, true),
    extended_pg19_no_checksums(19, false),
}

/// Indexes damaged one class each, all `ON t (k)`: 300-byte keys give three levels.
const DAMAGED_INDEXES: [&str; 7] = [
    "t_k_next",
    "t_k_prev",
    "t_k_down",
    "t_k_level",
    "t_k_root",
    "t_k_half",
    "t_k_deleted",
];

fn schema_sql() -> String {
    let mut sql = String::from(
        "CREATE TABLE t (id int PRIMARY KEY, k text NOT NULL);
         INSERT INTO t SELECT g, lpad(g::text, 300, 'x') FROM generate_series(1, 6000) g;
         CREATE TABLE d (v int);
         INSERT INTO d SELECT g % 10 FROM generate_series(1, 20000) g;
         CREATE INDEX d_v ON d (v);\n",
    );
    for name in DAMAGED_INDEXES {
        sql += &format!("CREATE INDEX {name} ON t (k);\n");
    }
    // Churn: a deleted range and VACUUM (page deletion), then non-HOT updates whose dead old
    // versions stay in the unique index next to the new ones.
    sql += "DELETE FROM t WHERE id BETWEEN 2000 AND 2600;
            VACUUM t;
            UPDATE t SET k = lpad(id::text, 300, 'y') WHERE id % 7 = 0 AND id > 3000;
            DELETE FROM d WHERE v = 3;
            VACUUM d;";
    sql
}

struct Fixture {
    cluster: Cluster,
    major: u32,
}

impl Fixture {
    fn build(major: u32, checksums: bool) -> Fixture {
        let (cluster, _) = loaded_cluster(major, checksums, &schema_sql(), &[]);
        Fixture { cluster, major }
    }

    fn rel(&mut self, name: &str) -> String {
        relation_path(&mut self.cluster, name)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.cluster.datadir().join(rel)
    }
}

/// Offset of the opaque data (special space) of a B-tree page.
const SPECIAL: usize = BLCKSZ - 16;
const PREV: usize = SPECIAL;
const NEXT: usize = SPECIAL + 4;
const LEVEL: usize = SPECIAL + 8;
const FLAGS: usize = SPECIAL + 12;

/// One injected case: where its finding must be.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    index: String,
    kind: &'static str,
    block: u64,
    /// The other page that must be named in `detail.other_block`.
    other: Option<u64>,
    /// Other findings the same damage may cause in this index (block, kind).
    also: Vec<(u64, &'static str)>,
}

/// A leaf page with a right sibling that has a right sibling, all live.
fn leaf_chain(ps: &[Page]) -> (Page, Page, Page) {
    let by = |b: u32| ps.iter().find(|p| p.blkno == b as u64).cloned();
    for a in ps.iter().filter(|p| p.opaque.is_leaf() && p.live()) {
        if a.opaque.btpo_prev == P_NONE || a.opaque.btpo_next == P_NONE {
            continue;
        }
        let Some(b) = by(a.opaque.btpo_next) else {
            continue;
        };
        if b.opaque.btpo_next == P_NONE || !b.live() {
            continue;
        }
        let Some(c) = by(b.opaque.btpo_next) else {
            continue;
        };
        if c.live() && c.opaque.btpo_next != P_NONE {
            return (a.clone(), b, c);
        }
    }
    panic!("no chain of three live leaf pages");
}

/// A level-1 internal page that is neither leftmost nor rightmost, with 4+ downlinks.
fn internal(ps: &[Page]) -> Page {
    ps.iter()
        .find(|p| {
            p.opaque.btpo_level == 1
                && p.opaque.btpo_prev != P_NONE
                && p.opaque.btpo_next != P_NONE
                && p.items().len() >= 5
        })
        .cloned()
        .expect("a middle page of level 1 (the index must have three levels)")
}

fn inject(fx: &mut Fixture) -> Vec<Case> {
    let mut cases = Vec::new();

    // btpo_next of A skips its right sibling B.
    let rel = fx.rel("t_k_next");
    let path = fx.path(&rel);
    let (a, _b, c) = leaf_chain(&pages(&path));
    edit(&path, a.blkno, |p| put_u32(p, NEXT, c.blkno as u32));
    cases.push(Case {
        name: "wrong btpo_next",
        index: "t_k_next".into(),
        kind: "btree_link_invalid",
        block: a.blkno,
        other: Some(c.blkno),
        also: vec![],
    });

    // btpo_prev of B names C (its right sibling) instead of A.
    let rel = fx.rel("t_k_prev");
    let path = fx.path(&rel);
    let (a, b, c) = leaf_chain(&pages(&path));
    edit(&path, b.blkno, |p| put_u32(p, PREV, c.blkno as u32));
    cases.push(Case {
        name: "wrong btpo_prev",
        index: "t_k_prev".into(),
        kind: "btree_link_invalid",
        block: b.blkno,
        other: Some(a.blkno),
        also: vec![],
    });

    // A pivot's downlink rewritten to the next pivot's child: that child has two downlinks,
    // the original child none.
    let rel = fx.rel("t_k_down");
    let path = fx.path(&rel);
    let p = internal(&pages(&path));
    let at = p.first_data() + 1;
    let (original, wrong) = (p.downlink(at), p.downlink(at + 1));
    let (off, _) = p.items()[at - 1];
    edit(&path, p.blkno, |pg| {
        put_u16(pg, off, (wrong >> 16) as u16);
        put_u16(pg, off + 2, wrong as u16);
    });
    cases.push(Case {
        name: "downlink to the wrong child (duplicate + missing downlink)",
        index: "t_k_down".into(),
        kind: "btree_downlink_invalid",
        block: p.blkno,
        other: Some(wrong as u64),
        also: vec![(original as u64, "btree_downlink_invalid")],
    });

    // An internal page of level 1 says level 2.
    let rel = fx.rel("t_k_level");
    let path = fx.path(&rel);
    let p = internal(&pages(&path));
    edit(&path, p.blkno, |pg| put_u32(pg, LEVEL, 2));
    cases.push(Case {
        name: "wrong level",
        index: "t_k_level".into(),
        kind: "btree_level_invalid",
        block: p.blkno,
        other: None,
        also: vec![],
    });

    // The metapage's root points at a level-1 page.
    let rel = fx.rel("t_k_root");
    let path = fx.path(&rel);
    let m = meta(&path);
    let p = internal(&pages(&path));
    edit(&path, 0, |pg| put_u32(pg, 24 + 8, p.blkno as u32));
    cases.push(Case {
        name: "metapage root is not the root",
        index: "t_k_root".into(),
        kind: "btree_link_invalid",
        block: 0,
        other: Some(p.blkno),
        also: vec![
            (0, "btree_level_invalid"),
            (m.btm_root as u64, "btree_link_invalid"),
        ],
    });

    // A leaf that still has its downlink marked half-dead as its own top parent.
    let rel = fx.rel("t_k_half");
    let path = fx.path(&rel);
    let (a, _, _) = leaf_chain(&pages(&path));
    let (hikey, _) = a.items()[0];
    edit(&path, a.blkno, |pg| {
        put_u16(pg, FLAGS, bf::BTP_LEAF | bf::BTP_HALF_DEAD);
        put_u16(pg, hikey, 0xFFFF);
        put_u16(pg, hikey + 2, 0xFFFF);
    });
    cases.push(Case {
        name: "half-dead page that still has a downlink",
        index: "t_k_half".into(),
        kind: "btree_downlink_invalid",
        block: a.blkno,
        other: None,
        also: vec![],
    });

    // A linked leaf flagged deleted.
    let rel = fx.rel("t_k_deleted");
    let path = fx.path(&rel);
    let (_, b, _) = leaf_chain(&pages(&path));
    edit(&path, b.blkno, |pg| {
        put_u16(pg, FLAGS, bf::BTP_LEAF | bf::BTP_DELETED)
    });
    cases.push(Case {
        name: "deleted page still linked",
        index: "t_k_deleted".into(),
        kind: "btree_link_invalid",
        block: b.blkno,
        other: None,
        also: vec![],
    });

    cases.push(inject_duplicate(fx));
    cases
}

/// In the primary key, the key of one entry is overwritten with its left neighbour's (both
/// rows untouched by the churn, so both live).
fn inject_duplicate(fx: &mut Fixture) -> Case {
    let rel = fx.rel("t_pkey");
    let path = fx.path(&rel);
    for pg in pages(&path)
        .iter()
        .filter(|p| p.opaque.is_leaf() && p.live())
    {
        let items = pg.items();
        for i in pg.first_data()..items.len() {
            let (o1, l1) = items[i - 1];
            let (o2, l2) = items[i];
            let t_info = |o: usize| u16::from_le_bytes([pg.bytes[o + 6], pg.bytes[o + 7]]);
            if l1 != 16 || l2 != 16 || t_info(o1) & 0xE000 != 0 || t_info(o2) & 0xE000 != 0 {
                continue;
            }
            let key = |o: usize| i32::from_le_bytes(pg.bytes[o + 8..o + 12].try_into().unwrap());
            let (k1, k2) = (key(o1), key(o2));
            if k2 != k1 + 1 || k1 % 7 == 0 || k2 % 7 == 0 || !(10..1900).contains(&k1) {
                continue;
            }
            edit(&path, pg.blkno, |p| {
                p[o2 + 8..o2 + 12].copy_from_slice(&k1.to_le_bytes());
            });
            return Case {
                name: "duplicate key of two live rows in a unique index",
                index: "t_pkey".into(),
                kind: "btree_unique_violation",
                block: pg.blkno,
                other: Some(pg.blkno),
                also: vec![],
            };
        }
    }
    panic!("no pair of adjacent plain entries in t_pkey");
}

/// The extended findings (kinds `btree_*` of this level) as (file, block, kind).
fn extended_findings(run: &Run) -> BTreeSet<Place> {
    run.places_of(&[
        "btree_link_invalid",
        "btree_downlink_invalid",
        "btree_level_invalid",
        "btree_order_invalid",
        "btree_unique_violation",
    ])
}

fn scenario(major: u32, checksums: bool) {
    let mut fx = Fixture::build(major, checksums);
    let datadir = fx.cluster.datadir().to_path_buf();

    // Healthy and churned: nothing to report, and the level really ran.
    let clean = verify_extended(&datadir, &[]);
    let minimums = [
        ("indexes_checked", 9),
        ("unique_indexes_checked", 1),
        ("facts", 1001),
    ];
    assert_healthy_extended(&clean, major, &minimums);
    assert_eq!(clean.summary()["level"], "extended", "{clean}");
    assert!(
        !clean.stderr.contains("not implemented"),
        "{}",
        clean.stderr
    );

    let cases = inject(&mut fx);
    let run = verify_extended(&datadir, &[]);
    assert_eq!(run.status, 2, "PostgreSQL {major}: damaged cluster\n{run}");
    let found = extended_findings(&run);
    let mut allowed = BTreeSet::new();
    for c in &cases {
        let rel = fx.rel(&c.index);
        let f = run.find_at(c.kind, &rel, c.block).unwrap_or_else(|| {
                panic!(
                    "PostgreSQL {major}: \"{}\" not found: expected {} at {rel} block {}\nextended findings: {found:#?}",
                    c.name, c.kind, c.block
                )
            });
        assert_eq!(f["relation"]["name"], format!("public.{}", c.index), "{f}");
        assert_eq!(f["database"]["name"], "postgres", "{f}");
        if let Some(other) = c.other {
            assert_eq!(f["detail"]["other_block"], other, "{}: {f}", c.name);
            if other != c.block {
                assert_message_names(f, other);
            }
        }
        allowed.insert((rel.clone(), c.block, c.kind.to_string()));
        for (b, k) in &c.also {
            allowed.insert((rel.clone(), *b, k.to_string()));
        }
    }
    let extra: Vec<_> = found.difference(&allowed).collect();
    assert!(
        extra.is_empty(),
        "PostgreSQL {major}: unexpected extended findings {extra:#?}\n{run}"
    );
    // No error outside the extended level's kinds: the injections are invisible page by page.
    // Heap -> index also sees three of them: the duplicated primary key leaves its row without
    // its own entry, and the entries of a leaf flagged half-dead or deleted are skipped by
    // every index scan, so their rows lack entries.
    let lacking_allowed =
        ["t_pkey", "t_k_half", "t_k_deleted"].map(|i| format!("postgres: public.{i}"));
    for f in run.problems() {
        if f["kind"] == "index_entry_missing"
            && lacking_allowed
                .iter()
                .any(|i| f["detail"]["index"] == i.as_str())
        {
            continue;
        }
        assert!(
            f["kind"].as_str().unwrap_or("").starts_with("btree_")
                && f["kind"] != "btree_page_invalid"
                && f["kind"] != "btree_item_invalid",
            "PostgreSQL {major}: page-level finding from a cross-page injection: {f}"
        );
    }

    // The same findings when the facts spill to disk; the spill files are removed.
    let (small, temp) = verify_spilled(&datadir, "256k");
    assert_eq!(small.status, 2, "{small}");
    assert_eq!(
        extended_findings(&small),
        found,
        "PostgreSQL {major}: findings differ with spills"
    );
    let left: Vec<_> = std::fs::read_dir(temp.path()).expect("read temp").collect();
    assert!(left.is_empty(), "spill files left behind: {left:?}");

    // A spill directory inside the data directory is refused.
    let inside = datadir.join("pg_stat").display().to_string();
    let refused = verify_extended(&datadir, &["--temp-dir", &inside]);
    assert_eq!(refused.status, 1, "{refused}");
    assert!(
        refused.stderr.contains("inside the data directory"),
        "{refused}"
    );

    let hits = amcheck_hits(&mut fx, &cases);
    let heading =
        format!("PostgreSQL {major} (checksums {checksums}): case | pgcheckdb | pg_amcheck");
    let rows = cases.iter().map(|c| {
        (
            c.name,
            format!("yes ({})", c.kind),
            yes_no(hits.contains(c.name)),
        )
    });
    amcheck::print_table(&heading, 58, rows);
}

/// Runs `pg_amcheck --heapallindexed --parent-check` (and `--checkunique` on 17+) on a started
/// copy; returns the cases whose index it reported.
fn amcheck_hits(fx: &mut Fixture, cases: &[Case]) -> BTreeSet<&'static str> {
    let mut args = amcheck::HEAPALLINDEXED.to_vec();
    args.push("--no-dependent-toast");
    args.extend(amcheck::checkunique(fx.major));
    let text = amcheck::on_stopped(&mut fx.cluster, &args);
    cases
        .iter()
        .filter(|c| amcheck::names(&text, &c.index))
        .map(|c| c.name)
        .collect()
}

/// The B-tree merge streams: with a small `--memory`, the peak memory of a run on a table
/// with a text index of about 250 MB stays within a bound that does not grow with the index
/// (the whole-index merge held every page's keys, about 60 MB here), and its findings (one
/// injected wrong sibling link) are the same as with 1 GiB, where nothing spills.
#[test]
fn extended_memory_does_not_grow_with_the_index_pg17() {
    require_binaries(17);
    let opts = loaded::options(17, true).setting("maintenance_work_mem", "256MB");
    let mut cluster = loaded::started_with(&opts);
    // 352-byte keys (below the size at which index keys are compressed): ~20 per leaf page.
    let sql = "CREATE TABLE w (id int, s text COLLATE \"C\");
               INSERT INTO w SELECT g, repeat(md5(g::text), 11) FROM generate_series(1, 650000) g;
               CREATE INDEX w_s ON w (s);";
    let rel = loaded::load_and_stop(&mut cluster, sql, &["w_s"]).remove(0);
    let datadir = cluster.datadir().to_path_buf();
    let path = datadir.join(&rel);
    let index_bytes = std::fs::metadata(&path).expect("index file").len();
    assert!(index_bytes > 200 << 20, "index of {index_bytes} bytes");
    let (a, c) = two_leaves_apart(&path);
    edit(&path, a, |p| put_u32(p, NEXT, c));

    // The child's peak counts this process's own peak (its memory is the child's until the
    // child execs), so it must stay small for the measurement to mean anything.
    let own_kb = own_peak_kb();
    assert!(
        own_kb < 20 << 10,
        "the test process itself peaked at {own_kb} kB"
    );
    let temp = tempfile::tempdir().expect("temp dir");
    let (small, small_rss) = verify_measured(&datadir, "16MB", temp.path());
    let (large, large_rss) = verify_measured(&datadir, "1G", temp.path());
    eprintln!(
        "index {} MB: peak RSS {} MB with --memory 16MB, {} MB with --memory 1G",
        index_bytes >> 20,
        small_rss >> 10,
        large_rss >> 10
    );
    for run in [&small, &large] {
        assert_eq!(run.status, 2, "{run}");
    }
    assert_spilled(&small);
    let found = extended_findings(&small);
    assert!(
        found.contains(&(rel.clone(), a, "btree_link_invalid".to_string())),
        "{found:?}"
    );
    assert_eq!(
        found,
        extended_findings(&large),
        "findings differ with spills"
    );
    // The budget (16 MB) plus what a run needs besides the facts (buffers, catalog, code).
    let bound_kb = 40 << 10;
    assert!(
        small_rss < bound_kb,
        "peak RSS {small_rss} kB with --memory 16MB on a {} MB index (bound {bound_kb} kB)",
        index_bytes >> 20
    );
}

/// A live leaf A with live right siblings B and C (C not rightmost), read a page at a time
/// (the whole index is not loaded): (A, C).
fn two_leaves_apart(path: &Path) -> (u64, u32) {
    let len = std::fs::metadata(path).expect("index file").len();
    let at = |b: u64| -> Option<BtPageOpaque> {
        let bytes = corrupt::read_block(path, b, BLCKSZ).ok()?;
        let h = PageHeader::parse(&bytes)?;
        let o = BtPageOpaque::parse(&bytes, h.pd_special as usize)?;
        let live = o.btpo_flags & (bf::BTP_DELETED | bf::BTP_HALF_DEAD) == 0;
        (live && o.is_leaf() && o.btpo_next != P_NONE).then_some(o)
    };
    for a in 1..len / BLCKSZ as u64 {
        let Some(oa) = at(a).filter(|o| o.btpo_prev != P_NONE) else {
            continue;
        };
        let Some(ob) = at(oa.btpo_next as u64) else {
            continue;
        };
        if at(ob.btpo_next as u64).is_some() {
            return (a, ob.btpo_next);
        }
    }
    panic!("no chain of three live leaf pages");
}

/// This process's peak resident set size in kB (`VmHWM`).
fn own_peak_kb() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// `verify --level extended` of the index `w_s` with `--memory memory`, and the child's
/// peak resident set size in kB (from `wait4`, which also reaps it: `Child::wait` could not
/// give the resource usage).
#[allow(clippy::zombie_processes)]
fn verify_measured(datadir: &Path, memory: &str, temp: &Path) -> (Run, i64) {
    use std::os::unix::process::ExitStatusExt;
    let out = tempfile::NamedTempFile::new().expect("stdout file");
    let err = tempfile::NamedTempFile::new().expect("stderr file");
    let child = std::process::Command::new(bin())
        .args(["verify", "-D"])
        .arg(datadir)
        .args(["--level", "extended", "--format", "json", "--no-progress"])
        .args(["-j", "2", "-d", "postgres", "-i", "w_s", "--memory", memory])
        .arg("--temp-dir")
        .arg(temp)
        .env_remove("PGDATA")
        .stdout(out.reopen().expect("stdout"))
        .stderr(err.reopen().expect("stderr"))
        .spawn()
        .expect("run pgcheckdb");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let output = std::process::Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: std::fs::read(out.path()).expect("read stdout"),
        stderr: std::fs::read(err.path()).expect("read stderr"),
    };
    (run::parse_lenient(output), usage.ru_maxrss)
}
