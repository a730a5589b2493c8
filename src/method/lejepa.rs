//! LeJEPA (documented on `LeJepa`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Projected;
use super::ssl_method::{online_in, stateless, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
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
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .with_num_layers(3)
                .init(device)?;
        Ok(LeJepa {
            online: Projected {
                backbone,
                projector,
            },
            loss: self.loss.init()?,
            seed: self.seed,
            replica: None,
        })
    }
}

/// LeJEPA. Build it with [`LeJepaConfig::init`].
///
/// LeJEPA (Balestriero & LeCun 2025, <https://arxiv.org/abs/2511.08544>): backbone + a three-layer
/// projector (`features → 2048 (BN, ReLU) → 2048 (BN, ReLU) → 64`, the paper's and lightly's
/// `LeJEPAProjectionHead`), every view through the same network, and the loss of
/// [`LeJepaLoss`](crate::loss::LeJepaLoss): SIGReg pushes the projections of all views towards an
/// isotropic Gaussian while the invariance term pulls every view, global and local, to the mean of
/// the global views. One network, no teacher, no predictor, no stop-gradient, no schedule: the
/// paper's point is that SIGReg alone prevents the collapse those heuristics guard against.
///
/// Multi-crop: the two global views go through the network as one batch, the local crops as
/// another (lightly's example). A step's random directions come from `(seed, step)`, the same on
/// every replica. Both terms are logged (`lejepa_sigreg`, `lejepa_invariance`).
///
/// The math, the defaults and the worked values are in `docs/methods.md#lejepa`.
#[derive(Debug, Clone)]
pub struct LeJepa<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    loss: LeJepaLoss,
    seed: u64,
    /// This method's replica in a data-parallel run: the loss sees every replica's projections.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> LeJepa<B, M> {
    /// The loss.
    pub fn objective(&self) -> &LeJepaLoss {
        &self.loss
    }

    /// The random directions of the step at `progress`, for projections `dim` wide: drawn from
    /// `(seed, step)`, so every replica and every rerun draws the same.
    ///
    /// # Shapes
    /// - output: `[dim, K]`
    pub fn slices(&self, progress: Progress, dim: usize, device: &B::Device) -> Tensor<B, 2> {
        let seed = mix_seed(
            mix_seed(0x4c45_4a45_5041_5f41, self.seed),
            progress.step as u64,
        );
        self.loss.slices(dim, seed, device)
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for LeJepa<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    // Nothing besides the trainable networks (the directions come from the seed and the step).
    stateless!();

    online_in!(online);

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (global, local) = views.through(|x| self.online.forward(x));
        let embeddings = [global[0].clone(), global[1].clone()];
        // Data-parallel: SIGReg's empirical characteristic functions and the invariance are the
        // global batch's.
        let replica = self.replica.as_ref();
        let global = Replica::gather_each_on(replica, global);
        let local = Replica::gather_each_on(replica, local);
        let dim = global[0].dims()[1];
        let slices = self.slices(progress, dim, &global[0].device());
        let terms = self.loss.terms(&global, &local, slices);
        MethodOutput::new(terms.loss)
            .with_stat("lejepa_sigreg", terms.sigreg)
            .with_stat("lejepa_invariance", terms.invariance)
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

    /// The step's loss is the loss of the network's projections of the two global views (one
    /// pass) and the local crops (another) along the step's directions; the directions change
    /// with the step and not with the replica's data; both terms are logged.
    #[test]
    fn the_loss_reads_every_views_projections_along_the_steps_directions() {
        let device = Default::default();
        let config = LeJepaConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .with_loss(LeJepaLossConfig::new().with_num_slices(16));
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
        let globals = method
            .online()
            .forward(Tensor::cat(vec![v1.clone(), v2.clone()], 0));
        let locals = method.online().forward(l1.clone());
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
        assert_eq!(names, ["lejepa_sigreg", "lejepa_invariance"]);
        assert!((host(out.stats[0].1.clone())[0] - host(terms.sigreg)[0]).abs() < 1e-12);
        assert!((host(out.stats[1].1.clone())[0] - host(terms.invariance)[0]).abs() < 1e-12);
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
