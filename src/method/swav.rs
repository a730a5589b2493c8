//! SwAV (documented on `Swav`).

use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::ssl_method::{
    gradients_without, locals_through, online_in, replica_in, split_views, HasBackbone,
    MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::{MlpHead, MlpHeadConfig};
use crate::loss::{l2_normalize, SwavLoss, SwavLossConfig};

/// Configuration of [`Swav`].
#[derive(Config, Debug)]
pub struct SwavConfig {
    /// Hidden width of the projector (the paper's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width, the prototypes' dimension (the paper's 128).
    #[config(default = 128)]
    pub output_dim: usize,
    /// Number of prototypes `K` (the paper's 3000 on ImageNet).
    #[config(default = 3000)]
    pub num_prototypes: usize,
    /// Epochs during which the prototypes receive no update (the paper's 1).
    #[config(default = 1)]
    pub freeze_prototypes_epochs: usize,
    /// Projections per global view kept in the queue; 0 for no queue (the paper's 3840 with
    /// batches of 256).
    #[config(default = 0)]
    pub queue_size: usize,
    /// The epoch from which the queue is filled (the paper's 15); it is used once full.
    #[config(default = 15)]
    pub queue_start_epoch: usize,
    /// The loss (temperature 0.1, Sinkhorn–Knopp 3 iterations at `ε = 0.05`).
    #[config(default = "SwavLossConfig::new()")]
    pub loss: SwavLossConfig,
}

/// The trainable part of [`Swav`].
#[derive(Module, Debug)]
pub struct SwavNetwork<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head.
    pub projector: MlpHead<B>,
    /// The prototypes: a linear map without bias, weight `[D, K]` whose columns are the unit
    /// prototype vectors.
    pub prototypes: Linear<B>,
}

impl<B: Backend, M> HasBackbone<M> for SwavNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> SwavNetwork<B, M> {
    /// The unit projections and their prototype scores (cosines) of a batch of crops.
    ///
    /// # Shapes
    /// - `x`: `[N, C, H, W]` → `([N, D], [N, K])`
    pub fn forward(&self, x: Tensor<B, 4>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let z = l2_normalize(self.projector.forward(self.backbone.forward_features(x)));
        let scores = self.prototypes.forward(z.clone());
        (z, scores)
    }
}

/// The prototypes with unit columns: a new leaf parameter (same id), so the next step's
/// gradient reaches it.
fn normalised_prototypes<B: Backend>(prototypes: Linear<B>) -> Linear<B> {
    let mut prototypes = prototypes;
    prototypes.weight = prototypes.weight.map(|w| {
        let trainable = w.is_require_grad();
        // Untracked: the normalisation is not part of any graph.
        let w = w.detach().set_require_grad(false);
        let norm = w.clone().powi_scalar(2).sum_dim(0).sqrt().clamp_min(1e-12);
        let w = w / norm;
        if trainable {
            w.require_grad()
        } else {
            w
        }
    });
    prototypes
}

impl SwavConfig {
    /// Builds SwAV around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width, no prototype, or a queue that cannot hold whole batches.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Swav<B, M>, ConfigError> {
        let backbone = backbone(device);
        if self.num_prototypes == 0 {
            return Err(ConfigError::new("num_prototypes", "must be at least 1"));
        }
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .init(device)?;
        // The prototypes are normalised (drawn) and the queue made when SwAV is: sized first
        // (2³² prototypes or queue rows filled the machine's memory).
        let wide = |a: usize, b: usize| (a as u64).saturating_mul(b as u64);
        crate::base::seed::check_count(
            wide(self.output_dim, self.num_prototypes),
            "the prototypes",
        )?;
        crate::base::seed::check_count(
            wide(self.queue_size, self.output_dim).saturating_mul(2),
            "the queue of projections",
        )?;
        let prototypes = LinearConfig::new(self.output_dim, self.num_prototypes)
            .with_bias(false)
            .init(device);
        let queue = (self.queue_size > 0).then(|| SwavQueue {
            views: [0, 1].map(|_| Tensor::zeros([self.queue_size, self.output_dim], device)),
            filled: 0,
        });
        Ok(Swav {
            online: SwavNetwork {
                backbone,
                projector,
                prototypes: normalised_prototypes(prototypes),
            },
            loss: self.loss.init()?,
            freeze_prototypes_epochs: self.freeze_prototypes_epochs,
            queue_start_epoch: self.queue_start_epoch,
            queue,
            frozen: false,
            pending: None,
            replica: None,
        })
    }
}

/// The queue of global-view projections, one ring per global view, newest first (SwAV's
/// shift register).
#[derive(Debug, Clone)]
struct SwavQueue<B: Backend> {
    views: [Tensor<B, 2>; 2],
    filled: usize,
}

/// The checkpointed state of [`Swav`]: the queue, when there is one.
#[derive(Record)]
pub struct SwavState<B: Backend> {
    /// Both global views' queued projections stacked, `[2, size, D]`.
    pub queue: Option<Tensor<B, 3>>,
    /// How many rows of each queue hold projections.
    pub filled: usize,
}

/// SwAV. Build it with [`SwavConfig::init`].
///
/// SwAV (Caron et al., "Unsupervised Learning of Visual Features by Contrasting Cluster
/// Assignments", NeurIPS 2020, <https://arxiv.org/abs/2006.09882>): backbone + projector (`features
/// → 2048 (BN, ReLU) → 128`), L2-normalised, scored against `K` prototypes (unit vectors, a linear
/// map without bias); each global view's Sinkhorn–Knopp codes are predicted by every other view
/// ([`SwavLoss`](crate::loss::SwavLoss)). Multi-crop: the local crops only predict.
///
/// The paper's training details, all here:
/// - the prototypes are re-normalised to unit length after every optimiser step (and at
///   initialisation), as the authors' code does before each forward;
/// - they are frozen for the first `freeze_prototypes_epochs` epochs (their gradient is dropped,
///   so no optimiser moves or decays them; the authors freeze them for the first epoch);
/// - an optional queue of the last `queue_size` global-view projections of each global view,
///   filled from epoch `queue_start_epoch` and used, once full, to compute the codes of the
///   current batch over more images (SwAV's small-batch setting: 3840 from epoch 15);
/// - crops of one resolution go through the networks in one batch (the two global views
///   together, the local crops together), as the authors' multi-crop forward does, so the batch
///   norms see each resolution's crops as one batch.
///
/// On several replicas the codes are those of the global batch: each replica gathers the global
/// views' scores (no gradient), computes Sinkhorn–Knopp on all of them (and the queue, which
/// holds every replica's projections), and keeps its rows; its loss is the mean over its images,
/// whose average over replicas is the one-device loss.
///
/// The math, the defaults and the worked values are in `docs/methods.md#swav`.
#[derive(Debug, Clone)]
pub struct Swav<B: Backend, M: Backbone<B>> {
    online: SwavNetwork<B, M>,
    loss: SwavLoss,
    freeze_prototypes_epochs: usize,
    queue_start_epoch: usize,
    queue: Option<SwavQueue<B>>,
    /// Whether the prototypes are frozen at the step being computed.
    frozen: bool,
    /// The projections the queue takes after the step (both global views').
    pending: Option<[Tensor<B, 2>; 2]>,
    /// This method's replica in a data-parallel run: the codes are the global batch's.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> Swav<B, M> {
    /// Whether the queue, if any, is full (it then takes part in the codes).
    pub fn queue_full(&self) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|q| q.filled == q.views[0].dims()[0])
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for Swav<B, M> {
    type Online = SwavNetwork<B, M>;
    type Backbone = M;
    type State = SwavState<B>;

    online_in!(online);

    fn state(&self) -> SwavState<B> {
        SwavState {
            queue: self
                .queue
                .as_ref()
                .map(|q| Tensor::stack(q.views.to_vec(), 0)),
            filled: self.queue.as_ref().map_or(0, |q| q.filled),
        }
    }

    fn load_state(&mut self, state: SwavState<B>) -> Result<(), ConfigError> {
        match (&mut self.queue, state.queue) {
            (None, None) => Ok(()),
            (Some(queue), Some(saved)) => {
                let [_, size, dim] = saved.dims();
                let expected = queue.views[0].dims();
                if [size, dim] != expected || state.filled > size {
                    return Err(ConfigError::new(
                        "queue_size",
                        format!(
                            "the checkpoint holds queues of {size} × {dim}, this SwAV's are {} × {}",
                            expected[0], expected[1]
                        ),
                    ));
                }
                queue.views = [0, 1].map(|v| {
                    saved
                        .clone()
                        .slice([v..v + 1, 0..size, 0..dim])
                        .reshape([size, dim])
                });
                queue.filled = state.filled;
                self.pending = None;
                Ok(())
            }
            (mine, _) => Err(ConfigError::new(
                "queue_size",
                format!(
                    "the checkpoint {} a queue and this SwAV {}",
                    if mine.is_some() { "has no" } else { "has" },
                    if mine.is_some() {
                        "has one"
                    } else {
                        "has none"
                    }
                ),
            )),
        }
    }

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (globals, n, locals) = views.batched();
        self.frozen = progress.epoch < self.freeze_prototypes_epochs;
        // One pass per resolution, as the authors' multi-crop forward.
        let (z, scores) = self.online.forward(globals);
        let global = split_views(scores, n, 2);
        let projections = split_views(z.detach(), n, 2);
        let local = locals_through(locals, n, |x| self.online.forward(x).1);
        // The codes: Sinkhorn–Knopp over the global batch (every replica's rows) and the full
        // queue, of which this replica keeps its own rows.
        let (all_projections, first) = match &self.replica {
            Some(r) => (
                projections
                    .iter()
                    .map(|p| r.gather(p.clone()).detach())
                    .collect::<Vec<_>>(),
                r.rank() * n,
            ),
            None => (projections.clone(), 0),
        };
        let prototypes = self.online.prototypes.weight.val().detach();
        let use_queue = progress.epoch >= self.queue_start_epoch && self.queue_full();
        let codes: Vec<Tensor<B, 2>> = all_projections
            .iter()
            .enumerate()
            .map(|(v, p)| {
                let mut rows = vec![p.clone()];
                if use_queue {
                    rows.push(self.queue.as_ref().expect("full").views[v].clone());
                }
                let all_scores = Tensor::cat(rows, 0).matmul(prototypes.clone());
                self.loss.codes(all_scores).slice(first..first + n)
            })
            .collect();
        let loss = self.loss.forward_with_codes(&global, &local, &codes);
        // The queue takes this batch's projections (the global batch's) once it is in use, after
        // the step (a redrawn attempt's projections never enter it).
        self.pending = (progress.epoch >= self.queue_start_epoch && self.queue.is_some())
            .then_some([all_projections[0].clone(), all_projections[1].clone()]);
        let device = loss.device();
        let flag =
            |on: bool| Tensor::from_data(TensorData::new(vec![on as u8 as f64], [1]), &device);
        MethodOutput {
            loss,
            stats: vec![
                ("prototypes_frozen", flag(self.frozen)),
                ("swav_queue", flag(use_queue)),
            ],
            embeddings: Some([projections[0].clone(), projections[1].clone()]),
        }
    }

    /// Drops the prototypes' gradient while they are frozen (no optimiser moves or decays them).
    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        let frozen = self.frozen.then_some(self.online.prototypes.weight.id);
        gradients_without(loss, &self.online, frozen)
    }

    replica_in!(
        /// The codes are computed on every replica's global views (gathered without gradient); each
        /// replica's loss is the mean over its images, and the average of the replicas' gradients
        /// is the one-device gradient (with synchronised batch norms).
        replica
    );

    fn after_step(&mut self, _: Progress) {
        self.online.prototypes = normalised_prototypes(self.online.prototypes.clone());
        if let (Some(queue), Some(projections)) = (&mut self.queue, self.pending.take()) {
            let size = queue.views[0].dims()[0];
            let rows = projections[0].dims()[0];
            for (slot, p) in queue.views.iter_mut().zip(projections) {
                let mut parts = vec![p];
                if size > rows {
                    parts.push(slot.clone().slice(0..size - rows));
                }
                *slot = Tensor::cat(parts, 0).slice(0..size).set_require_grad(false);
            }
            queue.filled = (queue.filled + rows).min(size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::sinkhorn;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};
    use crate::optim::SgdConfig;
    use burn::optim::Optimizer;

    fn swav(config: SwavConfig) -> Swav<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 5, |d| {
            config
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_num_prototypes(5)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap()
    }

    fn at(step: usize, epoch: usize) -> Progress {
        progress(step, 100, epoch, 10)
    }

    /// One SGD step (with weight decay, which would move even a parameter whose gradient is 0);
    /// returns the prototypes before and after.
    fn step(m: &mut Swav<Ad, Tiny<Ad>>, progress: Progress) -> (Vec<f64>, Vec<f64>) {
        let before = host(m.online().prototypes.weight.val());
        let mut optim = SgdConfig::new()
            .with_weight_decay(0.1)
            .init::<Ad, SwavNetwork<Ad, Tiny<Ad>>>()
            .unwrap();
        let views = Views {
            global: [images(4, 0.0), images(4, 1.0)],
            local: vec![images(4, 2.0)],
        };
        let out = m.forward_views(views, progress);
        let grads = m.gradients(&out.loss);
        m.set_online(optim.step(0.5, m.online().clone(), grads));
        m.after_step(progress);
        (before, host(m.online().prototypes.weight.val()))
    }

    fn unit_columns(w: &[f64], k: usize) {
        for j in 0..k {
            let norm: f64 = (0..w.len() / k).map(|i| w[i * k + j].powi(2)).sum();
            assert!((norm - 1.0).abs() < 1e-12, "prototype {j}: |c|² = {norm}");
        }
    }

    /// The prototypes are unit vectors from the start and after every step; frozen during the
    /// first epoch (not even the weight decay moves them), trained afterwards.
    #[test]
    fn prototypes_stay_unit_and_are_frozen_for_the_first_epoch() {
        let mut m = swav(SwavConfig::new());
        let (before, after) = step(&mut m, at(0, 0));
        unit_columns(&before, 5);
        let moved = |a: &[f64], b: &[f64]| {
            a.iter()
                .zip(b)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max)
        };
        // Only the re-normalisation's last bits (the weight decay alone would move them by 5 %).
        assert!(moved(&before, &after) < 1e-14, "frozen in epoch 0");
        let (before, after) = step(&mut m, at(10, 1));
        unit_columns(&after, 5);
        assert!(moved(&before, &after) > 1e-4, "trained in epoch 1");
    }

    /// The queue fills from its start epoch with the batch's projections (newest first) and
    /// takes part in the codes once full: the loss then equals the loss with the codes computed
    /// by hand on the batch followed by the queue.
    #[test]
    fn the_queue_fills_from_its_epoch_and_joins_the_codes_once_full() {
        let mut m = swav(
            SwavConfig::new()
                .with_queue_size(8)
                .with_queue_start_epoch(1),
        );
        step(&mut m, at(0, 0));
        assert_eq!(m.state().filled, 0, "not filled before the start epoch");
        step(&mut m, at(1, 1));
        assert_eq!(m.state().filled, 4);
        assert!(!m.queue_full());
        step(&mut m, at(2, 1));
        assert!(m.queue_full());
        let queue = m.state().queue.unwrap();
        // What the next step's codes see: the projections and scores computed by hand.
        let (v1, v2) = (images(4, 0.0), images(4, 1.0));
        let net = m.online().clone();
        let (z, scores) = net.forward(Tensor::cat(vec![v1.clone(), v2.clone()], 0));
        let c = net.prototypes.weight.val();
        let codes: Vec<Tensor<Ad, 2>> = (0..2)
            .map(|v| {
                let own = z.clone().slice(v * 4..(v + 1) * 4);
                let queued = queue.clone().slice([v..v + 1, 0..8, 0..4]).reshape([8, 4]);
                sinkhorn(Tensor::cat(vec![own, queued], 0).matmul(c.clone()), 3, 0.05).slice(0..4)
            })
            .collect();
        let global: Vec<Tensor<Ad, 2>> = (0..2)
            .map(|v| scores.clone().slice(v * 4..(v + 1) * 4))
            .collect();
        let expected =
            SwavLossConfig::new()
                .init()
                .unwrap()
                .forward_with_codes(&global, &[], &codes);
        let out = m.forward(v1, v2, at(3, 1));
        let (ours, theirs) = (host(out.loss)[0], host(expected)[0]);
        assert!((ours - theirs).abs() < 1e-12, "{ours} vs {theirs}");
        m.after_step(at(3, 1));
        // And the newest rows of each queue are this batch's projections.
        let after = m.state().queue.unwrap();
        let newest = host(after.slice([0..1, 0..4, 0..4]).reshape([4, 4]));
        let mine = host(z.slice(0..4));
        for (a, b) in newest.iter().zip(&mine) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn a_checkpointed_queue_restores_and_a_mismatched_one_is_named() {
        let mut m = swav(
            SwavConfig::new()
                .with_queue_size(8)
                .with_queue_start_epoch(0),
        );
        step(&mut m, at(0, 0));
        let state = m.state();
        let mut fresh = swav(
            SwavConfig::new()
                .with_queue_size(8)
                .with_queue_start_epoch(0),
        );
        fresh.load_state(state).unwrap();
        assert_eq!(fresh.state().filled, 4);
        assert_eq!(
            host(fresh.state().queue.unwrap()),
            host(m.state().queue.unwrap())
        );
        let mut other = swav(SwavConfig::new().with_queue_size(12));
        let e = other.load_state(m.state()).unwrap_err();
        assert_eq!(e.field, "queue_size");
        let mut none = swav(SwavConfig::new());
        assert!(none.load_state(m.state()).is_err());
    }

    /// A redrawn attempt (batch curation runs the forward again) leaves no trace: the queue
    /// takes only the projections of the attempt that was applied.
    #[test]
    fn only_the_applied_attempt_enters_the_queue() {
        let config = || {
            SwavConfig::new()
                .with_queue_size(8)
                .with_queue_start_epoch(0)
        };
        let (mut once, mut twice) = (swav(config()), swav(config()));
        // The same start whatever other tests' threads drew from the backend's generator.
        twice.set_online(once.online().clone());
        twice.load_state(once.state()).unwrap();
        once.forward(images(4, 0.0), images(4, 1.0), at(0, 0));
        once.after_step(at(0, 0));
        twice.forward(images(4, 5.0), images(4, 6.0), at(0, 0));
        twice.forward(images(4, 0.0), images(4, 1.0), at(0, 0));
        twice.after_step(at(0, 0));
        assert_eq!(
            host(once.state().queue.unwrap()),
            host(twice.state().queue.unwrap())
        );
        assert_eq!(twice.state().filled, 4);
    }
}
