//! Barlow Twins (documented on `BarlowTwins`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::projected_pair::{PairObjective, ProjectedPair};
use super::ssl_method::LossAndStats;
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::head::MlpHeadConfig;
use crate::loss::{BarlowTwinsLoss, BarlowTwinsLossConfig};

/// Configuration of [`BarlowTwins`].
#[derive(Config, Debug)]
pub struct BarlowTwinsConfig {
    /// Width of the projector's two hidden layers (the paper's 8192).
    #[config(default = 8192)]
    pub hidden_dim: usize,
    /// Projection width (the paper's 8192).
    #[config(default = 8192)]
    pub output_dim: usize,
    /// The loss (`λ = 5e-3`).
    #[config(default = "BarlowTwinsLossConfig::new()")]
    pub loss: BarlowTwinsLossConfig,
}

/// Barlow Twins: a [`ProjectedPair`] with the Barlow Twins loss.
///
/// Barlow Twins (Zbontar, Jing, Misra, LeCun & Deny, ICML 2021,
/// <https://arxiv.org/abs/2103.03230>): backbone + a three-layer projector
/// (`features → 8192 → 8192 → 8192`, BatchNorm and ReLU after the first two) and the
/// redundancy-reduction loss of [`BarlowTwinsLoss`](crate::loss::BarlowTwinsLoss), which drives the
/// cross-correlation of the two views' standardised projections to the identity. No negatives,
/// no predictor, no momentum network; the paper trains it with LARS.
///
/// The paper's last linear layer has no bias; here it has one, which changes nothing: the loss
/// standardises every feature over the batch, so a constant shift has zero gradient and never
/// moves. The math, the defaults and the worked values are in
/// `docs/methods.md#barlow-twins-and-vicreg`.
pub type BarlowTwins<B, M> = ProjectedPair<B, M, BarlowTwinsLoss>;

impl BarlowTwinsConfig {
    /// Builds Barlow Twins around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or an impossible `λ`, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<BarlowTwins<B, M>, ConfigError> {
        let projector =
            |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim).with_num_layers(3);
        ProjectedPair::build(backbone, projector, self.loss.init()?, device)
    }
}

impl<B: Backend> PairObjective<B> for BarlowTwinsLoss {
    fn loss(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>, _: Progress) -> LossAndStats<B> {
        (self.forward(z1, z2), Vec::new())
    }
}
