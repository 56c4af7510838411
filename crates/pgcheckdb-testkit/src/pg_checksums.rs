//! Runs `pg_checksums --check` of the cluster's own version and parses the blocks it reports,
//! for cross-checking pgcheckdb against PostgreSQL's tool on the same damaged cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use pgcheckdb_cluster::Cluster;

use crate::RELSEG_SIZE;

/// One failure line: the checksum pg_checksums calculated and the one stored in the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub calculated: u16,
    pub stored: u16,
}

/// The outcome of `pg_checksums --check`.
#[derive(Debug, Clone)]
pub struct ChecksumsRun {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    /// Failures by (file relative to the data directory, absolute block).
    pub failures: BTreeMap<(String, u64), Failure>,
    /// The keys of `failures`.
    pub bad_blocks: BTreeSet<(String, u64)>,
}

/// Runs `pg_checksums --check -D <datadir>` as the cluster's user (the server must be stopped).
pub fn check(cluster: &Cluster) -> ChecksumsRun {
    let mut cmd = cluster.command("pg_checksums");
    cmd.arg("--check").arg("-D").arg(cluster.datadir());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run pg_checksums {}: {e}", cluster.major()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let failures = parse_failures(&stderr, cluster.datadir());
    let bad_blocks = failures.keys().cloned().collect();
    ChecksumsRun {
        status: out.status.code().unwrap_or(-1),
        stdout,
        stderr,
        failures,
        bad_blocks,
    }
}

/// Parses lines `checksum verification failed in file "<path>", block N: calculated checksum X
/// but block contains Y` (X, Y hexadecimal). `N` is counted inside the segment file; it becomes
/// absolute with the segment number of `<path>`.
pub fn parse_failures(stderr: &str, datadir: &Path) -> BTreeMap<(String, u64), Failure> {
    let prefix = format!("{}/", datadir.display());
    stderr
        .lines()
        .filter_map(|line| parse_line(line, &prefix))
        .collect()
}

fn parse_line(line: &str, datadir_prefix: &str) -> Option<((String, u64), Failure)> {
    let rest = line
        .split("checksum verification failed in file \"")
        .nth(1)?;
    let (path, rest) = rest.split_once('"')?;
    let (block, values) = rest.strip_prefix(", block ")?.split_once(':')?;
    let block: u64 = block.trim().parse().ok()?;
    let rel = path
        .strip_prefix(datadir_prefix)
        .unwrap_or(path)
        .trim_start_matches("./")
        .to_string();
    let name = rel.rsplit('/').next()?;
    let segno = match name.split_once('.') {
        Some((_, s)) => s.parse::<u64>().ok()?,
        None => 0,
    };
    let failure = parse_values(values)?;
    Some(((rel, segno * RELSEG_SIZE + block), failure))
}

/// ` calculated checksum 1A2B but block contains 3C4D`.
fn parse_values(text: &str) -> Option<Failure> {
    let rest = text.trim().strip_prefix("calculated checksum ")?;
    let (calculated, stored) = rest.split_once(" but block contains ")?;
    Some(Failure {
        calculated: u16::from_str_radix(calculated.trim(), 16).ok()?,
        stored: u16::from_str_radix(stored.trim(), 16).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_relative_blocks_into_absolute_ones() {
        let err = "pg_checksums: error: checksum verification failed in file \"/tmp/x/data/base/5/16384.1\", block 100: calculated checksum 1A2B but block contains 3C4D\n\
                   pg_checksums: error: checksum verification failed in file \"/tmp/x/data/pg_tblspc/16390/PG_15_202209061/5/16391\", block 0: calculated checksum 1 but block contains 2\n";
        let got = parse_failures(err, Path::new("/tmp/x/data"));
        assert_eq!(
            got.get(&("base/5/16384.1".to_string(), 131172)),
            Some(&Failure {
                calculated: 0x1A2B,
                stored: 0x3C4D
            })
        );
        assert!(got.contains_key(&("pg_tblspc/16390/PG_15_202209061/5/16391".to_string(), 0)));
    }
}
