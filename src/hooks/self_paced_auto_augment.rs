//! The self-paced AutoAugment's feedback as a training hook (documented on
//! `SelfPacedAutoAugmentHook`).

use burn::tensor::backend::AutodiffBackend;

use crate::base::Progress;
use crate::curriculum::PolicyChoice;
use crate::pipeline::LOSS_FEEDBACK;
use crate::train::{BatchView, Hook, RunView, SelfSupervisedTask, TrainError};

/// The self-paced AutoAugment's feedback in the training loop.
///
/// MICO's self-paced AutoAugment learns its magnitudes from the losses; this hook is how the
/// loop's losses reach it. Before each forward pass it notes the sub-policy and magnitude the
/// attempt's views were drawn with ([`TwoViews::policy`](crate::pipeline::TwoViews::policy)); after
/// the optimiser step it hands the applied attempt's choice and loss to
/// [`Augmenter::observe`](crate::pipeline::Augmenter::observe). What the augmenter learned is the
/// augmentation's own state (`curricula.json`, under `augmenter`), so the hook keeps none.
///
/// A run whose augmentation has the self-paced AutoAugment and not this hook is refused at build
/// ([`LOSS_FEEDBACK`]): its magnitudes would never move.
#[derive(Debug, Clone, Default)]
pub struct SelfPacedAutoAugmentHook {
    /// The sub-policy of the latest attempt: the applied one when the step ends.
    choice: Option<PolicyChoice>,
}

impl SelfPacedAutoAugmentHook {
    /// The hook.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<B: AutodiffBackend, K: SelfSupervisedTask<B>> Hook<B, K> for SelfPacedAutoAugmentHook {
    fn name(&self) -> &'static str {
        "auto_augment"
    }

    fn provides(&self) -> &'static [&'static str] {
        &[LOSS_FEEDBACK]
    }

    /// Data-parallel: every replica chooses the same sub-policy (the choice is drawn from the
    /// step's stream), draws its coins for the whole batch, and learns from the replicas' mean
    /// loss, so the magnitudes stay the same on every replica and equal a one-device run's.
    fn runs_on_replicas(&self) -> bool {
        true
    }

    fn check(&mut self, run: &mut RunView<'_, B, K>) -> Result<(), TrainError> {
        if !run.augmenter().is_adaptive() {
            return Err(crate::base::error::ConfigError::new(
                "hooks",
                "the self-paced AutoAugment's hook is for an augmentation that has it \
                 (PipelineConfig::auto_augment); this one does not",
            )
            .into());
        }
        Ok(())
    }

    fn before_forward(&mut self, _: &mut RunView<'_, B, K>, batch: &mut BatchView<'_, K::Inputs>) {
        self.choice = batch.inputs.policy;
    }

    fn after_step(
        &mut self,
        run: &mut RunView<'_, B, K>,
        progress: Progress,
        loss: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        run.task
            .augmenter_mut()
            .observe(progress, self.choice.take(), loss);
        Ok(Vec::new())
    }
}
