//! B-tree key order with the column's real ordering, on real clusters of PostgreSQL 14–19.
//!
//! * `comparators_pgNN`: for every built-in operator class pgcheckdb compares (and C, a libc
//!   collation whose order differs from byte order, a libc database default, compressed keys,
//!   NULLs), a table of edge-case values is indexed by PostgreSQL; the test then reads the
//!   index's leaf page from disk and asserts that pgcheckdb's comparator orders each item
//!   against the previous one exactly as PostgreSQL's `ORDER BY` and `=` do (Less, or Equal for
//!   values PostgreSQL calls equal). `verify` on the healthy cluster reports nothing.
//! * `injected_pgNN`: two neighbouring line pointers are swapped on a leaf of an int index, a
//!   text index in C, a text index in a libc collation, a multi-column index, a DESC index and
//!   an index of posting lists, and the high key of an int index is lowered (checksum
//!   recomputed); each must be reported as `btree_order_invalid` at that index, block and
//!   offset(s), and nothing else. `pg_amcheck`
//!   (`bt_index_check`) is run on a started copy for the comparison in docs/CHECKS.md.
//!
//! The libc collation is `en_US.utf8`; when the machine lacks it, it is compiled from the C
//! library's locale sources with `localedef` (no network needed). A missing `localedef` or
//! locale source fails the test.

mod common;

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use pgcheckdb_cluster::{Cluster, ClusterOptions};
use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::check::order::{ordering_for, NotOrderChecked};
use pgcheckdb_pg::format::control::ControlFile;
use pgcheckdb_pg::format::itemid::line_pointers;
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::amcheck::{print_table, yes_no};
use pgcheckdb_testkit::asserts::{assert_problems, assert_status, finding, key};
use pgcheckdb_testkit::locale::ensure_libc_locale;
use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::{amcheck, loaded, BLCKSZ};

use common::{bin, verify_level, write_block};

/// The libc locale whose order differs from byte order.
const LIBC_LOCALE: &str = "en_US.utf8";

/// One indexed column: its table, type, index definition and values.
struct Spec {
    name: &'static str,
    db: &'static str,
    column: &'static str,
    /// The index's column list, e.g. `(x DESC)`.
    index: &'static str,
    /// `ORDER BY` that matches the index.
    order_by: &'static str,
    values: &'static [&'static str],
    /// Lowest major version.
    since: u32,
    /// Session settings before building the index.
    before: &'static str,
}

const fn spec(name: &'static str, column: &'static str, values: &'static [&'static str]) -> Spec {
    Spec {
        name,
        db: "postgres",
        column,
        index: "(x)",
        order_by: "x",
        values,
        since: 14,
        before: "",
    }
}

const FLOATS: &[&str] = &[
    "'-Infinity'",
    "-1.5",
    "'-0'",
    "0",
    "1e-30",
    "3e38",
    "'Infinity'",
    "'NaN'",
    "'NaN'",
    "NULL",
    "2.5",
    "-2.5",
];
const TEXTS: &[&str] = &[
    "''", "'A'", "'a'", "'B'", "'b'", "'é'", "'e'", "'ä'", "'Z'", "'a b'", "'ab'", "'a-b'",
    "'co-op'", "'coop'", "'Zebra'", "'zebra'", "'ß'", "'ss'", "NULL", "'abc'", "'ABC'",
];

fn specs() -> Vec<Spec> {
    vec![
        spec(
            "int2",
            "int2",
            &["-32768", "-1", "0", "1", "32767", "0", "NULL"],
        ),
        spec(
            "int4",
            "int4",
            &["-2147483648", "-5", "0", "7", "2147483647", "7"],
        ),
        spec(
            "int8",
            "int8",
            &[
                "-9223372036854775808",
                "-1",
                "0",
                "1",
                "9223372036854775807",
            ],
        ),
        spec(
            "oid",
            "oid",
            &["0", "1", "2147483648", "4294967295", "65536"],
        ),
        spec("bool", "bool", &["false", "true", "false", "NULL"]),
        spec(
            "char",
            "\"char\"",
            &["'a'", "'B'", "'z'", "'0'", "'\\200'", "'\\377'"],
        ),
        spec("float4", "float4", FLOATS),
        spec(
            "float8",
            "float8",
            &[
                "'-Infinity'",
                "-1.5",
                "'-0'",
                "0",
                "1e-300",
                "1e308",
                "'Infinity'",
                "'NaN'",
                "'NaN'",
                "NULL",
                "2.5",
            ],
        ),
        spec(
            "numeric",
            "numeric",
            &[
                "'NaN'",
                "'-Infinity'",
                "'Infinity'",
                "-1e100",
                "-12345.678",
                "-1",
                "-0.0001",
                "0",
                "0.000",
                "0.0001",
                "1",
                "1.0",
                "1.00",
                "10000",
                "9999.9999",
                "12345.678",
                "1e100",
                "123456789012345678901234567890.123456789",
                "0.00000000000000000001",
                "-1e-20",
                "100000000",
                "99999999",
                "'NaN'",
            ],
        ),
        spec(
            "date",
            "date",
            &[
                "'-infinity'",
                "'4713-01-01 BC'",
                "'2000-01-01'",
                "'2024-02-29'",
                "'infinity'",
                "'1999-12-31'",
            ],
        ),
        spec(
            "time",
            "time",
            &["'00:00'", "'12:34:56.789'", "'24:00'", "'00:00:00.000001'"],
        ),
        spec(
            "timestamp",
            "timestamp",
            &[
                "'-infinity'",
                "'1900-01-01'",
                "'2000-01-01 00:00:00.000001'",
                "'infinity'",
                "'2000-01-01'",
                "'1999-12-31 23:59:59.999999'",
            ],
        ),
        spec(
            "timestamptz",
            "timestamptz",
            &[
                "'-infinity'",
                "'1900-01-01 00:00+00'",
                "'2000-01-01 00:00+02'",
                "'1999-12-31 23:00+00'",
                "'infinity'",
            ],
        ),
        spec(
            "interval",
            "interval",
            &[
                "'1 mon'",
                "'30 days'",
                "'720 hours'",
                "'-1 year'",
                "'0'",
                "'1 mon 1 microsecond'",
                "'29 days 23:59:59.999999'",
                "'178000000 years'",
                "'-178000000 years'",
                "'1 day'",
                "'24 hours'",
                "'-1 day 48 hours'",
            ],
        ),
        Spec {
            values: &[
                "'infinity'",
                "'-infinity'",
                "'1 mon'",
                "'30 days'",
                "'-1 year'",
            ],
            since: 17,
            ..spec("interval_inf", "interval", &[])
        },
        spec(
            "uuid",
            "uuid",
            &[
                "'00000000-0000-0000-0000-000000000000'",
                "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
                "'80000000-0000-0000-0000-000000000000'",
                "'7fffffff-ffff-ffff-ffff-ffffffffffff'",
                "'00000000-0000-0000-0000-000000000001'",
            ],
        ),
        spec(
            "bytea",
            "bytea",
            &[
                "'\\x'",
                "'\\x00'",
                "'\\x0000'",
                "'\\x01'",
                "'\\xff'",
                "'\\xff00'",
                "'\\x7f'",
            ],
        ),
        spec(
            "name",
            "name",
            &[
                "''",
                "'A'",
                "'a'",
                "'Z'",
                "'ab'",
                "'a b'",
                "repeat('x', 63)",
                "'é'",
            ],
        ),
        spec("text_c", "text", TEXTS),
        spec("text_libc", "text COLLATE en_us", TEXTS),
        Spec {
            db: "us",
            ..spec("text_dbdefault", "text", TEXTS)
        },
        spec(
            "name_libc",
            "name COLLATE en_us",
            &["'a'", "'B'", "'b'", "'é'", "'e'", "'f'"],
        ),
        spec("varchar", "varchar(20)", TEXTS),
        spec(
            "bpchar",
            "char(8)",
            &["'a'", "'a '", "'a  b'", "'ab'", "''", "' '", "'B'", "'é'"],
        ),
        spec(
            "bpchar_libc",
            "char(8) COLLATE en_us",
            &["'a'", "'a '", "'ab'", "'B'", "'é'", "'e'"],
        ),
        Spec {
            index: "(x text_pattern_ops)",
            order_by: "x USING ~<~",
            ..spec("text_pattern", "text COLLATE en_us", TEXTS)
        },
        Spec {
            index: "(x varchar_pattern_ops)",
            order_by: "x USING ~<~",
            ..spec("varchar_pattern", "varchar(20) COLLATE en_us", TEXTS)
        },
        Spec {
            index: "(x bpchar_pattern_ops)",
            order_by: "x USING ~<~",
            ..spec(
                "bpchar_pattern",
                "char(8) COLLATE en_us",
                &["'a'", "'a '", "'ab'", "'B'", "'é'", "''"],
            )
        },
        Spec {
            index: "(x DESC NULLS LAST)",
            order_by: "x DESC NULLS LAST",
            ..spec("text_desc", "text COLLATE en_us", TEXTS)
        },
        Spec {
            index: "(x NULLS FIRST)",
            order_by: "x NULLS FIRST",
            ..spec(
                "numeric_nulls_first",
                "numeric",
                &["1", "NULL", "-1", "'NaN'", "0"],
            )
        },
        Spec {
            before: "SET default_toast_compression = pglz;",
            ..spec(
                "text_pglz",
                "text COLLATE en_us",
                &[
                    "repeat('abc', 1000) || 'b'",
                    "repeat('abc', 1000) || 'a'",
                    "repeat('abc', 1000) || 'B'",
                    "repeat('abc', 1000)",
                    "'abc'",
                ],
            )
        },
        Spec {
            before: "SET default_toast_compression = lz4;",
            ..spec(
                "text_lz4",
                "text",
                &[
                    "repeat('xyz', 1000) || 'b'",
                    "repeat('xyz', 1000) || 'a'",
                    "repeat('xyz', 1000)",
                    "'xyz'",
                ],
            )
        },
    ]
}

fn setup_sql(s: &Spec) -> String {
    let values: Vec<String> = s.values.iter().map(|v| format!("({v})")).collect();
    format!(
        "CREATE TABLE t_{n} (x {col});\nINSERT INTO t_{n} (x) VALUES {vals};\n{before}\nCREATE INDEX i_{n} ON t_{n} {idx} WITH (deduplicate_items = off);\nRESET ALL;\n",
        n = s.name,
        col = s.column,
        vals = values.join(", "),
        before = s.before,
        idx = s.index,
    )
}

/// PostgreSQL's order of the table: `ctid -> (position, equal to the previous value)`.
fn sql_order(c: &Cluster, s: &Spec) -> HashMap<(u32, u16), (usize, bool)> {
    let q = format!(
        "SELECT string_agg(ctid::text || '=' || eq::text, ' ' ORDER BY pos) FROM (
           SELECT ctid, row_number() OVER w AS pos,
                  coalesce(row_number() OVER w > 1 AND x IS NOT DISTINCT FROM lag(x) OVER w, false) AS eq
           FROM t_{n} WINDOW w AS (ORDER BY {o}, ctid)) s",
        n = s.name,
        o = s.order_by
    );
    let text = c.query_value(s.db, &q).expect("order query");
    text.split(' ')
        .enumerate()
        .map(|(pos, entry)| {
            let (tid, eq) = entry.split_once('=').expect("tid=eq");
            let (b, o) = tid
                .trim_matches(|c| c == '(' || c == ')')
                .split_once(',')
                .expect("ctid");
            (
                (b.parse().expect("block"), o.parse().expect("offset")),
                (pos, eq == "true"),
            )
        })
        .collect()
}

/// The items (whole tuples) of block `blkno`, by line pointer, and whether it is a leaf with a
/// high key.
fn page_items(path: &Path, blkno: u64) -> (Vec<Vec<u8>>, Vec<u8>) {
    let page = corrupt::read_block(path, blkno, BLCKSZ).expect("read index block");
    let h = PageHeader::parse(&page).expect("page header");
    let items = line_pointers(&page, &h)
        .iter()
        .map(|lp| page[lp.lp_off as usize..(lp.lp_off + lp.lp_len) as usize].to_vec())
        .collect();
    (items, page)
}

fn heap_tid(item: &[u8]) -> (u32, u16) {
    let hi = u16::from_le_bytes([item[0], item[1]]) as u32;
    let lo = u16::from_le_bytes([item[2], item[3]]) as u32;
    ((hi << 16) | lo, u16::from_le_bytes([item[4], item[5]]))
}

fn make_cluster(major: u32, checksums: bool) -> Cluster {
    pgcheckdb_testkit::require_binaries(major);
    ensure_libc_locale();
    let c = loaded::started_with(&ClusterOptions::new(major, checksums).throwaway());
    c.psql(
        "postgres",
        &format!(
            "CREATE COLLATION en_us (provider = libc, locale = '{LIBC_LOCALE}');\n\
             CREATE DATABASE us TEMPLATE template0 ENCODING 'UTF8' LOCALE '{LIBC_LOCALE}';"
        ),
    )
    .expect("collation and database");
    c
}

fn verify_standard(datadir: &Path) -> Run {
    verify_level(datadir, "standard")
}

fn comparators(major: u32, checksums: bool) {
    let mut c = make_cluster(major, checksums);
    let specs: Vec<Spec> = specs().into_iter().filter(|s| major >= s.since).collect();
    let mut expected = Vec::new();
    for s in &specs {
        c.psql(s.db, &setup_sql(s))
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
        let order = sql_order(&c, s);
        let path = c
            .relation_filepath(s.db, &format!("i_{}", s.name))
            .expect("path");
        expected.push((order, path));
    }
    c.psql(
        "postgres",
        "CREATE TABLE t_inet (x inet); CREATE INDEX i_inet ON t_inet (x);",
    )
    .expect("index without a comparator");
    c.stop().expect("stop");
    let control = ControlFile::read(&c.datadir().join("global/pg_control")).expect("pg_control");
    let catalog = Catalog::read(c.datadir(), &control);
    let (key, inet) = catalog
        .find_relation("public.i_inet", Some("postgres"))
        .expect("i_inet");
    assert!(
        matches!(
            ordering_for(&catalog, key.0, inet),
            Err(NotOrderChecked::UnsupportedOpclass { ref opclass, .. }) if opclass == "inet_ops"
        ),
        "PG {major}: an inet index is not order-checked"
    );
    for (s, (order, path)) in specs.iter().zip(&expected) {
        let (key, rel) = catalog
            .find_relation(&format!("public.i_{}", s.name), Some(s.db))
            .expect("index in catalog");
        let ordering = ordering_for(&catalog, key.0, rel)
            .unwrap_or_else(|why| panic!("PG {major} {}: not order-checked: {why}", s.name));
        // Few values: the root is the only leaf, block 1, no high key.
        let (items, _) = page_items(&c.datadir().join(path), 1);
        assert_eq!(
            items.len(),
            order.len(),
            "PG {major} {}: one item per row",
            s.name
        );
        for (i, pair) in items.windows(2).enumerate() {
            let (pos_a, _) = order[&heap_tid(&pair[0])];
            let (pos_b, equal) = order[&heap_tid(&pair[1])];
            assert_eq!(
                pos_a + 1,
                pos_b,
                "PG {major} {}: index order is not ORDER BY's",
                s.name
            );
            let want = if equal {
                Ordering::Equal
            } else {
                Ordering::Less
            };
            assert_eq!(
                ordering.compare_keys(&pair[0], &pair[1]),
                Some(want),
                "PG {major} {}: items {} and {} (ORDER BY positions {pos_a}, {pos_b})",
                s.name,
                i + 1,
                i + 2
            );
            assert_eq!(
                ordering.compare(&pair[0], &pair[1]),
                Some(Ordering::Less),
                "PG {major} {}: heap TID tiebreak of items {} and {}",
                s.name,
                i + 1,
                i + 2
            );
            assert_eq!(
                ordering.compare_keys(&pair[1], &pair[0]),
                Some(want.reverse()),
                "PG {major} {}: reversed items {} and {}",
                s.name,
                i + 2,
                i + 1
            );
        }
    }
    let run = verify_standard(c.datadir());
    assert_status(&run, 0, &format!("PG {major}: healthy cluster"));
    assert_problems(
        &run,
        &BTreeSet::new(),
        &format!("PG {major}: healthy cluster"),
    );
}

pgcheckdb_testkit::version_tests! {
    comparators;
    comparators_pg14(14, true),
    comparators_pg15(15, false),
    comparators_pg16(16, true),
    comparators_pg17(17, false),
    comparators_pg18(18, true),
    comparators_pg19(19, false),
}

/// The damaged indexes: `(index, table definition and rows, index definition)`. Each has
/// 20 000 rows, so block 1 is the leftmost leaf and has a high key.
const DAMAGED: &[(&str, &str, &str)] = &[
    (
        "o_int_idx",
        "CREATE TABLE o_int (id int); INSERT INTO o_int SELECT g FROM generate_series(1, 20000) g;",
        "CREATE INDEX o_int_idx ON o_int (id);",
    ),
    (
        "o_text_c_idx",
        "CREATE TABLE o_text_c (t text); INSERT INTO o_text_c SELECT md5(g::text) FROM generate_series(1, 20000) g;",
        "CREATE INDEX o_text_c_idx ON o_text_c (t);",
    ),
    (
        "o_text_libc_idx",
        "CREATE TABLE o_text_libc (t text COLLATE en_us); INSERT INTO o_text_libc
           SELECT CASE WHEN g % 2 = 0 THEN upper(md5(g::text)) ELSE md5(g::text) END FROM generate_series(1, 20000) g;",
        "CREATE INDEX o_text_libc_idx ON o_text_libc (t);",
    ),
    (
        "o_multi_idx",
        "CREATE TABLE o_multi (a int, b text); INSERT INTO o_multi SELECT g % 3, md5(g::text) FROM generate_series(1, 20000) g;",
        "CREATE INDEX o_multi_idx ON o_multi (a, b);",
    ),
    (
        "o_desc_idx",
        "CREATE TABLE o_desc (x int); INSERT INTO o_desc SELECT g FROM generate_series(1, 20000) g;",
        "CREATE INDEX o_desc_idx ON o_desc (x DESC);",
    ),
    (
        "o_hikey_idx",
        "CREATE TABLE o_hikey (id int); INSERT INTO o_hikey SELECT g FROM generate_series(1, 20000) g;",
        "CREATE INDEX o_hikey_idx ON o_hikey (id);",
    ),
    (
        "o_posting_idx",
        "CREATE TABLE o_posting (x int); INSERT INTO o_posting SELECT g % 10 FROM generate_series(1, 20000) g;",
        "CREATE INDEX o_posting_idx ON o_posting (x);",
    ),
];

/// The block whose line pointers are swapped, and the pair.
const BLOCK: u64 = 1;
const SWAP: (u16, u16) = (5, 6);

/// Swaps two line pointers of block `BLOCK` (a leaf with a high key), recomputing the
/// checksum when the cluster has checksums.
fn swap_line_pointers(path: &Path, checksums: bool) {
    let (_, mut page) = page_items(path, BLOCK);
    let special = u16::from_le_bytes([page[16], page[17]]) as usize;
    let flags = u16::from_le_bytes([page[special + 12], page[special + 13]]);
    let next = u32::from_le_bytes(page[special + 4..special + 8].try_into().expect("4 bytes"));
    assert!(
        flags & 1 == 1 && next != 0,
        "block {BLOCK} is a leaf with a right sibling"
    );
    let lp = |off: u16| 24 + 4 * (off as usize - 1);
    let (a, b) = (lp(SWAP.0), lp(SWAP.1));
    let word_a: [u8; 4] = page[a..a + 4].try_into().expect("4 bytes");
    page.copy_within(b..b + 4, a);
    page[b..b + 4].copy_from_slice(&word_a);
    write_block(path, BLOCK, &page, checksums);
}

/// The high key's item whose key is lowered to that of `HIGH_KEY_FROM`: every item from there
/// on sorts after it.
const HIGH_KEY_INDEX: &str = "o_hikey_idx";
const HIGH_KEY_FROM: u16 = 100;

/// Lowers the high key of block `BLOCK` of an int4 index to the key of item `HIGH_KEY_FROM`
/// (an equal key with a heap TID sorts after the high key's truncated TID); returns the
/// page's last line pointer.
fn lower_high_key(path: &Path, checksums: bool) -> u16 {
    let (items, mut page) = page_items(path, BLOCK);
    let h = PageHeader::parse(&page).expect("header");
    let lps = line_pointers(&page, &h);
    let key_of = |off: u16| lps[off as usize - 1].lp_off as usize + 8;
    let value: [u8; 4] = page[key_of(HIGH_KEY_FROM)..key_of(HIGH_KEY_FROM) + 4]
        .try_into()
        .expect("4 bytes");
    let at = key_of(1);
    page[at..at + 4].copy_from_slice(&value);
    write_block(path, BLOCK, &page, checksums);
    items.len() as u16
}

/// Runs `pg_amcheck` (B-tree checks: `bt_index_check`) on a started cluster; returns the
/// indexes it reports.
fn amcheck_reports(c: &mut Cluster) -> BTreeSet<&'static str> {
    let indexes = DAMAGED.iter().map(|(idx, _, _)| *idx);
    amcheck::reported_among(c, &amcheck::btree_only(false), indexes)
}

fn injected(major: u32, checksums: bool) {
    let mut c = make_cluster(major, checksums);
    let mut paths = Vec::new();
    for (idx, table, index) in DAMAGED {
        c.psql("postgres", &format!("{table}\n{index}"))
            .expect("damaged table");
        paths.push(c.relation_filepath("postgres", idx).expect("path"));
    }
    c.stop().expect("stop");
    let healthy = verify_standard(c.datadir());
    assert_status(&healthy, 0, &format!("PG {major}: before the damage"));
    let mut last_item = 0;
    for ((idx, _, _), path) in DAMAGED.iter().zip(&paths) {
        if *idx == HIGH_KEY_INDEX {
            last_item = lower_high_key(&c.datadir().join(path), checksums);
        } else {
            swap_line_pointers(&c.datadir().join(path), checksums);
        }
    }
    let run = verify_standard(c.datadir());
    assert_status(&run, 2, &format!("PG {major}: swapped line pointers"));
    let expected: BTreeSet<_> = paths
        .iter()
        .map(|p| key("btree_order_invalid", p, BLOCK))
        .collect();
    assert_problems(
        &run,
        &expected,
        &format!("PG {major}: swapped line pointers"),
    );
    for ((idx, _, _), path) in DAMAGED.iter().zip(&paths) {
        if *idx == HIGH_KEY_INDEX {
            let offsets: Vec<u64> = run
                .findings
                .iter()
                .filter(|f| f["file"] == path.as_str())
                .inspect(|f| assert_eq!(f["detail"]["other_offset"], 1, "{f}"))
                .filter_map(|f| f["offset"].as_u64())
                .collect();
            let want: Vec<u64> = (HIGH_KEY_FROM as u64..=last_item as u64).collect();
            assert_eq!(
                offsets, want,
                "PG {major}: items above the lowered high key"
            );
            continue;
        }
        let f = finding(&run, &key("btree_order_invalid", path, BLOCK));
        assert_eq!(f["offset"], SWAP.1, "PG {major} {idx}: {f}");
        assert_eq!(f["detail"]["other_offset"], SWAP.0, "PG {major} {idx}: {f}");
        assert_eq!(f["relation"]["name"], format!("public.{idx}"), "{f}");
        assert_eq!(f["severity"], "error", "{f}");
    }
    let amcheck = amcheck_reports(&mut c);
    let heading =
        format!("PostgreSQL {major} (checksums {checksums}): index | pgcheckdb | pg_amcheck");
    let rows = DAMAGED
        .iter()
        .map(|(idx, _, _)| (idx, "yes", yes_no(amcheck.contains(*idx))));
    print_table(&heading, 16, rows);
    for (idx, _, _) in DAMAGED {
        let found = amcheck.contains(*idx);
        assert!(found, "PG {major}: pg_amcheck was expected to report {idx}");
    }
}

pgcheckdb_testkit::version_tests! {
    injected;
    injected_pg14(14, true),
    injected_pg15(15, false),
    injected_pg16(16, true),
    injected_pg17(17, false),
    injected_pg18(18, true),
    injected_pg18_no_checksums(18, false),
    injected_pg19(19, true),
    injected_pg19_no_checksums(19, false),
}

/// A libc locale the machine running pgcheckdb lacks (hidden with `LOCPATH`): one warning line
/// for the locale, its indexes counted as not order-checked, no finding.
#[test]
fn missing_locale_pg18() {
    let mut c = make_cluster(18, true);
    c.psql(
        "postgres",
        "CREATE TABLE m (a text COLLATE en_us, b text COLLATE en_us);
         INSERT INTO m SELECT md5(g::text), upper(md5(g::text)) FROM generate_series(1, 1000) g;
         CREATE INDEX m_a ON m (a); CREATE INDEX m_b ON m (b); CREATE INDEX m_c ON m (a COLLATE \"C\");",
    )
    .expect("tables");
    c.stop().expect("stop");
    let empty = tempfile::tempdir().expect("empty LOCPATH");
    let d = c.datadir().display().to_string();
    let run = |locpath: Option<&Path>| {
        let mut cmd = Command::new(bin());
        cmd.args(["verify", "-D", &d, "--format", "json", "--no-progress"]);
        if let Some(p) = locpath {
            cmd.env("LOCPATH", p);
        }
        let out = cmd.output().expect("run pgcheckdb");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let summary: serde_json::Value =
            serde_json::from_str(stdout.lines().last().expect("summary line")).expect("json");
        (
            out.status.code(),
            summary,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, with_locale, _) = run(None);
    assert_eq!(status, Some(0));
    let (status, without, stderr) = run(Some(empty.path()));
    assert_eq!(status, Some(0), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("is not installed"))
        .collect();
    assert_eq!(
        warnings,
        vec!["pgcheckdb: warning: locale \"en_US.utf8\" is not installed on this machine: the keys of 2 B-tree index(es) using it are not order-checked"],
        "{stderr}"
    );
    let count = |s: &serde_json::Value| s["keys_not_order_checked"].as_u64().expect("count");
    assert_eq!(
        count(&without),
        count(&with_locale) + 2,
        "{without}\n{with_locale}"
    );
    assert_eq!(without["findings"], 0, "{without}");
}
