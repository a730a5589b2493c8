//! Masking curricula for masked image modelling (MAE, SimMIM; and I-JEPA's target block scale,
//! `IjepaConfig::target_scale_schedule`): the share of patches hidden, moved along a schedule
//! instead of held. An easy-to-hard curriculum hides fewer patches first
//! (more context, an easier reconstruction) and reaches the method's ratio at the end; the
//! reverse, or any [`SchedulerConfig`], is one setting away. CL-MAE (Madan et al., WACV 2024,
//! <https://arxiv.org/abs/2308.16572>) makes masks harder along training with a learned masking
//! module; a scheduled ratio is the knob without one, composable with every other curriculum.
//!
//! The ratio is a pure function of the progress: a resumed run and every replica of a
//! data-parallel run draw the same masks as one uninterrupted device. The math and the recipes
//! (`mae_ratio_curriculum`, `simmim_ratio_curriculum`) are in
//! `docs/methods.md#masking-curricula`.

use crate::base::error::ConfigError;
use crate::base::schedule::{Pace, SchedulerConfig};
use crate::base::Progress;

/// The mask ratio at `progress`: the schedule's value, or `ratio` throughout without one.
pub fn mask_ratio_at(ratio: f64, schedule: Option<&SchedulerConfig>, progress: Progress) -> f64 {
    schedule.map_or(ratio, |s| s.value(progress))
}

/// Checks that every value of `schedule` lies in `[low, high]` (the method's range for its mask
/// ratio), naming `field`.
///
/// # Errors
/// A scheduled value outside the range.
pub fn validate(
    field: &'static str,
    schedule: Option<&SchedulerConfig>,
    low: f64,
    high: f64,
) -> Result<(), ConfigError> {
    schedule.map_or(Ok(()), |s| s.validate(field, low, high))
}

/// Easy to hard: the ratio from `start` to `end` in a straight line, every step.
pub fn easy_to_hard(start: f64, end: f64) -> SchedulerConfig {
    SchedulerConfig::Linear {
        start,
        end,
        pace: Pace::Step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(step: usize) -> Progress {
        Progress {
            step,
            total_steps: 10,
            epoch: 0,
            total_epochs: 1,
        }
    }

    #[test]
    fn the_ratio_follows_its_schedule_or_holds() {
        let ramp = easy_to_hard(0.5, 0.75);
        let got: Vec<f64> = [0, 4, 10]
            .iter()
            .map(|&s| mask_ratio_at(0.9, Some(&ramp), at(s)))
            .collect();
        assert_eq!(got, [0.5, 0.6, 0.75]);
        assert_eq!(mask_ratio_at(0.9, None, at(4)), 0.9);
        assert!(validate("x", Some(&ramp), 0.0, 0.7).is_err());
        assert!(validate("x", Some(&ramp), 0.0, 0.8).is_ok());
        assert!(validate("x", None, 0.0, 0.1).is_ok());
    }
}
