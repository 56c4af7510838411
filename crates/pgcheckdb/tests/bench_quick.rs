//! End to end: `pgcheckdb bench <experiment> --quick --out DIR` for each experiment against real
//! throwaway clusters of the newest PostgreSQL installed. Fails (does not skip) when no
//! PostgreSQL is installed. Checks that the CSV, JSON and PNG exist and hold plausible numbers.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pgcheckdb"))
}

/// Runs one quick bench into a fresh directory; returns the directory and the parsed report.
fn run_quick(experiment: &str, extra: &[&str]) -> (tempfile::TempDir, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new(bin())
        .args(["bench", experiment, "--quick", "--out"])
        .arg(&out_dir)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench {experiment} failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    assert!(stdout.contains("Every run:"), "no table:\n{stdout}");
    assert!(stdout.contains("Summary:"), "no summary:\n{stdout}");
    assert!(
        stdout.contains("too wide to conclude"),
        "a quick run must say it cannot conclude:\n{stdout}"
    );
    for f in ["trials.csv", "summary.csv", "report.json", "chart.png"] {
        assert!(out_dir.join(f).is_file(), "{experiment}: no {f}\n{stderr}");
    }
    let png = std::fs::read(out_dir.join("chart.png")).unwrap();
    assert_eq!(
        &png[..8],
        b"\x89PNG\r\n\x1a\n",
        "{experiment}: chart.png is no PNG"
    );
    assert!(png.len() > 5_000, "{experiment}: chart.png is nearly empty");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["experiment"], experiment);
    (dir, json)
}

/// The CSV's rows as maps from column name to value.
fn csv_rows(path: &Path) -> Vec<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

fn num(row: &[(String, String)], col: &str) -> f64 {
    row.iter()
        .find(|(c, _)| c == col)
        .unwrap_or_else(|| panic!("no column {col} in {row:?}"))
        .1
        .parse()
        .unwrap_or_else(|_| panic!("{col} is not a number in {row:?}"))
}

fn trial_rows(dir: &tempfile::TempDir) -> Vec<Vec<(String, String)>> {
    csv_rows(&dir.path().join("out").join("trials.csv"))
}

#[test]
fn checksum_overhead_quick() {
    let (dir, json) = run_quick("checksum-overhead", &[]);
    let rows = trial_rows(&dir);
    // Six variants x two runs.
    assert_eq!(rows.len(), 12);
    for row in &rows {
        let secs = num(row, "seconds");
        assert!(secs > 0.0 && secs < 60.0, "implausible time in {row:?}");
        // Every trial writes at least its rows to WAL: 2000 rows of 1 or 2 kB.
        assert!(num(row, "wal_bytes") > 1e6, "too little WAL in {row:?}");
    }
    // Workload B sets hint bits after a checkpoint: full-page images only with checksums.
    let fpi = |variant: &str| -> f64 {
        rows.iter()
            .filter(|r| r[2].1 == variant)
            .map(|r| num(r, "wal_fpi"))
            .sum()
    };
    assert!(fpi("B sb=128kB on") > 100.0 && fpi("B sb=128kB off") < 10.0);
    assert_eq!(json["comparisons"].as_array().unwrap().len(), 8);
    let ratio = json["comparisons"][0]["ratio"]["ratio"].as_f64().unwrap();
    assert!(
        ratio > 0.2 && ratio < 5.0,
        "implausible on/off ratio {ratio}"
    );
    // The chart: a time panel and a WAL panel, units on the axes, intervals, the quick note.
    let chart: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out/chart.json")).expect("chart.json"),
    )
    .expect("chart.json is JSON");
    assert!(
        chart["note"]
            .as_str()
            .unwrap_or("")
            .contains("quick run: not significant"),
        "{chart}"
    );
    let panels = chart["panels"].as_array().expect("panels");
    assert_eq!(panels.len(), 2, "{chart}");
    assert!(panels[0]["y_label"].as_str().unwrap().contains("seconds"));
    assert!(panels[1]["y_label"]
        .as_str()
        .unwrap()
        .contains("WAL written per run (MB"));
    for panel in panels {
        assert_eq!(panel["x_label"], "variant");
        let bars = panel["data"]["bars"]["bars"].as_array().expect("bars");
        assert_eq!(bars.len(), 6, "{panel}");
        for bar in bars {
            assert!(!bar["legend"].as_str().unwrap().is_empty());
            let ci = bar["ci95"].as_array().expect("two runs give an interval");
            let mean = bar["mean"].as_f64().unwrap();
            assert!(ci[0].as_f64().unwrap() <= mean && mean <= ci[1].as_f64().unwrap());
        }
    }
}

#[test]
fn checkpoint_quick() {
    let (dir, json) = run_quick("checkpoint", &[]);
    let rows = trial_rows(&dir);
    assert_eq!(rows.len(), 4);
    for row in &rows {
        let each = row[2].1.starts_with("CHECKPOINT every 16");
        let checkpoints = num(row, "checkpoints");
        // 480 rows / 16 = 30 checkpoints, plus the final one.
        if each {
            assert!(checkpoints >= 31.0, "too few checkpoints in {row:?}");
        } else {
            assert!(checkpoints < 5.0, "too many checkpoints in {row:?}");
        }
        // 480 rows of 8 kB reach the disk through checkpoints.
        assert!(num(row, "checkpoint_buffers") >= 400.0, "{row:?}");
        assert!(num(row, "wal_bytes") > 480.0 * 8000.0, "{row:?}");
    }
    let ratio = json["comparisons"][0]["ratio"]["ratio"].as_f64().unwrap();
    assert!(
        ratio > 1.0,
        "checkpointing every 16 rows was not slower: {ratio}"
    );
}

#[test]
fn verify_scaling_quick() {
    let (dir, json) = run_quick("verify-scaling", &["--max-jobs", "2"]);
    let rows = trial_rows(&dir);
    // pgcheckdb physical, standard and extended at -j 1, 2; pg_checksums; pg_amcheck at -j 1, 2.
    assert_eq!(rows.len(), 9);
    for row in &rows {
        let rate = num(row, "gb_per_s");
        assert!(rate > 0.001 && rate < 1000.0, "implausible rate in {row:?}");
    }
    let bytes = json["settings"]["bytes_checked"].as_f64().unwrap();
    assert!(bytes > 40e6, "checked only {bytes} bytes");
    assert_eq!(
        json["chart"]["Lines"]["series"].as_array().unwrap().len(),
        5
    );
}
