//! The extended level compares every table's visibility map with its heap pages and every
//! tuple's commit hint bits with `pg_xact`. On real clusters of every supported version (with
//! and without data checksums) whose maps were set by `VACUUM` and `VACUUM (FREEZE)`, verify
//! `--level extended` must first report nothing; then one case is injected per table (checksum
//! recomputed after each edit) and each must be found at the right relation, block and line
//! pointer, with nothing else reported (a map bit cleared on an all-visible page, the safe
//! direction, gives nothing), also when the facts spill to disk. Marked "shut down in recovery",
//! the cluster's maps are not compared while its hint bits still are. The damaged cluster is then started and checked with
//! `pg_visibility` (`pg_check_visible`, `pg_check_frozen`) and
//! `pg_amcheck --heapallindexed --parent-check`, whose results are asserted where they are
//! stable and printed for docs/CHECKS.md.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::heap::infomask as im;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::amcheck;
use pgcheckdb_testkit::asserts::{assert_healthy_extended, assert_message_names};
use pgcheckdb_testkit::bytes::{put_u16, u16_at, u32_at};
use pgcheckdb_testkit::control::set_db_state;
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::{Cluster, BLCKSZ};

use common::{edit, normal_items, verify_extended, verify_spilled};

pgcheckdb_testkit::version_tests! {
    scenario;
    vm_pg14_checksums(14, true),
    vm_pg15_no_checksums(15, false),
    vm_pg16_checksums(16, true),
    vm_pg17_no_checksums(17, false),
    vm_pg18_checksums(18, true),
    vm_pg18_no_checksums(18, false),
    vm_pg19_checksums(19, true),
    vm_pg19_no_checksums(19, false),
}

/// One table per case; `h_*` tables hold 20 small rows on one page.
const TABLES: [&str; 9] = [
    "vm_pd",
    "vm_dead",
    "vm_frozen",
    "vm_zero",
    "vm_short",
    "h_xmin_c",
    "h_xmin_i",
    "h_xmax_c",
    "h_xmax_i",
];

fn schema_sql() -> String {
    let mut sql = String::from("CREATE EXTENSION pg_visibility;\n");
    for t in &TABLES[..5] {
        sql += &format!(
            "CREATE TABLE {t} (id int, pad text);
             INSERT INTO {t} SELECT g, repeat('v', 200) FROM generate_series(1, 1000) g;\n"
        );
    }
    for t in &TABLES[5..] {
        sql += &format!(
            "CREATE TABLE {t} (id int, pad text);
             INSERT INTO {t} SELECT g, 'row ' || g FROM generate_series(1, 20) g;\n"
        );
    }
    // All-visible and all-frozen pages; all-visible pages that are not frozen (the hint bits
    // are set by the SELECT first, so VACUUM writes no full-page image for them and does not
    // freeze opportunistically on 16+).
    sql += "VACUUM (FREEZE) vm_pd, vm_dead, vm_zero, vm_short;
            SELECT count(*) FROM vm_frozen;
            VACUUM vm_frozen;
            BEGIN; INSERT INTO vm_dead VALUES (-1, 'aborted'); ROLLBACK;
            BEGIN; INSERT INTO h_xmin_c VALUES (-1, 'aborted'); ROLLBACK;
            BEGIN; DELETE FROM h_xmax_c WHERE id = 5; ROLLBACK;
            DELETE FROM h_xmax_i WHERE id = 5;
            CHECKPOINT;";
    sql
}

/// `HEAPBLOCKS_PER_PAGE` of a visibility-map page.
const HEAPBLOCKS_PER_PAGE: u64 = (BLCKSZ as u64 - 24) * 4;

/// Byte offsets in a heap tuple header.
const T_XMIN: usize = 0;
const T_INFOMASK: usize = 20;
const T_HOFF: usize = 22;

/// One normal heap tuple as the test sees it.
struct Tuple {
    offnum: u16,
    /// Where its header starts in the page.
    at: usize,
    id: i32,
    xmin: u32,
    infomask: u16,
}

fn tuples(page: &[u8]) -> Vec<Tuple> {
    normal_items(page)
        .iter()
        .map(|lp| {
            let at = lp.lp_off as usize;
            let hoff = page[at + T_HOFF] as usize;
            Tuple {
                offnum: lp.offnum,
                at,
                id: u32_at(page, at + hoff) as i32,
                xmin: u32_at(page, at + T_XMIN),
                infomask: u16_at(page, at + T_INFOMASK),
            }
        })
        .collect()
}

fn blocks(path: &Path) -> u64 {
    std::fs::metadata(path).expect("relation file").len() / BLCKSZ as u64
}

/// The visibility-map bits of heap block `blkno`.
fn vm_bits(vm: &Path, blkno: u64) -> u8 {
    let page = corrupt::read_block(vm, blkno / HEAPBLOCKS_PER_PAGE, BLCKSZ).expect("vm page");
    let slot = blkno % HEAPBLOCKS_PER_PAGE;
    (page[24 + slot as usize / 4] >> (2 * (slot % 4))) & 3
}

fn set_vm_bits(vm: &Path, blkno: u64, bits: u8) {
    let slot = blkno % HEAPBLOCKS_PER_PAGE;
    edit(vm, blkno / HEAPBLOCKS_PER_PAGE, |p| {
        let byte = &mut p[24 + slot as usize / 4];
        *byte = (*byte & !(3 << (2 * (slot % 4)))) | (bits << (2 * (slot % 4)));
    });
}

/// `PD_ALL_VISIBLE` in `pd_flags` (byte 10 of the page header).
const PD_ALL_VISIBLE: u16 = 0x0004;

fn set_pd_flags(page: &mut [u8], set: u16, clear: u16) {
    put_u16(page, 10, (u16_at(page, 10) & !clear) | set);
}

fn set_infomask(page: &mut [u8], t: &Tuple, set: u16, clear: u16) {
    put_u16(page, t.at + T_INFOMASK, (t.infomask & !clear) | set);
}

/// One injected case: where its finding must be.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    table: &'static str,
    kind: &'static str,
    block: u64,
    /// The line pointer named by the finding.
    offset: Option<u16>,
    /// `detail.reason` for a lost write, `detail.hint` for a hint bit.
    detail: Option<(&'static str, &'static str)>,
}

struct Fixture {
    cluster: Cluster,
    major: u32,
    paths: Vec<String>,
}

impl Fixture {
    fn path(&self, table: &str) -> PathBuf {
        let i = TABLES.iter().position(|t| *t == table).expect("table");
        self.cluster.datadir().join(&self.paths[i])
    }

    fn rel(&self, table: &str) -> String {
        let i = TABLES.iter().position(|t| *t == table).expect("table");
        self.paths[i].clone()
    }

    fn vm(&self, table: &str) -> PathBuf {
        let mut p = self.path(table).into_os_string();
        p.push("_vm");
        PathBuf::from(p)
    }

    /// The first block of `table` whose map bits are `bits`.
    fn block_with_bits(&self, table: &str, bits: u8) -> u64 {
        (0..blocks(&self.path(table)))
            .find(|&b| vm_bits(&self.vm(table), b) == bits)
            .unwrap_or_else(|| {
                panic!(
                    "PostgreSQL {}: no block of {table} with map bits {bits}",
                    self.major
                )
            })
    }
}

/// The tuple of `table`'s block `block` whose `id` column is `id`.
fn tuple_by_id(path: &Path, block: u64, id: i32) -> (Vec<u8>, Tuple) {
    let page = corrupt::read_block(path, block, BLCKSZ).expect("heap page");
    let t = tuples(&page)
        .into_iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| {
            panic!(
                "no tuple with id {id} in block {block} of {}",
                path.display()
            )
        });
    (page, t)
}

fn inject(fx: &Fixture) -> Vec<Case> {
    let mut cases = Vec::new();

    // PD_ALL_VISIBLE cleared on a page the map marks all-visible and all-frozen.
    let path = fx.path("vm_pd");
    assert_eq!(
        vm_bits(&fx.vm("vm_pd"), 1),
        3,
        "vm_pd block 1 after VACUUM (FREEZE)"
    );
    edit(&path, 1, |p| set_pd_flags(p, 0, PD_ALL_VISIBLE));
    cases.push(Case {
        name: "PD_ALL_VISIBLE clear under a set map bit",
        table: "vm_pd",
        kind: "visibility_map_wrong",
        block: 1,
        offset: None,
        detail: None,
    });

    // The safe direction: a map bit cleared on an all-visible page (PD_ALL_VISIBLE stays set)
    // is no finding.
    assert_eq!(vm_bits(&fx.vm("vm_pd"), 3), 3);
    set_vm_bits(&fx.vm("vm_pd"), 3, 0);

    // The aborted insert's page marked all-visible and all-frozen again (map and page flag).
    let path = fx.path("vm_dead");
    let block = (0..blocks(&path))
        .find(|&b| {
            let page = corrupt::read_block(&path, b, BLCKSZ).expect("heap page");
            tuples(&page).iter().any(|t| t.id == -1)
        })
        .expect("the aborted tuple");
    let (_, aborted) = tuple_by_id(&path, block, -1);
    assert_eq!(
        vm_bits(&fx.vm("vm_dead"), block),
        0,
        "insert cleared the map bits"
    );
    edit(&path, block, |p| set_pd_flags(p, PD_ALL_VISIBLE, 0));
    set_vm_bits(&fx.vm("vm_dead"), block, 3);
    cases.push(Case {
        name: "all-visible page with an aborted tuple",
        table: "vm_dead",
        kind: "visibility_map_wrong",
        block,
        offset: Some(aborted.offnum),
        detail: None,
    });

    // An all-visible page whose tuples are not frozen marked all-frozen.
    let block = fx.block_with_bits("vm_frozen", 1);
    let page = corrupt::read_block(&fx.path("vm_frozen"), block, BLCKSZ).expect("heap page");
    let first = &tuples(&page)[0];
    assert_eq!(
        first.infomask & (im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID),
        im::HEAP_XMIN_COMMITTED,
        "vm_frozen's tuples must be committed, not frozen"
    );
    set_vm_bits(&fx.vm("vm_frozen"), block, 3);
    cases.push(Case {
        name: "all-frozen page with unfrozen tuples",
        table: "vm_frozen",
        kind: "visibility_map_wrong",
        block,
        offset: Some(first.offnum),
        detail: None,
    });

    // Lost writes: an all-zero heap page, and the table's last page gone, both still marked.
    let path = fx.path("vm_zero");
    assert_eq!(vm_bits(&fx.vm("vm_zero"), 2), 3);
    corrupt::write_block(&path, 2, &vec![0u8; BLCKSZ]).expect("zero block");
    cases.push(Case {
        name: "all-zero heap page marked all-visible (lost write)",
        table: "vm_zero",
        kind: "lost_write",
        block: 2,
        offset: None,
        detail: Some(("reason", "all_zero")),
    });
    let path = fx.path("vm_short");
    let last = blocks(&path) - 1;
    assert_eq!(vm_bits(&fx.vm("vm_short"), last), 3);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open vm_short");
    file.set_len(last * BLCKSZ as u64).expect("truncate");
    cases.push(Case {
        name: "heap page past the end marked all-visible (lost write)",
        table: "vm_short",
        kind: "lost_write",
        block: last,
        offset: None,
        detail: Some(("reason", "beyond_end")),
    });

    // Hint bits against pg_xact.
    let hint_cases: [(&str, &str, i32, u16, u16, &str); 4] = [
        (
            "HEAP_XMIN_COMMITTED on an aborted insert",
            "h_xmin_c",
            -1,
            im::HEAP_XMIN_COMMITTED,
            im::HEAP_XMIN_INVALID,
            "HEAP_XMIN_COMMITTED",
        ),
        (
            "HEAP_XMIN_INVALID on a committed insert",
            "h_xmin_i",
            5,
            im::HEAP_XMIN_INVALID,
            im::HEAP_XMIN_COMMITTED,
            "HEAP_XMIN_INVALID",
        ),
        (
            "HEAP_XMAX_COMMITTED on an aborted delete",
            "h_xmax_c",
            5,
            im::HEAP_XMAX_COMMITTED,
            im::HEAP_XMAX_INVALID,
            "HEAP_XMAX_COMMITTED",
        ),
        (
            "HEAP_XMAX_INVALID on a committed delete",
            "h_xmax_i",
            5,
            im::HEAP_XMAX_INVALID,
            im::HEAP_XMAX_COMMITTED,
            "HEAP_XMAX_INVALID",
        ),
    ];
    for (name, table, id, set, clear, hint) in hint_cases {
        let path = fx.path(table);
        let (_, t) = tuple_by_id(&path, 0, id);
        assert!(t.xmin >= 3, "{table}: tuple {id} has a normal xmin");
        edit(&path, 0, |p| set_infomask(p, &t, set, clear));
        cases.push(Case {
            name,
            table,
            kind: "hint_bit_invalid",
            block: 0,
            offset: Some(t.offnum),
            detail: Some(("hint", hint)),
        });
    }
    cases
}

/// The kinds of finding these injections may give.
const KINDS: [&str; 3] = ["visibility_map_wrong", "hint_bit_invalid", "lost_write"];

fn scenario(major: u32, checksums: bool) {
    let (cluster, paths) = loaded_cluster(major, checksums, &schema_sql(), &TABLES);
    let mut fx = Fixture {
        cluster,
        major,
        paths,
    };
    let datadir = fx.cluster.datadir().to_path_buf();

    // Healthy: nothing to report, and the checks really ran.
    let clean = verify_extended(&datadir, &[]);
    let minimums = [
        ("visibility_maps_checked", 5),
        ("hint_bits_tables_checked", 9),
    ];
    assert_healthy_extended(&clean, major, &minimums);

    let cases = inject(&fx);
    let run = verify_extended(&datadir, &[]);
    assert_eq!(run.status, 2, "PostgreSQL {major}: damaged cluster\n{run}");
    let mut expected = BTreeSet::new();
    for c in &cases {
        let rel = fx.rel(c.table);
        let f = run.find_at(c.kind, &rel, c.block).unwrap_or_else(|| {
            panic!(
                "PostgreSQL {major}: \"{}\" not found: expected {} at {rel} block {}\n{run}",
                c.name, c.kind, c.block
            )
        });
        assert_eq!(f["relation"]["name"], format!("public.{}", c.table), "{f}");
        assert_eq!(f["severity"], "error", "{f}");
        if let Some(off) = c.offset {
            assert_eq!(f["offset"], off, "{}: {f}", c.name);
            assert_message_names(f, off);
        }
        if let Some((key, value)) = c.detail {
            assert_eq!(f["detail"][key], value, "{}: {f}", c.name);
        }
        if c.kind == "visibility_map_wrong" {
            assert_eq!(
                f["detail"]["vm_block"],
                c.block / HEAPBLOCKS_PER_PAGE,
                "{f}"
            );
        }
        expected.insert((rel, c.block, c.kind.to_string()));
    }
    assert_eq!(
        run.places_of(&KINDS),
        expected,
        "PostgreSQL {major}: exactly the injected cases\n{run}"
    );
    for f in run.problems() {
        assert!(
            KINDS.iter().any(|k| f["kind"] == *k),
            "PostgreSQL {major}: another finding from these injections: {f}"
        );
    }

    // The same findings when the facts spill to disk (the merge streams them back in order).
    let (small, _temp) = verify_spilled(&datadir, "64k");
    assert_eq!(
        small.places_of(&KINDS),
        expected,
        "PostgreSQL {major}: with spills\n{small}"
    );

    cross_check(&mut fx, &cases);

    // On a standby shut down in recovery the heap and its map may stand at different points of
    // the WAL: the map is not compared (and the summary says why); the hint bits still are.
    mark_shut_down_in_recovery(&datadir);
    let standby = verify_extended(&datadir, &[]);
    let ext = standby.extended();
    assert!(
        ext["visibility_maps_not_checked"].as_str().is_some()
            && ext["visibility_maps_checked"] == 0,
        "PostgreSQL {major}: shut down in recovery: {ext}\n{standby}"
    );
    assert!(
        standby
            .findings
            .iter()
            .all(|f| f["kind"] != "visibility_map_wrong"),
        "PostgreSQL {major}: shut down in recovery\n{standby}"
    );
    let hints = standby.of_kind("hint_bit_invalid").len();
    assert_eq!(
        hints, 4,
        "PostgreSQL {major}: shut down in recovery\n{standby}"
    );
}

/// Rewrites `pg_control`'s state as "shut down in recovery" (`DB_SHUTDOWNED_IN_RECOVERY`, at
/// byte 16), with the CRC recomputed where the file has it (found as the offset whose stored
/// CRC matches the bytes before it).
fn mark_shut_down_in_recovery(datadir: &Path) {
    set_db_state(datadir, 2);
}

/// `pg_check_visible` and `pg_check_frozen` of every case's table, and pg_amcheck's output,
/// on the started damaged cluster.
fn cross_check(fx: &mut Fixture, cases: &[Case]) {
    let major = fx.major;
    fx.cluster.start().expect("start the damaged cluster");
    let tids = |f: &str, table: &str| -> Vec<String> {
        let out = fx
            .cluster
            .psql(
                "postgres",
                &format!(
                    "\\pset format unaligned\n\\pset tuples_only on\nSELECT * FROM {f}('{table}');"
                ),
            )
            .unwrap_or_else(|e| panic!("{f}('{table}'): {e}"));
        out.lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let mut report = Vec::new();
    for c in cases {
        let visible = tids("pg_check_visible", c.table);
        let frozen = tids("pg_check_frozen", c.table);
        match c.table {
            // The tuple the map wrongly covers, by both functions.
            "vm_dead" => {
                let tid = format!("({},{})", c.block, c.offset.unwrap_or(0));
                assert_eq!(visible, vec![tid.clone()], "PostgreSQL {major}: {}", c.name);
                assert_eq!(frozen, vec![tid], "PostgreSQL {major}: {}", c.name);
            }
            // Every tuple of the page, by pg_check_frozen only.
            "vm_frozen" => {
                assert!(visible.is_empty(), "PostgreSQL {major}: {visible:?}");
                assert!(!frozen.is_empty(), "PostgreSQL {major}: {}", c.name);
                let prefix = format!("({},", c.block);
                assert!(frozen.iter().all(|t| t.starts_with(&prefix)), "{frozen:?}");
            }
            // pg_visibility checks tuples only: a page flag, an empty or missing page and
            // hint bits are not its business.
            _ => assert!(
                visible.is_empty() && frozen.is_empty(),
                "PostgreSQL {major}: {}: {visible:?} {frozen:?}",
                c.name
            ),
        }
        report.push((c, !visible.is_empty() || !frozen.is_empty()));
    }
    let (amcheck_ok, text) = amcheck::heapallindexed(&fx.cluster);
    fx.cluster.stop().expect("stop");
    eprintln!("--- pg_amcheck output ---\n{text}--- end ---");
    // amcheck trusts hint bits and does not read the visibility map: none of these is its.
    assert!(
        amcheck_ok,
        "PostgreSQL {major}: pg_amcheck reported: {text}"
    );
    eprintln!("PostgreSQL {major}: case | pgcheckdb | pg_visibility | pg_amcheck");
    for (c, vis) in report {
        let amcheck = text.contains(&format!("\"postgres.public.{}\"", c.table));
        assert!(
            !amcheck,
            "PostgreSQL {major}: pg_amcheck on {}: {text}",
            c.table
        );
        eprintln!(
            "  {:<52} | yes ({}) | {} | {}",
            c.name,
            c.kind,
            if vis { "yes" } else { "no" },
            if amcheck { "yes" } else { "no" }
        );
    }
}
