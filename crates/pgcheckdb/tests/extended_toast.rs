//! The extended level checks TOAST values against their chunks. On a real cluster of every
//! supported version (random, incompressible values stored external, pglz- and lz4-compressed
//! external values and ones of the default compression, lz4 from 19 on, deleted rows left
//! unvacuumed, an aborted insert, updates that keep or replace values), verify `--level
//! extended` must report no error or warning and count the chunks no live row points at as one
//! info per TOAST relation. Then one case is injected per table (checksum recomputed): a
//! chunk's line pointer marked dead, a chunk's `chunk_seq` set to its neighbour's, a chunk cut
//! 100 bytes short, a pointer's `va_valueid` and a pointer's `va_toastrelid` changed, and a
//! TOAST file cut mid-page (its chunks unreadable, so not called missing). Each must be found
//! at the right relation and block, the main tuple in `detail`; the same with `--memory 256k`
//! (facts spilled). `pg_amcheck --heapallindexed --parent-check` on the damaged cluster, started
//! afterwards, is run for docs/CHECKS.md.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::heap::HeapTupleHeader;
use pgcheckdb_pg::format::itemid::{line_pointers, LpFlags};
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::asserts::assert_healthy_extended;
use pgcheckdb_testkit::bytes::{put_u32, u32_at};
use pgcheckdb_testkit::run::{Place, Run};
use pgcheckdb_testkit::{amcheck, loaded, Cluster, BLCKSZ};

use common::{edit, verify_extended, verify_spilled};

pgcheckdb_testkit::version_tests! {
    scenario;
    toast_pg14_checksums(14, true),
    toast_pg15_no_checksums(15, false),
    toast_pg16_checksums(16, true),
    toast_pg17_no_checksums(17, false),
    toast_pg18_checksums(18, true),
    toast_pg18_no_checksums(18, false),
    toast_pg19_checksums(19, true),
    toast_pg19_no_checksums(19, false),
}

/// Tables of `(id int, note text, payload bytea EXTERNAL)`, one injected case each; `t_ok`
/// is only churned. 400-byte notes spread each table's 60 rows over four pages.
const TABLES: [&str; 6] = ["t_del", "t_dup", "t_short", "t_vid", "t_rel", "t_ok"];

/// 10,000 random bytes per row: six chunks of 1996 bytes, the last one 20.
fn random_bytes(seed: &str) -> String {
    format!(
        "(SELECT decode(string_agg(md5(random()::text || {seed} || s), ''), 'hex') FROM generate_series(1, 625) s)"
    )
}

/// About 22,600 characters that compress but not below the TOAST threshold (stored compressed
/// and external): 1,100 `x` (pglz gives up on a value whose first kilobyte does not compress),
/// then a random 3,584-character string six times (its period fits pglz's 4 kB history).
fn compressible_text(seed: &str) -> String {
    format!(
        "repeat('x', 1100) || repeat((SELECT string_agg(md5(random()::text || {seed} || s), '') FROM generate_series(1, 112) s), 6)"
    )
}

fn schema_sql() -> String {
    let mut sql = String::new();
    for t in TABLES {
        sql += &format!(
            "CREATE TABLE {t} (id int PRIMARY KEY, note text, payload bytea);
             ALTER TABLE {t} ALTER COLUMN payload SET STORAGE EXTERNAL;
             INSERT INTO {t} SELECT g, lpad(g::text, 400, 'n'), {} FROM generate_series(1, 60) g;\n",
            random_bytes("g")
        );
    }
    // c_default takes the server's default_toast_compression: pglz before 19, lz4 from 19 on
    // (built with lz4, as these builds are).
    for (method, clause) in [
        ("pglz", " COMPRESSION pglz"),
        ("lz4", " COMPRESSION lz4"),
        ("default", ""),
    ] {
        sql += &format!(
            "CREATE TABLE c_{method} (id int, v text{clause});
             INSERT INTO c_{method} SELECT g, {} FROM generate_series(1, 40) g;
             DELETE FROM c_{method} WHERE id % 4 = 0;\n",
            compressible_text("g")
        );
    }
    // Churn: deleted rows (their chunks stay until VACUUM), updates that keep the value (the
    // dead and the live version share it) and that replace it, an aborted insert.
    sql += &format!(
        "DELETE FROM t_ok WHERE id % 5 = 0;
         UPDATE t_ok SET note = 'kept' WHERE id % 5 = 1;
         BEGIN;
         INSERT INTO t_ok SELECT 1000 + g, 'aborted', {} FROM generate_series(1, 5) g;
         ROLLBACK;
         UPDATE t_ok SET payload = payload || '\\x00'::bytea WHERE id % 5 = 2;
         CHECKPOINT;",
        random_bytes("g")
    );
    sql
}

struct Fixture {
    cluster: Cluster,
    /// Per table: main fork path, TOAST fork path, `reltoastrelid`.
    rels: BTreeMap<&'static str, (String, String, u32)>,
}

impl Fixture {
    fn build(major: u32, checksums: bool) -> Fixture {
        let mut cluster = loaded::started(major, checksums);
        cluster
            .psql("postgres", &schema_sql())
            .expect("load schema");
        let default_method = if major >= 19 { "lz4" } else { "pglz" };
        for (table, method) in [
            ("pglz", "pglz"),
            ("lz4", "lz4"),
            ("default", default_method),
        ] {
            let n = cluster
                .query_value(
                    "postgres",
                    &format!("SELECT count(*) FROM c_{table} WHERE pg_column_compression(v) = '{method}' AND pg_column_size(v) > 2100"),
                )
                .expect("count compressed values");
            assert_eq!(
                n, "30",
                "PostgreSQL {major}: c_{table}'s values must be {method}-compressed and external"
            );
        }
        let mut rels = BTreeMap::new();
        for t in TABLES {
            let q = |sql: String| cluster.query_value("postgres", &sql).expect(&sql);
            let main = q(format!("SELECT pg_relation_filepath('{t}')"));
            let toast = q(format!(
                "SELECT pg_relation_filepath(reltoastrelid) FROM pg_class WHERE oid = '{t}'::regclass"
            ));
            let oid = q(format!(
                "SELECT reltoastrelid FROM pg_class WHERE oid = '{t}'::regclass"
            ));
            rels.insert(t, (main, toast, oid.parse().expect("oid")));
        }
        cluster.stop().expect("stop");
        Fixture { cluster, rels }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.cluster.datadir().join(rel)
    }
}

/// One chunk tuple of a TOAST relation.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    block: u64,
    offnum: u16,
    lp_off: usize,
    lp_len: usize,
    /// Where the tuple's data starts in the page (`lp_off + t_hoff`).
    data: usize,
    valueid: u32,
    seq: u32,
}

/// One TOAST pointer of a live main tuple.
#[derive(Debug, Clone, Copy)]
struct Pointer {
    block: u64,
    offnum: u16,
    /// Where its `varatt_external` starts in the page.
    at: usize,
    valueid: u32,
}

fn blocks(path: &Path) -> u64 {
    std::fs::metadata(path).expect("relation file").len() / BLCKSZ as u64
}

/// The normal tuples of every page of a relation: (block, offnum, lp_off, lp_len, page).
fn tuples(path: &Path) -> Vec<(u64, u16, usize, usize, Vec<u8>)> {
    let mut out = Vec::new();
    for b in 0..blocks(path) {
        let page = corrupt::read_block(path, b, BLCKSZ).expect("read block");
        let Some(h) = PageHeader::parse(&page) else {
            continue;
        };
        for lp in line_pointers(&page, &h) {
            if lp.lp_flags == LpFlags::Normal {
                out.push((
                    b,
                    lp.offnum,
                    lp.lp_off as usize,
                    lp.lp_len as usize,
                    page.clone(),
                ));
            }
        }
    }
    out
}

fn chunks(path: &Path) -> Vec<Chunk> {
    tuples(path)
        .into_iter()
        .map(|(block, offnum, lp_off, lp_len, page)| {
            let h = HeapTupleHeader::parse(&page[lp_off..lp_off + lp_len]).expect("header");
            let data = lp_off + h.t_hoff as usize;
            Chunk {
                block,
                offnum,
                lp_off,
                lp_len,
                data,
                valueid: u32_at(&page, data),
                seq: u32_at(&page, data + 4),
            }
        })
        .collect()
}

/// The pointers naming `toastrelid` in a table's tuples (found by their `VARTAG_ONDISK`
/// header and TOAST relation id).
fn pointers(path: &Path, toastrelid: u32) -> Vec<Pointer> {
    let mut out = Vec::new();
    for (block, offnum, lp_off, lp_len, page) in tuples(path) {
        let t = &page[lp_off..lp_off + lp_len];
        for i in 24..=t.len().saturating_sub(18) {
            if t[i] == 0x01 && t[i + 1] == 18 && u32_at(t, i + 14) == toastrelid {
                out.push(Pointer {
                    block,
                    offnum,
                    at: lp_off + i + 2,
                    valueid: u32_at(t, i + 10),
                });
            }
        }
    }
    out
}

/// A full-size middle chunk (not the first or last of its six) of a value a live row points
/// at, whose predecessor is on the same page; from the middle of the relations, so that
/// neither is at block 0.
fn middle_chunk(all: &[Chunk], live: &[Pointer]) -> (Chunk, Pointer) {
    let later = |c: &&Chunk| live.iter().any(|p| p.valueid == c.valueid && p.block > 0);
    for c in all
        .iter()
        .filter(|c| (2..=4).contains(&c.seq) && c.block > 0)
        .filter(later)
    {
        let Some(p) = live.iter().find(|p| p.valueid == c.valueid) else {
            continue;
        };
        let prev = all
            .iter()
            .find(|x| x.valueid == c.valueid && x.seq == c.seq - 1);
        if prev.is_some_and(|x| x.block == c.block) {
            return (*c, *p);
        }
    }
    panic!("no middle chunk with its predecessor on the same page");
}

/// One injected case: the finding it must give.
#[derive(Debug)]
struct Case {
    name: &'static str,
    table: &'static str,
    kind: &'static str,
    file: String,
    block: u64,
    /// The main tuple in `detail` (block, offset), when the finding is at the TOAST page.
    main: Option<(u64, u16)>,
    valueid: u32,
}

fn inject(fx: &Fixture) -> Vec<Case> {
    let mut cases = Vec::new();
    let rel = |t: &str| fx.rels[t].clone();

    // A chunk's line pointer marked dead (as pruning leaves it): the chunk is gone.
    let (main, toast, oid) = rel("t_del");
    let path = fx.path(&toast);
    let (c, p) = middle_chunk(&chunks(&path), &pointers(&fx.path(&main), oid));
    edit(&path, c.block, |pg| {
        put_u32(pg, 24 + 4 * (c.offnum as usize - 1), 3 << 15);
    });
    cases.push(Case {
        name: "chunk's line pointer marked dead (chunk missing)",
        table: "t_del",
        kind: "toast_value_invalid",
        file: toast,
        block: c.block,
        main: Some((p.block, p.offnum)),
        valueid: c.valueid,
    });

    // A chunk's chunk_seq set to its predecessor's: a duplicate, and its own number missing.
    let (main, toast, oid) = rel("t_dup");
    let path = fx.path(&toast);
    let (c, p) = middle_chunk(&chunks(&path), &pointers(&fx.path(&main), oid));
    edit(&path, c.block, |pg| put_u32(pg, c.data + 4, c.seq - 1));
    cases.push(Case {
        name: "chunk_seq equal to its neighbour's (duplicate chunk)",
        table: "t_dup",
        kind: "toast_value_invalid",
        file: toast,
        block: c.block,
        main: Some((p.block, p.offnum)),
        valueid: c.valueid,
    });

    // A chunk 100 bytes short: its varlena header and line pointer both shrink, so the page
    // stays consistent.
    let (main, toast, oid) = rel("t_short");
    let path = fx.path(&toast);
    let (c, p) = middle_chunk(&chunks(&path), &pointers(&fx.path(&main), oid));
    edit(&path, c.block, |pg| {
        let header = u32_at(pg, c.data + 8);
        put_u32(pg, c.data + 8, header - (100 << 2));
        let lp = (c.lp_off as u32) | (1 << 15) | (((c.lp_len - 100) as u32) << 17);
        put_u32(pg, 24 + 4 * (c.offnum as usize - 1), lp);
    });
    cases.push(Case {
        name: "chunk 100 bytes short",
        table: "t_short",
        kind: "toast_value_invalid",
        file: toast,
        block: c.block,
        main: Some((p.block, p.offnum)),
        valueid: c.valueid,
    });

    // A pointer's va_valueid changed to a value that does not exist: no chunk at all, so the
    // finding is at the table's page.
    let (main, _, oid) = rel("t_vid");
    let path = fx.path(&main);
    let p = pointers(&path, oid)[37];
    assert!(p.block > 0, "{p:?}");
    edit(&path, p.block, |pg| put_u32(pg, p.at + 8, 4_000_000_000));
    cases.push(Case {
        name: "pointer's va_valueid names no value",
        table: "t_vid",
        kind: "toast_value_invalid",
        file: main,
        block: p.block,
        main: None,
        valueid: 4_000_000_000,
    });

    // A pointer's va_toastrelid changed: the standard level's finding, and no other.
    let (main, _, oid) = rel("t_rel");
    let path = fx.path(&main);
    let p = pointers(&path, oid)[37];
    assert!(p.block > 0, "{p:?}");
    edit(&path, p.block, |pg| put_u32(pg, p.at + 12, oid + 1));
    cases.push(Case {
        name: "pointer's va_toastrelid names another relation",
        table: "t_rel",
        kind: "toast_pointer_invalid",
        file: main,
        block: p.block,
        main: None,
        valueid: p.valueid,
    });
    // The TOAST file of t_ok cut in the middle of its last page, which holds chunks of the
    // last replaced (live) values: that page is a partial block, never read, so its chunks are
    // not called missing.
    let (_, toast, _) = rel("t_ok");
    let path = fx.path(&toast);
    let len = std::fs::metadata(&path).expect("toast file").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open toast file");
    file.set_len(len - 4096).expect("truncate");
    cases.push(Case {
        name: "TOAST file cut mid-page (chunks unreadable, not missing)",
        table: "t_ok",
        kind: "partial_block",
        file: toast.clone(),
        block: len / BLCKSZ as u64 - 1,
        main: None,
        valueid: 0,
    });
    // The server ignores the partial page, so the TOAST index's entries for its chunks point
    // past the end of the TOAST table: the index -> heap check calls that a lost write.
    cases.push(Case {
        name: "TOAST index entries past the cut (lost write)",
        table: "t_ok",
        kind: "lost_write",
        file: toast,
        block: len / BLCKSZ as u64 - 1,
        main: None,
        valueid: 0,
    });
    cases
}

/// Errors and warnings as (file, block, kind). `index_entry_missing` is left out: a chunk whose
/// `chunk_seq` was changed also lacks its entry in the TOAST index (heap -> index, tested in
/// extended_allindexed.rs).
fn problems(run: &Run) -> BTreeSet<Place> {
    run.problem_places_except("index_entry_missing")
}

fn scenario(major: u32, checksums: bool) {
    let fx = Fixture::build(major, checksums);
    let datadir = fx.cluster.datadir().to_path_buf();

    // Healthy, with deleted rows and an aborted insert left unvacuumed: no error or warning,
    // the values were checked, the leftover chunks are one info per TOAST relation.
    let clean = verify_extended(&datadir, &[]);
    // 6 tables x 60 rows, less 12 deleted, plus 3 x 30 compressed values.
    let minimums = [
        ("toast_relations_checked", 9),
        ("toast_values_checked", 6 * 60 - 12 + 90),
    ];
    assert_healthy_extended(&clean, major, &minimums);
    let ok_toast = &fx.rels["t_ok"].1;
    let info = clean
        .find_in("toast_chunks_unreferenced", ok_toast)
        .unwrap_or_else(|| panic!("no unreferenced-chunk info for t_ok's TOAST\n{clean}"));
    assert_eq!(info["severity"], "info", "{info}");
    // 12 deleted rows, 12 replaced values, 5 aborted rows: 29 values of six chunks.
    assert_eq!(info["detail"]["values"], 29, "{info}");
    assert_eq!(info["detail"]["chunks"], 29 * 6, "{info}");
    let infos = clean.of_kind("toast_chunks_unreferenced").len();
    assert_eq!(
        infos, 4,
        "one info per TOAST relation with leftovers (t_ok, c_pglz, c_lz4, c_default)\n{clean}"
    );

    let cases = inject(&fx);
    let run = verify_extended(&datadir, &[]);
    assert_eq!(run.status, 2, "PostgreSQL {major}: damaged cluster\n{run}");
    let expected: BTreeSet<Place> = cases
        .iter()
        .map(|c| (c.file.clone(), c.block, c.kind.to_string()))
        .collect();
    assert_eq!(problems(&run), expected, "PostgreSQL {major}\n{run}");
    for c in &cases {
        let f = run.find_at(c.kind, &c.file, c.block).expect("found above");
        assert_eq!(f["database"]["name"], "postgres", "{f}");
        if c.kind != "toast_value_invalid" {
            continue;
        }
        assert_eq!(f["detail"]["va_valueid"], c.valueid, "{}: {f}", c.name);
        let message = f["message"].as_str().unwrap_or("");
        assert!(message.contains(&format!("public.{}", c.table)), "{f}");
        assert!(message.contains(&c.valueid.to_string()), "{f}");
        assert_eq!(f["detail"]["main_attnum"], 3, "{f}");
        match c.main {
            Some((block, offset)) => {
                assert_eq!(f["detail"]["main_block"], block, "{}: {f}", c.name);
                assert_eq!(f["detail"]["main_offset"], offset, "{}: {f}", c.name);
            }
            None => assert_eq!(f["attnum"], 3, "{f}"),
        }
    }

    // The same when the facts spill to disk.
    let (small, _temp) = verify_spilled(&datadir, "256k");
    assert_eq!(
        problems(&small),
        expected,
        "PostgreSQL {major}: with spills\n{small}"
    );

    let hits = amcheck_hits(fx, &cases);
    let heading =
        format!("PostgreSQL {major} (checksums {checksums}): case | pgcheckdb | pg_amcheck");
    let rows = cases
        .iter()
        .map(|c| (c.name, c.kind, amcheck::yes_no(hits.contains(c.table))));
    amcheck::print_table(&heading, 52, rows);
    for t in ["t_del", "t_dup", "t_short", "t_vid", "t_ok"] {
        assert!(
            hits.contains(t),
            "PostgreSQL {major}: pg_amcheck missed {t}"
        );
    }
}

/// Runs `pg_amcheck --heapallindexed --parent-check` on the started damaged cluster (TOAST
/// checked with the tables); returns the tables it reports.
fn amcheck_hits(mut fx: Fixture, cases: &[Case]) -> BTreeSet<&'static str> {
    let text = amcheck::on_stopped(&mut fx.cluster, &amcheck::HEAPALLINDEXED);
    cases
        .iter()
        .filter(|c| amcheck::names(&text, c.table))
        .map(|c| c.table)
        .collect()
}
