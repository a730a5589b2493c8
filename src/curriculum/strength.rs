use burn::config::Config;

use crate::base::error::{in_range, ConfigError};
use crate::base::schedule::SchedulerConfig;
use crate::base::Progress;

/// The strength curriculum (a burn [`Config`], saved in the run's configuration).
///
/// MICO's augmentation-strength curriculum (H. Fang, "Curriculum SSL",
/// <https://arxiv.org/abs/2301.06916>, §3.4, Tables 2–3): the
/// colour distortion of both views at a target strength (×1, ×1.5, ×2, ×3 of the standard
/// jitter), reached along a schedule.
///
/// At progress `p` the multiplier is `target · S(p)`: it scales the colour-jitter magnitudes
/// (brightness, contrast, saturation, hue, on top of the pipeline's own `strength`) and the
/// grayscale probability (capped at 1). Without a schedule the target strength holds from the
/// start (the tables' "baseline" rows). MICO's schedules are the k-step ones (2-step 0.33, 0.66;
/// 4-step 0.2 … 0.8), linear 0 → 1 and reverse cosine 0.8 → 0.2.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#strength-curriculum`.
#[derive(Config, Debug, PartialEq)]
pub struct StrengthCurriculumConfig {
    /// The strength multiplier at the schedule's value 1 (MICO: 1, 1.5, 2, 3).
    pub target: f64,
    /// Share of the target over training (values in `[0, 1]`); `None`: the target throughout.
    pub schedule: Option<SchedulerConfig>,
}

impl StrengthCurriculumConfig {
    /// Checks the target (in `(0, 4]`) and the schedule's values (in `[0, 1]`).
    ///
    /// # Errors
    /// Naming the field at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("strength_curriculum.target", self.target, 0.0, 4.0, true)?;
        if let Some(s) = &self.schedule {
            s.validate("strength_curriculum.schedule", 0.0, 1.0)?;
        }
        Ok(())
    }

    /// The multiplier at `progress`.
    pub fn multiplier(&self, progress: Progress) -> f64 {
        self.target * self.schedule.as_ref().map_or(1.0, |s| s.value(progress))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_strength_on_four_steps() {
        let c = StrengthCurriculumConfig {
            target: 2.0,
            schedule: Some(SchedulerConfig::four_step()),
        };
        c.validate().unwrap();
        let at = |epoch| Progress {
            step: epoch,
            total_steps: 8,
            epoch,
            total_epochs: 8,
        };
        let m: Vec<f64> = (0..8).map(|e| c.multiplier(at(e))).collect();
        assert_eq!(m, [0.4, 0.4, 0.8, 0.8, 1.2, 1.2, 1.6, 1.6]);
        let fixed = StrengthCurriculumConfig {
            target: 1.5,
            schedule: None,
        };
        assert_eq!(fixed.multiplier(at(3)), 1.5);
        assert!(StrengthCurriculumConfig {
            target: 0.0,
            schedule: None
        }
        .validate()
        .is_err());
    }
}
