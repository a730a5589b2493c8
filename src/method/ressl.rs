//! ReSSL (documented on `ReSsl`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Projected;
use super::momentum::MomentumEncoder;
use super::queue::{KeyQueue, KeyQueueConfig};
use super::ssl_method::{online_in, replica_in, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{l2_normalize, ReSslLoss, ReSslLossConfig};

/// Configuration of [`ReSsl`].
#[derive(Config, Debug)]
pub struct ReSslConfig {
    /// Hidden width of the projector (solo-learn's 4096).
    #[config(default = 4096)]
    pub hidden_dim: usize,
    /// Projection width (solo-learn's 256).
    #[config(default = 256)]
    pub output_dim: usize,
    /// Momentum of the momentum encoder at the start (rises to 1 along a cosine).
    #[config(default = 0.99)]
    pub base_momentum: f64,
    /// Keys in the queue (solo-learn's 65,536).
    #[config(default = 65536)]
    pub queue_size: usize,
    /// The loss (`τ_q = 0.1`, `τ_k = 0.04`).
    #[config(default = "ReSslLossConfig::new()")]
    pub loss: ReSslLossConfig,
}

impl ReSslConfig {
    /// Builds ReSSL around a backbone made by `backbone` (called twice: online, and a fresh
    /// module into which the momentum encoder's copy is loaded) for global batches of
    /// `batch_size` images (the queue takes that many keys per step).
    ///
    /// # Errors
    /// A zero width, an impossible momentum or temperature, or a queue that is not a multiple
    /// of the batch size, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        batch_size: usize,
        device: &B::Device,
    ) -> Result<ReSsl<B, M>, ConfigError> {
        let projector = |width| MlpHeadConfig::moco_v2(width, self.hidden_dim, self.output_dim);
        let (online, momentum) =
            Projected::with_momentum_copy(backbone, projector, self.base_momentum, device)?;
        let queue = KeyQueueConfig::new(self.queue_size, self.output_dim)
            .init(batch_size, device)
            .map_err(|e| ConfigError::new("queue_size", e.reason))?;
        Ok(ReSsl {
            online,
            momentum,
            queue,
            loss: self.loss.init()?,
            replica: None,
        })
    }
}

/// The checkpointed state of [`ReSsl`]: the momentum encoder and the queue.
#[derive(Record)]
pub struct ReSslState<B: Backend, M: Backbone<B>> {
    /// The momentum encoder's record.
    pub momentum: <Projected<B, M> as Module<B>>::Record,
    /// The queue, `[size, dim]`.
    pub queue: Tensor<B, 2>,
    /// The slot the next keys are written to.
    pub pointer: usize,
}

/// ReSSL. Build it with [`ReSslConfig::init`].
///
/// ReSSL (Zheng et al., "ReSSL: Relational Self-Supervised Learning with Weak Augmentation",
/// NeurIPS 2021, <https://arxiv.org/abs/2107.09282>): an online backbone + projector
/// (`features → 4096 (ReLU) → 256`, no BatchNorm: solo-learn's) and a momentum copy; the first
/// (strongly augmented) view's online projection learns the second (weakly augmented) view's
/// momentum projection's relation to a queue of earlier momentum projections
/// ([`ReSslLoss`](crate::loss::ReSslLoss)), one direction. The momentum rises along a cosine from
/// `base_momentum` to 1 (solo-learn's 0.99 → 1).
///
/// The queue ([`KeyQueue`]) holds the L2-normalised momentum projections of the second view
/// (solo-learn's 65,536; random unit vectors at the start), filled after the step. On several
/// replicas it takes every replica's keys (the same queue on every replica); the loss is a mean
/// over images, so the replicas' averaged gradients are the one-device gradient.
///
/// The weak view is the pipeline's second: the `ressl` recipe's augmentation crops and flips it
/// only.
///
/// The math, the defaults and the worked values are in `docs/methods.md#ressl`.
#[derive(Debug, Clone)]
pub struct ReSsl<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    momentum: MomentumEncoder<Projected<B, M>>,
    queue: KeyQueue<B>,
    loss: ReSslLoss,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> ReSsl<B, M> {
    /// The momentum copy (the momentum encoder): its network and its momentum schedule.
    pub fn momentum_encoder(&self) -> &MomentumEncoder<Projected<B, M>> {
        &self.momentum
    }

    /// The queue of keys.
    pub fn queue(&self) -> &KeyQueue<B> {
        &self.queue
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for ReSsl<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    type State = ReSslState<B, M>;

    online_in!(online);

    fn check_batch_size(&self, batch_size: usize) -> Result<(), ConfigError> {
        self.queue.check_steps(batch_size, batch_size)
    }

    fn state(&self) -> ReSslState<B, M> {
        ReSslState {
            momentum: self.momentum.record(),
            queue: self.queue.keys(),
            pointer: self.queue.pointer(),
        }
    }

    fn load_state(&mut self, state: ReSslState<B, M>) -> Result<(), ConfigError> {
        self.queue
            .restore(state.queue, state.pointer, "queue_size", "ReSSL's queue")?;
        self.momentum.load_record(state.momentum);
        Ok(())
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [strong, weak] = views.two();
        let q = self.online.forward(strong);
        let k = self.momentum.network().forward(weak).detach();
        let embeddings = [q.clone(), k.clone()];
        let loss = self.loss.forward(q, k.clone(), self.queue.keys());
        let k = l2_normalize(k);
        self.queue
            .stage(Replica::gather_on(self.replica.as_ref(), k).detach());
        self.momentum.output(loss, progress, embeddings)
    }

    replica_in!(
        /// The queue takes every replica's keys; the loss is a mean over images, so the average of
        /// the replicas' gradients is the one-device gradient.
        replica
    );

    fn after_step(&mut self, progress: Progress) {
        self.queue.commit();
        self.momentum.update(&self.online, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{built, host, images, progress, Ad, TinyBackbone as Tiny};

    fn ressl() -> ReSsl<Ad, Tiny<Ad>> {
        built(11, |d| {
            ReSslConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_queue_size(12)
                .init(|d| Tiny::new(16, 6, d), 4, d)
        })
    }

    /// The loss is the soft cross-entropy of the first view's online relation to the queue
    /// (`τ_q = 0.1`) against the second view's momentum relation (`τ_k = 0.04`), recomputed here
    /// on the host from the networks' projections and the queue.
    #[test]
    fn the_loss_is_the_strong_views_relation_against_the_weak_views() {
        let mut m = ressl();
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let q = host(l2_normalize(m.online().forward(v1.clone())));
        let k = host(l2_normalize(
            m.momentum_encoder().network().forward(v2.clone()),
        ));
        let queue = host(m.queue().keys());
        let relation = |z: &[f64], t: f64| -> Vec<f64> {
            let logits: Vec<f64> = queue
                .chunks(4)
                .map(|r| r.iter().zip(z).map(|(a, b)| a * b).sum::<f64>() / t)
                .collect();
            let max = logits.iter().cloned().fold(f64::MIN, f64::max);
            let total: f64 = logits.iter().map(|l| (l - max).exp()).sum();
            logits.iter().map(|l| (l - max).exp() / total).collect()
        };
        let expected = (0..4)
            .map(|n| {
                let w = relation(&k[n * 4..(n + 1) * 4], 0.04);
                let p = relation(&q[n * 4..(n + 1) * 4], 0.1);
                -w.iter().zip(&p).map(|(w, p)| w * p.ln()).sum::<f64>()
            })
            .sum::<f64>()
            / 4.0;
        let loss = host(m.forward(v1, v2, progress(0, 10, 0, 1)).loss)[0];
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
    }

    /// After the step the queue holds the second view's unit momentum projections at the old
    /// pointer; a redrawn attempt (batch curation) leaves no trace.
    #[test]
    fn the_queue_takes_the_applied_attempts_weak_keys() {
        let mut m = ressl();
        m.forward(images(4, 3.0), images(4, 4.0), progress(0, 10, 0, 1));
        let out = m.forward(images(4, 0.0), images(4, 1.0), progress(0, 10, 0, 1));
        let k = host(l2_normalize(out.embeddings.unwrap()[1].clone()));
        m.after_step(progress(0, 10, 0, 1));
        let keys = host(m.queue().keys());
        for (a, b) in keys[..16].iter().zip(&k) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(m.queue().pointer(), 4);
    }
}
