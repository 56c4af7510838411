//! Metrics of a `verify` run in Prometheus' text exposition format, for `--format prometheus`
//! and for `--metrics-file` (node_exporter's textfile collector reads `*.prom` files from a
//! directory): findings by severity and kind, blocks and bytes checked, seconds, exit status and
//! the time of the last run that checked everything. The file is replaced atomically, so the
//! collector never reads half of it, from a temporary file nothing planted in a shared
//! directory can redirect; the previous file is read only if it is a small regular file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pgcheckdb_pg::finding::{Finding, Severity};
use pgcheckdb_pg::verify::report::Summary;

/// Metric name prefix.
const PREFIX: &str = "pgcheckdb_verify";

/// The name of the last-success gauge, also read back from the previous file.
pub const LAST_SUCCESS: &str = "pgcheckdb_verify_last_success_timestamp_seconds";

/// What one run gives the metrics.
pub struct Metrics<'a> {
    /// The data directory, its canonical path (label `pgdata`).
    pub pgdata: &'a str,
    pub summary: &'a Summary,
    pub findings: &'a [Finding],
    /// The exit status of the run.
    pub exit_status: u8,
    /// Unix time of the end of this run.
    pub now: f64,
    /// Unix time of the last run that checked everything (this one, or one before).
    pub last_success: Option<f64>,
}

/// A label value escaped as the exposition format wants (`\\`, `\"`, `\n`).
pub fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// Adds one gauge with its HELP and TYPE lines.
fn gauge(text: &mut String, name: &str, help: &str, samples: &[(String, f64)]) {
    let _ = writeln!(text, "# HELP {PREFIX}_{name} {help}");
    let _ = writeln!(text, "# TYPE {PREFIX}_{name} gauge");
    for (labels, value) in samples {
        let _ = writeln!(text, "{PREFIX}_{name}{{{labels}}} {value}");
    }
}

/// The whole exposition text.
pub fn render(m: &Metrics) -> String {
    let base = format!("pgdata=\"{}\"", escape_label(m.pgdata));
    let one = |v: f64| vec![(base.clone(), v)];
    let mut by_kind: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut by_severity: BTreeMap<&str, u64> = [("error", 0), ("warning", 0), ("info", 0)].into();
    for f in m.findings {
        *by_kind
            .entry((severity_name(f.severity), f.kind.name()))
            .or_default() += 1;
        *by_severity.entry(severity_name(f.severity)).or_default() += 1;
    }
    let s = m.summary;
    let mut text = String::new();
    gauge(
        &mut text,
        "findings",
        "Findings of the last run by severity and kind (kinds without findings are absent).",
        &by_kind
            .iter()
            .map(|((sev, kind), n)| {
                (
                    format!("{base},severity=\"{sev}\",kind=\"{kind}\""),
                    *n as f64,
                )
            })
            .collect::<Vec<_>>(),
    );
    gauge(
        &mut text,
        "findings_by_severity",
        "Findings of the last run by severity (every severity, zeros included).",
        &by_severity
            .iter()
            .map(|(sev, n)| (format!("{base},severity=\"{sev}\""), *n as f64))
            .collect::<Vec<_>>(),
    );
    gauge(
        &mut text,
        "corrupt_blocks",
        "Blocks with at least one error finding.",
        &one(s.corrupt_blocks as f64),
    );
    gauge(
        &mut text,
        "blocks_checked",
        "Blocks read and checked by the last run.",
        &one(s.blocks as f64),
    );
    gauge(
        &mut text,
        "bytes_checked",
        "Bytes read and checked by the last run.",
        &one(s.bytes as f64),
    );
    gauge(
        &mut text,
        "files_checked",
        "Relation files of the last run.",
        &one(s.files as f64),
    );
    gauge(
        &mut text,
        "duration_seconds",
        "Wall-clock seconds of the last run.",
        &one(s.seconds),
    );
    gauge(
        &mut text,
        "exit_status",
        "Exit status of the last run: 0 clean, 1 could not run or finish, 2 corruption found.",
        &one(f64::from(m.exit_status)),
    );
    gauge(
        &mut text,
        "complete",
        "1 when the last run checked everything (exit status 0 or 2), else 0.",
        &one(if matches!(m.exit_status, 0 | 2) {
            1.0
        } else {
            0.0
        }),
    );
    gauge(
        &mut text,
        "last_run_timestamp_seconds",
        "Unix time the last run ended.",
        &one(m.now),
    );
    if let Some(t) = m.last_success {
        let name = LAST_SUCCESS
            .trim_start_matches(PREFIX)
            .trim_start_matches('_');
        gauge(
            &mut text,
            name,
            "Unix time of the last run that checked everything (exit status 0 or 2).",
            &one(t),
        );
    }
    if let Some(l) = &s.ledger {
        gauge(
            &mut text,
            "ledger_new",
            "Damage entries of the ledger (--ledger) first found by the last run: new since the run before.",
            &one(l.new as f64),
        );
        gauge(
            &mut text,
            "ledger_open",
            "Damage entries of the ledger still open after the last run (the new ones included).",
            &one(l.open as f64),
        );
        gauge(
            &mut text,
            "ledger_repaired",
            "Damage entries of the ledger the last run checked and no longer found.",
            &one(l.repaired as f64),
        );
    }
    text
}

/// The last-success time recorded in a previous metrics file, if any.
pub fn last_success_in(previous: &str) -> Option<f64> {
    previous
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(LAST_SUCCESS) && l[LAST_SUCCESS.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The most a previous metrics file is read of: the file is a few kB.
pub const MAX_PREVIOUS_BYTES: u64 = 1 << 20;

/// The last-success time of the previous metrics file at `path`: `Ok(None)` when there is no
/// file there (or it records none). Only a regular file of at most [`MAX_PREVIOUS_BYTES`] is
/// read, never through a symbolic link and never blocking: a FIFO, device, directory, link or
/// oversized file there is an error, since pgcheckdb did not put it there.
pub fn previous_last_success(path: &Path) -> io::Result<Option<f64>> {
    match pgcheckdb_scan::open::read_regular_no_symlink(path, MAX_PREVIOUS_BYTES) {
        Ok(bytes) => Ok(last_success_in(&String::from_utf8_lossy(&bytes))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `contents` atomically: a temporary file in the same directory (so the
/// rename does not cross file systems), written and synced, then renamed over `path`. The
/// temporary file is created with `O_EXCL` under a random name (`.NAME.XXXXXX.tmp`), mode
/// 0600, so nothing planted in a shared directory can be written through; it is given mode 0644
/// through its own descriptor just before the rename. The name starts with `.` and does not
/// end in `.prom`, so a collector skips it. A symbolic link at `path` itself is replaced by the
/// rename, never written through.
pub fn write_atomically(path: &Path, contents: &str) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the metrics file needs a file name",
        )
    })?;
    let prefix = format!(".{}.", name.to_string_lossy());
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .tempfile_in(&dir)?;
    tmp.write_all(contents.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o644))?;
    // On failure the temporary file is removed when `tmp` is dropped.
    tmp.persist(path).map_err(|e| e.error)?;
    if let Ok(d) = fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgcheckdb_pg::finding::FindingKind;

    #[test]
    fn renders_findings_and_keeps_last_success() {
        let summary = Summary {
            blocks: 10,
            corrupt_blocks: 1,
            ..Default::default()
        };
        let f = Finding::for_file(
            FindingKind::ChecksumMismatch,
            Severity::Error,
            "base/5/1",
            "x".into(),
        );
        let text = render(&Metrics {
            pgdata: "/srv/a\"b",
            summary: &summary,
            findings: &[f],
            exit_status: 2,
            now: 1700000000.0,
            last_success: Some(1700000000.0),
        });
        assert!(text.contains(
            "pgcheckdb_verify_findings{pgdata=\"/srv/a\\\"b\",severity=\"error\",kind=\"checksum_mismatch\"} 1\n"
        ), "{text}");
        assert!(text.contains("pgcheckdb_verify_findings_by_severity{pgdata=\"/srv/a\\\"b\",severity=\"warning\"} 0\n"), "{text}");
        assert_eq!(last_success_in(&text), Some(1700000000.0));
        assert_eq!(last_success_in("# HELP x\n"), None);
        assert!(!text.contains("ledger"), "{text}");
    }

    #[test]
    fn renders_the_ledger_counts_when_recorded() {
        let summary = Summary {
            ledger: Some(pgcheckdb_pg::verify::report::LedgerCounts {
                new: 2,
                open: 5,
                repaired: 1,
            }),
            ..Default::default()
        };
        let text = render(&Metrics {
            pgdata: "/d",
            summary: &summary,
            findings: &[],
            exit_status: 2,
            now: 1.0,
            last_success: None,
        });
        for line in [
            "pgcheckdb_verify_ledger_new{pgdata=\"/d\"} 2\n",
            "pgcheckdb_verify_ledger_open{pgdata=\"/d\"} 5\n",
            "pgcheckdb_verify_ledger_repaired{pgdata=\"/d\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn written_atomically_as_a_0644_regular_file_with_no_temporary_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pgcheckdb.prom");
        std::fs::write(dir.path().join("victim"), "keep").expect("write");
        std::os::unix::fs::symlink(dir.path().join("victim"), &path).expect("symlink");
        write_atomically(&path, "x 1\n").expect("write");
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "x 1\n");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("victim")).expect("read"),
            "keep"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(previous_last_success(&path).expect("read"), None);
        assert_eq!(
            previous_last_success(&dir.path().join("none")).expect("absent"),
            None
        );
        std::fs::remove_file(&path).expect("remove");
        std::os::unix::fs::symlink("/dev/zero", &path).expect("symlink");
        assert!(previous_last_success(&path).is_err());
    }
}
