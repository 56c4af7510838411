//! `verify --estimate` printed: the estimate the library timed (`verify::estimate`) as its
//! text lines, or as an `estimate` JSON line and a summary.

use std::io::{self, Write};

use pgcheckdb_pg::verify::estimate::{Estimate, LevelEstimate};
use pgcheckdb_pg::verify::report::Summary;
use pgcheckdb_report::{human_bytes, write_summary, Format};

/// `1h02m`, `4m05s` or `6.2s`.
fn about(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, _) => format!("{seconds:.1}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// Prints the estimate and, in JSON, a summary.
pub fn print(format: Format, e: &Estimate, summary: &Summary) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match format {
        Format::Json => {
            serde_json::to_writer(&mut out, e).map_err(io::Error::other)?;
            writeln!(out)?;
            write_summary(&mut out, format, summary, &[])?;
        }
        Format::Text => print_text(&mut out, e)?,
    }
    out.flush()
}

fn print_text(out: &mut impl Write, e: &Estimate) -> io::Result<()> {
    writeln!(
        out,
        "pgcheckdb estimate: {} files, {} blocks, {} to read with {} jobs{}; nothing was checked",
        e.files,
        e.blocks,
        human_bytes(e.bytes),
        e.jobs,
        if e.scoped {
            " (the selected relations only)"
        } else {
            ""
        }
    )?;
    for l in &e.levels {
        level_line(out, l)?;
    }
    if let Some(r) = e.max_bytes_per_sec {
        writeln!(out, "  (with --max-rate at most {}/s)", human_bytes(r))?;
    }
    Ok(())
}

/// `  physical  32.7 MB in about 1.2s (...)`.
fn level_line(out: &mut impl Write, l: &LevelEstimate) -> io::Result<()> {
    let rate = if l.sample_seconds > 0.0 {
        format!(
            "{}/s over a {} sample",
            human_bytes((l.sample_bytes as f64 / l.sample_seconds) as u64),
            human_bytes(l.sample_bytes)
        )
    } else {
        "nothing to sample".to_string()
    };
    match l.at_least {
        None => writeln!(
            out,
            "  {:<9} {} in about {} ({rate})",
            l.level,
            human_bytes(l.bytes),
            about(l.seconds)
        ),
        Some(why) => writeln!(
            out,
            "  {:<9} {} in at least {} ({why})",
            l.level,
            human_bytes(l.bytes),
            about(l.seconds)
        ),
    }
}
