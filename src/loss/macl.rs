//! The model-aware contrastive loss, MACL (documented on `MaclLoss`).

use burn::prelude::*;

use super::similarity::{stop_gradient, TwoViewSimilarities, MASKED_LOGIT};
use crate::base::error::{in_range, positive, ConfigError};

/// `ε` of the weights `1 / (1 − P + ε)` (lightly's).
const EPS: f64 = 1e-8;

/// Configuration of [`MaclLoss`].
#[derive(Config, Debug)]
pub struct MaclLossConfig {
    /// Base temperature `τ`, at least 1e-8 (lightly's default, 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// How far the temperature follows the alignment, `α` in `[0, 1]` (0.5).
    #[config(default = 0.5)]
    pub alpha: f64,
    /// The alignment at which the temperature is `τ`, `A₀` in `[0, 1]` (0).
    #[config(default = 0.0)]
    pub a0: f64,
}

impl MaclLossConfig {
    /// Validates the hyperparameters (lightly's ranges) and builds the loss.
    pub fn init(&self) -> Result<MaclLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        if self.temperature < EPS {
            return Err(ConfigError::new(
                "temperature",
                format!("must be at least 1e-8, got {}", self.temperature),
            ));
        }
        in_range("alpha", self.alpha, 0.0, 1.0, false)?;
        in_range("a0", self.a0, 0.0, 1.0, false)?;
        Ok(MaclLoss {
            temperature: self.temperature,
            alpha: self.alpha,
            a0: self.a0,
        })
    }
}

/// MACL. Build it with [`MaclLossConfig::init`].
///
/// The model-aware contrastive loss, MACL (Huang, Chen, Wen, Zhang, Li, Wang & Chen, "Model-Aware
/// Contrastive Learning: Towards Escaping the Dilemmas", ICML 2023,
/// <https://arxiv.org/abs/2207.07874>; see `docs/methods.md#macl`).
///
/// NT-Xent whose temperature follows how well the model already aligns the views, and whose
/// anchors are re-weighted by how hard they still are. Over the `2N` projections (L2-normalised)
/// with cosine similarities `s`, each anchor `i` with positive `p(i)`:
///
/// - the batch's alignment `A = mean_i s_{i,p(i)}` (without gradient);
/// - the temperature `t = τ·(1 + α·(A − A₀))`: low while the views are far apart (uniformity
///   first), higher once they align (tolerance of semantically close negatives);
/// - `log P_i = log softmax_k(s_ik / t)` at `k = p(i)`, over every `k ≠ i`;
/// - `loss = mean_i −V_i·log P_i` with `V_i = 1 / (1 − P_i + ε)` (without gradient, ε = 1e-8):
///   the gradient of `−log P_i` scaled up where the positive is already likely, which undoes
///   the shrinking of easy anchors' gradients.
///
/// `A` and `V` are constants of the backward pass, as in the authors' code and lightly's
/// `MACLLoss`, so the gradient is not the derivative of the value. Defaults are lightly's
/// (τ = 0.1, α = 0.5, A₀ = 0).
#[derive(Debug, Clone)]
pub struct MaclLoss {
    temperature: f64,
    alpha: f64,
    a0: f64,
}

/// A step of [`MaclLoss`]: the loss and the temperature it used.
#[derive(Debug, Clone)]
pub struct MaclOutput<B: Backend> {
    /// Mean loss over the `2N` anchors, `[1]`.
    pub loss: Tensor<B, 1>,
    /// The model-aware temperature `t = τ·(1 + α·(A − A₀))` of the batch, `[1]`, detached.
    pub temperature: Tensor<B, 1>,
}

impl MaclLoss {
    /// Base temperature `τ`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// `α`.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// `A₀`.
    pub fn a0(&self) -> f64 {
        self.a0
    }

    /// Mean loss over the `2N` anchors. The projections are L2-normalised here.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` with `N ≥ 2`, row `i` of each being the two views of image `i`
    /// - output: `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        self.forward_with_temperature(z1, z2).loss
    }

    /// The loss and the batch's model-aware temperature (what the training logs record).
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` with `N ≥ 2`
    pub fn forward_with_temperature<B: Backend>(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
    ) -> MaclOutput<B> {
        let [n, _] = z1.dims();
        assert!(n >= 2, "MACL: a batch of {n} has no negatives");
        let views = TwoViewSimilarities::new("MACL", z1, z2);
        let positive = views.sim.clone().gather(1, views.positive_index.clone());
        let alignment = stop_gradient(positive).mean();
        // A temperature of zero or below is reached only when α·(A₀ − A) ≥ 1 (views pointing
        // away from each other under α near 1): held at 1e-8 there.
        let t = (alignment - self.a0)
            .mul_scalar(self.alpha)
            .add_scalar(1.0)
            .mul_scalar(self.temperature)
            .clamp_min(EPS);
        let logits = views
            .sim
            .mul(t.clone().recip().reshape([1, 1]))
            .mask_fill(views.diagonal, MASKED_LOGIT);
        let log_p =
            curriculum_ssl_models::kernels::log_softmax(logits, 1).gather(1, views.positive_index);
        let weights = stop_gradient(log_p.clone().exp().neg().add_scalar(1.0 + EPS).recip());
        MaclOutput {
            loss: (weights * log_p).neg().mean(),
            temperature: t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{curricular_views, B};

    /// z1 = [u0°, u90°], z2 = [u50°, u125°]: the positive pairs are 50° and 35° apart, so
    /// `A = (cos 50° + cos 35°)/2` and `t = τ(1 + α(A − A₀))`; each anchor's softmax runs over
    /// its positive and the other image's two views.
    #[test]
    fn two_pairs_by_hand() {
        let [z1, z2] = curricular_views::<B>(&Default::default());
        let (tau, alpha, a0) = (0.2, 0.7, 0.1);
        let cos = |deg: f64| deg.to_radians().cos();
        let a = (cos(50.0) + cos(35.0)) / 2.0;
        let t = tau * (1.0 + alpha * (a - a0));
        let anchor = |pos: f64, n1: f64, n2: f64| {
            let e = |deg: f64| (cos(deg) / t).exp();
            let p = e(pos) / (e(pos) + e(n1) + e(n2));
            -p.ln() / (1.0 - p + 1e-8)
        };
        let expected = (anchor(50.0, 90.0, 125.0)
            + anchor(35.0, 90.0, 40.0)
            + anchor(50.0, 40.0, 75.0)
            + anchor(35.0, 125.0, 75.0))
            / 4.0;
        let out = MaclLossConfig::new()
            .with_temperature(tau)
            .with_alpha(alpha)
            .with_a0(a0)
            .init()
            .unwrap()
            .forward_with_temperature(z1, z2);
        let value: f64 = out.loss.into_scalar();
        assert!((value - expected).abs() < 1e-12, "{value} {expected}");
        let temperature: f64 = out.temperature.into_scalar();
        assert!((temperature - t).abs() < 1e-15, "{temperature} {t}");
    }

    #[test]
    fn rejects_bad_settings_by_name() {
        for (config, field) in [
            (MaclLossConfig::new().with_temperature(1e-9), "temperature"),
            (MaclLossConfig::new().with_alpha(1.5), "alpha"),
            (MaclLossConfig::new().with_a0(-0.1), "a0"),
        ] {
            assert_eq!(config.init().unwrap_err().field, field);
        }
    }
}
