//! The VICReg loss (documented on `VicRegLoss`).

use burn::prelude::*;

use super::shape_checks::assert_same_shape;
use crate::base::error::{positive, ConfigError};

/// Configuration of [`VicRegLoss`].
#[derive(Config, Debug)]
pub struct VicRegLossConfig {
    /// Weight `λ` of the invariance term (the paper's 25).
    #[config(default = 25.0)]
    pub invariance: f64,
    /// Weight `μ` of the variance term (the paper's 25).
    #[config(default = 25.0)]
    pub variance: f64,
    /// Weight `ν` of the covariance term (the paper's 1).
    #[config(default = 1.0)]
    pub covariance: f64,
    /// `ε` inside the standard deviation (the paper's 1e-4).
    #[config(default = 1e-4)]
    pub epsilon: f64,
}

impl VicRegLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<VicRegLoss, ConfigError> {
        for (field, value) in [
            ("invariance", self.invariance),
            ("variance", self.variance),
            ("covariance", self.covariance),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ConfigError::new(
                    field,
                    format!("must be finite and at least 0, got {value}"),
                ));
            }
        }
        positive("epsilon", self.epsilon)?;
        Ok(VicRegLoss {
            weights: [self.invariance, self.variance, self.covariance],
            epsilon: self.epsilon,
        })
    }
}

/// The VICReg loss. Build it with [`VicRegLossConfig::init`].
///
/// The VICReg loss (Bardes, Ponce & LeCun, "VICReg: Variance-Invariance-Covariance
/// Regularization for Self-Supervised Learning", ICLR 2022, <https://arxiv.org/abs/2105.04906>;
/// see `docs/methods.md#vicreg-loss`).
///
/// `L = λ·s(Z, Z') + μ·[v(Z) + v(Z')]/2 + ν·[c(Z) + c(Z')]` with the invariance
/// `s = mean (z − z')²` over all `N·D` entries, the variance hinge
/// `v(Z) = mean_j max(0, 1 − sqrt(Var(z_j) + ε))` (unbiased variance) and the covariance
/// `c(Z) = Σ_{i≠j} Cov(Z)_ij² / D` (`Cov` with `N − 1`); the authors' code and lightly average the
/// two variance terms, as here.
#[derive(Debug, Clone)]
pub struct VicRegLoss {
    weights: [f64; 3],
    epsilon: f64,
}

/// The three terms of [`VicRegLoss`] (and of [`VibcRegLoss`](super::VibcRegLoss), whose
/// variance and covariance terms are its own), unweighted, and the weighted total.
#[derive(Debug, Clone)]
pub struct VicRegTerms<B: Backend> {
    /// `λ·s + μ·v + ν·c`.
    pub loss: Tensor<B, 1>,
    /// `s(Z, Z')`.
    pub invariance: Tensor<B, 1>,
    /// `[v(Z) + v(Z')] / 2` (VIbCReg: `v(Z) + v(Z')`).
    pub variance: Tensor<B, 1>,
    /// `c(Z) + c(Z')`.
    pub covariance: Tensor<B, 1>,
}

impl VicRegLoss {
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
    pub fn terms<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> VicRegTerms<B> {
        let epsilon = self.epsilon;
        weighted_terms(
            "VICReg",
            [z1, z2],
            self.weights,
            |z1, z2| (variance_hinge(z1, epsilon) + variance_hinge(z2, epsilon)) / 2.0,
            covariance_penalty,
        )
    }
}

/// The terms of a loss of VICReg's form, `λ·s + μ·v + ν·c` with `weights = [λ, μ, ν]`: the
/// invariance `s = mean (Z − Z')²`, the variance term `variance(Z, Z')` and the covariance term
/// `covariance(Z) + covariance(Z')` (VICReg's, VIbCReg's), after the checks that name `loss`.
///
/// # Panics
/// If the shapes differ or the batch has fewer than two images.
pub(super) fn weighted_terms<B: Backend>(
    loss: &str,
    [z1, z2]: [Tensor<B, 2>; 2],
    weights: [f64; 3],
    variance: impl FnOnce(Tensor<B, 2>, Tensor<B, 2>) -> Tensor<B, 1>,
    covariance: fn(Tensor<B, 2>) -> Tensor<B, 1>,
) -> VicRegTerms<B> {
    assert_same_shape(loss, ("z1", z1.dims()), ("z2", z2.dims()));
    let [n, _] = z1.dims();
    assert!(n >= 2, "{loss}: a batch of {n} has no variance");
    let invariance = (z1.clone() - z2.clone()).powi_scalar(2).mean();
    let variance = variance(z1.clone(), z2.clone());
    let covariance = covariance(z1) + covariance(z2);
    let [l, m, v] = weights;
    VicRegTerms {
        loss: invariance.clone().mul_scalar(l)
            + variance.clone().mul_scalar(m)
            + covariance.clone().mul_scalar(v),
        invariance,
        variance,
        covariance,
    }
}

/// `mean_d max(0, 1 − √(Var_n(Z_d) + ε))` with the unbiased variance: VICReg's variance term
/// (VIbCReg's too).
pub(super) fn variance_hinge<B: Backend>(z: Tensor<B, 2>, epsilon: f64) -> Tensor<B, 1> {
    let [n, _] = z.dims();
    let centred = z.clone() - z.mean_dim(0);
    let variance = centred
        .powi_scalar(2)
        .sum_dim(0)
        .mul_scalar(1.0 / ((n - 1) as f64));
    let std = variance.add_scalar(epsilon).sqrt();
    (std.neg() + 1.0).clamp_min(0.0).mean()
}

/// `Σ_{i≠j} Cov(Z)_ij² / D`, as `(Σ Cov² − Σ_i Var_i²) / D` (no mask to build).
fn covariance_penalty<B: Backend>(z: Tensor<B, 2>) -> Tensor<B, 1> {
    let [n, d] = z.dims();
    let centred = z.clone() - z.mean_dim(0);
    let variance = centred
        .clone()
        .powi_scalar(2)
        .sum_dim(0)
        .mul_scalar(1.0 / ((n - 1) as f64));
    let cov = centred
        .clone()
        .transpose()
        .matmul(centred)
        .mul_scalar(1.0 / ((n - 1) as f64));
    (cov.powi_scalar(2).sum() - variance.powi_scalar(2).sum()).mul_scalar(1.0 / (d as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn terms_by_hand() {
        // z = [[1, 0], [−1, 0]], z' = [[1, 1], [−1, −1]]: s = mean of (0, −1, 0, 1)² = 0.5;
        // Var(z) = (2, 0) → v(z) = (0 + 1 − sqrt(1e-4))/2; Var(z') = (2, 2) → v = 0;
        // Cov(z) = [[2, 0], [0, 0]] → 0; Cov(z') = [[2, 2], [2, 2]] → (4 + 4)/2 = 4.
        let device = Default::default();
        let z1 = Tensor::<B, 2>::from_floats([[1.0, 0.0], [-1.0, 0.0]], &device);
        let z2 = Tensor::<B, 2>::from_floats([[1.0, 1.0], [-1.0, -1.0]], &device);
        let terms = VicRegLossConfig::new().init().unwrap().terms(z1, z2);
        let v = (1.0 - 1e-4f64.sqrt()) / 2.0 / 2.0;
        let s: f64 = terms.invariance.into_scalar();
        let var: f64 = terms.variance.into_scalar();
        let c: f64 = terms.covariance.into_scalar();
        let total: f64 = terms.loss.into_scalar();
        assert!((s - 0.5).abs() < 1e-15);
        assert!((var - v).abs() < 1e-15, "{var} {v}");
        assert!((c - 4.0).abs() < 1e-15);
        assert!((total - (25.0 * 0.5 + 25.0 * v + 4.0)).abs() < 1e-12);
    }

    #[test]
    fn rejects_negative_weights_by_name() {
        let err = VicRegLossConfig::new()
            .with_covariance(-1.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "covariance");
    }
}
