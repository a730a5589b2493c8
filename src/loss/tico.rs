//! The TiCo loss (documented on `TicoLoss`).

use burn::prelude::*;

use super::shape_checks::assert_same_shape;
use super::similarity::{l2_normalize, stop_gradient};
use crate::base::error::{in_range, non_negative, ConfigError};

/// Configuration of [`TicoLoss`].
#[derive(Config, Debug)]
pub struct TicoLossConfig {
    /// Momentum `β` of the running covariance (the paper's 0.9).
    #[config(default = 0.9)]
    pub beta: f64,
    /// Weight `ρ` of the covariance contrast (the paper's 20).
    #[config(default = 20.0)]
    pub rho: f64,
}

impl TicoLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// `β` outside `[0, 1]` or a negative `ρ`, named.
    pub fn init(&self) -> Result<TicoLoss, ConfigError> {
        in_range("beta", self.beta, 0.0, 1.0, false)?;
        non_negative("rho", self.rho)?;
        Ok(TicoLoss {
            beta: self.beta,
            rho: self.rho,
        })
    }
}

/// The TiCo loss. Build it with [`TicoLossConfig::init`]. The running covariance is the
/// caller's state: [`TicoLoss::forward`] takes it and returns the next one.
///
/// The TiCo loss (Zhu, Moraes, Karakulak, Sobol, Canziani & LeCun, "TiCo: Transformation Invariance
/// and Covariance Contrast for Self-Supervised Visual Representation Learning", 2022,
/// <https://arxiv.org/abs/2206.10698>; see `docs/methods.md#tico-loss`): transformation invariance
/// plus a contrast against a running covariance of the embeddings, an implicit memory bank.
///
/// With `z_a`, `z_b` L2-normalised (`[N, D]`) and the running matrix `C` (`[D, D]`, no gradient):
///
/// ```text
/// B  = z_aᵀ z_a / N                       (no gradient)
/// C' = β·C + (1 − β)·B
/// L  = 1 − mean_n ⟨z_a,n, z_b,n⟩ + ρ · mean_n z_a,n C' z_a,nᵀ
/// ```
///
/// and `C'` is the next step's `C` (`C` starts at zero). `β = 0.9`, `ρ = 20` (the paper's,
/// lightly's `TicoLoss`).
#[derive(Debug, Clone)]
pub struct TicoLoss {
    beta: f64,
    rho: f64,
}

impl TicoLoss {
    /// The loss of the online embeddings `z_a` and the target embeddings `z_b` with the running
    /// covariance `covariance`, and the covariance for the next step (detached).
    ///
    /// # Shapes
    /// - `z_a`, `z_b`: `[N, D]` with `N ≥ 2`; `covariance`: `[D, D]` → (`[1]`, `[D, D]`)
    ///
    /// # Panics
    /// If the shapes differ or `N < 2`.
    pub fn forward<B: Backend>(
        &self,
        z_a: Tensor<B, 2>,
        z_b: Tensor<B, 2>,
        covariance: Tensor<B, 2>,
    ) -> (Tensor<B, 1>, Tensor<B, 2>) {
        assert_same_shape("TicoLoss", ("z_a", z_a.dims()), ("z_b", z_b.dims()));
        let [n, d] = z_a.dims();
        assert!(n > 1, "TicoLoss: a batch of at least 2, got {n}");
        assert_eq!(
            covariance.dims(),
            [d, d],
            "TicoLoss: a covariance of {:?} for {d} features",
            covariance.dims()
        );
        let z_a = l2_normalize(z_a);
        let z_b = l2_normalize(z_b);
        let detached = stop_gradient(z_a.clone());
        let b = detached
            .clone()
            .transpose()
            .matmul(detached)
            .mul_scalar(1.0 / (n as f64));
        let c = stop_gradient(covariance).mul_scalar(self.beta) + b.mul_scalar(1.0 - self.beta);
        let invariance = (z_a.clone() * z_b)
            .sum()
            .mul_scalar(1.0 / (n as f64))
            .neg()
            .add_scalar(1.0);
        let contrast = (z_a.clone().matmul(c.clone()) * z_a)
            .sum()
            .mul_scalar(1.0 / (n as f64))
            .mul_scalar(self.rho);
        (invariance + contrast, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_settings_are_named() {
        assert_eq!(
            TicoLossConfig::new()
                .with_beta(1.5)
                .init()
                .unwrap_err()
                .field,
            "beta"
        );
        assert_eq!(
            TicoLossConfig::new()
                .with_rho(-1.0)
                .init()
                .unwrap_err()
                .field,
            "rho"
        );
    }
}
