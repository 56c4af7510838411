//! `pgcheckdb demo`: a guided tour on the PostgreSQL installed here. It makes a throwaway
//! cluster with data checksums, loads a small table, stops the server, damages a few bytes of
//! one page the way a failing disk would, then runs `verify` (which names the table), `inspect`
//! of the damaged page, and shows what the server itself says. Everything lives in a temp
//! directory that is removed at the end, also after Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use pgcheckdb_cluster::{Cluster, ClusterOptions, PgBinaries};
use pgcheckdb_pg::ops::corrupt;

use crate::cli::{Common, DemoArgs};
use crate::exit::EXIT_OK;

/// Oldest and newest major versions pgcheckdb reads.
const MAJORS: std::ops::RangeInclusive<u32> = pgcheckdb_pg::format::control::SUPPORTED_MAJORS;
/// Block of the demo table that gets damaged.
const DAMAGED_BLOCK: u64 = 7;
/// Bytes flipped inside that block, as a failing disk or controller might.
const DAMAGED_OFFSETS: [usize; 3] = [5000, 5001, 6100];

pub fn run(_common: &Common, args: &DemoArgs) -> anyhow::Result<u8> {
    let interrupted = install_interrupt_flag();
    let bin = find_binaries(args.pg_bin.as_deref())?;
    say(&format!(
        "Using {} from {}.",
        bin.version,
        bin.bindir.display()
    ));
    if let Some(dir) = &args.pg_bin {
        std::env::set_var(format!("PGCHECKDB_PG{}_BIN", bin.major), dir);
    }
    let mut cluster = make_cluster(bin.major, args.rows)?;
    check_interrupt(&interrupted)?;
    let table_file = cluster.relation_filepath("postgres", "demo_orders")?;
    cluster.stop()?;
    say("The server is stopped. pgcheckdb works offline, on the files themselves.");
    step("1. A healthy cluster");
    run_self(&["verify", "-D", &datadir(&cluster)])?;
    check_interrupt(&interrupted)?;
    step("2. A failing disk flips a few bytes");
    damage(&cluster, &table_file)?;
    step("3. pgcheckdb verify finds the damage and names the table");
    run_self(&["verify", "-D", &datadir(&cluster)])?;
    check_interrupt(&interrupted)?;
    step("4. pgcheckdb inspect shows the damaged page");
    let block = DAMAGED_BLOCK.to_string();
    run_self(&[
        "inspect",
        "-D",
        &datadir(&cluster),
        "--relation",
        "demo_orders",
        "--block",
        &block,
    ])?;
    step("5. What PostgreSQL itself says when it reads that page");
    server_view(&mut cluster)?;
    step("Done");
    say("The demo cluster and its directory are removed now.");
    drop(cluster);
    Ok(EXIT_OK)
}

/// Ctrl-C sets a flag; the child processes get the signal too and fail, and the cluster's
/// `Drop` stops the server and removes the directory on the way out.
fn install_interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let _ = ctrlc::set_handler(move || f.store(true, Ordering::SeqCst));
    flag
}

fn check_interrupt(flag: &AtomicBool) -> anyhow::Result<()> {
    if flag.load(Ordering::SeqCst) {
        bail!("interrupted; cleaning up");
    }
    Ok(())
}

/// `--pg-bin DIR`; else the machine's own PostgreSQL (the `postgres` on `PATH`, then
/// `pg_config --bindir`, then the newest `/usr/lib/postgresql/<major>/bin`); else the newest
/// 14–19 that `scripts/install-postgres.sh` unpacked (or `$PGCHECKDB_PG<major>_BIN` names).
fn find_binaries(pg_bin: Option<&Path>) -> anyhow::Result<PgBinaries> {
    if let Some(dir) = pg_bin {
        return binaries_in(dir).with_context(|| {
            format!(
                "\"{}\" holds no PostgreSQL 14-19 (need initdb, pg_ctl, postgres, psql)",
                dir.display()
            )
        });
    }
    if let Some(own) = own_installations().iter().find_map(|d| binaries_in(d)) {
        return Ok(own);
    }
    MAJORS.rev().find_map(|m| PgBinaries::find(m).ok()).with_context(|| {
        format!("no PostgreSQL 14-19 found (looked in PATH, pg_config, /usr/lib/postgresql/*/bin); {}", pgcheckdb_cluster::INSTALL_HINT)
    })
}

/// The PostgreSQL 14–19 in `dir`, if any.
fn binaries_in(dir: &Path) -> Option<PgBinaries> {
    MAJORS.rev().find_map(|m| PgBinaries::at(m, dir).ok())
}

/// Directories of the machine's own PostgreSQL, in the order tried.
fn own_installations() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path).filter(|d| d.join("postgres").is_file()));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !dir.is_empty() {
                dirs.push(PathBuf::from(dir));
            }
        }
    }
    dirs.extend(
        MAJORS
            .rev()
            .map(|m| PathBuf::from(format!("/usr/lib/postgresql/{m}/bin"))),
    );
    dirs
}

fn make_cluster(major: u32, rows: u32) -> anyhow::Result<Cluster> {
    step("0. A throwaway cluster");
    say(&format!("initdb --data-checksums in a temporary directory, then a table of {rows} orders with a unique index."));
    let opts = ClusterOptions::new(major, true).throwaway();
    let mut cluster = Cluster::init_temp(&opts).context("could not create the demo cluster")?;
    cluster
        .start()
        .context("could not start the demo cluster")?;
    let sql = format!(
        "CREATE TABLE demo_orders (increment int, random_guid uuid, random_value int, big_col char(1000) DEFAULT 'a');
         CREATE UNIQUE INDEX demo_orders_increment ON demo_orders (increment);
         INSERT INTO demo_orders (increment, random_guid, random_value)
           SELECT g, md5(g::text)::uuid, (g * 7919) % 1000 FROM generate_series(1, {rows}) g;
         CHECKPOINT;"
    );
    cluster
        .psql("postgres", &sql)
        .context("could not load the demo table")?;
    say(&format!("Data directory: {}", cluster.datadir().display()));
    Ok(cluster)
}

fn datadir(cluster: &Cluster) -> String {
    cluster.datadir().display().to_string()
}

fn damage(cluster: &Cluster, table_file: &str) -> anyhow::Result<()> {
    let path: PathBuf = cluster.datadir().join(table_file);
    for offset in DAMAGED_OFFSETS {
        corrupt::flip_bit_mask(&path, DAMAGED_BLOCK, 8192, offset, 0x5A)
            .with_context(|| format!("could not damage \"{table_file}\""))?;
    }
    say(&format!(
        "Flipped bits in {} bytes (at offsets {}) of block {DAMAGED_BLOCK} of \"{table_file}\" — the table demo_orders. \
         Nothing else changed; the server would not notice until it reads that page.",
        DAMAGED_OFFSETS.len(),
        DAMAGED_OFFSETS.map(|o| o.to_string()).join(", ")
    ));
    Ok(())
}

/// Starts the server and reads the table: PostgreSQL refuses the page too.
fn server_view(cluster: &mut Cluster) -> anyhow::Result<()> {
    cluster.start()?;
    say("$ psql -c 'SELECT count(*) FROM demo_orders'");
    match cluster.query_value("postgres", "SELECT count(*) FROM demo_orders") {
        Ok(v) => say(&format!(
            "count = {v} (the server did not read the damaged page)"
        )),
        Err(e) => {
            let text = e.to_string();
            let line = text
                .lines()
                .find(|l| l.contains("ERROR") || l.contains("invalid page"))
                .unwrap_or(text.as_str());
            say(&format!("{}\n(the server found it only when a query touched the page; pgcheckdb found it before any query did)", line.trim()));
        }
    }
    cluster.stop()?;
    Ok(())
}

/// Runs this same binary with `args`, echoing the command line.
fn run_self(args: &[&str]) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the pgcheckdb binary")?;
    say(&format!("$ pgcheckdb {}", args.join(" ")));
    let status = Command::new(exe)
        .args(args)
        .arg("--no-progress")
        .status()
        .context("could not run pgcheckdb")?;
    say(&format!(
        "(exit status {})",
        status
            .code()
            .map_or("signal".to_string(), |c| c.to_string())
    ));
    Ok(())
}

fn step(title: &str) {
    println!("\n== {title} ==");
}

fn say(text: &str) {
    println!(
        "{}",
        pgcheckdb_report::escape::escape_control_keep_newlines(text)
    );
}
