//! The VIbCReg loss (documented on `VibcRegLoss`).

use burn::prelude::*;

use super::vicreg::{variance_hinge, weighted_terms, VicRegTerms};
use crate::base::error::{non_negative, positive, ConfigError};

/// Configuration of [`VibcRegLoss`].
#[derive(Config, Debug)]
pub struct VibcRegLossConfig {
    /// Weights `[λ, μ, ν]` of the invariance, variance and covariance terms (25, 25, 200).
    #[config(default = "[25.0, 25.0, 200.0]")]
    pub weights: [f64; 3],
    /// `ε` under the variance's square root (1e-4).
    #[config(default = 1e-4)]
    pub epsilon: f64,
}

impl VibcRegLossConfig {
    /// Validates the settings and builds the loss.
    ///
    /// # Errors
    /// A negative weight or a non-positive `ε`, named.
    pub fn init(&self) -> Result<VibcRegLoss, ConfigError> {
        for w in self.weights {
            non_negative("weights", w)?;
        }
        positive("epsilon", self.epsilon)?;
        Ok(VibcRegLoss {
            weights: self.weights,
            epsilon: self.epsilon,
        })
    }
}

/// The VIbCReg loss. Build it with [`VibcRegLossConfig::init`].
///
/// The VIbCReg loss (Lee & Aune, "VIbCReg: Variance-Invariance-better-Covariance Regularization
/// for Self-Supervised Learning on Time Series", 2021, <https://arxiv.org/abs/2109.00783>; see
/// `docs/methods.md#vibcreg-loss`): VICReg's invariance and variance terms with a covariance term
/// on the normalised correlation, so that its scale does not grow with the features' variance.
///
/// With `Z`, `Z'` the two views' projections (`[N, D]`):
///
/// ```text
/// s      = mean_{n,d} (Z − Z')²
/// v(Z)   = mean_d max(0, 1 − √(Var_n(Z_d) + ε))                (unbiased variance)
/// Ẑ      = (Z − mean_n Z), each column divided by its L2 norm over the batch
/// c(Z)   = Σ_{i≠j} (ẐᵀẐ)_ij² / D²
/// L      = λ·s + μ·(v(Z) + v(Z')) + ν·(c(Z) + c(Z'))
/// ```
///
/// `λ = 25`, `μ = 25`, `ν = 200`, `ε = 1e-4` (the paper's, solo-learn's `vibcreg_loss_func`,
/// which sums the two views' variance terms where VICReg's authors average them). lightly has no
/// VIbCReg; the reference is solo-learn's function (`tests/pytorch/vibcreg.py`).
#[derive(Debug, Clone)]
pub struct VibcRegLoss {
    weights: [f64; 3],
    epsilon: f64,
}

/// The three terms of [`VibcRegLoss`], unweighted, and the weighted total: VICReg's
/// ([`VicRegTerms`]), with `variance` the sum `v(Z) + v(Z')` and `covariance` the normalised
/// correlation's `c(Z) + c(Z')`.
pub type VibcRegTerms<B> = VicRegTerms<B>;

impl VibcRegLoss {
    /// The weighted loss.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` with `N ≥ 2`; output: `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        self.terms(z1, z2).loss
    }

    /// The loss and its three terms (for logging).
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` with `N ≥ 2`; every output: `[1]`
    ///
    /// # Panics
    /// If the shapes differ or the batch has fewer than two images.
    pub fn terms<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> VibcRegTerms<B> {
        let epsilon = self.epsilon;
        weighted_terms(
            "VIbCReg",
            [z1, z2],
            self.weights,
            |z1, z2| variance_hinge(z1, epsilon) + variance_hinge(z2, epsilon),
            correlation_penalty,
        )
    }
}

/// `Σ_{i≠j} (ẐᵀẐ)_ij² / D²` with `Ẑ` the centred columns over their L2 norms (PyTorch's
/// `F.normalize(·, dim=0)`: a norm below 1e-12 counts as 1e-12), as `(Σ C² − Σ_i C_ii²) / D²`.
fn correlation_penalty<B: Backend>(z: Tensor<B, 2>) -> Tensor<B, 1> {
    let [_, d] = z.dims();
    let centred = z.clone() - z.mean_dim(0);
    let norms = centred
        .clone()
        .powi_scalar(2)
        .sum_dim(0)
        .sqrt()
        .clamp_min(1e-12);
    let unit = centred / norms;
    let diagonal = unit.clone().powi_scalar(2).sum_dim(0);
    let correlation = unit.clone().transpose().matmul(unit);
    (correlation.powi_scalar(2).sum() - diagonal.powi_scalar(2).sum())
        .mul_scalar(1.0 / (d * d) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// Two images, two features, by hand: `Z = [[1, 0], [3, 2]]`, `Z' = [[0, 0], [3, 3]]`.
    /// `s = (1 + 0 + 0 + 1)/4 = 0.5`; the columns' unbiased variances are 2, 2 and 4.5, 4.5, so
    /// `v(Z) = 1 − √2.0001 < 0 → 0`, both zero; with two images every centred column is `±a`,
    /// so the two unit columns of each view are equal or opposite: `|C₀₁| = 1`,
    /// `c = 2·1/4 = 0.5` per view. `L = 25·0.5 + 200·1 = 212.5`.
    #[test]
    fn two_images_by_hand() {
        let d = Default::default();
        let m = |v: [f64; 4]| Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), [2, 2]), &d);
        let terms = VibcRegLossConfig::new()
            .init()
            .unwrap()
            .terms(m([1.0, 0.0, 3.0, 2.0]), m([0.0, 0.0, 3.0, 3.0]));
        let value = |t: Tensor<B, 1>| -> f64 { t.into_scalar() };
        assert!((value(terms.invariance) - 0.5).abs() < 1e-14);
        assert_eq!(value(terms.variance), 0.0);
        assert!((value(terms.covariance) - 1.0).abs() < 1e-14);
        assert!((value(terms.loss) - 212.5).abs() < 1e-12);
    }

    #[test]
    fn bad_settings_are_named() {
        for (config, field) in [
            (
                VibcRegLossConfig::new().with_weights([25.0, -1.0, 200.0]),
                "weights",
            ),
            (VibcRegLossConfig::new().with_epsilon(0.0), "epsilon"),
        ] {
            assert_eq!(config.init().unwrap_err().field, field);
        }
    }
}
