//! Fréchet batch curation as a training hook (documented on `FrechetCurationHook`).

use std::time::Instant;

use burn::tensor::backend::AutodiffBackend;

use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::curation::{
    frechet_distance_readback, CurationState, Decision, FrechetCuration, FrechetCurationConfig,
    ThresholdRule,
};
use crate::train::{Cell, EpochReport, Hook, RunView, SelfSupervisedTask, TrainError, Verdict};

/// Fréchet batch curation ("The Bad Batches", Goksu and Pugeault 2024) as a training hook: after
/// the warm-up, a batch whose two views' projections are farther apart (Fréchet distance) than
/// the threshold is not applied but drawn again; the decision rule and its state are
/// [`FrechetCuration`].
///
/// Columns: `frd` and `redraws` in `steps.csv` (the applied attempt's distance, and how many
/// attempts of the step were rejected); `curation_rejections`, `curation_accepted_after_retries`
/// and `curation_seconds` in `epochs.csv` (the wall time curation cost in the epoch: measuring
/// every attempt, and the rejected attempts' augmentation and forward pass; a first attempt's
/// augmentation done ahead, on the augmentation thread, is not counted). Under the quantile
/// threshold ([`ThresholdRule::RecentQuantile`], not the paper's) three more: `first_frd` in
/// `steps.csv` (the step's first attempt's distance, the one the window records), and
/// `curation_threshold_mean` and `curation_frd_mean` in `epochs.csv` (the means over the epoch's
/// batches of their thresholds, empty before curation starts, and of their first-attempt
/// distances). The paper's rule keeps the columns it always had, so its runs made before the
/// variant resume.
#[derive(Debug, Clone)]
pub struct FrechetCurationHook {
    config: FrechetCurationConfig,
    policy: FrechetCuration,
    /// When the current attempt started.
    attempt_started: Option<Instant>,
    /// The applied attempt's distance and the attempts rejected before it, for the step's row.
    applied: Option<(f64, usize)>,
    rejected: usize,
    /// Wall time of the current epoch spent on curation.
    seconds: f64,
}

impl FrechetCurationHook {
    /// The hook of a curation policy.
    ///
    /// # Errors
    /// If the settings are impossible.
    pub fn new(config: FrechetCurationConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            policy: config.init()?,
            config,
            attempt_started: None,
            applied: None,
            rejected: 0,
            seconds: 0.0,
        })
    }

    /// The curation policy and its state (threshold, counters).
    pub fn curation(&self) -> &FrechetCuration {
        &self.policy
    }

    fn error(step: usize, reason: String) -> TrainError {
        TrainError::Hook {
            hook: "batch curation",
            step,
            reason,
        }
    }
}

impl<B: AutodiffBackend, K: SelfSupervisedTask<B>> Hook<B, K> for FrechetCurationHook {
    fn name(&self) -> &'static str {
        "curation"
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::to_value(&self.config).expect("JSON value")
    }

    /// Data-parallel: the step gathers the embeddings, so every replica measures the global
    /// batch's distance, keeps the same threshold and redraws the same batches (each redraw is
    /// the one-device redraw, the augmentation being drawn for the global batch).
    fn runs_on_replicas(&self) -> bool {
        true
    }

    fn reads_embeddings(&self) -> bool {
        true
    }

    fn epoch_start(&mut self, _: &mut RunView<'_, B, K>, _: usize) -> Result<(), TrainError> {
        self.seconds = 0.0;
        Ok(())
    }

    fn attempt_start(&mut self) {
        self.attempt_started = Some(Instant::now());
    }

    fn after_forward(
        &mut self,
        output: &K::Output,
        progress: Progress,
    ) -> Result<Verdict, TrainError> {
        let Some([z1, z2]) = output.embeddings.clone() else {
            return Err(Self::error(
                progress.step,
                "the method gives no two-view embeddings to measure".into(),
            ));
        };
        let measure_started = Instant::now();
        let frd = frechet_distance_readback(z1.inner(), z2.inner())
            .map_err(|e| Self::error(progress.step, e.to_string()))?;
        match self
            .policy
            .observe(progress.epoch, frd)
            .map_err(|e| Self::error(progress.step, e.to_string()))?
        {
            Decision::Redraw => {
                // The whole rejected attempt is the curation's cost.
                let started = self.attempt_started.unwrap_or(measure_started);
                self.seconds += started.elapsed().as_secs_f64();
                self.rejected += 1;
                Ok(Verdict::Redraw)
            }
            Decision::Apply | Decision::AcceptAfterRetries => {
                // Of the applied attempt, only the measurement is.
                self.seconds += measure_started.elapsed().as_secs_f64();
                self.applied = Some((frd, self.rejected));
                self.rejected = 0;
                Ok(Verdict::Apply)
            }
        }
    }

    fn after_step(
        &mut self,
        _: &mut RunView<'_, B, K>,
        _: Progress,
        _: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        Ok(match self.applied.take() {
            Some((frd, redraws)) => {
                let mut columns = vec![
                    ("frd".to_string(), frd),
                    ("redraws".to_string(), redraws as f64),
                ];
                // The policy's window ends with this batch's first attempt.
                if let (ThresholdRule::RecentQuantile { .. }, Some(&first)) =
                    (self.policy.rule(), self.policy.state().recent_frds.last())
                {
                    columns.push(("first_frd".to_string(), first));
                }
                columns
            }
            None => Vec::new(),
        })
    }

    fn epoch_end(
        &mut self,
        _: &mut RunView<'_, B, K>,
        epoch: usize,
        _: bool,
    ) -> Result<EpochReport, TrainError> {
        let counters = if self.policy.state().epoch == Some(epoch) {
            self.policy.epoch_counters()
        } else {
            Default::default()
        };
        let value = |v: f64| Cell::Value(v);
        let mut columns = vec![
            (
                "curation_rejections".into(),
                value(counters.rejections as f64),
            ),
            (
                "curation_accepted_after_retries".into(),
                value(counters.accepted_after_retries as f64),
            ),
            (
                "curation_seconds".into(),
                value((self.seconds * 1e3).round() / 1e3),
            ),
        ];
        if matches!(self.policy.rule(), ThresholdRule::RecentQuantile { .. }) {
            let state = self.policy.state();
            let distances = state.epoch_distances.filter(|_| state.epoch == Some(epoch));
            let mean = |m: Option<f64>| m.map_or(Cell::Empty, value);
            columns.push((
                "curation_threshold_mean".into(),
                mean(distances.and_then(|d| d.threshold_mean())),
            ));
            columns.push((
                "curation_frd_mean".into(),
                mean(distances.and_then(|d| d.frd_mean())),
            ));
        }
        Ok(EpochReport {
            columns,
            ..Default::default()
        })
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(serde_json::to_value(self.policy.state()).expect("JSON value"))
    }

    fn load_state(
        &mut self,
        _: &mut RunView<'_, B, K>,
        state: Option<serde_json::Value>,
    ) -> Result<(), String> {
        let state = state.ok_or(
            "the checkpoint holds no batch-curation state (a run without \
                                 curation?)",
        )?;
        let state: CurationState =
            serde_json::from_value(state).map_err(|e| format!("not a curation state: {e}"))?;
        self.policy.restore(state).map_err(|e| e.to_string())
    }
}
