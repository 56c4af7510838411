//! The standard level finds structure damage that the checksum cannot see: on a real cluster of
//! every supported version, each condition class is injected into its own block (line pointer,
//! t_hoff, natts, xid, redirect, overlap, attribute length, TOAST pointer, B-tree item, level and
//! metapage, sequence, visibility map), the page checksum is recomputed, and pgcheckdb must
//! report it with the right relation name, block, offset, attribute and kind. The same damaged
//! cluster is then checked with `pg_amcheck` of that version; the test prints which cases each
//! tool reports and asserts amcheck agrees where it is known to cover the case.

mod common;

use std::collections::BTreeSet;

use pgcheckdb_pg::format::control::ControlFile;
use pgcheckdb_pg::format::itemid::line_pointers;
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_testkit::asserts::assert_only_on;
use pgcheckdb_testkit::bytes::{put_u16, put_u32, u32_at};
use pgcheckdb_testkit::{amcheck, run, standard_cluster, StandardCluster, BLCKSZ};
use serde_json::Value;

use common::bin;

pgcheckdb_testkit::version_tests! {
    scenario;
    structure_pg14(14),
    structure_pg15(15),
    structure_pg16(16),
    structure_pg17(17),
    structure_pg18(18),
    structure_pg19(19),
}

/// One injected condition and where it must be reported.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    relation: &'static str,
    fork: &'static str,
    block: u64,
    kind: &'static str,
    offset: Option<u16>,
    attnum: Option<u16>,
    /// `pg_amcheck` is known to report this case.
    amcheck_covers: bool,
}

/// Reads a block, lets `change` edit it, writes it back and recomputes its checksum.
fn edit(sc: &StandardCluster, rel: &str, fork: &str, block: u64, change: impl FnOnce(&mut [u8])) {
    common::edit(&sc.fork_file("postgres", rel, fork, 0), block, change);
}

/// Byte offset of line pointer `offnum` (1-based) and the item's (lp_off, lp_len).
fn item(page: &[u8], offnum: u16) -> (usize, usize, usize) {
    let h = PageHeader::parse(page).expect("header");
    let lp = line_pointers(page, &h)[offnum as usize - 1];
    (
        24 + 4 * (offnum as usize - 1),
        lp.lp_off as usize,
        lp.lp_len as usize,
    )
}

/// Injects every case; returns them.
fn inject(sc: &StandardCluster, next_xid: u32) -> Vec<Case> {
    let case = |name, relation, fork, block, kind, offset, attnum, amcheck_covers| Case {
        name,
        relation,
        fork,
        block,
        kind,
        offset,
        attnum,
        amcheck_covers,
    };
    let mut cases = Vec::new();
    edit(sc, "accounts", "main", 1, |p| {
        let (lp, _, _) = item(p, 3);
        let w = u32_at(p, lp);
        put_u32(p, lp, w + 1);
    });
    cases.push(case(
        "lp_off not MAXALIGNed",
        "accounts",
        "main",
        1,
        "line_pointer_invalid",
        Some(3),
        None,
        true,
    ));
    edit(sc, "accounts", "main", 2, |p| {
        let (_, off, _) = item(p, 5);
        p[off + 22] = 32;
    });
    cases.push(case(
        "t_hoff too large",
        "accounts",
        "main",
        2,
        "tuple_header_invalid",
        Some(5),
        None,
        true,
    ));
    edit(sc, "accounts", "main", 3, |p| {
        let (_, off, _) = item(p, 2);
        let m2 = u16::from_le_bytes([p[off + 18], p[off + 19]]);
        put_u16(p, off + 18, (m2 & !0x07FF) | 7);
    });
    cases.push(case(
        "natts above relnatts",
        "accounts",
        "main",
        3,
        "tuple_natts_invalid",
        Some(2),
        None,
        true,
    ));
    edit(sc, "accounts", "main", 4, |p| {
        let (_, off, _) = item(p, 1);
        put_u32(p, off, next_xid.wrapping_add(100_000));
        let mask = u16::from_le_bytes([p[off + 20], p[off + 21]]);
        put_u16(p, off + 20, mask & !0x0300);
    });
    cases.push(case(
        "xmin in the future",
        "accounts",
        "main",
        4,
        "xid_invalid",
        Some(1),
        None,
        true,
    ));
    edit(sc, "accounts", "main", 5, |p| {
        let (lp, _, _) = item(p, 4);
        put_u32(p, lp, 250 | (2 << 15));
    });
    cases.push(case(
        "redirect beyond maxoff",
        "accounts",
        "main",
        5,
        "redirect_invalid",
        Some(4),
        None,
        true,
    ));
    edit(sc, "accounts", "main", 6, |p| {
        let (lp1, _, _) = item(p, 1);
        let (lp2, _, _) = item(p, 2);
        let w = u32_at(p, lp1);
        put_u32(p, lp2, w);
    });
    cases.push(case(
        "two items share storage",
        "accounts",
        "main",
        6,
        "line_pointer_overlap",
        Some(2),
        None,
        false,
    ));
    edit(sc, "accounts", "main", 7, |p| {
        let (_, off, _) = item(p, 1);
        p[off + 24 + 4] = 0x7F; // 1-byte varlena header of `name` claiming 63 bytes
    });
    cases.push(case(
        "varlena runs past the tuple",
        "accounts",
        "main",
        7,
        "attribute_invalid",
        Some(1),
        Some(2),
        true,
    ));
    edit(sc, "docs", "main", 0, |p| {
        let (_, off, _) = item(p, 1);
        let at = off + 24 + 4 + 2 + 12; // va_toastrelid of `body`
        let v = u32_at(p, at);
        put_u32(p, at, v + 1);
    });
    cases.push(case(
        "TOAST pointer to another relation",
        "docs",
        "main",
        0,
        "toast_pointer_invalid",
        Some(1),
        Some(2),
        false,
    ));
    edit(sc, "accounts_pkey", "main", 1, |p| {
        let (_, off, _) = item(p, 3);
        let t_info = u16::from_le_bytes([p[off + 6], p[off + 7]]);
        put_u16(p, off + 6, t_info + 8);
    });
    cases.push(case(
        "index tuple size differs from lp_len",
        "accounts_pkey",
        "main",
        1,
        "btree_item_invalid",
        Some(3),
        None,
        true,
    ));
    edit(sc, "in_space_pkey", "main", 2, |p| {
        put_u32(p, BLCKSZ - 16 + 8, 1); // btpo_level of a leaf
    });
    cases.push(case(
        "leaf page with level 1",
        "in_space_pkey",
        "main",
        2,
        "btree_page_invalid",
        None,
        None,
        true,
    ));
    edit(sc, "accounts_name_idx", "main", 0, |p| {
        put_u32(p, 24, 0x0BAD);
    });
    cases.push(case(
        "metapage magic",
        "accounts_name_idx",
        "main",
        0,
        "btree_page_invalid",
        None,
        None,
        true,
    ));
    edit(sc, "seq_ids", "main", 0, |p| {
        put_u32(p, BLCKSZ - 8, 0x1818);
    });
    cases.push(case(
        "sequence magic",
        "seq_ids",
        "main",
        0,
        "sequence_page_invalid",
        None,
        None,
        false,
    ));
    edit(sc, "vacuumed", "vm", 0, |p| {
        p[24] = (p[24] & !0x03) | 0x02;
    });
    cases.push(case(
        "all-frozen without all-visible",
        "vacuumed",
        "vm",
        0,
        "visibility_map_invalid",
        None,
        None,
        false,
    ));
    inject_index_pages(sc, &mut cases);
    cases
}

/// The other index access methods and B-tree posting lists.
fn inject_index_pages(sc: &StandardCluster, cases: &mut Vec<Case>) {
    let page_case = |name, relation, block, kind, amcheck_covers| Case {
        name,
        relation,
        fork: "main",
        block,
        kind,
        offset: None,
        attnum: None,
        amcheck_covers,
    };
    edit(sc, "accounts_hash", "main", 1, |p| {
        put_u16(p, BLCKSZ - 2, 0xFF81)
    });
    cases.push(page_case(
        "hash page with a GiST page id",
        "accounts_hash",
        1,
        "index_page_invalid",
        false,
    ));
    edit(sc, "accounts_brin", "main", 1, |p| {
        put_u16(p, BLCKSZ - 2, 0xF099)
    });
    cases.push(page_case(
        "BRIN page of unknown type",
        "accounts_brin",
        1,
        "index_page_invalid",
        false,
    ));
    edit(sc, "vacuumed_gin", "main", 0, |p| {
        let flags = u16::from_le_bytes([p[BLCKSZ - 2], p[BLCKSZ - 1]]);
        put_u16(p, BLCKSZ - 2, flags & !0x08);
    });
    cases.push(page_case(
        "GIN metapage not flagged META",
        "vacuumed_gin",
        0,
        "index_page_invalid",
        false,
    ));
    edit(sc, "shapes_gist", "main", 0, |p| {
        put_u16(p, BLCKSZ - 2, 0xFF80)
    });
    cases.push(page_case(
        "GiST page with a hash page id",
        "shapes_gist",
        0,
        "index_page_invalid",
        false,
    ));
    edit(sc, "shapes_spgist", "main", 0, |p| {
        put_u32(p, 24, 0xDEAD_BEEF)
    });
    cases.push(page_case(
        "SP-GiST metapage magic",
        "shapes_spgist",
        0,
        "index_page_invalid",
        false,
    ));
    let mut posting_item = 0;
    edit(sc, "accounts_bucket", "main", 1, |p| {
        posting_item = swap_posting_tids(p)
    });
    cases.push(Case {
        offset: Some(posting_item),
        ..page_case(
            "posting list TIDs out of order",
            "accounts_bucket",
            1,
            "btree_item_invalid",
            true,
        )
    });
}

/// Swaps the first two heap TIDs of the first posting-list tuple on a B-tree leaf page;
/// returns its line pointer number.
fn swap_posting_tids(p: &mut [u8]) -> u16 {
    let h = PageHeader::parse(p).expect("header");
    for lp in line_pointers(p, &h) {
        let off = lp.lp_off as usize;
        let t_info = u16::from_le_bytes([p[off + 6], p[off + 7]]);
        let offset_field = u16::from_le_bytes([p[off + 4], p[off + 5]]);
        if t_info & 0x2000 != 0 && offset_field & 0x2000 != 0 {
            let start = off + u16::from_le_bytes([p[off + 2], p[off + 3]]) as usize;
            let first: Vec<u8> = p[start..start + 6].to_vec();
            p.copy_within(start + 6..start + 12, start);
            p[start + 6..start + 12].copy_from_slice(&first);
            return lp.offnum;
        }
    }
    panic!("no posting-list tuple on block 1 of accounts_bucket");
}

fn scenario(major: u32) {
    let checksums = major.is_multiple_of(2);
    let mut sc = standard_cluster(major, checksums);
    let control = ControlFile::read_from_datadir(sc.datadir()).expect("pg_control");
    let cases = inject(&sc, control.next_xid as u32);
    let datadir = sc.datadir().display().to_string();
    let run = run::pgcheckdb(
        &bin(),
        &["verify", "--format", "json", "-j", "2", "-D", &datadir],
        None,
    );
    assert_eq!(run.status, 2, "{run}");
    let mut ours = Vec::new();
    for c in &cases {
        let file = sc.fork_rel("postgres", c.relation, c.fork, 0);
        let hit = run.findings.iter().find(|f| matches_case(f, c, &file));
        let f = hit.unwrap_or_else(|| {
            panic!(
                "PostgreSQL {major}: case \"{}\" not reported as {} at {file} block {}\n{run}",
                c.name, c.kind, c.block
            )
        });
        let expected_name = if c.relation == "docs" {
            "public.docs".to_string()
        } else {
            format!("public.{}", c.relation)
        };
        assert_eq!(f["relation"]["name"], expected_name.as_str(), "{f}");
        assert_eq!(f["database"]["name"], "postgres", "{f}");
        ours.push(c.name);
    }
    let damaged: BTreeSet<(String, u64)> = cases
        .iter()
        .map(|c| (sc.fork_rel("postgres", c.relation, c.fork, 0), c.block))
        .collect();
    let what = format!("PostgreSQL {major}: error on an undamaged block");
    assert_only_on(&run, &damaged, |f| f["severity"] == "error", &what);
    let amcheck = amcheck_hits(&mut sc, &cases);
    report(major, &cases, &amcheck);
    for c in cases.iter().filter(|c| c.amcheck_covers) {
        assert!(
            amcheck.contains(c.name),
            "PostgreSQL {major}: pg_amcheck was expected to report \"{}\"",
            c.name
        );
    }
}

fn matches_case(f: &Value, c: &Case, file: &str) -> bool {
    f["kind"] == c.kind
        && f["file"] == file
        && f["block"] == c.block
        && c.offset.is_none_or(|o| f["offset"] == o)
        && c.attnum.is_none_or(|a| f["attnum"] == a)
}

/// Starts the server, runs `pg_amcheck` on database `postgres` and returns the names of the
/// cases it reported (by relation and block).
fn amcheck_hits(sc: &mut StandardCluster, cases: &[Case]) -> BTreeSet<&'static str> {
    let args = ["-d", "postgres", "--no-dependent-toast"];
    let text = amcheck::on_stopped(&mut sc.cluster, &args);
    cases
        .iter()
        .filter(|c| amcheck_reported(&text, c))
        .map(|c| c.name)
        .collect()
}

/// pg_amcheck prints `heap table "postgres.public.accounts", block 1, offset 3:` for heap
/// findings and `btree index "postgres.public.accounts_pkey":` followed by the error for indexes.
fn amcheck_reported(text: &str, c: &Case) -> bool {
    let rel = amcheck::quoted(c.relation);
    text.lines().any(|l| {
        l.contains(&rel)
            && (l.starts_with("btree index")
                || (l.contains(&format!("block {},", c.block))
                    || l.contains(&format!("block {}:", c.block))))
    })
}

fn report(major: u32, cases: &[Case], amcheck: &BTreeSet<&str>) {
    let heading = format!("PostgreSQL {major}: case | pgcheckdb | pg_amcheck");
    let rows = cases.iter().map(|c| {
        let theirs = amcheck::yes_no(amcheck.contains(c.name));
        (c.name, format!("yes ({})", c.kind), theirs)
    });
    amcheck::print_table(&heading, 40, rows);
}
