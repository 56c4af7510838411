//! One throwaway cluster: `initdb` into a private work directory, start and stop with `pg_ctl`,
//! SQL through `psql`, all as the unprivileged user when we are root. The server listens only on
//! a Unix socket inside the work directory. Dropping the cluster stops the server and removes the
//! work directory (unless [`Cluster::keep`] was called).
//!
//! Work directory layout: `data/` (the data directory), `sock/` (the socket), `server.log`, and
//! any directory made with [`Cluster::make_dir`] (e.g. a tablespace outside the data directory).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::binaries::PgBinaries;
use crate::error::{io_context, Error, Result};
use crate::exec;
use crate::user::RunAs;

/// The port number: it only names the socket file, which lives in the cluster's own directory.
const PORT: u16 = 5432;
/// The superuser `initdb -U` creates.
const SUPERUSER: &str = "postgres";
/// Seconds `pg_ctl -w` waits for start and stop.
const PG_CTL_TIMEOUT: &str = "300";

/// How to make a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub major: u32,
    /// Data checksums on (`initdb -k`) or off (`--no-data-checksums` on 18+, the default before).
    pub checksums: bool,
    /// Extra `postgresql.conf` settings, written after ours.
    pub settings: Vec<(String, String)>,
    /// The binaries to use instead of the ones [`PgBinaries::find`] finds (an installation
    /// with an extension the others lack, such as Debian's with `postgresql-15-rum`).
    pub bindir: Option<PathBuf>,
}

impl ClusterOptions {
    /// Options for `major` with or without data checksums and no extra settings.
    pub fn new(major: u32, checksums: bool) -> ClusterOptions {
        ClusterOptions {
            major,
            checksums,
            settings: Vec::new(),
            bindir: None,
        }
    }

    /// Uses the binaries in `dir` (which must be of this major version).
    pub fn bindir(mut self, dir: &Path) -> ClusterOptions {
        self.bindir = Some(dir.to_path_buf());
        self
    }

    /// Adds one `postgresql.conf` setting (the value is written as given; quote strings).
    pub fn setting(mut self, name: &str, value: &str) -> ClusterOptions {
        self.settings.push((name.to_string(), value.to_string()));
        self
    }

    /// Settings for a cluster whose data may be lost: no fsync, minimal WAL (so a table created
    /// and filled in one transaction writes no WAL), no WAL senders. `synchronous_commit` stays
    /// on: with it off, VACUUM right after a commit cannot set hint bits or all-visible flags.
    pub fn throwaway(self) -> ClusterOptions {
        self.setting("fsync", "off")
            .setting("full_page_writes", "off")
            .setting("wal_level", "minimal")
            .setting("max_wal_senders", "0")
    }
}

/// A local PostgreSQL cluster in a private work directory.
#[derive(Debug)]
pub struct Cluster {
    bin: PgBinaries,
    user: Option<RunAs>,
    root: PathBuf,
    datadir: PathBuf,
    socket_dir: PathBuf,
    log_file: PathBuf,
    checksums: bool,
    running: bool,
    keep: bool,
}

impl Cluster {
    /// `initdb` a cluster of `major` in the work directory `dir` (created; must be empty if it exists).
    pub fn init(major: u32, checksums: bool, dir: &Path) -> Result<Cluster> {
        Cluster::init_with(&ClusterOptions::new(major, checksums), dir)
    }

    /// `initdb` a cluster in a new work directory under `$PGCHECKDB_TMPDIR` (default `/tmp`, not
    /// `$TMPDIR`: the directory must be reachable by the unprivileged user).
    pub fn init_temp(opts: &ClusterOptions) -> Result<Cluster> {
        let parent = std::env::var_os("PGCHECKDB_TMPDIR")
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let dir = unique_dir(&parent)?;
        Cluster::init_with(opts, &dir)
    }

    /// `initdb` a cluster with `opts` in the work directory `dir`.
    pub fn init_with(opts: &ClusterOptions, dir: &Path) -> Result<Cluster> {
        let bin = match &opts.bindir {
            Some(dir) => PgBinaries::at(opts.major, dir)?,
            None => PgBinaries::find(opts.major)?,
        };
        let user = RunAs::detect()?;
        prepare_work_dir(dir, user.as_ref())?;
        let cluster = Cluster {
            bin,
            user,
            root: dir.to_path_buf(),
            datadir: dir.join("data"),
            socket_dir: dir.join("sock"),
            log_file: dir.join("server.log"),
            checksums: opts.checksums,
            running: false,
            keep: false,
        };
        cluster.make_dir("sock")?;
        cluster.run_initdb()?;
        cluster.write_settings(&opts.settings)?;
        Ok(cluster)
    }

    fn run_initdb(&self) -> Result<()> {
        let mut cmd = self.command("initdb");
        cmd.arg("-D").arg(&self.datadir).args([
            "-A",
            "trust",
            "-U",
            SUPERUSER,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        if self.checksums {
            cmd.arg("-k");
        } else if self.bin.major >= 18 {
            cmd.arg("--no-data-checksums");
        }
        exec::run(
            cmd,
            &format!("initdb (PostgreSQL {})", self.bin.major),
            None,
        )
        .map(drop)
    }

    fn write_settings(&self, extra: &[(String, String)]) -> Result<()> {
        let mut text = String::from("\n# pgcheckdb-cluster\nlisten_addresses = ''\n");
        text.push_str(&format!(
            "unix_socket_directories = '{}'\nport = {PORT}\n",
            self.socket_dir.display()
        ));
        for (name, value) in extra {
            text.push_str(&format!("{name} = {value}\n"));
        }
        let conf = self.datadir.join("postgresql.conf");
        let mut current = fs::read_to_string(&conf)
            .map_err(io_context(format!("could not read \"{}\"", conf.display())))?;
        current.push_str(&text);
        fs::write(&conf, current).map_err(io_context(format!(
            "could not write \"{}\"",
            conf.display()
        )))
    }

    /// The PostgreSQL installation in use.
    pub fn binaries(&self) -> &PgBinaries {
        &self.bin
    }

    /// The major version.
    pub fn major(&self) -> u32 {
        self.bin.major
    }

    /// Whether the cluster was made with data checksums.
    pub fn checksums(&self) -> bool {
        self.checksums
    }

    /// The user PostgreSQL runs as (`None`: ourselves).
    pub fn user(&self) -> Option<&RunAs> {
        self.user.as_ref()
    }

    /// The data directory.
    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// The work directory holding the data directory, socket and log.
    pub fn work_dir(&self) -> &Path {
        &self.root
    }

    /// The server log.
    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// Whether this handle started the server and has not stopped it.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Keeps the work directory after drop (the server is still stopped).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Makes a directory `name` inside the work directory, owned by the cluster's user: for
    /// tablespaces, which must live outside the data directory.
    pub fn make_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.root.join(name);
        fs::create_dir_all(&dir).map_err(io_context(format!(
            "could not create \"{}\"",
            dir.display()
        )))?;
        if let Some(user) = &self.user {
            user.chown(&dir)?;
        }
        Ok(dir)
    }

    /// A command for one of the installation's programs, run as the cluster's user.
    pub fn command(&self, program: &str) -> Command {
        exec::command(&self.bin.program(program), self.user.as_ref(), &self.root)
    }

    /// Runs a program of the installation with `args`; fails with its output on non-zero exit.
    pub fn run_program(&self, program: &str, args: &[&str]) -> Result<Output> {
        let mut cmd = self.command(program);
        cmd.args(args);
        exec::run(cmd, program, None)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&mut self) -> Result<()> {
        if self.running {
            return Ok(());
        }
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D")
            .arg(&self.datadir)
            .arg("-l")
            .arg(&self.log_file)
            .args(["-w", "-t", PG_CTL_TIMEOUT, "start"]);
        if let Err(e) = exec::run(cmd, "pg_ctl start", None) {
            return Err(self.with_log(e));
        }
        self.running = true;
        Ok(())
    }

    /// Stops the server with a fast shutdown and waits for it (a clean shutdown checkpoint).
    pub fn stop(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        self.pg_ctl_stop("fast")?;
        self.running = false;
        Ok(())
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<()> {
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D")
            .arg(&self.datadir)
            .args(["-m", mode, "-w", "-t", PG_CTL_TIMEOUT, "stop"]);
        exec::run(cmd, "pg_ctl stop", None)
            .map(drop)
            .map_err(|e| self.with_log(e))
    }

    /// Adds the end of the server log to a failure.
    fn with_log(&self, e: Error) -> Error {
        let log = fs::read_to_string(&self.log_file).unwrap_or_default();
        match e {
            Error::Command {
                what,
                status,
                mut output,
            } => {
                output.push_str(&format!(
                    "\n--- {} ---\n{}",
                    self.log_file.display(),
                    exec::tail(&log, 40)
                ));
                Error::Command {
                    what,
                    status,
                    output,
                }
            }
            other => other,
        }
    }

    /// Runs an SQL script in database `db` (statements run one by one, stopping at the first
    /// error) and returns psql's output.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String> {
        let mut cmd = self.psql_command(db);
        cmd.args(["-q", "-f", "-"]);
        let out = exec::run(cmd, &format!("psql (database {db})"), Some(sql))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs one query and returns its single value (unaligned, tuples only, trimmed).
    pub fn query_value(&self, db: &str, sql: &str) -> Result<String> {
        let mut cmd = self.psql_command(db);
        cmd.args(["-A", "-t", "-c", sql]);
        let out = exec::run(cmd, &format!("psql -c {sql:?}"), None)?;
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        match lines.as_slice() {
            [one] => Ok(one.trim().to_string()),
            _ => Err(Error::Query(format!(
                "{sql:?} returned {} lines, expected 1: {text:?}",
                lines.len()
            ))),
        }
    }

    fn psql_command(&self, db: &str) -> Command {
        let mut cmd = self.command("psql");
        cmd.args(["-X", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket_dir)
            .args(["-p", &PORT.to_string(), "-U", SUPERUSER, "-d", db]);
        cmd
    }

    /// The path of a relation's main fork, relative to the data directory
    /// (`pg_relation_filepath`), e.g. `base/5/16384` or `pg_tblspc/16390/PG_15_.../5/16391`.
    pub fn relation_filepath(&self, db: &str, relname: &str) -> Result<String> {
        let quoted = relname.replace('\'', "''");
        let path = self.query_value(
            db,
            &format!("SELECT pg_relation_filepath('{quoted}'::regclass)"),
        )?;
        if path.is_empty() {
            return Err(Error::Query(format!(
                "relation {relname} in database {db} has no file"
            )));
        }
        Ok(path)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running && self.pg_ctl_stop("fast").is_err() {
            let _ = self.pg_ctl_stop("immediate");
        }
        if self.keep {
            eprintln!("pgcheckdb-cluster: keeping {}", self.root.display());
        } else {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// Creates `dir` (or checks that it is empty), mode 0700, owned by `user`.
fn prepare_work_dir(dir: &Path, user: Option<&RunAs>) -> Result<()> {
    fs::create_dir_all(dir).map_err(io_context(format!(
        "could not create \"{}\"",
        dir.display()
    )))?;
    let mut entries =
        fs::read_dir(dir).map_err(io_context(format!("could not list \"{}\"", dir.display())))?;
    if entries.next().is_some() {
        return Err(Error::Io {
            context: format!("work directory \"{}\"", dir.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "directory is not empty",
            ),
        });
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(io_context(format!("could not chmod \"{}\"", dir.display())))?;
    if let Some(user) = user {
        user.chown(dir)?;
    }
    Ok(())
}

/// A new, uniquely named directory under `parent` (`pgcheckdb-<pid>-<n>`).
fn unique_dir(parent: &Path) -> Result<PathBuf> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("pgcheckdb-{}-{n}-{nanos:x}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io_context(format!(
                    "could not create a directory in \"{}\"",
                    parent.display()
                ))(e))
            }
        }
    }
}

/// Helpers for crash, standby and upgrade scenarios (see also `derived.rs`).
impl Cluster {
    /// Stops the server with an immediate shutdown: no shutdown checkpoint, so the next start
    /// runs crash recovery.
    pub fn stop_immediate(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        self.pg_ctl_stop("immediate")?;
        self.running = false;
        Ok(())
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// libpq options that reach this server: `-h <socket dir> -p <port> -U <superuser>`.
    pub fn conn_args(&self) -> Vec<String> {
        vec![
            "-h".to_string(),
            self.socket_dir.display().to_string(),
            "-p".to_string(),
            PORT.to_string(),
            "-U".to_string(),
            SUPERUSER.to_string(),
        ]
    }

    /// A libpq connection string that reaches this server (socket, port, superuser).
    pub fn conninfo(&self) -> String {
        format!(
            "host='{}' port={PORT} user={SUPERUSER}",
            self.socket_dir.display()
        )
    }

    /// Appends `postgresql.conf` settings (they take effect at the next start).
    pub fn add_settings(&self, settings: &[(&str, &str)]) -> Result<()> {
        let owned: Vec<(String, String)> = settings
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        self.write_settings(&owned)
    }

    /// Runs `pgbench` against database `db` with `args` (e.g. `-i -s 1`) and returns its output.
    pub fn pgbench(&self, db: &str, args: &[&str]) -> Result<String> {
        let out = exec::run(self.pgbench_command(db, args), "pgbench", None)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts `pgbench` in the background; the caller waits for the child (its output is
    /// discarded, a failure shows in its exit status).
    pub fn spawn_pgbench(&self, db: &str, args: &[&str]) -> Result<std::process::Child> {
        let mut cmd = self.pgbench_command(db, args);
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd.spawn()
            .map_err(io_context("could not start pgbench".to_string()))
    }

    fn pgbench_command(&self, db: &str, args: &[&str]) -> Command {
        let mut cmd = self.command("pgbench");
        cmd.args(self.conn_args()).args(args).arg(db);
        cmd
    }

    /// Starts `psql` in the background running `sql` in `db`, e.g. a transaction that stays
    /// open until the server stops; the caller waits for or kills the child.
    pub fn spawn_psql(&self, db: &str, sql: &str) -> Result<std::process::Child> {
        let mut cmd = self.psql_command(db);
        cmd.args(["-q", "-c", sql])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd.spawn()
            .map_err(io_context("could not start psql".to_string()))
    }

    /// A handle for a data directory another program made in the work directory `root`
    /// (`root/data`, with a `sock/` directory): a standby or an upgraded cluster. Not running.
    pub(crate) fn adopt(
        bin: PgBinaries,
        user: Option<RunAs>,
        root: &Path,
        checksums: bool,
    ) -> Cluster {
        Cluster {
            bin,
            user,
            root: root.to_path_buf(),
            datadir: root.join("data"),
            socket_dir: root.join("sock"),
            log_file: root.join("server.log"),
            checksums,
            running: false,
            keep: false,
        }
    }

    /// A new empty work directory (as [`Cluster::init_temp`] makes) owned by `user`.
    pub(crate) fn temp_work_dir(user: Option<&RunAs>) -> Result<PathBuf> {
        let parent = std::env::var_os("PGCHECKDB_TMPDIR")
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let dir = unique_dir(&parent)?;
        prepare_work_dir(&dir, user)?;
        Ok(dir)
    }
}
