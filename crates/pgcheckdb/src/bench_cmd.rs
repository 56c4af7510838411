//! `pgcheckdb bench <experiment>`: flags, choice of the PostgreSQL installation, output
//! directory, Ctrl-C handling, and printing the report (text table, or JSON with `--format json`).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use pgcheckdb_bench::experiments::{checkpoint, checksum_overhead, verify_scaling};
use pgcheckdb_bench::{guard, output, pg, CommonOpts, Outcome};

use crate::cli::bench::{BenchArgs, Experiment};
use crate::cli::{Common, OutputFormat};
use crate::exit::EXIT_OK;

/// Runs one experiment and prints its report.
pub fn run(common: &Common, args: &BenchArgs) -> Result<u8> {
    let (bc, name) = match &args.experiment {
        Experiment::ChecksumOverhead(a) => (&a.common, "checksum-overhead"),
        Experiment::Checkpoint(a) => (&a.common, "checkpoint"),
        Experiment::VerifyScaling(a) => (&a.common, "verify-scaling"),
    };
    let bin = pg::choose_binaries(bc.pg_version, bc.pg_bin.as_deref())?;
    guard::install_handler()?;
    let default_runs = match (&args.experiment, bc.quick) {
        (Experiment::VerifyScaling(_), true) => 1,
        (Experiment::VerifyScaling(_), false) => 3,
        (_, true) => 2,
        (_, false) => 10,
    };
    let opts = CommonOpts {
        major: bin.major,
        runs: bc.runs.map_or(default_runs, |r| r as usize),
        quick: bc.quick,
        out: bc.out.clone().unwrap_or_else(|| default_out(name)),
        progress: !common.quiet,
    };
    if !common.quiet {
        eprintln_text!(
            "pgcheckdb bench {name}: {} in {}, {} runs per variant, output in {}",
            bin.version,
            bin.bindir.display(),
            opts.runs,
            opts.out.display()
        );
    }
    let outcome = match run_experiment(&args.experiment, &opts) {
        Ok(o) => o,
        Err(e) if guard::interrupted() => {
            eprintln_text!("pgcheckdb: interrupted: {e:#}");
            std::process::exit(guard::EXIT_INTERRUPTED);
        }
        Err(e) => return Err(e.context(format!("bench {name} failed"))),
    };
    print(common, &outcome)?;
    Ok(EXIT_OK)
}

fn run_experiment(exp: &Experiment, opts: &CommonOpts) -> Result<Outcome> {
    match exp {
        Experiment::ChecksumOverhead(a) => {
            let mut p = checksum_overhead::Params::defaults(opts.quick);
            p.rows_a = a.rows.unwrap_or(p.rows_a);
            p.rows_b = a.rows_b.unwrap_or(p.rows_b);
            p.scans = a.scans.unwrap_or(p.scans);
            p.shared_buffers = a.shared_buffers.clone().unwrap_or(p.shared_buffers);
            checksum_overhead::run(opts, &p)
        }
        Experiment::Checkpoint(a) => {
            let mut p = checkpoint::Params::defaults(opts.quick);
            p.rows = a.rows.unwrap_or(p.rows);
            p.every = a.every;
            checkpoint::run(opts, &p)
        }
        Experiment::VerifyScaling(a) => {
            let exe = std::env::current_exe().context("cannot find the pgcheckdb executable")?;
            let mut p = verify_scaling::Params::defaults(opts.quick, exe);
            p.size_mb = a.size_mb.unwrap_or(p.size_mb);
            p.max_jobs = a.max_jobs.unwrap_or(p.max_jobs);
            verify_scaling::run(opts, &p)
        }
    }
}

fn print(common: &Common, outcome: &Outcome) -> Result<()> {
    match common.format {
        OutputFormat::Json => println!("{}", serde_json::to_string(&outcome.report)?),
        OutputFormat::Text => print!(
            "{}",
            pgcheckdb_report::escape::escape_control_keep_newlines(&output::render_text(
                &outcome.report
            ))
        ),
    }
    if !common.quiet {
        for f in &outcome.written.files {
            eprintln_text!("wrote {}", f.display());
        }
    }
    Ok(())
}

/// `bench-out/<experiment>-<YYYYmmdd-HHMMSS>` (UTC).
fn default_out(experiment: &str) -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("bench-out").join(format!("{experiment}-{}", utc_stamp(secs)))
}

/// `YYYYmmdd-HHMMSS` for a Unix time (days to civil date after Howard Hinnant's algorithm).
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::utc_stamp;

    #[test]
    fn stamps_utc_times() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(1_700_000_000), "20231114-221320");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
    }
}
