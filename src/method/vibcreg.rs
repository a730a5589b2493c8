//! VIbCReg (documented on `VibcReg`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::iter_norm::{IterNorm, IterNormConfig};
use super::projected_pair::{PairNetwork, PairObjective, ProjectedPair};
use super::ssl_method::{HasBackbone, LossAndStats};
use super::vicreg::logged_terms;
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::head::{HeadActivation, MlpHead, MlpHeadConfig};
use crate::loss::{VibcRegLoss, VibcRegLossConfig};

/// Configuration of [`VibcReg`].
#[derive(Config, Debug)]
pub struct VibcRegConfig {
    /// Width of the projector's two hidden layers (solo-learn's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width (solo-learn's 2048).
    #[config(default = 2048)]
    pub output_dim: usize,
    /// Groups of IterNorm asked for (solo-learn's 64).
    #[config(default = 64)]
    pub whitening_groups: usize,
    /// Newton iterations of IterNorm (solo-learn's 5).
    #[config(default = 5)]
    pub whitening_iterations: usize,
    /// The loss (25 / 25 / 200, `ε = 1e-4`).
    #[config(default = "VibcRegLossConfig::new()")]
    pub loss: VibcRegLossConfig,
}

/// VIbCReg: the pair method of a [`VibcRegNetwork`] and the [`VibcRegLoss`].
///
/// VIbCReg (Lee & Aune, "VIbCReg: Variance-Invariance-better-Covariance Regularization for
/// Self-Supervised Learning on Time Series", 2021, <https://arxiv.org/abs/2109.00783>; solo-learn's
/// `solo/methods/vibcreg.py`): VICReg with a projector that ends in group whitening ([`IterNorm`])
/// and a covariance term on the normalised correlation ([`VibcRegLoss`](crate::loss::VibcRegLoss)).
///
/// The network ([`VibcRegNetwork`]): backbone + projector `features → 2048 (BN, GELU) → 2048
/// (BN, GELU) → 2048` + IterNorm (64 groups, 5 iterations). Both views pass through it; the loss
/// is on the pair, as Barlow Twins' and VICReg's ([`ProjectedPair`]). On replicas the batch
/// norms and IterNorm use the global batch's statistics and the loss sees every replica's
/// projections.
///
/// The math, the defaults and the worked values are in `docs/methods.md#vibcreg`.
pub type VibcReg<B, M> = ProjectedPair<B, M, VibcRegLoss, VibcRegNetwork<B, M>>;

impl VibcRegConfig {
    /// Builds VIbCReg around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or group count, or an impossible weight, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<VibcReg<B, M>, ConfigError> {
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .with_num_layers(3)
                .init(device)?;
        let whitening = IterNormConfig::new(self.output_dim)
            .with_num_groups(self.whitening_groups)
            .with_iterations(self.whitening_iterations)
            .init(device)
            .map_err(|e| match e.field {
                "num_groups" => ConfigError::new("whitening_groups", e.reason),
                "iterations" => ConfigError::new("whitening_iterations", e.reason),
                _ => e,
            })?;
        let network = VibcRegNetwork {
            backbone,
            projector,
            whitening,
        };
        Ok(ProjectedPair::of_network(network, self.loss.init()?))
    }
}

/// VIbCReg's network: a backbone, a projector with GELU, and IterNorm on its output.
#[derive(Module, Debug)]
pub struct VibcRegNetwork<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head (applied with GELU).
    pub projector: MlpHead<B>,
    /// Group whitening of the projections.
    pub whitening: IterNorm<B>,
}

impl<B: Backend, M> HasBackbone<M> for VibcRegNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> PairNetwork<B> for VibcRegNetwork<B, M> {
    fn forward_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        let features = self.backbone.forward_features_grouped(images, groups);
        let z = self
            .projector
            .forward_grouped_with(features, HeadActivation::Gelu, groups);
        self.whitening.forward_grouped(z, groups)
    }
}

impl<B: Backend> PairObjective<B> for VibcRegLoss {
    fn loss(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>, _: Progress) -> LossAndStats<B> {
        let names = [
            "vibcreg_invariance",
            "vibcreg_variance",
            "vibcreg_covariance",
        ];
        logged_terms(self.terms(z1, z2), names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};
    use crate::method::SslMethod;

    fn vibcreg() -> VibcReg<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 13, |d| {
            VibcRegConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_whitening_groups(2)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap()
    }

    /// The step's loss is VIbCReg's loss of the two views' whitened projections, each view
    /// through the network on its own; its three terms are logged.
    #[test]
    fn the_loss_is_vibcregs_on_the_whitened_projections() {
        let mut m = vibcreg();
        let (v1, v2) = (images::<Ad>(6, 0.0), images::<Ad>(6, 1.0));
        let z1 = m.online().forward_grouped(v1.clone(), 1);
        let z2 = m.online().forward_grouped(v2.clone(), 1);
        let expected = host(VibcRegLossConfig::new().init().unwrap().forward(z1, z2))[0];
        let out = m.forward(v1, v2, progress(0, 10, 0, 1));
        assert!((host(out.loss)[0] - expected).abs() < 1e-12);
        let names: Vec<_> = out.stats.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "vibcreg_invariance",
                "vibcreg_variance",
                "vibcreg_covariance"
            ]
        );
    }

    #[test]
    fn a_bad_whitening_setting_is_named_as_the_methods() {
        let e = crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 1, |d| {
            VibcRegConfig::new()
                .with_whitening_groups(0)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap_err();
        assert_eq!(e.field, "whitening_groups");
    }
}
