//! VISReg (documented on `VisReg`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::sliced_views::{SlicedObjective, SlicedViews};
use super::ssl_method::LossAndStats;
use crate::base::error::ConfigError;
use crate::head::{HeadActivation, MlpHeadConfig};
use crate::loss::{VisRegLoss, VisRegLossConfig};

/// Configuration of [`VisReg`].
#[derive(Config, Debug)]
pub struct VisRegConfig {
    /// Width of the projector's two hidden layers (2048, the authors').
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width (256, the authors' ViT-B configuration: a third of its 768 features).
    #[config(default = 256)]
    pub output_dim: usize,
    /// GELU after the projector's hidden layers (the authors' configuration, `proj_gelu: true`);
    /// `false`: ReLU (their model's default, lightly's LeJEPA head).
    #[config(default = true)]
    pub gelu: bool,
    /// The loss (`λ = 0.9`, 4,096 directions, unit weights, `ε = 1e-4`).
    #[config(default = "VisRegLossConfig::new()")]
    pub loss: VisRegLossConfig,
    /// Seed of the directions: a step's are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl VisRegConfig {
    /// Builds VISReg around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or a loss hyperparameter out of range, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<VisReg<B, M>, ConfigError> {
        let projector =
            |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim).with_num_layers(3);
        let activation = if self.gelu {
            HeadActivation::Gelu
        } else {
            HeadActivation::Relu
        };
        let loss = self.loss.init()?;
        SlicedViews::build(backbone, projector, activation, loss, self.seed, device)
    }
}

/// VISReg: a [`SlicedViews`] with the VISReg loss.
///
/// VISReg (Wu, Balestriero & Levine 2026, <https://arxiv.org/abs/2606.02572>): LeJEPA's
/// training with SIGReg replaced by VISReg's decoupled regularisation. Backbone + a three-layer
/// projector (`features → 2048 (BN, GELU) → 2048 (BN, GELU) → 256`, the authors'), every view
/// through the same network, and the loss of [`VisRegLoss`](crate::loss::VisRegLoss): the
/// projections' batch mean towards zero, every feature's standard deviation towards one and the
/// standardised projections' sliced distribution towards the standard normal's, while the
/// invariance term pulls every view, global and local, to the mean of the global views. One
/// network, no teacher, no predictor, no schedule.
///
/// Multi-crop as [`SlicedViews`] (as LeJEPA); a step's random directions come from
/// `(seed, step)`. The four terms are logged (`visreg_invariance`, `visreg_scale`,
/// `visreg_shape`, `visreg_center`).
///
/// The math, the defaults and where the paper's code and lightly differ are in
/// `docs/methods.md#visreg`.
pub type VisReg<B, M> = SlicedViews<B, M, VisRegLoss>;

impl<B: Backend> SlicedObjective<B> for VisRegLoss {
    const DIRECTIONS_TAG: u64 = 0x5649_5352_4547_5f53;

    fn directions(&self, dim: usize, seed: u64, device: &B::Device) -> Tensor<B, 2> {
        self.slices(dim, seed, device)
    }

    fn loss(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        directions: Tensor<B, 2>,
    ) -> LossAndStats<B> {
        let terms = self.terms(global, local, directions);
        let stats = vec![
            ("visreg_invariance", terms.invariance),
            ("visreg_scale", terms.scale),
            ("visreg_shape", terms.shape),
            ("visreg_center", terms.center),
        ];
        (terms.loss, stats)
    }
}
