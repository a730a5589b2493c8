//! MoCo v3 (documented on `MocoV3`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::{predicted_with_copy, Predicted, PredictedWithCopy, Projected};
use super::momentum::MomentumEncoder;
use super::ssl_method::{MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{MocoV3Loss, MocoV3LossConfig};

/// Configuration of [`MocoV3`].
#[derive(Config, Debug)]
pub struct MocoV3Config {
    /// Hidden width of the projector and the predictor (the paper's 4096).
    #[config(default = 4096)]
    pub hidden_dim: usize,
    /// Projection width (the paper's 256).
    #[config(default = 256)]
    pub output_dim: usize,
    /// Layers of the projector (the paper's 3 for ViTs, 2 for ResNets).
    #[config(default = 3)]
    pub projector_layers: usize,
    /// The momentum at the start (the paper's 0.99), rising to 1 along a cosine.
    #[config(default = 0.99)]
    pub base_momentum: f64,
    /// The loss (`τ = 0.2`, the ViT setting).
    #[config(default = "MocoV3LossConfig::new()")]
    pub loss: MocoV3LossConfig,
}

impl MocoV3Config {
    /// Builds MoCo v3 around a backbone made by `backbone` (called twice: the query encoder's,
    /// and a fresh module into which the momentum encoder's copy is loaded).
    ///
    /// # Errors
    /// A zero width or layer count, an impossible momentum or temperature, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<MocoV3<B, M>, ConfigError> {
        if self.projector_layers < 2 {
            return Err(ConfigError::new(
                "projector_layers",
                format!("must be at least 2, got {}", self.projector_layers),
            ));
        }
        let projector = |width| {
            MlpHeadConfig::new(width, self.hidden_dim, self.output_dim)
                .with_num_layers(self.projector_layers)
                .with_output_batch_norm(true)
                .with_output_batch_norm_affine(false)
        };
        let predictor = MlpHeadConfig::new(self.output_dim, self.hidden_dim, self.output_dim);
        let networks =
            PredictedWithCopy::new(backbone, projector, &predictor, self.base_momentum, device)?;
        Ok(MocoV3 {
            networks,
            loss: self.loss.init()?,
            replica: None,
        })
    }
}

/// The checkpointed state of [`MocoV3`]: the momentum encoder.
#[derive(Record)]
pub struct MocoV3State<B: Backend, M: Backbone<B>> {
    /// The momentum encoder's record (weights and batch-norm statistics).
    pub momentum: <Projected<B, M> as Module<B>>::Record,
}

/// MoCo v3. Build it with [`MocoV3Config::init`].
///
/// MoCo v3 (Chen, Xie & He, "An Empirical Study of Training Self-Supervised Vision Transformers",
/// ICCV 2021, <https://arxiv.org/abs/2104.02057>): a query encoder (backbone + projector +
/// predictor) and a momentum encoder (backbone + projector, an EMA of the query encoder's); the
/// keys are the other view's momentum projections of the same batch (no queue), and the loss is
/// symmetric: `ctr(q1, k2) + ctr(q2, k1)` ([`MocoV3Loss`](crate::loss::MocoV3Loss)).
///
/// The heads follow the authors' `_build_mlp`: every hidden layer `Linear (no bias) → BN →
/// ReLU`; the projector (3 layers for a ViT, 2 for a ResNet; 4096 hidden, 256 out) ends in a
/// BatchNorm without affine parameters, the predictor (2 layers, 4096 hidden) in a plain linear
/// layer (here with a bias; the authors' has none). The momentum rises from `base_momentum`
/// (0.99) to 1 along a cosine; `τ = 0.2` for ViTs, 1.0 for ResNets.
///
/// On several replicas each replica gathers every replica's keys (no gradient): its queries'
/// positives are at its own rows, the negatives every other image of the global batch; its loss
/// is the mean over its queries, whose average over replicas is the one-device loss.
///
/// The math, the defaults and the worked values are in `docs/methods.md#moco-v3`.
#[derive(Debug, Clone)]
pub struct MocoV3<B: Backend, M: Backbone<B>> {
    /// The query encoder and the momentum encoder (the momentum copy of its encoder).
    networks: PredictedWithCopy<B, M>,
    loss: MocoV3Loss,
    /// This method's replica in a data-parallel run: the keys are every replica's.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> MocoV3<B, M> {
    /// The momentum copy (the momentum encoder): its network and its momentum schedule.
    pub fn momentum_encoder(&self) -> &MomentumEncoder<Projected<B, M>> {
        self.networks.copy()
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for MocoV3<B, M> {
    type Online = Predicted<B, M>;
    type Backbone = M;
    type State = MocoV3State<B, M>;

    predicted_with_copy!(networks);

    fn state(&self) -> MocoV3State<B, M> {
        MocoV3State {
            momentum: self.networks.copy.record(),
        }
    }

    fn load_state(&mut self, state: MocoV3State<B, M>) -> Result<(), ConfigError> {
        self.networks.copy.load_record(state.momentum);
        self.networks.view_threads.clear();
        Ok(())
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (loss, replica) = (&self.loss, self.replica.as_ref());
        self.networks
            .step(views.two(), progress, |[q1, q2], [k1, k2]| {
                let n = k1.dims()[0];
                let (k1, k2, offset) = match replica {
                    Some(r) => (r.gather(k1).detach(), r.gather(k2).detach(), r.rank() * n),
                    None => (k1, k2, 0),
                };
                loss.forward_with_offset(q1, k2, offset) + loss.forward_with_offset(q2, k1, offset)
            })
    }

    /// The keys of every replica are gathered (no gradient); each replica's loss is the mean over
    /// its queries, and the average over replicas is the one-device loss and gradient (with
    /// synchronised batch norms).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.networks.replicated();
        self.replica = Some(replica);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{cosine, host, images, progress, rows, Ad};

    /// `2τ · mean_i −log softmax_j(cos(q_i, k_j)/τ)[i]`: MoCo v3's loss of queries against the
    /// keys of the same images, computed on the host.
    fn contrast(q: Tensor<Ad, 2>, k: Tensor<Ad, 2>, tau: f64) -> f64 {
        let width = q.dims()[1];
        let (q, k) = (host(q), host(k));
        let (q, k) = (rows(&q, width), rows(&k, width));
        let n = q.len();
        let ce: f64 = (0..n)
            .map(|i| {
                let logits: Vec<f64> = k.iter().map(|kj| cosine(q[i], kj) / tau).collect();
                let lse = logits.iter().map(|l| l.exp()).sum::<f64>().ln();
                lse - logits[i]
            })
            .sum();
        2.0 * tau * ce / n as f64
    }

    /// The loss is the contrast of each view's predictions with the other view's momentum
    /// keys, both orderings summed (MoCo v3's `ctr(q₁, k₂) + ctr(q₂, k₁)`), with `τ = 0.2`.
    #[test]
    fn the_loss_contrasts_each_views_queries_with_the_other_views_keys() {
        let device = Default::default();
        let mut m = crate::method::init_method::<Ad, _, ConfigError>(&device, 7, |d| {
            MocoV3Config::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap();
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let query = |x: &Tensor<Ad, 4>| m.online().forward(x.clone()).1;
        let key = |x: &Tensor<Ad, 4>| m.momentum_encoder().network().forward(x.clone());
        let expected = contrast(query(&v1), key(&v2), 0.2) + contrast(query(&v2), key(&v1), 0.2);
        let loss = host(m.forward(v1, v2, progress(0, 10, 0, 1)).loss)[0];
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
    }
}
