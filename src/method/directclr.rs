//! DirectCLR (documented on `DirectClr`).

use std::marker::PhantomData;

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::projected_pair::{PairNetwork, PairObjective, ProjectedPair};
use super::ssl_method::{HasBackbone, LossAndStats};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::loss::{DirectClrLoss, DirectClrLossConfig};

/// Configuration of [`DirectClr`].
#[derive(Config, Debug)]
pub struct DirectClrConfig {
    /// The loss: `d₀` 64 and τ 0.5 (lightly's defaults).
    #[config(default = "DirectClrLossConfig::new()")]
    pub loss: DirectClrLossConfig,
}

impl DirectClrConfig {
    /// Builds DirectCLR around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero `loss_dim`, a `loss_dim` wider than the backbone's features, or a temperature
    /// that is not a finite number > 0, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<DirectClr<B, M>, ConfigError> {
        let backbone = backbone(device);
        let loss = self.loss.init()?;
        let features = backbone.feature_dim();
        if loss.loss_dim() > features {
            return Err(ConfigError::new(
                "loss_dim",
                format!(
                    "reads the first {} coordinates of the representation, but the backbone \
                     gives {features}",
                    loss.loss_dim()
                ),
            ));
        }
        let online = Unprojected {
            backbone,
            backend: PhantomData,
        };
        Ok(ProjectedPair::of_network(online, loss))
    }
}

/// A backbone trained without any head: DirectCLR's network.
#[derive(Module, Debug)]
pub struct Unprojected<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    backend: PhantomData<B>,
}

impl<B: Backend, M> HasBackbone<M> for Unprojected<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> PairNetwork<B> for Unprojected<B, M> {
    fn forward_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        self.backbone.forward_features_grouped(images, groups)
    }
}

/// DirectCLR: a [`ProjectedPair`] of the backbone alone and the DirectCLR loss. Build it with
/// [`DirectClrConfig::init`].
///
/// DirectCLR (Jing, Vincent, LeCun & Tian, ICLR 2022, <https://arxiv.org/abs/2110.09348>, §6):
/// SimCLR without a projector. The loss of [`DirectClrLoss`](crate::loss::DirectClrLoss) reads the
/// first `d₀` coordinates of the backbone's own representation; the network is the backbone alone
/// ([`Unprojected`]), so nothing but the backbone trains and what kNN and the probe read is what
/// the loss shaped. A [`ProjectedPair`] of that network; the sub-vectors' mean L2 norm is logged
/// (`directclr_norm`, over both views' rows of the global batch) beside the loss.
///
/// The math, the defaults and the worked values are in `docs/methods.md#directclr`.
pub type DirectClr<B, M> = ProjectedPair<B, M, DirectClrLoss, Unprojected<B, M>>;

impl<B: Backend> PairObjective<B> for DirectClrLoss {
    fn loss(&self, r1: Tensor<B, 2>, r2: Tensor<B, 2>, _: Progress) -> LossAndStats<B> {
        let heads = Tensor::cat(
            vec![self.truncate(r1.clone()), self.truncate(r2.clone())],
            0,
        );
        let norm = heads.detach().powi_scalar(2).sum_dim(1).sqrt().mean();
        (self.forward(r1, r2), vec![("directclr_norm", norm)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};
    use crate::method::SslMethod;
    use burn::backend::NdArray;

    /// The step's loss is the loss of the backbone's own features (no head in between), its
    /// gradient reaches the backbone, and `d₀` wider than the features is refused by name.
    #[test]
    fn the_loss_reads_the_backbones_features_and_trains_them() {
        let device = Default::default();
        let (v1, v2) = (images::<Ad>(6, 0.0), images::<Ad>(6, 1.0));
        let config = DirectClrConfig::new().with_loss(DirectClrLossConfig::new().with_loss_dim(4));
        let mut method = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            config.init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap();
        let backbone = method.online().backbone.clone();
        let (r1, r2) = (
            backbone.forward_features(v1.clone()),
            backbone.forward_features(v2.clone()),
        );
        let expected = host(method.objective().forward(r1.clone(), r2.clone()))[0];
        let out = method.forward(v1, v2, progress(0, 10, 0, 1));
        assert!((host(out.loss.clone())[0] - expected).abs() < 1e-12);
        // The logged norm is the mean L2 norm of the 12 truncated rows.
        let heads = host(Tensor::cat(vec![r1, r2], 0).narrow(1, 0, 4));
        let want = heads
            .chunks(4)
            .map(|row| row.iter().map(|x| x * x).sum::<f64>().sqrt())
            .sum::<f64>()
            / 12.0;
        assert_eq!(out.stats.len(), 1);
        assert!((host(out.stats[0].1.clone())[0] - want).abs() < 1e-12);
        let grads = method.gradients(&out.loss);
        let weight = &method.online().backbone.fc.weight;
        let grad = grads
            .get::<NdArray<f64>, 2>(weight.id)
            .expect("the backbone's weight has a gradient");
        assert!(host(grad).iter().any(|g| g.abs() > 1e-9));

        let wide = DirectClrConfig::new().with_loss(DirectClrLossConfig::new().with_loss_dim(7));
        let err = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            wide.init(|d| Tiny::new(16, 6, d), d)
        })
        .expect_err("7 coordinates of 6 features");
        assert_eq!(err.field, "loss_dim");
    }
}
