//! More standard-level damage on real clusters of every supported version: broken HOT chains
//! and an xmax older than the relation's freeze horizon in a heap, junk in the metapages of
//! hash, GIN, SP-GiST and BRIN indexes and junk line pointers on hash, GiST, GIN and SP-GiST
//! pages. Each case is injected into its own block (checksum recomputed) and must be reported
//! with the right relation, block, line pointer and kind; `pg_amcheck` of the same version runs
//! on the damaged cluster and the test prints which cases it sees.
//!
//! Two healthy clusters must stay silent: a table whose aborted UPDATE's new versions VACUUM
//! truncated away (their old versions keep a `t_ctid` beyond the relation), and a streaming
//! standby shut down in recovery while its primary ran pgbench (tuples newer than its
//! `pg_control` `nextXid`). On that standby, damage planted in such a newer tuple is found.
//!
//! Off a clean shutdown the multixact bound is the extent of `pg_multixact/offsets`, whose
//! entries are 64 bits wide from 19 on: a multixact inside its one page is silent, one past it
//! is found, on every version.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command};
use std::thread::sleep;
use std::time::Duration;

use pgcheckdb_pg::catalog::xact::{CommitLog, XidStatus};
use pgcheckdb_pg::format::control::{ControlFile, DbState};
use pgcheckdb_pg::format::heap::{infomask as im, infomask2 as im2, HeapTupleHeader};
use pgcheckdb_pg::format::itemid::line_pointers;
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::asserts::assert_only_on;
use pgcheckdb_testkit::bytes::{put_u16, put_u32, u32_at};
use pgcheckdb_testkit::{amcheck, require_binaries, run, Cluster, ClusterOptions, BLCKSZ};

use common::{bin, normal_items};

pgcheckdb_testkit::version_tests! {
    damage_scenario;
    damage_pg14(14),
    damage_pg15(15),
    damage_pg16(16),
    damage_pg17(17),
    damage_pg18(18),
    damage_pg19(19),
}

pgcheckdb_testkit::version_tests! {
    aborted_update_scenario;
    aborted_update_truncated_pg14(14),
    aborted_update_truncated_pg16(16),
    aborted_update_truncated_pg18(18),
    aborted_update_truncated_pg19(19),
}

pgcheckdb_testkit::version_tests! {
    standby_scenario;
    standby_pg14(14),
    standby_pg15(15),
    standby_pg16(16),
    standby_pg17(17),
    standby_pg18(18),
    standby_pg19(19),
}

pgcheckdb_testkit::version_tests! {
    multixact_bound_scenario;
    multixact_bound_pg14(14),
    multixact_bound_pg15(15),
    multixact_bound_pg16(16),
    multixact_bound_pg17(17),
    multixact_bound_pg18(18),
    multixact_bound_pg19(19),
}

/// A prepared transaction holds back the pruning horizon, so the HOT chains stay on the pages
/// (also while pg_amcheck reads them) and the checks meet a transaction in progress.
const DAMAGE_SQL: &str = "
CREATE TABLE held (id int);
BEGIN; INSERT INTO held VALUES (1); PREPARE TRANSACTION 'hold';
CREATE TABLE hot (id int PRIMARY KEY, v int) WITH (fillfactor = 50);
INSERT INTO hot SELECT g, 0 FROM generate_series(1, 1500) g;
UPDATE hot SET v = 1 WHERE id % 10 = 0;
UPDATE hot SET v = 2 WHERE id % 10 = 0;
SELECT count(*) FROM hot;
CREATE TABLE idx (id int, p point, r int4range, t text);
INSERT INTO idx SELECT g, point(g % 100, g / 100), int4range(g, g + 10), md5(g::text)
    FROM generate_series(1, 5000) g;
CREATE INDEX idx_hash ON idx USING hash (id);
CREATE INDEX idx_gin ON idx USING gin (to_tsvector('simple', t));
CREATE INDEX idx_spgist ON idx USING spgist (p);
CREATE INDEX idx_brin ON idx USING brin (id);
CREATE INDEX idx_gist ON idx USING gist (r);
CHECKPOINT;
";

/// One injected condition and where it must be reported.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    relation: &'static str,
    block: u64,
    kind: &'static str,
    offset: Option<u16>,
}

/// A stopped cluster and the files of its relations.
struct Damaged {
    cluster: Cluster,
    files: Vec<(&'static str, String)>,
}

impl Damaged {
    fn rel(&self, name: &str) -> &str {
        &self
            .files
            .iter()
            .find(|(n, _)| *n == name)
            .expect("relation")
            .1
    }

    /// The first block from `start` on with at least two normal items that `pred` accepts.
    fn find_block(&self, rel: &str, start: u64, pred: impl Fn(&[u8]) -> bool) -> u64 {
        let path = self.cluster.datadir().join(self.rel(rel));
        let blocks = std::fs::metadata(&path).expect("index").len() / BLCKSZ as u64;
        (start..blocks)
            .find(|&b| {
                let page = corrupt::read_block(&path, b, BLCKSZ).expect("read");
                normal_items(&page).len() >= 2 && pred(&page)
            })
            .unwrap_or_else(|| panic!("no suitable block in {rel}"))
    }

    /// Reads a block, lets `change` edit it, writes it back and recomputes its checksum.
    fn edit<R>(&self, rel: &str, block: u64, change: impl FnOnce(&mut [u8]) -> R) -> R {
        common::edit(&self.cluster.datadir().join(self.rel(rel)), block, change)
    }
}

/// Byte offset of line pointer `offnum`'s word and of its item.
fn lp(page: &[u8], offnum: u16) -> (usize, usize) {
    let h = PageHeader::parse(page).expect("header");
    let item = line_pointers(page, &h)[offnum as usize - 1];
    (24 + 4 * (offnum as usize - 1), item.lp_off as usize)
}

/// Normal tuples of a heap page: (offnum, byte offset, header).
fn tuples(page: &[u8]) -> Vec<(u16, usize, HeapTupleHeader)> {
    normal_items(page)
        .into_iter()
        .map(|i| {
            let off = i.lp_off as usize;
            let t = HeapTupleHeader::parse(&page[off..off + i.lp_len as usize]).expect("tuple");
            (i.offnum, off, t)
        })
        .collect()
}

/// A HOT chain root -> first -> second on the page: their (offnum, byte offset).
fn hot_chain(page: &[u8]) -> [(u16, usize); 3] {
    let all = tuples(page);
    let at = |o: u16| all.iter().find(|(n, _, _)| *n == o);
    for (r, roff, rh) in &all {
        if rh.t_infomask2 & im2::HEAP_HOT_UPDATED == 0 || rh.t_infomask2 & im2::HEAP_ONLY_TUPLE != 0
        {
            continue;
        }
        let Some((a, aoff, ah)) = at(rh.t_ctid.offset) else {
            continue;
        };
        if ah.t_infomask2 & im2::HEAP_HOT_UPDATED == 0 {
            continue;
        }
        if let Some((b, boff, _)) = at(ah.t_ctid.offset) {
            return [(*r, *roff), (*a, *aoff), (*b, *boff)];
        }
    }
    panic!("no HOT chain of three tuples on the page");
}

fn infomask(page: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([page[off + 20], page[off + 21]])
}

fn infomask2(page: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([page[off + 18], page[off + 19]])
}

/// Injects every case into a stopped cluster; returns them.
fn inject(d: &Damaged, relfrozenxid: u32, prepared_xid: u32) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut case = |name, relation, block, kind, offset| {
        cases.push(Case {
            name,
            relation,
            block,
            kind,
            offset,
        })
    };
    let r = d.edit("hot", 1, |p| {
        let [(r, _), (_, a), _] = hot_chain(p);
        put_u16(p, a + 18, infomask2(p, a) & !im2::HEAP_ONLY_TUPLE);
        r
    });
    case(
        "HOT update to a tuple not heap-only",
        "hot",
        1,
        "hot_chain_invalid",
        Some(r),
    );
    let r = d.edit("hot", 2, |p| {
        let [(r, roff), _, _] = hot_chain(p);
        put_u16(p, roff + 18, infomask2(p, roff) & !im2::HEAP_HOT_UPDATED);
        r
    });
    case(
        "heap-only version of a non-HOT update",
        "hot",
        2,
        "hot_chain_invalid",
        Some(r),
    );
    let x = d.edit("hot", 3, |p| {
        let [(r, roff), (a, _), _] = hot_chain(p);
        let xmax = u32_at(p, roff + 4);
        let (x, xoff, _) = tuples(p)
            .into_iter()
            .rev()
            .find(|(n, _, t)| {
                *n > r
                    && t.t_infomask2 & (im2::HEAP_HOT_UPDATED | im2::HEAP_ONLY_TUPLE) == 0
                    && t.t_infomask & im::HEAP_XMAX_INVALID != 0
            })
            .expect("a plain tuple after the root");
        put_u32(p, xoff + 4, xmax);
        put_u16(p, xoff + 20, infomask(p, xoff) & !im::HEAP_XMAX_INVALID);
        put_u16(p, xoff + 16, a);
        x
    });
    case(
        "second tuple leads to a chain member",
        "hot",
        3,
        "hot_chain_invalid",
        Some(x),
    );
    let b = d.edit("hot", 4, |p| {
        let [_, _, (b, boff)] = hot_chain(p);
        put_u16(p, boff + 18, infomask2(p, boff) | im2::HEAP_HOT_UPDATED);
        put_u16(p, boff + 20, infomask(p, boff) & !im::HEAP_XMAX_INVALID);
        b
    });
    case(
        "HOT-updated with xmax 0",
        "hot",
        4,
        "hot_chain_invalid",
        Some(b),
    );
    let r = d.edit("hot", 5, |p| {
        let [(r, roff), _, _] = hot_chain(p);
        let m = infomask(p, roff);
        put_u16(
            p,
            roff + 20,
            (m & !im::HEAP_XMIN_COMMITTED) | im::HEAP_XMIN_INVALID,
        );
        r
    });
    case(
        "aborted root, committed successor",
        "hot",
        5,
        "hot_chain_invalid",
        Some(r),
    );
    let a = d.edit("hot", 6, |p| {
        let [(r, roff), (a, _), _] = hot_chain(p);
        put_u16(p, roff + 16, r);
        a
    });
    case(
        "heap-only tuple without a root",
        "hot",
        6,
        "hot_chain_invalid",
        Some(a),
    );
    let r = d.edit("hot", 7, |p| {
        let [(r, roff), (a, _), (b, _)] = hot_chain(p);
        let (x, _, _) = tuples(p)
            .into_iter()
            .find(|(n, _, t)| ![r, a, b].contains(n) && t.t_infomask2 & im2::HEAP_ONLY_TUPLE == 0)
            .expect("a tuple outside the chain");
        put_u16(p, roff + 16, x);
        r
    });
    case(
        "committed HOT update's version lost",
        "hot",
        7,
        "hot_chain_invalid",
        Some(r),
    );
    let t = d.edit("hot", 8, |p| {
        let (t, toff, _) = tuples(p)
            .into_iter()
            .find(|(_, _, t)| {
                t.t_infomask & im::HEAP_XMIN_COMMITTED != 0
                    && t.t_infomask & im::HEAP_XMAX_INVALID != 0
                    && t.t_infomask2 & (im2::HEAP_HOT_UPDATED | im2::HEAP_ONLY_TUPLE) == 0
            })
            .expect("a live plain tuple");
        put_u32(p, toff + 4, relfrozenxid - 10);
        put_u16(p, toff + 20, infomask(p, toff) & !im::HEAP_XMAX_INVALID);
        t
    });
    case("xmax before relfrozenxid", "hot", 8, "xid_invalid", Some(t));
    let r = d.edit("hot", 9, |p| {
        let [(r, roff), _, _] = hot_chain(p);
        put_u32(p, roff, prepared_xid);
        put_u16(p, roff + 20, infomask(p, roff) & !im::HEAP_XMIN_COMMITTED);
        r
    });
    case(
        "in-progress root, committed successor",
        "hot",
        9,
        "hot_chain_invalid",
        Some(r),
    );
    d.edit("idx_hash", 0, |p| put_u32(p, 24 + 24, 1_000_000));
    case(
        "hash maxbucket beyond the index",
        "idx_hash",
        0,
        "index_page_invalid",
        None,
    );
    d.edit("idx_gin", 0, |p| {
        put_u32(p, 24, 900_000);
        put_u32(p, 28, 900_000);
    });
    case(
        "GIN pending list beyond the index",
        "idx_gin",
        0,
        "index_page_invalid",
        None,
    );
    d.edit("idx_spgist", 0, |p| put_u32(p, 24 + 4, 700_000));
    case(
        "SP-GiST cached page beyond the index",
        "idx_spgist",
        0,
        "index_page_invalid",
        None,
    );
    d.edit("idx_brin", 0, |p| put_u32(p, 24 + 12, 50_000));
    case(
        "BRIN lastRevmapPage beyond the index",
        "idx_brin",
        0,
        "index_page_invalid",
        None,
    );
    // Index pages with at least two items (a hash bucket page, a GiST page, an SP-GiST page
    // that is not the metapage, a GIN entry page: flags without GIN_DATA/GIN_META).
    let special_u16 = |p: &[u8], at: usize| {
        let h = PageHeader::parse(p).expect("header");
        u16::from_le_bytes([
            p[h.pd_special as usize + at],
            p[h.pd_special as usize + at + 1],
        ])
    };
    let blk = d.find_block("idx_gist", 1, |_| true);
    d.edit("idx_gist", blk, |p| {
        let (w, _) = lp(p, 2);
        put_u32(p, w, u32_at(p, w) + 1);
    });
    case(
        "GiST lp_off not MAXALIGNed",
        "idx_gist",
        blk,
        "line_pointer_invalid",
        Some(2),
    );
    let blk = d.find_block("idx_hash", 1, |p| special_u16(p, 12) & 0xF == 2);
    d.edit("idx_hash", blk, |p| {
        let (w, _) = lp(p, 1);
        put_u32(p, w, (u32_at(p, w) & !0x7FFF) | 8184);
    });
    case(
        "hash item past pd_special",
        "idx_hash",
        blk,
        "line_pointer_invalid",
        Some(1),
    );
    let blk = d.find_block("idx_spgist", 1, |p| special_u16(p, 0) & 0x3 == 0);
    d.edit("idx_spgist", blk, |p| {
        let (w1, _) = lp(p, 1);
        let (w2, _) = lp(p, 2);
        let word = u32_at(p, w1);
        put_u32(p, w2, word);
    });
    case(
        "SP-GiST items share storage",
        "idx_spgist",
        blk,
        "line_pointer_overlap",
        Some(2),
    );
    let blk = d.find_block("idx_gin", 1, |p| special_u16(p, 6) & 0x0D == 0);
    d.edit("idx_gin", blk, |p| {
        let (w, _) = lp(p, 1);
        put_u32(p, w, u32_at(p, w) + 3);
    });
    case(
        "GIN entry lp_off not MAXALIGNed",
        "idx_gin",
        blk,
        "line_pointer_invalid",
        Some(1),
    );
    cases
}

fn damage_scenario(major: u32) {
    require_binaries(major);
    let opts = ClusterOptions::new(major, major.is_multiple_of(2))
        .throwaway()
        .setting("autovacuum", "off")
        .setting("max_prepared_transactions", "2");
    let mut cluster = Cluster::init_temp(&opts).expect("initdb");
    cluster.start().expect("start");
    cluster.psql("postgres", DAMAGE_SQL).expect("schema");
    let mut files = Vec::new();
    for name in [
        "hot",
        "idx_hash",
        "idx_gin",
        "idx_spgist",
        "idx_brin",
        "idx_gist",
    ] {
        files.push((
            name,
            cluster.relation_filepath("postgres", name).expect("path"),
        ));
    }
    let relfrozenxid: u32 = cluster
        .query_value(
            "postgres",
            "SELECT relfrozenxid FROM pg_class WHERE relname = 'hot'",
        )
        .expect("relfrozenxid")
        .parse()
        .expect("number");
    let prepared_xid: u32 = cluster
        .query_value("postgres", "SELECT transaction FROM pg_prepared_xacts")
        .expect("prepared xid")
        .parse()
        .expect("number");
    cluster.stop().expect("stop");
    let d = Damaged { cluster, files };
    let datadir = d.cluster.datadir().display().to_string();
    let clean = run::pgcheckdb(
        &bin(),
        &["verify", "--format", "json", "-D", &datadir],
        None,
    );
    assert_eq!(
        clean.status, 0,
        "PostgreSQL {major}: healthy cluster\n{clean}"
    );
    let cases = inject(&d, relfrozenxid, prepared_xid);
    let run = run::pgcheckdb(
        &bin(),
        &["verify", "--format", "json", "-j", "2", "-D", &datadir],
        None,
    );
    assert_eq!(run.status, 2, "{run}");
    for c in &cases {
        let file = d.rel(c.relation);
        let hit = run.findings.iter().find(|f| {
            f["kind"] == c.kind
                && f["file"] == file
                && f["block"] == c.block
                && c.offset.is_none_or(|o| f["offset"] == o)
        });
        let f = hit.unwrap_or_else(|| {
            panic!(
                "PostgreSQL {major}: case \"{}\" not reported as {} at {file} block {} offset {:?}\n{run}",
                c.name, c.kind, c.block, c.offset
            )
        });
        assert_eq!(
            f["relation"]["name"],
            format!("public.{}", c.relation),
            "{f}"
        );
    }
    let damaged: BTreeSet<(String, u64)> = cases
        .iter()
        .map(|c| (d.rel(c.relation).to_string(), c.block))
        .collect();
    let what = format!("PostgreSQL {major}: finding on an undamaged block");
    assert_only_on(&run, &damaged, |f| f["severity"] != "info", &what);
    let mut d = d;
    let seen = amcheck_hits(&mut d.cluster, &cases);
    let heading = format!("PostgreSQL {major}: case | pgcheckdb | pg_amcheck");
    let rows = cases.iter().map(|c| {
        let theirs = amcheck::yes_no(seen.contains(c.name));
        (c.name, format!("yes ({})", c.kind), theirs)
    });
    amcheck::print_table(&heading, 42, rows);
    // verify_heapam of 16+ follows update chains and checks xmax against relfrozenxid.
    let amcheck_sees: &[&str] = if major >= 16 {
        &[
            "HOT update to a tuple not heap-only",
            "heap-only version of a non-HOT update",
            "second tuple leads to a chain member",
            "HOT-updated with xmax 0",
            "heap-only tuple without a root",
            "in-progress root, committed successor",
            "xmax before relfrozenxid",
        ]
    } else {
        &["xmax before relfrozenxid"]
    };
    for name in amcheck_sees {
        assert!(
            seen.contains(name),
            "PostgreSQL {major}: pg_amcheck should report \"{name}\""
        );
    }
}

/// Runs `pg_amcheck --heapallindexed --parent-check` (with `--checkunique` on 17+) and returns
/// the cases it reported (by relation and block).
fn amcheck_hits(cluster: &mut Cluster, cases: &[Case]) -> BTreeSet<&'static str> {
    let mut args = amcheck::HEAPALLINDEXED.to_vec();
    args.push("--no-dependent-toast");
    args.extend(amcheck::checkunique(cluster.major()));
    let text = amcheck::on_stopped(cluster, &args);
    cases
        .iter()
        .filter(|c| {
            let rel = amcheck::quoted(c.relation);
            text.lines().any(|l| {
                l.contains(&rel)
                    && c.offset
                        .is_none_or(|o| l.contains(&format!("block {}, offset {o}", c.block)))
            })
        })
        .map(|c| c.name)
        .collect()
}

/// An aborted UPDATE moved every row's new version to block 1, VACUUM removed them and
/// truncated block 1: the old versions keep `t_ctid` (1, n) beyond the one-block relation.
/// PostgreSQL never follows it (the xmax aborted), so it is no damage. As a control, one such
/// tuple's xmax is then marked committed: now the server would follow it, and it is reported.
fn aborted_update_scenario(major: u32) {
    require_binaries(major);
    let opts = ClusterOptions::new(major, true).setting("autovacuum", "off");
    let mut cluster = Cluster::init_temp(&opts).expect("initdb");
    cluster.start().expect("start");
    cluster
        .psql(
            "postgres",
            "CREATE TABLE ab (id int, pad text);
             INSERT INTO ab SELECT g, repeat('a', 100) FROM generate_series(1, 56) g;
             BEGIN; UPDATE ab SET pad = repeat('b', 100); ROLLBACK;
             VACUUM ab;",
        )
        .expect("aborted update and vacuum");
    let file = cluster.relation_filepath("postgres", "ab").expect("path");
    cluster.stop().expect("stop");
    let path = cluster.datadir().join(&file);
    let size = std::fs::metadata(&path).expect("ab").len();
    assert_eq!(
        size, BLCKSZ as u64,
        "VACUUM should have truncated ab to one block"
    );
    let page = corrupt::read_block(&path, 0, BLCKSZ).expect("read");
    let beyond: Vec<u16> = tuples(&page)
        .into_iter()
        .filter(|(_, _, t)| t.t_ctid.block >= 1)
        .map(|(n, _, _)| n)
        .collect();
    assert!(
        beyond.len() > 10,
        "expected old versions pointing past block 0: {beyond:?}"
    );
    let datadir = cluster.datadir().display().to_string();
    let run = run::pgcheckdb(
        &bin(),
        &["verify", "--format", "json", "-D", &datadir],
        None,
    );
    assert_eq!(run.status, 0, "PostgreSQL {major}: {run}");
    assert!(
        run.problems().is_empty(),
        "PostgreSQL {major}: no warning expected\n{run}"
    );
    let target = beyond[0];
    common::edit(&path, 0, |p| {
        let (_, off) = lp(p, target);
        let m = infomask(p, off);
        put_u16(
            p,
            off + 20,
            (m & !im::HEAP_XMAX_INVALID) | im::HEAP_XMAX_COMMITTED,
        );
    });
    let run = run::pgcheckdb(
        &bin(),
        &["verify", "--format", "json", "-D", &datadir],
        None,
    );
    let problems = run.problems();
    assert_eq!(problems.len(), 1, "PostgreSQL {major}: {run}");
    let f = problems[0];
    assert_eq!(f["kind"], "tuple_header_invalid", "{f}");
    assert_eq!(
        (
            f["file"].as_str(),
            f["block"].as_u64(),
            f["offset"].as_u64()
        ),
        (Some(file.as_str()), Some(0), Some(target as u64)),
        "{f}"
    );
}

/// A primary with pgbench traffic and a streaming standby made by `pg_basebackup -R`; the
/// standby is stopped while the primary runs, so its `pg_control` says "shut down in recovery"
/// and its `nextXid` is that of the last checkpoint it replayed.
fn standby_scenario(major: u32) {
    require_binaries(major);
    let opts = ClusterOptions::new(major, major.is_multiple_of(2)).setting("autovacuum", "off");
    let mut primary = Cluster::init_temp(&opts).expect("initdb");
    primary.start().expect("start primary");
    primary
        .run_program("pgbench", &pg_args(&primary, &["-i", "-s", "2", "-q"]))
        .expect("pgbench -i");
    let standby_root = primary.make_dir("standby").expect("standby dir");
    let standby_data = standby_root.join("data");
    let sock = primary.work_dir().join("sock").display().to_string();
    primary
        .run_program(
            "pg_basebackup",
            &[
                "-h",
                &sock,
                "-U",
                "postgres",
                "-D",
                standby_data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        )
        .expect("pg_basebackup");
    let standby_sock = primary
        .make_dir("standby/sock")
        .expect("standby socket dir");
    let conf = standby_data.join("postgresql.auto.conf");
    let mut text = std::fs::read_to_string(&conf).expect("auto.conf");
    text.push_str(&format!(
        "unix_socket_directories = '{}'\n",
        standby_sock.display()
    ));
    std::fs::write(&conf, text).expect("write auto.conf");
    let standby_log = standby_root.join("server.log");
    // The walreceiver module must load its own installation's libpq, not the system's.
    let lib = primary
        .binaries()
        .program("pg_ctl")
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("lib"))
        .filter(|l| l.join("libpq.so.5").exists());
    let pg_ctl = |args: &[&str]| {
        let mut cmd = primary.command("pg_ctl");
        cmd.args(args);
        if let Some(lib) = &lib {
            cmd.env("LD_LIBRARY_PATH", lib);
        }
        let out = cmd.output().expect("run pg_ctl");
        assert!(
            out.status.success(),
            "pg_ctl {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&standby_log).unwrap_or_default()
        );
    };
    let sd = standby_data.to_str().unwrap();
    pg_ctl(&["-D", sd, "-l", standby_log.to_str().unwrap(), "-w", "start"]);
    let rel = "pgbench_accounts";
    let file = primary.relation_filepath("postgres", rel).expect("path");
    let mut bench = pgbench_in_background(&primary, 25);
    sleep(Duration::from_secs(8));
    primary.psql("postgres", "CHECKPOINT;").expect("checkpoint");
    sleep(Duration::from_secs(8));
    pg_ctl(&["-D", sd, "-m", "fast", "-w", "stop"]);
    let _ = bench.wait();
    primary.stop().expect("stop primary");

    let control = ControlFile::read_from_datadir(&standby_data).expect("standby pg_control");
    assert_eq!(
        control.state,
        DbState::ShutdownedInRecovery,
        "standby state"
    );
    let datadir = sd.to_string();
    let run = run::pgcheckdb(
        &bin(),
        &["verify", "--format", "json", "-D", &datadir],
        None,
    );
    let xid_findings = run.of_kind("xid_invalid");
    assert!(
        xid_findings.is_empty(),
        "PostgreSQL {major}: {} xid findings on a healthy standby\n{run}",
        xid_findings.len()
    );
    assert_eq!(run.status, 0, "PostgreSQL {major}: healthy standby\n{run}");

    // Damage a committed tuple newer than pg_control's nextXid: natts above relnatts.
    let next = control.next_xid as u32;
    let (clog, _) = CommitLog::load(&standby_data, control.blcksz);
    let path = standby_data.join(&file);
    let blocks = std::fs::metadata(&path).expect("accounts").len() / BLCKSZ as u64;
    // The WAL the standby received names every xid its heap holds.
    let wal_newest = pgcheckdb_pg::check::standard::wal::newest_xid(&control, &standby_data, next)
        .unwrap_or_else(|| panic!("PostgreSQL {major}: no WAL record readable on the standby"));
    for block in 0..blocks {
        let page = corrupt::read_block(&path, block, BLCKSZ).expect("read");
        if PageHeader::parse(&page).is_none_or(|h| h.is_new()) {
            continue;
        }
        for (n, _, t) in tuples(&page) {
            assert!(
                t.t_xmin < 3 || (wal_newest.wrapping_sub(t.t_xmin) as i32) >= 0,
                "PostgreSQL {major}: block {block} offset {n} xmin {} is newer than the WAL's newest xid {wal_newest}",
                t.t_xmin
            );
        }
    }
    let mut target = None;
    'scan: for block in 0..blocks {
        let page = corrupt::read_block(&path, block, BLCKSZ).expect("read");
        if PageHeader::parse(&page).is_none_or(|h| h.is_new()) {
            continue;
        }
        for (n, _, t) in tuples(&page) {
            let newer = (t.t_xmin.wrapping_sub(next) as i32) >= 0;
            if newer
                && t.t_infomask & im::HEAP_XMIN_INVALID == 0
                && clog.status(t.t_xmin) == XidStatus::Committed
            {
                target = Some((block, n, t.t_xmin));
                break 'scan;
            }
        }
    }
    let (block, offnum, xmin) = target.unwrap_or_else(|| {
        panic!(
            "PostgreSQL {major}: no committed tuple newer than nextXid {next} on the standby\n{}",
            std::fs::read_to_string(&standby_log).unwrap_or_default()
        )
    });
    eprintln!("PostgreSQL {major}: standby nextXid {next}, damaging {rel} block {block} offset {offnum} (xmin {xmin})");
    common::edit(&path, block, |p| {
        let (_, off) = lp(p, offnum);
        put_u16(p, off + 18, (infomask2(p, off) & !0x07FF) | 7);
    });
    let run = run::pgcheckdb(
        &bin(),
        &["verify", "--format", "json", "-D", &datadir],
        None,
    );
    assert_eq!(run.status, 2, "PostgreSQL {major}: {run}");
    let hit = run.findings.iter().any(|f| {
        f["kind"] == "tuple_natts_invalid"
            && f["file"] == file.as_str()
            && f["block"] == block
            && f["offset"] == offnum
    });
    assert!(
        hit,
        "PostgreSQL {major}: damage in a tuple newer than nextXid missed\n{run}"
    );
}

fn pg_args<'a>(c: &'a Cluster, extra: &[&'a str]) -> Vec<&'a str> {
    let sock = c.work_dir().join("sock");
    let sock: &'a str = Box::leak(sock.display().to_string().into_boxed_str());
    let mut args = vec!["-h", sock, "-U", "postgres"];
    args.extend_from_slice(extra);
    args.push("postgres");
    args
}

fn pgbench_in_background(c: &Cluster, seconds: u32) -> Child {
    let secs = seconds.to_string();
    let args = pg_args(c, &["-n", "-c", "2", "-T", &secs]);
    let mut cmd: Command = c.command("pgbench");
    cmd.args(args);
    cmd.spawn().expect("start pgbench")
}

/// Multixact ids one page of `pg_multixact/offsets` holds: `BLCKSZ / sizeof(MultiXactOffset)`,
/// the offset 64 bits wide from 19 on (`MULTIXACT_OFFSETS_PER_PAGE`, 1024), 32 bits before
/// (2048). Written here from PostgreSQL's `c.h` and `multixact_internal.h`, not taken from
/// pgcheckdb.
fn multixacts_per_offsets_page(major: u32) -> u32 {
    let offset_size = if major >= 19 { 8 } else { 4 };
    BLCKSZ as u32 / offset_size
}

/// Off a clean shutdown the multixact bound is the end of `pg_multixact/offsets` on disk (a
/// fresh cluster has one page): on a cluster marked "shut down in recovery", a tuple locked by
/// a multixact the offsets page still covers is silent, and one by a multixact half a page past
/// it is `xid_invalid`, on every version, as each lays out its offsets.
fn multixact_bound_scenario(major: u32) {
    require_binaries(major);
    let opts = ClusterOptions::new(major, major.is_multiple_of(2));
    let mut c = Cluster::init_temp(&opts).expect("initdb");
    c.start().expect("start");
    c.psql(
        "postgres",
        "CREATE TABLE locked (id int); INSERT INTO locked SELECT generate_series(1, 10); CHECKPOINT;",
    )
    .expect("table");
    let file = c.relation_filepath("postgres", "locked").expect("path");
    c.stop().expect("stop");
    let datadir = c.datadir().to_path_buf();
    let offsets = std::fs::metadata(datadir.join("pg_multixact/offsets/0000"))
        .expect("pg_multixact/offsets/0000")
        .len();
    assert_eq!(
        offsets, BLCKSZ as u64,
        "PostgreSQL {major}: one offsets page expected"
    );
    let per_page = multixacts_per_offsets_page(major);
    let (within, beyond) = (per_page - 1, per_page + per_page / 2);
    let (lp_within, lp_beyond) = common::edit(&datadir.join(&file), 0, |page| {
        let items = normal_items(page);
        let mut lock = |i: usize, multi: u32| {
            let at = items[i].lp_off as usize;
            put_u32(page, at + 4, multi);
            let mask = (infomask(page, at) & !(im::HEAP_XMAX_INVALID | im::HEAP_XMAX_COMMITTED))
                | im::HEAP_XMAX_IS_MULTI
                | im::HEAP_XMAX_LOCK_ONLY
                | im::HEAP_XMAX_KEYSHR_LOCK;
            put_u16(page, at + 20, mask);
            items[i].offnum
        };
        (lock(0, within), lock(1, beyond))
    });
    pgcheckdb_testkit::control::set_db_state(&datadir, 2);
    let d = datadir.to_string_lossy().into_owned();
    let run = run::pgcheckdb(&bin(), &["verify", "--format", "json", "-D", &d], None);
    let at = |offnum: u16| {
        run.of_kind("xid_invalid")
            .into_iter()
            .filter(|f| f["file"] == file.as_str() && f["block"] == 0 && f["offset"] == offnum)
            .count()
    };
    assert_eq!(
        at(lp_beyond),
        1,
        "PostgreSQL {major}: multixact {beyond} is past one offsets page ({per_page})\n{run}"
    );
    assert_eq!(
        at(lp_within),
        0,
        "PostgreSQL {major}: multixact {within} is inside the offsets page\n{run}"
    );
}
