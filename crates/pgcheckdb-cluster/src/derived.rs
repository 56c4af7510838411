//! Clusters made from another cluster's data directory: a streaming standby taken with
//! `pg_basebackup -R` from a running primary, and the result of `pg_upgrade` from a stopped
//! cluster of an older major version. Each gets its own work directory (same layout as
//! [`Cluster::init_temp`]'s) and is removed on drop like any other cluster.

use std::io::Write;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, ClusterOptions};
use crate::error::{io_context, Error, Result};
use crate::exec;

/// How long [`Cluster::wait_for_replay`] waits for a standby to catch up.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(120);

/// How `pg_upgrade` moves the relation files to the new cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradeMode {
    /// `--copy`: the old cluster stays usable.
    Copy,
    /// `--link`: hard links; the old cluster must not be started again.
    Link,
}

impl UpgradeMode {
    fn flag(self) -> &'static str {
        match self {
            UpgradeMode::Copy => "--copy",
            UpgradeMode::Link => "--link",
        }
    }
}

impl Cluster {
    /// Takes a base backup of this running primary with `pg_basebackup -R -X stream` into a new
    /// work directory and points its socket there: a standby, not yet started. The primary
    /// needs `wal_level` `replica` or higher and a free WAL sender (the defaults).
    pub fn standby_of(primary: &Cluster) -> Result<Cluster> {
        let user = primary.user().cloned();
        let root = Cluster::temp_work_dir(user.as_ref())?;
        let standby = Cluster::adopt(primary.binaries().clone(), user, &root, primary.checksums());
        standby.make_dir("sock")?;
        let mut cmd = standby.command("pg_basebackup");
        cmd.args(primary.conn_args())
            .arg("-D")
            .arg(standby.datadir())
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]);
        exec::run(cmd, "pg_basebackup", None)?;
        // The copied postgresql.conf names the primary's socket directory; ours comes later.
        standby.add_settings(&[(
            "unix_socket_directories",
            &format!("'{}'", standby.socket_dir().display()),
        )])?;
        standby.plain_primary_conninfo(primary)?;
        Ok(standby)
    }

    /// Replaces the `primary_conninfo` that `pg_basebackup -R` wrote (every option its libpq
    /// knows) with the socket, port and user only: the server's walreceiver may load an older
    /// libpq that rejects newer options such as `sslnegotiation`. The later line wins.
    fn plain_primary_conninfo(&self, primary: &Cluster) -> Result<()> {
        let conninfo = format!(
            "\nprimary_conninfo = '{}'\n",
            primary.conninfo().replace('\'', "''")
        );
        let auto_conf = self.datadir().join("postgresql.auto.conf");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&auto_conf)
            .map_err(io_context(format!(
                "could not open \"{}\"",
                auto_conf.display()
            )))?;
        file.write_all(conninfo.as_bytes())
            .map_err(io_context(format!(
                "could not write \"{}\"",
                auto_conf.display()
            )))
    }

    /// Waits until this running standby has replayed the primary's current WAL position.
    pub fn wait_for_replay(&self, primary: &Cluster) -> Result<()> {
        let target = primary.query_value("postgres", "SELECT pg_current_wal_lsn()")?;
        let check = format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn");
        let start = Instant::now();
        while start.elapsed() < REPLAY_TIMEOUT {
            if self.query_value("postgres", &check)? == "t" {
                return Ok(());
            }
            sleep(Duration::from_millis(100));
        }
        Err(Error::Query(format!(
            "standby did not replay up to {target} within {} s",
            REPLAY_TIMEOUT.as_secs()
        )))
    }

    /// Upgrades this stopped cluster with `pg_upgrade` into a new cluster of `major` (made by
    /// `initdb` with the same checksum setting, in a new work directory), not yet started.
    /// With [`UpgradeMode::Link`] this cluster must not be started again.
    pub fn upgrade_to(&self, major: u32, mode: UpgradeMode) -> Result<Cluster> {
        if self.is_running() {
            return Err(Error::Query(
                "pg_upgrade needs the old cluster stopped".to_string(),
            ));
        }
        let new = Cluster::init_temp(&ClusterOptions::new(major, self.checksums()))?;
        let mut cmd = new.command("pg_upgrade");
        cmd.arg("-b")
            .arg(&self.binaries().bindir)
            .arg("-B")
            .arg(&new.binaries().bindir)
            .arg("-d")
            .arg(self.datadir())
            .arg("-D")
            .arg(new.datadir())
            .arg("-s")
            .arg(new.socket_dir())
            .args(["-U", "postgres", "-p", "50432", "-P", "50433", mode.flag()]);
        exec::run(cmd, "pg_upgrade", None)?;
        Ok(new)
    }
}
