//! Soft-target cross-entropy for mixed queries (documented on `SoftTargetCrossEntropy`).

use burn::prelude::*;

use super::shape_checks::assert_min_batch;
use super::similarity::l2_normalize;
use crate::base::error::{in_range, positive, ConfigError};

/// Configuration of [`SoftTargetCrossEntropy`].
#[derive(Config, Debug)]
pub struct SoftTargetCrossEntropyConfig {
    /// Temperature `τ` of the mixed logits (MixCo: 0.05).
    #[config(default = 0.05)]
    pub temperature: f64,
}

impl SoftTargetCrossEntropyConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<SoftTargetCrossEntropy, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(SoftTargetCrossEntropy {
            temperature: self.temperature,
        })
    }
}

/// Cross-entropy against soft targets. Build it with [`SoftTargetCrossEntropyConfig::init`].
///
/// Soft-target cross-entropy for mixed queries, in the MixCo form (Kim et al. 2020,
/// <https://arxiv.org/abs/2010.06300>); see `docs/methods.md#soft-target-cross-entropy`.
///
/// A query made by mixing two images `a` and `b` with share `λ` is scored against a set of
/// candidate keys (the keys of the batch, then the queue); its target puts `λ` on `a`'s key and
/// `1 − λ` on `b`'s, 0 elsewhere. The loss is `−Σ target · log_softmax(q·keysᵀ / τ)`, averaged
/// over queries. [`mixup_targets`] builds the usual target for a batch mixed with a permutation.
#[derive(Debug, Clone)]
pub struct SoftTargetCrossEntropy {
    temperature: f64,
}

impl SoftTargetCrossEntropy {
    /// Mean soft-target cross-entropy of the normalised queries against the normalised keys.
    /// The keys keep their gradient: detach them first if they come from a momentum encoder.
    ///
    /// # Shapes
    /// - `queries`: `[N, D]`, `keys`: `[M, D]`, `targets`: `[N, M]` (rows summing to 1)
    /// - output: `[1]`
    pub fn forward<B: Backend>(
        &self,
        queries: Tensor<B, 2>,
        keys: Tensor<B, 2>,
        targets: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        assert_min_batch("soft-target CE", "queries", queries.dims(), 1);
        let [n, d] = queries.dims();
        let [m, dk] = keys.dims();
        assert!(
            d == dk && targets.dims() == [n, m],
            "soft-target CE: `queries` {:?}, `keys` {:?} and `targets` {:?} do not fit: \
             expected keys [M, {d}] and targets [{n}, M]",
            queries.dims(),
            keys.dims(),
            targets.dims()
        );
        let logits =
            l2_normalize(queries).matmul(l2_normalize(keys).transpose()) / self.temperature;
        self.forward_logits(logits, targets)
    }

    /// Mean soft-target cross-entropy of given logits (already scaled).
    ///
    /// # Shapes
    /// - `logits`, `targets`: `[N, C]`; output: `[1]`
    pub fn forward_logits<B: Backend>(
        &self,
        logits: Tensor<B, 2>,
        targets: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        assert!(
            logits.dims() == targets.dims(),
            "soft-target CE: `logits` {:?} and `targets` {:?} must have the same shape",
            logits.dims(),
            targets.dims()
        );
        let log_probs = curriculum_ssl_models::kernels::log_softmax(logits, 1);
        (targets * log_probs).sum_dim(1).mean().neg()
    }
}

/// Targets of a batch of `N` queries where query `i` mixes image `i` (share `λ`) with image
/// `partner[i]` (share `1 − λ`), scored against `N` keys (one per image, same order) followed by
/// `extra` negatives (e.g. a queue). When `partner[i] == i` the row is one-hot.
///
/// # Errors
/// If `lambda` is outside `[0, 1]` or a partner index is out of range.
pub fn mixup_targets<B: Backend>(
    lambda: f64,
    partner: &[usize],
    extra: usize,
    device: &B::Device,
) -> Result<Tensor<B, 2>, ConfigError> {
    in_range("lambda", lambda, 0.0, 1.0, false)?;
    let n = partner.len();
    let columns = n + extra;
    let mut target = vec![0.0f64; n * columns];
    for (i, &j) in partner.iter().enumerate() {
        if j >= n {
            return Err(ConfigError::new(
                "partner",
                format!("index {j} at position {i} is out of range for a batch of {n}"),
            ));
        }
        target[i * columns + i] += lambda;
        target[i * columns + j] += 1.0 - lambda;
    }
    Ok(Tensor::from_data(
        TensorData::new(target, [n, columns]),
        device,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn mixup_targets_by_hand() {
        let t = mixup_targets::<B>(0.7, &[1, 0, 2], 1, &Default::default()).unwrap();
        let t: Vec<f64> = t.into_data().to_vec().unwrap();
        let expected = [
            0.7, 0.3, 0.0, 0.0, //
            0.3, 0.7, 0.0, 0.0, //
            0.0, 0.0, 1.0, 0.0,
        ];
        for (a, b) in t.iter().zip(expected) {
            assert!((a - b).abs() < 1e-15, "{t:?}");
        }
    }
}
