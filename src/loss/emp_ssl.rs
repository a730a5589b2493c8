//! The EMP-SSL loss (documented on `EmpSslLoss`).

use burn::prelude::*;
use nalgebra::DMatrix;

use super::shape_checks::assert_same_shape;
use crate::base::error::{positive, ConfigError};

/// Configuration of [`EmpSslLoss`].
#[derive(Config, Debug)]
pub struct EmpSslLossConfig {
    /// `ε` of the coding rate, used as the paper's `ε²` (the authors' and lightly's 0.2).
    #[config(default = 0.2)]
    pub tcr_eps: f64,
    /// Weight `λ` of the invariance term (the authors' and lightly's 200).
    #[config(default = 200.0)]
    pub inv_coef: f64,
}

impl EmpSslLossConfig {
    /// Validates the weights and builds the loss.
    ///
    /// # Errors
    /// A non-positive `ε` or a negative `λ`, named.
    pub fn init(&self) -> Result<EmpSslLoss, ConfigError> {
        positive("tcr_eps", self.tcr_eps)?;
        if !(self.inv_coef.is_finite() && self.inv_coef >= 0.0) {
            return Err(ConfigError::new(
                "inv_coef",
                format!("must be finite and at least 0, got {}", self.inv_coef),
            ));
        }
        Ok(EmpSslLoss {
            tcr_eps: self.tcr_eps,
            inv_coef: self.inv_coef,
        })
    }
}

/// The EMP-SSL loss. Build it with [`EmpSslLossConfig::init`].
///
/// The EMP-SSL loss (Tong, Chen, Ma & LeCun, "EMP-SSL: Towards Self-Supervised Learning in One
/// Training Epoch", 2023, <https://arxiv.org/abs/2304.03977>; see `docs/methods.md#emp-ssl-loss`):
/// many patches of every image, the total coding rate of each patch set made large (the
/// embeddings spread over the space) and every patch's embedding pulled towards the image's
/// mean embedding.
///
/// For `V` views (patches) `Z_v` (`[B, D]` each) and `z̄_i = (1/V) Σ_v z_{v,i}`:
///
/// ```text
/// R(Z)  = ½ · logdet(I_D + D/(B·ε) · ZᵀZ)                 (total coding rate; ε is ε², 0.2)
/// inv   = mean_{v,i} cos(z_{v,i}, z̄_i)                    (z̄ not detached)
/// loss  = −mean_v R(Z_v) − λ · inv                          (λ = 200)
/// ```
///
/// The paper and the authors' code minimise `−R`: the coding rate must grow. lightly 1.6's
/// `EMPSSLLoss` adds `+R` (a sign error: its loss prefers collapsed embeddings); the test against
/// it takes lightly's own `tcr_loss` and `invariance_loss` and the paper's sign. The embeddings
/// are used as given (the method L2-normalises them, as the authors' model does).
///
/// # Why on the host
/// burn has no log-determinant. By Sylvester's identity `logdet(I_D + c ZᵀZ) = logdet(I_B +
/// c ZZᵀ)`; the smaller of the two `n × n` matrices `M` is formed on the device, factorised by
/// `nalgebra`'s Cholesky on the host in f64 (`logdet M = 2 Σ log L_ii`), and its inverse goes
/// back to the device, where `R`'s gradient is the product `c · M⁻¹ Z` (or `c · Z M⁻¹`). The
/// loss is built as the value plus `Σ (Z − Z.detach()) ⊙ G.detach()`: the value of `R`, the
/// gradient `G`. One `n × n` round trip per view and step.
#[derive(Debug, Clone)]
pub struct EmpSslLoss {
    tcr_eps: f64,
    inv_coef: f64,
}

/// The two terms of [`EmpSslLoss`] and the total.
#[derive(Debug, Clone)]
pub struct EmpSslTerms<B: Backend> {
    /// `−mean_v R(Z_v) − λ · inv`.
    pub loss: Tensor<B, 1>,
    /// `mean_v R(Z_v)`, the total coding rate (detached).
    pub coding_rate: Tensor<B, 1>,
    /// `mean_{v,i} cos(z_{v,i}, z̄_i)` (detached).
    pub similarity: Tensor<B, 1>,
}

impl EmpSslLoss {
    /// The loss of every view's embeddings.
    ///
    /// # Shapes
    /// - `views`: `V ≥ 1` tensors `[B, D]` → `[1]`
    pub fn forward<B: Backend>(&self, views: &[Tensor<B, 2>]) -> Tensor<B, 1> {
        self.terms(views).loss
    }

    /// The loss and its two terms (for logging).
    ///
    /// # Shapes
    /// - `views`: `V ≥ 1` tensors `[B, D]`; every output `[1]`
    ///
    /// # Panics
    /// If there is no view or the views' shapes differ.
    pub fn terms<B: Backend>(&self, views: &[Tensor<B, 2>]) -> EmpSslTerms<B> {
        assert!(!views.is_empty(), "EMP-SSL: no views");
        let dims = views[0].dims();
        for z in views {
            assert_same_shape("EMP-SSL", ("the first view", dims), ("a view", z.dims()));
        }
        let v = views.len();
        let rate = views
            .iter()
            .map(|z| coding_rate(z.clone(), self.tcr_eps))
            .reduce(|a, b| a + b)
            .expect("a view")
            .mul_scalar(1.0 / v as f64);
        let stacked = Tensor::stack::<3>(views.to_vec(), 0); // [V, B, D]
        let mean = stacked.clone().mean_dim(0); // [1, B, D], with gradient
        let similarity = cosine(stacked, mean).mean();
        let loss = rate.clone().neg() - similarity.clone().mul_scalar(self.inv_coef);
        EmpSslTerms {
            loss,
            coding_rate: rate.detach(),
            similarity: similarity.detach(),
        }
    }
}

/// `cos(x, y)` along the last axis, each norm held at `1e-8` (PyTorch's `cosine_similarity`).
///
/// # Shapes
/// - `x`: `[V, B, D]`, `y`: `[1, B, D]` → `[V, B, 1]`
fn cosine<B: Backend>(x: Tensor<B, 3>, y: Tensor<B, 3>) -> Tensor<B, 3> {
    let norm = |t: Tensor<B, 3>| t.powi_scalar(2).sum_dim(2).sqrt().clamp_min(1e-8);
    (x.clone() * y.clone()).sum_dim(2) / (norm(x) * norm(y))
}

/// `R(Z) = ½ logdet(I_D + c ZᵀZ)`, `c = D / (B·ε)`, its value and gradient from the host (see
/// [`EmpSslLoss`]).
///
/// # Shapes
/// - `z`: `[B, D]` → `[1]`
fn coding_rate<B: Backend>(z: Tensor<B, 2>, eps: f64) -> Tensor<B, 1> {
    let [b, d] = z.dims();
    let c = d as f64 / (b as f64 * eps);
    // The smaller Gram matrix: `Z Zᵀ` (`B × B`) or `Zᵀ Z` (`D × D`).
    let rows_first = b <= d;
    let detached = z.clone().detach();
    let gram = if rows_first {
        detached.clone().matmul(detached.clone().transpose())
    } else {
        detached.clone().transpose().matmul(detached.clone())
    };
    let n = b.min(d);
    let values: Vec<f64> = gram
        .into_data()
        .convert::<f64>()
        .to_vec()
        .expect("a float tensor");
    let m = DMatrix::from_row_slice(n, n, &values) * c + DMatrix::<f64>::identity(n, n);
    let cholesky = m
        .cholesky()
        .expect("I + c·ZZᵀ is positive definite for any finite Z");
    let logdet: f64 = 2.0 * cholesky.l().diagonal().iter().map(|x| x.ln()).sum::<f64>();
    let inverse = cholesky.inverse();
    let inverse: Vec<f64> = (0..n)
        .flat_map(|r| (0..n).map(move |col| (r, col)))
        .map(|(r, col)| inverse[(r, col)])
        .collect();
    let device = z.device();
    let inverse = Tensor::<B, 2>::from_data(TensorData::new(inverse, [n, n]), &device);
    let gradient = if rows_first {
        inverse.matmul(detached.clone()).mul_scalar(c)
    } else {
        detached.clone().matmul(inverse).mul_scalar(c)
    };
    let value = Tensor::<B, 1>::from_data(TensorData::new(vec![0.5 * logdet], [1]), &device);
    value + ((z - detached) * gradient).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, matrix, rows, Ad, B};

    /// The coding rate by hand: `Z = I₂` (B = D = 2, ε = 0.5, `c = 2`): `½ logdet(3 I) =
    /// ln 3`; and the collapsed `Z = [[1, 0], [1, 0]]`: `ZᵀZ = [[2, 0], [0, 0]]`, `½ ln 5`. The
    /// spread embeddings have the larger rate, so the loss `−R` prefers them.
    #[test]
    fn coding_rate_by_hand_prefers_spread_embeddings() {
        let spread = host(coding_rate(matrix::<B>(&[1.0, 0.0, 0.0, 1.0], [2, 2]), 0.5))[0];
        assert!((spread - 3f64.ln()).abs() < 1e-14, "{spread}");
        let collapsed = host(coding_rate(matrix::<B>(&[1.0, 0.0, 1.0, 0.0], [2, 2]), 0.5))[0];
        assert!((collapsed - 0.5 * 5f64.ln()).abs() < 1e-14, "{collapsed}");
        let loss = EmpSslLossConfig::new().with_tcr_eps(0.5).init().unwrap();
        let two = |v: [f64; 4]| [matrix::<B>(&v, [2, 2]), matrix::<B>(&v, [2, 2])];
        let spread_loss = host(loss.forward(&two([1.0, 0.0, 0.0, 1.0])))[0];
        let collapsed_loss = host(loss.forward(&two([1.0, 0.0, 1.0, 0.0])))[0];
        assert!(spread_loss < collapsed_loss);
    }

    /// Both forms of the coding rate (`B ≤ D`: `Z Zᵀ`; `B > D`: `Zᵀ Z`) against central finite
    /// differences in f64 (step 1e-6; the rate is smooth, 1e-6 relative holds with margin), and
    /// the whole loss with three views.
    #[test]
    fn gradients_match_finite_differences() {
        let loss = EmpSslLossConfig::new().init().unwrap();
        for (b, d) in [(3, 5), (6, 4)] {
            let views: Vec<Vec<f64>> = (0..3).map(|v| rows(b, d, v as f64 * 0.9)).collect();
            let first = matrix::<Ad>(&views[0], [b, d]).require_grad();
            let mut inputs = vec![first.clone()];
            inputs.extend(views[1..].iter().map(|v| matrix::<Ad>(v, [b, d])));
            let grads = loss.forward(&inputs).backward();
            let analytic = host(first.grad(&grads).unwrap());
            let f = |x: &[f64]| -> f64 {
                let mut inputs = vec![matrix::<B>(x, [b, d])];
                inputs.extend(views[1..].iter().map(|v| matrix::<B>(v, [b, d])));
                host(loss.forward(&inputs))[0]
            };
            let what = format!("B {b}, D {d}");
            assert_matches_finite_differences(f, &views[0], &analytic, 1e-2, &what);
        }
    }

    /// Identical views have similarity 1: the invariance term is `−λ`, and the terms are logged.
    #[test]
    fn identical_views_have_similarity_one() {
        let loss = EmpSslLossConfig::new().init().unwrap();
        let z = matrix::<B>(&rows(4, 3, 0.1), [4, 3]);
        let terms = loss.terms(&[z.clone(), z.clone(), z.clone()]);
        assert!((host(terms.similarity)[0] - 1.0).abs() < 1e-14);
        let rate = host(coding_rate(z, 0.2))[0];
        assert!((host(terms.coding_rate)[0] - rate).abs() < 1e-14);
        assert!((host(terms.loss)[0] - (-rate - 200.0)).abs() < 1e-12);
    }

    /// Bad weights are named.
    #[test]
    fn bad_settings_are_refused_by_name() {
        for (config, field) in [
            (EmpSslLossConfig::new().with_tcr_eps(0.0), "tcr_eps"),
            (EmpSslLossConfig::new().with_inv_coef(-1.0), "inv_coef"),
        ] {
            let error = config.init().unwrap_err();
            assert!(error.to_string().contains(field), "{error}");
        }
    }
}
