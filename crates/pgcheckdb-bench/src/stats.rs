//! Descriptive statistics of repeated runs, and the ratio of two means with a 95% confidence
//! interval.
//!
//! The interval is **Fieller's** interval for the ratio of two independent means (each run of one
//! variant is independent of the runs of the other), with **Welch–Satterthwaite** degrees of
//! freedom evaluated at the observed ratio. Fieller's interval is exact for normal data and,
//! unlike the delta method, is asymmetric around the ratio as it should be; it is unbounded (here:
//! `None`) when the denominator's mean is not significantly different from zero. The Student t
//! quantile comes from a table for 1–30 degrees of freedom (interpolated in 1/ν between whole
//! degrees) and from the Cornish–Fisher expansion above 30.

use serde::Serialize;

/// The 97.5% quantile of the standard normal distribution (two-sided 95%).
const Z_975: f64 = 1.959_963_984_540_054;

/// The 97.5% quantiles of Student's t for 1..=30 degrees of freedom.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Mean, median, spread and range of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (n − 1 in the denominator); 0 for one value.
    pub sd: f64,
    pub min: f64,
    pub max: f64,
}

/// The ratio of two means with its 95% confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioCi {
    /// mean(numerator) / mean(denominator).
    pub ratio: f64,
    /// Lower and upper 95% limits; `None` when the interval is unbounded or undefined (fewer
    /// than two values on a side, or a denominator indistinguishable from zero).
    pub low: Option<f64>,
    pub high: Option<f64>,
    /// Welch–Satterthwaite degrees of freedom used for the t quantile.
    pub df: Option<f64>,
}

/// The arithmetic mean (NaN for no values).
pub fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The median (mean of the two middle values for an even count; NaN for no values).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The sample variance (n − 1 in the denominator); 0 for fewer than two values.
pub fn variance(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64
}

/// The sample standard deviation.
pub fn std_dev(xs: &[f64]) -> f64 {
    variance(xs).sqrt()
}

/// All of [`Summary`] for `xs`.
pub fn summarize(xs: &[f64]) -> Summary {
    Summary {
        n: xs.len(),
        mean: mean(xs),
        median: median(xs),
        sd: std_dev(xs),
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}

/// The 97.5% quantile of Student's t with `df` (possibly fractional) degrees of freedom.
pub fn t_975(df: f64) -> f64 {
    if df <= 1.0 {
        return T_975[0];
    }
    if df <= 30.0 {
        let lo = df.floor();
        let hi = df.ceil();
        let t_lo = T_975[lo as usize - 1];
        if lo == hi {
            return t_lo;
        }
        let t_hi = T_975[hi as usize - 1];
        // Interpolate linearly in 1/df, in which the quantile is nearly linear.
        let w = (1.0 / lo - 1.0 / df) / (1.0 / lo - 1.0 / hi);
        return t_lo + w * (t_hi - t_lo);
    }
    cornish_fisher_t(df)
}

/// The Cornish–Fisher expansion of the t quantile around the normal one (error < 1e-4 above 30
/// degrees of freedom).
fn cornish_fisher_t(df: f64) -> f64 {
    let z = Z_975;
    let z3 = z.powi(3);
    let z5 = z.powi(5);
    let z7 = z.powi(7);
    z + (z3 + z) / (4.0 * df)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df.powi(2))
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * df.powi(3))
}

/// Welch–Satterthwaite degrees of freedom of `va + r² vb`, where `va` and `vb` are the variances
/// of two means estimated from `na` and `nb` values.
fn welch_df(va: f64, na: usize, vb: f64, nb: usize, r: f64) -> f64 {
    let a = va;
    let b = r * r * vb;
    let denom = a * a / (na - 1) as f64 + b * b / (nb - 1) as f64;
    if denom == 0.0 {
        return f64::INFINITY;
    }
    (a + b).powi(2) / denom
}

/// mean(num) / mean(den) with Fieller's 95% interval (see the module documentation).
pub fn ratio_ci(num: &[f64], den: &[f64]) -> RatioCi {
    let a = mean(num);
    let b = mean(den);
    let ratio = a / b;
    let unbounded = RatioCi {
        ratio,
        low: None,
        high: None,
        df: None,
    };
    if num.len() < 2 || den.len() < 2 {
        return unbounded;
    }
    let va = variance(num) / num.len() as f64;
    let vb = variance(den) / den.len() as f64;
    let df = welch_df(va, num.len(), vb, den.len(), ratio);
    let t2 = t_975(df).powi(2);
    match fieller_roots(a, b, va, vb, t2) {
        Some((low, high)) => RatioCi {
            ratio,
            low: Some(low),
            high: Some(high),
            df: Some(df),
        },
        None => RatioCi {
            df: Some(df),
            ..unbounded
        },
    }
}

/// The ρ with (a − ρb)² ≤ t²(va + ρ²vb): the roots of
/// ρ²(b² − t²vb) − 2ρab + (a² − t²va) = 0, or `None` when that set is not a bounded interval.
fn fieller_roots(a: f64, b: f64, va: f64, vb: f64, t2: f64) -> Option<(f64, f64)> {
    let qa = b * b - t2 * vb;
    if qa <= 0.0 {
        return None;
    }
    let disc = t2 * (va * b * b + vb * a * a) - t2 * t2 * va * vb;
    if disc < 0.0 {
        return None;
    }
    let root = disc.sqrt();
    Some(((a * b - root) / qa, (a * b + root) / qa))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn mean_median_sd_of_a_known_sample() {
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        let s = summarize(&xs);
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0, 1e-12));
        assert!(close(s.median, 4.5, 1e-12));
        // Sample (n-1) standard deviation: sqrt(32/7).
        assert!(close(s.sd, (32.0f64 / 7.0).sqrt(), 1e-12));
        assert_eq!((s.min, s.max), (2.0, 9.0));
    }

    #[test]
    fn median_of_odd_count_and_unsorted_input() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[10.0]), 10.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn one_value_has_zero_spread() {
        assert_eq!(std_dev(&[1.5]), 0.0);
    }

    #[test]
    fn t_quantiles_match_tables() {
        assert!(close(t_975(1.0), 12.706, 1e-9));
        assert!(close(t_975(9.0), 2.262, 1e-9));
        assert!(close(t_975(30.0), 2.042, 1e-9));
        // Interpolated and expanded values against R's qt(0.975, df).
        assert!(close(t_975(9.5), 2.2439, 2e-3));
        assert!(close(t_975(40.0), 2.021075, 1e-4));
        assert!(close(t_975(120.0), 1.979930, 1e-4));
        assert!(close(t_975(1e9), Z_975, 1e-6));
    }

    #[test]
    fn ratio_of_identical_samples_is_one_and_covers_one() {
        let xs = [10.0, 11.0, 9.0, 10.5, 9.5];
        let r = ratio_ci(&xs, &xs);
        assert!(close(r.ratio, 1.0, 1e-12));
        assert!(r.low.unwrap() < 1.0 && r.high.unwrap() > 1.0);
    }

    #[test]
    fn ratio_interval_matches_a_hand_computation() {
        // num: mean 11, var 1 (n=4, va=0.25); den: mean 10, var 1 (n=4, vb=0.25).
        let num = [10.0, 11.0, 11.0, 12.0];
        let den = [9.0, 10.0, 10.0, 11.0];
        let r = ratio_ci(&num, &den);
        assert!(close(r.ratio, 1.1, 1e-12));
        let var = variance(&num);
        assert!(close(var, 2.0 / 3.0, 1e-12));
        let (va, vb) = (var / 4.0, var / 4.0);
        let df = welch_df(va, 4, vb, 4, 1.1);
        assert!(close(r.df.unwrap(), df, 1e-12));
        let t2 = t_975(df).powi(2);
        // Both limits satisfy (a - rho b)^2 = t^2 (va + rho^2 vb).
        for rho in [r.low.unwrap(), r.high.unwrap()] {
            let lhs = (11.0 - rho * 10.0f64).powi(2);
            let rhs = t2 * (va + rho * rho * vb);
            assert!(close(lhs, rhs, 1e-9), "{lhs} vs {rhs}");
        }
        assert!(r.low.unwrap() < 1.1 && r.high.unwrap() > 1.1);
        // Asymmetric: the upper arm is longer.
        assert!(r.high.unwrap() - 1.1 > 1.1 - r.low.unwrap());
    }

    #[test]
    fn clearly_different_samples_exclude_one() {
        let num = [12.0, 12.1, 11.9, 12.05, 11.95];
        let den = [10.0, 10.1, 9.9, 10.05, 9.95];
        let r = ratio_ci(&num, &den);
        assert!(r.low.unwrap() > 1.15 && r.high.unwrap() < 1.25);
    }

    #[test]
    fn noisy_denominator_near_zero_gives_unbounded_interval() {
        let r = ratio_ci(&[1.0, 2.0, 3.0], &[-1.0, 0.0, 1.2]);
        assert!(r.low.is_none() && r.high.is_none());
    }

    #[test]
    fn too_few_values_give_no_interval() {
        let r = ratio_ci(&[1.0], &[2.0, 2.5]);
        assert!(close(r.ratio, 1.0 / 2.25, 1e-12));
        assert!(r.low.is_none() && r.df.is_none());
    }
}
