//! Runs `pg_checksums --check` of the cluster's own version and parses the blocks it reports,
//! for cross-checking pgcheckdb against PostgreSQL's tool on the same damaged cluster.

use std::collections::BTreeSet;
use std::path::Path;

use pgcheckdb_cluster::Cluster;

use crate::RELSEG_SIZE;

/// The outcome of `pg_checksums --check`.
#[derive(Debug, Clone)]
pub struct ChecksumsRun {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    /// `(file relative to the data directory, absolute block)` of every reported failure.
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
    let bad_blocks = parse_failures(&stderr, cluster.datadir());
    ChecksumsRun {
        status: out.status.code().unwrap_or(-1),
        stdout,
        stderr,
        bad_blocks,
    }
}

/// Parses lines `checksum verification failed in file "<path>", block N: ...`. `N` is counted
/// inside the segment file; it becomes absolute with the segment number of `<path>`.
pub fn parse_failures(stderr: &str, datadir: &Path) -> BTreeSet<(String, u64)> {
    let prefix = format!("{}/", datadir.display());
    stderr
        .lines()
        .filter_map(|line| parse_line(line, &prefix))
        .collect()
}

fn parse_line(line: &str, datadir_prefix: &str) -> Option<(String, u64)> {
    let rest = line
        .split("checksum verification failed in file \"")
        .nth(1)?;
    let (path, rest) = rest.split_once('"')?;
    let block: u64 = rest
        .strip_prefix(", block ")?
        .split(':')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let rel = path
        .strip_prefix(datadir_prefix)
        .unwrap_or(path)
        .trim_start_matches("./")
        .to_string();
    let segno = rel
        .rsplit('/')
        .next()?
        .split_once('.')
        .map_or(Some(0), |(_, s)| s.parse::<u64>().ok())?;
    Some((rel, segno * RELSEG_SIZE + block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_relative_blocks_into_absolute_ones() {
        let err = "pg_checksums: error: checksum verification failed in file \"/tmp/x/data/base/5/16384.1\", block 100: calculated checksum 1A2B but block contains 3C4D\n\
                   pg_checksums: error: checksum verification failed in file \"/tmp/x/data/pg_tblspc/16390/PG_15_202209061/5/16391\", block 0: calculated checksum 1 but block contains 2\n";
        let got = parse_failures(err, Path::new("/tmp/x/data"));
        assert!(got.contains(&("base/5/16384.1".to_string(), 131172)));
        assert!(got.contains(&("pg_tblspc/16390/PG_15_202209061/5/16391".to_string(), 0)));
    }
}
