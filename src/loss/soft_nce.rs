//! SoftNCE, Light-MoCo's soft-target InfoNCE (documented on `SoftNceLoss`).

use burn::prelude::*;

use super::info_nce::QueueSimilarities;
use crate::base::error::{in_range, positive, ConfigError};
use crate::base::schedule::{Pace, Scheduler, SchedulerConfig};
use crate::base::Progress;

/// How the `1 − α` share is spread over the `K` nearest negatives.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum SoftNceWeights {
    /// `β_k = (1 − α) / K`.
    Average,
    /// `β_k = 2(K − k) / ((K − 1)K) · (1 − α)`, `k = 1..K` (the paper's default; `β_K = 0`).
    LinearDecay,
}

/// How `α`, the target share of the positive, moves during training. Every variant is a
/// [`SchedulerConfig`] underneath ([`AlphaSchedule::scheduler`]), read with the run's
/// [`Progress`] like every other scheduled knob; a user's own function goes through
/// [`SoftNceLoss::with_alpha_scheduler`].
#[derive(Config, Debug, PartialEq)]
pub enum AlphaSchedule {
    /// `α` fixed at its configured value (the paper's default).
    Static,
    /// "Incremental" difficulty: `α` falls along a cosine from 1 at the start of training to its
    /// configured value at the end, every step: `α(p) = α + (1 − α)(1 + cos πp)/2` with
    /// `p = step / total_steps` — the scheduler `Cosine { start: 1, end: α, pace: Step }`.
    Incremental,
    /// Any built-in schedule (values in `[0, 1]`); the configured `alpha` is then unused.
    Scheduled(SchedulerConfig),
}

impl AlphaSchedule {
    /// The scheduler behind this schedule for a configured `alpha`.
    pub fn scheduler(&self, alpha: f64) -> SchedulerConfig {
        match self {
            Self::Static => SchedulerConfig::Constant { value: alpha },
            Self::Incremental => SchedulerConfig::Cosine {
                start: 1.0,
                end: alpha,
                pace: Pace::Step,
            },
            Self::Scheduled(config) => config.clone(),
        }
    }
}

/// Configuration of [`SoftNceLoss`]. Defaults are the paper's (ImageNet): `K = 20`, `α = 0.8`,
/// `τ = 0.1`, linear-decay weights, static `α`.
#[derive(Config, Debug)]
pub struct SoftNceLossConfig {
    /// Temperature `τ`.
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Target share of the positive, in `(0, 1]` (at the end of training for the incremental
    /// schedule). `α = 1` is plain InfoNCE.
    #[config(default = 0.8)]
    pub alpha: f64,
    /// Number `K` of nearest negatives that share `1 − α`; at most the queue length.
    #[config(default = 20)]
    pub top_k: usize,
    /// Weight pattern over the `K` nearest negatives.
    #[config(default = "SoftNceWeights::LinearDecay")]
    pub weights: SoftNceWeights,
    /// Schedule of `α` over training.
    #[config(default = "AlphaSchedule::Static")]
    pub alpha_schedule: AlphaSchedule,
}

impl SoftNceLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<SoftNceLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        in_range("alpha", self.alpha, 0.0, 1.0, true)?;
        if self.top_k == 0 {
            return Err(ConfigError::new("top_k", "must be at least 1"));
        }
        if self.weights == SoftNceWeights::LinearDecay && self.top_k < 2 {
            return Err(ConfigError::new(
                "top_k",
                format!(
                    "linear-decay weights need K >= 2 (their sum has the factor 1/(K-1)), got {}",
                    self.top_k
                ),
            ));
        }
        let schedule = self.alpha_schedule.scheduler(self.alpha);
        schedule.validate("alpha_schedule", 0.0, 1.0)?;
        Ok(SoftNceLoss {
            temperature: self.temperature,
            alpha: schedule.into(),
            top_k: self.top_k,
            weights: self.weights,
        })
    }

    /// Checks that the queue the loss will be used with has at least `top_k` keys.
    pub fn validate_queue(&self, queue_len: usize) -> Result<(), ConfigError> {
        if self.top_k > queue_len {
            Err(ConfigError::new(
                "top_k",
                format!(
                    "K = {} nearest negatives were asked for but the queue holds only {queue_len} keys",
                    self.top_k
                ),
            ))
        } else {
            Ok(())
        }
    }
}

/// SoftNCE loss. Build it with [`SoftNceLossConfig::init`].
///
/// SoftNCE, the soft-target InfoNCE of Light-MoCo (Lin et al., "Establishing a stronger baseline
/// for lightweight contrastive models", <https://arxiv.org/abs/2212.07158>, eq. 2 and §3.2); see
/// `docs/methods.md#softnce`.
///
/// Logits as in [InfoNCE](super::InfoNceLoss). Instead of a one-hot target, the positive gets `α`
/// and the `K` negatives of the queue most similar to the query get `β_1 ≥ … ≥ β_K` (rank 1 =
/// most similar), summing to `1 − α`; every other entry gets 0. The loss is
/// `−Σ target · log_softmax(logits)`, averaged over rows. Since the target sums to one this is
/// `logsumexp(logits) − α·l_pos/τ − Σ_k β_k·v_k/τ` with `v_k` the `k`-th largest negative
/// similarity, which is how it is computed: no `[B, 1 + K_queue]` target is ever built.
///
/// Picking the `K` nearest negatives among a large queue (65,536 keys) by sorting each row would
/// cost more than the loss itself, so [`top_k_indices`] first keeps the `K` chunks with the
/// largest maxima (they contain the top `K`) and looks only inside those.
#[derive(Debug, Clone)]
pub struct SoftNceLoss {
    temperature: f64,
    alpha: Scheduler,
    top_k: usize,
    weights: SoftNceWeights,
}

impl SoftNceLoss {
    /// `α` at `progress` (in `[0, 1]`; a user's function is clamped there).
    pub fn alpha_at(&self, progress: Progress) -> f64 {
        self.alpha.value(progress, 0.0, 1.0)
    }

    /// The same loss with `α` driven by `scheduler` (e.g. [`Scheduler::custom`]).
    pub fn with_alpha_scheduler(mut self, scheduler: Scheduler) -> Self {
        self.alpha = scheduler;
        self
    }

    /// The weights `β_1..β_K` of the nearest negatives for a given `α`.
    pub fn negative_weights(&self, alpha: f64) -> Vec<f64> {
        let k = self.top_k as f64;
        (1..=self.top_k)
            .map(|rank| match self.weights {
                SoftNceWeights::Average => (1.0 - alpha) / k,
                SoftNceWeights::LinearDecay => {
                    2.0 * (k - rank as f64) / ((k - 1.0) * k) * (1.0 - alpha)
                }
            })
            .collect()
    }

    /// Mean SoftNCE at `progress` (only a moving `α` schedule reads it).
    ///
    /// # Shapes
    /// - `q`: `[B, D]` online projections (normalised here)
    /// - `k`: `[B, D]` keys of the other view (normalised and detached here)
    /// - `queue`: `[K_queue, D]` stored unit keys (detached here), `K_queue >= top_k`
    /// - output: `[1]`
    pub fn forward<B: Backend>(
        &self,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        queue: Tensor<B, 2>,
        progress: Progress,
    ) -> Tensor<B, 1> {
        self.forward_with_queries(q, k, queue, progress).0
    }

    /// [`Self::forward`], and the unit queries `q / max(‖q‖, ε)` it compared, detached (as
    /// [`InfoNceLoss::forward_with_queries`](super::InfoNceLoss::forward_with_queries)).
    ///
    /// # Shapes
    /// - `q`, `k`: `[B, D]`; `queue`: `[K_queue, D]`; output: `[1]` and `[B, D]`
    pub fn forward_with_queries<B: Backend>(
        &self,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        queue: Tensor<B, 2>,
        progress: Progress,
    ) -> (Tensor<B, 1>, Tensor<B, 2>) {
        let queue_len = queue.dims()[0];
        assert!(
            self.top_k <= queue_len,
            "SoftNCE: top_k = {} nearest negatives but `queue` has shape {:?}",
            self.top_k,
            queue.dims()
        );
        let sims = QueueSimilarities::new("SoftNCE", q, k, queue);
        let queries = sims.queries.clone().detach();
        let alpha = self.alpha_at(progress);
        if alpha >= 1.0 {
            let log_partition = sims.log_partition(self.temperature);
            return (
                (log_partition - sims.positive / self.temperature).mean(),
                queries,
            );
        }
        let device = sims.negatives.device();
        // The selection also yields each row's largest similarity, the log-sum-exp's shift.
        let (nearest, negatives_max) =
            top_k_indices_and_max(sims.negatives.clone().detach(), self.top_k);
        let log_partition = sims.log_partition_with_max(self.temperature, negatives_max);
        let per_row = log_partition - sims.positive.clone() * (alpha / self.temperature);
        // The similarities with the K nearest keys, recomputed from the K selected queue rows:
        // their gradient then touches a [B, K, D] tensor instead of scattering into a
        // [B, K_queue] one.
        let [rows, dim] = sims.queries.dims();
        let keys = sims
            .queue
            .clone()
            .select(0, nearest.reshape([rows * self.top_k]))
            .reshape([rows, self.top_k, dim]);
        // A batched product `[B, K, D] × [B, D, 1]`: one GEMM per row, forward and backward,
        // where a broadcast multiply and sum would walk the `[B, K, D]` product element-wise.
        let values = keys
            .matmul(sims.queries.clone().reshape([rows, dim, 1]))
            .reshape([rows, self.top_k]);
        let beta = Tensor::<B, 1>::from_data(
            TensorData::new(self.negative_weights(alpha), [self.top_k]),
            &device,
        )
        .reshape([1, self.top_k]);
        let loss = (per_row - (values * beta).sum_dim(1) / self.temperature).mean();
        (loss, queries)
    }

    /// Symmetric SoftNCE: `forward(q1, k2) + forward(q2, k1)` against the same queue.
    ///
    /// # Shapes
    /// - `q1`, `q2`, `k1`, `k2`: `[B, D]`; `queue`: `[K_queue, D]`; output: `[1]`
    pub fn forward_symmetric<B: Backend>(
        &self,
        q1: Tensor<B, 2>,
        q2: Tensor<B, 2>,
        k1: Tensor<B, 2>,
        k2: Tensor<B, 2>,
        queue: Tensor<B, 2>,
        progress: Progress,
    ) -> Tensor<B, 1> {
        self.forward(q1, k2, queue.clone(), progress) + self.forward(q2, k1, queue, progress)
    }
}

/// Rows up to this length are sorted directly.
const DIRECT_SORT_MAX: usize = 512;

/// Column indices of the `k` largest entries of each row, largest first.
///
/// Rows longer than 512 are cut into chunks of `S ≈ √(n/k)` entries; the `k` chunks with the
/// largest maxima hold every one of the row's `k` largest entries (a chunk whose maximum is
/// below the `k`-th largest value cannot hold one of them, and at most `k` chunks have a maximum
/// at or above it). Both the choice of those chunks among the chunk maxima and the final choice
/// among their `k·S` entries are again top-`k` problems, solved the same way, so no long row is
/// ever sorted: for 256 rows of 65,536 this is about 25 times faster than a sort.
///
/// # Shapes
/// - `values`: `[rows, n]` with `n >= k` → `[rows, k]`
pub fn top_k_indices<B: Backend>(values: Tensor<B, 2>, k: usize) -> Tensor<B, 2, Int> {
    top_k_indices_and_max(values, k).0
}

/// [`top_k_indices`] and each row's maximum `[rows, 1]`, which the selection finds on the way.
pub(crate) fn top_k_indices_and_max<B: Backend>(
    values: Tensor<B, 2>,
    k: usize,
) -> (Tensor<B, 2, Int>, Tensor<B, 2>) {
    let [rows, n] = values.dims();
    assert!(
        k >= 1 && k <= n,
        "top_k_indices: k = {k} but the rows have {n} entries"
    );
    let chunk = ((n as f64 / k as f64).sqrt().ceil() as usize).next_power_of_two();
    let chunks = n.div_ceil(chunk);
    if n <= DIRECT_SORT_MAX || chunks <= k || chunk == 1 {
        let (sorted, indices) = values.sort_descending_with_indices(1);
        return (indices.narrow(1, 0, k), sorted.narrow(1, 0, 1));
    }
    let device = values.device();
    let padding = chunks * chunk - n;
    let padded = if padding > 0 {
        let fill = Tensor::<B, 2>::full([rows, padding], f64::NEG_INFINITY, &device);
        Tensor::cat(vec![values, fill], 1)
    } else {
        values
    };
    let maxima = padded
        .clone()
        .reshape([rows, chunks, chunk])
        .max_dim(2)
        .reshape([rows, chunks]);
    let (best_chunks, row_max) = top_k_indices_and_max(maxima, k);
    // The `k` chosen chunks of every row, as whole rows of the `[rows · chunks, chunk]` matrix:
    // one row gather, with index arithmetic on `[rows, k]` only.
    let row_starts = Tensor::<B, 1, Int>::arange(0..rows as i64, &device)
        .mul_scalar(chunks as i64)
        .reshape([rows, 1]);
    let chosen = (best_chunks.clone() + row_starts).reshape([rows * k]);
    let candidates = padded
        .reshape([rows * chunks, chunk])
        .select(0, chosen)
        .reshape([rows, k * chunk]);
    // Position `p` among the candidates is entry `p mod S` of chosen chunk `p div S`.
    let local = top_k_indices(candidates, k);
    let chunk_of = best_chunks.gather(1, local.clone().div_scalar(chunk as i64));
    let indices = chunk_of.mul_scalar(chunk as i64) + local.remainder_scalar(chunk as i64);
    (indices, row_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn top_k_of_a_short_row_by_hand() {
        let values = Tensor::<B, 2>::from_data(
            [[0.1, 0.9, 0.5, 0.7], [0.4, 0.3, 0.2, 0.8]],
            &Default::default(),
        );
        let idx: Vec<i64> = top_k_indices(values, 2)
            .into_data()
            .convert::<i64>()
            .to_vec()
            .unwrap();
        assert_eq!(idx, vec![1, 3, 3, 0]);
    }

    #[test]
    fn the_selection_returns_each_rows_maximum() {
        // 3 rows of 10,000 (the recursive path, with padding): the maximum is planted.
        let n = 10_000;
        let mut data: Vec<f64> = (0..3 * n)
            .map(|i| ((i * 7919) % 10_007) as f64 / 10_007.0)
            .collect();
        for (row, col) in [(0usize, 17usize), (1, 9_999), (2, 5_000)] {
            data[row * n + col] = 2.0 + row as f64;
        }
        let values = Tensor::<B, 2>::from_data(TensorData::new(data, [3, n]), &Default::default());
        let (idx, max) = top_k_indices_and_max(values, 5);
        let idx: Vec<i64> = idx.into_data().convert::<i64>().to_vec().unwrap();
        let max: Vec<f64> = max.into_data().to_vec().unwrap();
        assert_eq!(max, vec![2.0, 3.0, 4.0]);
        assert_eq!([idx[0], idx[5], idx[10]], [17, 9_999, 5_000]);
    }

    #[test]
    fn average_weights_by_hand() {
        let loss = SoftNceLossConfig::new()
            .with_top_k(4)
            .with_weights(SoftNceWeights::Average)
            .init()
            .unwrap();
        for w in loss.negative_weights(0.6) {
            assert!((w - 0.1).abs() < 1e-15);
        }
    }
}
