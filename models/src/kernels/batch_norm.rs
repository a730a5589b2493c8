//! Batch normalisation in training as three passes forward and two backward over contiguous
//! NCHW slices, with the moments and the per-channel sums accumulated in f64.
//!
//! Why this file exists: written with burn's tensor operations (`layers::BatchNorm2d`'s
//! composed path), a training batch norm is a mean, a subtraction, a square, a second mean, a
//! scale and a shift forward, each writing a full-size tensor, and about twice as many
//! full-size passes in autodiff's backward; on burn's CPU backend (`Flex`) that was a fifth of a
//! ResNet-18 step. PyTorch fuses it (`native_batch_norm` and its backward). No crate does this
//! for burn's tensors. With `x̂ = (x − μ)·r`, `r = 1/√(σ² + ε)` (biased `σ²`), `M = N·H·W`:
//!
//! - forward: `μ` and `σ²` per channel (two reads of `x`), `y = γ·x̂ + β` (one write);
//! - backward: `S₁ = Σ ∂y`, `S₂ = Σ ∂y·(x − μ)` per channel (one read of `x` and `∂y`), then
//!   `∂β = S₁`, `∂γ = r·S₂` and `∂x = γ·r·(∂y − S₁/M − (x − μ)·r²·S₂/M)` (one write): the
//!   exact gradient through the batch moments, as autodiff derives it from the composed form.
//!
//! Planes (one image's channel, `H·W` contiguous values) are the unit of work: per-plane sums
//! in parallel, then a sum over the images per channel.

use rayon::prelude::*;

use super::gemm::{written_planes, Real};
use super::sums::{lane_sums, Lanes};

/// The sizes of a batch-normalised activation, `[batch, channels, positions]` (`positions` =
/// `H·W`).
pub type Dims = [usize; 3];

/// [`lane_sums`] through [`on_widest`]: for planes of [`WIDEST_FROM`] entries or more, compiled
/// for the widest vectors the CPU has (AVX-512, AVX2, else SSE2), chosen at run time by `pulp`
/// as `kernels::gelu` is ([`LaneSums`]' body is inlined into each width's function). The lanes
/// fix the order of the sums, so every width gives the same bits.
fn widest_lane_sums<T: Real, const K: usize>(
    a: &[T],
    b: &[T],
    f: impl Fn(&Lanes, &Lanes) -> [Lanes; K],
) -> [f64; K] {
    on_widest(a.len(), LaneSums { a, b, f })
}

/// Planes shorter than this run `op` where it is, without choosing a vector width: on the small
/// maps of EfficientNet and MobileNet (1×1 to 4×4, tens of thousands of planes) the choice per
/// plane cost more than the vectors save (EfficientNet-B0's forward + backward at batch 64:
/// 122.7 images/s choosing per plane, 139.7 with this threshold; 2 cores, AVX-512).
const WIDEST_FROM: usize = 256;

/// `op` for a plane of `len` entries, by [`pulp`]'s dispatch from [`WIDEST_FROM`] entries on;
/// both give the same bits (the sums' order is fixed by the lanes, and no fused multiply-add).
#[inline(always)]
fn on_widest<Op: pulp::WithSimd>(len: usize, op: Op) -> Op::Output {
    if len >= WIDEST_FROM {
        pulp::Arch::new().dispatch(op)
    } else {
        op.with_simd(pulp::Scalar::new())
    }
}

/// The arguments of one [`widest_lane_sums`].
struct LaneSums<'a, T, F> {
    a: &'a [T],
    b: &'a [T],
    f: F,
}

impl<T: Real, F: Fn(&Lanes, &Lanes) -> [Lanes; K], const K: usize> pulp::WithSimd
    for LaneSums<'_, T, F>
{
    type Output = [f64; K];
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> [f64; K] {
        lane_sums(self.a, self.b, self.f)
    }
}

/// `out[k] = a·x[k] + b` (forward) or `a·dy[k] + b·x[k] + d` (backward) over one plane, dispatched
/// per vector width as [`LaneSums`]; no fused multiply-add, so every width gives the same bits.
struct Affine<'a, T> {
    out: &'a mut [std::mem::MaybeUninit<T>],
    x: &'a [T],
    /// `∂y` in the backward pass, with its coefficient `coefficients[0]`.
    dy: Option<&'a [T]>,
    coefficients: [T; 3],
}

impl<T: Real> pulp::WithSimd for Affine<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let [a, b, d] = self.coefficients;
        match self.dy {
            None => {
                for (o, &v) in self.out.iter_mut().zip(self.x) {
                    o.write(v * a + b);
                }
            }
            Some(dy) => {
                for ((o, &g), &v) in self.out.iter_mut().zip(dy).zip(self.x) {
                    o.write(a * g + b * v + d);
                }
            }
        }
    }
}

/// Per-plane sums of `f(plane index, plane)`, added over the images: one value per channel.
fn channel_sums<T: Real, const K: usize>(
    x: &[T],
    [n, c, hw]: Dims,
    f: impl Fn(usize, &[T]) -> [f64; K] + Sync,
) -> Vec<[f64; K]> {
    let planes: Vec<[f64; K]> = x[..n * c * hw]
        .par_chunks(hw)
        .enumerate()
        .map(|(i, plane)| f(i, plane))
        .collect();
    let mut sums = vec![[0.0; K]; c];
    for (i, s) in planes.iter().enumerate() {
        for (total, v) in sums[i % c].iter_mut().zip(s) {
            *total += v;
        }
    }
    sums
}

/// The output of [`forward`].
#[derive(Debug, Clone)]
pub struct Normalised<T> {
    /// `γ·x̂ + β`, shaped as the input.
    pub y: Vec<T>,
    /// Per-channel batch mean `μ`.
    pub mean: Vec<f64>,
    /// Per-channel biased batch variance `σ²`.
    pub var: Vec<f64>,
}

/// Normalises `x` with its batch moments and applies `γ`, `β`.
///
/// # Shapes
/// - `x`: `[n, c, positions]`; `gamma`, `beta`: `[c]`
pub fn forward<T: Real>(
    x: &[T],
    dims: Dims,
    gamma: &[T],
    beta: &[T],
    epsilon: f64,
) -> Normalised<T> {
    let [n, c, hw] = dims;
    assert_eq!(x.len(), n * c * hw, "batch norm: input length for {dims:?}");
    assert!(
        gamma.len() == c && beta.len() == c,
        "batch norm: {c} channels"
    );
    let count = (n * hw) as f64;
    let mean: Vec<f64> = channel_sums(x, dims, |_, p| widest_lane_sums(p, p, |v, _| [*v]))
        .into_iter()
        .map(|[s]| s / count)
        .collect();
    let var: Vec<f64> = channel_sums(x, dims, |i, p| {
        let m = mean[i % c];
        widest_lane_sums(p, p, |v, _| [v.map(|v| (v - m) * (v - m))])
    })
    .into_iter()
    .map(|[s]| s / count)
    .collect();
    // y = x·a + b per channel, a = γ·r, b = β − μ·a.
    let a: Vec<f64> = (0..c)
        .map(|k| gamma[k].to_f64() / (var[k] + epsilon).sqrt())
        .collect();
    let b: Vec<f64> = (0..c).map(|k| beta[k].to_f64() - mean[k] * a[k]).collect();
    // SAFETY: each plane of `y` is zipped with the plane of `x` of the same length (`hw`), every
    // entry written once.
    let y = unsafe {
        written_planes(x.len(), hw, |i, out| {
            let coefficients = [T::from_f64(a[i % c]), T::from_f64(b[i % c]), T::default()];
            let x = &x[i * hw..(i + 1) * hw];
            on_widest(
                hw,
                Affine {
                    out,
                    x,
                    dy: None,
                    coefficients,
                },
            );
        })
    };
    Normalised { y, mean, var }
}

/// The gradients of [`forward`]'s output with respect to its inputs, each when asked for.
#[derive(Debug, Clone)]
pub struct Gradients<T> {
    /// `∂x`, shaped as the input.
    pub x: Option<Vec<T>>,
    /// `∂γ`, per channel.
    pub gamma: Option<Vec<T>>,
    /// `∂β`, per channel.
    pub beta: Option<Vec<T>>,
}

/// The gradients (`∂x`, `∂γ`, `∂β`) of [`forward`] given `∂y`, each when wanted (in that order).
///
/// # Shapes
/// - `x`, `grad`: `[n, c, positions]`; `gamma`, `mean`, `var`: `[c]`
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Real>(
    x: &[T],
    grad: &[T],
    dims: Dims,
    gamma: &[T],
    mean: &[f64],
    var: &[f64],
    epsilon: f64,
    (want_x, want_gamma, want_beta): (bool, bool, bool),
) -> Gradients<T> {
    let [n, c, hw] = dims;
    assert!(
        x.len() == n * c * hw && grad.len() == x.len(),
        "batch norm: lengths for {dims:?}"
    );
    let count = (n * hw) as f64;
    // S₁ and S₂ in one read of ∂y and x.
    let sums = channel_sums(grad, dims, |i, p| {
        let m = mean[i % c];
        let plane = &x[i * hw..(i + 1) * hw];
        widest_lane_sums(p, plane, |d, v| {
            [*d, std::array::from_fn(|l| d[l] * (v[l] - m))]
        })
    });
    let (s1, s2): (Vec<f64>, Vec<f64>) = sums.into_iter().map(|[a, b]| (a, b)).unzip();
    let r: Vec<f64> = var.iter().map(|v| 1.0 / (v + epsilon).sqrt()).collect();
    let dx = want_x.then(|| {
        // ∂x = A·∂y + B·x + D per channel: A = γ·r, B = −A·r²·S₂/M, D = −A·S₁/M − B·μ.
        let coefficients: Vec<[T; 3]> = (0..c)
            .map(|k| {
                let a = gamma[k].to_f64() * r[k];
                let b = -a * r[k] * r[k] * s2[k] / count;
                let d = -a * s1[k] / count - b * mean[k];
                [T::from_f64(a), T::from_f64(b), T::from_f64(d)]
            })
            .collect();
        // SAFETY: each plane of `∂x` is zipped with the planes of `∂y` and `x` of the same
        // length (`hw`), every entry written once.
        unsafe {
            written_planes(x.len(), hw, |i, out| {
                let (dy, x) = (&grad[i * hw..(i + 1) * hw], &x[i * hw..(i + 1) * hw]);
                on_widest(
                    hw,
                    Affine {
                        out,
                        x,
                        dy: Some(dy),
                        coefficients: coefficients[i % c],
                    },
                );
            })
        }
    });
    let dgamma = want_gamma.then(|| (0..c).map(|k| T::from_f64(r[k] * s2[k])).collect());
    let dbeta = want_beta.then(|| s1.iter().map(|&s| T::from_f64(s)).collect());
    Gradients {
        x: dx,
        gamma: dgamma,
        beta: dbeta,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kernels::gemm::test_values as values;

    /// Batch norm by its definition, one channel at a time.
    fn direct(x: &[f64], [n, c, hw]: Dims, gamma: &[f64], beta: &[f64], eps: f64) -> Vec<f64> {
        let mut y = vec![0.0; x.len()];
        for k in 0..c {
            let idx = |b: usize, p: usize| (b * c + k) * hw + p;
            let all: Vec<f64> = (0..n)
                .flat_map(|b| (0..hw).map(move |p| (b, p)))
                .map(|(b, p)| x[idx(b, p)])
                .collect();
            let m = all.iter().sum::<f64>() / all.len() as f64;
            let v = all.iter().map(|a| (a - m).powi(2)).sum::<f64>() / all.len() as f64;
            for b in 0..n {
                for p in 0..hw {
                    y[idx(b, p)] = gamma[k] * (x[idx(b, p)] - m) / (v + eps).sqrt() + beta[k];
                }
            }
        }
        y
    }

    const DIMS: [Dims; 3] = [[2, 3, 5], [1, 2, 7], [4, 1, 1]];

    #[test]
    fn forward_equals_the_definition() {
        for dims in DIMS {
            let len = dims.iter().product();
            let (x, g, b) = (values(len, 1), values(dims[1], 2), values(dims[1], 3));
            let out = forward(&x, dims, &g, &b, 1e-5);
            for (p, q) in out.y.iter().zip(direct(&x, dims, &g, &b, 1e-5)) {
                assert!((p - q).abs() < 1e-12, "{dims:?}: {p} against {q}");
            }
        }
    }

    /// Every gradient entry of `L = Σ y ⊙ w` against central differences of the definition,
    /// h = 1e-6: truncation O(h²) and rounding O(ε/h) ≈ 1e-10 in f64; 1e-7 is above both and
    /// far below a missing term (the moments' terms are O(1/M) of the gradient, ≥ 1e-2 here).
    #[test]
    fn gradients_equal_finite_differences() {
        let eps = 1e-5;
        for dims in DIMS {
            let len: usize = dims.iter().product();
            let (x, g, b) = (values(len, 4), values(dims[1], 5), values(dims[1], 6));
            let w = values(len, 7);
            let loss = |x: &[f64], g: &[f64], b: &[f64]| {
                direct(x, dims, g, b, eps)
                    .iter()
                    .zip(&w)
                    .map(|(y, w)| y * w)
                    .sum::<f64>()
            };
            let out = forward(&x, dims, &g, &b, eps);
            let grads = backward(
                &x,
                &w,
                dims,
                &g,
                &out.mean,
                &out.var,
                eps,
                (true, true, true),
            );
            let (dx, dg, db) = (grads.x.unwrap(), grads.gamma.unwrap(), grads.beta.unwrap());
            let h = 1e-6;
            let fd = |f: &dyn Fn(f64) -> f64| (f(h) - f(-h)) / (2.0 * h);
            for k in 0..len {
                let e = fd(&|d| {
                    let mut x = x.clone();
                    x[k] += d;
                    loss(&x, &g, &b)
                });
                assert!(
                    (e - dx[k]).abs() < 1e-7,
                    "{dims:?} ∂x[{k}]: {} against {e}",
                    dx[k]
                );
            }
            for k in 0..dims[1] {
                let e = fd(&|d| {
                    let mut g = g.clone();
                    g[k] += d;
                    loss(&x, &g, &b)
                });
                assert!((e - dg[k]).abs() < 1e-7, "{dims:?} ∂γ[{k}]");
                let e = fd(&|d| {
                    let mut b = b.clone();
                    b[k] += d;
                    loss(&x, &g, &b)
                });
                assert!((e - db[k]).abs() < 1e-7, "{dims:?} ∂β[{k}]");
            }
        }
    }
}
