//! Learning-rate schedules, evaluated per step: linear warm-up then cosine decay
//! (`WarmupCosine`, the self-supervised runs'), and step decay at epoch milestones
//! (`StepDecay`, the supervised runs'); documented on the parent module's page (`optim`).

use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::LearningRate;
use burn::prelude::*;

use crate::base::error::{non_negative, positive, ConfigError};

/// Configuration of [`WarmupCosine`].
#[derive(Config, Debug)]
pub struct WarmupCosineConfig {
    /// Peak learning rate, reached at the end of the warm-up.
    pub base_lr: f64,
    /// Total number of optimiser steps of the run (warm-up included).
    pub total_steps: usize,
    /// Number of warm-up steps (e.g. 10 epochs' worth).
    #[config(default = 0)]
    pub warmup_steps: usize,
    /// Learning rate at the end of the cosine.
    #[config(default = 0.0)]
    pub final_lr: f64,
}

impl WarmupCosineConfig {
    /// Validates the settings and builds the schedule at step 0.
    pub fn init(&self) -> Result<WarmupCosine, ConfigError> {
        positive("base_lr", self.base_lr)?;
        non_negative("final_lr", self.final_lr)?;
        if self.total_steps == 0 {
            return Err(ConfigError::new("total_steps", "must be at least 1"));
        }
        if self.warmup_steps > self.total_steps {
            return Err(ConfigError::new(
                "warmup_steps",
                format!(
                    "{} warm-up steps exceed the {} steps of the run",
                    self.warmup_steps, self.total_steps
                ),
            ));
        }
        Ok(WarmupCosine {
            config: self.clone(),
            step: 0,
            replans: Vec::new(),
        })
    }
}

/// Linear warm-up from `base_lr / warmup_steps` to `base_lr`, then a cosine down to `final_lr`
/// at `total_steps`; constant at `final_lr` after that.
///
/// A run made longer on purpose is re-planned with [`WarmupCosine::extend`]: from the step of
/// the extension on, the learning rate follows the schedule of a run planned for the new length
/// from the start (steps before it keep their learning rates).
#[derive(Debug, Clone)]
pub struct WarmupCosine {
    config: WarmupCosineConfig,
    step: usize,
    replans: Vec<Replan>,
}

/// From `from_step` on, the plan is that of a run of `total_steps` steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Replan {
    from_step: usize,
    total_steps: usize,
}

impl WarmupCosine {
    /// Re-plans the schedule for a run that now ends after `total_steps` steps, from step
    /// `from_step` on.
    ///
    /// # Errors
    /// If the new plan is not longer than the current one.
    pub fn extend(&mut self, from_step: usize, total_steps: usize) -> Result<(), ConfigError> {
        let end = self.total_steps();
        if total_steps <= end {
            return Err(ConfigError::new(
                "total_steps",
                format!(
                    "an extension must end after the current end ({end} steps), got {total_steps}"
                ),
            ));
        }
        self.replans.push(Replan {
            from_step,
            total_steps,
        });
        Ok(())
    }

    /// Steps of the whole (possibly extended) plan.
    pub fn total_steps(&self) -> usize {
        self.replans
            .last()
            .map_or(self.config.total_steps, |r| r.total_steps)
    }

    /// The learning rate of (0-based) step `step`.
    pub fn lr_at(&self, step: usize) -> f64 {
        let total = self
            .replans
            .iter()
            .rev()
            .find(|r| step >= r.from_step)
            .map_or(self.config.total_steps, |r| r.total_steps);
        let c = &self.config;
        if step < c.warmup_steps {
            return c.base_lr * (step + 1) as f64 / c.warmup_steps as f64;
        }
        let span = (total - c.warmup_steps).max(1) as f64;
        let progress = ((step - c.warmup_steps) as f64 / span).min(1.0);
        c.final_lr
            + (c.base_lr - c.final_lr) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

impl LrScheduler for WarmupCosine {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> LearningRate {
        let lr = self.lr_at(self.step);
        self.step += 1;
        lr
    }

    fn to_record<B: Backend>(&self) -> Self::Record<B> {
        self.step
    }

    fn load_record<B: Backend>(mut self, record: Self::Record<B>) -> Self {
        self.step = record;
        self
    }
}

/// A step schedule: `lr · γ^{milestones passed}`, a milestone passed from the first step of its
/// epoch on. Its steps do not depend on the run's length, so an extension only moves the end.
#[derive(Debug, Clone, PartialEq)]
pub struct StepDecay {
    lr: f64,
    gamma: f64,
    milestones: Vec<usize>,
    batches_per_epoch: usize,
    total_steps: usize,
}

impl StepDecay {
    /// `lr` decayed by `gamma` at each epoch of `milestones`, over `epochs` epochs of
    /// `batches_per_epoch` steps.
    pub fn new(
        lr: f64,
        gamma: f64,
        milestones: Vec<usize>,
        epochs: usize,
        batches_per_epoch: usize,
    ) -> Self {
        Self {
            lr,
            gamma,
            milestones,
            batches_per_epoch,
            total_steps: epochs * batches_per_epoch,
        }
    }
}

impl StepDecay {
    /// The learning rate of (0-based) step `step`.
    pub fn lr_at(&self, step: usize) -> f64 {
        let epoch = step / self.batches_per_epoch.max(1);
        let passed = self.milestones.iter().filter(|&&m| m <= epoch).count();
        self.lr * self.gamma.powi(passed as i32)
    }

    /// Steps of the whole (possibly extended) plan.
    pub fn total_steps(&self) -> usize {
        self.total_steps
    }

    /// The plan ends after `total_steps` steps (the milestones do not move).
    ///
    /// # Errors
    /// If the new end is not after the current one.
    pub fn extend(&mut self, _from_step: usize, total_steps: usize) -> Result<(), ConfigError> {
        if total_steps <= self.total_steps {
            return Err(ConfigError::new(
                "total_steps",
                format!(
                    "an extension must end after the current end ({} steps), got {total_steps}",
                    self.total_steps
                ),
            ));
        }
        self.total_steps = total_steps;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_then_cosine_by_hand() {
        let s = WarmupCosineConfig::new(0.4, 10)
            .with_warmup_steps(2)
            .with_final_lr(0.0)
            .init()
            .unwrap();
        // Warm-up: 0.2, 0.4; cosine over 8 steps: step 2 → 0.4, step 6 (half-way) → 0.2.
        assert!((s.lr_at(0) - 0.2).abs() < 1e-15);
        assert!((s.lr_at(1) - 0.4).abs() < 1e-15);
        assert!((s.lr_at(2) - 0.4).abs() < 1e-15);
        assert!((s.lr_at(6) - 0.2).abs() < 1e-15);
        assert!(s.lr_at(10).abs() < 1e-15);
        assert!(s.lr_at(50).abs() < 1e-15);
    }

    #[test]
    fn an_extension_follows_the_plan_of_the_longer_run_from_its_step() {
        let mut s = WarmupCosineConfig::new(0.4, 10)
            .with_warmup_steps(2)
            .init()
            .unwrap();
        let before: Vec<f64> = (0..6).map(|i| s.lr_at(i)).collect();
        // At step 6 the run becomes 20 steps long: a cosine over 18 steps after the warm-up.
        s.extend(6, 20).unwrap();
        let after: Vec<f64> = (0..6).map(|i| s.lr_at(i)).collect();
        assert_eq!(before, after, "steps before the extension keep their rates");
        let by_hand = 0.2 * (1.0 + (std::f64::consts::PI * 4.0 / 18.0).cos());
        assert!((s.lr_at(6) - by_hand).abs() < 1e-15);
        assert!(
            (s.lr_at(11) - 0.2).abs() < 1e-15,
            "half-way through the new cosine"
        );
        assert!(s.lr_at(20).abs() < 1e-15);
        assert_eq!(s.total_steps(), 20);
        assert!(s.extend(12, 20).is_err(), "not longer than the plan");
    }

    #[test]
    fn impossible_settings_are_rejected() {
        let err = WarmupCosineConfig::new(0.1, 5)
            .with_warmup_steps(6)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "warmup_steps");
        assert_eq!(
            WarmupCosineConfig::new(0.0, 5).init().unwrap_err().field,
            "base_lr"
        );
        assert_eq!(
            WarmupCosineConfig::new(0.1, 0).init().unwrap_err().field,
            "total_steps"
        );
    }
}
