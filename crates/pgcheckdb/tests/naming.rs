//! The offline catalog reader names every finding: on a real cluster of every supported
//! version, damage injected into tables, indexes, a TOAST table, a sequence, a materialized view,
//! a relation in a tablespace outside the data directory and a table of a second database is
//! reported with the database name, `schema.relation`, relation kind and access method that the
//! server itself reports. A healthy cluster has no orphan or catalog findings, and a damaged
//! relation map makes a `bad_relmap` finding while the other database is still named.

mod common;

use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::format::control::ControlFile;
use pgcheckdb_pg::ops::corrupt::{self, Damage, HeaderDamage};
use pgcheckdb_testkit::{standard_cluster, StandardCluster, BLCKSZ};
use serde_json::Value;

use common::verify;

pgcheckdb_testkit::version_tests! {
    scenario;
    naming_pg14(14, false),
    naming_pg15(15, true),
    naming_pg16(16, false),
    naming_pg17(17, true),
    naming_pg18(18, false),
    naming_pg19(19, true),
}

/// A relation to damage and the names the report must give it.
struct Expect {
    db: &'static str,
    relation: &'static str,
    /// Expected `relation.name`; `None` means "starts with pg_toast.pg_toast_".
    name: Option<&'static str>,
    kind: &'static str,
    am: Option<&'static str>,
}

const EXPECTED: [Expect; 8] = [
    Expect {
        db: "postgres",
        relation: "accounts",
        name: Some("public.accounts"),
        kind: "table",
        am: Some("heap"),
    },
    Expect {
        db: "postgres",
        relation: "accounts_pkey",
        name: Some("public.accounts_pkey"),
        kind: "index",
        am: Some("btree"),
    },
    Expect {
        db: "postgres",
        relation: "docs_toast",
        name: None,
        kind: "toast_table",
        am: Some("heap"),
    },
    Expect {
        db: "postgres",
        relation: "seq_ids",
        name: Some("public.seq_ids"),
        kind: "sequence",
        am: None,
    },
    Expect {
        db: "postgres",
        relation: "mv_totals",
        name: Some("public.mv_totals"),
        kind: "materialized_view",
        am: Some("heap"),
    },
    Expect {
        db: "postgres",
        relation: "in_space",
        name: Some("public.in_space"),
        kind: "table",
        am: Some("heap"),
    },
    Expect {
        db: "postgres",
        relation: "unlogged_t",
        name: Some("public.unlogged_t"),
        kind: "table",
        am: Some("heap"),
    },
    Expect {
        db: "second",
        relation: "other",
        name: Some("public.other"),
        kind: "table",
        am: Some("heap"),
    },
];

fn scenario(major: u32, checksums: bool) {
    let sc = standard_cluster(major, checksums);
    healthy_has_no_catalog_findings(&sc);
    for e in &EXPECTED {
        // pd_upper = 0 on a non-zero page: found with and without data checksums.
        corrupt::inject(&sc.file(e.db, e.relation), 0, BLCKSZ, Damage::ZeroPdUpper)
            .unwrap_or_else(|err| panic!("inject into {}: {err}", e.relation));
    }
    let run = verify(sc.datadir(), 2);
    for e in &EXPECTED {
        let file = sc.rel(e.db, e.relation);
        let f = find(&run.findings, file)
            .unwrap_or_else(|| panic!("no finding for {file} ({})\n{run}", e.relation));
        assert_eq!(f["kind"], "nonzero_new_page", "{f}");
        assert_eq!(f["database"]["name"], e.db, "{f}");
        let name = f["relation"]["name"].as_str().unwrap_or_default();
        match e.name {
            Some(n) => assert_eq!(name, n, "{f}"),
            None => assert!(name.starts_with("pg_toast.pg_toast_"), "{f}"),
        }
        assert_eq!(f["relation"]["kind"], e.kind, "{f}");
        assert!(f["relation"]["oid"].as_u64().is_some(), "{f}");
        match e.am {
            Some(am) => assert_eq!(f["detail"]["access_method"], am, "{f}"),
            None => assert!(f["detail"].get("access_method").is_none(), "{f}"),
        }
    }
    owners_and_tablespaces(&sc, &run);
    damaged_pg_class(&sc);
    damaged_relmap(&sc);
}

/// Indexes name their table (`pg_index`), TOAST tables the table whose values they hold, and
/// relations outside the default tablespace its name (`pg_tablespace`).
fn owners_and_tablespaces(sc: &StandardCluster, run: &pgcheckdb_testkit::run::Run) {
    let detail = |rel: &str| {
        find(&run.findings, sc.rel("postgres", rel))
            .map(|f| f["detail"].clone())
            .unwrap_or_default()
    };
    assert_eq!(detail("accounts_pkey")["table"], "public.accounts");
    assert_eq!(detail("docs_toast")["table"], "public.docs");
    assert_eq!(detail("in_space")["tablespace"], "outside");
    assert!(detail("accounts")["tablespace"].is_null());
    assert!(detail("accounts")["table"].is_null());
}

/// A damaged `pg_class` page in database `second`: a warning says names may be missing, the
/// files it no longer names are not called orphans, and `postgres` is still named.
fn damaged_pg_class(sc: &StandardCluster) {
    let control = ControlFile::read_from_datadir(sc.datadir()).expect("pg_control");
    let catalog = Catalog::read(sc.datadir(), &control);
    let (key, _) = catalog
        .find_relation("pg_catalog.pg_class", Some("second"))
        .expect("pg_class of second");
    let version_dir = control.tablespace_version_directory().unwrap_or_default();
    let file = format!("{}/{}", Catalog::relation_dir(key, &version_dir), key.2);
    let path = sc.datadir().join(&file);
    corrupt::inject(
        &path,
        0,
        BLCKSZ,
        Damage::Header(HeaderDamage::SpecialBeyondBlock),
    )
    .expect("damage pg_class");
    let run = verify(sc.datadir(), 2);
    let warning = run
        .find_in("catalog_unreadable", &file)
        .unwrap_or_else(|| panic!("no catalog_unreadable finding for {file}\n{run}"));
    assert_eq!(warning["severity"], "warning", "{warning}");
    let orphans = run.of_kind("orphan_file");
    assert!(
        orphans.is_empty(),
        "files of a database with a damaged pg_class called orphans: {orphans:#?}"
    );
    let accounts = find(&run.findings, sc.rel("postgres", "accounts")).expect("accounts finding");
    assert_eq!(
        accounts["relation"]["name"], "public.accounts",
        "{accounts}"
    );
}

fn find<'a>(findings: &'a [Value], file: &str) -> Option<&'a Value> {
    findings
        .iter()
        .find(|f| f["file"] == file && f["block"] == 0)
}

fn healthy_has_no_catalog_findings(sc: &StandardCluster) {
    let run = verify(sc.datadir(), 2);
    let bad: Vec<&Value> = run
        .findings
        .iter()
        .filter(|f| {
            matches!(
                f["kind"].as_str(),
                Some("orphan_file" | "catalog_unreadable" | "bad_relmap")
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "healthy cluster has catalog findings: {bad:#?}\n{run}"
    );
}

/// A broken `pg_filenode.map` in database `second` is a finding; `postgres` is still named.
fn damaged_relmap(sc: &StandardCluster) {
    let other = sc.rel("second", "other");
    let dir = other
        .rsplit_once('/')
        .map(|(d, _)| d)
        .unwrap_or_default()
        .to_string();
    let map = sc.datadir().join(&dir).join("pg_filenode.map");
    let mut bytes = std::fs::read(&map).expect("read pg_filenode.map");
    bytes[20] ^= 0x01;
    std::fs::write(&map, bytes).expect("damage pg_filenode.map");
    let run = verify(sc.datadir(), 1);
    let relmap = run
        .findings
        .iter()
        .find(|f| f["kind"] == "bad_relmap")
        .unwrap_or_else(|| panic!("no bad_relmap finding\n{run}"));
    assert_eq!(relmap["file"], format!("{dir}/pg_filenode.map"), "{relmap}");
    assert_eq!(relmap["severity"], "error", "{relmap}");
    let accounts = find(&run.findings, sc.rel("postgres", "accounts")).expect("accounts finding");
    assert_eq!(
        accounts["relation"]["name"], "public.accounts",
        "{accounts}"
    );
    assert_eq!(run.status, 2, "{run}");
}
