//! Heap -> index at the extended level: every live heap tuple has an entry with its TID and key
//! in each B-tree index of its table. On a real churned cluster of every supported version
//! (HOT and non-HOT updates, deletes left unvacuumed, posting lists, `name` columns, INCLUDE
//! columns, compressed keys, a column added with a default), verify must report nothing and
//! say which indexes it could not check (expression, partial) and which tuples (a key value
//! only in `pg_attribute`). Then entries are taken away (an index item marked dead, a TID
//! rewritten, a heap value changed; checksum recomputed) and each lacking entry must be found
//! at the heap page of its tuple with the index named; a page of an index damaged beyond its
//! own checks makes that index "not checked" rather than a flood of false findings. The same
//! cases go through `pg_amcheck --heapallindexed` on a started copy.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pgcheckdb_pg::format::btree::{BtPageOpaque, P_NONE};
use pgcheckdb_pg::format::itemid::line_pointers;
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::amcheck;
use pgcheckdb_testkit::amcheck::{print_table, yes_no};
use pgcheckdb_testkit::asserts::assert_clean;
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::{Cluster, BLCKSZ};

use common::{edit, verify_extended};

pgcheckdb_testkit::version_tests! {
    scenario;
    heap_to_index_pg14_checksums(14, true),
    heap_to_index_pg15_no_checksums(15, false),
    heap_to_index_pg16_checksums(16, true),
    heap_to_index_pg17_no_checksums(17, false),
    heap_to_index_pg18_checksums(18, true),
    heap_to_index_pg19_no_checksums(19, false),
}

const SCHEMA: &str = "
    CREATE TABLE h (id int PRIMARY KEY, name text, note text, tag name, n numeric, big text);
    INSERT INTO h SELECT g, 'name ' || g, repeat('n', g % 40), ('tag' || (g % 10))::name, g * 1.5,
        CASE WHEN g % 50 = 0 THEN repeat(md5(g::text), 100) END
      FROM generate_series(1, 6000) g;
    CREATE INDEX h_name ON h (name);
    CREATE INDEX h_tag_n ON h (tag, n) INCLUDE (note);
    CREATE INDEX h_big ON h (big);
    CREATE INDEX h_expr ON h ((id % 10));
    CREATE INDEX h_part ON h (id) WHERE id > 100;
    CREATE TABLE p (v int, w int);
    INSERT INTO p SELECT g % 20, g FROM generate_series(1, 20000) g;
    CREATE INDEX p_v ON p (v);
    ALTER TABLE h ADD COLUMN y int DEFAULT 5;
    CREATE INDEX h_y ON h (y);
    UPDATE h SET note = note || 'x' WHERE id % 3 = 0;
    UPDATE h SET big = NULL WHERE id % 100 = 0;
    UPDATE h SET name = name || '!' WHERE id % 11 = 0;
    UPDATE h SET y = 6 WHERE id % 17 = 0;
    DELETE FROM h WHERE id % 13 = 0;
    UPDATE p SET w = -w WHERE w % 9 = 0;
    DELETE FROM p WHERE w % 7 = 0;
    VACUUM p;
    ANALYZE h;
";

struct Fixture {
    cluster: Cluster,
    major: u32,
}

impl Fixture {
    fn build(major: u32, checksums: bool) -> Fixture {
        let (cluster, _) = loaded_cluster(major, checksums, SCHEMA, &[]);
        Fixture { cluster, major }
    }

    fn path(&self, name: &str) -> PathBuf {
        let rel = self
            .cluster
            .relation_filepath("postgres", name)
            .expect("relation path");
        self.cluster.datadir().join(rel)
    }

    fn rel(&self, name: &str) -> String {
        self.cluster
            .relation_filepath("postgres", name)
            .expect("relation path")
    }

    /// `(block, offset)` of the live row `id` of `h`.
    fn ctid(&self, id: u32) -> (u32, u16) {
        let v = self
            .cluster
            .query_value("postgres", &format!("SELECT ctid FROM h WHERE id = {id}"))
            .expect("ctid");
        let (b, o) = v
            .trim_matches(|c| c == '(' || c == ')')
            .split_once(',')
            .expect("ctid (b,o)");
        (b.parse().expect("block"), o.parse().expect("offset"))
    }
}

/// The leaf item of the B-tree at `path` whose plain `t_tid` is `tid`: (block, line pointer
/// byte offset, item offset).
fn leaf_item_with_tid(path: &Path, tid: (u32, u16)) -> (u64, usize, usize) {
    let len = std::fs::metadata(path).expect("index file").len();
    for b in 1..len / BLCKSZ as u64 {
        let page = corrupt::read_block(path, b, BLCKSZ).expect("read");
        let Some(h) = PageHeader::parse(&page) else {
            continue;
        };
        let Some(o) = BtPageOpaque::parse(&page, h.pd_special as usize) else {
            continue;
        };
        if !o.is_leaf() {
            continue;
        }
        let first = if o.btpo_next == P_NONE { 1 } else { 2 };
        for lp in line_pointers(&page, &h)
            .iter()
            .filter(|l| l.offnum >= first)
        {
            let at = lp.lp_off as usize;
            let t_info = u16::from_le_bytes([page[at + 6], page[at + 7]]);
            if t_info & 0x2000 != 0 {
                continue; // posting list or pivot
            }
            let hi = u16::from_le_bytes([page[at], page[at + 1]]) as u32;
            let lo = u16::from_le_bytes([page[at + 2], page[at + 3]]) as u32;
            let off = u16::from_le_bytes([page[at + 4], page[at + 5]]);
            if ((hi << 16) | lo, off) == tid {
                return (b, 24 + 4 * (lp.offnum as usize - 1), at);
            }
        }
    }
    panic!("no leaf entry with TID {tid:?} in {}", path.display());
}

/// One lacking entry: the heap tuple and the index that must be named.
struct Case {
    name: &'static str,
    index: &'static str,
    tid: (u32, u16),
}

/// Where case 2's rewritten entry lies, and the live row it names now.
struct Moved {
    index_block: u64,
    names: (u32, u16),
}

fn inject(fx: &mut Fixture) -> (Vec<Case>, Moved) {
    // Rows untouched by the churn (not multiples of 3, 11, 13, 17, 50).
    let (a, b, c) = (fx.ctid(101), fx.ctid(1004), fx.ctid(2005));
    let d = fx.ctid(1007);
    let (h_name, h_tag_n, heap) = (fx.path("h_name"), fx.path("h_tag_n"), fx.path("h"));
    // The damaged-page case: a leaf of h_big gets a torn line pointer array.
    let big = fx.path("h_big");
    fx.cluster.stop().expect("stop");

    // 1. The h_name entry of row 101 marked dead (`lp_flags`, bits 15-16 of the line
    // pointer, set to LP_DEAD).
    let (blk, lp_at, _) = leaf_item_with_tid(&h_name, a);
    edit(&h_name, blk, |p| {
        let word = u32::from_le_bytes(p[lp_at..lp_at + 4].try_into().unwrap());
        let word = (word & !(0x3 << 15)) | (3 << 15);
        p[lp_at..lp_at + 4].copy_from_slice(&word.to_le_bytes());
    });
    // 2. The h_tag_n entry of row 1004 points at row 1007 instead (`ip_blkid` as `bi_hi`,
    // `bi_lo`, then `ip_posid`), a live row with an entry of its own.
    let (blk, _, at) = leaf_item_with_tid(&h_tag_n, b);
    let moved = Moved {
        index_block: blk,
        names: d,
    };
    edit(&h_tag_n, blk, |p| {
        p[at..at + 2].copy_from_slice(&((d.0 >> 16) as u16).to_le_bytes());
        p[at + 2..at + 4].copy_from_slice(&(d.0 as u16).to_le_bytes());
        p[at + 4..at + 6].copy_from_slice(&d.1.to_le_bytes());
    });
    // 3. Row 2005's id in the heap becomes 2_000_005: its primary-key entry (key 2005) no
    // longer matches, so the tuple lacks an entry in h_pkey.
    edit(&heap, u64::from(c.0), |p| {
        let h = PageHeader::parse(p).expect("heap header");
        let lp = line_pointers(p, &h)
            .into_iter()
            .find(|l| l.offnum == c.1)
            .expect("line pointer");
        let t_hoff = p[lp.lp_off as usize + 22] as usize;
        let at = lp.lp_off as usize + t_hoff;
        assert_eq!(i32::from_le_bytes(p[at..at + 4].try_into().unwrap()), 2005);
        p[at..at + 4].copy_from_slice(&2_000_005i32.to_le_bytes());
    });
    // 4. A leaf page of h_big with an impossible pd_lower: its own finding, and no
    // conclusion about h_big's entries.
    edit(&big, 1, |p| {
        p[12..14].copy_from_slice(&8000u16.to_le_bytes())
    });
    let cases = vec![
        Case {
            name: "index entry marked dead",
            index: "h_name",
            tid: a,
        },
        Case {
            name: "index entry's TID rewritten",
            index: "h_tag_n",
            tid: b,
        },
        Case {
            name: "heap key value changed",
            index: "h_pkey",
            tid: c,
        },
    ];
    (cases, moved)
}

fn scenario(major: u32, checksums: bool) {
    let mut fx = Fixture::build(major, checksums);
    let datadir = fx.cluster.datadir().to_path_buf();

    let clean = verify_extended(&datadir, &["-v"]);
    assert_clean(&clean, &format!("PostgreSQL {major}: healthy cluster"));
    let ext = clean
        .summary()
        .get("extended")
        .cloned()
        .expect("extended summary");
    assert!(
        ext["all_indexed_checked"].as_u64().unwrap_or(0) >= 6,
        "{ext}"
    );
    assert!(
        ext["all_indexed_tuples"].as_u64().unwrap_or(0) > 30_000,
        "{ext}"
    );
    // Rows written before `y` was added keep its default in pg_attribute, not in the tuple.
    assert!(
        ext["all_indexed_tuples_not_checked"].as_u64().unwrap_or(0) > 1000,
        "{ext}"
    );
    assert!(
        ext["all_indexed_miss_chance"].as_f64().unwrap_or(1.0) < 0.05,
        "{ext}"
    );
    assert_eq!(ext["all_indexed_weak"], serde_json::json!([]), "{ext}");
    // With the default memory every table's sums fit: every index is checked exactly.
    assert_eq!(
        ext["all_indexed_exact"], ext["all_indexed_checked"],
        "{ext}"
    );
    let skipped: BTreeSet<String> = ext["all_indexed_skipped"]
        .as_array()
        .expect("verbose list of indexes not checked")
        .iter()
        .filter_map(|s| s["index"].as_str().map(str::to_string))
        .collect();
    for name in ["postgres: public.h_expr", "postgres: public.h_part"] {
        assert!(skipped.contains(name), "{name} must be listed: {skipped:?}");
    }

    fx.cluster.start().expect("start");
    let (cases, moved) = inject(&mut fx);
    let run = verify_extended(&datadir, &["-v"]);
    assert_eq!(run.status, 2, "PostgreSQL {major}: damaged\n{run}");
    fx.cluster.start().expect("start");
    let heap_rel = fx.rel("h");
    let big_rel = fx.rel("h_big");
    let tag_rel = fx.rel("h_tag_n");
    fx.cluster.stop().expect("stop");
    let lacking: Vec<&serde_json::Value> = run
        .findings
        .iter()
        .filter(|f| f["kind"] == "index_entry_missing")
        .collect();
    for c in &cases {
        let index = format!("postgres: public.{}", c.index);
        let hit = lacking.iter().find(|f| {
            f["file"] == heap_rel.as_str()
                && f["block"] == u64::from(c.tid.0)
                && f["detail"]["heap_offset"] == c.tid.1
                && f["detail"]["index"] == index.as_str()
        });
        let f = hit.unwrap_or_else(|| {
            panic!(
                "PostgreSQL {major}: \"{}\" not found at {heap_rel} {:?}\n{run}",
                c.name, c.tid
            )
        });
        assert_eq!(f["relation"]["name"], "public.h", "{f}");
        assert_eq!(f["severity"], "error", "{f}");
        // By sums the entry that still holds the old key is found too, at its index page.
        let other_key = &f["detail"]["entry_with_other_key"]["index_block"];
        assert_eq!(
            c.name == "heap key value changed",
            other_key.is_u64(),
            "{f}"
        );
    }
    assert_eq!(
        lacking.len(),
        cases.len(),
        "PostgreSQL {major}: exactly the cases\n{run}"
    );
    // The damaged h_big page is reported by its own check; h_big is then not judged.
    assert!(
        run.problems()
            .iter()
            .any(|f| f["file"] == big_rel.as_str() && f["block"] == 1),
        "{run}"
    );
    let ext = run
        .summary()
        .get("extended")
        .cloned()
        .expect("extended summary");
    let skipped = ext["all_indexed_skipped"].to_string();
    assert!(skipped.contains("public.h_big"), "{skipped}");
    // Case 2's entry now names row 1007, which has its own entry, with row 1004's key: by sums
    // that is seen too, at the h_tag_n leaf page, and nothing else is.
    let extras: Vec<&serde_json::Value> = run
        .findings
        .iter()
        .filter(|f| f["kind"] == "index_entry_extra")
        .collect();
    assert_eq!(
        extras.len(),
        1,
        "PostgreSQL {major}: one extra entry\n{run}"
    );
    let f = extras[0];
    assert_eq!(f["file"], tag_rel.as_str(), "{f}");
    assert_eq!(f["block"], moved.index_block, "{f}");
    assert_eq!(f["severity"], "error", "{f}");
    assert_eq!(f["detail"]["index"], "postgres: public.h_tag_n", "{f}");
    assert_eq!(f["detail"]["heap_block"], moved.names.0, "{f}");
    assert_eq!(f["detail"]["heap_offset"], moved.names.1, "{f}");

    // With too little memory for the sums of table h, its indexes are checked by Bloom
    // filters in what is left: filters too small to find much, and the summary says so. What
    // they find is what the sums found, never more.
    let small = verify_extended(&datadir, &["--memory", "40kB"]);
    assert_eq!(
        small.status, 2,
        "PostgreSQL {major}: damaged, --memory 40kB\n{small}"
    );
    // The filters 20 kB leaves are too small to count as checks (a chance of 50 % or more to
    // miss a lacking entry): the indexes are counted as not checked, and listed as weak.
    let small_ext = small.summary().get("extended").cloned().expect("summary");
    assert!(
        small_ext["all_indexed_not_checked"].as_u64() > ext["all_indexed_not_checked"].as_u64(),
        "{small_ext}"
    );
    let h_name = small_ext["all_indexed_weak"]
        .as_array()
        .and_then(|w| w.iter().find(|f| f["index"] == "postgres: public.h_name"))
        .cloned()
        .unwrap_or_default();
    assert!(
        h_name["miss_chance"].as_f64().unwrap_or(0.0) > 0.05,
        "{small_ext}"
    );
    // Listed without --verbose, and said in the text's closing sentence too.
    let weak = small_ext["all_indexed_weak"].to_string();
    assert!(weak.contains("public.h_name"), "{weak}");
    let text = pgcheckdb_testkit::run::pgcheckdb(
        &common::bin(),
        &[
            "verify",
            "-D",
            &datadir.to_string_lossy(),
            "--level",
            "extended",
            "--memory",
            "64kB",
        ],
        None,
    );
    assert!(
        (text.stdout.clone() + &text.stderr).contains("ran weakened by --memory"),
        "the text says the check ran weakened\n{text}"
    );
    // Ten bytes are refused, with the minimum.
    let tiny = verify_extended(&datadir, &["--memory", "10"]);
    assert_eq!(tiny.status, 1, "{tiny}");
    assert!(tiny.stderr.contains("at least 32kB"), "{tiny}");
    let lacking_of = |r: &pgcheckdb_testkit::run::Run| -> BTreeSet<String> {
        r.findings
            .iter()
            .filter(|f| f["kind"] == "index_entry_missing")
            .map(|f| {
                format!(
                    "{} {} {}",
                    f["block"], f["detail"]["heap_offset"], f["detail"]["index"]
                )
            })
            .collect()
    };
    assert!(lacking_of(&small).is_subset(&lacking_of(&run)), "{small}");

    // pg_amcheck --heapallindexed on a started copy of the damaged cluster.
    fx.cluster.start().expect("start");
    let (_, text) = amcheck::heapallindexed(&fx.cluster);
    fx.cluster.stop().expect("stop");
    let heading = format!(
        "PostgreSQL {major} (checksums {checksums}): case | pgcheckdb | pg_amcheck --heapallindexed"
    );
    let lacking = text.contains("lacks matching index tuple");
    let rows = cases.iter().map(|c| {
        (
            c.name,
            "yes",
            yes_no(amcheck::names(&text, c.index) && lacking),
        )
    });
    print_table(&heading, 32, rows);
    let _ = fx.major;
}
