//! Relations of access methods pgcheckdb has no page format for are never passed over in
//! silence. On a real cluster of every supported version: a contrib `bloom` index, an index of
//! an access method made without any extension (`CREATE ACCESS METHOD ... HANDLER hashhandler`:
//! pgcheckdb keys on the access method's oid, so this is an unknown one) and a table of another
//! table access method (`HANDLER heap_tableam_handler`), next to ordinary tables and indexes.
//! At the standard and extended levels the summary (JSON) counts exactly those and lists
//! each with its reason (the TOAST table of the other table access method's table too), and the text output names them; at the physical level the summary has
//! neither field. Every run is clean: the heap-based checks of the extended level do not read
//! the other table access method's pages as heap pages (its index is left out of them, with
//! the reason). A `rum` index, on Debian's PostgreSQL 15 with `postgresql-15-rum`, is listed the
//! same way.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use pgcheckdb_testkit::asserts::assert_clean;
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::run::Run;
use pgcheckdb_testkit::{Cluster, ClusterOptions, MAJORS};
use serde_json::Value;

use common::{bin, verify_json};

const SQL: &str = "
CREATE EXTENSION bloom;
CREATE TABLE t (id int PRIMARY KEY, a int, b text);
INSERT INTO t SELECT g, g % 100, 'row ' || g FROM generate_series(1, 3000) g;
CREATE INDEX t_bloom ON t USING bloom (id, a);
CREATE ACCESS METHOD myidx TYPE INDEX HANDLER hashhandler;
CREATE OPERATOR CLASS int4_myidx_ops DEFAULT FOR TYPE int4 USING myidx AS
  OPERATOR 1 =, FUNCTION 1 hashint4(int4);
CREATE INDEX t_myidx ON t USING myidx (a);
CREATE ACCESS METHOD myheap TYPE TABLE HANDLER heap_tableam_handler;
CREATE TABLE t2 (id int PRIMARY KEY, v text) USING myheap;
INSERT INTO t2 SELECT g, repeat('v', g % 50) FROM generate_series(1, 2000) g;
CREATE INDEX t2_v ON t2 (v);
VACUUM (ANALYZE);
CHECKPOINT;
";

/// `(relation, kind, access method, reason)` of each relation expected in the list.
fn expected(t2_oid: &str) -> BTreeSet<(String, String, String, String)> {
    let toast = "pg_toast.pg_toast_".to_string() + t2_oid;
    [
        // A TOAST table takes its table's access method.
        (
            toast.as_str(),
            "toast_table",
            "myheap",
            "table access method \"myheap\"",
        ),
        (
            "public.t2",
            "table",
            "myheap",
            "table access method \"myheap\"",
        ),
        (
            "public.t_bloom",
            "index",
            "bloom",
            "index access method \"bloom\"",
        ),
        (
            "public.t_myidx",
            "index",
            "myidx",
            "index access method \"myidx\"",
        ),
    ]
    .into_iter()
    .map(|(r, k, am, why)| {
        (
            r.to_string(),
            k.to_string(),
            am.to_string(),
            format!("{why} unknown to pgcheckdb"),
        )
    })
    .collect()
}

/// The summary's list, as `(relation, kind, access method, reason)`, asserting each names
/// database `postgres`.
fn listed(run: &Run, what: &str) -> BTreeSet<(String, String, String, String)> {
    let s = run.summary();
    let list = s["not_structure_checked"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no not_structure_checked list\n{run}"));
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    list.iter()
        .map(|r| {
            assert_eq!(r["database"], "postgres", "{what}: {r}");
            (
                text(r, "relation"),
                text(r, "kind"),
                text(r, "access_method"),
                text(r, "reason"),
            )
        })
        .collect()
}

fn scenario(major: u32) {
    let (mut cluster, _) = loaded_cluster(major, major.is_multiple_of(2), SQL, &[]);
    cluster.start().expect("start");
    let t2_oid = cluster
        .query_value("postgres", "SELECT 'public.t2'::regclass::oid")
        .expect("oid of t2");
    cluster.stop().expect("stop");
    let dir = cluster.datadir().display().to_string();
    let target = ["-D", dir.as_str()];

    let physical = verify_json(&target, "physical", &[], None);
    assert_clean(&physical, &format!("PG{major} physical"));
    for field in ["relations_not_structure_checked", "not_structure_checked"] {
        assert!(
            physical.summary().get(field).is_none(),
            "PG{major} physical: {field} in the summary\n{physical}"
        );
    }

    for level in ["standard", "extended"] {
        let what = format!("PG{major} {level}");
        // --verbose: the extended summary lists the indexes its checks left out.
        let run = verify_json(&target, level, &["--verbose"], None);
        assert_clean(&run, &what);
        assert_eq!(
            run.summary()["relations_not_structure_checked"],
            4,
            "{what}\n{run}"
        );
        assert_eq!(listed(&run, &what), expected(&t2_oid), "{what}\n{run}");

        let text = pgcheckdb_testkit::run::pgcheckdb(
            &bin(),
            &["verify", "-D", &dir, "--level", level, "--no-progress"],
            None,
        );
        assert_eq!(text.status, 0, "{what} text\n{text}");
        for (rel, kind, _, reason) in expected(&t2_oid) {
            let line = format!(
                "pgcheckdb: checked at the physical level only: database \"postgres\", {kind} \"{rel}\": {reason}"
            );
            assert!(
                text.stdout.lines().any(|l| l == line),
                "{what} text: no line {line:?}\n{text}"
            );
        }
        assert!(
            text.stdout.contains(
                "; 4 relation(s) of access methods pgcheckdb does not know checked at the physical level only"
            ),
            "{what} text: closing sentence\n{text}"
        );
        if level == "extended" {
            assert_extended_left_out(&run, &what);
        }
    }
}

/// The B-tree indexes of the table of another table access method are left out of the checks
/// that read heap tuples (heap -> index, index -> heap TIDs), with the reason.
fn assert_extended_left_out(run: &Run, what: &str) {
    let ext = &run.summary()["extended"];
    for list in ["all_indexed_skipped", "tids_not_checked_indexes"] {
        let entries = ext[list].as_array().cloned().unwrap_or_default();
        for index in ["public.t2_pkey", "public.t2_v"] {
            let entry = entries
                .iter()
                .find(|e| e["index"] == format!("postgres: {index}"))
                .unwrap_or_else(|| panic!("{what}: {index} not in {list}\n{run}"));
            assert!(
                entry["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("another table access method than heap")),
                "{what}: {index} in {list}: {entry}"
            );
        }
    }
}

/// Debian's PostgreSQL 15, where `postgresql-15-rum` installs the `rum` extension.
const DEBIAN_15_BIN: &str = "/usr/lib/postgresql/15/bin";
const RUM_SO: &str = "/usr/lib/postgresql/15/lib/rum.so";

/// A `rum` index (the extension of the report) on Debian's PostgreSQL 15: listed with
/// its reason at the standard and extended levels, every run clean.
#[test]
fn rum_index_is_counted_and_listed() {
    assert!(
        Path::new(RUM_SO).is_file(),
        "{RUM_SO} is missing: install the Debian package postgresql-15-rum (.ci/run does)"
    );
    let opts = ClusterOptions::new(15, true)
        .throwaway()
        .bindir(Path::new(DEBIAN_15_BIN))
        .setting("autovacuum", "off");
    let mut cluster = Cluster::init_temp(&opts).unwrap_or_else(|e| panic!("initdb: {e}"));
    cluster.start().expect("start");
    cluster
        .psql(
            "postgres",
            "CREATE EXTENSION rum;
             CREATE TABLE docs (id int PRIMARY KEY, body tsvector);
             INSERT INTO docs SELECT g, to_tsvector('simple', 'word' || g || ' common text ' || (g % 7))
               FROM generate_series(1, 3000) g;
             CREATE INDEX docs_rum ON docs USING rum (body rum_tsvector_ops);
             VACUUM (ANALYZE);",
        )
        .expect("load");
    cluster.stop().expect("stop");
    let dir = cluster.datadir().display().to_string();
    let expected: BTreeSet<_> = [(
        "public.docs_rum".to_string(),
        "index".to_string(),
        "rum".to_string(),
        "index access method \"rum\" unknown to pgcheckdb".to_string(),
    )]
    .into();
    for level in ["standard", "extended"] {
        let what = format!("rum, {level}");
        let run = verify_json(&["-D", &dir], level, &[], None);
        assert_clean(&run, &what);
        assert_eq!(
            run.summary()["relations_not_structure_checked"],
            1,
            "{what}\n{run}"
        );
        assert_eq!(listed(&run, &what), expected, "{what}\n{run}");
    }
}

#[test]
fn unknown_access_methods_are_counted_and_listed() {
    for major in MAJORS {
        scenario(major);
    }
}
