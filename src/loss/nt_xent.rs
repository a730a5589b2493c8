//! NT-Xent, SimCLR's loss (documented on `NtXentLoss`).

use burn::prelude::*;

use super::shape_checks::{assert_min_batch, assert_same_shape};
use super::similarity::{cross_entropy_at, TwoViewSimilarities, MASKED_LOGIT, NORM_FLOOR};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`NtXentLoss`].
#[derive(Config, Debug)]
pub struct NtXentLossConfig {
    /// Temperature `τ` dividing the cosine similarities (SimCLR uses 0.5; CIFAR recipes often 0.2).
    #[config(default = 0.5)]
    pub temperature: f64,
}

impl NtXentLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<NtXentLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(NtXentLoss {
            temperature: self.temperature,
        })
    }
}

/// NT-Xent loss. Build it with [`NtXentLossConfig::init`].
///
/// NT-Xent, the normalised temperature-scaled cross-entropy of SimCLR (Chen et al. 2020,
/// <https://arxiv.org/abs/2002.05709>; see `docs/methods.md#nt-xent`).
///
/// `2B` projections (two views of `B` images). For anchor `i` with positive `j(i)`, the logits are
/// `s_ik / τ` over every `k ≠ i` (`2B − 1` entries) and `loss_i = −log softmax_{j(i)}`; the batch
/// loss is the mean over all `2B` anchors.
#[derive(Debug, Clone)]
pub struct NtXentLoss {
    temperature: f64,
}

impl NtXentLoss {
    /// Temperature `τ`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// Mean NT-Xent over the `2B` anchors. The projections are L2-normalised here.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[B, D]`, row `i` of each being the two views of image `i`
    /// - output: `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        assert_same_shape("NT-Xent", ("z1", z1.dims()), ("z2", z2.dims()));
        assert_min_batch("NT-Xent", "z1", z1.dims(), 1);
        self.forward_stacked(Tensor::cat(vec![z1, z2], 0))
    }

    /// [`NtXentLoss::forward`] of the two views stacked, `z = [z1; z2]`: what a method whose
    /// views went through its networks as one batch hands over without splitting it.
    ///
    /// # Shapes
    /// - `z`: `[2B, D]`, view 1's rows then view 2's; output: `[1]`
    ///
    /// # Panics
    /// If `z` has an odd number of rows, or none.
    pub fn forward_stacked<B: Backend>(&self, z: Tensor<B, 2>) -> Tensor<B, 1> {
        let [rows, _] = z.dims();
        assert!(
            rows >= 2 && rows % 2 == 0,
            "NT-Xent: `z` has {rows} rows; it stacks two views of a batch of at least one image"
        );
        // On wgpu and CUDA one operation with its gradient written out; elsewhere composed.
        match curriculum_ssl_models::kernels::nt_xent(z, self.temperature, NORM_FLOOR) {
            Ok(loss) => loss,
            Err(z) => self.loss(TwoViewSimilarities::stacked(z)),
        }
    }

    /// NT-Xent whose negatives come from other batches (e.g. hardened by PGD): each anchor of
    /// `[z1; z2]` keeps its clean positive, and its `2B − 2` negatives are the other images'
    /// rows of `[n1; n2]`. Equal to [`NtXentLoss::forward`] when `n1 = z1` and `n2 = z2`.
    ///
    /// # Shapes
    /// - `z1`, `z2`, `n1`, `n2`: `[B, D]`; output: `[1]`
    pub fn forward_with_negatives<B: Backend>(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
        n1: Tensor<B, 2>,
        n2: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        self.loss(TwoViewSimilarities::with_negatives(
            "NT-Xent", z1, z2, n1, n2,
        ))
    }

    fn loss<B: Backend>(&self, views: TwoViewSimilarities<B>) -> Tensor<B, 1> {
        let logits = (views.sim / self.temperature).mask_fill(views.diagonal, MASKED_LOGIT);
        cross_entropy_at(logits, views.positive_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{curricular_views, B};

    #[test]
    fn two_pairs_by_hand() {
        // z1 = [u0°, u90°], z2 = [u50°, u125°], τ = 0.5: plain NT-Xent 0.596607 (the curricular
        // example of docs/methods.md#curricular-weighting).
        let [z1, z2] = curricular_views::<B>(&Default::default());
        let loss = NtXentLossConfig::new().init().unwrap().forward(z1, z2);
        assert!((loss.into_scalar() - 0.596607).abs() < 1e-6);
    }

    #[test]
    fn rejects_non_positive_temperature() {
        let err = NtXentLossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "temperature");
    }
}
