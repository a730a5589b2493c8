//! The All4One loss (documented on `All4OneLoss`).

use burn::prelude::*;

use super::nnclr::{NnClrLoss, NnClrLossConfig};
use super::shape_checks::assert_same_shape;
use super::similarity::{l2_normalize, stop_gradient};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`All4OneLoss`] (solo-learn's values).
#[derive(Config, Debug)]
pub struct All4OneLossConfig {
    /// Temperature of the neighbour term (solo-learn's `temperature`: 0.2 in its CIFAR and
    /// ImageNet-100 settings).
    #[config(default = 0.2)]
    pub temperature: f64,
    /// Temperature of the centroid term (solo-learn calls `nnclr_loss_func` there without one:
    /// its default, 0.1).
    #[config(default = 0.1)]
    pub centroid_temperature: f64,
    /// Weight of the centroid term in the total (0.5).
    #[config(default = 0.5)]
    pub centroid_weight: f64,
    /// Weight of the neighbour term (0.5).
    #[config(default = 0.5)]
    pub neighbour_weight: f64,
    /// Weight of the feature term (0.5).
    #[config(default = 0.5)]
    pub feature_weight: f64,
    /// Scale of the feature term before its weight (10: `feature = 10·(on + off)/2`).
    #[config(default = 10.0)]
    pub feature_scale: f64,
}

impl All4OneLossConfig {
    /// Validates the settings and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive, or a weight or scale that is negative or not finite.
    pub fn init(&self) -> Result<All4OneLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        positive("centroid_temperature", self.centroid_temperature)?;
        for (field, value) in [
            ("centroid_weight", self.centroid_weight),
            ("neighbour_weight", self.neighbour_weight),
            ("feature_weight", self.feature_weight),
            ("feature_scale", self.feature_scale),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ConfigError::new(
                    field,
                    format!("must be finite and not negative, got {value}"),
                ));
            }
        }
        Ok(All4OneLoss {
            neighbour: NnClrLossConfig::new()
                .with_temperature(self.temperature)
                .init()?,
            centroid: NnClrLossConfig::new()
                .with_temperature(self.centroid_temperature)
                .init()?,
            config: self.clone(),
        })
    }
}

/// What [`All4OneLoss::forward`] compares, each a pair for the two views (`[N, D]`; on replicas
/// the global batch's rows).
#[derive(Debug, Clone)]
pub struct All4OneInputs<B: Backend> {
    /// The transformer's first token over each view's neighbours (`rich_emb`).
    pub rich: [Tensor<B, 2>; 2],
    /// The transformer's first token over each view's shifted sequence (`strange_emb`).
    pub strange: [Tensor<B, 2>; 2],
    /// Each view's first (nearest) neighbour, `nn[:, 0]` (no gradient).
    pub nearest: [Tensor<B, 2>; 2],
    /// Each view's predictions `p`.
    pub predictions: [Tensor<B, 2>; 2],
    /// Each view's momentum projections (no gradient).
    pub momentum: [Tensor<B, 2>; 2],
    /// Each view's online projections `z`.
    pub projections: [Tensor<B, 2>; 2],
}

/// The three terms of the All4One loss and their weighted sum, each `[1]`.
#[derive(Debug, Clone)]
pub struct All4OneTerms<B: Backend> {
    /// The weighted sum: what is back-propagated.
    pub total: Tensor<B, 1>,
    /// The centroid term (solo-learn's `att_nnclr_loss`).
    pub centroid: Tensor<B, 1>,
    /// The neighbour term (solo-learn's `nnclr_loss`).
    pub neighbour: Tensor<B, 1>,
    /// The feature term, scaled (solo-learn's `feature_loss`).
    pub feature: Tensor<B, 1>,
}

/// The All4One loss. Build it with [`All4OneLossConfig::init`].
///
/// All4One (Estepa, Sarasúa, Nagarajan & Radeva, "All4One: Symbiotic Neighbour Contrastive
/// Learning via Self-Attention and Redundancy Reduction", ICCV 2023,
/// <https://arxiv.org/abs/2303.09417>), as
/// solo-learn's `solo/methods/all4one.py` computes it; see `docs/methods.md#all4one-loss`. With
/// `L_τ(a, b)` the NNCLR loss of [`NnClrLoss::contrast`] (rows L2-normalised,
/// `CE(a·bᵀ/τ, diag)`):
///
/// ```text
/// centroid  = ½ L_0.1(rich1, strange2) + ½ L_0.1(rich2, strange1)      (gradient into both)
/// neighbour = ½ L_0.2(nn1, p2) + ½ L_0.2(nn2, p1)                      (nn detached)
/// feature   = 10 · (½ on + ½ off),   C1 = m̂1ᵀ ẑ2, C2 = m̂2ᵀ ẑ1  ([D, D]; ^ = columns normalised
///             over the batch),  on = √(½ mean_d (C1_dd − 1)² + ½ mean_d (C2_dd − 1)²),
///             off = √(½ mean_{d≠e} C1_de² + ½ mean_{d≠e} C2_de²)      (m detached)
/// total     = ½ centroid + ½ neighbour + ½ feature
/// ```
///
/// `rich_v` / `strange_v` are the method's transformer's first output token over a view's
/// neighbours and over its shifted sequence; `m` the momentum projections, `z` the online
/// ones, `p` the predictions. The weights, the temperatures and the feature scale are settings
/// ([`All4OneLossConfig`], solo-learn's values by default).
#[derive(Debug, Clone)]
pub struct All4OneLoss {
    neighbour: NnClrLoss,
    centroid: NnClrLoss,
    config: All4OneLossConfig,
}

impl All4OneLoss {
    /// The three terms and their weighted sum.
    ///
    /// # Panics
    /// If two tensors that are compared have different shapes.
    pub fn forward<B: Backend>(&self, inputs: All4OneInputs<B>) -> All4OneTerms<B> {
        let All4OneInputs {
            rich: [rich1, rich2],
            strange: [strange1, strange2],
            nearest: [nn1, nn2],
            predictions: [p1, p2],
            momentum,
            projections,
        } = inputs;
        let centroid = (self.centroid.contrast(rich1, strange2)
            + self.centroid.contrast(rich2, strange1))
        .mul_scalar(0.5);
        let neighbour =
            (self.neighbour.forward(nn1, p2) + self.neighbour.forward(nn2, p1)).mul_scalar(0.5);
        let feature = self.feature(momentum, projections);
        let c = &self.config;
        let total = centroid.clone().mul_scalar(c.centroid_weight)
            + neighbour.clone().mul_scalar(c.neighbour_weight)
            + feature.clone().mul_scalar(c.feature_weight);
        All4OneTerms {
            total,
            centroid,
            neighbour,
            feature,
        }
    }

    /// The feature term, scaled: `feature_scale · (on + off) / 2` (see [`All4OneLoss`]).
    ///
    /// # Shapes
    /// - `momentum`, `projections`: `[N, D]` each → `[1]`
    pub fn feature<B: Backend>(
        &self,
        [m1, m2]: [Tensor<B, 2>; 2],
        [z1, z2]: [Tensor<B, 2>; 2],
    ) -> Tensor<B, 1> {
        assert_same_shape("All4OneLoss", ("momentum", m1.dims()), ("z", z2.dims()));
        assert_same_shape("All4OneLoss", ("momentum", m2.dims()), ("z", z1.dims()));
        let [_, d] = z1.dims();
        // F.normalize(x, dim=0): each column over the batch.
        let columns = |x: Tensor<B, 2>| l2_normalize(x.transpose());
        let c1 = columns(stop_gradient(m1)).matmul(columns(z2).transpose());
        let c2 = columns(stop_gradient(m2)).matmul(columns(z1).transpose());
        let eye = Tensor::<B, 2>::eye(d, &c1.device());
        let diagonal_error = |c: Tensor<B, 2>| {
            (c * eye.clone() - eye.clone())
                .powi_scalar(2)
                .sum()
                .mul_scalar(1.0 / d as f64)
        };
        let off = |c: Tensor<B, 2>| {
            (c.clone() - c * eye.clone())
                .powi_scalar(2)
                .sum()
                .mul_scalar(1.0 / (d * (d - 1)).max(1) as f64)
        };
        let on = (diagonal_error(c1.clone()) + diagonal_error(c2.clone()))
            .mul_scalar(0.5)
            .sqrt();
        let off = (off(c1) + off(c2)).mul_scalar(0.5).sqrt();
        (on + off).mul_scalar(0.5 * self.config.feature_scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, matrix, Ad, B as Cpu};

    const N: usize = 4;
    const D: usize = 5;

    /// Twelve `[N, D]` inputs `sin(a·e + b)` (e the flat index), index `i` giving `a`, `b`.
    fn input(i: usize) -> Vec<f64> {
        (0..N * D)
            .map(|e| {
                (0.37 * (i + 1) as f64 * e as f64 + 0.9 * i as f64 + 0.1).sin() + 0.05 * i as f64
            })
            .collect()
    }

    /// The loss with the twelve inputs in `All4OneInputs`' order (rich, strange, nearest,
    /// predictions, momentum, projections; views 1, 2 each).
    fn total<Bk: Backend>(loss: &All4OneLoss, x: &[Vec<f64>]) -> All4OneTerms<Bk> {
        let t = |i: usize| matrix::<Bk>(&x[i], [N, D]);
        loss.forward(All4OneInputs {
            rich: [t(0), t(1)],
            strange: [t(2), t(3)],
            nearest: [t(4), t(5)],
            predictions: [t(6), t(7)],
            momentum: [t(8), t(9)],
            projections: [t(10), t(11)],
        })
    }

    /// The gradient of the total with respect to every input that carries one (rich, strange,
    /// predictions, projections) equals central finite differences of the value; the
    /// neighbours and the momentum projections receive none.
    #[test]
    fn gradients_match_finite_differences() {
        let loss = All4OneLossConfig::new().init().unwrap();
        let x: Vec<Vec<f64>> = (0..12).map(input).collect();
        let leaves: Vec<Tensor<Ad, 2>> = x
            .iter()
            .map(|v| matrix::<Ad>(v, [N, D]).require_grad())
            .collect();
        let l = |i: usize| leaves[i].clone();
        let value = loss
            .forward(All4OneInputs {
                rich: [l(0), l(1)],
                strange: [l(2), l(3)],
                nearest: [l(4), l(5)],
                predictions: [l(6), l(7)],
                momentum: [l(8), l(9)],
                projections: [l(10), l(11)],
            })
            .total;
        let grads = value.backward();
        for (i, leaf) in leaves.iter().enumerate() {
            let grad = leaf.grad(&grads).map(host);
            if matches!(i, 4 | 5 | 8 | 9) {
                assert!(
                    grad.is_none_or(|g| g.iter().all(|v| *v == 0.0)),
                    "input {i} is detached"
                );
                continue;
            }
            let grad = grad.unwrap();
            let f = |v: &[f64]| {
                let mut y = x.clone();
                y[i] = v.to_vec();
                host(total::<Cpu>(&loss, &y).total)[0]
            };
            assert_matches_finite_differences(f, &x[i], &grad, 1e-3, &format!("input {i}"));
        }
    }

    /// The feature term by hand on the host: columns normalised over the batch, the two
    /// cross-correlations, the root mean squares of the diagonal's distance to 1 and of the
    /// off-diagonal entries, scaled by 10 / 2; the total is ½ of each term.
    #[test]
    fn the_feature_term_and_the_total_by_hand() {
        let loss = All4OneLossConfig::new().init().unwrap();
        let x: Vec<Vec<f64>> = (0..12).map(input).collect();
        let terms = total::<Cpu>(&loss, &x);
        let column_normalised = |v: &[f64]| -> Vec<f64> {
            let mut out = v.to_vec();
            for d in 0..D {
                let norm = (0..N).map(|n| v[n * D + d].powi(2)).sum::<f64>().sqrt();
                for n in 0..N {
                    out[n * D + d] /= norm;
                }
            }
            out
        };
        let correlation = |m: &[f64], z: &[f64]| -> Vec<f64> {
            let (m, z) = (column_normalised(m), column_normalised(z));
            (0..D * D)
                .map(|e| (0..N).map(|n| m[n * D + e / D] * z[n * D + e % D]).sum())
                .collect()
        };
        let (c1, c2) = (correlation(&x[8], &x[11]), correlation(&x[9], &x[10]));
        let (mut on, mut off) = (0.0, 0.0);
        for c in [&c1, &c2] {
            for (e, value) in c.iter().enumerate() {
                if e / D == e % D {
                    on += (value - 1.0).powi(2) / D as f64 / 2.0;
                } else {
                    off += value.powi(2) / (D * (D - 1)) as f64 / 2.0;
                }
            }
        }
        let feature = 10.0 * (on.sqrt() + off.sqrt()) / 2.0;
        let got = host(terms.feature)[0];
        assert!((got - feature).abs() < 1e-12, "{got} vs {feature}");
        let (centroid, neighbour) = (host(terms.centroid)[0], host(terms.neighbour)[0]);
        let expected = 0.5 * (centroid + neighbour + feature);
        let got = host(terms.total)[0];
        assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
    }

    #[test]
    fn a_temperature_or_weight_out_of_range_is_named() {
        let e = All4OneLossConfig::new()
            .with_centroid_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "centroid_temperature");
        let e = All4OneLossConfig::new()
            .with_feature_weight(-1.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "feature_weight");
    }
}
