//! The SQL of the experiments. Each function returns one psql script; the experiments time each
//! script with the wall clock around psql.
//!
//! Row-by-row work ("one statement per row inside one transaction") runs as a PL/pgSQL `DO`
//! loop: the loop executes one `INSERT` or `UPDATE` statement per row, all inside the `DO`
//! statement's single transaction, without a client round trip per row. Wide columns use
//! `STORAGE PLAIN` (workload B, checkpoint) so the rows are stored as written, never compressed or moved to TOAST, and
//! each row really occupies the space its type says.

/// Workload A's table name.
pub const TABLE_A: &str = "bench_a";
/// Workload B's table name.
pub const TABLE_B: &str = "bench_b";
/// The checkpoint experiment's table name.
pub const TABLE_CKPT: &str = "bench_ckpt";

/// Workload A, setup: a fresh table with a unique index on `increment`.
pub fn a_create() -> String {
    format!(
        "DROP TABLE IF EXISTS {TABLE_A};\n\
         CREATE TABLE {TABLE_A} (increment int, random_guid uuid, random_value int, \
         big_col char(1000) DEFAULT 'a');\n\
         CREATE UNIQUE INDEX {TABLE_A}_increment ON {TABLE_A} (increment);\n"
    )
}

/// Workload A, phase 1: `rows` single-row INSERTs in one transaction.
pub fn a_insert(rows: u64) -> String {
    format!(
        "DO $$\nBEGIN\n  FOR i IN 1..{rows} LOOP\n    \
         INSERT INTO {TABLE_A} (increment, random_guid, random_value) \
         VALUES (i, gen_random_uuid(), (random() * 1000000)::int);\n  \
         END LOOP;\nEND\n$$;\n"
    )
}

/// Workload A, phase 2: one UPDATE of `random_value` per row, by `increment`, in one
/// transaction.
pub fn a_update(rows: u64) -> String {
    format!(
        "DO $$\nBEGIN\n  FOR i IN 1..{rows} LOOP\n    \
         UPDATE {TABLE_A} SET random_value = (random() * 1000000)::int WHERE increment = i;\n  \
         END LOOP;\nEND\n$$;\n"
    )
}

/// Drops a table.
pub fn drop_table(table: &str) -> String {
    format!("DROP TABLE IF EXISTS {table};\n")
}

/// Workload B, setup: rows of `char(2000)`, four to a page.
pub fn b_create() -> String {
    format!(
        "DROP TABLE IF EXISTS {TABLE_B};\n\
         CREATE TABLE {TABLE_B} (id int, big_col char(2000) DEFAULT 'b');\n\
         ALTER TABLE {TABLE_B} ALTER COLUMN big_col SET STORAGE PLAIN;\n"
    )
}

/// Workload B, phase 1: `rows` rows in one INSERT.
pub fn b_insert(rows: u64) -> String {
    format!("INSERT INTO {TABLE_B} (id) SELECT i FROM generate_series(1, {rows}) AS i;\n")
}

/// Workload B, phase 2: `scans` sequential scans of the whole table (no parallel workers, so
/// one backend reads, and checks, every page).
pub fn b_selects(scans: u32) -> String {
    let mut sql = String::from("SET max_parallel_workers_per_gather = 0;\n");
    for _ in 0..scans {
        sql.push_str(&format!("SELECT count(*) FROM {TABLE_B};\n"));
    }
    sql
}

/// `CHECKPOINT`.
pub fn checkpoint() -> String {
    "CHECKPOINT;\n".to_string()
}

/// The checkpoint experiment, setup: rows of `char(8000)`, one to a page.
pub fn ckpt_create() -> String {
    format!(
        "DROP TABLE IF EXISTS {TABLE_CKPT};\n\
         CREATE TABLE {TABLE_CKPT} (id int, big_col char(8000) DEFAULT 'c');\n\
         ALTER TABLE {TABLE_CKPT} ALTER COLUMN big_col SET STORAGE PLAIN;\n"
    )
}

/// The checkpoint experiment: `rows` rows committed every `batch` rows, with a `CHECKPOINT`
/// after every commit when `checkpoint_each` is set, and one final `CHECKPOINT` either way (so
/// both variants end with everything on disk).
pub fn ckpt_load(rows: u64, batch: u64, checkpoint_each: bool) -> String {
    let mut sql = String::new();
    let mut first = 1;
    while first <= rows {
        let last = (first + batch - 1).min(rows);
        sql.push_str(&format!(
            "BEGIN;\nINSERT INTO {TABLE_CKPT} (id) SELECT i FROM generate_series({first}, {last}) AS i;\nCOMMIT;\n"
        ));
        if checkpoint_each {
            sql.push_str("CHECKPOINT;\n");
        }
        first = last + 1;
    }
    sql.push_str("CHECKPOINT;\n");
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_script_commits_and_checkpoints_every_batch() {
        let sql = ckpt_load(40, 16, true);
        assert_eq!(sql.matches("COMMIT;").count(), 3);
        assert_eq!(sql.matches("CHECKPOINT;").count(), 4);
        assert!(sql.contains("generate_series(33, 40)"));
        let auto = ckpt_load(40, 16, false);
        assert_eq!(auto.matches("COMMIT;").count(), 3);
        assert_eq!(auto.matches("CHECKPOINT;").count(), 1);
    }

    #[test]
    fn workload_a_loops_over_every_row() {
        assert!(a_update(100).contains("FOR i IN 1..100 LOOP"));
        assert!(a_update(100).contains("WHERE increment = i"));
        assert!(a_create().contains("char(1000)"));
        assert!(a_create().contains("UNIQUE INDEX"));
    }

    #[test]
    fn workload_b_scans_repeat() {
        assert_eq!(b_selects(3).matches("SELECT count(*)").count(), 3);
    }
}
