//! The decoupled contrastive loss, DCL and DCLW (documented on `DclLoss`).

use burn::prelude::*;

use super::similarity::{positive_mask, stop_gradient, TwoViewSimilarities, MASKED_LOGIT};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`DclLoss`].
#[derive(Config, Debug)]
pub struct DclLossConfig {
    /// Temperature `τ` (lightly's and the paper's ImageNet default, 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// `σ` of DCLW's weights (the paper's 0.5); `None`: DCL, unweighted.
    #[config(default = "None")]
    pub sigma: Option<f64>,
}

impl DclLossConfig {
    /// DCLW: the weighted form with `σ` (the paper's 0.5).
    pub fn weighted(sigma: f64) -> Self {
        Self::new().with_sigma(Some(sigma))
    }

    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<DclLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        if let Some(sigma) = self.sigma {
            positive("sigma", sigma)?;
        }
        Ok(DclLoss {
            temperature: self.temperature,
            sigma: self.sigma,
        })
    }
}

/// DCL / DCLW. Build it with [`DclLossConfig::init`].
///
/// The decoupled contrastive loss, DCL and its weighted form DCLW (Yeh, Hong, Hsu, Liu, Chen &
/// LeCun, "Decoupled Contrastive Learning", ECCV 2022, <https://arxiv.org/abs/2110.06848>; see
/// `docs/methods.md#dcl-and-dclw`).
///
/// NT-Xent with the positive taken out of the denominator (eq. 6): for anchor `i` of the `2N`
/// projections with positive `p(i)`,
/// `loss_i = −w_i·s_{i,p(i)}/τ + log Σ_{k ∉ {i, p(i)}} exp(s_ik/τ)`, averaged over the `2N`
/// anchors. DCL has `w = 1`; DCLW weighs each positive pair by the negative von Mises–Fisher
/// weight `w_i = 2 − N·softmax_i(s_{i,p(i)}/σ)` over the batch, computed without gradient (as
/// the authors' code and lightly). As `σ → ∞` every weight tends to 1 and DCLW to DCL.
#[derive(Debug, Clone)]
pub struct DclLoss {
    temperature: f64,
    sigma: Option<f64>,
}

impl DclLoss {
    /// Temperature `τ`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// DCLW's `σ` (`None` for DCL).
    pub fn sigma(&self) -> Option<f64> {
        self.sigma
    }

    /// Mean loss over the `2N` anchors. The projections are L2-normalised here.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` with `N ≥ 2`, row `i` of each being the two views of image `i`
    /// - output: `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        let [n, _] = z1.dims();
        assert!(n >= 2, "DCL: a batch of {n} has no negatives");
        let views = TwoViewSimilarities::new("DCL", z1, z2);
        let positive = views.sim.clone().gather(1, views.positive_index.clone());
        let weighted = match self.sigma {
            None => positive.clone(),
            Some(sigma) => {
                // The weights of the N pairs (anchors i and i + N share theirs).
                let pairs = stop_gradient(positive.clone().narrow(0, 0, n));
                let softmax = burn::tensor::activation::softmax(pairs.mul_scalar(1.0 / sigma), 0);
                let w = (softmax.mul_scalar(n as f64).neg() + 2.0).repeat_dim(0, 2);
                positive.clone() * w
            }
        };
        let at_positive = positive_mask(n, &views.sim.device());
        let logits = views
            .sim
            .mul_scalar(1.0 / self.temperature)
            .mask_fill(views.diagonal.bool_or(at_positive), MASKED_LOGIT);
        let max = stop_gradient(logits.clone().max_dim(1));
        let log_sum_exp = (logits - max.clone()).exp().sum_dim(1).log() + max;
        (log_sum_exp - weighted.mul_scalar(1.0 / self.temperature)).mean()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{curricular_views, B};

    #[test]
    fn two_pairs_by_hand() {
        // z1 = [u0°, u90°], z2 = [u50°, u125°]: each anchor's negatives are the other image's
        // two views. Anchor u0°: positive cos 50°, negatives cos 90°, cos 125°; and so on.
        let [z1, z2] = curricular_views::<B>(&Default::default());
        let tau = 0.5;
        let c = |deg: f64| deg.to_radians().cos() / tau;
        let anchor = |pos: f64, n1: f64, n2: f64| -c(pos) + (c(n1).exp() + c(n2).exp()).ln();
        let expected = (anchor(50.0, 90.0, 125.0)
            + anchor(35.0, 90.0, 40.0)
            + anchor(50.0, 40.0, 75.0)
            + anchor(35.0, 125.0, 75.0))
            / 4.0;
        let loss = DclLossConfig::new()
            .with_temperature(tau)
            .init()
            .unwrap()
            .forward(z1, z2);
        let value: f64 = loss.into_scalar();
        assert!((value - expected).abs() < 1e-12, "{value} {expected}");
    }

    #[test]
    fn rejects_bad_temperature_and_sigma_by_name() {
        let err = DclLossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "temperature");
        let err = DclLossConfig::weighted(-0.5).init().unwrap_err();
        assert_eq!(err.field, "sigma");
    }
}
