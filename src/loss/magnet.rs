//! Magnet loss (documented on `MagnetLoss`).

use burn::prelude::*;

use super::similarity::MASKED_LOGIT;
use crate::base::error::{non_negative, ConfigError};

/// Configuration of [`MagnetLoss`].
#[derive(Config, Debug)]
pub struct MagnetLossConfig {
    /// Margin `α >= 0` between an example's own cluster and the clusters of other classes.
    #[config(default = 1.0)]
    pub alpha: f64,
}

impl MagnetLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<MagnetLoss, ConfigError> {
        non_negative("alpha", self.alpha)?;
        Ok(MagnetLoss { alpha: self.alpha })
    }
}

/// Magnet loss. Build it with [`MagnetLossConfig::init`].
///
/// Magnet loss (Rippel et al. 2016, <https://arxiv.org/abs/1511.05939>), the embedding objective
/// of SPL-ADVisE (Thangarasa & Taylor 2018, <https://arxiv.org/abs/1807.09200>, §3.1); see
/// `docs/methods.md#magnet-loss`.
///
/// A batch holds `M` clusters of `D` examples. With `μ_m` the mean of cluster `m`'s examples in
/// the batch and `σ² = Σ‖r − μ_own‖² / (MD − 1)`, each example scores
/// `ℓ = max(0, −log[ exp(−‖r − μ_own‖²/(2σ²) − α) / Σ_{μ of other classes} exp(−‖r − μ‖²/(2σ²)) ])`
/// and the loss is the batch mean. This is the paper's `2σ²`; public ports divide by `2σ⁴`.
/// `σ²` is a function of the batch and gradients flow through it, as the formula is written.
/// The denominator is a log-sum-exp, so nothing underflows for far-apart clusters.
#[derive(Debug, Clone)]
pub struct MagnetLoss {
    alpha: f64,
}

impl MagnetLoss {
    /// Mean magnet loss of the batch.
    ///
    /// `clusters[n]` is the cluster (in `0..M`) of example `n`; `cluster_classes[m]` the class of
    /// cluster `m`. Both come from the host-side sampler.
    ///
    /// # Shapes
    /// - `embeddings`: `[N, E]`; `clusters`: `N` entries; `cluster_classes`: `M` entries
    /// - output: `[1]`
    ///
    /// # Panics
    /// If the lengths disagree, a cluster id is out of range or has no example, `N < 2`, or an
    /// example has no cluster of another class to be compared with.
    pub fn forward<B: Backend>(
        &self,
        embeddings: Tensor<B, 2>,
        clusters: &[usize],
        cluster_classes: &[usize],
    ) -> Tensor<B, 1> {
        self.forward_per_example(embeddings, clusters, cluster_classes)
            .mean()
    }

    /// The loss of each example (SPL-ADVisE ranks clusters by these).
    ///
    /// # Shapes
    /// - `embeddings`: `[N, E]` → `[N]`; see [`MagnetLoss::forward`] for the other arguments
    pub fn forward_per_example<B: Backend>(
        &self,
        embeddings: Tensor<B, 2>,
        clusters: &[usize],
        cluster_classes: &[usize],
    ) -> Tensor<B, 1> {
        let [n, e] = embeddings.dims();
        let m = cluster_classes.len();
        assert!(
            clusters.len() == n && n >= 2,
            "magnet loss: `embeddings` has shape {:?} but `clusters` has {} entries (need one per \
             example, at least 2)",
            embeddings.dims(),
            clusters.len()
        );
        let mut counts = vec![0usize; m];
        for (i, &c) in clusters.iter().enumerate() {
            assert!(
                c < m,
                "magnet loss: example {i} is in cluster {c} but only {m} clusters were given"
            );
            counts[c] += 1;
        }
        if let Some(empty) = counts.iter().position(|&c| c == 0) {
            panic!("magnet loss: cluster {empty} has no example in the batch");
        }
        let device = embeddings.device();
        let mut assignment = vec![0.0f64; n * m];
        let mut other_class = vec![true; n * m];
        for (i, &c) in clusters.iter().enumerate() {
            assignment[i * m + c] = 1.0;
            let mut any_other = false;
            for (j, &class) in cluster_classes.iter().enumerate() {
                let same = class == cluster_classes[c];
                other_class[i * m + j] = !same;
                any_other |= !same;
            }
            assert!(
                any_other,
                "magnet loss: example {i} (class {}) has no cluster of another class in the batch",
                cluster_classes[c]
            );
        }
        let assignment: Tensor<B, 2> =
            Tensor::from_data(TensorData::new(assignment, [n, m]), &device);
        let same_class: Tensor<B, 2, Bool> =
            Tensor::from_data(TensorData::new(other_class, [n, m]), &device).bool_not();
        let inverse_counts: Vec<f64> = counts.iter().map(|&c| 1.0 / c as f64).collect();
        let inverse_counts: Tensor<B, 2> =
            Tensor::from_data(TensorData::new(inverse_counts, [m, 1]), &device);

        let means = assignment.clone().transpose().matmul(embeddings.clone()) * inverse_counts;
        let distances = (embeddings.reshape([n, 1, e]).expand([n, m, e])
            - means.reshape([1, m, e]).expand([n, m, e]))
        .powi_scalar(2)
        .sum_dim(2)
        .reshape([n, m]);
        let own = (distances.clone() * assignment).sum_dim(1);
        let variance = own.clone().sum() / (n as f64 - 1.0);
        let scale = variance.reshape([1, 1]).recip() * -0.5;
        let numerator = own * scale.clone() - self.alpha;
        let others = (distances * scale).mask_fill(same_class, MASKED_LOGIT);
        let shift = others.clone().max_dim(1).detach();
        let log_denominator = shift.clone() + (others - shift).exp().sum_dim(1).log();
        burn::tensor::activation::relu(log_denominator - numerator).reshape([n])
    }
}
