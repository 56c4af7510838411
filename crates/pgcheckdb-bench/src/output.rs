//! What a bench leaves behind: a [`Report`] printed as text tables, and written to `--out` as
//! `trials.csv` (every run), `summary.csv` (statistics per variant and metric), `report.json`
//! (all of it), `chart.png` and `chart.json` (what the chart shows; see [`crate::chart`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::report::{Group, Report};
use crate::schedule::TrialResult;
use crate::stats::RatioCi;

/// The files [`write_all`] made.
#[derive(Debug, Clone)]
pub struct Written {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
}

/// Writes `trials.csv`, `summary.csv`, `report.json` and `chart.png` into `dir` (created).
pub fn write_all(report: &Report, dir: &Path) -> Result<Written> {
    fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    let files = vec![
        write_file(dir, "trials.csv", &trials_csv(report))?,
        write_file(dir, "summary.csv", &summary_csv(report))?,
        write_file(dir, "report.json", &serde_json::to_string_pretty(report)?)?,
        write_file(
            dir,
            "chart.json",
            &serde_json::to_string_pretty(&crate::chart::spec(report))?,
        )?,
        crate::chart::render(report, &dir.join("chart.png"))?,
    ];
    Ok(Written {
        dir: dir.to_path_buf(),
        files,
    })
}

fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    fs::write(&path, text).with_context(|| format!("could not write {}", path.display()))?;
    Ok(path)
}

/// The metric names of all trials, in first-seen order.
fn metric_names(trials: &[TrialResult]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut names = Vec::new();
    for t in trials {
        for (name, _) in &t.measurement.values {
            if seen.insert(name.clone()) {
                names.push(name.clone());
            }
        }
    }
    names
}

/// Quotes a CSV field when needed.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One line per trial: index, run, variant, then every metric.
pub fn trials_csv(report: &Report) -> String {
    let names = metric_names(&report.trials);
    let mut out = format!("index,run,variant,{}\n", names.join(","));
    for t in &report.trials {
        let values: Vec<String> = names
            .iter()
            .map(|n| t.measurement.get(n).map_or(String::new(), fmt_csv_number))
            .collect();
        let _ = writeln!(
            out,
            "{},{},{},{}",
            t.trial.index,
            t.trial.run + 1,
            csv_field(&t.variant_name),
            values.join(",")
        );
    }
    out
}

/// One line per variant and metric.
pub fn summary_csv(report: &Report) -> String {
    let mut out = String::from("variant,metric,n,mean,median,sd,min,max\n");
    for g in &report.groups {
        for (metric, s) in &g.metrics {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{}",
                csv_field(&g.name),
                metric,
                s.n,
                fmt_csv_number(s.mean),
                fmt_csv_number(s.median),
                fmt_csv_number(s.sd),
                fmt_csv_number(s.min),
                fmt_csv_number(s.max)
            );
        }
    }
    out
}

fn fmt_csv_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.6}")
    }
}

/// A number for a table: few significant digits, thousands in plain form.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if x.is_nan() {
        "-".to_string()
    } else if a >= 1000.0 || (x.fract() == 0.0 && a < 1e15) {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A byte count as B/kB/MB/GB (powers of 1024).
pub fn fmt_bytes(x: f64) -> String {
    const UNITS: [&str; 4] = ["B", "kB", "MB", "GB"];
    let mut v = x;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Formats a ratio with its interval, e.g. `1.034 (95% CI 1.012–1.057)`.
pub fn fmt_ratio(r: &RatioCi) -> String {
    match (r.low, r.high) {
        (Some(lo), Some(hi)) => format!("{:.3} (95% CI {lo:.3}–{hi:.3})", r.ratio),
        _ => format!(
            "{:.3} (95% CI unbounded: too few runs or too noisy)",
            r.ratio
        ),
    }
}

/// Formats a ratio as a multiple, e.g. `7.85× (95% CI 7.60–8.10)`.
pub fn fmt_times(r: &RatioCi) -> String {
    match (r.low, r.high) {
        (Some(lo), Some(hi)) => format!("{:.2}× (95% CI {lo:.2}–{hi:.2})", r.ratio),
        _ => format!("{:.2}× (95% CI unbounded)", r.ratio),
    }
}

/// Left-aligned first column, right-aligned others, as a text table.
pub fn text_table(header: &[String], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut width = vec![0; cols];
    for row in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        for (i, cell) in row.iter().enumerate().take(cols) {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let line = |row: &[String]| -> String {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = width[i])
                } else {
                    format!("{c:>w$}", w = width[i])
                }
            })
            .collect();
        cells.join("  ").trim_end().to_string()
    };
    let mut out = line(header);
    out.push('\n');
    out.push_str(&"-".repeat(width.iter().sum::<usize>() + 2 * (cols - 1)));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

/// The table of every run.
pub fn runs_table(report: &Report) -> String {
    let names = metric_names(&report.trials);
    let mut header = vec!["variant".to_string(), "run".to_string()];
    header.extend(names.iter().cloned());
    let rows: Vec<Vec<String>> = report
        .trials
        .iter()
        .map(|t| {
            let mut row = vec![t.variant_name.clone(), (t.trial.run + 1).to_string()];
            row.extend(
                names
                    .iter()
                    .map(|n| t.measurement.get(n).map_or("-".to_string(), fmt_num)),
            );
            row
        })
        .collect();
    text_table(&header, &rows)
}

/// The summary table: for each variant, n, mean, median, sd, min and max of the primary metric,
/// and the means of the others.
pub fn summary_table(report: &Report) -> String {
    let mut extra: Vec<String> = Vec::new();
    for g in &report.groups {
        for (n, _) in g.metrics.iter().skip(1) {
            if !extra.contains(n) {
                extra.push(n.clone());
            }
        }
    }
    let primary = report
        .groups
        .first()
        .and_then(|g| g.metrics.first())
        .map_or("value".to_string(), |(n, _)| n.clone());
    let mut header: Vec<String> = ["variant", "n"].iter().map(|s| s.to_string()).collect();
    for stat in ["mean", "median", "sd", "min", "max"] {
        header.push(format!("{primary} {stat}"));
    }
    header.extend(extra.iter().map(|n| format!("{n} mean")));
    let rows: Vec<Vec<String>> = report
        .groups
        .iter()
        .map(|g| summary_row(g, &extra))
        .collect();
    text_table(&header, &rows)
}

fn summary_row(g: &Group, extra: &[String]) -> Vec<String> {
    let Some((_, p)) = g.metrics.first() else {
        return vec![g.name.clone()];
    };
    let mut row = vec![g.name.clone(), p.n.to_string()];
    row.extend([p.mean, p.median, p.sd, p.min, p.max].map(fmt_num));
    for name in extra {
        let v = g
            .metrics
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.mean);
        row.push(v.map_or("-".to_string(), fmt_num));
    }
    row
}

/// The warning a quick run prints before its conclusions.
pub const QUICK_TEXT: &str = "\nQuick run: too few runs and too small a workload; the 95 % intervals are too wide to conclude anything. \
Numbers show that the bench works, not what checksums cost; run without --quick for results.\n";

/// Whether the report comes from a `--quick` run.
pub fn is_quick(report: &Report) -> bool {
    report.settings.get("quick").and_then(|v| v.as_bool()) == Some(true)
}

/// The whole text report: title, settings, every run, the summary, ratios and conclusions.
pub fn render_text(report: &Report) -> String {
    let mut out = format!("== {} ==\n", report.title);
    if let Some(map) = report.settings.as_object() {
        for (k, v) in map {
            let shown = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            let _ = writeln!(out, "  {k}: {shown}");
        }
    }
    let _ = writeln!(
        out,
        "  machine: {} cores, load average before {} / after {}\n",
        report.machine.cores, report.machine.load_before, report.machine.load_after
    );
    out.push_str("Every run:\n");
    out.push_str(&runs_table(report));
    out.push_str("\nSummary:\n");
    out.push_str(&summary_table(report));
    if !report.comparisons.is_empty() {
        out.push_str("\nRatios of means:\n");
        for c in &report.comparisons {
            let _ = writeln!(
                out,
                "  {}: {} / {} = {}",
                c.label,
                c.numerator,
                c.denominator,
                fmt_ratio(&c.ratio)
            );
        }
    }
    if is_quick(report) {
        out.push_str(QUICK_TEXT);
    }
    if !report.conclusions.is_empty() {
        out.push_str("\nConclusions:\n");
        for c in &report.conclusions {
            let _ = writeln!(out, "  - {c}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Chart, Comparison, Machine};
    use crate::schedule::{Measurement, Trial};
    use crate::stats::{ratio_ci, summarize};

    fn sample() -> Report {
        let trials: Vec<TrialResult> = [(0, 0, 1.5), (0, 1, 1.0), (1, 0, 1.7), (1, 1, 1.2)]
            .iter()
            .enumerate()
            .map(|(i, &(run, variant, secs))| TrialResult {
                trial: Trial {
                    index: i,
                    run,
                    variant,
                },
                variant_name: ["on", "off, plain"][variant].to_string(),
                measurement: Measurement::seconds(secs).with("wal_bytes", 8192.0),
            })
            .collect();
        Report {
            experiment: "test".into(),
            title: "Test".into(),
            settings: serde_json::json!({"rows": 10}),
            machine: Machine::start(),
            groups: vec![
                Group {
                    name: "on".into(),
                    metrics: vec![
                        ("seconds".into(), summarize(&[1.5, 1.7])),
                        ("wal_bytes".into(), summarize(&[8192.0, 8192.0])),
                    ],
                },
                Group {
                    name: "off, plain".into(),
                    metrics: vec![
                        ("seconds".into(), summarize(&[1.0, 1.2])),
                        ("wal_bytes".into(), summarize(&[8192.0, 8192.0])),
                    ],
                },
            ],
            comparisons: vec![Comparison {
                label: "on/off".into(),
                numerator: "on".into(),
                denominator: "off".into(),
                ratio: ratio_ci(&[1.5, 1.7], &[1.0, 1.2]),
            }],
            conclusions: vec!["on costs more".into()],
            chart: Chart::Bars {
                y_label: "seconds".into(),
                bars: vec![],
            },
            trials,
        }
    }

    #[test]
    fn csv_has_a_line_per_trial_and_quotes_commas() {
        let csv = trials_csv(&sample());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "index,run,variant,seconds,wal_bytes");
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[2], "1,1,\"off, plain\",1,8192");
        assert_eq!(lines[3], "2,2,on,1.700000,8192");
    }

    #[test]
    fn summary_csv_has_a_line_per_variant_and_metric() {
        let csv = summary_csv(&sample());
        assert_eq!(csv.lines().count(), 5);
        assert!(csv.contains("on,seconds,2,1.600000,1.600000,"));
    }

    #[test]
    fn text_report_shows_runs_summary_and_ratio() {
        let text = render_text(&sample());
        assert!(text.contains("Every run:"));
        assert!(text.contains("seconds mean"));
        assert!(text.contains("on/off: on / off = 1.455"));
        assert!(text.contains("on costs more"));
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_bytes(8192.0), "8.0 kB");
        assert_eq!(fmt_bytes(3.5 * 1024.0 * 1024.0 * 1024.0), "3.5 GB");
        assert_eq!(fmt_num(12345.678), "12346");
        assert_eq!(fmt_num(1.23456), "1.235");
        assert_eq!(fmt_num(f64::NAN), "-");
    }
}
