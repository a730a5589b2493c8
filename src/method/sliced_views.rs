//! The shape of LeJEPA and VISReg (documented on `SlicedViews`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Projected;
use super::ssl_method::{
    online_in, replica_in, stateless, LossAndStats, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::{HeadActivation, MlpHeadConfig};

/// An objective over every view's projections, global and local, that reads them along a
/// step's random directions (LeJEPA's SIGReg, VISReg's sliced shape term): what
/// [`SlicedViews`] trains with.
pub trait SlicedObjective<B: Backend>: Clone + std::fmt::Debug + 'static {
    /// Mixed with the method's seed before the step: two methods given one seed draw different
    /// directions.
    const DIRECTIONS_TAG: u64;

    /// `count`-many random directions for projections `dim` wide, drawn from `seed`.
    ///
    /// # Shapes
    /// - output: `[dim, count]`
    fn directions(&self, dim: usize, seed: u64, device: &B::Device) -> Tensor<B, 2>;

    /// The loss and named terms (each `[1]`, detached) of the global views' and the local
    /// crops' projections (every replica's, on replicas) along `directions`.
    ///
    /// # Shapes
    /// - `global`, `local`: `[N, D]` each; `directions`: `[D, K]` → loss `[1]`
    fn loss(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        directions: Tensor<B, 2>,
    ) -> LossAndStats<B>;
}

/// A method made of one network (a backbone and a projector) through which every view passes,
/// global and local, and a [`SlicedObjective`] over all the views' projections along the step's
/// random directions (LeJEPA, VISReg). Build one with a method's config, e.g.
/// [`super::LeJepaConfig::init`].
///
/// The shape shared by the methods whose idea is their regulariser of the projections'
/// distribution plus an invariance of every view to the global views' mean: no teacher, no
/// predictor, no stop-gradient, no schedule. The two global views go through the network as one
/// batch, the local crops as another (lightly's LeJEPA example). A step's directions come from
/// `(seed, step)`, the same on every replica and in every rerun. On replicas the objective sees
/// every replica's projections (the same value everywhere).
#[derive(Debug, Clone)]
pub struct SlicedViews<B: Backend, M: Backbone<B>, L> {
    online: Projected<B, M>,
    /// After the projector's hidden layers.
    activation: HeadActivation,
    loss: L,
    seed: u64,
    /// This method's replica in a data-parallel run: the loss sees every replica's projections.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>, L> SlicedViews<B, M, L> {
    /// A method of the backbone `backbone` makes (called once), the projector `projector`
    /// gives for the backbone's feature width with `activation` after its hidden layers, the
    /// objective `loss`, and the directions' `seed`.
    ///
    /// # Errors
    /// A zero width in the projector.
    pub fn build(
        backbone: impl Fn(&B::Device) -> M,
        projector: impl FnOnce(usize) -> MlpHeadConfig,
        activation: HeadActivation,
        loss: L,
        seed: u64,
        device: &B::Device,
    ) -> Result<Self, ConfigError> {
        let backbone = backbone(device);
        let projector = projector(backbone.feature_dim()).init(device)?;
        Ok(Self {
            online: Projected {
                backbone,
                projector,
            },
            activation,
            loss,
            seed,
            replica: None,
        })
    }

    /// The objective.
    pub fn objective(&self) -> &L {
        &self.loss
    }

    /// The projections of a batch: the backbone's features through the projector, its hidden
    /// layers followed by the method's activation.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, output_dim]`
    pub fn project(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.online.projector.forward_with(
            self.online.backbone.forward_features(images),
            self.activation,
        )
    }
}

impl<B: Backend, M: Backbone<B>, L: SlicedObjective<B>> SlicedViews<B, M, L> {
    /// The random directions of the step at `progress`, for projections `dim` wide: drawn from
    /// `(seed, step)`, so every replica and every rerun draws the same.
    ///
    /// # Shapes
    /// - output: `[dim, K]`
    pub fn slices(&self, progress: Progress, dim: usize, device: &B::Device) -> Tensor<B, 2> {
        let seed = mix_seed(mix_seed(L::DIRECTIONS_TAG, self.seed), progress.step as u64);
        self.loss.directions(dim, seed, device)
    }
}

impl<B, M, L> SslMethod<B> for SlicedViews<B, M, L>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    L: SlicedObjective<B>,
{
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
        // Data-parallel: the objective's statistics and the invariance are the global batch's.
        let replica = self.replica.as_ref();
        let global = Replica::gather_each_on(replica, global);
        let local = Replica::gather_each_on(replica, local);
        let dim = global[0].dims()[1];
        let slices = self.slices(progress, dim, &global[0].device());
        let (loss, stats) = self.loss.loss(&global, &local, slices);
        MethodOutput {
            stats,
            ..MethodOutput::new(loss).with_embeddings(embeddings)
        }
    }

    replica_in!(
        /// The loss compares images across the batch: every replica computes it on the gathered
        /// projections (the same value everywhere), and the gather's backward returns each replica
        /// `W` times its rows' gradient, which the average over replicas brings back to the
        /// one-device gradient (`docs/methods.md#on-several-replicas`).
        replica
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::{LeJepaLossConfig, VisRegLossConfig};
    use crate::method::testing::{host, images, progress, Ad, Dev, TinyBackbone as Tiny};
    use crate::method::{LeJepaConfig, VisRegConfig};

    /// One method of the frame: the step's loss is the objective's on the projections (the
    /// backbone's features through the projector with `activation` after its hidden layers) of
    /// the two global views (one pass) and the local crop (another) along the step's
    /// directions; the step logs `names` with the values `terms` gives (from the loss's own
    /// terms); one step draws one set of directions, the next another.
    fn check<L: SlicedObjective<Ad>>(
        mut method: Method<L>,
        activation: HeadActivation,
        names: &[&str],
        terms: impl Fn(&L, [Tensor<Ad, 2>; 3], Tensor<Ad, 2>) -> Vec<Tensor<Ad, 1>>,
    ) {
        let device = Default::default();
        let (v1, v2, l1) = (
            images::<Ad>(6, 0.0),
            images::<Ad>(6, 1.0),
            images::<Ad>(6, 2.0),
        );
        let at = progress(3, 10, 0, 1);
        let net = method.online().clone();
        let project = |x| {
            net.projector
                .forward_with(net.backbone.forward_features(x), activation)
        };
        let globals = project(Tensor::cat(vec![v1.clone(), v2.clone()], 0));
        let locals = project(l1.clone());
        let relu = net.forward(l1.clone());
        assert_eq!(
            host(locals.clone()) == host(relu),
            activation == HeadActivation::Relu,
            "the projector's activation is the method's"
        );
        let slices = method.slices(at, 4, &device);
        let views = [globals.clone().slice(0..6), globals.slice(6..12), locals];
        let expected = terms(method.objective(), views, slices.clone());
        let out = method.forward_views(
            Views {
                global: [v1, v2],
                local: vec![l1],
            },
            at,
        );
        assert!((host(out.loss)[0] - host(expected[0].clone())[0]).abs() < 1e-12);
        let logged: Vec<&str> = out.stats.iter().map(|(n, _)| *n).collect();
        assert_eq!(logged, names);
        for ((_, got), want) in out.stats.iter().zip(&expected[1..]) {
            assert!((host(got.clone())[0] - host(want.clone())[0]).abs() < 1e-12);
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

    type Method<L> = SlicedViews<Ad, Tiny<Ad>, L>;

    /// The method `init` builds, its parameters drawn from seed 4.
    fn build<L: SlicedObjective<Ad>>(
        init: impl FnOnce(&Dev) -> Result<Method<L>, ConfigError>,
    ) -> Method<L> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 4, init).unwrap()
    }

    /// LeJEPA: ReLU in the projector; SIGReg and the invariance logged.
    #[test]
    fn lejepa_reads_every_views_projections_along_the_steps_directions() {
        let config = LeJepaConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .with_loss(LeJepaLossConfig::new().with_num_slices(16));
        let method = build(|d| config.init(|d| Tiny::new(16, 6, d), d));
        let names = ["lejepa_sigreg", "lejepa_invariance"];
        check(
            method,
            HeadActivation::Relu,
            &names,
            |loss, [g1, g2, l], s| {
                let t = loss.terms(&[g1, g2], &[l], s);
                vec![t.loss, t.sigreg, t.invariance]
            },
        );
    }

    /// VISReg: GELU in the projector; its four terms logged.
    #[test]
    fn visreg_reads_every_views_projections_along_the_steps_directions() {
        let config = VisRegConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .with_loss(VisRegLossConfig::new().with_num_slices(16));
        let method = build(|d| config.init(|d| Tiny::new(16, 6, d), d));
        let names = [
            "visreg_invariance",
            "visreg_scale",
            "visreg_shape",
            "visreg_center",
        ];
        check(
            method,
            HeadActivation::Gelu,
            &names,
            |loss, [g1, g2, l], s| {
                let t = loss.terms(&[g1, g2], &[l], s);
                vec![t.loss, t.invariance, t.scale, t.shape, t.center]
            },
        );
    }
}
