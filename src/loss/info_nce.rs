//! InfoNCE against a queue of negative keys (documented on `InfoNceLoss`).

use burn::prelude::*;

use super::shape_checks::{assert_min_batch, assert_same_shape};
use super::similarity::{l2_normalize, stop_gradient, NORM_FLOOR};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`InfoNceLoss`].
#[derive(Config, Debug)]
pub struct InfoNceLossConfig {
    /// Temperature `τ` (MoCo v1: 0.07, MoCo v2: 0.2, Light-MoCo: 0.1).
    #[config(default = 0.07)]
    pub temperature: f64,
}

impl InfoNceLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<InfoNceLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(InfoNceLoss {
            temperature: self.temperature,
        })
    }
}

/// InfoNCE with a queue of negatives. Build it with [`InfoNceLossConfig::init`].
///
/// InfoNCE against a queue of negative keys, as in MoCo v1/v2 (He et al. 2019,
/// <https://arxiv.org/abs/1911.05722>; Chen et al. 2020, <https://arxiv.org/abs/2003.04297>; see
/// `docs/methods.md#infonce-with-a-queue`).
///
/// `q` is the online projection, `k+` the momentum encoder's key of the other view (no
/// gradient), `queue` holds `K` past keys (no gradient). `logits = [q·k+, q·queue] / τ` with the
/// target at index 0. The symmetric form swaps the views and SUMS the two losses, as the
/// Light-MoCo code does (both key sets are then enqueued: see
/// [`KeyQueue`](crate::method::KeyQueue)).
#[derive(Debug, Clone)]
pub struct InfoNceLoss {
    temperature: f64,
}

/// Cosine similarities of the queries with their positive key and with the queue, before the
/// temperature.
pub(crate) struct QueueSimilarities<B: Backend> {
    /// `[B, D]`: the normalised queries.
    pub(crate) queries: Tensor<B, 2>,
    /// `[K, D]`: the queue, detached.
    pub(crate) queue: Tensor<B, 2>,
    /// `[B, 1]`: `q_i · k+_i`.
    pub(crate) positive: Tensor<B, 2>,
    /// `[B, K]`: `q_i · queue_j`.
    pub(crate) negatives: Tensor<B, 2>,
}

impl<B: Backend> QueueSimilarities<B> {
    /// Normalises `q` and `k`, detaches `k` and the queue (they get no gradient) and computes
    /// the similarities. The queue rows are used as stored (keys are stored normalised).
    pub(crate) fn new(loss: &str, q: Tensor<B, 2>, k: Tensor<B, 2>, queue: Tensor<B, 2>) -> Self {
        Self::of_unit_keys(loss, q, l2_normalize(stop_gradient(k)), queue)
    }

    /// [`Self::new`] for keys that are unit rows already (used as given, detached).
    pub(crate) fn of_unit_keys(
        loss: &str,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        queue: Tensor<B, 2>,
    ) -> Self {
        assert_same_shape(loss, ("q", q.dims()), ("k", k.dims()));
        assert_min_batch(loss, "q", q.dims(), 1);
        let [_, dim] = q.dims();
        let [queue_len, queue_dim] = queue.dims();
        assert!(
            queue_dim == dim && queue_len > 0,
            "{loss}: `queue` has shape {:?} but the queries have shape {:?}; the queue needs at \
             least one row and the same width",
            queue.dims(),
            q.dims()
        );
        let q = l2_normalize(q);
        let k = stop_gradient(k);
        let queue = stop_gradient(queue);
        let positive = (q.clone() * k).sum_dim(1);
        let negatives = q.clone().matmul(queue.clone().transpose());
        Self {
            queries: q,
            queue,
            positive,
            negatives,
        }
    }

    /// `[B, 1]`: `logsumexp([positive, negatives] / τ)` per row, without materialising the
    /// concatenated logits.
    pub(crate) fn log_partition(&self, temperature: f64) -> Tensor<B, 2> {
        let negatives_max = self.negatives.clone().detach().max_dim(1);
        self.log_partition_with_max(temperature, negatives_max)
    }

    /// [`Self::log_partition`] given each row's largest negative similarity `[B, 1]` (the top-K
    /// selection of SoftNCE finds it anyway), which saves a pass over the `[B, K]` similarities.
    pub(crate) fn log_partition_with_max(
        &self,
        temperature: f64,
        negatives_max: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let pos = self.positive.clone() / temperature;
        let neg = self.negatives.clone() / temperature;
        let shift = (negatives_max.detach() / temperature)
            .max_pair(pos.clone())
            .detach();
        let total = (neg - shift.clone()).exp().sum_dim(1) + (pos - shift.clone()).exp();
        shift + total.log()
    }
}

impl InfoNceLoss {
    /// Temperature `τ`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// Mean InfoNCE of the queries against their keys and the queue.
    ///
    /// # Shapes
    /// - `q`: `[B, D]` online projections (normalised here)
    /// - `k`: `[B, D]` keys of the other view (normalised and detached here)
    /// - `queue`: `[K, D]` stored keys (unit rows; detached here)
    /// - output: `[1]`
    pub fn forward<B: Backend>(
        &self,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        queue: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        self.forward_with_queries(q, k, queue).0
    }

    /// [`Self::forward`], and the unit queries `q / max(‖q‖, ε)` it compared, detached: the
    /// normalised projections a caller would otherwise compute a second time (MoCo's step
    /// embeddings).
    ///
    /// # Shapes
    /// - `q`, `k`: `[B, D]`; `queue`: `[K, D]`; output: `[1]` and `[B, D]`
    pub fn forward_with_queries<B: Backend>(
        &self,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        queue: Tensor<B, 2>,
    ) -> (Tensor<B, 1>, Tensor<B, 2>) {
        self.forward_with_unit_keys(q, l2_normalize(stop_gradient(k)), queue)
    }

    /// [`Self::forward_with_queries`] for keys that are unit rows already, as MoCo's are (it
    /// normalises them once, for the loss and for its queue): used as given, detached.
    pub(crate) fn forward_with_unit_keys<B: Backend>(
        &self,
        q: Tensor<B, 2>,
        unit_keys: Tensor<B, 2>,
        queue: Tensor<B, 2>,
    ) -> (Tensor<B, 1>, Tensor<B, 2>) {
        // On wgpu and CUDA one operation with its gradient written out; elsewhere composed.
        let (q, k, queue) = match curriculum_ssl_models::kernels::info_nce(
            q,
            unit_keys,
            queue,
            self.temperature,
            NORM_FLOOR,
        ) {
            Ok(output) => return output,
            Err(input) => input,
        };
        let sims = QueueSimilarities::of_unit_keys("InfoNCE", q, k, queue);
        let queries = sims.queries.clone().detach();
        let loss = (sims.log_partition(self.temperature) - sims.positive / self.temperature).mean();
        (loss, queries)
    }

    /// Symmetric InfoNCE: `forward(q1, k2, queue) + forward(q2, k1, queue)` (a sum, as in the
    /// Light-MoCo code).
    ///
    /// # Shapes
    /// - `q1`, `q2`, `k1`, `k2`: `[B, D]`; `queue`: `[K, D]`; output: `[1]`
    pub fn forward_symmetric<B: Backend>(
        &self,
        q1: Tensor<B, 2>,
        q2: Tensor<B, 2>,
        k1: Tensor<B, 2>,
        k2: Tensor<B, 2>,
        queue: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        self.forward(q1, k2, queue.clone()) + self.forward(q2, k1, queue)
    }
}
