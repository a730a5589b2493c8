//! MoCo v3 (Chen, Xie & He, "An Empirical Study of Training Self-Supervised Vision
//! Transformers", ICCV 2021, <https://arxiv.org/abs/2104.02057>): a query encoder (backbone +
//! projector + predictor) and a momentum encoder (backbone + projector, an EMA of the query
//! encoder's); the keys are the other view's momentum projections of the same batch (no queue),
//! and the loss is symmetric: `ctr(q1, k2) + ctr(q2, k1)` ([`crate::loss::moco_v3`]).
//!
//! The heads follow the authors' `_build_mlp`: every hidden layer `Linear (no bias) → BN →
//! ReLU`; the projector (3 layers for a ViT, 2 for a ResNet; 4096 hidden, 256 out) ends in a
//! BatchNorm without affine parameters, the predictor (2 layers, 4096 hidden) in a plain linear
//! layer (here with a bias; the authors' has none). The momentum rises from `base_momentum`
//! (0.99) to 1 along a cosine; `τ = 0.2` for ViTs, 1.0 for ResNets.
//!
//! On several replicas each replica gathers every replica's keys (no gradient): its queries'
//! positives are at its own rows, the negatives every other image of the global batch; its loss
//! is the mean over its queries, whose average over replicas is the one-device loss.
//!
//! The math, the defaults and the worked values are in `docs/methods.md#moco-v3`.

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::Backbone;

use super::ema::{cosine_momentum, detached_copy, ema_update, validate_momentum};
use super::{MethodOutput, Progress, SslMethod};
use crate::base::error::ConfigError;
use crate::data_parallel::Replica;
use crate::head::{MlpHead, MlpHeadConfig};
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
    /// The paper's ResNet setting: a two-layer projector and `τ = 1`.
    pub fn resnet() -> Self {
        Self::new()
            .with_projector_layers(2)
            .with_loss(MocoV3LossConfig::new().with_temperature(1.0))
    }
}

/// The momentum encoder of [`MocoV3`] (the query encoder without its predictor).
#[derive(Module, Debug)]
pub struct MocoV3Encoder<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head.
    pub projector: MlpHead<B>,
}

/// The trainable part of [`MocoV3`]: the query encoder.
#[derive(Module, Debug)]
pub struct MocoV3Network<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head.
    pub projector: MlpHead<B>,
    /// Prediction head.
    pub predictor: MlpHead<B>,
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
        validate_momentum("base_momentum", self.base_momentum)?;
        if self.projector_layers < 2 {
            return Err(ConfigError::new(
                "projector_layers",
                format!("must be at least 2, got {}", self.projector_layers),
            ));
        }
        let query_backbone = backbone(device);
        let projector = MlpHeadConfig::new(
            query_backbone.feature_dim(),
            self.hidden_dim,
            self.output_dim,
        )
        .with_num_layers(self.projector_layers)
        .with_output_batch_norm(true)
        .with_output_batch_norm_affine(false);
        let predictor = MlpHeadConfig::new(self.output_dim, self.hidden_dim, self.output_dim);
        let online = MocoV3Network {
            backbone: query_backbone,
            projector: projector.init(device)?,
            predictor: predictor.init(device)?,
        };
        let momentum = MocoV3Encoder {
            backbone: detached_copy(&online.backbone, backbone(device)),
            projector: detached_copy(&online.projector, projector.init(device)?),
        };
        Ok(MocoV3 {
            online,
            momentum,
            loss: self.loss.init()?,
            base_momentum: self.base_momentum,
            replica: None,
        })
    }
}

/// The checkpointed state of [`MocoV3`]: the momentum encoder.
#[derive(Record)]
pub struct MocoV3State<B: Backend, M: Backbone<B>> {
    /// The momentum encoder's record (weights and batch-norm statistics).
    pub momentum: <MocoV3Encoder<B, M> as Module<B>>::Record,
}

/// MoCo v3. Build it with [`MocoV3Config::init`].
#[derive(Debug, Clone)]
pub struct MocoV3<B: Backend, M: Backbone<B>> {
    online: MocoV3Network<B, M>,
    momentum: MocoV3Encoder<B, M>,
    loss: MocoV3Loss,
    base_momentum: f64,
    /// This method's replica in a data-parallel run: the keys are every replica's.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> MocoV3<B, M> {
    /// The momentum encoder.
    pub fn momentum_encoder(&self) -> &MocoV3Encoder<B, M> {
        &self.momentum
    }

    /// The momentum at `progress`.
    pub fn momentum_at(&self, progress: Progress) -> f64 {
        cosine_momentum(self.base_momentum, progress.fraction())
    }
}

impl<B: AutodiffBackend, M: Backbone<B> + AutodiffModule<B>> SslMethod<B> for MocoV3<B, M>
where
    M::InnerModule: Backbone<B::InnerBackend>,
{
    type Online = MocoV3Network<B, M>;
    type Backbone = M;
    type State = MocoV3State<B, M>;

    fn online(&self) -> &Self::Online {
        &self.online
    }

    fn backbone(&self) -> &M {
        &self.online.backbone
    }

    fn state(&self) -> MocoV3State<B, M> {
        MocoV3State {
            momentum: self.momentum.clone().into_record(),
        }
    }

    fn load_state(&mut self, state: MocoV3State<B, M>) -> Result<(), ConfigError> {
        self.momentum = self.momentum.clone().load_record(state.momentum);
        Ok(())
    }

    fn set_online(&mut self, online: Self::Online) {
        self.online = online;
    }

    fn forward(
        &mut self,
        view1: Tensor<B, 4>,
        view2: Tensor<B, 4>,
        progress: Progress,
    ) -> MethodOutput<B> {
        let n = view1.dims()[0];
        let query = |x: Tensor<B, 4>| {
            let z = self
                .online
                .projector
                .forward(self.online.backbone.forward_features(x));
            self.online.predictor.forward(z)
        };
        let (q1, q2) = (query(view1.clone()), query(view2.clone()));
        let key = |x: Tensor<B, 4>| {
            self.momentum
                .projector
                .forward(self.momentum.backbone.forward_features(x.detach()))
                .detach()
        };
        let (k1, k2) = (key(view1), key(view2));
        let embeddings = Some([k1.clone(), k2.clone()]);
        let (k1, k2, offset) = match &self.replica {
            Some(r) => (r.gather(k1).detach(), r.gather(k2).detach(), r.rank() * n),
            None => (k1, k2, 0),
        };
        let loss = self.loss.forward_with_offset(q1, k2, offset)
            + self.loss.forward_with_offset(q2, k1, offset);
        let device = loss.device();
        let momentum = Tensor::from_data(
            TensorData::new(vec![self.momentum_at(progress)], [1]),
            &device,
        );
        MethodOutput {
            loss,
            stats: vec![("momentum", momentum)],
            embeddings,
        }
    }

    /// The keys of every replica are gathered (no gradient); each replica's loss is the mean over
    /// its queries, and the average over replicas is the one-device loss and gradient (with
    /// synchronised batch norms).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, progress: Progress) {
        let m = self.momentum_at(progress);
        self.momentum.backbone =
            ema_update(self.momentum.backbone.clone(), &self.online.backbone, m);
        self.momentum.projector =
            ema_update(self.momentum.projector.clone(), &self.online.projector, m);
    }
}
