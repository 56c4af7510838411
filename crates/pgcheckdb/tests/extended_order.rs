//! Key order across B-tree pages at the extended level, on real clusters of PostgreSQL 14–19
//! (checksums on and off).
//!
//! Five indexes of three levels (fillfactor 10 spreads 20,000 rows over many leaves): int4,
//! text in collation "C", text in the libc collation `en_US.utf8`, `(int4, text)` and
//! `int4 DESC`. Each page stays sorted inside itself, so the standard level sees nothing; only
//! the comparison of keys on two pages can:
//!
//! * (a) the first data item of a leaf B (not the leftmost) gets the key of its left sibling
//!   A's first item: B is still sorted and below its high key, but its first key now sorts
//!   before A's last key and high key (reported at B, `other_block` A) and before B's
//!   separator in the parent (reported at the parent, `other_block` B);
//! * (b) the separator (pivot) of a leaf C in its parent P is raised to C's last key: P is
//!   still sorted, but the separator sorts after C's first key (reported at P, `other_block`
//!   C).
//!
//! Each case is injected alone (the pages are restored between them, and the restored cluster
//! is clean again), checked at `--level extended` (found) and `--level standard` (silent), and
//! `pg_amcheck --parent-check` (`bt_index_parent_check`) is run on a started copy for the
//! comparison in docs/CHECKS.md. A churned table with the same kinds of indexes (random
//! inserts and page splits, non-HOT updates and duplicates that deduplicate into posting
//! lists, deletes, VACUUM with page deletion) must give no finding at the extended level.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use pgcheckdb_pg::format::btree::P_NONE;
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::locale::ensure_libc_locale;
use pgcheckdb_testkit::{amcheck, Cluster};

use common::btree::{level_chain, meta, pages, Page};
use common::{verify_level, write_block};

/// The injected indexes (on table `x`).
const INDEXES: [&str; 5] = ["x_int", "x_text_c", "x_text_libc", "x_multi", "x_desc"];

/// Bytes of an index tuple before its key data (`IndexTupleData`, no null bitmap).
const KEY_FROM: usize = 8;

fn schema_sql() -> String {
    let columns = "id int NOT NULL, m int NOT NULL, tc text COLLATE \"C\" NOT NULL, \
                   tl text COLLATE en_us NOT NULL";
    // 32-character keys whose case alternates: the libc order differs from byte order, and
    // every key has the same length, so one key can be copied over another in place.
    let rows = |from: u32, to: u32| {
        format!(
            "SELECT g, g % 5000, s, s FROM (SELECT g, CASE WHEN g % 2 = 0 \
             THEN upper(md5(g::text)) ELSE md5(g::text) END AS s \
             FROM generate_series({from}, {to}) g) v ORDER BY random()"
        )
    };
    let indexes = |t: &str, ff: &str| {
        format!(
            "CREATE INDEX {t}_int ON {t} (id){ff};
             CREATE INDEX {t}_text_c ON {t} (tc){ff};
             CREATE INDEX {t}_text_libc ON {t} (tl){ff};
             CREATE INDEX {t}_multi ON {t} (m, tc){ff};
             CREATE INDEX {t}_desc ON {t} (id DESC){ff};\n"
        )
    };
    let ff = " WITH (fillfactor = 10)";
    let mut sql = format!(
        "CREATE COLLATION en_us (provider = libc, locale = '{LIBC_LOCALE}');
         CREATE TABLE x ({columns});
         INSERT INTO x {};\n",
        rows(1, 20000)
    );
    sql += &indexes("x", ff);
    // The churned, healthy table.
    sql += &format!(
        "CREATE TABLE h ({columns});\nINSERT INTO h {};\n",
        rows(1, 20000)
    );
    sql += &indexes("h", ff);
    sql += "CREATE INDEX h_dup ON h ((id % 20));\n";
    sql += &format!("INSERT INTO h {};\n", rows(20001, 50000));
    sql += "UPDATE h SET m = m + 1 WHERE id % 5 = 0;
            DELETE FROM h WHERE id BETWEEN 30000 AND 36000;
            VACUUM h;
            INSERT INTO h SELECT id, m, tc, tl FROM h WHERE id % 3 = 0;
            UPDATE h SET tl = lower(tl) WHERE id % 11 = 0;
            DELETE FROM h WHERE id % 13 = 0 OR id BETWEEN 5000 AND 9000;
            VACUUM h;\n";
    sql
}

/// The libc locale whose order differs from byte order.
const LIBC_LOCALE: &str = "en_US.utf8";

/// Copies `from[KEY_FROM..upto]` over the item at `offnum` of `page` (its header, and so its
/// heap TID or downlink, stays).
fn set_key(page: &mut Page, offnum: usize, from: &[u8], upto: usize) {
    let (off, len) = page.items()[offnum - 1];
    assert!(upto <= len && upto <= from.len(), "key fits the item");
    page.bytes[off + KEY_FROM..off + upto].copy_from_slice(&from[KEY_FROM..upto]);
}

/// One expected finding: block, kind, and the block `detail.other_block` must name.
type Expect = (u64, &'static str, Option<u64>);

/// One injected case in one index: the pages it changed (original bytes) and the findings.
struct Injected {
    index: &'static str,
    originals: Vec<(u64, Vec<u8>)>,
    order: Vec<Expect>,
    also: Vec<Expect>,
}

/// (a) Leaf B (a non-first child of the leftmost level-1 page, so B has a separator) gets its
/// left sibling A's first key as its own first key.
fn leaf_first_key_low(path: &Path, index: &'static str, checksums: bool) -> Injected {
    let ps = pages(path);
    let parents = level_chain(&ps, 1);
    let parent = &parents[0];
    let off = parent.first_data() + 2;
    let b_blk = u64::from(parent.downlink(off));
    let a_blk = u64::from(parent.downlink(off - 1));
    let by = |b: u64| ps.iter().find(|p| p.blkno == b).expect("page").clone();
    let (a, mut b) = (by(a_blk), by(b_blk));
    assert!(b.opaque.is_leaf() && b.opaque.btpo_prev as u64 == a_blk && b.live());
    let (a_first, b_first) = (a.item(a.first_data()).to_vec(), b.first_data());
    assert_eq!(
        a_first.len(),
        b.item(b_first).len(),
        "{index}: same-size items"
    );
    let original = b.bytes.clone();
    set_key(&mut b, b_first, &a_first, a_first.len());
    write_block(path, b_blk, &b.bytes, checksums);
    Injected {
        index,
        originals: vec![(b_blk, original)],
        order: vec![
            (b_blk, "btree_order_invalid", Some(a_blk)),
            (parent.blkno, "btree_order_invalid", Some(b_blk)),
        ],
        also: vec![],
    }
}

/// (b) The separator of leaf C in the rightmost level-1 page P is raised to C's last key.
fn separator_high(path: &Path, index: &'static str, checksums: bool) -> Injected {
    let ps = pages(path);
    let parents = level_chain(&ps, 1);
    let mut parent = parents.last().expect("a level-1 page").clone();
    assert!(parents.len() >= 2, "{index}: three levels");
    let by = |b: u64| ps.iter().find(|p| p.blkno == b).expect("page").clone();
    let last = parent.items().len();
    for off in parent.first_data() + 2..last {
        let child = by(u64::from(parent.downlink(off)));
        if !child.opaque.is_leaf() || !child.live() || child.opaque.btpo_next == P_NONE {
            continue;
        }
        let (first, last_item) = (
            child.item(child.first_data()),
            child.item(child.items().len()),
        );
        let pivot_len = parent.item(off).len();
        // An untruncated pivot takes the whole key; one truncated to its leading int4 column
        // (only in the multi-column index) takes that column.
        let upto = match pivot_len == last_item.len() {
            true => pivot_len,
            false => KEY_FROM + 4,
        };
        if first.len() != last_item.len() || first[KEY_FROM..upto] == last_item[KEY_FROM..upto] {
            continue;
        }
        let last_item = last_item.to_vec();
        let original = parent.bytes.clone();
        set_key(&mut parent, off, &last_item, upto);
        write_block(path, parent.blkno, &parent.bytes, checksums);
        return Injected {
            index,
            originals: vec![(parent.blkno, original)],
            order: vec![(parent.blkno, "btree_order_invalid", Some(child.blkno))],
            // The left sibling's high key no longer equals its next separator.
            also: vec![(parent.blkno, "btree_downlink_invalid", None)],
        };
    }
    panic!("{index}: no separator to raise");
}

/// `pg_amcheck --parent-check` on a started copy: the indexes it reports.
fn amcheck_parent(c: &mut Cluster) -> BTreeSet<&'static str> {
    amcheck::reported_among(c, &amcheck::btree_only(true), INDEXES)
}

/// Asserts a healthy, fully order-checked extended run.
fn assert_clean(c: &Cluster, what: &str) {
    let run = verify_level(c.datadir(), "extended");
    assert_eq!(run.status, 0, "{what}\n{run}");
    assert!(run.problems().is_empty(), "{what}\n{run}");
    let ext = run.extended();
    assert!(ext["indexes_checked"].as_u64().unwrap_or(0) >= 11, "{ext}");
    assert_eq!(ext["keys_not_order_checked"], 0, "{what}: {ext}");
}

fn scenario(major: u32, checksums: bool) {
    ensure_libc_locale();
    let (mut c, rels) = loaded_cluster(major, checksums, &schema_sql(), &INDEXES);
    for rel in &rels {
        let meta = meta(&c.datadir().join(rel));
        assert!(meta.btm_level >= 2, "{rel}: three levels ({meta:?})");
    }
    // (c) healthy, churned and three levels deep: nothing at the extended level.
    assert_clean(&c, &format!("PostgreSQL {major}: healthy"));

    type Inject = fn(&Path, &'static str, bool) -> Injected;
    let cases: [(&str, Inject); 2] = [
        ("leaf first key below left sibling", leaf_first_key_low),
        ("separator above child's first key", separator_high),
    ];
    eprintln!("PostgreSQL {major} (checksums {checksums}): case | index | extended | standard | pg_amcheck --parent-check");
    for (name, inject) in cases {
        let done: Vec<Injected> = INDEXES
            .iter()
            .zip(&rels)
            .map(|(i, rel)| inject(&c.datadir().join(rel), i, checksums))
            .collect();
        let what = format!("PostgreSQL {major}: {name}");
        let run = verify_level(c.datadir(), "extended");
        assert_eq!(run.status, 2, "{what}\n{run}");
        let mut expected = BTreeSet::new();
        let mut allowed = BTreeSet::new();
        for (d, rel) in done.iter().zip(&rels) {
            for (block, kind, other) in &d.order {
                let f = run.find_at(kind, rel, *block).unwrap_or_else(|| {
                    panic!(
                        "{what}: {kind} not found in {} block {block}\n{run}",
                        d.index
                    )
                });
                assert_eq!(f["relation"]["name"], format!("public.{}", d.index), "{f}");
                assert_eq!(
                    f["detail"]["other_block"],
                    other.expect("other"),
                    "{what}: {f}"
                );
                expected.insert((rel.clone(), *block, kind.to_string()));
            }
            for (block, kind, _) in &d.also {
                allowed.insert((rel.clone(), *block, kind.to_string()));
            }
        }
        // `index_entry_missing` is left out: a changed key also leaves its row without an entry
        // with its real key (heap -> index, tested in extended_allindexed.rs).
        let got = run.problem_places_except("index_entry_missing");
        let missing: Vec<_> = expected.difference(&got).collect();
        let extra: Vec<_> = got
            .difference(&expected)
            .filter(|k| !allowed.contains(*k))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{what}: missing {missing:#?}, unexpected {extra:#?}\n{run}"
        );

        // Each page is sorted in itself: the standard level has nothing to say.
        let standard = verify_level(c.datadir(), "standard");
        assert_eq!(standard.status, 0, "{what}: standard level\n{standard}");

        let amcheck = amcheck_parent(&mut c);
        for d in &done {
            eprintln!(
                "  {name:<36} | {:<12} | yes | no | {}",
                d.index,
                if amcheck.contains(d.index) {
                    "yes"
                } else {
                    "no"
                }
            );
            assert!(
                amcheck.contains(d.index),
                "{what}: pg_amcheck --parent-check was expected to report {}",
                d.index
            );
        }
        for (d, rel) in done.iter().zip(&rels) {
            for (blkno, bytes) in &d.originals {
                write_block(&c.datadir().join(rel), *blkno, bytes, checksums);
            }
        }
        assert_clean(&c, &format!("{what}: restored"));
    }
}

pgcheckdb_testkit::version_tests! {
    scenario;
    cross_page_order_pg14_checksums(14, true),
    cross_page_order_pg15_no_checksums(15, false),
    cross_page_order_pg16_checksums(16, true),
    cross_page_order_pg17_no_checksums(17, false),
    cross_page_order_pg18_checksums(18, true),
    cross_page_order_pg18_no_checksums(18, false),
    cross_page_order_pg19_checksums(19, true),
    cross_page_order_pg19_no_checksums(19, false),
}
