//! Where training stands: the one value every scheduler, curriculum and adaptive state reads.

/// Where training stands: what schedulers and adaptive states read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// Optimiser steps done so far (0-based index of the current step).
    pub step: usize,
    /// Optimiser steps of the whole run.
    pub total_steps: usize,
    /// Epochs done so far (0-based index of the current epoch).
    pub epoch: usize,
    /// Epochs of the whole run.
    pub total_epochs: usize,
}

impl Progress {
    /// `step / total_steps`, in `[0, 1]`.
    pub fn fraction(&self) -> f64 {
        if self.total_steps == 0 {
            1.0
        } else {
            (self.step as f64 / self.total_steps as f64).min(1.0)
        }
    }
}
