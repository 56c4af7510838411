//! `verify --format prometheus` and `--metrics-file`: the run's metrics in node_exporter's
//! textfile-collector format, on stdout and/or written atomically to a file.

use std::io::{self, Write};
use std::path::Path;

use anyhow::{anyhow, Context};
use pgcheckdb_pg::finding::Finding;
use pgcheckdb_pg::verify::report::Summary;
use pgcheckdb_report::prometheus::{previous_last_success, render, write_atomically, Metrics};
use pgcheckdb_scan::open::not_regular;

use crate::cli::Common;
use crate::exit::{EXIT_CORRUPT, EXIT_OK};

/// Whether the flags ask for metrics.
pub fn wanted(common: &Common) -> bool {
    common.metrics_stdout || common.metrics_file.is_some()
}

/// Writes the run's metrics to stdout (`--format prometheus`) and/or, atomically, to
/// `--metrics-file`, carrying the last success time over from the previous file. When the
/// previous file cannot be read (not a regular file, a symbolic link, too large, unreadable)
/// no metrics are written at all, neither to the file nor to stdout: the error names the path.
pub fn emit(
    common: &Common,
    pgdata: Option<&Path>,
    summary: &Summary,
    findings: &[Finding],
    exit_status: u8,
) -> anyhow::Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let complete = matches!(exit_status, EXIT_OK | EXIT_CORRUPT);
    let previous = match &common.metrics_file {
        Some(file) => previous_success(file)?,
        None => None,
    };
    // The label names the directory, not how it was typed (`./data/`, a link): one series
    // per cluster whichever path a cron job or a person used.
    let pgdata = pgdata.map_or(String::new(), |p| {
        std::fs::canonicalize(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    });
    let text = render(&Metrics {
        pgdata: &pgdata,
        summary,
        findings,
        exit_status,
        now,
        last_success: if complete { Some(now) } else { previous },
    });
    if common.metrics_stdout {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    if let Some(file) = &common.metrics_file {
        write_atomically(file, &text)
            .with_context(|| format!("could not write the metrics file \"{}\"", file.display()))?;
    }
    Ok(())
}

/// The last success time of the previous metrics file, if it has one.
fn previous_success(file: &Path) -> anyhow::Result<Option<f64>> {
    previous_last_success(file).map_err(|e| {
        let why = match not_regular(&e) {
            Some(what) => format!("it is a {what}, not a regular file"),
            None => e.to_string(),
        };
        anyhow!(
            "could not read the previous metrics file \"{}\" ({why}): no metrics were written",
            file.display()
        )
    })
}
