//! PostgreSQL's own verdicts on a damaged test cluster, for the cross-checks the tests print
//! for docs/CHECKS.md: its checker `pg_amcheck` (the `amcheck` extension created first) and
//! which relations its output names, and whether a query read through an index fails.

use std::collections::BTreeSet;
use std::fmt::Display;

use pgcheckdb_cluster::Cluster;

/// The arguments of the heap and B-tree check that also looks for every heap tuple in its
/// indexes: `-d postgres --heapallindexed --parent-check`.
pub const HEAPALLINDEXED: [&str; 4] = ["-d", "postgres", "--heapallindexed", "--parent-check"];

/// Runs `pg_amcheck <connection> <args>` on the running `cluster`, after
/// `CREATE EXTENSION IF NOT EXISTS amcheck` in database `postgres`: whether it exited 0, and
/// its stdout followed by its stderr.
pub fn run(cluster: &Cluster, args: &[&str]) -> (bool, String) {
    cluster
        .psql("postgres", "CREATE EXTENSION IF NOT EXISTS amcheck;")
        .unwrap_or_else(|e| panic!("create extension amcheck: {e}"));
    let out = cluster
        .command("pg_amcheck")
        .args(cluster.conn_args())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("could not run pg_amcheck {}: {e}", cluster.major()));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// [`HEAPALLINDEXED`] on the running `cluster`.
pub fn heapallindexed(cluster: &Cluster) -> (bool, String) {
    run(cluster, &HEAPALLINDEXED)
}

/// Starts the stopped `cluster`, [`run`]s `pg_amcheck` with `args`, stops the cluster, and
/// prints the output between `--- pg_amcheck output ---` and `--- end ---`; the output.
pub fn on_stopped(cluster: &mut Cluster, args: &[&str]) -> String {
    cluster
        .start()
        .unwrap_or_else(|e| panic!("start the damaged cluster for pg_amcheck: {e}"));
    let (_, text) = run(cluster, args);
    cluster
        .stop()
        .unwrap_or_else(|e| panic!("stop after pg_amcheck: {e}"));
    eprintln!("--- pg_amcheck output ---\n{text}--- end ---");
    text
}

/// Prints a cross-check table for docs/CHECKS.md: `heading`, then one line per row, its first
/// column (the case) padded to `width`, the others after it, separated by ` | `.
pub fn print_table<A: Display, B: Display, C: Display>(
    heading: &str,
    width: usize,
    rows: impl IntoIterator<Item = (A, B, C)>,
) {
    eprintln!("{heading}");
    for (case, ours, theirs) in rows {
        eprintln!("  {:<width$} | {ours} | {theirs}", case.to_string());
    }
}

/// "yes" or "no".
pub fn yes_no(yes: bool) -> &'static str {
    if yes {
        "yes"
    } else {
        "no"
    }
}

/// The B-tree checks alone on database `postgres` (`--no-dependent-toast
/// --exclude-toast-pointers`), with `bt_index_parent_check` (`--parent-check`) when `parent`.
pub fn btree_only(parent: bool) -> Vec<&'static str> {
    let mut args = vec!["-d", "postgres"];
    if parent {
        args.push("--parent-check");
    }
    args.extend(["--no-dependent-toast", "--exclude-toast-pointers"]);
    args
}

/// [`on_stopped`] with `args`: the names among `relations` (of schema `public` in database
/// `postgres`) that its output names.
pub fn reported_among<'a>(
    cluster: &mut Cluster,
    args: &[&str],
    relations: impl IntoIterator<Item = &'a str>,
) -> BTreeSet<&'a str> {
    let text = on_stopped(cluster, args);
    relations.into_iter().filter(|r| names(&text, r)).collect()
}

/// `--checkunique` where `pg_amcheck` has it (PostgreSQL 17 and later), else nothing.
pub fn checkunique(major: u32) -> Option<&'static str> {
    (major >= 17).then_some("--checkunique")
}

/// How pg_amcheck quotes relation `public.<name>` of database `postgres`.
pub fn quoted(name: &str) -> String {
    format!("\"postgres.public.{name}\"")
}

/// Whether the output names relation `public.<name>` of database `postgres`.
pub fn names(text: &str, name: &str) -> bool {
    text.contains(&quoted(name))
}

/// The first line of the output that names relation `public.<name>` of database `postgres`.
pub fn line_naming<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let quoted = quoted(name);
    text.lines().find(|l| l.contains(&quoted))
}

/// Runs `sql` (meant to read a whole index) on the started cluster and says whether the
/// server raised an error.
pub fn query_through_index(cluster: &Cluster, sql: &str) -> String {
    let out = cluster
        .command("psql")
        .args(cluster.conn_args())
        .args(["-X", "-d", "postgres", "-c", sql])
        .output()
        .unwrap_or_else(|e| panic!("could not run psql {}: {e}", cluster.major()));
    let err = String::from_utf8_lossy(&out.stderr);
    match err.lines().find(|l| l.starts_with("ERROR")) {
        Some(line) => format!("a query through the index fails: {line}"),
        None => "a query through the index runs without error".to_string(),
    }
}

/// Starts the stopped `cluster`, runs [`heapallindexed`] and [`query_through_index`] with
/// `sql`, and stops it: both verdicts, then pg_amcheck's output, as one text to print.
pub fn index_verdicts(cluster: &mut Cluster, sql: &str) -> String {
    cluster.start().expect("start");
    let (ok, text) = heapallindexed(cluster);
    let query = query_through_index(cluster, sql);
    cluster.stop().expect("stop");
    let amcheck = if ok {
        "exit 0, notices nothing"
    } else {
        "reports a problem"
    };
    format!("pg_amcheck --heapallindexed --parent-check: {amcheck}; {query}\n{text}")
}
