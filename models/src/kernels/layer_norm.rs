//! Layer norm's backward pass over rows, `y = γ·x̂ + β` with `x̂ = (x − μ)·r`, `μ` and
//! `r = 1/√(σ² + ε)` the mean and inverse deviation of each row (the last axis):
//!
//! - `∂x = r·(g − mean(g) − x̂·mean(g·x̂))` with `g = ∂y·γ`, per row;
//! - `∂γ = Σ_rows ∂y·x̂`, `∂β = Σ_rows ∂y`.
//!
//! Why this file exists: burn 0.21's autodiff has no rule of its own for `layer_norm`, so under
//! autodiff the backend's fused forward is not used and the norm runs as its composed form
//! (mean, centring, square, mean, square root, division, scale, shift), each a full pass and
//! each with its own backward rule: about a dozen serial passes over a ViT's activations per
//! norm, which burn's CPU backend runs on one core below 4 M values. Here the backward is one
//! row-parallel pass (the forward is burn's own fused `layer_norm`); each row's `μ` and `r` are
//! recomputed from the kept input (two sums over a row in cache), as PyTorch keeps them.
//!
//! And the residual add a norm follows in a pre-norm transformer, with the norm, as one forward
//! pass ([`add_forward`]): the sum and its norm written together, row by row on every core.
//!
//! Sums are taken in f64 (in eight lanes, `sums.rs`); the rows go to the threads in tasks of
//! [`ROWS_PER_TASK`], and the tasks' partial `∂γ`, `∂β` are added in task order, so the result
//! is the same bits for any number of threads.

use rayon::prelude::*;

use super::gemm::Real;
use super::sums::lane_sums;

/// Rows per parallel task: fixed (not a function of the thread count), so `∂γ` and `∂β` are
/// added in the same order on any machine.
pub const ROWS_PER_TASK: usize = 32;

/// Gradients of a layer norm.
#[derive(Debug, Clone)]
pub struct Grads<T> {
    /// `∂x`, shaped as the input.
    pub dx: Vec<T>,
    /// `∂γ`, `[d]`.
    pub dgamma: Vec<T>,
    /// `∂β`, `[d]`.
    pub dbeta: Vec<T>,
}

/// The mean and the inverse deviation `1/√(σ² + ε)` of a row (two passes, biased `σ²`).
pub fn row_moments<T: Real>(row: &[T], epsilon: f64) -> (f64, f64) {
    let d = row.len() as f64;
    let [sum] = lane_sums(row, row, |v, _| [*v]);
    let mean = sum / d;
    let [squares] = lane_sums(row, row, |v, _| [v.map(|v| (v - mean) * (v - mean))]);
    (mean, 1.0 / (squares / d + epsilon).sqrt())
}

/// The residual stream's next value `s = x + b` and its layer norm `y = γ·ŝ + β`, one pass over
/// each row: what a pre-norm transformer block does at every residual add a norm follows
/// (`x + attn(·)` before the MLP's norm, `x + mlp(·)` before the next block's norm or the final
/// one). Composed, burn writes `s` in one pass (on one core below 4 M values) and the norm reads
/// it back; here a row of `s` is written and normed while it is in cache, on every core.
///
/// `s` is added in the values' own type (as burn's add: the same bits), the moments of each row
/// in f64 as [`row_moments`] and [`backward`] take them.
///
/// # Shapes
/// - `x`, `branch`, both outputs: `[rows, d]` (row-major); `gamma`, `beta`: `[d]`
pub fn add_forward<T: Real>(
    x: &[T],
    branch: &[T],
    gamma: &[T],
    beta: &[T],
    epsilon: f64,
) -> (Vec<T>, Vec<T>) {
    let d = gamma.len();
    assert!(d > 0, "layer norm: an empty last axis");
    assert_eq!(x.len() % d, 0, "layer norm: input length for rows of {d}");
    assert_eq!(
        x.len(),
        branch.len(),
        "residual add: the two sides' lengths"
    );
    assert_eq!(beta.len(), d, "layer norm: β length");
    let gamma64: Vec<f64> = gamma.iter().map(|g| g.to_f64()).collect();
    let beta64: Vec<f64> = beta.iter().map(|b| b.to_f64()).collect();
    let (mut sum, mut y) = (vec![T::default(); x.len()], vec![T::default(); x.len()]);
    let task = ROWS_PER_TASK * d;
    sum.par_chunks_mut(task)
        .zip(y.par_chunks_mut(task))
        .zip(x.par_chunks(task).zip(branch.par_chunks(task)))
        .for_each(|((sum, y), (x, branch))| {
            let rows = sum.chunks_mut(d).zip(y.chunks_mut(d));
            for ((s, y), (x, b)) in rows.zip(x.chunks(d).zip(branch.chunks(d))) {
                for j in 0..d {
                    s[j] = x[j] + b[j];
                }
                let (mean, r) = row_moments(s, epsilon);
                for j in 0..d {
                    y[j] = T::from_f64((s[j].to_f64() - mean) * r * gamma64[j] + beta64[j]);
                }
            }
        });
    (sum, y)
}

/// The gradients of `y = LayerNorm(x)` (over the last axis, of length `gamma.len()`) given
/// `∂y`.
///
/// # Shapes
/// - `x`, `dy`: `[rows, d]` (row-major, any leading shape flattened); `gamma`: `[d]`
pub fn backward<T: Real>(x: &[T], gamma: &[T], dy: &[T], epsilon: f64) -> Grads<T> {
    let d = gamma.len();
    assert!(d > 0, "layer norm: an empty last axis");
    assert_eq!(x.len() % d, 0, "layer norm: input length for rows of {d}");
    assert_eq!(x.len(), dy.len(), "layer norm: ∂y length");
    let gamma64: Vec<f64> = gamma.iter().map(|g| g.to_f64()).collect();
    let mut dx = vec![T::default(); x.len()];
    let task = ROWS_PER_TASK * d;
    let partials: Vec<(Vec<f64>, Vec<f64>)> = dx
        .par_chunks_mut(task)
        .zip(x.par_chunks(task))
        .zip(dy.par_chunks(task))
        .map(|((dx, x), dy)| {
            let (mut dgamma, mut dbeta) = (vec![0.0; d], vec![0.0; d]);
            // This row's `x̂` and `g = ∂y·γ`, in f64.
            let (mut x_hat, mut g) = (vec![0.0; d], vec![0.0; d]);
            for ((dx, x), dy) in dx.chunks_mut(d).zip(x.chunks(d)).zip(dy.chunks(d)) {
                let (mean, r) = row_moments(x, epsilon);
                for j in 0..d {
                    x_hat[j] = (x[j].to_f64() - mean) * r;
                    g[j] = dy[j].to_f64() * gamma64[j];
                }
                let [sum_g, sum_gx] = lane_sums(&x_hat, &g, |x_hat, g| {
                    [*g, std::array::from_fn(|l| g[l] * x_hat[l])]
                });
                let (mean_g, mean_gx) = (sum_g / d as f64, sum_gx / d as f64);
                for j in 0..d {
                    dx[j] = T::from_f64(r * (g[j] - mean_g - x_hat[j] * mean_gx));
                    let dyj = dy[j].to_f64();
                    dgamma[j] += dyj * x_hat[j];
                    dbeta[j] += dyj;
                }
            }
            (dgamma, dbeta)
        })
        .collect();
    let (mut dgamma, mut dbeta) = (vec![0.0; d], vec![0.0; d]);
    for (pg, pb) in &partials {
        for j in 0..d {
            dgamma[j] += pg[j];
            dbeta[j] += pb[j];
        }
    }
    Grads {
        dx,
        dgamma: dgamma.into_iter().map(T::from_f64).collect(),
        dbeta: dbeta.into_iter().map(T::from_f64).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::test_values as values;

    /// The layer norm of `x` by its definition, in f64.
    fn forward(x: &[f64], gamma: &[f64], beta: &[f64], epsilon: f64) -> Vec<f64> {
        let d = gamma.len();
        x.chunks(d)
            .flat_map(|row| {
                let mean = row.iter().sum::<f64>() / d as f64;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
                let r = 1.0 / (var + epsilon).sqrt();
                (0..d)
                    .map(|j| (row[j] - mean) * r * gamma[j] + beta[j])
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// `⟨∂y, y⟩` by central differences against the backward's gradients, for every entry of
    /// `x`, `γ` and `β`: in f64 with a step of 1e-5 the difference's error is O(h²·y''') ≈
    /// 1e-10 on these unit-scale values, far below the 1e-7 asked.
    #[test]
    fn gradients_equal_central_differences() {
        // 67 rows: two full tasks and a short one; d = 13 leaves a remainder after the lanes.
        let (rows, d, eps) = (67, 13, 1e-5);
        let x = values(rows * d, 1);
        let gamma: Vec<f64> = values(d, 2).iter().map(|v| 1.0 + v).collect();
        let beta = values(d, 3);
        let dy = values(rows * d, 4);
        let grads = backward(&x, &gamma, &dy, eps);
        let loss = |x: &[f64], g: &[f64], b: &[f64]| -> f64 {
            forward(x, g, b, eps)
                .iter()
                .zip(&dy)
                .map(|(y, w)| y * w)
                .sum()
        };
        let h = 1e-5;
        let check = |ours: &[f64], base: &[f64], which: usize| {
            for k in (0..base.len()).step_by(7) {
                let (mut plus, mut minus) = (base.to_vec(), base.to_vec());
                plus[k] += h;
                minus[k] -= h;
                let (lp, lm) = match which {
                    0 => (loss(&plus, &gamma, &beta), loss(&minus, &gamma, &beta)),
                    1 => (loss(&x, &plus, &beta), loss(&x, &minus, &beta)),
                    _ => (loss(&x, &gamma, &plus), loss(&x, &gamma, &minus)),
                };
                let fd = (lp - lm) / (2.0 * h);
                assert!(
                    (ours[k] - fd).abs() < 1e-7,
                    "{which}[{k}]: {} against {fd}",
                    ours[k]
                );
            }
        };
        check(&grads.dx, &x, 0);
        check(&grads.dgamma, &gamma, 1);
        check(&grads.dbeta, &beta, 2);
    }

    /// The fused residual add and norm against its definition in f64: `s` is `x + b` to the bit
    /// (one rounding, as a separate add), `y` the norm of `s` to 1e-14 (the moments' sums in
    /// another order: a few ulps of values of unit scale); a wrong `y` (the wrong row's moments,
    /// `β` left out) is off by 1e-2 or more.
    #[test]
    fn the_residual_add_and_its_norm_equal_the_definition() {
        let (rows, d, eps) = (2 * ROWS_PER_TASK + 5, 13, 1e-6);
        let x = values(rows * d, 11);
        let b = values(rows * d, 12);
        let gamma: Vec<f64> = values(d, 13).iter().map(|v| 1.0 + v).collect();
        let beta = values(d, 14);
        let (s, y) = add_forward(&x, &b, &gamma, &beta, eps);
        let want_s: Vec<f64> = x.iter().zip(&b).map(|(x, b)| x + b).collect();
        assert_eq!(s, want_s);
        let want_y = forward(&want_s, &gamma, &beta, eps);
        let err = y
            .iter()
            .zip(&want_y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-14, "y: {err}");
        // f32 through the same code: the same bits on one thread and on four.
        let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        let (x, b, gamma, beta) = (f(&x), f(&b), f(&gamma), f(&beta));
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| add_forward(&x, &b, &gamma, &beta, eps))
        };
        let bits = |(s, y): (Vec<f32>, Vec<f32>)| {
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            (bits(s), bits(y))
        };
        assert_eq!(bits(on(1)), bits(on(4)));
    }

    /// The same bits on one thread and on four: the rows are split into tasks of a fixed size
    /// and the tasks' partial `∂γ`, `∂β` added in task order.
    #[test]
    fn the_same_bits_for_any_thread_count() {
        let (rows, d) = (5 * ROWS_PER_TASK + 7, 24);
        let x: Vec<f32> = values(rows * d, 5).iter().map(|&v| v as f32).collect();
        let gamma: Vec<f32> = values(d, 6).iter().map(|&v| 1.0 + v as f32).collect();
        let dy: Vec<f32> = values(rows * d, 7).iter().map(|&v| v as f32).collect();
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| backward(&x, &gamma, &dy, 1e-5))
        };
        let (one, four) = (on(1), on(4));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one.dx), bits(&four.dx));
        assert_eq!(bits(&one.dgamma), bits(&four.dgamma));
        assert_eq!(bits(&one.dbeta), bits(&four.dbeta));
    }
}
