//! FroSSL (documented on `FroSsl`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::projected_pair::{PairObjective, ProjectedPair};
use super::ssl_method::LossAndStats;
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::head::MlpHeadConfig;
use crate::loss::{FroSslLoss, FroSslLossConfig};

/// Configuration of [`FroSsl`].
#[derive(Config, Debug)]
pub struct FroSslConfig {
    /// Width of the projector's hidden layer (lightly's example: 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width (2048).
    #[config(default = 2048)]
    pub output_dim: usize,
    /// The loss (invariance weight 1).
    #[config(default = "FroSslLossConfig::new()")]
    pub loss: FroSslLossConfig,
}

/// FroSSL: a [`ProjectedPair`] with the FroSSL loss.
///
/// FroSSL (Skean, Dhakal, Jacobs & Sanchez Giraldo, ECCV 2024, <https://arxiv.org/abs/2310.02903>):
/// backbone + a two-layer projector (`features → 2048 (BN, ReLU) → 2048`, lightly's example:
/// VICReg's head at two layers) and the loss of [`FroSslLoss`](crate::loss::FroSslLoss): the log
/// Frobenius norm of each view's trace-normalised covariance (the variance / redundancy term) plus
/// the views' distance to their mean (invariance). No negatives, no predictor, no momentum network.
/// Both terms are logged (`frossl_regularisation`, `frossl_invariance`).
///
/// The math, the defaults and the worked values are in `docs/methods.md#frossl` and
/// `docs/methods.md#frossl-loss`.
pub type FroSsl<B, M> = ProjectedPair<B, M, FroSslLoss>;

impl FroSslConfig {
    /// Builds FroSSL around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or a negative weight, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<FroSsl<B, M>, ConfigError> {
        let projector =
            |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim).with_num_layers(2);
        ProjectedPair::build(backbone, projector, self.loss.init()?, device)
    }
}

impl<B: Backend> PairObjective<B> for FroSslLoss {
    fn loss(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>, _: Progress) -> LossAndStats<B> {
        let terms = self.terms(vec![z1, z2]);
        (
            terms.loss,
            vec![
                ("frossl_regularisation", terms.regularisation),
                ("frossl_invariance", terms.invariance),
            ],
        )
    }
}
