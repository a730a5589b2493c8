//! The statistics of a study's report: mean, standard deviation and Student-t interval of a
//! metric over seeds, and the paired comparison of an arm with the baseline over the seeds both
//! ran (mean difference, its interval, the paired t test), and Holm's correction of the p-values
//! of one comparison's measures.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Confidence of every interval of the report.
pub const CONFIDENCE: f64 = 0.95;

/// A metric over the seeds of one arm.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// How many values.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (divisor `n − 1`); `None` for one value.
    pub sd: Option<f64>,
    /// The [`CONFIDENCE`] interval of the mean, `mean ± t · sd / √n` with Student's `t` at
    /// `n − 1` degrees of freedom; `None` for one value.
    pub interval: Option<(f64, f64)>,
}

/// The `(1 + CONFIDENCE) / 2` quantile of Student's t with `df` degrees of freedom.
fn t_quantile(df: usize) -> f64 {
    StudentsT::new(0.0, 1.0, df as f64)
        .expect("df >= 1 is a valid distribution")
        .inverse_cdf(0.5 + CONFIDENCE / 2.0)
}

/// Mean, standard deviation and interval of `values`; `None` for no values.
pub fn summarise(values: &[f64]) -> Option<Summary> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return Some(Summary {
            n,
            mean,
            sd: None,
            interval: None,
        });
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let sd = var.sqrt();
    let half = t_quantile(n - 1) * sd / (n as f64).sqrt();
    Some(Summary {
        n,
        mean,
        sd: Some(sd),
        interval: Some((mean - half, mean + half)),
    })
}

/// An arm against the baseline over the seeds both ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    /// The differences `arm − baseline`, seed by seed, summarised.
    pub difference: Summary,
    /// The paired t statistic, `mean / (sd / √n)`; `None` below two pairs or when every
    /// difference is the same (no spread to test against).
    pub t: Option<f64>,
    /// Its two-sided p-value at `n − 1` degrees of freedom.
    pub p: Option<f64>,
}

/// The paired comparison of `arm` with `baseline`, both given as `(seed, value)`; `None` when
/// no seed has both.
pub fn paired(arm: &[(u64, f64)], baseline: &[(u64, f64)]) -> Option<Paired> {
    let differences: Vec<f64> = arm
        .iter()
        .filter_map(|(seed, a)| {
            let (_, b) = baseline.iter().find(|(s, _)| s == seed)?;
            Some(a - b)
        })
        .collect();
    let difference = summarise(&differences)?;
    let (t, p) = match difference.sd {
        Some(sd) if sd > 0.0 => {
            let n = difference.n as f64;
            let t = difference.mean / (sd / n.sqrt());
            let dist = StudentsT::new(0.0, 1.0, n - 1.0).expect("n >= 2 pairs");
            (Some(t), Some(2.0 * dist.cdf(-t.abs())))
        }
        _ => (None, None),
    };
    Some(Paired { difference, t, p })
}

/// Holm's step-down adjustment of the p-values of one family of tests (one arm against the
/// baseline, over its measures), in the order given. With the `m` p-values sorted ascending,
/// `p_(1) <= … <= p_(m)`, the adjusted `p_(i)` is `max over j <= i of min(1, (m − j + 1) · p_(j))`:
/// the family-wise error rate of calling every adjusted `p < α` significant is at most `α`.
/// Ties keep their given order (their adjusted values are equal either way).
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (j, &i) in order.iter().enumerate() {
        running = running.max(((m - j) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b}");
    }

    /// The numbers of scipy 1.17, `tests/pytorch/study_stats.py` (committed): `stats.t.interval`
    /// and `stats.ttest_rel` on the same values. Their tolerance is statrs's accuracy for the
    /// incomplete beta function (about 1e-10 relative), far below the two decimals printed.
    #[test]
    fn interval_and_paired_test_equal_scipys() {
        let a = [85.12, 85.61, 84.97];
        let s = summarise(&a).unwrap();
        close(s.mean, 85.233_333_333_333_33, 1e-9);
        close(s.sd.unwrap(), 0.334_713_808_100_790_66, 1e-9);
        let (lo, hi) = s.interval.unwrap();
        close(lo, 84.401_858_139_986_6, 1e-7);
        close(hi, 86.064_808_526_680_07, 1e-7);
        let arm = [(0, 85.12), (1, 85.61), (2, 84.97), (7, 99.0)];
        let base = [(2, 84.50), (1, 84.90), (0, 84.80), (5, 0.0)];
        let p = paired(&arm, &base).unwrap();
        assert_eq!(p.difference.n, 3, "seeds 0, 1, 2 pair; 7 and 5 do not");
        close(p.difference.mean, 0.5, 1e-9);
        close(p.t.unwrap(), 4.402_254_531_628_268, 1e-7);
        close(p.p.unwrap(), 0.047_921_246_881_731_4, 1e-7);
    }

    #[test]
    fn one_value_has_no_interval_and_equal_differences_no_test() {
        let s = summarise(&[80.0]).unwrap();
        assert_eq!((s.n, s.mean, s.sd, s.interval), (1, 80.0, None, None));
        assert_eq!(summarise(&[]), None);
        let p = paired(&[(0, 81.0), (1, 82.0)], &[(0, 80.0), (1, 81.0)]).unwrap();
        close(p.difference.mean, 1.0, 1e-12);
        assert_eq!((p.t, p.p), (None, None));
        assert!(paired(&[(0, 1.0)], &[(1, 1.0)]).is_none());
    }

    /// Holm by hand. p = [0.035, 0.01, 0.2, 0.04], m = 4, sorted: 0.01 (2nd), 0.035 (1st),
    /// 0.04 (4th), 0.2 (3rd):
    ///   j = 1: 4 · 0.01  = 0.04                     → 0.04
    ///   j = 2: 3 · 0.035 = 0.105, max(0.04, 0.105)  → 0.105
    ///   j = 3: 2 · 0.04  = 0.08,  max(0.105, 0.08)  → 0.105 (never below the one before)
    ///   j = 4: 1 · 0.2   = 0.2,   max(0.105, 0.2)   → 0.2
    /// so in the given order [0.105, 0.04, 0.2, 0.105]. The reviewer's case, the Huber arm of
    /// bad_batches (kNN k=20, k=200, linear, few-label: 0.2946, 0.108, 0.035, 0.192), sorted:
    /// 4 · 0.035 = 0.14; 3 · 0.108 = 0.324; 2 · 0.192 = 0.384; 0.2946 → max(0.384, 0.2946) =
    /// 0.384; in the given order [0.384, 0.324, 0.14, 0.384].
    /// [0.5, 0.6]: 2 · 0.5 = 1.0, capped; 0.6 → max(1.0, 0.6) = 1.0.
    #[test]
    fn holm_equals_the_hand_computation() {
        let check = |p: &[f64], want: &[f64]| {
            let got = holm(p);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                close(*g, *w, 1e-12);
            }
        };
        check(&[0.035, 0.01, 0.2, 0.04], &[0.105, 0.04, 0.2, 0.105]);
        check(&[0.2946, 0.108, 0.035, 0.192], &[0.384, 0.324, 0.14, 0.384]);
        check(&[0.5, 0.6], &[1.0, 1.0]);
        // One test: its own p; none: nothing.
        check(&[0.03], &[0.03]);
        check(&[], &[]);
        // Ties: both get the larger multiple's running maximum (2 · 0.02 = 0.04, then
        // max(0.04, 1 · 0.02) = 0.04).
        check(&[0.02, 0.02], &[0.04, 0.04]);
    }
}
