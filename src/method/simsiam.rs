//! SimSiam (documented on `SimSiam`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewThreads;
use super::encoder::Predicted;
use super::ssl_method::{online_in, stateless, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{NegativeCosineLoss, NegativeCosineLossConfig};

/// Configuration of [`SimSiam`].
#[derive(Config, Debug)]
pub struct SimSiamConfig {
    /// Projection width (and projector hidden width).
    #[config(default = 2048)]
    pub dim: usize,
    /// Predictor bottleneck width.
    #[config(default = 512)]
    pub predictor_dim: usize,
}

impl SimSiamConfig {
    /// Builds SimSiam around the backbone `backbone` makes (called once).
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<SimSiam<B, M>, ConfigError> {
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::simsiam_projector(backbone.feature_dim(), self.dim).init(device)?;
        let predictor = MlpHeadConfig::new(self.dim, self.predictor_dim, self.dim).init(device)?;
        Ok(SimSiam {
            online: Predicted {
                backbone,
                projector,
                predictor,
            },
            loss: NegativeCosineLossConfig::new().init()?,
            view_threads: ViewThreads::default(),
        })
    }
}

/// SimSiam. Build it with [`SimSiamConfig::init`].
///
/// SimSiam (Chen & He 2021, <https://arxiv.org/abs/2011.10566>): backbone + 3-layer projector
/// whose last BatchNorm has no affine parameters (§3 and the authors' code,
/// `BatchNorm1d(dim, affine=False)`) + bottleneck predictor, the symmetric negative cosine
/// `D(p1, z2)/2 + D(p2, z1)/2` (eq. 2, averaged) with stop-gradient on the projections; no EMA,
/// no negatives.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#simsiam`.
#[derive(Debug, Clone)]
pub struct SimSiam<B: Backend, M: Backbone<B>> {
    online: Predicted<B, M>,
    loss: NegativeCosineLoss,
    /// The two views' passes back-propagated on two threads, when on.
    view_threads: ViewThreads<B, Predicted<B, M>>,
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SimSiam<B, M> {
    /// SimSiam's step with the two views' projections (`[N, D]` each, detached: SimSiam's
    /// stop-gradient) replaced by `targets` before the loss: SimSiam's own step passes them
    /// through; NNSiam ([`crate::method::NnSiam`]) puts their nearest neighbours in a support set
    /// in their place. The step's embeddings are the projections either way.
    pub(crate) fn forward_to(
        &mut self,
        views: Views<B>,
        targets: impl FnOnce([Tensor<B, 2>; 2]) -> [Tensor<B, 2>; 2],
    ) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        // The projections are detached: the stop-gradient of SimSiam (the loss detaches them
        // too).
        let ([p1, p2], [z1, z2]) =
            self.view_threads
                .passes(&self.online, [view1, view2], true, |net, x, groups| {
                    let (z, p) = net.forward_grouped(x, groups);
                    (p, z.detach())
                });
        let embeddings = [z1.clone(), z2.clone()];
        let [z1, z2] = targets([z1, z2]);
        MethodOutput::new(self.loss.forward_symmetric(p1, p2, z1, z2)).with_embeddings(embeddings)
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for SimSiam<B, M> {
    type Online = Predicted<B, M>;
    type Backbone = M;
    // SimSiam keeps no state besides its trainable networks.
    stateless!();

    online_in!(online, view_threads);

    fn forward_views(&mut self, views: Views<B>, _: Progress) -> MethodOutput<B> {
        self.forward_to(views, |projections| projections)
    }

    /// The loss is a mean over images: each replica's is the mean over its shard, and the
    /// average of the replicas' gradients is the one-device gradient (with synchronised batch
    /// norms). Nothing is gathered.
    fn set_replica(&mut self, _: Replica<B>) -> Result<(), ConfigError> {
        self.view_threads.replicated();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{cosine, host, images, mean_over_rows, progress, Ad};

    fn simsiam() -> SimSiam<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 6, |d| {
            SimSiamConfig::new()
                .with_dim(4)
                .with_predictor_dim(3)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap()
    }

    /// The loss is `−cos(p₁, z₂)/2 − cos(p₂, z₁)/2` averaged over the images (Chen & He 2021,
    /// eq. 2), recomputed here on the host from the network's projections and predictions.
    #[test]
    fn the_loss_is_the_mean_of_both_orderings_of_the_negative_cosine() {
        let mut m = simsiam();
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let (z1, p1) = m.online().forward(v1.clone());
        let (z2, p2) = m.online().forward(v2.clone());
        let term = |p, z| mean_over_rows(p, z, |p, z| -cosine(p, z));
        let expected = (term(p1, z2) + term(p2, z1)) / 2.0;
        let loss = host(m.forward(v1, v2, progress(0, 10, 0, 1)).loss)[0];
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
    }
}
