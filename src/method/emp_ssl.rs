//! EMP-SSL (documented on `EmpSsl`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Projected;
use super::ssl_method::{online_in, replica_in, stateless, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{l2_normalize, EmpSslLoss, EmpSslLossConfig};

/// Configuration of [`EmpSsl`].
#[derive(Config, Debug)]
pub struct EmpSslConfig {
    /// Width of the projector's two hidden layers (the authors' 4096).
    #[config(default = 4096)]
    pub hidden_dim: usize,
    /// Embedding width (the authors' 1024).
    #[config(default = 1024)]
    pub output_dim: usize,
    /// The loss (`ε = 0.2`, `λ = 200`).
    #[config(default = "EmpSslLossConfig::new()")]
    pub loss: EmpSslLossConfig,
}

impl EmpSslConfig {
    /// Builds EMP-SSL around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or a loss weight out of range, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<EmpSsl<B, M>, ConfigError> {
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .with_num_layers(3)
                .init(device)?;
        Ok(EmpSsl {
            online: Projected {
                backbone,
                projector,
            },
            loss: self.loss.init()?,
            replica: None,
        })
    }
}

/// EMP-SSL. Build it with [`EmpSslConfig::init`].
///
/// EMP-SSL (Tong, Chen, Ma & LeCun 2023, <https://arxiv.org/abs/2304.03977>): many fixed-size
/// patches of every image through one network — backbone + projector (`features → 4096 (BN,
/// ReLU) → 4096 (BN, ReLU) → 1024`, the authors') whose output is L2-normalised — and the
/// [EMP-SSL loss](crate::loss::EmpSslLoss): each patch set's total coding rate up, every patch's
/// embedding towards its image's mean. No momentum network, no predictor, no stop-gradient; the
/// paper's claim is that many patches per image make one epoch go a long way.
///
/// The patches are the pipeline's two global views and its local crops (multi-crop), all of one
/// kind in the `emp_ssl` recipe, so `V = 2 + local crops`; the global views go through the
/// network as one batch and the local crops as another. Both terms are logged
/// (`emp_ssl_coding_rate`, `emp_ssl_similarity`). On several replicas every view's embeddings
/// are gathered: the coding rates and the images' mean embeddings are the global batch's.
///
/// The math, the defaults and what was chosen where lightly and the authors differ are in
/// `docs/methods.md#emp-ssl`.
#[derive(Debug, Clone)]
pub struct EmpSsl<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    loss: EmpSslLoss,
    /// This method's replica in a data-parallel run: the loss sees every replica's embeddings.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> EmpSsl<B, M> {
    /// The loss.
    pub fn objective(&self) -> &EmpSslLoss {
        &self.loss
    }

    /// The L2-normalised embeddings of `images`.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, output_dim]`
    pub fn embed(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        l2_normalize(self.online.forward(images))
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for EmpSsl<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    // Nothing besides the trainable networks.
    stateless!();

    online_in!(online);

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, _: Progress) -> MethodOutput<B> {
        let (mut patches, local) = views.through(|x| self.embed(x));
        patches.extend(local);
        let embeddings = [patches[0].clone(), patches[1].clone()];
        // Data-parallel: the coding rates and the images' means are the global batch's.
        let patches = Replica::gather_each_on(self.replica.as_ref(), patches);
        let terms = self.loss.terms(&patches);
        MethodOutput::new(terms.loss)
            .with_stat("emp_ssl_coding_rate", terms.coding_rate)
            .with_stat("emp_ssl_similarity", terms.similarity)
            .with_embeddings(embeddings)
    }

    replica_in!(
        /// The loss compares images across the batch: every replica computes it on the gathered
        /// embeddings (the same value everywhere), and the gather's backward returns each replica
        /// `W` times its rows' gradient, which the average over replicas brings back to the
        /// one-device gradient (`docs/methods.md#on-several-replicas`).
        replica
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};

    /// The step's loss is the loss of the normalised embeddings of the two global views (one
    /// pass) and the local crops (another), in that order; both terms are logged.
    #[test]
    fn the_loss_reads_every_patchs_normalised_embedding() {
        let device = Default::default();
        let config = EmpSslConfig::new().with_hidden_dim(8).with_output_dim(4);
        let mut method = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            config.init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap();
        let (v1, v2, l1, l2) = (
            images::<Ad>(6, 0.0),
            images::<Ad>(6, 1.0),
            images::<Ad>(6, 2.0),
            images::<Ad>(6, 3.0),
        );
        let globals = method.embed(Tensor::cat(vec![v1.clone(), v2.clone()], 0));
        let locals = method.embed(Tensor::cat(vec![l1.clone(), l2.clone()], 0));
        let norms = host(globals.clone().powi_scalar(2).sum_dim(1));
        assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-12), "{norms:?}");
        let terms = method.objective().terms(&[
            globals.clone().slice(0..6),
            globals.slice(6..12),
            locals.clone().slice(0..6),
            locals.slice(6..12),
        ]);
        let out = method.forward_views(
            Views {
                global: [v1, v2],
                local: vec![l1, l2],
            },
            progress(0, 10, 0, 1),
        );
        assert!((host(out.loss)[0] - host(terms.loss)[0]).abs() < 1e-12);
        let names: Vec<&str> = out.stats.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["emp_ssl_coding_rate", "emp_ssl_similarity"]);
        assert!((host(out.stats[0].1.clone())[0] - host(terms.coding_rate)[0]).abs() < 1e-12);
        assert!((host(out.stats[1].1.clone())[0] - host(terms.similarity)[0]).abs() < 1e-12);
    }
}
