//! The standard test cluster: one `initdb` of a given version, loaded with the kinds of
//! relation a verifier must handle, then cleanly stopped.
//!
//! Contents (database `postgres` unless noted):
//! * `accounts` (20 000 rows) with its primary key `accounts_pkey` and index `accounts_name_idx`;
//! * `docs` whose `body` values (18 KB of concatenated md5 strings, `STORAGE EXTERNAL`) live in
//!   its TOAST table, registered as `docs_toast`;
//! * `small` and `trunc_me` (about 12 blocks each) for block copies and truncation;
//! * `vacuumed`: rows deleted then `VACUUM`ed, so `_fsm` and `_vm` forks exist;
//! * `unlogged_t` (has an `_init` fork), the sequence `seq_ids`, the materialized view `mv_totals`;
//! * one index of every other access method: `accounts_hash`, `accounts_brin`, `vacuumed_gin`,
//!   `shapes_gist`, `shapes_spgist`, and `accounts_bucket` (few distinct keys, so its leaf pages
//!   hold deduplicated posting lists);
//! * `in_space` in tablespace `outside`, whose directory is outside the data directory;
//! * database `second` with table `other`;
//! * optionally `big`: 140 000 blocks (one 500-byte row per page with `fillfactor=10`), i.e. more
//!   than one 1 GiB segment, created and filled in one transaction so that with `wal_level=minimal`
//!   it writes no WAL.
//!
//! Relation file paths are looked up with `pg_relation_filepath` while the server runs.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use pgcheckdb_cluster::{Cluster, ClusterOptions, Result};

use crate::{require_binaries, BLCKSZ};

/// Rows of `big`: one per page, 140 000 pages > 131 072 (one segment).
pub const BIG_ROWS: u64 = 140_000;

/// What to build.
#[derive(Debug, Clone, Copy)]
pub struct FixtureOptions {
    pub major: u32,
    pub checksums: bool,
    /// Add `big`, a relation larger than one segment (about 1.07 GiB on disk).
    pub big_relation: bool,
}

/// A stopped cluster with known relations.
#[derive(Debug)]
pub struct StandardCluster {
    pub cluster: Cluster,
    /// Main-fork paths relative to the data directory, by (database, relation).
    relations: BTreeMap<(String, String), String>,
    /// The tablespace directory (outside the data directory).
    pub tablespace_dir: PathBuf,
}

/// Relations of database `postgres` whose paths are recorded.
const POSTGRES_RELATIONS: [&str; 19] = [
    "accounts",
    "accounts_pkey",
    "accounts_name_idx",
    "docs",
    "small",
    "trunc_me",
    "vacuumed",
    "unlogged_t",
    "seq_ids",
    "mv_totals",
    "in_space",
    "in_space_pkey",
    "accounts_hash",
    "accounts_brin",
    "accounts_bucket",
    "vacuumed_gin",
    "shapes",
    "shapes_gist",
    "shapes_spgist",
];

const SCHEMA_SQL: &str = "
CREATE TABLE accounts (id int PRIMARY KEY, name text NOT NULL, balance numeric NOT NULL);
INSERT INTO accounts SELECT g, 'name-' || md5(g::text), g * 1.5 FROM generate_series(1, 20000) g;
CREATE INDEX accounts_name_idx ON accounts (name);
CREATE TABLE docs (id int PRIMARY KEY, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
INSERT INTO docs SELECT g, (SELECT string_agg(md5(g::text || ':' || i::text), '') FROM generate_series(1, 576) i)
  FROM generate_series(1, 60) g;
CREATE TABLE small (id int, pad text);
INSERT INTO small SELECT g, repeat('s', 60) FROM generate_series(1, 1000) g;
CREATE TABLE trunc_me (id int, pad text);
INSERT INTO trunc_me SELECT g, repeat('t', 60) FROM generate_series(1, 1000) g;
CREATE TABLE vacuumed (id int, v text);
INSERT INTO vacuumed SELECT g, md5(g::text) FROM generate_series(1, 10000) g;
DELETE FROM vacuumed WHERE id % 3 = 0;
VACUUM (ANALYZE) vacuumed;
CREATE UNLOGGED TABLE unlogged_t (id int PRIMARY KEY, v text);
INSERT INTO unlogged_t SELECT g, md5(g::text) FROM generate_series(1, 2000) g;
CREATE SEQUENCE seq_ids;
SELECT nextval('seq_ids') FROM generate_series(1, 10);
CREATE MATERIALIZED VIEW mv_totals AS SELECT id % 100 AS bucket, sum(balance) AS total FROM accounts GROUP BY 1;
CREATE INDEX accounts_hash ON accounts USING hash (id);
CREATE INDEX accounts_brin ON accounts USING brin (id);
CREATE INDEX accounts_bucket ON accounts ((id % 10));
CREATE INDEX vacuumed_gin ON vacuumed USING gin (to_tsvector('simple', v));
CREATE TABLE shapes (id int, p point, r int4range);
INSERT INTO shapes SELECT g, point(g % 100, g / 100), int4range(g, g + 10) FROM generate_series(1, 5000) g;
CREATE INDEX shapes_gist ON shapes USING gist (r);
CREATE INDEX shapes_spgist ON shapes USING spgist (p);
CREATE DATABASE second;
";

const SECOND_SQL: &str = "
CREATE TABLE other (id int PRIMARY KEY, v text);
INSERT INTO other SELECT g, md5(g::text) || md5((g + 1)::text) FROM generate_series(1, 5000) g;
";

/// Builds the standard cluster, panicking with a clear message on failure (for tests).
pub fn standard_cluster(major: u32, checksums: bool) -> StandardCluster {
    let opts = FixtureOptions {
        major,
        checksums,
        big_relation: false,
    };
    standard_cluster_with(opts)
        .unwrap_or_else(|e| panic!("could not build the PostgreSQL {major} test cluster: {e}"))
}

/// Builds the standard cluster; fails (rather than skips) when the binaries are missing.
pub fn standard_cluster_with(opts: FixtureOptions) -> Result<StandardCluster> {
    require_binaries(opts.major);
    let cluster_opts = ClusterOptions::new(opts.major, opts.checksums)
        .throwaway()
        .setting("autovacuum", "off");
    let mut cluster = Cluster::init_temp(&cluster_opts)?;
    let tablespace_dir = cluster.make_dir("tblspc")?;
    cluster.start()?;
    cluster.psql("postgres", SCHEMA_SQL)?;
    cluster.psql("postgres", &tablespace_sql(&tablespace_dir))?;
    cluster.psql("second", SECOND_SQL)?;
    if opts.big_relation {
        cluster.psql("postgres", &big_sql())?;
    }
    let relations = lookup_relations(&cluster, opts.big_relation)?;
    cluster.stop()?;
    Ok(StandardCluster {
        cluster,
        relations,
        tablespace_dir,
    })
}

fn tablespace_sql(dir: &Path) -> String {
    format!(
        "CREATE TABLESPACE outside LOCATION '{}';
         CREATE TABLE in_space (id int, v text) TABLESPACE outside;
         ALTER TABLE in_space ADD PRIMARY KEY (id) USING INDEX TABLESPACE outside;
         INSERT INTO in_space SELECT g, md5(g::text) FROM generate_series(1, 3000) g;",
        dir.display()
    )
}

fn big_sql() -> String {
    format!(
        "BEGIN;
         CREATE TABLE big (id int, pad text) WITH (fillfactor = 10, autovacuum_enabled = off);
         INSERT INTO big SELECT g, repeat('b', 500) FROM generate_series(1, {BIG_ROWS}) g;
         COMMIT;"
    )
}

fn lookup_relations(cluster: &Cluster, big: bool) -> Result<BTreeMap<(String, String), String>> {
    let mut map = BTreeMap::new();
    let mut add = |db: &str, name: &str, lookup: &str| -> Result<()> {
        map.insert(
            (db.to_string(), name.to_string()),
            cluster.relation_filepath(db, lookup)?,
        );
        Ok(())
    };
    for name in POSTGRES_RELATIONS {
        add("postgres", name, name)?;
    }
    let toast = cluster.query_value(
        "postgres",
        "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'docs'::regclass",
    )?;
    add("postgres", "docs_toast", &toast)?;
    add("second", "other", "other")?;
    if big {
        add("postgres", "big", "big")?;
    }
    Ok(map)
}

impl StandardCluster {
    /// The data directory.
    pub fn datadir(&self) -> &Path {
        self.cluster.datadir()
    }

    /// The main fork's first segment, relative to the data directory (`base/5/16384`).
    pub fn rel(&self, db: &str, name: &str) -> &str {
        self.relations
            .get(&(db.to_string(), name.to_string()))
            .unwrap_or_else(|| {
                panic!("relation {name} in database {db} is not part of the standard cluster")
            })
    }

    /// The directory of relation `name`'s file relative to the data directory (`base/5`: the
    /// database's directory for a relation in the default tablespace).
    pub fn rel_dir(&self, db: &str, name: &str) -> &Path {
        Path::new(self.rel(db, name))
            .parent()
            .unwrap_or(Path::new(""))
    }

    /// A fork's segment file relative to the data directory: fork `main|fsm|vm|init`, segment `segno`.
    pub fn fork_rel(&self, db: &str, name: &str, fork: &str, segno: u64) -> String {
        let base = self.rel(db, name);
        let forked = if fork == "main" {
            base.to_string()
        } else {
            format!("{base}_{fork}")
        };
        if segno == 0 {
            forked
        } else {
            format!("{forked}.{segno}")
        }
    }

    /// Absolute path of a fork's segment file.
    pub fn fork_file(&self, db: &str, name: &str, fork: &str, segno: u64) -> PathBuf {
        self.datadir().join(self.fork_rel(db, name, fork, segno))
    }

    /// Absolute path of the main fork's first segment.
    pub fn file(&self, db: &str, name: &str) -> PathBuf {
        self.fork_file(db, name, "main", 0)
    }

    /// Whole blocks in a fork, over all its segments.
    pub fn blocks(&self, db: &str, name: &str, fork: &str) -> u64 {
        let mut total = 0;
        for segno in 0.. {
            match fs::metadata(self.fork_file(db, name, fork, segno)) {
                Ok(meta) => total += meta.len() / BLCKSZ as u64,
                Err(_) => break,
            }
        }
        total
    }
}
