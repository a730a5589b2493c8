//! DirectCLR (Jing, Vincent, LeCun & Tian, ICLR 2022, <https://arxiv.org/abs/2110.09348>, §6):
//! SimCLR without a projector. The loss of [`crate::loss::directclr`] reads the first `d₀`
//! coordinates of the backbone's own representation; the network is the backbone alone
//! ([`Unprojected`]), so nothing but the backbone trains and what kNN and the probe read is what
//! the loss shaped. The sub-vector's L2 norm is logged (`directclr_norm`, the mean over both
//! views' rows) beside the loss.
//!
//! The math, the defaults and the worked values are in `docs/methods.md#directclr`.

use std::marker::PhantomData;

use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::{ViewPasses, ViewThreads};
use super::ssl_method::{HasBackbone, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::loss::{DirectClrLoss, DirectClrLossConfig};

/// Configuration of [`DirectClr`].
#[derive(Config, Debug)]
pub struct DirectClrConfig {
    /// The loss: `d₀` 64 and τ 0.5 (lightly's defaults).
    #[config(default = "DirectClrLossConfig::new()")]
    pub loss: DirectClrLossConfig,
}

impl DirectClrConfig {
    /// Builds DirectCLR around `backbone`.
    ///
    /// # Errors
    /// A zero `loss_dim`, a `loss_dim` wider than the backbone's features, or a temperature
    /// that is not a finite number > 0, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: M,
        _device: &B::Device,
    ) -> Result<DirectClr<B, M>, ConfigError> {
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
        Ok(DirectClr {
            online: Unprojected {
                backbone,
                backend: PhantomData,
            },
            loss,
            view_threads: ViewThreads::default(),
            replica: None,
        })
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

/// DirectCLR. Build it with [`DirectClrConfig::init`].
#[derive(Debug, Clone)]
pub struct DirectClr<B: Backend, M: Backbone<B>> {
    online: Unprojected<B, M>,
    loss: DirectClrLoss,
    /// The two views' passes back-propagated on two threads, when on.
    view_threads: ViewThreads<B, Unprojected<B, M>>,
    /// This method's replica in a data-parallel run: the loss sees every replica's rows.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> DirectClr<B, M> {
    /// The loss.
    pub fn objective(&self) -> &DirectClrLoss {
        &self.loss
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for DirectClr<B, M> {
    type Online = Unprojected<B, M>;
    type Backbone = M;
    /// Nothing besides the backbone.
    type State = ();

    fn online(&self) -> &Self::Online {
        &self.online
    }

    fn state(&self) {}

    fn load_state(&mut self, _: ()) -> Result<(), ConfigError> {
        Ok(())
    }

    fn set_online(&mut self, online: Self::Online) {
        self.online = online;
    }

    fn forward_views(&mut self, views: Views<B>, _: Progress) -> MethodOutput<B> {
        let ([r1, r2], _) =
            self.view_threads
                .passes(&self.online, views.two(), true, |net, x, groups| {
                    (net.backbone.forward_features_grouped(x, groups), ())
                });
        let (h1, h2) = (
            self.loss.truncate(r1.clone()),
            self.loss.truncate(r2.clone()),
        );
        let norm = Tensor::cat(vec![h1.detach(), h2.detach()], 0)
            .powi_scalar(2)
            .sum_dim(1)
            .sqrt()
            .mean();
        let embeddings = Some([r1.clone().detach(), r2.clone().detach()]);
        // Data-parallel: every anchor's negatives are the global batch's rows.
        let (r1, r2) = match &self.replica {
            Some(replica) => (replica.gather(r1), replica.gather(r2)),
            None => (r1, r2),
        };
        MethodOutput {
            loss: self.loss.forward(r1, r2),
            stats: vec![("directclr_norm", norm)],
            embeddings,
        }
    }

    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        self.view_threads.gradients(loss, &self.online)
    }

    fn set_view_passes(&mut self, passes: ViewPasses) {
        self.view_threads.set(passes);
    }

    /// NT-Xent compares images across the batch: every replica computes it on the gathered
    /// representations (the same value everywhere), and the gather's backward returns each
    /// replica `W` times its rows' gradient, which the average over replicas brings back to the
    /// one-device gradient (`docs/methods.md#on-several-replicas`).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.view_threads.replicated();
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, _: Progress) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, TinyBackbone as Tiny};
    use burn::backend::{Autodiff, NdArray};

    type Ad = Autodiff<NdArray<f64>>;

    /// The step's loss is the loss of the backbone's own features (no head in between), its
    /// gradient reaches the backbone, and `d₀` wider than the features is refused by name.
    #[test]
    fn the_loss_reads_the_backbones_features_and_trains_them() {
        let device = Default::default();
        let (v1, v2) = (images::<Ad>(6, 0.0), images::<Ad>(6, 1.0));
        let config = DirectClrConfig::new().with_loss(DirectClrLossConfig::new().with_loss_dim(4));
        let mut method = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            config.init(Tiny::new(16, 6, d), d)
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
            wide.init(Tiny::new(16, 6, d), d)
        })
        .expect_err("7 coordinates of 6 features");
        assert_eq!(err.field, "loss_dim");
    }
}
