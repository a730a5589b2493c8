//! Curricular weighting of hard negatives (documented on `CurricularLoss`).

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::similarity::{cross_entropy_at, stop_gradient, TwoViewSimilarities, MASKED_LOGIT};
use crate::base::error::{in_range, non_negative, positive, ConfigError};

/// Configuration of [`CurricularLoss`].
#[derive(Config, Debug)]
pub struct CurricularLossConfig {
    /// Temperature `τ`.
    #[config(default = 0.5)]
    pub temperature: f64,
    /// Momentum `m` of the running mean `t` of positive similarities, in `[0, 1]`.
    #[config(default = 0.999)]
    pub momentum: f64,
    /// Weight `λ >= 0` of the regulariser on hard-negative weights above 1.
    #[config(default = 1e-3)]
    pub lambda: f64,
    /// Initial value `t₀` of the adaptive parameter.
    #[config(default = 0.0)]
    pub initial_t: f64,
}

impl CurricularLossConfig {
    /// Validates the hyperparameters and builds the loss with `t = t₀` on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<CurricularLoss<B>, ConfigError> {
        positive("temperature", self.temperature)?;
        in_range("momentum", self.momentum, 0.0, 1.0, false)?;
        non_negative("lambda", self.lambda)?;
        in_range("initial_t", self.initial_t, -1.0, 1.0, false)?;
        Ok(CurricularLoss {
            temperature: self.temperature,
            momentum: self.momentum,
            lambda: self.lambda,
            t: Tensor::from_data(TensorData::new(vec![self.initial_t], [1]), device),
        })
    }
}

/// The saved state of a [`CurricularLoss`]: the adaptive parameter `t`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurricularState {
    /// Running mean of positive similarities.
    pub t: f64,
}

/// The parts of one evaluation of the curricular loss.
#[derive(Debug, Clone)]
pub struct CurricularOutput<B: Backend> {
    /// `cross_entropy + regulariser`, `[1]`.
    pub loss: Tensor<B, 1>,
    /// Cross-entropy over the modified logits, mean over anchors, `[1]`.
    pub cross_entropy: Tensor<B, 1>,
    /// `R`, summed over anchors, `[1]`.
    pub regulariser: Tensor<B, 1>,
    /// The `t` used, `[1]` (no gradient).
    pub t: Tensor<B, 1>,
}

/// Curricular contrastive loss with its adaptive state. Build it with
/// [`CurricularLossConfig::init`].
///
/// Curricular weighting of hard negatives (Zhuang, Jing & Jia, Information Sciences 668, 2024,
/// <https://doi.org/10.1016/j.ins.2024.120534>; code HElenZWHU/CurricularContrastive); see
/// `docs/methods.md#curricular-weighting`.
///
/// `2B` unit projections, `s = clamp(z zᵀ, −1, 1)` without the self column, `p_i` the positive
/// similarity of anchor `i`. An adaptive parameter `t` follows the mean positive similarity,
/// `t ← m·t + (1 − m)·mean(p)` (no gradient), updated BEFORE it is used. A negative is hard when
/// `s_ij > p_i` (strict); its logit becomes `s_ij·(t + s_ij)`, so early in training (`t ≈ 0`)
/// hard negatives are damped and later (`t → 1`) emphasised. The loss is the cross-entropy over
/// the modified logits `/ τ` (mean over anchors) plus `R = (λ/2)·Σ_i Σ_j w_ij²·[w_ij > 1]` with
/// `w_ij = t + s_ij` for hard `j` — `R` is summed over anchors, as the code does.
///
/// `t` is training state: [`CurricularLoss::state`] and [`CurricularLoss::load_state`] let a
/// checkpoint save and restore it. It lives on the device, so the update costs no host sync.
#[derive(Debug, Clone)]
pub struct CurricularLoss<B: Backend> {
    temperature: f64,
    momentum: f64,
    lambda: f64,
    t: Tensor<B, 1>,
}

impl<B: Backend> CurricularLoss<B> {
    /// Updates `t` from this batch's positive similarities, then evaluates the loss with it.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[B, D]` (normalised here); every output tensor: `[1]`
    pub fn forward(&mut self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> CurricularOutput<B> {
        let views = TwoViewSimilarities::new("curricular loss", z1, z2);
        let positive = views
            .sim
            .clone()
            .clamp(-1.0, 1.0)
            .gather(1, views.positive_index.clone())
            .detach();
        self.t =
            (self.t.clone() * self.momentum + positive.mean() * (1.0 - self.momentum)).detach();
        self.evaluate(views, self.t.clone())
    }

    /// Evaluates the loss with a given `t`, leaving the state alone (a pure function of the
    /// inputs, e.g. for gradient checks or evaluation).
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[B, D]`; `t`: `[1]`; every output tensor: `[1]`
    pub fn forward_with_t(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
        t: Tensor<B, 1>,
    ) -> CurricularOutput<B> {
        self.evaluate(TwoViewSimilarities::new("curricular loss", z1, z2), t)
    }

    fn evaluate(&self, views: TwoViewSimilarities<B>, t: Tensor<B, 1>) -> CurricularOutput<B> {
        let t = stop_gradient(t);
        let n = views.sim.dims()[0];
        let sim = views.sim.clamp(-1.0, 1.0);
        let positive = sim
            .clone()
            .gather(1, views.positive_index.clone())
            .expand([n, n]);
        let hard = sim
            .clone()
            .greater(positive)
            .bool_and(views.diagonal.clone().bool_not());
        let weight = t.clone().reshape([1, 1]).expand([n, n]) + sim.clone();
        let modified = sim.clone().mask_where(hard.clone(), sim * weight.clone());
        let logits = (modified / self.temperature).mask_fill(views.diagonal, MASKED_LOGIT);
        let cross_entropy = cross_entropy_at(logits, views.positive_index);
        let penalised = hard.bool_and(weight.clone().greater_elem(1.0)).float();
        let regulariser = (weight.powi_scalar(2) * penalised).sum() * (self.lambda / 2.0);
        CurricularOutput {
            loss: cross_entropy.clone() + regulariser.clone(),
            cross_entropy,
            regulariser,
            t,
        }
    }

    /// The current `t` (reads one value back from the device).
    pub fn t(&self) -> f64 {
        self.t.clone().into_scalar().elem::<f64>()
    }

    /// The state to checkpoint.
    pub fn state(&self) -> CurricularState {
        CurricularState { t: self.t() }
    }

    /// Restores a checkpointed state.
    pub fn load_state(&mut self, state: CurricularState) {
        let device = self.t.device();
        self.t = Tensor::from_data(TensorData::new(vec![state.t], [1]), &device);
    }
}
