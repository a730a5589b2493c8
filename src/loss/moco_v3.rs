//! The MoCo v3 loss (documented on `MocoV3Loss`).

use burn::prelude::*;

use super::similarity::{l2_normalize, stop_gradient};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`MocoV3Loss`].
#[derive(Config, Debug)]
pub struct MocoV3LossConfig {
    /// Temperature `τ` (the paper's 0.2 for ViTs, 1.0 for ResNets).
    #[config(default = 0.2)]
    pub temperature: f64,
}

impl MocoV3LossConfig {
    /// Validates the temperature and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive.
    pub fn init(&self) -> Result<MocoV3Loss, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(MocoV3Loss {
            temperature: self.temperature,
        })
    }
}

/// The MoCo v3 loss. Build it with [`MocoV3LossConfig::init`].
///
/// The MoCo v3 loss (Chen, Xie & He, "An Empirical Study of Training Self-Supervised Vision
/// Transformers", ICCV 2021, <https://arxiv.org/abs/2104.02057>, Algorithm 1; see
/// `docs/methods.md#moco-v3-loss`): InfoNCE of each query against the keys of the same batch (no
/// queue), scaled by `2τ`.
///
/// With `q` the queries (`[N, D]`) and `k` the keys of every image of the global batch
/// (`[M, D]`, no gradient), both L2-normalised, and query `i`'s positive at key `offset + i`:
///
/// ```text
/// L = 2τ · (−1/N) Σ_i log [ exp(⟨q_i, k_{offset+i}⟩/τ) / Σ_j exp(⟨q_i, k_j⟩/τ) ]
/// ```
///
/// (the authors' `nn.CrossEntropyLoss()(logits, labels) * (2 * self.T)`; `offset` is the rank's
/// first row in a data-parallel run). `τ = 0.2` for ViTs (the paper's), 1.0 for ResNets.
#[derive(Debug, Clone)]
pub struct MocoV3Loss {
    temperature: f64,
}

impl MocoV3Loss {
    /// The temperature.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// The loss of queries `q` against the keys `k` of the same images (one device).
    ///
    /// # Shapes
    /// - `q`, `k`: `[N, D]` → `[1]`
    pub fn forward<B: Backend>(&self, q: Tensor<B, 2>, k: Tensor<B, 2>) -> Tensor<B, 1> {
        self.forward_with_offset(q, k, 0)
    }

    /// The loss of queries `q` against every key `k` of the global batch, query `i`'s positive
    /// at `offset + i`. No gradient flows into the keys.
    ///
    /// # Shapes
    /// - `q`: `[N, D]`, `k`: `[M, D]` with `offset + N ≤ M` → `[1]`
    ///
    /// # Panics
    /// If the widths differ or the positives fall outside the keys.
    pub fn forward_with_offset<B: Backend>(
        &self,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        offset: usize,
    ) -> Tensor<B, 1> {
        let [n, d] = q.dims();
        let [m, dk] = k.dims();
        assert!(
            d == dk && offset + n <= m,
            "MocoV3Loss: queries {:?} and keys {:?} with offset {offset}",
            q.dims(),
            k.dims()
        );
        let q = l2_normalize(q);
        let k = l2_normalize(stop_gradient(k));
        let logits = q.matmul(k.transpose()).mul_scalar(1.0 / self.temperature);
        let log_p = curriculum_ssl_models::kernels::log_softmax(logits, 1);
        // The positives: column offset + i of row i.
        let device = log_p.device();
        let mask = Tensor::<B, 2>::zeros([n, m], &device)
            .slice_assign([0..n, offset..offset + n], Tensor::<B, 2>::eye(n, &device));
        (log_p * mask)
            .sum()
            .neg()
            .mul_scalar(1.0 / (n as f64))
            .mul_scalar(2.0 * self.temperature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temperature_that_is_not_positive_is_named() {
        let e = MocoV3LossConfig::new()
            .with_temperature(-1.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "temperature");
    }
}
