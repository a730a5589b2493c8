//! LeJEPA (documented on `LeJepa`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::sliced_views::{SlicedObjective, SlicedViews};
use super::ssl_method::LossAndStats;
use crate::base::error::ConfigError;
use crate::head::{HeadActivation, MlpHeadConfig};
use crate::loss::{LeJepaLoss, LeJepaLossConfig};

/// Configuration of [`LeJepa`].
#[derive(Config, Debug)]
pub struct LeJepaConfig {
    /// Width of the projector's two hidden layers (2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width (the paper's and lightly's 64).
    #[config(default = 64)]
    pub output_dim: usize,
    /// The loss (`λ = 0.05`, 17 knots on `[0, 3]`, 1024 directions).
    #[config(default = "LeJepaLossConfig::new()")]
    pub loss: LeJepaLossConfig,
    /// Seed of the directions: a step's are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl LeJepaConfig {
    /// Builds LeJEPA around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or a loss hyperparameter out of range, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<LeJepa<B, M>, ConfigError> {
        let projector =
            |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim).with_num_layers(3);
        let loss = self.loss.init()?;
        SlicedViews::build(
            backbone,
            projector,
            HeadActivation::Relu,
            loss,
            self.seed,
            device,
        )
    }
}

/// LeJEPA: a [`SlicedViews`] with the LeJEPA loss.
///
/// LeJEPA (Balestriero & LeCun 2025, <https://arxiv.org/abs/2511.08544>): backbone + a three-layer
/// projector (`features → 2048 (BN, ReLU) → 2048 (BN, ReLU) → 64`, the paper's and lightly's
/// `LeJEPAProjectionHead`), every view through the same network, and the loss of
/// [`LeJepaLoss`](crate::loss::LeJepaLoss): SIGReg pushes the projections of all views towards an
/// isotropic Gaussian while the invariance term pulls every view, global and local, to the mean of
/// the global views. One network, no teacher, no predictor, no stop-gradient, no schedule: the
/// paper's point is that SIGReg alone prevents the collapse those heuristics guard against.
///
/// Multi-crop as [`SlicedViews`]; a step's random directions come from `(seed, step)`. Both
/// terms are logged (`lejepa_sigreg`, `lejepa_invariance`).
///
/// The math, the defaults and the worked values are in `docs/methods.md#lejepa`.
pub type LeJepa<B, M> = SlicedViews<B, M, LeJepaLoss>;

impl<B: Backend> SlicedObjective<B> for LeJepaLoss {
    const DIRECTIONS_TAG: u64 = 0x4c45_4a45_5041_5f41;

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
            ("lejepa_sigreg", terms.sigreg),
            ("lejepa_invariance", terms.invariance),
        ];
        (terms.loss, stats)
    }
}
