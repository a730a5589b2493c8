//! VICReg (documented on `VicReg`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::projected_pair::{PairObjective, ProjectedPair};
use super::ssl_method::LossAndStats;
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::head::MlpHeadConfig;
use crate::loss::{VicRegLoss, VicRegLossConfig, VicRegTerms};

/// Configuration of [`VicReg`].
#[derive(Config, Debug)]
pub struct VicRegConfig {
    /// Width of the expander's two hidden layers (the paper's 8192).
    #[config(default = 8192)]
    pub hidden_dim: usize,
    /// Expander output width (the paper's 8192).
    #[config(default = 8192)]
    pub output_dim: usize,
    /// The loss (25 / 25 / 1, `ε = 1e-4`).
    #[config(default = "VicRegLossConfig::new()")]
    pub loss: VicRegLossConfig,
}

/// VICReg: a [`ProjectedPair`] with the VICReg loss.
///
/// VICReg (Bardes, Ponce & LeCun, ICLR 2022, <https://arxiv.org/abs/2105.04906>): backbone + a
/// three-layer expander (`features → 8192 → 8192 → 8192`, BatchNorm and ReLU after the first two)
/// and the variance-invariance-covariance loss of [`VicRegLoss`](crate::loss::VicRegLoss) (25 / 25
/// / 1, `ε = 1e-4`). No negatives, no predictor, no momentum network, no stop-gradient; the paper
/// trains it with LARS. The three terms are logged (`vicreg_invariance`, `vicreg_variance`,
/// `vicreg_covariance`).
///
/// The math, the defaults and the worked values are in `docs/methods.md#barlow-twins-and-vicreg`.
pub type VicReg<B, M> = ProjectedPair<B, M, VicRegLoss>;

impl VicRegConfig {
    /// Builds VICReg around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or an impossible weight, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<VicReg<B, M>, ConfigError> {
        let expander =
            |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim).with_num_layers(3);
        ProjectedPair::build(backbone, expander, self.loss.init()?, device)
    }
}

impl<B: Backend> PairObjective<B> for VicRegLoss {
    fn loss(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>, _: Progress) -> LossAndStats<B> {
        let names = ["vicreg_invariance", "vicreg_variance", "vicreg_covariance"];
        logged_terms(self.terms(z1, z2), names)
    }
}

/// The loss of `terms` and its three terms, detached, under `names` (invariance, variance,
/// covariance): VICReg's and VIbCReg's statistics.
pub(super) fn logged_terms<B: Backend>(
    terms: VicRegTerms<B>,
    names: [&'static str; 3],
) -> LossAndStats<B> {
    let [invariance, variance, covariance] = names;
    (
        terms.loss,
        vec![
            (invariance, terms.invariance.detach()),
            (variance, terms.variance.detach()),
            (covariance, terms.covariance.detach()),
        ],
    )
}
