//! Negative cosine similarity with stop-gradient (documented on `NegativeCosineLoss`).

use burn::prelude::*;

use super::shape_checks::{assert_min_batch, assert_same_shape};
use super::similarity::{l2_normalize, stop_gradient, NORM_FLOOR};
use crate::base::error::ConfigError;

/// Which of the two equivalent forms is reported.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum NegativeCosineForm {
    /// `−cos(p, z)`, in `[−1, 1]` (SimSiam).
    NegativeCosine,
    /// `2 − 2 cos(p, z)`, in `[0, 4]` (BYOL's normalised MSE).
    TwoMinusTwoCosine,
}

/// Configuration of [`NegativeCosineLoss`].
#[derive(Config, Debug)]
pub struct NegativeCosineLossConfig {
    /// Reported form of the objective.
    #[config(default = "NegativeCosineForm::NegativeCosine")]
    pub form: NegativeCosineForm,
}

impl NegativeCosineLossConfig {
    /// Builds the loss (every form is valid).
    pub fn init(&self) -> Result<NegativeCosineLoss, ConfigError> {
        Ok(NegativeCosineLoss { form: self.form })
    }
}

/// Negative cosine loss with stop-gradient on the target. Build it with
/// [`NegativeCosineLossConfig::init`].
///
/// Negative cosine similarity with stop-gradient, the objective of SimSiam
/// (<https://arxiv.org/abs/2011.10566>) and BYOL (<https://arxiv.org/abs/2006.07733>); see
/// `docs/methods.md#negative-cosine`.
///
/// `D(p, z) = −mean_i (p_i/‖p_i‖)·(z_i/‖z_i‖)` with `z` detached; SimSiam's loss is
/// `D(p1, z2)/2 + D(p2, z1)/2`, BYOL's the sum of its two orderings. BYOL's paper writes the same objective as the normalised MSE
/// `‖p̂ − ẑ‖² = 2 − 2 cos`: an affine map of the same quantity (same minimiser, gradients ×2).
/// [`NegativeCosineForm`] picks one; the default is SimSiam's `−cos`.
#[derive(Debug, Clone)]
pub struct NegativeCosineLoss {
    form: NegativeCosineForm,
}

impl NegativeCosineLoss {
    /// `D(p, z)`: mean over rows; `z` gets no gradient.
    ///
    /// # Shapes
    /// - `p`: `[B, D]` predictions, `z`: `[B, D]` targets (projections or EMA projections)
    /// - output: `[1]`
    pub fn forward<B: Backend>(&self, p: Tensor<B, 2>, z: Tensor<B, 2>) -> Tensor<B, 1> {
        assert_same_shape("negative cosine", ("p", p.dims()), ("z", z.dims()));
        assert_min_batch("negative cosine", "p", p.dims(), 1);
        // On wgpu and CUDA one operation with its gradient written out; elsewhere composed.
        let cosine = match curriculum_ssl_models::kernels::mean_cosine(p, z, NORM_FLOOR) {
            Ok(cosine) => cosine,
            Err((p, z)) => (l2_normalize(p) * l2_normalize(stop_gradient(z)))
                .sum_dim(1)
                .mean(),
        };
        match self.form {
            NegativeCosineForm::NegativeCosine => cosine.neg(),
            NegativeCosineForm::TwoMinusTwoCosine => cosine.mul_scalar(-2.0).add_scalar(2.0),
        }
    }

    /// SimSiam's symmetric loss `D(p1, z2)/2 + D(p2, z1)/2` (Chen & He 2021, eq. 2): the mean of
    /// the two orderings. BYOL sums them instead (`Byol` adds two [`Self::forward`] calls).
    ///
    /// # Shapes
    /// - `p1`, `p2`, `z1`, `z2`: `[B, D]`; output: `[1]`
    pub fn forward_symmetric<B: Backend>(
        &self,
        p1: Tensor<B, 2>,
        p2: Tensor<B, 2>,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        (self.forward(p1, z2) + self.forward(p2, z1)) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn both_forms_by_hand() {
        // p = [u0°, u90°], z = [u60°, u90°]: cosines 0.5 and 1, mean 0.75.
        let device = Default::default();
        let p = Tensor::<B, 2>::from_data([[1.0, 0.0], [0.0, 2.0]], &device);
        let z = Tensor::<B, 2>::from_data([[0.5, 3f64.sqrt() / 2.0], [0.0, 1.0]], &device);
        let neg = NegativeCosineLossConfig::new().init().unwrap();
        let mse = NegativeCosineLossConfig::new()
            .with_form(NegativeCosineForm::TwoMinusTwoCosine)
            .init()
            .unwrap();
        let a: f64 = neg.forward(p.clone(), z.clone()).into_scalar();
        let b: f64 = mse.forward(p, z).into_scalar();
        assert!((a + 0.75).abs() < 1e-12, "{a}");
        assert!((b - 0.5).abs() < 1e-12, "{b}");
    }
}
