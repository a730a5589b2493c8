//! SimCLR (Chen et al. 2020): backbone + MLP projector, NT-Xent between the two views.

use burn::module::{AutodiffModule, ModuleDisplay};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::Backbone;

use super::{MethodOutput, Progress, SslMethod};
use crate::error::ConfigError;
use crate::head::{MlpHead, MlpHeadConfig};
use crate::loss::{NtXentLoss, NtXentLossConfig};

/// Configuration of [`SimClr`].
#[derive(Config, Debug)]
pub struct SimClrConfig {
    /// Hidden width of the projector.
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width.
    #[config(default = 128)]
    pub output_dim: usize,
    /// The NT-Xent loss (τ = 0.5 as in SimCLR; 0.2 is common on CIFAR).
    #[config(default = "NtXentLossConfig::new()")]
    pub loss: NtXentLossConfig,
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
        Ok(SimClr {
            online: SimClrNetwork {
                backbone,
                projector,
            },
            loss: self.loss.init()?,
        })
    }
}

/// SimCLR. Build it with [`SimClrConfig::init`].
#[derive(Debug, Clone)]
pub struct SimClr<B: Backend, M: Backbone<B>> {
    online: SimClrNetwork<B, M>,
    loss: NtXentLoss,
}

impl<B: AutodiffBackend, M: Backbone<B> + AutodiffModule<B>> SslMethod<B> for SimClr<B, M>
where
    M::InnerModule: ModuleDisplay,
{
    type Online = SimClrNetwork<B, M>;

    fn online(&self) -> &Self::Online {
        &self.online
    }

    fn set_online(&mut self, online: Self::Online) {
        self.online = online;
    }

    fn forward(
        &mut self,
        view1: Tensor<B, 4>,
        view2: Tensor<B, 4>,
        _: Progress,
    ) -> MethodOutput<B> {
        let z1 = self.online.project(view1);
        let z2 = self.online.project(view2);
        MethodOutput {
            loss: self.loss.forward(z1, z2),
            stats: Vec::new(),
        }
    }

    fn after_step(&mut self, _: Progress) {}
}
