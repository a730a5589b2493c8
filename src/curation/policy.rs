//! The curation policy: which batches train, which are redrawn (documented on
//! `FrechetCuration`).

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::base::error::ConfigError;

/// Configuration of [`FrechetCuration`].
#[derive(Config, Debug)]
pub struct FrechetCurationConfig {
    /// Epochs at the start that train on every batch (paper: 5). The last of them (0-based epoch
    /// `warmup_epochs − 1`, the paper's "epoch 5") sets the threshold; curation starts at epoch
    /// `warmup_epochs`. At least 1.
    #[config(default = 5)]
    pub warmup_epochs: usize,
    /// Most times one batch is redrawn before it trains anyway (the paper gives no bound;
    /// default 3). 0 never redraws: every batch above the threshold is accepted with a warning.
    #[config(default = 3)]
    pub max_retries: usize,
    /// How the threshold is set: the paper's mean of the calibration epoch (the default), or a
    /// quantile of the recent batches' distances (a variant, not the paper's). In a settings
    /// file: `threshold = "PaperMean"` or
    /// `threshold = { RecentQuantile = { q = 0.9, window = 50 } }`.
    #[config(default = "ThresholdRule::PaperMean")]
    pub threshold: ThresholdRule,
}

/// How [`FrechetCuration`] sets its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ThresholdRule {
    /// The paper's (§II-C): the mean FRD of the calibration epoch's batches, fixed for the rest
    /// of the run.
    PaperMean,
    /// Not the paper's: each curated batch's threshold is the `q`-quantile (type 7: linear
    /// between the order statistics, numpy's default) of the first-attempt FRDs of the `window`
    /// batches observed before it (fewer at the start of curation if fewer were observed), fixed
    /// over the batch's redraws. `q` in `(0, 1]`, `window` at least 1; about a share `1 − q` of
    /// the batches is redrawn while the distances change slowly over a window.
    RecentQuantile {
        /// The quantile, in `(0, 1]`.
        q: f64,
        /// How many of the latest first attempts the quantile is taken over.
        window: usize,
    },
}

impl ThresholdRule {
    /// The quantile and the window, for [`ThresholdRule::RecentQuantile`].
    fn recent(self) -> Option<(f64, usize)> {
        match self {
            Self::PaperMean => None,
            Self::RecentQuantile { q, window } => Some((q, window)),
        }
    }
}

/// The type-7 `q`-quantile of `values` (linear interpolation between the order statistics at
/// `(n − 1)·q`, numpy's and R's default); `None` for no values.
fn quantile_type7(values: &[f64], q: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let last = sorted.len().checked_sub(1)?;
    let h = last as f64 * q.clamp(0.0, 1.0);
    let below = (h.floor() as usize).min(last);
    let above = (below + 1).min(last);
    Some(sorted[below] + (h - below as f64) * (sorted[above] - sorted[below]))
}

/// The most redraws of one batch [`FrechetCurationConfig::init`] takes: below the trainer's
/// `MAX_ATTEMPTS` attempts of a step, at which it stops the run.
pub const MAX_RETRIES: usize = 999;

impl FrechetCurationConfig {
    /// Validates the settings and builds the policy in its initial state.
    pub fn init(&self) -> Result<FrechetCuration, ConfigError> {
        if self.warmup_epochs == 0 {
            return Err(ConfigError::new(
                "warmup_epochs",
                "must be at least 1 (the threshold is the mean FRD of the last warm-up epoch), \
                 got 0",
            ));
        }
        // Each retry is another forward pass of the step (`--curation-retries 100000` trained
        // at 2 images/s).
        if self.max_retries > MAX_RETRIES {
            return Err(ConfigError::new(
                "max_retries",
                format!(
                    "at most {MAX_RETRIES} redraws of a batch (the paper's 3), got {}",
                    self.max_retries
                ),
            ));
        }
        if let Some((q, window)) = self.threshold.recent() {
            if !(q > 0.0 && q <= 1.0) {
                return Err(ConfigError::new(
                    "threshold",
                    format!("RecentQuantile's q must be in (0, 1], got {q}"),
                ));
            }
            if window == 0 {
                return Err(ConfigError::new(
                    "threshold",
                    "RecentQuantile's window must be at least 1 batch, got 0",
                ));
            }
        }
        Ok(FrechetCuration {
            warmup_epochs: self.warmup_epochs,
            max_retries: self.max_retries,
            rule: self.threshold,
            state: CurationState::default(),
        })
    }
}

/// What the training loop does with a candidate batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Train on it: during warm-up, or its FRD is at most the threshold.
    Apply,
    /// Reject it: draw new augmentations of the same images, compute their FRD and call
    /// [`FrechetCuration::observe`] again, without updating the weights.
    Redraw,
    /// Its FRD is above the threshold but it was already redrawn `max_retries` times: train on it
    /// anyway. A warning: the threshold may be too strict for this stage of training.
    AcceptAfterRetries,
}

impl Decision {
    /// Whether the batch trains ([`Decision::Apply`] or [`Decision::AcceptAfterRetries`]).
    pub fn updates_weights(self) -> bool {
        !matches!(self, Decision::Redraw)
    }
}

/// Counts of decisions, for one epoch or for the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurationCounters {
    /// FRDs observed: every candidate batch, redraws included.
    pub observed: u64,
    /// [`Decision::Apply`] decisions.
    pub applied: u64,
    /// [`Decision::Redraw`] decisions: batches rejected, each followed by one retry.
    pub rejections: u64,
    /// [`Decision::AcceptAfterRetries`] decisions: batches that exhausted their retries.
    pub accepted_after_retries: u64,
}

impl CurationCounters {
    fn count(&mut self, decision: Decision) {
        self.observed += 1;
        match decision {
            Decision::Apply => self.applied += 1,
            Decision::Redraw => self.rejections += 1,
            Decision::AcceptAfterRetries => self.accepted_after_retries += 1,
        }
    }
}

/// The mutable state of a [`FrechetCuration`]: everything a checkpoint must hold to resume it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CurationState {
    /// Epoch of the last observation (`None` before the first).
    pub epoch: Option<usize>,
    /// Sum of the FRDs of the calibration epoch observed so far.
    pub calibration_sum: f64,
    /// Number of FRDs in `calibration_sum`.
    pub calibration_batches: u64,
    /// The threshold, set at the first observation after the calibration epoch (under
    /// [`ThresholdRule::RecentQuantile`], the current batch's, set at its first attempt).
    pub threshold: Option<f64>,
    /// Under [`ThresholdRule::RecentQuantile`], the latest first-attempt FRDs, oldest first, at
    /// most `window` of them; empty under the paper's rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_frds: Vec<f64>,
    /// Under [`ThresholdRule::RecentQuantile`], the current epoch's first attempts and
    /// thresholds, summed (for the epoch's means in `epochs.csv`); `None` under the paper's rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_distances: Option<EpochDistances>,
    /// Redraws of the batch being curated now (reset when a batch trains).
    pub retries: usize,
    /// Counters of the current epoch (reset when the epoch changes).
    pub epoch_counters: CurationCounters,
    /// Counters of the whole run.
    pub total_counters: CurationCounters,
}

/// One epoch's first-attempt distances and thresholds, summed
/// ([`ThresholdRule::RecentQuantile`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochDistances {
    /// Batches observed (their first attempts).
    pub first_attempts: u64,
    /// Sum of their FRDs.
    pub frd_sum: f64,
    /// Batches that had a threshold (after the warm-up).
    pub thresholded: u64,
    /// Sum of those thresholds.
    pub threshold_sum: f64,
}

impl EpochDistances {
    /// The mean first-attempt FRD, if any batch was observed.
    pub fn frd_mean(&self) -> Option<f64> {
        (self.first_attempts > 0).then(|| self.frd_sum / self.first_attempts as f64)
    }

    /// The mean threshold, if any batch had one.
    pub fn threshold_mean(&self) -> Option<f64> {
        (self.thresholded > 0).then(|| self.threshold_sum / self.thresholded as f64)
    }
}

/// Why an observation or a restored state was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CurationError {
    /// The FRD is NaN or infinite.
    #[error("the FRD of a batch in epoch {epoch} is not finite: {frd}")]
    NonFiniteFrd {
        /// Epoch of the observation.
        epoch: usize,
        /// The value given.
        frd: f64,
    },
    /// Epochs must not go back.
    #[error("epoch {epoch} observed after epoch {last}: epochs must not go back")]
    EpochWentBack {
        /// Epoch of the last observation.
        last: usize,
        /// Epoch given now.
        epoch: usize,
    },
    /// Curation would start but the calibration epoch saw no batch, so there is no threshold.
    #[error(
        "epoch {epoch} needs the FRD threshold, but no batch of the calibration epoch \
         {calibration_epoch} was observed"
    )]
    NoCalibration {
        /// Epoch given now.
        epoch: usize,
        /// The last warm-up epoch, whose batches set the threshold.
        calibration_epoch: usize,
    },
    /// A restored state that this policy's settings could not have produced.
    #[error("the saved curation state does not fit these settings: {0}")]
    InvalidState(String),
}

/// Fréchet batch curation: decides, batch by batch, whether to train or to redraw. Build it with
/// [`FrechetCurationConfig::init`].
///
/// Following §II-C of "The Bad Batches: Enhancing Self-Supervised Learning in Image
/// Classification Through Representative Batch Curation" (Göksu and Pugeault, IJCNN 2024,
/// <https://arxiv.org/abs/2403.19579>):
///
/// 1. **Warm-up.** The first `warmup_epochs` epochs (default 5; epochs `0..=4` as this crate
///    counts them, from 0) train on every batch: early in training the features are those of a
///    random network and their distances say little.
/// 2. **Calibration.** The FRD of every batch of the last warm-up epoch — the paper's "epoch 5",
///    counting from one — is averaged; that mean is the threshold.
/// 3. **Curation.** From epoch `warmup_epochs` on, a batch whose FRD is above the threshold is
///    rejected: the training loop draws new augmentations of the same images and asks again,
///    without updating the weights. The paper does not bound the redraws; this policy does
///    (`max_retries`, default 3), so that a batch the threshold can never accept cannot stall the
///    run: after that many rejections the batch trains anyway, and the decision says so.
///
/// The policy is pure bookkeeping, [`FrechetCuration::observe`], with no tensor in it: the
/// training loop computes the FRD ([`frechet_distance_host`](super::frechet_distance_host) or
/// [`NewtonSchulz`](super::NewtonSchulz)) and acts on the [`Decision`]. Its whole mutable state
/// is a [`CurationState`] that serialises exactly (through JSON too: the crate builds
/// `serde_json` with `float_roundtrip`, without which some numbers come back one unit in the last
/// place off), so a resumed run makes the same decisions as an uninterrupted one.
///
/// For example, with the defaults: during epochs 0–3 every batch is applied; during epoch 4 every
/// batch is applied and its FRD recorded, say 2.0, 4.0 and 3.0, so the threshold is 3.0; in epoch
/// 5 a batch with FRD 2.5 is applied, one with FRD 3.5 is redrawn, and if its redraws score 3.2,
/// 3.1 and 3.3 it is redrawn three times and then accepted after retries at 3.3 (a warning).
///
/// **A threshold that can fire (not the paper's).** The paper's threshold is fixed once, from an
/// early epoch; as training pulls the two views' projections together every later batch falls
/// below it, and nothing is ever redrawn (the `bad_batches` study counted 0 rejections in 4,212
/// batches; the distances fall several-fold from one epoch to the next, so even a quantile of the
/// previous epoch's distances lies above the next epoch's). [`ThresholdRule::RecentQuantile`] is
/// a labelled variant whose threshold follows training: for each batch, the `q`-quantile (type 7,
/// numpy's default) of the first-attempt distances of the `window` batches before it (a redraw's
/// distance is not counted), so about a share `1 − q` of the batches is redrawn while the
/// distances change slowly over a window. With first attempts `[1, 1, 1, 1, 6]` in the window,
/// `q = 0.9` gives the next batch the threshold 4.0, `q = 0.5` gives 1.0.
#[derive(Debug, Clone, PartialEq)]
pub struct FrechetCuration {
    warmup_epochs: usize,
    max_retries: usize,
    rule: ThresholdRule,
    state: CurationState,
}

impl FrechetCuration {
    /// The epoch whose mean FRD becomes the threshold (0-based: `warmup_epochs − 1`).
    pub fn calibration_epoch(&self) -> usize {
        self.warmup_epochs - 1
    }

    /// The threshold, once the first observation after the calibration epoch has fixed it (the
    /// current batch's under [`ThresholdRule::RecentQuantile`]).
    pub fn threshold(&self) -> Option<f64> {
        self.state.threshold
    }

    /// How the threshold is set.
    pub fn rule(&self) -> ThresholdRule {
        self.rule
    }

    /// Counters of the current epoch (the epoch of the last observation).
    pub fn epoch_counters(&self) -> CurationCounters {
        self.state.epoch_counters
    }

    /// Counters of the whole run.
    pub fn total_counters(&self) -> CurationCounters {
        self.state.total_counters
    }

    /// The state to save in a checkpoint.
    pub fn state(&self) -> &CurationState {
        &self.state
    }

    /// Replaces the state with one saved by [`FrechetCuration::state`], after checking that
    /// these settings could have produced it.
    pub fn restore(&mut self, state: CurationState) -> Result<(), CurationError> {
        let calibration = self.calibration_epoch();
        let invalid = |reason: String| Err(CurationError::InvalidState(reason));
        if !state.calibration_sum.is_finite() {
            return invalid(format!(
                "calibration sum {} is not finite",
                state.calibration_sum
            ));
        }
        if let Some(t) = state.threshold {
            if !t.is_finite() {
                return invalid(format!("threshold {t} is not finite"));
            }
        }
        if let Some(bad) = state.recent_frds.iter().find(|f| !f.is_finite()) {
            return invalid(format!("a recorded FRD {bad} is not finite"));
        }
        if let Some(d) = state.epoch_distances {
            if !(d.frd_sum.is_finite() && d.threshold_sum.is_finite()) {
                return invalid(format!("the epoch's distance sums are not finite: {d:?}"));
            }
        }
        match self.rule.recent() {
            None if !state.recent_frds.is_empty() || state.epoch_distances.is_some() => {
                return invalid(
                    "distances recorded for a quantile threshold, but the rule is the paper's \
                     mean"
                        .into(),
                )
            }
            Some((_, window)) if state.recent_frds.len() > window => {
                return invalid(format!(
                    "{} recent distances, more than the window of {window}",
                    state.recent_frds.len()
                ))
            }
            _ => {}
        }
        if state.retries > self.max_retries {
            return invalid(format!(
                "{} retries of the current batch, more than max_retries = {}",
                state.retries, self.max_retries
            ));
        }
        match state.epoch {
            Some(e) if e > calibration && state.threshold.is_none() => {
                return invalid(format!(
                    "epoch {e} is past the calibration epoch {calibration} but there is no \
                     threshold"
                ))
            }
            Some(e) if e <= calibration && state.threshold.is_some() => {
                return invalid(format!(
                    "a threshold is set but epoch {e} is not past the calibration epoch \
                     {calibration}"
                ))
            }
            Some(e) if e < calibration && state.calibration_batches > 0 => {
                return invalid(format!(
                    "calibration FRDs recorded before the calibration epoch {calibration} \
                     (epoch {e})"
                ))
            }
            None if state != CurationState::default() => {
                return invalid("no epoch observed, yet the state is not the initial one".into())
            }
            _ => {}
        }
        self.state = state;
        Ok(())
    }

    /// Records the FRD of a candidate batch of `epoch` (0-based) and says what to do with it.
    ///
    /// A batch above the threshold is redrawn at most `max_retries` times; each redraw's FRD is
    /// observed again with the same epoch. Errors: a non-finite FRD, an epoch before the last one
    /// observed, or curation starting without any FRD from the calibration epoch.
    pub fn observe(&mut self, epoch: usize, frd: f64) -> Result<Decision, CurationError> {
        if !frd.is_finite() {
            return Err(CurationError::NonFiniteFrd { epoch, frd });
        }
        let calibration = self.calibration_epoch();
        if let Some(last) = self.state.epoch {
            if epoch < last {
                return Err(CurationError::EpochWentBack { last, epoch });
            }
        }
        let new_epoch = self.state.epoch != Some(epoch);
        // A batch's first attempt (a new epoch starts a new batch).
        let first_attempt = new_epoch || self.state.retries == 0;
        let threshold = if epoch <= calibration {
            None
        } else if let Some((q, _)) = self.rule.recent() {
            if first_attempt {
                // The recent batches must reach back to the calibration epoch at least.
                let calibrated = self.state.epoch.is_some_and(|e| e >= calibration);
                match quantile_type7(&self.state.recent_frds, q).filter(|_| calibrated) {
                    Some(t) => Some(t),
                    None => {
                        return Err(CurationError::NoCalibration {
                            epoch,
                            calibration_epoch: calibration,
                        })
                    }
                }
            } else {
                self.state.threshold
            }
        } else {
            match self.state.threshold {
                Some(t) => Some(t),
                None if self.state.calibration_batches == 0 => {
                    return Err(CurationError::NoCalibration {
                        epoch,
                        calibration_epoch: calibration,
                    })
                }
                None => Some(self.state.calibration_sum / self.state.calibration_batches as f64),
            }
        };
        // Nothing below fails: the state changes only for an observation that is taken.
        if new_epoch {
            self.state.epoch = Some(epoch);
            self.state.epoch_counters = CurationCounters::default();
            self.state.retries = 0;
            if self.rule.recent().is_some() {
                self.state.epoch_distances = Some(EpochDistances::default());
            }
        }
        self.state.threshold = threshold;
        if let Some((_, window)) = self.rule.recent().filter(|_| first_attempt) {
            let recent = &mut self.state.recent_frds;
            recent.push(frd);
            if recent.len() > window {
                recent.remove(0);
            }
            let d = self
                .state
                .epoch_distances
                .get_or_insert_with(Default::default);
            d.first_attempts += 1;
            d.frd_sum += frd;
            if let Some(t) = threshold {
                d.thresholded += 1;
                d.threshold_sum += t;
            }
        }
        if epoch == calibration {
            self.state.calibration_sum += frd;
            self.state.calibration_batches += 1;
        }
        let decision = match threshold {
            None => Decision::Apply,
            Some(t) if frd <= t => Decision::Apply,
            Some(_) if self.state.retries < self.max_retries => Decision::Redraw,
            Some(t) => {
                log::warn!(
                    "epoch {epoch}: batch accepted after {} redraws although its FRD {frd} is \
                     above the threshold {t}",
                    self.state.retries
                );
                Decision::AcceptAfterRetries
            }
        };
        if decision == Decision::Redraw {
            self.state.retries += 1;
        } else {
            self.state.retries = 0;
        }
        self.state.epoch_counters.count(decision);
        self.state.total_counters.count(decision);
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(warmup_epochs: usize, max_retries: usize) -> FrechetCuration {
        FrechetCurationConfig::new()
            .with_warmup_epochs(warmup_epochs)
            .with_max_retries(max_retries)
            .init()
            .unwrap()
    }

    #[test]
    fn defaults_are_the_papers() {
        let config = FrechetCurationConfig::new();
        assert_eq!(config.warmup_epochs, 5);
        assert_eq!(config.max_retries, 3);
        assert_eq!(config.threshold, ThresholdRule::PaperMean);
        assert_eq!(config.init().unwrap().calibration_epoch(), 4);
    }

    /// More retries than [`MAX_RETRIES`] are refused when the policy is made
    /// (`--curation-retries 100000` trained at 2 images/s with its memory growing).
    #[test]
    fn retries_past_the_trainers_attempts_are_refused() {
        let most = MAX_RETRIES;
        let config = FrechetCurationConfig::new().with_max_retries(most + 1);
        assert_eq!(config.init().err().unwrap().field, "max_retries");
        assert!(FrechetCurationConfig::new()
            .with_max_retries(most)
            .init()
            .is_ok());
    }

    #[test]
    fn no_rejection_during_warm_up() {
        let mut p = policy(5, 3);
        // Huge and tiny FRDs alike train during epochs 0–4.
        for epoch in 0..5 {
            for frd in [1e6, 0.0, 123.0, 1e-9] {
                assert_eq!(p.observe(epoch, frd), Ok(Decision::Apply));
            }
            assert_eq!(p.epoch_counters().rejections, 0);
            assert_eq!(p.epoch_counters().applied, 4);
        }
        assert_eq!(p.threshold(), None);
        assert_eq!(
            p.total_counters(),
            CurationCounters {
                observed: 20,
                applied: 20,
                rejections: 0,
                accepted_after_retries: 0
            }
        );
    }

    #[test]
    fn threshold_is_the_mean_of_the_calibration_epoch() {
        let mut p = policy(5, 3);
        // Epochs before the calibration epoch do not count.
        p.observe(3, 100.0).unwrap();
        for frd in [2.0, 4.0, 3.5, 2.5] {
            p.observe(4, frd).unwrap();
        }
        assert_eq!(p.threshold(), None);
        // (2 + 4 + 3.5 + 2.5) / 4 = 3.
        p.observe(5, 1.0).unwrap();
        assert_eq!(p.threshold(), Some(3.0));
        // Later epochs do not move it.
        p.observe(6, 50.0).unwrap();
        assert_eq!(p.threshold(), Some(3.0));
    }

    #[test]
    fn a_batch_above_the_threshold_is_redrawn() {
        let mut p = policy(1, 3);
        for frd in [1.0, 3.0] {
            p.observe(0, frd).unwrap();
        }
        // Threshold 2: at or below applies, above redraws.
        assert_eq!(p.observe(1, 2.0), Ok(Decision::Apply));
        assert_eq!(p.observe(1, 1.5), Ok(Decision::Apply));
        assert_eq!(p.observe(1, 2.0000001), Ok(Decision::Redraw));
        assert!(!Decision::Redraw.updates_weights());
        // The redraw is good: it trains, and the next batch starts with a fresh retry budget.
        assert_eq!(p.observe(1, 1.9), Ok(Decision::Apply));
        assert_eq!(p.state().retries, 0);
        assert_eq!(
            p.epoch_counters(),
            CurationCounters {
                observed: 4,
                applied: 3,
                rejections: 1,
                accepted_after_retries: 0
            }
        );
    }

    #[test]
    fn retry_bound_holds_then_the_batch_is_accepted_with_a_warning() {
        let mut p = policy(5, 3);
        for frd in [2.0, 4.0, 3.0] {
            p.observe(4, frd).unwrap();
        }
        // Threshold 3: the batch and its first three redraws are rejected (3 retries) ...
        for frd in [3.5, 3.2, 3.1] {
            assert_eq!(p.observe(5, frd), Ok(Decision::Redraw));
        }
        assert_eq!(p.state().retries, 3);
        // ... and the fourth candidate trains although it is above the threshold.
        let last = p.observe(5, 3.3).unwrap();
        assert_eq!(last, Decision::AcceptAfterRetries);
        assert!(last.updates_weights());
        assert_eq!(p.state().retries, 0);
        // The next batch has the full budget again.
        assert_eq!(p.observe(5, 9.0), Ok(Decision::Redraw));
        assert_eq!(
            p.epoch_counters(),
            CurationCounters {
                observed: 5,
                applied: 0,
                rejections: 4,
                accepted_after_retries: 1
            }
        );
        // A new epoch starts its counters from zero and resets the retries; the run's add up.
        assert_eq!(p.observe(6, 1.0), Ok(Decision::Apply));
        assert_eq!(
            p.epoch_counters(),
            CurationCounters {
                observed: 1,
                applied: 1,
                rejections: 0,
                accepted_after_retries: 0
            }
        );
        assert_eq!(
            p.total_counters(),
            CurationCounters {
                observed: 9,
                applied: 4,
                rejections: 4,
                accepted_after_retries: 1
            }
        );
    }

    #[test]
    fn zero_retries_accepts_every_batch_with_a_warning() {
        let mut p = policy(1, 0);
        p.observe(0, 1.0).unwrap();
        assert_eq!(p.observe(1, 5.0), Ok(Decision::AcceptAfterRetries));
        assert_eq!(p.observe(1, 0.5), Ok(Decision::Apply));
    }

    #[test]
    fn bad_observations_are_errors_that_change_nothing() {
        let mut p = policy(2, 3);
        assert_eq!(
            p.observe(0, f64::NAN).unwrap_err().to_string(),
            "the FRD of a batch in epoch 0 is not finite: NaN"
        );
        // Curation cannot start without a calibration epoch.
        p.observe(0, 1.0).unwrap();
        assert_eq!(
            p.observe(2, 1.0),
            Err(CurationError::NoCalibration {
                epoch: 2,
                calibration_epoch: 1
            })
        );
        p.observe(1, 1.0).unwrap();
        p.observe(2, 1.0).unwrap();
        let before = p.clone();
        assert_eq!(
            p.observe(1, 1.0),
            Err(CurationError::EpochWentBack { last: 2, epoch: 1 })
        );
        assert!(p.observe(2, f64::INFINITY).is_err());
        assert_eq!(p, before);
        assert_eq!(
            FrechetCurationConfig::new()
                .with_warmup_epochs(0)
                .init()
                .unwrap_err()
                .field,
            "warmup_epochs"
        );
    }

    #[test]
    fn state_round_trips_through_json_exactly() {
        let mut p = policy(2, 3);
        // 18.749977344394786 is one of the values that serde_json reads back one unit in the
        // last place off without its `float_roundtrip` feature.
        let frds = [18.749977344394786, 0.1, 0.2, 1.0 / 3.0];
        for &frd in &frds[..3] {
            p.observe(1, frd).unwrap();
        }
        p.observe(2, frds[3]).unwrap();
        assert_eq!(p.observe(2, 40.0), Ok(Decision::Redraw));
        let state = p.state().clone();
        assert_eq!(state.calibration_sum, 18.749977344394786 + 0.1 + 0.2);
        assert_eq!(
            state.threshold,
            Some((18.749977344394786 + 0.1 + 0.2) / 3.0)
        );
        let json = serde_json::to_string(&state).unwrap();
        let back: CurationState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, state);
        assert_eq!(
            back.threshold.unwrap().to_bits(),
            state.threshold.unwrap().to_bits()
        );
        assert_eq!(
            back.calibration_sum.to_bits(),
            state.calibration_sum.to_bits()
        );
        let lone: CurationState = serde_json::from_str(
            &serde_json::to_string(&CurationState {
                calibration_sum: 18.749977344394786,
                ..CurationState::default()
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            lone.calibration_sum.to_bits(),
            18.749977344394786f64.to_bits()
        );

        // A restored policy makes the same decisions as the original from here on.
        let mut restored = policy(2, 3);
        restored.restore(back).unwrap();
        for frd in [40.0, 40.0, 40.0, 1.0, 7.0] {
            assert_eq!(restored.observe(2, frd), p.observe(2, frd));
        }
        assert_eq!(restored, p);
    }

    #[test]
    fn restore_refuses_states_these_settings_cannot_produce() {
        let mut p = policy(2, 3);
        for frd in [1.0, 2.0] {
            p.observe(1, frd).unwrap();
        }
        p.observe(2, 5.0).unwrap();
        let saved = p.state().clone();
        // Saved with warm-up 2 (threshold set at epoch 2); a warm-up of 5 would not have one.
        assert!(matches!(
            policy(5, 3).restore(saved.clone()),
            Err(CurationError::InvalidState(_))
        ));
        // One retry is pending: a bound of 0 could not have produced it.
        assert!(matches!(
            policy(2, 0).restore(saved.clone()),
            Err(CurationError::InvalidState(_))
        ));
        // Past calibration without a threshold.
        let mut restored = policy(2, 3);
        let broken = CurationState {
            threshold: None,
            ..saved.clone()
        };
        assert!(restored.restore(broken).is_err());
        assert!(restored.restore(saved).is_ok());
    }

    fn quantile_policy(warmup_epochs: usize, q: f64, window: usize) -> FrechetCuration {
        FrechetCurationConfig::new()
            .with_warmup_epochs(warmup_epochs)
            .with_max_retries(3)
            .with_threshold(ThresholdRule::RecentQuantile { q, window })
            .init()
            .unwrap()
    }

    /// numpy's `np.quantile(x, q)` (its default, type 7) on the values below, computed by hand
    /// from the order statistics, `(n − 1)·q` between them.
    #[test]
    fn quantile_is_numpys_default() {
        let x = [6.0, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(quantile_type7(&x, 0.9), Some(4.0)); // h = 3.6: 1 + 0.6 · 5
        assert_eq!(quantile_type7(&x, 0.5), Some(1.0)); // h = 2
        assert_eq!(quantile_type7(&x, 1.0), Some(6.0));
        assert_eq!(quantile_type7(&[2.0, 4.0], 0.25), Some(2.5)); // h = 0.25
        assert_eq!(quantile_type7(&[3.0], 0.7), Some(3.0));
        assert_eq!(quantile_type7(&[], 0.5), None);
    }

    /// The worked value of the module's documentation — first attempts [1, 1, 1, 1, 6] in the
    /// window give the next batch 4.0 at q = 0.9 and 1.0 at q = 0.5 — and the window sliding
    /// over first attempts only, a batch's threshold fixed over its redraws.
    #[test]
    fn the_quantile_threshold_follows_the_recent_batches() {
        for (q, expected) in [(0.9, 4.0), (0.5, 1.0)] {
            let mut p = quantile_policy(1, q, 5);
            for frd in [1.0, 1.0, 6.0, 1.0, 1.0] {
                assert_eq!(p.observe(0, frd), Ok(Decision::Apply));
            }
            assert_eq!(p.threshold(), None);
            assert_eq!(p.observe(1, 0.5), Ok(Decision::Apply));
            assert_eq!(p.threshold(), Some(expected));
        }
        let mut p = quantile_policy(1, 0.5, 4);
        for frd in [1.0, 1.0, 6.0, 1.0, 1.0] {
            p.observe(0, frd).unwrap();
        }
        // The window keeps the last four: [1, 6, 1, 1], median 1.
        assert_eq!(p.state().recent_frds, vec![1.0, 6.0, 1.0, 1.0]);
        // A batch at 3 is redrawn against 1; its redraw at 0.9 trains and is not recorded.
        assert_eq!(p.observe(1, 3.0), Ok(Decision::Redraw));
        assert_eq!(p.threshold(), Some(1.0));
        assert_eq!(p.observe(1, 0.9), Ok(Decision::Apply));
        assert_eq!(p.state().recent_frds, vec![6.0, 1.0, 1.0, 3.0]);
        // The next batch's threshold: the median of [6, 1, 1, 3] = (1 + 3) / 2.
        assert_eq!(p.observe(1, 1.5), Ok(Decision::Apply));
        assert_eq!(p.threshold(), Some(2.0));
        assert_eq!(p.state().recent_frds, vec![1.0, 1.0, 3.0, 1.5]);
        // Then the median of [1, 1, 3, 1.5] = (1 + 1.5) / 2; the batch's redraws keep it
        // although the window moved on.
        assert_eq!(p.observe(1, 2.5), Ok(Decision::Redraw));
        assert_eq!(p.threshold(), Some(1.25));
        assert_eq!(p.observe(1, 1.8), Ok(Decision::Redraw));
        assert_eq!(p.threshold(), Some(1.25));
        assert_eq!(p.observe(1, 1.0), Ok(Decision::Apply));
        assert_eq!(p.state().recent_frds, vec![1.0, 3.0, 1.5, 2.5]);
        // The epoch's means: first attempts 3, 1.5, 2.5; thresholds 1, 2, 1.25.
        let d = p.state().epoch_distances.unwrap();
        assert_eq!(d.frd_mean(), Some(7.0 / 3.0));
        assert_eq!(d.threshold_mean(), Some(4.25 / 3.0));
        assert_eq!(p.epoch_counters().rejections, 3);
        // A new epoch starts its sums again; the window carries over.
        assert_eq!(p.observe(2, 1.0), Ok(Decision::Apply));
        let d = p.state().epoch_distances.unwrap();
        assert_eq!((d.first_attempts, d.frd_sum), (1, 1.0));
        // The state round-trips through JSON and resumes to the same decisions.
        let json = serde_json::to_string(p.state()).unwrap();
        let mut restored = quantile_policy(1, 0.5, 4);
        restored
            .restore(serde_json::from_str(&json).unwrap())
            .unwrap();
        for frd in [2.0, 1.0, 0.2, 9.0, 9.0] {
            assert_eq!(restored.observe(2, frd), p.observe(2, frd));
        }
        assert_eq!(restored.observe(3, 1.0), p.observe(3, 1.0));
        assert_eq!(restored, p);
    }

    #[test]
    fn the_quantile_rule_is_checked() {
        for (q, window) in [(0.0, 5), (-0.5, 5), (1.5, 5), (f64::NAN, 5), (0.9, 0)] {
            let err = FrechetCurationConfig::new()
                .with_threshold(ThresholdRule::RecentQuantile { q, window })
                .init()
                .unwrap_err();
            assert_eq!(err.field, "threshold");
        }
        // Curation needs the calibration epoch's first attempts in the window.
        let mut p = quantile_policy(2, 0.9, 10);
        p.observe(0, 1.0).unwrap();
        assert!(matches!(
            p.observe(2, 1.0),
            Err(CurationError::NoCalibration { .. })
        ));
        // The paper's rule records no distances, and refuses a state that holds some.
        let mut paper = policy(1, 3);
        paper.observe(0, 1.0).unwrap();
        assert!(paper.state().recent_frds.is_empty());
        let json = serde_json::to_string(paper.state()).unwrap();
        assert!(
            !json.contains("recent_frds") && !json.contains("epoch_distances"),
            "{json}"
        );
        let with_frds = CurationState {
            recent_frds: vec![1.0, 2.0],
            ..paper.state().clone()
        };
        assert!(policy(1, 3).restore(with_frds.clone()).is_err());
        assert!(quantile_policy(1, 0.9, 2)
            .restore(with_frds.clone())
            .is_ok());
        // More distances than the window, or one that is not finite.
        assert!(quantile_policy(1, 0.9, 1).restore(with_frds).is_err());
        let non_finite = CurationState {
            recent_frds: vec![f64::NAN],
            ..paper.state().clone()
        };
        assert!(quantile_policy(1, 0.9, 5).restore(non_finite).is_err());
    }
}
