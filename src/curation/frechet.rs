//! The Fréchet distance between two batches of embeddings, on the host in `f64` and on the
//! device by Newton–Schulz iterations. The definition, the stable trace of the root, the worked
//! values and the accuracy are documented on the parent module's page (`curation`).

// Why `nalgebra`: the host path needs a symmetric eigendecomposition in `f64`. `nalgebra`
// (`SymmetricEigen`: Householder tridiagonalisation and implicit QR with Wilkinson shifts) is
// maintained, pure Rust — no BLAS or LAPACK to install, so CI and every backend build keep
// working offline — and with its default features off (only `std`, which brings
// `matrixmultiply` for the products) it is a small build. `faer` is faster on large matrices but
// a much larger dependency, and `ndarray-linalg` needs a system LAPACK. The matrices here are at
// most `min(N, D)` wide, a few hundred for batch sizes used in practice.

use burn::prelude::*;
use burn::tensor::DType;
use nalgebra::{DMatrix, SymmetricEigen};

use crate::base::error::{positive, ConfigError};

/// Why a Fréchet distance could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrechetError {
    /// The two batches do not have the same `[N, D]` shape.
    #[error("the two batches must have the same shape, got {first:?} and {second:?}")]
    ShapeMismatch {
        /// `[N, D]` of the first batch.
        first: [usize; 2],
        /// `[N, D]` of the second batch.
        second: [usize; 2],
    },
    /// A host slice does not hold `N·D` values.
    #[error("`{which}` holds {len} values, but {n} rows of {d} need {expected}")]
    Length {
        /// Which argument (`x1` or `x2`).
        which: &'static str,
        /// Its length.
        len: usize,
        /// Rows given.
        n: usize,
        /// Columns given.
        d: usize,
        /// `n·d`, or `usize::MAX` when that overflows.
        expected: usize,
    },
    /// Fewer than two embeddings per batch: the covariance (normalised by `N − 1`) is undefined.
    #[error("a covariance needs at least 2 embeddings per batch, got {n}")]
    TooFewSamples {
        /// Rows given.
        n: usize,
    },
    /// Embeddings of dimension 0.
    #[error("the embeddings have no dimensions (D = 0)")]
    NoDimensions,
    /// An input value (or, on the device, the result) is NaN or infinite.
    #[error("{which} is not finite")]
    NonFinite {
        /// What was not finite (`x1`, `x2`, an intermediate matrix, or the result).
        which: &'static str,
    },
    /// The eigendecomposition did not converge within its iteration bound.
    #[error("the symmetric eigendecomposition of a {dim}×{dim} matrix did not converge")]
    NoConvergence {
        /// Size of the matrix.
        dim: usize,
    },
}

/// The shape checks both implementations share; returns the shape `[N, D]` both have.
fn check_shape(first: [usize; 2], second: [usize; 2]) -> Result<[usize; 2], FrechetError> {
    if first != second {
        return Err(FrechetError::ShapeMismatch { first, second });
    }
    let [n, d] = first;
    if n < 2 {
        return Err(FrechetError::TooFewSamples { n });
    }
    if d == 0 {
        return Err(FrechetError::NoDimensions);
    }
    Ok(first)
}

/// Fréchet distance between two batches given as row-major `N × D` slices (row `i` is embedding
/// `i`), computed in `f64` with a symmetric eigendecomposition.
///
/// Errors: a slice whose length is not `n·d`, `n < 2`, `d = 0`, or a value that is not finite.
///
/// ```
/// use curriculum_ssl::curation::frechet_distance_host;
///
/// // One dimension: N(1, 4) against N(3, 1) (unbiased variances), distance (1 − 3)² + (2 − 1)².
/// let d = frechet_distance_host(&[3.0, -1.0, 1.0], &[4.0, 2.0, 3.0], 3, 1).unwrap();
/// assert!((d - 5.0).abs() < 1e-12);
/// ```
pub fn frechet_distance_host(
    x1: &[f64],
    x2: &[f64],
    n: usize,
    d: usize,
) -> Result<f64, FrechetError> {
    for (which, x) in [("x1", x1), ("x2", x2)] {
        let expected = n.checked_mul(d);
        if expected != Some(x.len()) {
            return Err(FrechetError::Length {
                which,
                len: x.len(),
                n,
                d,
                expected: expected.unwrap_or(usize::MAX),
            });
        }
    }
    check_shape([n, d], [n, d])?;
    for (which, x) in [("x1", x1), ("x2", x2)] {
        if !x.iter().all(|v| v.is_finite()) {
            return Err(FrechetError::NonFinite { which });
        }
    }
    let (mu1, a1) = centred(x1, n, d);
    let (mu2, a2) = centred(x2, n, d);
    let mean_term: f64 = mu1.iter().zip(&mu2).map(|(a, b)| (a - b) * (a - b)).sum();
    let trace1 = a1.norm_squared();
    let trace2 = a2.norm_squared();
    let trace_root = if n <= d {
        trace_sqrt_gram(&a1, &a2)?
    } else {
        trace_sqrt_symmetric(&a1, &a2)?
    };
    let distance = mean_term + trace1 + trace2 - 2.0 * trace_root;
    if distance.is_finite() {
        Ok(distance)
    } else {
        Err(FrechetError::NonFinite {
            which: "the result",
        })
    }
}

/// [`frechet_distance_host`] of two `[N, D]` tensors, read back from the device and converted to
/// `f64` first (any float type).
pub fn frechet_distance_readback<B: Backend>(
    x1: Tensor<B, 2>,
    x2: Tensor<B, 2>,
) -> Result<f64, FrechetError> {
    let [n, d] = check_shape(x1.dims(), x2.dims())?;
    let host1: Vec<f64> = x1.into_data().iter::<f64>().collect();
    let host2: Vec<f64> = x2.into_data().iter::<f64>().collect();
    frechet_distance_host(&host1, &host2, n, d)
}

/// The mean of each column and the centred, scaled rows `(X − 1μᵀ)/√(N − 1)` as an `N × D`
/// matrix, so that `AᵀA` is the unbiased covariance.
fn centred(x: &[f64], n: usize, d: usize) -> (Vec<f64>, DMatrix<f64>) {
    let mut mean = vec![0.0; d];
    for row in x.chunks_exact(d) {
        for (m, v) in mean.iter_mut().zip(row) {
            *m += v;
        }
    }
    for m in &mut mean {
        *m /= n as f64;
    }
    let scale = 1.0 / ((n - 1) as f64).sqrt();
    let a = DMatrix::from_fn(n, d, |i, j| (x[i * d + j] - mean[j]) * scale);
    (mean, a)
}

/// `Tr((Σ1 Σ2)^{1/2})` through `M = √Σ1 Σ2 √Σ1` (`D × D`).
fn trace_sqrt_symmetric(a1: &DMatrix<f64>, a2: &DMatrix<f64>) -> Result<f64, FrechetError> {
    let sigma1 = a1.tr_mul(a1);
    let sigma2 = a2.tr_mul(a2);
    let eigen = symmetric_eigen(sigma1, "the first covariance")?;
    let roots = eigen.eigenvalues.map(|l| l.max(0.0).sqrt());
    let v = &eigen.eigenvectors;
    // √Σ1 = V diag(√λ) Vᵀ: scale the columns of V, then multiply by Vᵀ.
    let mut scaled = v.clone();
    for (mut column, r) in scaled.column_iter_mut().zip(roots.iter()) {
        column *= *r;
    }
    let root1 = &scaled * v.transpose();
    let m = &root1 * sigma2 * &root1;
    sum_sqrt_eigenvalues(m, "√Σ1 Σ2 √Σ1")
}

/// `Tr((Σ1 Σ2)^{1/2})` through `G = C Cᵀ`, `C = A2 A1ᵀ` (`N × N`).
fn trace_sqrt_gram(a1: &DMatrix<f64>, a2: &DMatrix<f64>) -> Result<f64, FrechetError> {
    let c = a2 * a1.transpose();
    let g = &c * c.transpose();
    sum_sqrt_eigenvalues(g, "C Cᵀ")
}

/// `Σᵢ √max(λᵢ, 0)` over the eigenvalues of the symmetric part of `m`.
fn sum_sqrt_eigenvalues(m: DMatrix<f64>, what: &'static str) -> Result<f64, FrechetError> {
    let symmetric = symmetrise_host(m, what)?;
    // Eigenvalues only: skipping the eigenvectors makes this step about four times faster
    // (5 ms instead of 22 ms at 256 × 256). nalgebra bounds no iteration here, but implicit
    // symmetric QR with Wilkinson shifts always converges on a finite matrix, which
    // `symmetrise_host` has checked.
    Ok(symmetric
        .symmetric_eigenvalues()
        .iter()
        .map(|l| l.max(0.0).sqrt())
        .sum())
}

/// `(m + mᵀ)/2` (removing rounding asymmetry), checked to be finite: the QR iterations of the
/// eigendecomposition would not end otherwise.
fn symmetrise_host(m: DMatrix<f64>, what: &'static str) -> Result<DMatrix<f64>, FrechetError> {
    let symmetric = (&m + m.transpose()) * 0.5;
    if symmetric.iter().all(|v| v.is_finite()) {
        Ok(symmetric)
    } else {
        Err(FrechetError::NonFinite { which: what })
    }
}

/// The eigenvalues and eigenvectors of the symmetric part of `m`, with a bound on the iterations.
fn symmetric_eigen(
    m: DMatrix<f64>,
    what: &'static str,
) -> Result<SymmetricEigen<f64, nalgebra::Dyn>, FrechetError> {
    let dim = m.nrows();
    let symmetric = symmetrise_host(m, what)?;
    // Implicit QR deflates an eigenvalue every few sweeps; 100 per dimension is far beyond what
    // a finite symmetric matrix needs and only guards against a loop without end.
    SymmetricEigen::try_new(symmetric, f64::EPSILON, 100 * dim.max(1))
        .ok_or(FrechetError::NoConvergence { dim })
}

/// Configuration of the on-device [`NewtonSchulz`] square root.
///
/// Coupled Newton–Schulz iterations for `√A` of a symmetric positive semi-definite `A`: with
/// `Y₀ = A/‖A‖_F` and `Z₀ = I`, repeat `T = (3I − ZₖYₖ)/2`, `Yₖ₊₁ = Yₖ T`, `Zₖ₊₁ = T Zₖ`; then
/// `Yₖ → √(A/‖A‖_F)` and `√A = √‖A‖_F · Yₖ`. Dividing by the Frobenius norm puts every eigenvalue
/// in `[0, 1]`, inside the region where the iteration converges. An eigenvalue `λ` of the
/// normalised matrix converges quadratically once it is near 1 and, before that, grows by a factor
/// of about 2.25 per iteration, so it needs about `ln(1/λ)/ln 2.25 + 5` iterations: 50 reach
/// normalised eigenvalues down to about `10⁻¹⁵`, the resolution of `f64`.
#[derive(Config, Debug)]
pub struct NewtonSchulzConfig {
    /// Most iterations of each square root (default 50).
    #[config(default = 50)]
    pub max_iterations: usize,
    /// Stop when the trace of the iterate changes by at most this, relative to the trace:
    /// `|tr Yₖ − tr Yₖ₋₁| ≤ tolerance·|tr Yₖ|`. Convergence is quadratic, so the error left is of
    /// the order of the square of this. `None` (the default) picks it from the precision of the
    /// tensors' float type: `1e-10` for `f64`, `1e-5` for `f32`, `1e-2` for half precision.
    #[config(default = "None")]
    pub tolerance: Option<f64>,
}

impl NewtonSchulzConfig {
    /// Validates the settings: at least one iteration, and a tolerance that is finite and `> 0`.
    pub fn init(&self) -> Result<NewtonSchulz, ConfigError> {
        if self.max_iterations == 0 {
            return Err(ConfigError::new(
                "max_iterations",
                "must be at least 1, got 0",
            ));
        }
        if let Some(tolerance) = self.tolerance {
            positive("tolerance", tolerance)?;
        }
        Ok(NewtonSchulz {
            max_iterations: self.max_iterations,
            tolerance: self.tolerance,
        })
    }
}

/// The on-device Fréchet distance, with matrix square roots by Newton–Schulz iterations. Build it
/// with [`NewtonSchulzConfig::init`] (or [`Default`] for the default settings).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewtonSchulz {
    max_iterations: usize,
    tolerance: Option<f64>,
}

impl Default for NewtonSchulz {
    fn default() -> Self {
        NewtonSchulzConfig::new()
            .init()
            .expect("the default settings are valid")
    }
}

impl NewtonSchulz {
    /// The Fréchet distance between two `[N, D]` batches, computed on their device in their float
    /// type; returns it as `f64`.
    ///
    /// Errors: different shapes, `N < 2`, `D = 0`, or a result that is not finite (a non-finite
    /// input, or an overflow in the float type).
    pub fn frechet_distance<B: Backend>(
        &self,
        x1: Tensor<B, 2>,
        x2: Tensor<B, 2>,
    ) -> Result<f64, FrechetError> {
        let [n, d] = check_shape(x1.dims(), x2.dims())?;
        let tolerance = self.tolerance.unwrap_or(match x1.dtype() {
            DType::F64 => 1e-10,
            DType::F16 | DType::BF16 => 1e-2,
            _ => 1e-5,
        });
        let scale = 1.0 / ((n - 1) as f64).sqrt();
        let mu1 = x1.clone().mean_dim(0);
        let mu2 = x2.clone().mean_dim(0);
        let a1 = (x1 - mu1.clone()).mul_scalar(scale);
        let a2 = (x2 - mu2.clone()).mul_scalar(scale);
        let terms = Tensor::cat(
            vec![
                (mu1 - mu2).square().sum(),
                a1.clone().square().sum(),
                a2.clone().square().sum(),
            ],
            0,
        );
        let trace_root = if n <= d {
            let c = a2.matmul(a1.transpose());
            let g = c.clone().matmul(c.transpose());
            self.sqrt(symmetrise(g), tolerance).trace
        } else {
            let sigma1 = a1.clone().transpose().matmul(a1);
            let sigma2 = a2.clone().transpose().matmul(a2);
            let root1 = self.sqrt(symmetrise(sigma1), tolerance).root;
            let m = root1.clone().matmul(sigma2).matmul(root1);
            self.sqrt(symmetrise(m), tolerance).trace
        };
        let terms: Vec<f64> = terms.into_data().iter::<f64>().collect();
        let distance = terms[0] + terms[1] + terms[2] - 2.0 * trace_root;
        if distance.is_finite() {
            Ok(distance)
        } else {
            Err(FrechetError::NonFinite {
                which: "the result (an input value is not finite, or the float type overflowed)",
            })
        }
    }

    /// `√A` and its trace for a symmetric positive semi-definite `A` (`k × k`).
    fn sqrt<B: Backend>(&self, a: Tensor<B, 2>, tolerance: f64) -> SquareRoot<B> {
        let [k, _] = a.dims();
        let device = a.device();
        let norm = a.clone().square().sum().sqrt().into_scalar().elem::<f64>();
        if norm == 0.0 || !norm.is_finite() {
            // The zero matrix is its own root; a non-finite norm propagates to the result, which
            // the caller reports.
            return SquareRoot {
                root: a,
                trace: if norm == 0.0 { 0.0 } else { f64::NAN },
            };
        }
        let eye = Tensor::<B, 2>::eye(k, &device);
        let three_eye = eye.clone().mul_scalar(3.0);
        let mut y = a.div_scalar(norm);
        let mut z = eye.clone();
        let mut trace = f64::NAN;
        for _ in 0..self.max_iterations {
            let t = (three_eye.clone() - z.clone().matmul(y.clone())).mul_scalar(0.5);
            y = y.matmul(t.clone());
            z = t.matmul(z);
            let next = (y.clone() * eye.clone()).sum().into_scalar().elem::<f64>();
            let done = (next - trace).abs() <= tolerance * next.abs() || !next.is_finite();
            trace = next;
            if done {
                break;
            }
        }
        let scale = norm.sqrt();
        SquareRoot {
            root: y.mul_scalar(scale),
            trace: trace * scale,
        }
    }
}

/// A matrix square root from [`NewtonSchulz::sqrt`].
struct SquareRoot<B: Backend> {
    root: Tensor<B, 2>,
    trace: f64,
}

/// `(m + mᵀ)/2`.
fn symmetrise<B: Backend>(m: Tensor<B, 2>) -> Tensor<B, 2> {
    (m.clone() + m.transpose()).mul_scalar(0.5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    type B = NdArray<f64>;

    /// Rows whose column means are 0 and whose unbiased covariance is exactly `I` (N = 5, D = 2).
    const W: [[f64; 2]; 5] = [
        [1.0, 1.0],
        [1.0, -1.0],
        [-1.0, 1.0],
        [-1.0, -1.0],
        [0.0, 0.0],
    ];

    /// Samples `μ + L wᵢ` for the rows `wᵢ` of [`W`]: mean `μ`, covariance `L Lᵀ`.
    fn gaussian_2d(mu: [f64; 2], l: [[f64; 2]; 2]) -> Vec<f64> {
        W.iter()
            .flat_map(|w| {
                [
                    mu[0] + l[0][0] * w[0] + l[0][1] * w[1],
                    mu[1] + l[1][0] * w[0] + l[1][1] * w[1],
                ]
            })
            .collect()
    }

    fn tensor(x: &[f64], n: usize, d: usize) -> Tensor<B, 2> {
        Tensor::<B, 1>::from_floats(x, &Default::default()).reshape([n, d])
    }

    fn newton_schulz(x1: &[f64], x2: &[f64], n: usize, d: usize) -> f64 {
        NewtonSchulz::default()
            .frechet_distance(tensor(x1, n, d), tensor(x2, n, d))
            .unwrap()
    }

    /// A worked value as sample batches: (x1, x2, N, D, distance).
    type Worked = (Vec<f64>, Vec<f64>, usize, usize, f64);

    /// The four worked values.
    fn worked_values() -> Vec<Worked> {
        let (r2, h) = (2f64.sqrt(), 1.5f64.sqrt());
        // Cholesky factor of [[2, 1], [1, 2]]: [[√2, 0], [1/√2, √1.5]].
        let chol = [[r2, 0.0], [1.0 / r2, h]];
        vec![
            (
                gaussian_2d([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]]),
                gaussian_2d([1.0, 1.0], [[2.0, 0.0], [0.0, 2.0]]),
                5,
                2,
                4.0,
            ),
            (
                gaussian_2d([0.5, -0.5], chol),
                gaussian_2d([0.5, -0.5], [[1.0, 0.0], [0.0, 3f64.sqrt()]]),
                5,
                2,
                8.0 - 2.0 * 14f64.sqrt(),
            ),
            // N(1, 4) and N(3, 1): 1 + 2w and 3 + w for w = (1, −1, 0).
            (vec![3.0, -1.0, 1.0], vec![4.0, 2.0, 3.0], 3, 1, 5.0),
            (
                gaussian_2d([0.3, 2.0], chol),
                gaussian_2d([0.3, 2.0], chol),
                5,
                2,
                0.0,
            ),
        ]
    }

    #[test]
    fn samples_have_the_worked_gaussians() {
        // The constructions above really have the stated Gaussians: the second worked pair is
        // mean (0.5, −0.5) with [[2, 1], [1, 2]] against the same mean with diag(1, 3).
        let (x1, x2, ..) = &worked_values()[1];
        let mean = |x: &[f64], i: usize| x.chunks(2).map(|r| r[i]).sum::<f64>() / 5.0;
        let cov = |x: &[f64], i: usize, j: usize| {
            let (mi, mj) = (mean(x, i), mean(x, j));
            x.chunks(2).map(|r| (r[i] - mi) * (r[j] - mj)).sum::<f64>() / 4.0
        };
        for x in [x1, x2] {
            assert!((mean(x, 0) - 0.5).abs() < 1e-12 && (mean(x, 1) + 0.5).abs() < 1e-12);
        }
        for (x, expected) in [(x1, [2.0, 1.0, 2.0]), (x2, [1.0, 0.0, 3.0])] {
            let got = [cov(x, 0, 0), cov(x, 0, 1), cov(x, 1, 1)];
            for (g, e) in got.iter().zip(expected) {
                assert!((g - e).abs() < 1e-12, "{got:?} vs {expected:?}");
            }
        }
    }

    #[test]
    fn host_matches_the_worked_values() {
        for (x1, x2, n, d, expected) in worked_values() {
            let got = frechet_distance_host(&x1, &x2, n, d).unwrap();
            assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
        }
        assert!((8.0 - 2.0 * 14f64.sqrt() - 0.516685226).abs() < 1e-9);
    }

    #[test]
    fn newton_schulz_matches_the_worked_values() {
        for (x1, x2, n, d, expected) in worked_values() {
            let got = newton_schulz(&x1, &x2, n, d);
            assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
        }
    }

    #[test]
    fn readback_matches_the_worked_values() {
        for (x1, x2, n, d, expected) in worked_values() {
            let got = frechet_distance_readback(tensor(&x1, n, d), tensor(&x2, n, d)).unwrap();
            assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
        }
    }

    #[test]
    fn gram_and_symmetric_forms_agree() {
        // N = 6 > D = 3 uses √Σ1 Σ2 √Σ1; the N × N form must give the same trace.
        let x1 = [
            0.3, -1.2, 2.0, 1.1, 0.4, -0.7, -0.5, 0.9, 0.2, 2.2, -0.3, 1.4, -1.0, 0.0, 0.6, 0.8,
            1.7, -2.1,
        ];
        let x2 = [
            1.3, 0.2, -0.4, 0.1, -1.4, 0.7, 0.5, 2.9, 1.2, -0.2, 0.3, 0.4, 1.0, -1.0, -0.6, 0.6,
            0.7, 1.1,
        ];
        let (_, a1) = centred(&x1, 6, 3);
        let (_, a2) = centred(&x2, 6, 3);
        let symmetric = trace_sqrt_symmetric(&a1, &a2).unwrap();
        let gram = trace_sqrt_gram(&a1, &a2).unwrap();
        // The 6 × 6 form has three zero eigenvalues (rank 3), each off by up to √(ε·λmax).
        let s = 1.0 + a1.norm_squared() + a2.norm_squared();
        assert!(
            (symmetric - gram).abs() < rounding(6, s),
            "{symmetric} vs {gram}"
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let x = [0.0; 6];
        assert_eq!(
            frechet_distance_host(&x, &x[..4], 3, 2),
            Err(FrechetError::Length {
                which: "x2",
                len: 4,
                n: 3,
                d: 2,
                expected: 6
            })
        );
        assert_eq!(
            frechet_distance_host(&x, &x, usize::MAX, 2).unwrap_err(),
            FrechetError::Length {
                which: "x1",
                len: 6,
                n: usize::MAX,
                d: 2,
                expected: usize::MAX
            }
        );
        assert_eq!(
            frechet_distance_host(&x[..2], &x[..2], 1, 2),
            Err(FrechetError::TooFewSamples { n: 1 })
        );
        assert_eq!(
            frechet_distance_host(&[], &[], 3, 0),
            Err(FrechetError::NoDimensions)
        );
        let mut bad = x;
        bad[4] = f64::NAN;
        assert_eq!(
            frechet_distance_host(&x, &bad, 3, 2),
            Err(FrechetError::NonFinite { which: "x2" })
        );
        let ns = NewtonSchulz::default();
        assert_eq!(
            ns.frechet_distance(tensor(&x, 3, 2), tensor(&x, 2, 3)),
            Err(FrechetError::ShapeMismatch {
                first: [3, 2],
                second: [2, 3]
            })
        );
        assert_eq!(
            ns.frechet_distance(tensor(&x[..2], 1, 2), tensor(&x[..2], 1, 2)),
            Err(FrechetError::TooFewSamples { n: 1 })
        );
        assert!(matches!(
            ns.frechet_distance(tensor(&x, 3, 2), tensor(&bad, 3, 2)),
            Err(FrechetError::NonFinite { .. })
        ));
        assert_eq!(
            frechet_distance_readback(tensor(&x, 3, 2), tensor(&x, 2, 3)),
            Err(FrechetError::ShapeMismatch {
                first: [3, 2],
                second: [2, 3]
            })
        );
    }

    #[test]
    fn config_rejects_impossible_settings() {
        let err = NewtonSchulzConfig::new()
            .with_max_iterations(0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "max_iterations");
        let err = NewtonSchulzConfig::new()
            .with_tolerance(Some(-1.0))
            .init()
            .unwrap_err();
        assert_eq!(err.field, "tolerance");
    }

    #[test]
    fn a_zero_batch_against_itself_is_zero() {
        // Σ = 0: the square roots start from the zero matrix.
        let x = [2.0; 8];
        assert_eq!(frechet_distance_host(&x, &x, 4, 2), Ok(0.0));
        assert_eq!(newton_schulz(&x, &x, 4, 2), 0.0);
        assert_eq!(newton_schulz(&x, &x, 2, 4), 0.0);
    }

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 64,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(12),
            ..ProptestConfig::default()
        }
    }

    /// A random `[N, D]` batch with `2 ≤ N ≤ 9`, `1 ≤ D ≤ 7` (both orders of N and D) and a
    /// second batch of the same shape.
    fn pair() -> impl Strategy<Value = (Vec<f64>, Vec<f64>, usize, usize)> {
        (2usize..10, 1usize..8).prop_flat_map(|(n, d)| {
            (
                proptest::collection::vec(-3.0f64..3.0, n * d),
                proptest::collection::vec(-3.0f64..3.0, n * d),
                Just(n),
                Just(d),
            )
        })
    }

    /// `‖μ1 − μ2‖² + Tr Σ1 + Tr Σ2`, the scale against which rounding is judged.
    fn scale(x1: &[f64], x2: &[f64], n: usize, d: usize) -> f64 {
        let (mu1, a1) = centred(x1, n, d);
        let (mu2, a2) = centred(x2, n, d);
        let mean: f64 = mu1.iter().zip(&mu2).map(|(a, b)| (a - b) * (a - b)).sum();
        1.0 + mean + a1.norm_squared() + a2.norm_squared()
    }

    /// What rounding in `f64` may cost the host path on a problem of size `k` with terms of scale
    /// `s` (see "Accuracy" in the module documentation): eigenvalues off by up to about
    /// `k·ε·λmax`, of which a zero one gains a square root up to `√(k·ε·λmax)`, with
    /// `λmax ≤ Tr Σ1·Tr Σ2 ≤ s²/4`; doubled for the `−2·Tr`, summed over `k` eigenvalues.
    fn rounding(k: usize, s: f64) -> f64 {
        let k = k as f64;
        k * (k * f64::EPSILON).sqrt() * s + 1e-12 * s
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn symmetric_non_negative_and_both_paths_agree((x1, x2, n, d) in pair()) {
            let s = scale(&x1, &x2, n, d);
            let h12 = frechet_distance_host(&x1, &x2, n, d).unwrap();
            let h21 = frechet_distance_host(&x2, &x1, n, d).unwrap();
            let n12 = newton_schulz(&x1, &x2, n, d);
            let n21 = newton_schulz(&x2, &x1, n, d);
            let tol = rounding(n.min(d), s);
            prop_assert!((h12 - h21).abs() <= tol, "host {} vs {}", h12, h21);
            prop_assert!(h12 >= -tol, "host {}", h12);
            prop_assert!((n12 - n21).abs() <= 1e-6 * s, "newton-schulz {} vs {}", n12, n21);
            prop_assert!(n12 >= -1e-6 * s, "newton-schulz {}", n12);
            prop_assert!((h12 - n12).abs() <= 1e-6 * s, "host {} vs newton-schulz {}", h12, n12);
        }

        #[test]
        fn one_dimension_is_mean_and_deviation_gap((x1, x2, n) in (2usize..12).prop_flat_map(|n| (
            proptest::collection::vec(-5.0f64..5.0, n),
            proptest::collection::vec(-5.0f64..5.0, n),
            Just(n),
        ))) {
            // Independently: (μ1 − μ2)² + (σ1 − σ2)² with unbiased standard deviations.
            let stats = |x: &[f64]| {
                let m = x.iter().sum::<f64>() / n as f64;
                let v = x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1) as f64;
                (m, v.sqrt())
            };
            let ((m1, s1), (m2, s2)) = (stats(&x1), stats(&x2));
            let expected = (m1 - m2).powi(2) + (s1 - s2).powi(2);
            let host = frechet_distance_host(&x1, &x2, n, 1).unwrap();
            let ns = newton_schulz(&x1, &x2, n, 1);
            let s = scale(&x1, &x2, n, 1);
            prop_assert!((host - expected).abs() <= 1e-10 * s, "{} vs {}", host, expected);
            prop_assert!((ns - expected).abs() <= 1e-6 * s, "{} vs {}", ns, expected);
        }

        #[test]
        fn shifted_and_scaled_copies_have_closed_forms(
            (x, n, d) in (2usize..10, 1usize..8).prop_flat_map(|(n, d)| (
                proptest::collection::vec(-3.0f64..3.0, n * d), Just(n), Just(d),
            )),
            shift in -2.0f64..2.0,
            factor in 0.1f64..3.0,
        ) {
            // x + c (c = shift in every coordinate): Σ unchanged, distance ‖c‖² = d·shift².
            let shifted: Vec<f64> = x.iter().map(|v| v + shift).collect();
            // s·x: μ2 = sμ, Σ2 = s²Σ, Tr((Σ Σ2)^{1/2}) = s·Tr Σ, distance (1 − s)²(‖μ‖² + Tr Σ).
            let scaled: Vec<f64> = x.iter().map(|v| v * factor).collect();
            let (mu, a) = centred(&x, n, d);
            let mu_sq: f64 = mu.iter().map(|m| m * m).sum();
            let expect_shift = d as f64 * shift * shift;
            let expect_scale = (1.0 - factor).powi(2) * (mu_sq + a.norm_squared());
            let s = scale(&x, &scaled, n, d) + expect_shift;
            for (other, expected) in [(&shifted, expect_shift), (&scaled, expect_scale)] {
                let host = frechet_distance_host(&x, other, n, d).unwrap();
                let ns = newton_schulz(&x, other, n, d);
                let tol = rounding(n.min(d), s);
                prop_assert!((host - expected).abs() <= tol, "host {} vs {}", host, expected);
                prop_assert!((ns - expected).abs() <= 1e-6 * s, "NS {} vs {}", ns, expected);
            }
        }
    }
}
