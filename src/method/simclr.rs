//! SimCLR (Chen et al. 2020, <https://arxiv.org/abs/2002.05709>): backbone + MLP projector, a
//! two-view contrastive loss between the views — NT-Xent by default, or one of its curriculum
//! variants from `loss/` (HCL, curricular weighting, Huber-regularised NT-Xent).
//!
//! The math, the defaults, the paper followed and the worked values are in
//! `docs/methods.md#simclr` (and `#nt-xent`, `#hcl`, `#curricular-weighting`,
//! `#huber-regularised-nt-xent` for the losses).

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::Backbone;
use serde::{Deserialize, Serialize};

use super::{MethodOutput, Progress, SslMethod};
use crate::error::ConfigError;
use crate::head::{MlpHead, MlpHeadConfig};
use crate::loss::{
    CurricularLoss, CurricularLossConfig, CurricularState, HclLoss, HclLossConfig, HuberNtXentLoss,
    HuberNtXentLossConfig, NtXentLoss, NtXentLossConfig,
};

/// The two-view loss SimCLR trains with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PairLossConfig {
    /// NT-Xent (SimCLR's own loss).
    NtXent(NtXentLossConfig),
    /// Hard-negative sampling / debiased contrastive loss (HCL, DCL).
    Hcl(HclLossConfig),
    /// Curricular weighting of hard negatives with its adaptive `t` (checkpointed).
    Curricular(CurricularLossConfig),
    /// NT-Xent with a Huber penalty on the positive pairs.
    Huber(HuberNtXentLossConfig),
}

/// Configuration of [`SimClr`].
#[derive(Config, Debug)]
pub struct SimClrConfig {
    /// Hidden width of the projector.
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width.
    #[config(default = 128)]
    pub output_dim: usize,
    /// The loss between the views (NT-Xent with τ = 0.5 as in SimCLR; 0.2 is common on CIFAR).
    #[config(default = "PairLossConfig::NtXent(NtXentLossConfig::new())")]
    pub loss: PairLossConfig,
}

/// Backbone and projector, the trainable part of [`SimClr`].
#[derive(Module, Debug)]
pub struct SimClrNetwork<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head.
    pub projector: MlpHead<B>,
}

impl<B: Backend, M: Backbone<B>> SimClrNetwork<B, M> {
    /// Projections of a batch.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, output_dim]`
    pub fn project(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.projector
            .forward(self.backbone.forward_features(images))
    }
}

impl SimClrConfig {
    /// Builds SimCLR around `backbone`.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: M,
        device: &B::Device,
    ) -> Result<SimClr<B, M>, ConfigError> {
        let projector =
            MlpHeadConfig::simclr(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .init(device)?;
        let loss = match &self.loss {
            PairLossConfig::NtXent(c) => PairLoss::NtXent(c.init()?),
            PairLossConfig::Hcl(c) => PairLoss::Hcl(c.init()?),
            PairLossConfig::Curricular(c) => PairLoss::Curricular(c.init(device)?),
            PairLossConfig::Huber(c) => PairLoss::Huber(c.init()?),
        };
        Ok(SimClr {
            online: SimClrNetwork {
                backbone,
                projector,
            },
            loss,
        })
    }
}

#[derive(Debug, Clone)]
enum PairLoss<B: Backend> {
    NtXent(NtXentLoss),
    Hcl(HclLoss),
    Curricular(CurricularLoss<B>),
    Huber(HuberNtXentLoss),
}

/// The checkpointed state of [`SimClr`]: the curricular loss's state when that loss is used
/// (its `t`, read back from the device only when a checkpoint is written).
#[derive(Record)]
pub struct SimClrState {
    /// The adaptive `t` of the curricular loss; `None` for the other losses.
    pub curricular_t: Option<f64>,
}

/// SimCLR. Build it with [`SimClrConfig::init`].
#[derive(Debug, Clone)]
pub struct SimClr<B: Backend, M: Backbone<B>> {
    online: SimClrNetwork<B, M>,
    loss: PairLoss<B>,
}

impl<B: Backend, M: Backbone<B>> SimClr<B, M> {
    /// The curricular `t`, when that loss is used.
    pub fn curricular_t(&self) -> Option<f64> {
        match &self.loss {
            PairLoss::Curricular(loss) => Some(loss.t()),
            _ => None,
        }
    }
}

impl<B: AutodiffBackend, M: Backbone<B> + AutodiffModule<B>> SslMethod<B> for SimClr<B, M>
where
    M::InnerModule: Backbone<B::InnerBackend>,
{
    type Online = SimClrNetwork<B, M>;
    type Backbone = M;
    type State = SimClrState;

    fn online(&self) -> &Self::Online {
        &self.online
    }

    fn backbone(&self) -> &M {
        &self.online.backbone
    }

    fn state(&self) -> SimClrState {
        SimClrState {
            curricular_t: self.curricular_t(),
        }
    }

    fn load_state(&mut self, state: SimClrState) -> Result<(), ConfigError> {
        match (&mut self.loss, state.curricular_t) {
            (PairLoss::Curricular(loss), Some(t)) => {
                loss.load_state(CurricularState { t });
                Ok(())
            }
            (PairLoss::Curricular(_), None) => Err(ConfigError::new(
                "loss",
                "the checkpoint has no curricular t but this SimCLR uses the curricular loss",
            )),
            (_, Some(_)) => Err(ConfigError::new(
                "loss",
                "the checkpoint holds a curricular t but this SimCLR does not use that loss",
            )),
            (_, None) => Ok(()),
        }
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
        let z1 = self.online.project(view1);
        let z2 = self.online.project(view2);
        let embeddings = Some([z1.clone().detach(), z2.clone().detach()]);
        match &mut self.loss {
            PairLoss::NtXent(loss) => MethodOutput {
                loss: loss.forward(z1, z2),
                stats: Vec::new(),
                embeddings,
            },
            PairLoss::Hcl(loss) => {
                let beta = loss.beta_at(progress);
                let device = z1.device();
                let scalar = |v: f64| Tensor::from_floats([v as f32], &device);
                let mut stats = Vec::new();
                if loss.is_scheduled() {
                    stats.push(("hcl_beta", scalar(beta)));
                }
                if let Some(exponent) = loss.hard_positive_exponent(beta) {
                    stats.push(("hcl_k_minus_beta", scalar(exponent)));
                }
                MethodOutput {
                    loss: loss.forward_with_beta(z1, z2, beta),
                    stats,
                    embeddings,
                }
            }
            PairLoss::Huber(loss) => MethodOutput {
                loss: loss.forward(z1, z2),
                stats: Vec::new(),
                embeddings,
            },
            PairLoss::Curricular(loss) => {
                let out = loss.forward(z1, z2);
                MethodOutput {
                    loss: out.loss,
                    stats: vec![("curricular_t", out.t)],
                    embeddings,
                }
            }
        }
    }

    fn after_step(&mut self, _: Progress) {}
}
