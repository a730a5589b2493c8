//! The W-MSE loss (documented on `WmseLoss`).

use burn::prelude::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::shape_checks::assert_same_shape;
use super::similarity::l2_normalize;
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;

/// Configuration of [`WmseLoss`].
#[derive(Config, Debug)]
pub struct WmseLossConfig {
    /// Rows of a whitened sub-batch (lightly's default 256; solo-learn's CIFAR setting 128). A
    /// batch that is not a multiple is cut into `⌊N / w_size⌋` sub-batches as equal as possible.
    #[config(default = 256)]
    pub w_size: usize,
    /// Random orders of the batch per step, the loss averaged over them (both peers' 1).
    #[config(default = 1)]
    pub w_iter: usize,
    /// Shrinkage `ε` of the covariance towards the identity, `(1 − ε) S + ε I` (both peers' 0).
    #[config(default = 0.0)]
    pub eps: f64,
    /// Seed of the orders: a step's orders are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl WmseLossConfig {
    /// Validates the settings and builds the loss.
    ///
    /// # Errors
    /// A sub-batch of fewer than 2 rows, no order, or `ε` outside `[0, 1)`, named.
    pub fn init(&self) -> Result<WmseLoss, ConfigError> {
        if self.w_size < 2 {
            return Err(ConfigError::new(
                "w_size",
                format!(
                    "a sub-batch needs at least 2 rows to have a covariance, got {}",
                    self.w_size
                ),
            ));
        }
        if self.w_iter == 0 {
            return Err(ConfigError::new("w_iter", "must be at least 1"));
        }
        if !(self.eps >= 0.0 && self.eps < 1.0) {
            return Err(ConfigError::new(
                "eps",
                format!("must lie in [0, 1), got {}", self.eps),
            ));
        }
        Ok(WmseLoss {
            w_size: self.w_size,
            w_iter: self.w_iter,
            eps: self.eps,
            seed: self.seed,
        })
    }
}

/// The W-MSE loss. Build it with [`WmseLossConfig::init`].
///
/// The W-MSE loss (Ermolov, Siarohin, Sangineto & Sebe, "Whitening for Self-Supervised
/// Representation Learning", ICML 2021, <https://arxiv.org/abs/2007.06346>; see
/// `docs/methods.md#w-mse-loss`): each view's projections are whitened in sub-batches, and the
/// whitened views of an image are pulled together. Whitening (zero mean, identity covariance
/// within the sub-batch) rules out the collapse that a plain distance between the views would
/// reach, with no negatives and no asymmetry between the branches.
///
/// For each of `w_iter` random orders of the batch's `N` rows, the rows are cut into sub-batches
/// of `w_size` (the same rows for every view); in each sub-batch `X` (`n × D`) of each view,
///
/// ```text
/// X_c = X − mean(X),  S = X_cᵀ X_c / (n − 1),  L Lᵀ = (1 − ε) S + ε I  (Cholesky),
/// Z = X_c L⁻ᵀ
/// ```
///
/// and the loss is `2 − 2·mean_rows cos(z_i, z'_i)` over the images, averaged over the orders
/// (and over the pairs of views; here two views). As lightly's `WMSELoss` (`Whitening2d`,
/// `norm_mse_loss`), which the float64 test reproduces with its orders: gradients flow into
/// both views and through the mean, the covariance, the Cholesky factor and its inverse.
/// solo-learn's `wmse_loss_func` detaches the second view of each pair (the same value, half
/// the gradient paths); lightly's running statistics serve only its eval mode, not training,
/// and are not kept here.
///
/// # Why the factorisation is written here
/// burn has no Cholesky decomposition or triangular solve, and the gradient must flow through
/// both. They are written as `D` steps of tensor operations on the device (one column of `L`,
/// then one row of `L⁻¹`, each a product with what is already known), batched over every
/// sub-batch of every view at once, so autodiff differentiates them as any other operations.
/// `D` is W-MSE's small projection width (64 in both peers' settings).
#[derive(Debug, Clone)]
pub struct WmseLoss {
    w_size: usize,
    w_iter: usize,
    eps: f64,
    seed: u64,
}

impl WmseLoss {
    /// Rows of a whitened sub-batch.
    pub fn w_size(&self) -> usize {
        self.w_size
    }

    /// The `w_iter` orders of a batch of `n` rows at `step`, drawn from `(seed, step)`.
    pub fn orders(&self, n: usize, step: usize) -> Vec<Vec<usize>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(mix_seed(
            mix_seed(0x574d_5345_4f52_4452, self.seed),
            step as u64,
        ));
        (0..self.w_iter)
            .map(|_| {
                let mut order: Vec<usize> = (0..n).collect();
                order.shuffle(&mut rng);
                order
            })
            .collect()
    }

    /// The loss of the two views' projections at `step` (its orders from [`Self::orders`]).
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` → `[1]`
    pub fn forward<B: Backend>(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
        step: usize,
    ) -> Tensor<B, 1> {
        let orders = self.orders(z1.dims()[0], step);
        self.forward_with_orders(z1, z2, &orders)
    }

    /// The loss with the orders given (each a permutation of `0..N`; lightly's `randperm`s in
    /// the float64 test): for each order, its rows cut into sub-batches in sequence.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` → `[1]`
    ///
    /// # Panics
    /// If the shapes differ, no order is given, an order is not a permutation of `0..N`, or
    /// (without shrinkage) a sub-batch has no more rows than features: its covariance is
    /// singular and cannot be whitened.
    pub fn forward_with_orders<B: Backend>(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
        orders: &[Vec<usize>],
    ) -> Tensor<B, 1> {
        assert_same_shape("W-MSE", ("z1", z1.dims()), ("z2", z2.dims()));
        assert!(!orders.is_empty(), "W-MSE: no order of the batch");
        let [n, d] = z1.dims();
        let groups = (n / self.w_size).max(1);
        let smallest = n / groups;
        assert!(
            self.eps > 0.0 || smallest > d,
            "W-MSE: a sub-batch of {smallest} rows cannot whiten {d} features (its covariance \
             is singular): use batches of more than {d} images per sub-batch (w_size {}), or a \
             shrinkage eps > 0",
            self.w_size
        );
        let device = z1.device();
        let mut total: Option<Tensor<B, 1>> = None;
        for order in orders {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert!(
                sorted.iter().copied().eq(0..n),
                "W-MSE: an order must be a permutation of the batch's {n} rows"
            );
            let index = Tensor::<B, 1, Int>::from_data(
                TensorData::new(order.iter().map(|&i| i as i64).collect(), [n]),
                &device,
            );
            let rows = Tensor::cat(
                vec![
                    z1.clone().select(0, index.clone()),
                    z2.clone().select(0, index),
                ],
                0,
            );
            let white = whiten_groups(rows, 2, groups, self.eps);
            let (w1, w2) = (
                white.clone().slice([0..n, 0..d]),
                white.slice([n..2 * n, 0..d]),
            );
            let cosine = (l2_normalize(w1) * l2_normalize(w2)).sum_dim(1).mean();
            let term = cosine.mul_scalar(-2.0).add_scalar(2.0);
            total = Some(match total {
                Some(t) => t + term,
                None => term,
            });
        }
        total
            .expect("at least one order")
            .mul_scalar(1.0 / orders.len() as f64)
    }
}

/// The rows of `views` views stacked along the first axis (`[V·N, D]`), each view's `N` rows cut
/// into `groups` consecutive sub-batches as equal as possible (the first `N mod groups` one row
/// longer), each sub-batch whitened on its own by [`whiten`].
fn whiten_groups<B: Backend>(
    rows: Tensor<B, 2>,
    views: usize,
    groups: usize,
    eps: f64,
) -> Tensor<B, 2> {
    let [total, d] = rows.dims();
    let n = total / views;
    let (q, r) = (n / groups, n % groups);
    if r == 0 {
        return whiten(rows.reshape([views * groups, q, d]), eps).reshape([total, d]);
    }
    // Sub-batches of q + 1 rows (the first r of each view) and of q rows, each size whitened in
    // one batch, then put back in their places.
    let long = r * (q + 1);
    let part = |range: std::ops::Range<usize>, rows_each: usize, count: usize| {
        let parts: Vec<_> = (0..views)
            .map(|v| {
                rows.clone()
                    .slice([v * n + range.start..v * n + range.end, 0..d])
            })
            .collect();
        whiten(
            Tensor::cat(parts, 0).reshape([views * count, rows_each, d]),
            eps,
        )
        .reshape([views, count * rows_each, d])
    };
    let longer = part(0..long, q + 1, r);
    let shorter = part(long..n, q, groups - r);
    Tensor::cat(vec![longer, shorter], 1).reshape([total, d])
}

/// Cholesky whitening of each group's rows (W-MSE's `Whitening2d`): `X_c L⁻ᵀ` with `X_c` the
/// rows less their mean and `L Lᵀ = (1 − ε) S + ε I`, `S` the unbiased covariance.
///
/// # Shapes
/// - `x`: `[G, n, D]` → `[G, n, D]`
pub(crate) fn whiten<B: Backend>(x: Tensor<B, 3>, eps: f64) -> Tensor<B, 3> {
    let [_, n, d] = x.dims();
    let centred = x.clone() - x.mean_dim(1);
    let covariance = centred
        .clone()
        .swap_dims(1, 2)
        .matmul(centred.clone())
        .mul_scalar(1.0 / (n - 1) as f64);
    let shrunk = if eps > 0.0 {
        let eye = Tensor::<B, 2>::eye(d, &centred.device()).unsqueeze::<3>();
        covariance.mul_scalar(1.0 - eps) + eye.mul_scalar(eps)
    } else {
        covariance
    };
    let inverse = lower_inverse(cholesky(shrunk));
    centred.matmul(inverse.swap_dims(1, 2))
}

/// The lower Cholesky factor `L` of each symmetric positive-definite matrix (`A = L Lᵀ`), one
/// column a step (`v = A_{:,j} − L L_{j,:}ᵀ`, `L_{:,j} = v / √v_j` below the diagonal).
///
/// # Shapes
/// - `a`: `[G, D, D]` → `[G, D, D]`
fn cholesky<B: Backend>(a: Tensor<B, 3>) -> Tensor<B, 3> {
    let [g, d, _] = a.dims();
    let device = a.device();
    let eye = Tensor::<B, 2>::eye(d, &device);
    let index = Tensor::<B, 1, Int>::arange(0..d as i64, &device);
    let mut l = Tensor::<B, 3>::zeros([g, d, d], &device);
    for j in 0..d {
        let row = l.clone().slice([0..g, j..j + 1, 0..d]);
        let v = a.clone().slice([0..g, 0..d, j..j + 1]) - l.clone().matmul(row.swap_dims(1, 2));
        let pivot = v.clone().slice([0..g, j..j + 1, 0..1]).sqrt();
        let below = index
            .clone()
            .greater_equal_elem(j as i64)
            .float()
            .reshape([1, d, 1]);
        let column = v / pivot * below;
        l = l + column * eye.clone().slice([j..j + 1, 0..d]).reshape([1, 1, d]);
    }
    l
}

/// The inverse of each lower-triangular matrix, one row a step (forward substitution against the
/// identity: `W_{i,:} = (e_i − L_{i,:} W) / L_ii`, the rows of `W` below `i` still zero).
///
/// # Shapes
/// - `l`: `[G, D, D]` → `[G, D, D]`
fn lower_inverse<B: Backend>(l: Tensor<B, 3>) -> Tensor<B, 3> {
    let [g, d, _] = l.dims();
    let device = l.device();
    let eye = Tensor::<B, 2>::eye(d, &device);
    let mut w = Tensor::<B, 3>::zeros([g, d, d], &device);
    for i in 0..d {
        let row = l.clone().slice([0..g, i..i + 1, 0..d]);
        let diagonal = l.clone().slice([0..g, i..i + 1, i..i + 1]);
        let e = eye.clone().slice([i..i + 1, 0..d]).reshape([1, 1, d]);
        let solved = (e - row.matmul(w.clone())) / diagonal;
        w = w + eye.clone().slice([0..d, i..i + 1]).reshape([1, d, 1]) * solved;
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, matrix, Ad, B};

    /// Deterministic rows with a full-rank covariance (a sine of the entry's index alone spans
    /// two directions: the residues of `k²` break that).
    fn rows(n: usize, d: usize, shift: f64) -> Vec<f64> {
        (0..n * d)
            .map(|k| (k as f64 * 0.731 + shift).sin() * 1.7 + ((k * k + 3 * k) % 11) as f64 * 0.2)
            .collect()
    }

    /// The factor multiplies back to the matrix, and the inverse times the factor is the
    /// identity (both to rounding: entries of order 1, 1e-12).
    #[test]
    fn cholesky_and_its_inverse_reproduce_the_matrix() {
        let x = matrix::<B>(&rows(9, 4, 0.3), [9, 4]);
        let a = x.clone().transpose().matmul(x).unsqueeze::<3>();
        let l = cholesky(a.clone());
        let back = host(l.clone().matmul(l.clone().swap_dims(1, 2)));
        for (b, e) in back.iter().zip(host(a)) {
            assert!((b - e).abs() < 1e-12, "{b} vs {e}");
        }
        let lv = host(l.clone());
        for i in 0..4 {
            for j in i + 1..4 {
                assert_eq!(lv[i * 4 + j], 0.0, "upper entry ({i}, {j})");
            }
        }
        let identity = host(lower_inverse(l.clone()).matmul(l));
        for i in 0..4 {
            for j in 0..4 {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((identity[i * 4 + j] - want).abs() < 1e-12);
            }
        }
    }

    /// Whitened rows have zero mean and the identity as unbiased covariance (to 1e-12).
    #[test]
    fn whitened_rows_have_zero_mean_and_identity_covariance() {
        let (n, d) = (10, 3);
        let x = matrix::<B>(&rows(n, d, 1.1), [n, d]).unsqueeze::<3>();
        let z = whiten(x, 0.0).squeeze_dim::<2>(0);
        let mean = host(z.clone().mean_dim(0));
        assert!(mean.iter().all(|m| m.abs() < 1e-12), "{mean:?}");
        let cov = host(
            z.clone()
                .transpose()
                .matmul(z)
                .mul_scalar(1.0 / (n - 1) as f64),
        );
        for i in 0..d {
            for j in 0..d {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((cov[i * d + j] - want).abs() < 1e-12, "{cov:?}");
            }
        }
    }

    /// With 11 rows and `w_size` 5: two sub-batches, the order's first 6 rows and its last 5,
    /// each whitened on its own (one [`whiten`] call per sub-batch and view here, against the
    /// batched path), the loss `2 − 2·mean cos` over the 11 images.
    #[test]
    fn uneven_sub_batches_are_whitened_each_on_its_own() {
        let (n, d) = (11, 2);
        let loss = WmseLossConfig::new().with_w_size(5).init().unwrap();
        let (a, b) = (rows(n, d, 0.2), rows(n, d, 2.9));
        let order: Vec<usize> = vec![3, 7, 0, 10, 5, 1, 9, 2, 8, 4, 6];
        let value = host(loss.forward_with_orders(
            matrix::<B>(&a, [n, d]),
            matrix::<B>(&b, [n, d]),
            std::slice::from_ref(&order),
        ))[0];
        let pick = |v: &[f64], idx: &[usize]| -> Tensor<B, 3> {
            let data: Vec<f64> = idx
                .iter()
                .flat_map(|&i| v[i * d..(i + 1) * d].to_vec())
                .collect();
            matrix::<B>(&data, [idx.len(), d]).unsqueeze::<3>()
        };
        let mut cosines = 0.0;
        for idx in [&order[..6], &order[6..]] {
            let (wa, wb) = (
                host(whiten(pick(&a, idx), 0.0)),
                host(whiten(pick(&b, idx), 0.0)),
            );
            for r in 0..idx.len() {
                let (x, y) = (&wa[r * d..(r + 1) * d], &wb[r * d..(r + 1) * d]);
                let dot: f64 = x.iter().zip(y).map(|(p, q)| p * q).sum();
                let norm = |v: &[f64]| v.iter().map(|p| p * p).sum::<f64>().sqrt();
                cosines += dot / (norm(x) * norm(y));
            }
        }
        let want = 2.0 - 2.0 * cosines / n as f64;
        assert!((value - want).abs() < 1e-12, "{value} vs {want}");
    }

    /// The gradient of the loss (through the Cholesky factor and its inverse) against central
    /// finite differences in f64, with shrinkage and two orders (step 1e-6: the loss is smooth
    /// where the covariance is positive definite; 1e-6 relative holds with margin).
    #[test]
    fn gradient_matches_finite_differences() {
        let (n, d) = (8, 3);
        let loss = WmseLossConfig::new()
            .with_w_size(4)
            .with_w_iter(2)
            .with_eps(0.1)
            .init()
            .unwrap();
        let orders = loss.orders(n, 5);
        let (a, b) = (rows(n, d, 0.4), rows(n, d, 1.9));
        let z1 = matrix::<Ad>(&a, [n, d]).require_grad();
        let value = loss.forward_with_orders(z1.clone(), matrix::<Ad>(&b, [n, d]), &orders);
        let grads = value.backward();
        let analytic = host(z1.grad(&grads).unwrap());
        let f = |v: &[f64]| -> f64 {
            host(loss.forward_with_orders(matrix::<B>(v, [n, d]), matrix::<B>(&b, [n, d]), &orders))
                [0]
        };
        assert_matches_finite_differences(f, &a, &analytic, 1e-3, "W-MSE");
    }

    /// The orders are permutations drawn from `(seed, step)`: the same for the same pair, others
    /// for another step or seed.
    #[test]
    fn orders_follow_seed_and_step() {
        let loss = WmseLossConfig::new().with_w_iter(2).init().unwrap();
        let orders = loss.orders(16, 3);
        assert_eq!(orders.len(), 2);
        assert_ne!(orders[0], orders[1]);
        let mut sorted = orders[0].clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>());
        assert_eq!(loss.orders(16, 3), orders);
        assert_ne!(loss.orders(16, 4), orders);
        let other = WmseLossConfig::new()
            .with_w_iter(2)
            .with_seed(1)
            .init()
            .unwrap();
        assert_ne!(other.orders(16, 3), orders);
    }

    /// Bad settings are named.
    #[test]
    fn bad_settings_are_refused_by_name() {
        for (config, field) in [
            (WmseLossConfig::new().with_w_size(1), "w_size"),
            (WmseLossConfig::new().with_w_iter(0), "w_iter"),
            (WmseLossConfig::new().with_eps(1.0), "eps"),
            (WmseLossConfig::new().with_eps(-0.1), "eps"),
        ] {
            let error = config.init().unwrap_err();
            assert!(error.to_string().contains(field), "{error}");
        }
    }
}
