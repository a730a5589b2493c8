//! The MMCR loss (documented on `MmcrLoss`).

use burn::prelude::*;
use burn::tensor::DType;
use nalgebra::DMatrix;

use super::shape_checks::assert_same_shape;
use crate::base::error::{non_negative, ConfigError};

/// Configuration of [`MmcrLoss`].
#[derive(Config, Debug)]
pub struct MmcrLossConfig {
    /// Weight `λ` of the per-image nuclear norms (the paper's 5e-3).
    #[config(default = 5e-3)]
    pub lambda: f64,
}

impl MmcrLossConfig {
    /// Validates `λ` and builds the loss.
    ///
    /// # Errors
    /// A negative `λ`, named.
    pub fn init(&self) -> Result<MmcrLoss, ConfigError> {
        non_negative("lambda", self.lambda)?;
        Ok(MmcrLoss {
            lambda: self.lambda,
        })
    }
}

/// The MMCR loss. Build it with [`MmcrLossConfig::init`].
///
/// The MMCR loss (Yerxa, Kuang, Simoncelli & Chung, "Learning Efficient Coding of Natural Images
/// with Maximum Manifold Capacity Representations", NeurIPS 2023,
/// <https://arxiv.org/abs/2303.03307>; see `docs/methods.md#mmcr-loss`): the nuclear norm of the
/// matrix of the images' centroids (their views' mean) is made large, the nuclear norm of each
/// image's matrix of views small.
///
/// With `k` views of `B` images through the online network and `k` through the momentum network
/// (`[B, D]` each; the momentum network's without gradient), `Z_b` the `2k × D` matrix of image
/// `b`'s outputs and `C` the `B × D` matrix of their means over the `2k`:
///
/// ```text
/// L = −‖C‖_* + λ · Σ_b ‖Z_b‖_* / B
/// ```
///
/// `λ = 5e-3` (the paper's, lightly's `MMCRLoss`). The outputs are used as they are (lightly
/// normalises nothing inside the loss).
///
/// # Why on the host
/// A nuclear norm is the sum of singular values; burn has no singular value decomposition.
/// `nalgebra` (already a dependency, for Fréchet batch curation) computes the SVD `A = U Σ Vᵀ`
/// of each matrix in f64 on the host, and the loss is built on the device as `Σ_ij A_ij G_ij`
/// with `G = U Vᵀ` (the thin factors) detached: its value is `tr(Aᵀ U Vᵀ) = Σ σ = ‖A‖_*` and its
/// gradient `U Vᵀ`, the nuclear norm's derivative wherever its singular values are positive
/// (PyTorch's `svd` backward gives the same; at zero singular values see `nuclear_norms`). One
/// host round trip a step; the tensors stay on their device.
#[derive(Debug, Clone)]
pub struct MmcrLoss {
    lambda: f64,
}

impl MmcrLoss {
    /// The loss of the online networks' outputs of `k` views and the momentum network's outputs
    /// of the same views (no gradient flows into them).
    ///
    /// # Shapes
    /// - `online`, `momentum`: `k` tensors `[B, D]` each → `[1]`
    ///
    /// # Panics
    /// If there is no view, the two lists differ in length, or the shapes differ.
    pub fn forward<B: Backend>(
        &self,
        online: Vec<Tensor<B, 2>>,
        momentum: Vec<Tensor<B, 2>>,
    ) -> Tensor<B, 1> {
        assert!(!online.is_empty(), "MmcrLoss: no views");
        assert_eq!(
            online.len(),
            momentum.len(),
            "MmcrLoss: views of each network"
        );
        let dims = online[0].dims();
        for z in online.iter().chain(&momentum) {
            assert_same_shape("MmcrLoss", ("the first view", dims), ("a view", z.dims()));
        }
        let [b, d] = dims;
        let k = 2 * online.len();
        let views: Vec<Tensor<B, 3>> = online
            .into_iter()
            .chain(momentum.into_iter().map(|z| z.detach()))
            .map(|z| z.reshape([b, 1, d]))
            .collect();
        // [B, 2k, D]: image b's views as the rows of its matrix.
        let z = Tensor::cat(views, 1);
        let centroids = z.clone().mean_dim(1).reshape([b, d]);
        let per_image = nuclear_norms(z.clone(), [b, k, d]);
        let centroid = nuclear_norms(centroids.reshape([1, b, d]), [1, b, d]);
        centroid.neg() + per_image.mul_scalar(self.lambda / b as f64)
    }
}

/// `Σ_m ‖A_m‖_*` of a batch of matrices `a` (`[M, rows, cols]`), as `Σ A ⊙ G` with `G = U Vᵀ`
/// of each matrix computed on the host (see [`MmcrLoss`]), over the singular values above
/// the matrix's numerical rank threshold (`max(rows, cols) · σ_max ·` the machine epsilon of
/// `a`'s type, LAPACK's and NumPy's rule).
///
/// At a zero singular value the nuclear norm has no derivative. MMCR meets them from the first
/// step: the momentum network starts as a copy of the online one, so each image's online and
/// momentum rows coincide. The subgradient taken is `U_r V_rᵀ` over the nonzero singular values,
/// the one of least norm, which depends on nothing arbitrary; PyTorch's `svd` backward also adds
/// `u_i v_iᵀ` for the zero ones, whose pairing is whatever basis of the null spaces LAPACK returns
/// (so it differs between backends and libraries).
fn nuclear_norms<B: Backend>(a: Tensor<B, 3>, [m, rows, cols]: [usize; 3]) -> Tensor<B, 1> {
    let epsilon = match a.dtype() {
        DType::F64 => f64::EPSILON,
        DType::F16 => 4.9e-4,
        DType::BF16 => 3.9e-3,
        _ => f64::from(f32::EPSILON),
    };
    let values: Vec<f64> = a
        .clone()
        .detach()
        .into_data()
        .convert::<f64>()
        .to_vec()
        .expect("a float tensor");
    let mut directions = Vec::with_capacity(values.len());
    for matrix in values.chunks(rows * cols) {
        let svd = DMatrix::from_row_slice(rows, cols, matrix).svd(true, true);
        let (u, v_t) = (
            svd.u.expect("the SVD was asked for U"),
            svd.v_t.expect("the SVD was asked for Vᵀ"),
        );
        let largest = svd.singular_values.max();
        let threshold = rows.max(cols) as f64 * epsilon * largest;
        let mut g = DMatrix::<f64>::zeros(rows, cols);
        for (i, &sigma) in svd.singular_values.iter().enumerate() {
            if sigma > threshold {
                g += u.column(i) * v_t.row(i);
            }
        }
        for r in 0..rows {
            for c in 0..cols {
                directions.push(g[(r, c)]);
            }
        }
    }
    let g = Tensor::<B, 3>::from_data(TensorData::new(directions, [m, rows, cols]), &a.device());
    (a * g).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;
    type Ad = burn::backend::Autodiff<B>;

    /// At the first step the momentum network's outputs equal the online ones: one image, one
    /// view, online = momentum = `(3, 4)`. `Z = [[3, 4], [3, 4]]` has rank one (`σ = 5√2`,
    /// `u = (1, 1)/√2`, `v = (3, 4)/5`), `C = (3, 4)`. The gradient taken is the least-norm
    /// subgradient, `λ·u₀v + ∂(−‖C‖)/∂online = (3, 4)/5 · (λ/√2 − 1/2)`: no term of the zero
    /// singular value's arbitrary vectors.
    #[test]
    fn a_zero_singular_value_adds_nothing_to_the_gradient() {
        let d = Default::default();
        let row = |v: [f64; 2]| Tensor::<Ad, 2>::from_data(TensorData::new(v.to_vec(), [1, 2]), &d);
        let online = row([3.0, 4.0]).require_grad();
        let loss = MmcrLossConfig::new()
            .with_lambda(0.5)
            .init()
            .unwrap()
            .forward(vec![online.clone()], vec![row([3.0, 4.0])]);
        let value: f64 = loss.clone().into_scalar();
        assert!((value - (-5.0 + 0.5 * 5.0 * 2f64.sqrt())).abs() < 1e-12);
        let grad: Vec<f64> = online
            .grad(&loss.backward())
            .unwrap()
            .into_data()
            .to_vec()
            .unwrap();
        let factor = 0.5 / 2f64.sqrt() - 0.5;
        for (g, e) in grad.iter().zip([0.6 * factor, 0.8 * factor]) {
            assert!((g - e).abs() < 1e-12, "{grad:?}");
        }
    }

    #[test]
    fn a_negative_lambda_is_named() {
        let e = MmcrLossConfig::new().with_lambda(-1.0).init().unwrap_err();
        assert_eq!(e.field, "lambda");
    }

    /// Two images, one view per network, two features, by hand. Online `[[1, 0], [0, 2]]`,
    /// momentum `[[1, 0], [0, 0]]`: image 0's matrix `[[1, 0], [1, 0]]` has rank one, `‖·‖_* =
    /// √2`; image 1's `[[0, 2], [0, 0]]`, `2`; the centroids `[[1, 0], [0, 1]]`, `2`.
    /// `L = −2 + λ(√2 + 2)/2`.
    #[test]
    fn two_images_by_hand() {
        let d = Default::default();
        let m = |v: [f64; 4]| Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), [2, 2]), &d);
        let loss = MmcrLossConfig::new()
            .with_lambda(0.5)
            .init()
            .unwrap()
            .forward(vec![m([1.0, 0.0, 0.0, 2.0])], vec![m([1.0, 0.0, 0.0, 0.0])]);
        let expected = -2.0 + 0.5 * (2f64.sqrt() + 2.0) / 2.0;
        let got: f64 = loss.into_scalar();
        assert!((got - expected).abs() < 1e-14, "{got} vs {expected}");
    }
}
