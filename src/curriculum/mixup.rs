use burn::config::Config;
use rand::rngs::StdRng;

use crate::augment::mixup::sample_beta;
use crate::base::error::ConfigError;
use crate::base::schedule::{Scheduler, SchedulerConfig};
use crate::base::Progress;

/// What is scheduled: MICO's curriculum Mixup on the positive pair.
///
/// MICO's curriculum Mixup on the positive pair (H. Fang, "Curriculum SSL: An Efficient And
/// Effective Data Augmentation For Contrastive Learning", <https://arxiv.org/abs/2301.06916>, §3.5
/// and Algorithm 1).
///
/// The second view of every pair is replaced by `mixed = λ·x1 + (1 − λ)·x2`, for every framework
/// (SimSiam, BYOL, SimCLR, MoCo): the online branch sees `x1` and `mixed`. λ is the share of the
/// first view (the convention of [`crate::augment::mixup`]): λ = 1 makes the pair identical,
/// λ = 0 leaves the usual two-view pair. Two modes, both from the paper:
///
/// - [`MixupCurriculum::Share`]: λ itself is scheduled. MICO Table 1: "4-step lambda (0.2, 0.4,
///   0.6, 0.8)"; plain Mixup is the constant 0.5.
/// - [`MixupCurriculum::BetaAlpha`]: Algorithm 1, `alpha = S(epoch, total_epochs)` and one
///   `λ ~ Beta(α, α)` per batch.
///
/// By the paper's own definition ("a large λ means two images are more similar, thus an easier
/// task"), its increasing 0.2 → 0.8 schedule runs from hard to easy. The paper's numbers are the
/// default ([`MixupCurriculumConfig::mico`]); the easy-to-hard order is
/// [`MixupCurriculumConfig::mico_easy_to_hard`] (the same values reversed).
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#curriculum-mixup`.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum MixupCurriculum {
    /// λ itself (in `[0, 1]`).
    Share,
    /// α of `λ ~ Beta(α, α)`, one λ per batch (α in `(0, 1000]`).
    BetaAlpha,
}

/// The configuration of a mixup curriculum (a burn [`Config`], saved in the run's
/// configuration). The presets below carry the paper's numbers.
#[derive(Config, Debug, PartialEq)]
pub struct MixupCurriculumConfig {
    /// What the schedule gives.
    pub mode: MixupCurriculum,
    /// The schedule.
    pub schedule: SchedulerConfig,
}

impl MixupCurriculumConfig {
    /// MICO's C-Mixup: λ on the 4-step schedule (0.2, 0.4, 0.6, 0.8) per epoch — hard to easy.
    pub fn mico() -> Self {
        Self {
            mode: MixupCurriculum::Share,
            schedule: SchedulerConfig::four_step(),
        }
    }

    /// The reverse of [`MixupCurriculumConfig::mico`]: λ 0.8, 0.6, 0.4, 0.2 — easy to hard.
    pub fn mico_easy_to_hard() -> Self {
        Self {
            mode: MixupCurriculum::Share,
            schedule: SchedulerConfig::four_step().reversed(),
        }
    }

    /// Plain Mixup, MICO's baseline: λ = 0.5 throughout.
    pub fn plain() -> Self {
        Self {
            mode: MixupCurriculum::Share,
            schedule: SchedulerConfig::Constant { value: 0.5 },
        }
    }

    /// Algorithm 1: `λ ~ Beta(α, α)` per batch with α on `schedule`.
    pub fn beta(schedule: SchedulerConfig) -> Self {
        Self {
            mode: MixupCurriculum::BetaAlpha,
            schedule,
        }
    }

    /// The range of the scheduled value.
    fn range(&self) -> (f64, f64) {
        match self.mode {
            MixupCurriculum::Share => (0.0, 1.0),
            MixupCurriculum::BetaAlpha => (1e-3, 1e3),
        }
    }

    /// Checks the schedule's values.
    ///
    /// # Errors
    /// If a value falls outside `[0, 1]` (λ) or `[0.001, 1000]` (α).
    pub fn init(&self) -> Result<MixupSchedule, ConfigError> {
        let (low, high) = self.range();
        self.schedule.validate("mixup.schedule", low, high)?;
        Ok(MixupSchedule {
            mode: self.mode,
            scheduler: self.schedule.clone().into(),
            low,
            high,
        })
    }
}

/// A validated mixup curriculum: gives the λ of a batch from the progress.
#[derive(Debug, Clone)]
pub struct MixupSchedule {
    mode: MixupCurriculum,
    scheduler: Scheduler,
    low: f64,
    high: f64,
}

/// The λ of one batch and the scheduled value behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixupDraw {
    /// The share of the first view in the mixed one.
    pub lambda: f64,
    /// The scheduled value: λ itself, or α.
    pub scheduled: f64,
}

impl MixupSchedule {
    /// A curriculum whose value comes from a user's scheduler (values clamped to the mode's
    /// range).
    pub fn with_scheduler(mode: MixupCurriculum, scheduler: Scheduler) -> Self {
        let (low, high) = MixupCurriculumConfig {
            mode,
            schedule: SchedulerConfig::Constant { value: 0.5 },
        }
        .range();
        Self {
            mode,
            scheduler,
            low,
            high,
        }
    }

    /// What is scheduled.
    pub fn mode(&self) -> MixupCurriculum {
        self.mode
    }

    /// The knob's name in the logs.
    pub fn knob(&self) -> &'static str {
        match self.mode {
            MixupCurriculum::Share => "mixup_lambda",
            MixupCurriculum::BetaAlpha => "mixup_alpha",
        }
    }

    /// The λ of the batch at `progress` (Beta draws from `rng`).
    pub fn draw(&self, progress: Progress, rng: &mut StdRng) -> MixupDraw {
        let scheduled = self.scheduler.value(progress, self.low, self.high);
        let lambda = match self.mode {
            MixupCurriculum::Share => scheduled,
            MixupCurriculum::BetaAlpha => sample_beta(rng, scheduled, scheduled),
        };
        MixupDraw { lambda, scheduled }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn epoch(e: usize) -> Progress {
        Progress {
            step: e,
            total_steps: 8,
            epoch: e,
            total_epochs: 8,
        }
    }

    #[test]
    fn mico_runs_from_hard_to_easy_and_the_reverse_from_easy_to_hard() {
        let mut rng = StdRng::seed_from_u64(0);
        let m = MixupCurriculumConfig::mico().init().unwrap();
        let r = MixupCurriculumConfig::mico_easy_to_hard().init().unwrap();
        let lambdas: Vec<f64> = (0..8).map(|e| m.draw(epoch(e), &mut rng).lambda).collect();
        assert_eq!(lambdas, [0.2, 0.2, 0.4, 0.4, 0.6, 0.6, 0.8, 0.8]);
        assert_eq!(r.draw(epoch(0), &mut rng).lambda, 0.8);
        assert_eq!(r.draw(epoch(7), &mut rng).lambda, 0.2);
        assert_eq!(m.knob(), "mixup_lambda");
    }

    #[test]
    fn beta_mode_draws_lambda_from_the_scheduled_alpha() {
        let c = MixupCurriculumConfig::beta(SchedulerConfig::Constant { value: 2.0 });
        let s = c.init().unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let draws: Vec<f64> = (0..4000)
            .map(|_| s.draw(epoch(0), &mut rng).lambda)
            .collect();
        // Beta(2, 2): mean 1/2, variance 1/20.
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        assert!((var - 0.05).abs() < 0.005, "{var}");
        assert_eq!(s.draw(epoch(0), &mut rng).scheduled, 2.0);
        assert!(MixupCurriculumConfig {
            mode: MixupCurriculum::Share,
            schedule: SchedulerConfig::linear().reversed()
        }
        .init()
        .is_ok());
        assert!(MixupCurriculumConfig {
            mode: MixupCurriculum::Share,
            schedule: SchedulerConfig::Constant { value: 1.5 }
        }
        .init()
        .is_err());
    }
}
