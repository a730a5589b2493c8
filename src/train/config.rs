//! The settings of a run ([`TrainConfig`]) and how it starts in its directory ([`StartMode`]).

use burn::prelude::*;

use crate::base::error::ConfigError;
use crate::optim::{WarmupCosine, WarmupCosineConfig};

/// Settings of a run.
#[derive(Config, Debug)]
pub struct TrainConfig {
    /// Passes over the training data.
    #[config(default = 100)]
    pub epochs: usize,
    /// Peak learning rate (reached after the warm-up).
    #[config(default = 0.06)]
    pub lr: f64,
    /// Epochs of linear warm-up before the cosine decay.
    #[config(default = 0)]
    pub warmup_epochs: usize,
    /// Learning rate at the end of the cosine.
    #[config(default = 0.0)]
    pub final_lr: f64,
    /// A checkpoint every this many epochs, and always at the end; 0: only at the end.
    #[config(default = 10)]
    pub checkpoint_every: usize,
    /// Also a checkpoint every this many steps inside an epoch (0: none): a resume continues
    /// from the middle of the epoch exactly, on the batches a run without the stop would have
    /// trained. Only the newest mid-epoch checkpoint is kept (an epoch's end keeps its own).
    #[config(default = 0)]
    pub checkpoint_every_steps: usize,
    /// Draw a progress bar on standard error (when it is a terminal).
    #[config(default = true)]
    pub progress_bar: bool,
    /// Seed of the stochastic layers (dropout, stochastic depth): step `s` draws from
    /// `(seed, s)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl TrainConfig {
    /// The learning-rate plan of a run of `epochs` epochs of `batches` steps: warm-up, then
    /// cosine to `final_lr`.
    ///
    /// # Errors
    /// If the learning rates or the warm-up are impossible.
    pub fn schedule(&self, epochs: usize, batches: usize) -> Result<WarmupCosine, ConfigError> {
        WarmupCosineConfig::new(self.lr, epochs * batches)
            .with_warmup_steps(self.warmup_epochs * batches)
            .with_final_lr(self.final_lr)
            .init()
    }
}

/// How a run starts in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartMode {
    /// A new run: the directory must be missing or empty.
    #[default]
    Fresh,
    /// Continue the run in the directory from its newest valid checkpoint with the same
    /// settings (a missing or empty directory starts afresh).
    Resume,
    /// As `Resume`, and the run may have more epochs than planned: the learning-rate schedule
    /// is re-planned from the current step ([`WarmupCosine::extend`]).
    Extend,
}
