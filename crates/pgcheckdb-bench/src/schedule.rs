//! The run plan: variants interleaved run by run (A/B/A/B…), so slow drifts of the machine
//! (other jobs, page cache, thermal state) fall on every variant alike instead of on whichever
//! ran last. An [`Executor`] runs one trial; experiments implement it on real clusters and the
//! tests implement it with scripted timings.

use anyhow::{bail, Result};
use serde::Serialize;

use crate::guard;

/// One trial of the plan: run number `run` (0-based) of variant `variant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Trial {
    /// Position in the plan (0-based).
    pub index: usize,
    pub run: usize,
    pub variant: usize,
}

/// What one trial measured: named values in a fixed column order. The first value is the
/// primary one (seconds) that the statistics compare.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measurement {
    pub values: Vec<(String, f64)>,
}

impl Measurement {
    /// A measurement whose primary value is `seconds`.
    pub fn seconds(seconds: f64) -> Measurement {
        Measurement {
            values: vec![("seconds".to_string(), seconds)],
        }
    }

    /// Adds a named value.
    pub fn with(mut self, name: &str, value: f64) -> Measurement {
        self.values.push((name.to_string(), value));
        self
    }

    /// The value called `name`.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The primary value.
    pub fn primary(&self) -> f64 {
        self.values.first().map_or(f64::NAN, |(_, v)| *v)
    }
}

/// A trial and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialResult {
    pub trial: Trial,
    pub variant_name: String,
    pub measurement: Measurement,
}

/// Runs one trial.
pub trait Executor {
    /// Runs `trial` and returns what it measured.
    fn run(&mut self, trial: &Trial) -> Result<Measurement>;
}

/// `runs` rounds, each running every variant once in order: 0,1,…,v−1, 0,1,…
pub fn interleaved(variants: usize, runs: usize) -> Vec<Trial> {
    (0..runs)
        .flat_map(|run| (0..variants).map(move |variant| (run, variant)))
        .enumerate()
        .map(|(index, (run, variant))| Trial {
            index,
            run,
            variant,
        })
        .collect()
}

/// Runs every trial of `plan` with `exec`, calling `progress` after each, and stops with an
/// error if an interrupt was requested in between.
pub fn execute(
    plan: &[Trial],
    variant_names: &[String],
    exec: &mut dyn Executor,
    progress: &mut dyn FnMut(&TrialResult),
) -> Result<Vec<TrialResult>> {
    let mut results = Vec::with_capacity(plan.len());
    for trial in plan {
        if guard::interrupted() {
            bail!("interrupted");
        }
        let measurement = exec.run(trial)?;
        let result = TrialResult {
            trial: *trial,
            variant_name: variant_names[trial.variant].clone(),
            measurement,
        };
        progress(&result);
        results.push(result);
    }
    Ok(results)
}

/// The primary values of one variant, in run order.
pub fn primary_values(results: &[TrialResult], variant: usize) -> Vec<f64> {
    values_of(results, variant, None)
}

/// The values called `name` (the primary value when `None`) of one variant, in run order.
pub fn values_of(results: &[TrialResult], variant: usize, name: Option<&str>) -> Vec<f64> {
    results
        .iter()
        .filter(|r| r.trial.variant == variant)
        .filter_map(|r| match name {
            Some(n) => r.measurement.get(n),
            None => Some(r.measurement.primary()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;
    use std::collections::VecDeque;

    /// Replays scripted timings and records the order of the calls.
    struct Scripted {
        timings: VecDeque<f64>,
        calls: Vec<(usize, usize)>,
        fail_at: Option<usize>,
    }

    impl Executor for Scripted {
        fn run(&mut self, trial: &Trial) -> Result<Measurement> {
            if self.fail_at == Some(trial.index) {
                bail!("scripted failure");
            }
            self.calls.push((trial.run, trial.variant));
            let t = self.timings.pop_front().expect("script too short");
            Ok(Measurement::seconds(t).with("wal_bytes", 1000.0 * t))
        }
    }

    fn names() -> Vec<String> {
        vec!["on".to_string(), "off".to_string()]
    }

    #[test]
    fn plan_alternates_variants_run_by_run() {
        let plan = interleaved(2, 3);
        let order: Vec<(usize, usize)> = plan.iter().map(|t| (t.run, t.variant)).collect();
        assert_eq!(order, vec![(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
        assert!(plan.iter().enumerate().all(|(i, t)| t.index == i));
        assert!(interleaved(3, 0).is_empty());
    }

    #[test]
    fn executor_runs_in_plan_order_and_results_split_by_variant() {
        let mut exec = Scripted {
            timings: [1.1, 1.0, 1.2, 1.0, 1.1, 0.9].into(),
            calls: Vec::new(),
            fail_at: None,
        };
        let mut seen = 0;
        let plan = interleaved(2, 3);
        let results = execute(&plan, &names(), &mut exec, &mut |_| seen += 1).unwrap();
        assert_eq!(seen, 6);
        assert_eq!(
            exec.calls,
            vec![(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
        );
        assert_eq!(primary_values(&results, 0), vec![1.1, 1.2, 1.1]);
        assert_eq!(primary_values(&results, 1), vec![1.0, 1.0, 0.9]);
        assert_eq!(
            values_of(&results, 1, Some("wal_bytes")),
            vec![1000.0, 1000.0, 900.0]
        );
        assert_eq!(results[3].variant_name, "off");
        let r = stats::ratio_ci(&primary_values(&results, 0), &primary_values(&results, 1));
        assert!((r.ratio - 3.4 / 2.9).abs() < 1e-12);
    }

    #[test]
    fn a_failing_trial_stops_the_plan() {
        let mut exec = Scripted {
            timings: [1.0, 1.0, 1.0].into(),
            calls: Vec::new(),
            fail_at: Some(2),
        };
        let err = execute(&interleaved(2, 2), &names(), &mut exec, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("scripted failure"));
        assert_eq!(exec.calls.len(), 2);
    }

    #[test]
    fn measurement_accessors() {
        let m = Measurement::seconds(2.5).with("x", 3.0);
        assert_eq!(m.primary(), 2.5);
        assert_eq!(m.get("x"), Some(3.0));
        assert_eq!(m.get("y"), None);
    }
}
