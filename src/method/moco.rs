//! MoCo v1 / v2 and Light-MoCo (documented on `Moco`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewThreads;
use super::encoder::Projected;
use super::momentum::MomentumEncoder;
use super::queue::{KeyQueue, KeyQueueConfig};
use super::ssl_method::{online_in, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{l2_normalize, InfoNceLoss, InfoNceLossConfig, SoftNceLoss, SoftNceLossConfig};

/// Configuration of [`Moco`].
#[derive(Config, Debug)]
pub struct MocoConfig {
    /// Projection width.
    #[config(default = 128)]
    pub output_dim: usize,
    /// Hidden width of the MLP projector (Light-MoCo's 2048 by default); `None`: see
    /// `feature_width_mlp`.
    #[config(default = "Some(2048)")]
    pub hidden_dim: Option<usize>,
    /// With `hidden_dim = None`: `true` builds MoCo v2's MLP, whose hidden width is the
    /// backbone's feature width (`Linear(d, d) → ReLU → Linear(d, 128)`, Chen et al. 2020 and
    /// their code's `dim_mlp = fc.weight.shape[1]`); `false` MoCo v1's linear projection.
    /// Ignored when `hidden_dim` is set.
    #[config(default = false)]
    pub feature_width_mlp: bool,
    /// BatchNorm in the projector's hidden layer. Neither MoCo v2 nor Light-MoCo (paper and
    /// public code) has one: off by default.
    #[config(default = false)]
    pub head_batch_norm: bool,
    /// Number of keys in the queue (a multiple of the keys enqueued per step).
    #[config(default = 4096)]
    pub queue_size: usize,
    /// Momentum `m` of the key encoder (at the start, if `cosine_momentum`).
    #[config(default = 0.99)]
    pub momentum: f64,
    /// Raise the momentum along a cosine from `momentum` to 1 over training.
    #[config(default = false)]
    pub cosine_momentum: bool,
    /// Symmetric loss: both views serve as queries (losses summed, both key sets enqueued).
    #[config(default = false)]
    pub symmetric: bool,
    /// InfoNCE temperature (unused with SoftNCE, which has its own).
    #[config(default = 0.2)]
    pub temperature: f64,
    /// SoftNCE instead of InfoNCE (Light-MoCo).
    #[config(default = "None")]
    pub soft_nce: Option<SoftNceLossConfig>,
    /// Under data-parallel replicas, MoCo's shuffling BatchNorm (He et al. 2020, §3.3) instead
    /// of synchronised batch norm: every batch norm uses its replica's own shard, and the key
    /// encoder sees the global batch in a shuffled order, each replica encoding its slice of the
    /// shuffle, so that a query and its key are normalised with different images' statistics
    /// (the leak through batch statistics that the paper's shuffling prevents). The order is a
    /// permutation drawn from the step number, the same on every replica. On one device it
    /// changes nothing. Default `false`: synchronised batch norm, which also prevents the leak
    /// (MoCo v3's choice).
    #[config(default = false)]
    pub shuffle_bn: bool,
}

impl MocoConfig {
    /// MoCo v1 (He et al. 2020, §3.3): linear projection to 128, `τ = 0.07`, `m = 0.999`.
    pub fn moco_v1() -> Self {
        Self::new()
            .with_hidden_dim(None)
            .with_temperature(0.07)
            .with_momentum(0.999)
    }

    /// MoCo v2 (Chen et al. 2020, §2): MLP projection `[feature width, 128]` without BN (the
    /// hidden layer as wide as the backbone's features: 2048 for ResNet-50, 512 for ResNet-18),
    /// `τ = 0.2`, `m = 0.999`.
    pub fn moco_v2() -> Self {
        Self::new()
            .with_hidden_dim(None)
            .with_feature_width_mlp(true)
            .with_momentum(0.999)
    }

    /// Light-MoCo (Lin et al. 2022, §3.1 and §4.1): MLP `[2048, 128]` without BN (§3.1.1),
    /// `τ = 0.1` (§3.1.2), `m = 0.99` (§4.1), symmetric loss (§3.1.5), SoftNCE with `K = 20`,
    /// `α = 0.8`, linear-decay weights (§3.2, §4.1). The cosine increase of `m` (§3.1.4) is off:
    /// the paper finds it helps ResNet-18 and hurts EfficientNet-B0 (turn it on with
    /// `with_cosine_momentum(true)` for ResNet-18, as the `light_moco` recipe does).
    pub fn light_moco() -> Self {
        Self::new()
            .with_hidden_dim(Some(2048))
            .with_head_batch_norm(false)
            .with_symmetric(true)
            .with_soft_nce(Some(SoftNceLossConfig::new()))
    }

    /// The keys one step of `batch_size` images enqueues: the batch, twice for the symmetric
    /// loss (`usize::MAX` where that overflows: no queue takes it).
    pub fn keys_per_step(&self, batch_size: usize) -> usize {
        if self.symmetric {
            batch_size.saturating_mul(2)
        } else {
            batch_size
        }
    }

    /// Whether the queue takes the keys of steps of `batch_size` images.
    ///
    /// # Errors
    /// The [`QueueFit`](super::QueueFit) that says why not.
    pub fn check_batch(&self, batch_size: usize) -> Result<(), super::queue::QueueFit> {
        KeyQueueConfig::new(self.queue_size, self.output_dim).fits(self.keys_per_step(batch_size))
    }

    /// Builds MoCo around a backbone made by `backbone` (called twice: the query encoder, and a
    /// fresh module into which the key encoder's copy is loaded). `batch_size` is the number of
    /// images per step, used to check the queue size.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        batch_size: usize,
        device: &B::Device,
    ) -> Result<Moco<B, M>, ConfigError> {
        let query_backbone = backbone(device);
        let feature_dim = query_backbone.feature_dim();
        let hidden = match self.hidden_dim {
            Some(hidden) => Some(hidden),
            None if self.feature_width_mlp => Some(feature_dim),
            None => None,
        };
        let head = match hidden {
            Some(hidden) => MlpHeadConfig::new(feature_dim, hidden, self.output_dim)
                .with_batch_norm(self.head_batch_norm),
            None => MlpHeadConfig::new(feature_dim, self.output_dim, self.output_dim)
                .with_num_layers(1)
                .with_batch_norm(false),
        };
        let online = Projected {
            backbone: query_backbone,
            projector: head.init(device)?,
        };
        let fresh = Projected {
            backbone: backbone(device),
            projector: head.init(device)?,
        };
        let key = MomentumEncoder::new(
            &online,
            fresh,
            self.momentum,
            self.cosine_momentum,
            "momentum",
        )?;
        let keys_per_step = self.keys_per_step(batch_size);
        let queue =
            KeyQueueConfig::new(self.queue_size, self.output_dim).init(keys_per_step, device)?;
        let loss = match &self.soft_nce {
            Some(config) => {
                config.validate_queue(self.queue_size)?;
                QueueLoss::Soft(config.init()?)
            }
            None => QueueLoss::Info(
                InfoNceLossConfig::new()
                    .with_temperature(self.temperature)
                    .init()?,
            ),
        };
        Ok(Moco {
            online,
            key,
            queue,
            loss,
            symmetric: self.symmetric,
            view_threads: ViewThreads::default(),
            replica: None,
            shuffle_bn: self.shuffle_bn,
        })
    }
}

#[derive(Debug, Clone)]
enum QueueLoss {
    Info(InfoNceLoss),
    Soft(SoftNceLoss),
}

/// The checkpointed state of [`Moco`]: the key encoder, the queue and its pointer.
#[derive(Record)]
pub struct MocoState<B: Backend, M: Backbone<B>> {
    /// The key encoder's record (weights and batch-norm statistics).
    pub key: <Projected<B, M> as Module<B>>::Record,
    /// The queued keys, `[size, dim]`.
    pub queue: Tensor<B, 2>,
    /// The slot the next keys are written to.
    pub pointer: usize,
}

/// MoCo with its key encoder and queue. Build it with [`MocoConfig::init`].
///
/// MoCo v1 / v2 (He et al. 2020, <https://arxiv.org/abs/1911.05722>; Chen et al. 2020,
/// <https://arxiv.org/abs/2003.04297>) and Light-MoCo (SoftNCE; Lin et al.,
/// <https://arxiv.org/abs/2212.07158>):
/// a query encoder, a momentum key encoder `θk ← m·θk + (1 − m)·θq` (optionally with `m` rising
/// along a cosine to 1), and a FIFO queue of past keys as negatives.
///
/// v1 uses a linear projection, v2 an MLP whose hidden width is the backbone's feature width;
/// Light-MoCo is v2 with the wider `[2048, 128]` head (no BatchNorm), `τ = 0.1`, `m = 0.99`, the
/// symmetric loss and SoftNCE ([`MocoConfig::light_moco`]). Keys are
/// enqueued in [`SslMethod::after_step`], after the loss of the step used the old queue. On one
/// device there is no shuffling BatchNorm: the key encoder sees the whole batch in its own
/// BatchNorm statistics (as lightly does on a single GPU). Under data-parallel replicas the batch
/// norms are synchronised by default; [`MocoConfig::shuffle_bn`] selects MoCo's own shuffling
/// BatchNorm instead (He et al. 2020, §3.3).
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#moco-v1-and-v2` and `docs/methods.md#light-moco`.
#[derive(Debug, Clone)]
pub struct Moco<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    key: MomentumEncoder<Projected<B, M>>,
    queue: KeyQueue<B>,
    loss: QueueLoss,
    symmetric: bool,
    /// A symmetric loss's two query passes back-propagated on two threads, when on.
    view_threads: ViewThreads<B, Projected<B, M>>,
    /// This method's replica in a data-parallel run: every replica's keys are enqueued.
    replica: Option<Replica<B>>,
    /// MoCo's shuffling BatchNorm under replicas ([`MocoConfig::shuffle_bn`]).
    shuffle_bn: bool,
}

impl<B: Backend, M: Backbone<B>> Moco<B, M> {
    /// The momentum copy (the key encoder): its network and its momentum schedule.
    pub fn key_encoder(&self) -> &MomentumEncoder<Projected<B, M>> {
        &self.key
    }

    /// The queue of negative keys.
    pub fn queue(&self) -> &KeyQueue<B> {
        &self.queue
    }

    /// Whether this MoCo runs with shuffling batch norm (a replica, and
    /// [`MocoConfig::shuffle_bn`]).
    pub fn shuffles_batch_norm(&self) -> bool {
        self.shuffle_bn && self.replica.is_some()
    }

    /// [`Moco::keys`] of `first` (salt 2) then of `second` (salt 1), as the symmetric loss
    /// takes them: one pass of both through the key encoder when the views go as one batch
    /// ([`ViewPasses::Joint`](super::ViewPasses::Joint)) and no batch shuffle spreads them over
    /// replicas, the key encoder's batch norms taking each view's moments, in that order.
    fn keys_of_both(
        &self,
        first: Tensor<B, 4>,
        second: Tensor<B, 4>,
        step: usize,
    ) -> [(Tensor<B, 2>, Option<Tensor<B, 2>>); 2] {
        if self.shuffles_batch_norm() {
            return [self.keys(first, step, 2), self.keys(second, step, 1)];
        }
        let [a, b] = self.view_threads.both([first, second], |x, groups| {
            l2_normalize(self.key.network().forward_grouped(x, groups)).detach()
        });
        let all = |own: &Tensor<B, 2>| self.replica.as_ref().map(|r| r.gather(own.clone()));
        let (all_a, all_b) = (all(&a), all(&b));
        [(a, all_a), (b, all_b)]
    }

    /// The L2-normalised keys of `images` (detached): this replica's rows and, under replicas,
    /// every replica's in the one-device order. With shuffling batch norm, the global batch is
    /// gathered, permuted by [`shuffle_permutation`] of `(step, salt)`, this replica encodes its
    /// slice of the permutation with its own batch statistics, and the keys are gathered and put
    /// back in the images' order.
    fn keys(
        &self,
        images: Tensor<B, 4>,
        step: usize,
        salt: u64,
    ) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
        let Some(replica) = self.replica.as_ref().filter(|_| self.shuffle_bn) else {
            let own = l2_normalize(self.key.network().forward(images)).detach();
            let all = self.replica.as_ref().map(|r| r.gather(own.clone()));
            return (own, all);
        };
        let [n, c, h, w] = images.dims();
        let total = n * replica.replicas();
        let device = images.device();
        let all_images = replica
            .gather(images.detach().reshape([n, c * h * w]))
            .reshape([total, c, h, w]);
        let order = shuffle_permutation(total, step, salt);
        let rows = |ids: &[usize]| {
            let len = ids.len();
            let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
            Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [len]), &device)
        };
        let mine = &order[replica.rank() * n..(replica.rank() + 1) * n];
        let encoded =
            l2_normalize(self.key.network().forward(all_images.select(0, rows(mine)))).detach();
        let mut inverse = vec![0; total];
        for (position, &image) in order.iter().enumerate() {
            inverse[image] = position;
        }
        let all = replica.gather(encoded).select(0, rows(&inverse)).detach();
        (replica.own_rows(all.clone()), Some(all))
    }

    /// The queue loss of the queries `q` against their keys `k` (unit rows: InfoNCE takes them
    /// as given) and the queue, and the unit queries it compared (detached: the step's
    /// embeddings).
    fn queue_loss(
        &self,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        queue: Tensor<B, 2>,
        progress: Progress,
    ) -> (Tensor<B, 1>, Tensor<B, 2>) {
        match &self.loss {
            QueueLoss::Info(loss) => loss.forward_with_unit_keys(q, k, queue),
            QueueLoss::Soft(loss) => loss.forward_with_queries(q, k, queue, progress),
        }
    }
}

/// The order in which shuffling batch norm hands the `total` images of a global batch to the
/// replicas at `step` (`salt` tells the views apart): a permutation of `0..total` drawn from
/// `(step, salt)` alone, so that every replica draws the same one and a resumed run the same.
pub fn shuffle_permutation(total: usize, step: usize, salt: u64) -> Vec<usize> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let seed = crate::base::seed::mix_seed(0x5348_5546_464c_4542, (step as u64) << 2 | salt);
    let mut order: Vec<usize> = (0..total).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    order
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for Moco<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    type State = MocoState<B, M>;

    online_in!(online, view_threads);

    fn check_batch_size(&self, batch_size: usize) -> Result<(), ConfigError> {
        let keys = if self.symmetric {
            batch_size.saturating_mul(2)
        } else {
            batch_size
        };
        self.queue.check_steps(batch_size, keys)
    }

    fn state(&self) -> MocoState<B, M> {
        MocoState {
            key: self.key.record(),
            queue: self.queue.keys(),
            pointer: self.queue.pointer(),
        }
    }

    fn load_state(&mut self, state: MocoState<B, M>) -> Result<(), ConfigError> {
        self.queue
            .restore(state.queue, state.pointer, "queue", "MoCo's queue")?;
        self.key.load_record(state.key);
        self.view_threads.clear();
        Ok(())
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        self.view_threads.clear();
        let queue = self.queue.keys();
        // Shuffling batch norm: every batch norm of this forward uses the shard's own moments.
        let _own_moments = self
            .shuffles_batch_norm()
            .then(curriculum_ssl_models::replica_stats::suspend::<B>);
        let (k2, loss, keys, q1) = if self.symmetric {
            let [(k2, all_k2), (k1, all_k1)] =
                self.keys_of_both(view2.clone(), view1.clone(), progress.step);
            let ([q1, q2], _) =
                self.view_threads
                    .passes(&self.online, [view1, view2], true, |net, x, groups| {
                        (net.forward_grouped(x, groups), ())
                    });
            // Both orderings in one call: twice the mean over the 2B rows is the sum of the two
            // means, with half the ops and one product against the queue.
            let [rows, _] = q1.dims();
            let (loss, queries) = self.queue_loss(
                Tensor::cat(vec![q1, q2], 0),
                Tensor::cat(vec![k2.clone(), k1.clone()], 0),
                queue,
                progress,
            );
            let q1 = queries.slice(0..rows);
            let loss = loss * 2.0;
            let keys = match (all_k1, all_k2) {
                // The one-device order: every image's first-view keys, then its second-view's.
                (Some(all_k1), Some(all_k2)) => Tensor::cat(vec![all_k1, all_k2], 0),
                _ => Tensor::cat(vec![k1, k2.clone()], 0),
            };
            (k2, loss, keys, q1)
        } else {
            let (k2, all_k2) = self.keys(view2.clone(), progress.step, 2);
            let q1 = self.online.forward(view1);
            let keys = all_k2.unwrap_or_else(|| k2.clone());
            let (loss, q1) = self.queue_loss(q1, k2.clone(), queue, progress);
            (k2, loss, keys, q1)
        };
        // The unit queries the loss compared, detached (not normalised a second time).
        let embeddings = [q1, k2];
        self.queue.stage(keys);
        let output = self.key.output(loss, progress, embeddings);
        match &self.loss {
            QueueLoss::Soft(soft) => output.with_value("softnce_alpha", soft.alpha_at(progress)),
            _ => output,
        }
    }

    /// Every replica's keys are enqueued (in the one-device order), so the queue must hold
    /// whole steps of `W` replicas' keys: MoCo must be built with the global batch size
    /// (the trainer does).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        let per_step = self.queue.keys_per_step();
        if !per_step.is_multiple_of(replica.replicas()) {
            return Err(ConfigError::new(
                "devices",
                format!(
                    "MoCo enqueues {per_step} keys per step, which {} replicas cannot share \
                     equally (build it with the global batch size)",
                    replica.replicas()
                ),
            ));
        }
        self.view_threads.replicated();
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, progress: Progress) {
        self.key.update(&self.online, progress);
        self.queue.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{cosine, host, images, progress, rows, Ad};

    fn moco() -> Moco<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            MocoConfig::new()
                .with_hidden_dim(Some(8))
                .with_output_dim(4)
                .with_queue_size(8)
                .init(|d| Tiny::new(16, 6, d), 4, d)
        })
        .unwrap()
    }

    /// The loss is InfoNCE with `τ = 0.2`: each query's key (the key encoder's projection of the
    /// other view) against the queue's keys, `−log(e^{s⁺/τ} / (e^{s⁺/τ} + Σ e^{sₖ/τ}))` with
    /// cosine similarities, averaged over the images and computed here on the host; after the
    /// step the keys replace the queue's oldest slots (from slot 0).
    #[test]
    fn the_loss_is_infonce_against_the_queue_and_the_keys_enter_it() {
        let mut m = moco();
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let q = host(m.online().forward(v1.clone()));
        let k = host(m.key_encoder().network().forward(v2.clone()));
        let queue = host(m.queue().keys());
        let (q, k, queue) = (rows(&q, 4), rows(&k, 4), rows(&queue, 4));
        let expected = (0..4)
            .map(|i| {
                let positive = cosine(q[i], k[i]) / 0.2;
                let negatives = queue.iter().map(|n| (cosine(q[i], n) / 0.2).exp());
                (positive.exp() + negatives.sum::<f64>()).ln() - positive
            })
            .sum::<f64>()
            / 4.0;
        let at = progress(0, 10, 0, 1);
        let loss = host(m.forward(v1, v2, at).loss)[0];
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
        m.after_step(at);
        let after = host(m.queue().keys());
        for (i, key) in k.iter().enumerate() {
            let norm = key.iter().map(|v| v * v).sum::<f64>().sqrt();
            for (j, v) in key.iter().enumerate() {
                assert!((after[i * 4 + j] - v / norm).abs() < 1e-12);
            }
        }
        assert_eq!(
            &after[16..],
            &queue.concat()[16..],
            "the other slots are kept"
        );
        assert_eq!(m.queue().pointer(), 4);
    }

    /// The step's embeddings are the online projections of the first view as unit rows (the
    /// loss's own, not normalised again) and their keys — with InfoNCE and SoftNCE, one-sided
    /// and symmetric (where the queries come out of the loss's two-ordering batch: the wrong
    /// half fails): the values by the definition on the host, 1e-12, and detached (as
    /// `MethodOutput::with_embeddings` makes them).
    #[test]
    fn the_embeddings_are_the_unit_queries_and_the_keys_detached() {
        let device = Default::default();
        for (symmetric, soft) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut m = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
                MocoConfig::new()
                    .with_hidden_dim(Some(8))
                    .with_output_dim(4)
                    .with_queue_size(8)
                    .with_symmetric(symmetric)
                    .with_soft_nce(soft.then(|| SoftNceLossConfig::new().with_top_k(2)))
                    .init(|d| Tiny::new(16, 6, d), 4, d)
            })
            .unwrap();
            let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
            let q = host(m.online().forward(v1.clone()));
            let k = host(l2_normalize(m.key_encoder().network().forward(v2.clone())));
            let out = m.forward(v1, v2, progress(0, 10, 0, 1));
            let [queries, keys] = out.embeddings.expect("MoCo gives two embeddings");
            let case = format!("symmetric {symmetric}, SoftNCE {soft}");
            assert!(
                !queries.is_require_grad() && !keys.is_require_grad(),
                "{case}"
            );
            assert_eq!(queries.dims(), [4, 4], "{case}");
            let unit: Vec<f64> = rows(&q, 4)
                .into_iter()
                .flat_map(|row| {
                    let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
                    row.iter().map(move |v| v / norm)
                })
                .collect();
            for (got, want) in [(host(queries), unit), (host(keys), k)] {
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() < 1e-12, "{case}: {got:?} vs {want:?}");
                }
            }
        }
    }
}
