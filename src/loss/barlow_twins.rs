//! The Barlow Twins loss (documented on `BarlowTwinsLoss`).

use burn::prelude::*;

use super::shape_checks::assert_same_shape;
use crate::base::error::{positive, ConfigError};

/// Configuration of [`BarlowTwinsLoss`].
#[derive(Config, Debug)]
pub struct BarlowTwinsLossConfig {
    /// Weight `λ` of the redundancy-reduction (off-diagonal) term; the paper's 5e-3 (its code:
    /// 0.0051).
    #[config(default = 5e-3)]
    pub lambda: f64,
    /// `ε` added to the variance when standardising (PyTorch's batch-norm default).
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// A factor on the whole loss: 1 in the paper; solo-learn's CIFAR setting uses 0.1
    /// (`scale_loss`), which matters under LARS (the weight decay's share of the trust ratio,
    /// and the steps of the excluded biases and norms, change with it).
    #[config(default = 1.0)]
    pub scale: f64,
}

impl BarlowTwinsLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<BarlowTwinsLoss, ConfigError> {
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err(ConfigError::new(
                "lambda",
                format!("must be finite and at least 0, got {}", self.lambda),
            ));
        }
        positive("epsilon", self.epsilon)?;
        positive("scale", self.scale)?;
        Ok(BarlowTwinsLoss {
            lambda: self.lambda,
            epsilon: self.epsilon,
            scale: self.scale,
        })
    }
}

/// The Barlow Twins loss. Build it with [`BarlowTwinsLossConfig::init`].
///
/// The Barlow Twins loss (Zbontar, Jing, Misra, LeCun & Deny, "Barlow Twins: Self-Supervised
/// Learning via Redundancy Reduction", ICML 2021, <https://arxiv.org/abs/2103.03230>; see
/// `docs/methods.md#barlow-twins-loss`).
///
/// Each view's projections are standardised along the batch (batch norm without affine
/// parameters: biased variance, `ε = 1e-5`, as the paper's `nn.BatchNorm1d(affine=False)` and
/// lightly), their cross-correlation `C = ẑ1ᵀ ẑ2 / N` (`D × D`) is pushed towards the identity:
/// `L = Σ_i (1 − C_ii)² + λ Σ_{i≠j} C_ij²`.
#[derive(Debug, Clone)]
pub struct BarlowTwinsLoss {
    lambda: f64,
    epsilon: f64,
    scale: f64,
}

impl BarlowTwinsLoss {
    /// `λ`.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    /// The loss on two views' projections (not a mean: a sum over the `D × D` matrix, as the
    /// paper), times `scale`.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` with `N ≥ 2`, row `i` of each being the two views of image `i`
    /// - output: `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        assert_same_shape("Barlow Twins", ("z1", z1.dims()), ("z2", z2.dims()));
        let [n, _] = z1.dims();
        assert!(
            n >= 2,
            "Barlow Twins: a batch of {n} cannot be standardised"
        );
        let (a, b) = (standardise(z1, self.epsilon), standardise(z2, self.epsilon));
        // C_ii = Σ_n a_ni·b_ni / N, without forming a mask: Σ_{i≠j} C_ij² = Σ C² − Σ_i C_ii².
        let diagonal = (a.clone() * b.clone())
            .sum_dim(0)
            .mul_scalar(1.0 / (n as f64));
        let c = a.transpose().matmul(b).mul_scalar(1.0 / (n as f64));
        let squares = diagonal.clone().powi_scalar(2).sum();
        let on_diagonal = (diagonal.neg() + 1.0).powi_scalar(2).sum();
        let off_diagonal = c.powi_scalar(2).sum() - squares;
        (on_diagonal + off_diagonal.mul_scalar(self.lambda)).mul_scalar(self.scale)
    }
}

/// `(x − mean) / sqrt(var + ε)` along the batch, with the biased variance.
fn standardise<B: Backend>(x: Tensor<B, 2>, epsilon: f64) -> Tensor<B, 2> {
    let centred = x.clone() - x.mean_dim(0);
    let variance = centred.clone().powi_scalar(2).mean_dim(0);
    centred / variance.add_scalar(epsilon).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn identical_decorrelated_views_cost_nothing_but_epsilon() {
        // Two features of ±1 that are uncorrelated over 4 images: Ĉ = I·1/(1 + ε).
        let device = Default::default();
        let z = Tensor::<B, 2>::from_floats(
            [[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]],
            &device,
        );
        let loss = BarlowTwinsLossConfig::new().init().unwrap();
        let value: f64 = loss.forward(z.clone(), z).into_scalar();
        let c = 1.0 / (1.0 + 1e-5);
        assert!(
            (value - 2.0 * (1.0 - c) * (1.0 - c)).abs() < 1e-15,
            "{value}"
        );
    }

    #[test]
    fn rejects_negative_lambda_and_epsilon() {
        let err = BarlowTwinsLossConfig::new()
            .with_lambda(-1.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "lambda");
        let err = BarlowTwinsLossConfig::new()
            .with_epsilon(0.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "epsilon");
    }
}
