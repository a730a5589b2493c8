//! Schedulers: a difficulty value as a function of where training stands ([`Progress`]).
//!
//! The kinds MICO (<https://arxiv.org/abs/2301.06916>, Table 2, §4.6) compares, each per step or
//! per epoch ([`Pace`]):
//!
//! | kind | value at progress `p ∈ [0, 1]` | MICO's settings |
//! |---|---|---|
//! | [`SchedulerConfig::Steps`] (k-step) | `values[min(S − 1, ⌊i·S / I⌋)]` for index `i` of `I` (epochs or steps) | 2-step `(0.33, 0.66)`, 4-step `(0.2, 0.4, 0.6, 0.8)` |
//! | [`SchedulerConfig::Linear`] | `start + (end − start)·p` | linear `0 → 1` |
//! | [`SchedulerConfig::Cosine`] | `start + (end − start)·½(1 − cos πp)` | reverse cosine `0.8 → 0.2` |
//! | [`SchedulerConfig::Constant`] | `value` | the baselines (plain Mixup `0.5`) |
//!
//! With `E = 200` epochs and the 4-step values, epochs 0–49 read 0.2, 50–99 read 0.4, and so on.
//! A [`Scheduler`] is what a component holds: a validated config, or a user's own function
//! ([`Scheduler::custom`]). Both are pure functions of the progress, so a checkpoint's step and
//! epoch are their whole state; adaptive (model-driven) schedules keep their state in the
//! component that owns them (the curricular loss's `t`, SoftNCE's incremental α) and are saved
//! with the method's state.
//!
//! The math, the defaults, the paper followed and the worked values are in
//! `docs/methods.md#schedulers`.

use std::sync::Arc;

use burn::config::Config;
use serde::{Deserialize, Serialize};

use crate::base::error::ConfigError;
use crate::base::Progress;

/// Whether a schedule moves every optimiser step or once per epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Pace {
    /// Once per epoch, from `epoch / total_epochs` (MICO Algorithm 1: `S(epoch, total_epochs)`).
    #[default]
    Epoch,
    /// Every step, from `step / total_steps`.
    Step,
}

impl Pace {
    /// The index and count this pace reads from the progress.
    fn index(self, p: Progress) -> (usize, usize) {
        match self {
            Pace::Epoch => (p.epoch, p.total_epochs),
            Pace::Step => (p.step, p.total_steps),
        }
    }

    /// `index / count` in `[0, 1]`.
    pub fn fraction(self, p: Progress) -> f64 {
        let (i, n) = self.index(p);
        if n == 0 {
            1.0
        } else {
            (i as f64 / n as f64).min(1.0)
        }
    }
}

/// A built-in schedule: a burn [`Config`], saved in the run's
/// configuration and validated by [`SchedulerConfig::validate`] against the range of the knob it
/// drives.
#[derive(Config, Debug, PartialEq)]
pub enum SchedulerConfig {
    /// The same value throughout.
    Constant {
        /// The value.
        value: f64,
    },
    /// k-step: `values[min(S − 1, ⌊i·S / I⌋)]`, S = `values.len()`.
    Steps {
        /// The values, in order.
        values: Vec<f64>,
        /// Per epoch or per step.
        pace: Pace,
    },
    /// From `start` to `end` in a straight line.
    Linear {
        /// Value at the start.
        start: f64,
        /// Value at the end.
        end: f64,
        /// Per epoch or per step.
        pace: Pace,
    },
    /// From `start` to `end` along a half cosine (slow at both ends).
    Cosine {
        /// Value at the start.
        start: f64,
        /// Value at the end.
        end: f64,
        /// Per epoch or per step.
        pace: Pace,
    },
}

impl SchedulerConfig {
    /// MICO's 2-step schedule `(0.33, 0.66)`, per epoch.
    pub fn two_step() -> Self {
        Self::Steps {
            values: vec![0.33, 0.66],
            pace: Pace::Epoch,
        }
    }

    /// MICO's 4-step schedule `(0.2, 0.4, 0.6, 0.8)`, per epoch.
    pub fn four_step() -> Self {
        Self::Steps {
            values: vec![0.2, 0.4, 0.6, 0.8],
            pace: Pace::Epoch,
        }
    }

    /// MICO's linear schedule `0 → 1`, per epoch.
    pub fn linear() -> Self {
        Self::Linear {
            start: 0.0,
            end: 1.0,
            pace: Pace::Epoch,
        }
    }

    /// MICO's reverse cosine `0.8 → 0.2` (its table lists the values 0.8, 0.6, 0.4, 0.2), per
    /// epoch.
    pub fn reverse_cosine() -> Self {
        Self::Cosine {
            start: 0.8,
            end: 0.2,
            pace: Pace::Epoch,
        }
    }

    /// The same schedule run backwards (the k-step values in reverse order, start and end
    /// swapped).
    pub fn reversed(&self) -> Self {
        match self.clone() {
            Self::Constant { value } => Self::Constant { value },
            Self::Steps { mut values, pace } => {
                values.reverse();
                Self::Steps { values, pace }
            }
            Self::Linear { start, end, pace } => Self::Linear {
                start: end,
                end: start,
                pace,
            },
            Self::Cosine { start, end, pace } => Self::Cosine {
                start: end,
                end: start,
                pace,
            },
        }
    }

    /// Every value the schedule can take lies in `[low, high]` (all are finite).
    ///
    /// # Errors
    /// Naming `field` and the offending value.
    pub fn validate(&self, field: &'static str, low: f64, high: f64) -> Result<(), ConfigError> {
        let check = |v: f64| {
            if v.is_finite() && (low..=high).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::new(
                    field,
                    format!("a scheduled value must lie in [{low}, {high}], got {v}"),
                ))
            }
        };
        match self {
            Self::Constant { value } => check(*value),
            Self::Steps { values, .. } => {
                if values.is_empty() {
                    return Err(ConfigError::new(field, "a k-step schedule needs values"));
                }
                values.iter().try_for_each(|v| check(*v))
            }
            Self::Linear { start, end, .. } | Self::Cosine { start, end, .. } => {
                check(*start)?;
                check(*end)
            }
        }
    }

    /// The value at `progress`.
    ///
    /// # Panics
    /// On a `Steps` schedule without values, which [`SchedulerConfig::validate`] refuses: the
    /// components that hold a schedule validate it when they are made.
    pub fn value(&self, progress: Progress) -> f64 {
        match self {
            Self::Constant { value } => *value,
            Self::Steps { values, pace } => {
                let (i, n) = pace.index(progress);
                let s = values.len();
                let k = i
                    .saturating_mul(s)
                    .checked_div(n)
                    .map_or(s - 1, |k| k.min(s - 1));
                values[k]
            }
            Self::Linear { start, end, pace } => start + (end - start) * pace.fraction(progress),
            Self::Cosine { start, end, pace } => {
                let p = pace.fraction(progress);
                start + (end - start) * 0.5 * (1.0 - (std::f64::consts::PI * p).cos())
            }
        }
    }
}

/// A function of the progress given by the user.
pub type ScheduleFn = Arc<dyn Fn(Progress) -> f64 + Send + Sync>;

/// What a component holds for one of its knobs: a built-in schedule or a user's function.
#[derive(Clone)]
pub enum Scheduler {
    /// A built-in, validated schedule.
    Config(SchedulerConfig),
    /// A user's function, known in the run's configuration by its name. Its values are clamped
    /// to the knob's range.
    Custom {
        /// Name recorded in the run's configuration.
        name: String,
        /// The function.
        f: ScheduleFn,
    },
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(c) => c.fmt(f),
            Self::Custom { name, .. } => write!(f, "Custom({name})"),
        }
    }
}

impl From<SchedulerConfig> for Scheduler {
    fn from(c: SchedulerConfig) -> Self {
        Self::Config(c)
    }
}

impl Scheduler {
    /// A schedule computed by `f`, recorded as `name`.
    pub fn custom(
        name: impl Into<String>,
        f: impl Fn(Progress) -> f64 + Send + Sync + 'static,
    ) -> Self {
        Self::Custom {
            name: name.into(),
            f: Arc::new(f),
        }
    }

    /// The value at `progress`, within `[low, high]` (a custom function's value is clamped; NaN
    /// reads as `low`).
    pub fn value(&self, progress: Progress, low: f64, high: f64) -> f64 {
        let v = match self {
            Self::Config(c) => c.value(progress),
            Self::Custom { f, .. } => f(progress),
        };
        if v.is_nan() {
            low
        } else {
            v.clamp(low, high)
        }
    }

    /// The built-in config, if it is one.
    pub fn config(&self) -> Option<&SchedulerConfig> {
        match self {
            Self::Config(c) => Some(c),
            Self::Custom { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_epoch(epoch: usize, total_epochs: usize) -> Progress {
        Progress {
            step: epoch * 10,
            total_steps: total_epochs * 10,
            epoch,
            total_epochs,
        }
    }

    #[test]
    fn four_step_over_200_epochs_changes_every_50_epochs() {
        let s = SchedulerConfig::four_step();
        for (epochs, value) in [
            (0..50, 0.2),
            (50..100, 0.4),
            (100..150, 0.6),
            (150..200, 0.8),
        ] {
            for e in epochs {
                assert_eq!(s.value(at_epoch(e, 200)), value, "epoch {e}");
            }
        }
        let two = SchedulerConfig::two_step();
        assert_eq!(two.value(at_epoch(99, 200)), 0.33);
        assert_eq!(two.value(at_epoch(100, 200)), 0.66);
    }

    #[test]
    fn linear_and_cosine_hit_their_endpoints_and_midpoints() {
        let l = SchedulerConfig::linear();
        assert_eq!(l.value(at_epoch(0, 200)), 0.0);
        assert_eq!(l.value(at_epoch(50, 200)), 0.25);
        assert_eq!(l.value(at_epoch(200, 200)), 1.0);
        let r = SchedulerConfig::reverse_cosine();
        assert!((r.value(at_epoch(0, 100)) - 0.8).abs() < 1e-15);
        assert!((r.value(at_epoch(50, 100)) - 0.5).abs() < 1e-15);
        assert!((r.value(at_epoch(100, 100)) - 0.2).abs() < 1e-15);
        // At a quarter: 0.8 − 0.6·½(1 − cos π/4) = 0.712132.
        assert!((r.value(at_epoch(25, 100)) - 0.712_132_034_355_964).abs() < 1e-12);
    }

    #[test]
    fn per_step_pace_reads_the_step() {
        let s = SchedulerConfig::Steps {
            values: vec![1.0, 2.0],
            pace: Pace::Step,
        };
        let p = |step| Progress {
            step,
            total_steps: 10,
            epoch: 0,
            total_epochs: 1,
        };
        assert_eq!(s.value(p(4)), 1.0);
        assert_eq!(s.value(p(5)), 2.0);
        assert_eq!(SchedulerConfig::Constant { value: 0.5 }.value(p(3)), 0.5);
    }

    #[test]
    fn reversed_schedules_and_validation() {
        assert_eq!(
            SchedulerConfig::four_step().reversed(),
            SchedulerConfig::Steps {
                values: vec![0.8, 0.6, 0.4, 0.2],
                pace: Pace::Epoch
            }
        );
        assert!(SchedulerConfig::four_step().validate("x", 0.0, 1.0).is_ok());
        let err = SchedulerConfig::Linear {
            start: 0.0,
            end: 1.5,
            pace: Pace::Step,
        }
        .validate("mixup", 0.0, 1.0)
        .unwrap_err();
        assert_eq!(err.field, "mixup");
        assert!(SchedulerConfig::Steps {
            values: vec![],
            pace: Pace::Step
        }
        .validate("x", 0.0, 1.0)
        .is_err());
        let custom = Scheduler::custom("double", |p| 2.0 * p.epoch as f64);
        assert_eq!(custom.value(at_epoch(3, 10), 0.0, 1.0), 1.0, "clamped");
    }

    #[test]
    fn configs_round_trip_through_burn_config_files() {
        let dir = std::env::temp_dir().join(format!("schedule-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for config in [
            SchedulerConfig::four_step(),
            SchedulerConfig::reverse_cosine(),
            SchedulerConfig::Constant { value: 0.5 },
            SchedulerConfig::Linear {
                start: 1.0,
                end: 0.0,
                pace: Pace::Step,
            },
        ] {
            let path = dir.join("schedule.json");
            config.save(&path).unwrap();
            let back = SchedulerConfig::load(&path).unwrap();
            assert_eq!(back, config);
            assert_eq!(back.value(at_epoch(7, 10)), config.value(at_epoch(7, 10)));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
