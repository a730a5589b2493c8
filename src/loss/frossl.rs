//! The FroSSL loss (documented on `FroSslLoss`).

use burn::prelude::*;

use super::shape_checks::assert_same_shape;
use super::similarity::{safe_norm, stop_gradient};
use crate::base::error::{non_negative, ConfigError};

/// Configuration of [`FroSslLoss`].
#[derive(Config, Debug)]
pub struct FroSslLossConfig {
    /// Weight `w` of the invariance term (lightly's and the paper's 1).
    #[config(default = 1.0)]
    pub invariance_weight: f64,
}

impl FroSslLossConfig {
    /// Validates the weight and builds the loss.
    pub fn init(&self) -> Result<FroSslLoss, ConfigError> {
        non_negative("invariance_weight", self.invariance_weight)?;
        Ok(FroSslLoss {
            invariance_weight: self.invariance_weight,
        })
    }
}

/// The FroSSL loss. Build it with [`FroSslLossConfig::init`].
///
/// The FroSSL loss (Skean, Dhakal, Jacobs & Sanchez Giraldo, "FroSSL: Frobenius Norm
/// Minimization for Self-Supervised Learning", ECCV 2024, <https://arxiv.org/abs/2310.02903>;
/// see `docs/methods.md#frossl-loss`).
///
/// For `V ≥ 2` views' projections `Z_v` (`[N, D]`), each normalised to unit columns (over the
/// batch, as lightly's `F.normalize(z, dim=0)`), with `Z̄` their mean:
///
/// `L = Σ_v 2·log ‖C_v / tr(C_v)‖_F + w · Σ_v V·D·mean (Z_v − Z̄)²`
///
/// where `C_v` is the smaller of `Z_vᵀZ_v` (`D × D`) and `Z_v Z_vᵀ` (`N × N`) — the same non-zero
/// eigenvalues, so the same Frobenius norm. Minimising the squared Frobenius norm of the
/// trace-normalised covariance maximises its entropy (the variance / redundancy term); the
/// second term pulls every view towards the mean (invariance). The trace is taken without
/// gradient, as lightly's `.item()`; on unit columns it is `D` whatever the input, so the
/// gradient is the derivative of the value all the same.
#[derive(Debug, Clone)]
pub struct FroSslLoss {
    invariance_weight: f64,
}

/// The loss and its two terms (each `[1]`; the terms detached), for the training logs.
#[derive(Debug, Clone)]
pub struct FroSslTerms<B: Backend> {
    /// `regularisation + w · invariance`.
    pub loss: Tensor<B, 1>,
    /// `Σ_v 2·log ‖C_v / tr(C_v)‖_F`.
    pub regularisation: Tensor<B, 1>,
    /// `Σ_v V·D·mean (Z_v − Z̄)²`, before its weight.
    pub invariance: Tensor<B, 1>,
}

impl FroSslLoss {
    /// The weight of the invariance term.
    pub fn invariance_weight(&self) -> f64 {
        self.invariance_weight
    }

    /// The loss of two views.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` → `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        self.terms(vec![z1, z2]).loss
    }

    /// The loss and its terms over any number of views (at least two, all of one shape).
    ///
    /// # Shapes
    /// - `views[v]`: `[N, D]`
    pub fn terms<B: Backend>(&self, views: Vec<Tensor<B, 2>>) -> FroSslTerms<B> {
        assert!(
            views.len() >= 2,
            "FroSSL: needs at least two views, got {}",
            views.len()
        );
        for v in &views[1..] {
            assert_same_shape("FroSSL", ("z1", views[0].dims()), ("z_v", v.dims()));
        }
        let count = views.len();
        let [n, d] = views[0].dims();
        let normalised: Vec<Tensor<B, 2>> = views
            .into_iter()
            .map(|z| z.clone() / safe_norm(z, 0, 1e-12))
            .collect();
        let mean = normalised
            .iter()
            .cloned()
            .reduce(|a, b| a + b)
            .expect("at least two views")
            .mul_scalar(1.0 / count as f64);
        let mut regularisation = Vec::with_capacity(count);
        let mut invariance = Vec::with_capacity(count);
        for z in normalised {
            let covariance = if n > d {
                z.clone().transpose().matmul(z.clone())
            } else {
                z.clone().matmul(z.clone().transpose())
            };
            // tr(ZᵀZ) = tr(ZZᵀ) = Σ z².
            let trace = stop_gradient(z.clone().powi_scalar(2).sum());
            let scaled = covariance.mul(trace.recip().reshape([1, 1]));
            let squared_norm = scaled.powi_scalar(2).sum();
            // 2·log ‖·‖_F = log ‖·‖_F².
            regularisation.push(squared_norm.log());
            invariance.push(
                (z - mean.clone())
                    .powi_scalar(2)
                    .mean()
                    .mul_scalar((count * d) as f64),
            );
        }
        let regularisation = Tensor::cat(regularisation, 0).sum();
        let invariance = Tensor::cat(invariance, 0).sum();
        FroSslTerms {
            loss: regularisation.clone() + invariance.clone().mul_scalar(self.invariance_weight),
            regularisation: regularisation.detach(),
            invariance: invariance.detach(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// Two views of three images in two dimensions, by hand: columns normalised over the batch,
    /// `C = ZᵀZ` (`N = 3 > D = 2`) divided by its trace (2), and the squared distances to the
    /// mean view.
    #[test]
    fn two_views_by_hand() {
        let device = Default::default();
        let a = [[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]];
        let b = [[2.0, 1.0], [1.0, 1.0], [-1.0, 3.0]];
        let unit_columns = |m: [[f64; 2]; 3]| {
            let norms: Vec<f64> = (0..2)
                .map(|j| m.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt())
                .collect();
            m.map(|r| [r[0] / norms[0], r[1] / norms[1]])
        };
        let (za, zb) = (unit_columns(a), unit_columns(b));
        let regulariser = |z: [[f64; 2]; 3]| {
            let c = |i: usize, j: usize| z.iter().map(|r| r[i] * r[j]).sum::<f64>() / 2.0;
            let squared = c(0, 0).powi(2) + 2.0 * c(0, 1).powi(2) + c(1, 1).powi(2);
            squared.ln()
        };
        let distance = |z: [[f64; 2]; 3]| {
            let mut s = 0.0;
            for i in 0..3 {
                for j in 0..2 {
                    s += (z[i][j] - (za[i][j] + zb[i][j]) / 2.0).powi(2);
                }
            }
            2.0 * 2.0 * s / 6.0
        };
        let w = 0.7;
        let expected = regulariser(za) + regulariser(zb) + w * (distance(za) + distance(zb));
        let loss = FroSslLossConfig::new()
            .with_invariance_weight(w)
            .init()
            .unwrap()
            .forward(
                Tensor::<B, 2>::from_data(a, &device),
                Tensor::<B, 2>::from_data(b, &device),
            );
        let value: f64 = loss.into_scalar();
        assert!((value - expected).abs() < 1e-12, "{value} {expected}");
    }

    #[test]
    fn rejects_a_negative_weight_by_name() {
        let err = FroSslLossConfig::new()
            .with_invariance_weight(-1.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "invariance_weight");
    }
}
