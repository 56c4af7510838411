//! What one experiment measured: the machine, the trials, the statistics per variant, the
//! comparisons and what its chart shows. `output` writes it as files and
//! `chart` draws it.

use std::fs;

use serde::Serialize;

use crate::schedule::TrialResult;
use crate::stats::{RatioCi, Summary};

/// Statistics of one variant: one [`Summary`] per metric, the primary one first.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    pub name: String,
    pub metrics: Vec<(String, Summary)>,
}

/// A ratio of the primary metric's means between two variants.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub label: String,
    pub numerator: String,
    pub denominator: String,
    pub ratio: RatioCi,
}

/// One bar of a bar chart: a mean with its individual runs.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    pub label: String,
    pub mean: f64,
    pub points: Vec<f64>,
}

/// One line of a line chart.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// The chart of a report.
#[derive(Debug, Clone, Serialize)]
pub enum Chart {
    /// Means as bars, each run as a dot.
    Bars { y_label: String, bars: Vec<Bar> },
    /// Lines over a numeric x axis.
    Lines {
        x_label: String,
        y_label: String,
        series: Vec<Series>,
    },
}

/// The machine the bench ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    /// `/proc/loadavg` before and after the runs.
    pub load_before: String,
    pub load_after: String,
}

impl Machine {
    /// Cores and the load now; call [`Machine::finish`] at the end.
    pub fn start() -> Machine {
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_before: load_average(),
            load_after: String::new(),
        }
    }

    /// Records the load at the end.
    pub fn finish(&mut self) {
        self.load_after = load_average();
    }
}

/// The first three fields of `/proc/loadavg`.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Everything one bench produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub experiment: String,
    pub title: String,
    /// The parameters and methods (version, row counts, how timing was done, ...).
    pub settings: serde_json::Value,
    pub machine: Machine,
    pub trials: Vec<TrialResult>,
    pub groups: Vec<Group>,
    pub comparisons: Vec<Comparison>,
    /// Conclusions in words and numbers.
    pub conclusions: Vec<String>,
    pub chart: Chart,
}
