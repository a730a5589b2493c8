//! VISReg (documented on `VisReg`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Projected;
use super::ssl_method::{online_in, stateless, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::data_parallel::Replica;
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
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .with_num_layers(3)
                .init(device)?;
        Ok(VisReg {
            online: Projected {
                backbone,
                projector,
            },
            activation: if self.gelu {
                HeadActivation::Gelu
            } else {
                HeadActivation::Relu
            },
            loss: self.loss.init()?,
            seed: self.seed,
            replica: None,
        })
    }
}

/// VISReg. Build it with [`VisRegConfig::init`].
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
/// Multi-crop: the two global views go through the network as one batch, the local crops as
/// another (as LeJEPA). A step's random directions come from `(seed, step)`, the same on every
/// replica. The four terms are logged (`visreg_invariance`, `visreg_scale`, `visreg_shape`,
/// `visreg_center`).
///
/// The math, the defaults and where the paper's code and lightly differ are in
/// `docs/methods.md#visreg`.
#[derive(Debug, Clone)]
pub struct VisReg<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    activation: HeadActivation,
    loss: VisRegLoss,
    seed: u64,
    /// This method's replica in a data-parallel run: the loss sees every replica's projections.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> VisReg<B, M> {
    /// The loss.
    pub fn objective(&self) -> &VisRegLoss {
        &self.loss
    }

    /// The projections of a batch: the backbone's features through the projector, its hidden
    /// layers followed by the configured activation.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, output_dim]`
    pub fn project(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.online.projector.forward_with(
            self.online.backbone.forward_features(images),
            self.activation,
        )
    }

    /// The random directions of the step at `progress`, for projections `dim` wide: drawn from
    /// `(seed, step)`, so every replica and every rerun draws the same.
    ///
    /// # Shapes
    /// - output: `[dim, K]`
    pub fn slices(&self, progress: Progress, dim: usize, device: &B::Device) -> Tensor<B, 2> {
        let seed = mix_seed(
            mix_seed(0x5649_5352_4547_5f53, self.seed),
            progress.step as u64,
        );
        self.loss.slices(dim, seed, device)
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for VisReg<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    // Nothing besides the trainable networks (the directions come from the seed and the step).
    stateless!();

    online_in!(online);

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (global, local) = views.through(|x| self.project(x));
        let embeddings = [global[0].clone(), global[1].clone()];
        // Data-parallel: the moments, the sorted projections and the invariance are the global
        // batch's.
        let replica = self.replica.as_ref();
        let global = Replica::gather_each_on(replica, global);
        let local = Replica::gather_each_on(replica, local);
        let dim = global[0].dims()[1];
        let slices = self.slices(progress, dim, &global[0].device());
        let terms = self.loss.terms(&global, &local, slices);
        MethodOutput::new(terms.loss)
            .with_stat("visreg_invariance", terms.invariance)
            .with_stat("visreg_scale", terms.scale)
            .with_stat("visreg_shape", terms.shape)
            .with_stat("visreg_center", terms.center)
            .with_embeddings(embeddings)
    }

    /// The loss compares images across the batch: every replica computes it on the gathered
    /// projections (the same value everywhere), and the gather's backward returns each replica
    /// `W` times its rows' gradient, which the average over replicas brings back to the
    /// one-device gradient (`docs/methods.md#on-several-replicas`).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.replica = Some(replica);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};

    /// The step's loss is the loss of the network's projections (GELU in the projector) of the
    /// two global views (one pass) and the local crops (another) along the step's directions;
    /// the directions change with the step; the four terms are logged.
    #[test]
    fn the_loss_reads_every_views_projections_along_the_steps_directions() {
        let device = Default::default();
        let config = VisRegConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .with_loss(VisRegLossConfig::new().with_num_slices(16));
        let mut method = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            config.init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap();
        let (v1, v2, l1) = (
            images::<Ad>(6, 0.0),
            images::<Ad>(6, 1.0),
            images::<Ad>(6, 2.0),
        );
        let at = progress(3, 10, 0, 1);
        let features = method
            .online()
            .backbone
            .forward_features(Tensor::cat(vec![v1.clone(), v2.clone()], 0));
        let globals = method
            .online()
            .projector
            .forward_with(features, HeadActivation::Gelu);
        let relu = method
            .online()
            .forward(Tensor::cat(vec![v1.clone(), v2.clone()], 0));
        assert!(
            host(globals.clone()) != host(relu),
            "the projector applies GELU, not ReLU"
        );
        let locals = method.project(l1.clone());
        let slices = method.slices(at, 4, &device);
        let terms = method.objective().terms(
            &[globals.clone().slice(0..6), globals.slice(6..12)],
            &[locals],
            slices.clone(),
        );
        let out = method.forward_views(
            Views {
                global: [v1, v2],
                local: vec![l1],
            },
            at,
        );
        assert!((host(out.loss)[0] - host(terms.loss)[0]).abs() < 1e-12);
        let names: Vec<&str> = out.stats.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "visreg_invariance",
                "visreg_scale",
                "visreg_shape",
                "visreg_center"
            ]
        );
        for ((_, got), want) in
            out.stats
                .iter()
                .zip([terms.invariance, terms.scale, terms.shape, terms.center])
        {
            assert!((host(got.clone())[0] - host(want)[0]).abs() < 1e-12);
        }
        assert_eq!(
            host(method.slices(at, 4, &device)),
            host(slices.clone()),
            "one step, one set of directions"
        );
        assert_ne!(
            host(method.slices(progress(4, 10, 0, 1), 4, &device)),
            host(slices)
        );
    }
}
