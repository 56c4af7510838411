//! What the benches ask PostgreSQL: which installation to use, and counter snapshots whose
//! differences give the WAL written (`pg_current_wal_lsn`), full-page images (`pg_stat_wal`,
//! 14+), checkpoints and the buffers they wrote (`pg_stat_bgwriter` up to 16,
//! `pg_stat_checkpointer` from 17, where those columns moved) and the checkpointer's writes in
//! `pg_stat_io` (16+).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pgcheckdb_cluster::{Cluster, PgBinaries};
use serde::Serialize;

/// The versions looked for when none is asked for, newest first.
const KNOWN_MAJORS: [u32; 6] = [19, 18, 17, 16, 15, 14];

/// How long to let the statistics settle after a workload (PostgreSQL 14's statistics collector
/// receives counters asynchronously; later versions flush them when a backend exits).
const STATS_SETTLE: Duration = Duration::from_millis(600);

/// Counters at one moment; differences of two snapshots describe what happened in between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// `pg_current_wal_lsn()` as a byte position.
    pub wal_lsn: f64,
    /// Full-page images written to WAL (`pg_stat_wal.wal_fpi`).
    pub wal_fpi: f64,
    /// Completed checkpoints (timed + requested; `num_done` on 18+).
    pub checkpoints: f64,
    /// Buffers written by checkpoints.
    pub checkpoint_buffers: f64,
    /// Blocks written by the checkpointer according to `pg_stat_io` (16+), else `None`.
    pub io_checkpointer_writes: Option<f64>,
}

/// The difference `after - before`, all in counts or bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Delta {
    pub wal_bytes: f64,
    pub wal_fpi: f64,
    pub checkpoints: f64,
    pub checkpoint_buffers: f64,
    pub io_checkpointer_writes: Option<f64>,
}

impl Snapshot {
    /// What happened between `before` and `self`.
    pub fn since(&self, before: &Snapshot) -> Delta {
        Delta {
            wal_bytes: self.wal_lsn - before.wal_lsn,
            wal_fpi: self.wal_fpi - before.wal_fpi,
            checkpoints: self.checkpoints - before.checkpoints,
            checkpoint_buffers: self.checkpoint_buffers - before.checkpoint_buffers,
            io_checkpointer_writes: self
                .io_checkpointer_writes
                .zip(before.io_checkpointer_writes)
                .map(|(a, b)| a - b),
        }
    }
}

/// The snapshot query for a major version.
pub fn snapshot_sql(major: u32) -> String {
    let checkpoints = match major {
        ..=16 => "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)",
        17 => "(SELECT num_timed + num_requested FROM pg_stat_checkpointer)",
        _ => "(SELECT num_done FROM pg_stat_checkpointer)",
    };
    let buffers = match major {
        ..=16 => "(SELECT buffers_checkpoint FROM pg_stat_bgwriter)",
        _ => "(SELECT buffers_written FROM pg_stat_checkpointer)",
    };
    let io = if major >= 16 {
        "(SELECT coalesce(sum(writes), 0) FROM pg_stat_io WHERE backend_type = 'checkpointer')"
    } else {
        "NULL"
    };
    format!(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') || '|' || \
         (SELECT wal_fpi FROM pg_stat_wal) || '|' || {checkpoints} || '|' || {buffers} || '|' || \
         coalesce({io}::text, '')"
    )
}

/// Reads the counters of a running cluster.
pub fn snapshot(cluster: &Cluster) -> Result<Snapshot> {
    let line = cluster.query_value("postgres", &snapshot_sql(cluster.major()))?;
    parse_snapshot(&line)
}

/// Waits for the statistics to settle, then reads the counters.
pub fn settled_snapshot(cluster: &Cluster) -> Result<Snapshot> {
    std::thread::sleep(STATS_SETTLE);
    snapshot(cluster)
}

/// Parses `lsn|fpi|checkpoints|buffers|io` (io may be empty).
pub fn parse_snapshot(line: &str) -> Result<Snapshot> {
    let fields: Vec<&str> = line.split('|').collect();
    if fields.len() != 5 {
        bail!("unexpected counter line {line:?}");
    }
    let num = |s: &str| -> Result<f64> {
        s.trim()
            .parse::<f64>()
            .with_context(|| format!("bad number {s:?} in {line:?}"))
    };
    Ok(Snapshot {
        wal_lsn: num(fields[0])?,
        wal_fpi: num(fields[1])?,
        checkpoints: num(fields[2])?,
        checkpoint_buffers: num(fields[3])?,
        io_checkpointer_writes: match fields[4].trim() {
            "" => None,
            s => Some(num(s)?),
        },
    })
}

/// Runs an SQL script and returns the wall-clock seconds it took (psql start included, a few
/// milliseconds).
pub fn timed_psql(cluster: &Cluster, sql: &str) -> Result<f64> {
    let start = Instant::now();
    cluster.psql("postgres", sql)?;
    Ok(start.elapsed().as_secs_f64())
}

/// The PostgreSQL installation to use: `--pg-bin DIR` if given, else the `postgres` on `PATH`
/// or one found by [`PgBinaries::find`] (env `PGCHECKDB_PG<major>_BIN`, the install cache,
/// `/usr/lib/postgresql/<major>/bin`, `pg_config`): version `want` if given, else the newest.
/// A directory chosen here is exported as `PGCHECKDB_PG<major>_BIN` so the clusters use it.
/// Call this before starting any thread.
pub fn choose_binaries(want: Option<u32>, pg_bin: Option<&Path>) -> Result<PgBinaries> {
    if let Some(dir) = pg_bin {
        let bin = binaries_at(dir)?;
        if let Some(v) = want.filter(|v| *v != bin.major) {
            bail!(
                "--pg-bin {} holds PostgreSQL {}, not {v}",
                dir.display(),
                bin.major
            );
        }
        export(&bin);
        return Ok(bin);
    }
    let on_path = path_dir("postgres").and_then(|d| binaries_at(&d).ok());
    if let Some(bin) = on_path.filter(|b| want.is_none_or(|v| v == b.major)) {
        let newest_known = want.is_some() || newest_found().is_none_or(|n| n.major <= bin.major);
        if newest_known {
            export(&bin);
            return Ok(bin);
        }
    }
    match want {
        Some(v) => PgBinaries::find(v).map_err(anyhow::Error::from),
        None => newest_found().ok_or_else(|| {
            anyhow::anyhow!(
                "no PostgreSQL installation found (PATH, pg_config, /usr/lib/postgresql/*/bin, \
                 {}); install one or pass --pg-bin DIR",
                pgcheckdb_cluster::INSTALL_HINT
            )
        }),
    }
}

/// The newest installation [`PgBinaries::find`] knows.
fn newest_found() -> Option<PgBinaries> {
    KNOWN_MAJORS.iter().find_map(|m| PgBinaries::find(*m).ok())
}

/// The binaries in `dir`, whatever their version.
fn binaries_at(dir: &Path) -> Result<PgBinaries> {
    let out = Command::new(dir.join("postgres"))
        .arg("--version")
        .output()
        .with_context(|| format!("could not run {}/postgres --version", dir.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let major = parse_major(&text)
        .with_context(|| format!("cannot tell the version of {}/postgres", dir.display()))?;
    Ok(PgBinaries::at(major, dir)?)
}

/// The major version in `postgres (PostgreSQL) 17.2 ...`.
pub fn parse_major(version: &str) -> Option<u32> {
    let rest = version.split("(PostgreSQL)").nth(1)?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The directory on `PATH` holding `program`.
fn path_dir(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|d| d.join(program).is_file())
}

fn export(bin: &PgBinaries) {
    std::env::set_var(format!("PGCHECKDB_PG{}_BIN", bin.major), &bin.bindir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counter_lines() {
        let s = parse_snapshot("123456|7|3|900|").unwrap();
        assert_eq!(s.wal_lsn, 123456.0);
        assert_eq!(s.io_checkpointer_writes, None);
        let t = parse_snapshot("223456|17|5|1900|2000").unwrap();
        let d = t.since(&s);
        assert_eq!(d.wal_bytes, 100000.0);
        assert_eq!(d.wal_fpi, 10.0);
        assert_eq!(d.checkpoints, 2.0);
        assert_eq!(d.checkpoint_buffers, 1000.0);
        assert_eq!(d.io_checkpointer_writes, None);
        assert!(parse_snapshot("1|2|3").is_err());
        assert!(parse_snapshot("x|2|3|4|").is_err());
    }

    #[test]
    fn snapshot_sql_follows_the_version() {
        assert!(snapshot_sql(14).contains("pg_stat_bgwriter"));
        assert!(!snapshot_sql(15).contains("pg_stat_io"));
        assert!(snapshot_sql(16).contains("pg_stat_io"));
        assert!(snapshot_sql(17).contains("num_requested"));
        assert!(snapshot_sql(18).contains("num_done"));
    }

    #[test]
    fn parses_versions() {
        assert_eq!(parse_major("postgres (PostgreSQL) 17.2"), Some(17));
        assert_eq!(parse_major("nonsense"), None);
    }
}
