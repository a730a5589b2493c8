//! Huber-regularised NT-Xent (documented on `HuberNtXentLoss`).

use burn::prelude::*;

use super::nt_xent::{NtXentLoss, NtXentLossConfig};
use super::shape_checks::assert_same_shape;
use super::similarity::l2_normalize;
use crate::base::error::{non_negative, positive, ConfigError};

/// Configuration of [`HuberNtXentLoss`].
#[derive(Config, Debug)]
pub struct HuberNtXentLossConfig {
    /// Temperature `τ` of the NT-Xent part.
    #[config(default = 0.5)]
    pub temperature: f64,
    /// Weight `λ >= 0` of the Huber term.
    #[config(default = 0.1)]
    pub lambda: f64,
    /// Huber threshold `δ > 0` between the quadratic and linear parts (paper: 1.0).
    #[config(default = 1.0)]
    pub delta: f64,
}

impl HuberNtXentLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<HuberNtXentLoss, ConfigError> {
        non_negative("lambda", self.lambda)?;
        positive("delta", self.delta)?;
        Ok(HuberNtXentLoss {
            nt_xent: NtXentLossConfig::new()
                .with_temperature(self.temperature)
                .init()?,
            lambda: self.lambda,
            delta: self.delta,
        })
    }
}

/// NT-Xent plus a Huber penalty on the distance between positive pairs. Build it with
/// [`HuberNtXentLossConfig::init`].
///
/// Huber-regularised NT-Xent, from "The Bad Batches" (Göksu and Pugeault, IJCNN 2024,
/// <https://arxiv.org/abs/2403.19579>, eq. 3–5); see `docs/methods.md#huber-regularised-nt-xent`.
///
/// `L = NT-Xent + λ·L_huber`, where `L_huber` is the Huber loss between the two (L2-normalised)
/// projections of each positive pair, `0.5 d²` if `|d| < δ` else `δ(|d| − 0.5δ)`, applied
/// elementwise to `d = z_i − z'_i` and averaged over the `D` elements and the `B` pairs (one mean
/// over all `B·D` entries). The Huber term acts on the same unit vectors as NT-Xent, so it does
/// not depend on the arbitrary scale of the projection head's output.
#[derive(Debug, Clone)]
pub struct HuberNtXentLoss {
    nt_xent: NtXentLoss,
    lambda: f64,
    delta: f64,
}

impl HuberNtXentLoss {
    /// `NT-Xent(z1, z2) + λ·huber(z1, z2)`.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[B, D]`; output: `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        let huber = self.huber(z1.clone(), z2.clone());
        self.nt_xent.forward(z1, z2) + huber * self.lambda
    }

    /// The Huber term alone: mean over all `B·D` elements of the normalised pair differences.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[B, D]`; output: `[1]`
    pub fn huber<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        assert_same_shape("Huber NT-Xent", ("z1", z1.dims()), ("z2", z2.dims()));
        let diff = l2_normalize(z1) - l2_normalize(z2);
        let abs = diff.clone().abs();
        let quadratic = diff.powi_scalar(2) * 0.5;
        let linear = (abs.clone() - 0.5 * self.delta) * self.delta;
        quadratic
            .mask_where(abs.greater_equal_elem(self.delta), linear)
            .mean()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn one_pair_by_hand() {
        // One image: NT-Xent's only candidate is the positive, so it is 0. d = u0° − u60° =
        // (0.5, −0.866025); δ = 0.6: 0.5·0.5² = 0.125 and 0.6·(0.866025 − 0.3) = 0.339615,
        // mean 0.232308; λ = 0.1 → 0.0232308.
        let device = Default::default();
        let z1 = Tensor::<B, 2>::from_data([[2.0, 0.0]], &device);
        let z2 = Tensor::<B, 2>::from_data([[0.5, 3f64.sqrt() / 2.0]], &device);
        let loss = HuberNtXentLossConfig::new().with_delta(0.6).init().unwrap();
        let huber: f64 = loss.huber(z1.clone(), z2.clone()).into_scalar();
        let total: f64 = loss.forward(z1, z2).into_scalar();
        let expected = (0.125 + 0.6 * (3f64.sqrt() / 2.0 - 0.3)) / 2.0;
        assert!((huber - expected).abs() < 1e-12, "{huber}");
        assert!((total - 0.1 * expected).abs() < 1e-12, "{total}");
    }
}
