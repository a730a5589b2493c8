//! The shape of the pair methods (documented on `ProjectedPair`).

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewThreads;
use super::encoder::Projected;
use super::ssl_method::{
    online_in, replica_in, stateless, HasBackbone, LossAndStats, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::{MlpHead, MlpHeadConfig};

/// A loss on two views' projections that compares images across the batch (a
/// cross-correlation, a variance): what [`ProjectedPair`] trains with.
pub trait PairObjective<B: Backend>: Clone + std::fmt::Debug + 'static {
    /// The loss and named statistics (each `[1]`, detached) of the two views' projections at
    /// `progress` (W-MSE draws its sub-batches from the step; the others ignore it).
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` → loss `[1]`
    fn loss(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>, progress: Progress) -> LossAndStats<B>;
}

/// The network a [`ProjectedPair`] passes both views through: [`Projected`] (a backbone and a
/// projector) or [`Unprojected`](super::Unprojected) (the backbone alone).
pub trait PairNetwork<B: Backend> {
    /// The outputs the loss compares of `groups` equal batches stacked along the first axis,
    /// each as the network gives it on its own.
    ///
    /// # Shapes
    /// - `images`: `[groups · N, C, H, W]` → `[groups · N, D]`
    fn forward_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2>;
}

impl<B: Backend, M: Backbone<B>> PairNetwork<B> for Projected<B, M> {
    fn forward_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        Projected::forward_grouped(self, images, groups)
    }
}

/// A method made of one network ([`PairNetwork`], by default a backbone and a projector) and a
/// [`PairObjective`] (Barlow Twins, VICReg, VIbCReg, FroSSL, W-MSE, DirectCLR). Build one with a
/// method's config, e.g. [`super::BarlowTwinsConfig::init`].
///
/// The shape shared by the methods whose whole idea is their loss on two views' outputs of one
/// network (Barlow Twins, VICReg, VIbCReg, FroSSL, W-MSE: backbone + MLP projector; DirectCLR: the
/// backbone alone), the loss between the two views' outputs, no predictor, no momentum network, no
/// queue. The papers' own pieces live in their method files (their networks and defaults) and in
/// `loss/` (their losses).
#[derive(Debug, Clone)]
pub struct ProjectedPair<B: Backend, M: Backbone<B>, L, N = Projected<B, M>> {
    online: N,
    loss: L,
    /// The two views' passes back-propagated on two threads, when on.
    view_threads: ViewThreads<B, N>,
    /// This method's replica in a data-parallel run: the loss sees every replica's outputs.
    replica: Option<Replica<B>>,
    backbone: std::marker::PhantomData<M>,
}

impl<B: Backend, M: Backbone<B>, L> ProjectedPair<B, M, L> {
    /// A method of the backbone `backbone` makes, the projector `projector` gives for the
    /// backbone's feature width, and `loss`.
    ///
    /// # Errors
    /// A zero width in the projector.
    pub fn build(
        backbone: impl Fn(&B::Device) -> M,
        projector: impl FnOnce(usize) -> MlpHeadConfig,
        loss: L,
        device: &B::Device,
    ) -> Result<Self, ConfigError> {
        let backbone = backbone(device);
        let projector = projector(backbone.feature_dim()).init(device)?;
        Ok(Self::new(backbone, projector, loss))
    }

    /// A method of `backbone`, `projector` and `loss`.
    pub fn new(backbone: M, projector: MlpHead<B>, loss: L) -> Self {
        Self::of_network(
            Projected {
                backbone,
                projector,
            },
            loss,
        )
    }
}

impl<B: Backend, M: Backbone<B>, L, N> ProjectedPair<B, M, L, N> {
    /// A method of the network `online` and `loss`.
    pub fn of_network(online: N, loss: L) -> Self {
        Self {
            online,
            loss,
            view_threads: ViewThreads::default(),
            replica: None,
            backbone: std::marker::PhantomData,
        }
    }

    /// The loss.
    pub fn objective(&self) -> &L {
        &self.loss
    }
}

impl<B, M, L, N> SslMethod<B> for ProjectedPair<B, M, L, N>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    L: PairObjective<B>,
    N: PairNetwork<B> + AutodiffModule<B> + Clone + HasBackbone<M> + 'static,
{
    type Online = N;
    type Backbone = M;
    // Nothing besides the trainable networks.
    stateless!();

    online_in!(online, view_threads);

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        let ([z1, z2], _) =
            self.view_threads
                .passes(&self.online, [view1, view2], true, |net, x, groups| {
                    (net.forward_grouped(x, groups), ())
                });
        let embeddings = [z1.clone(), z2.clone()];
        // Data-parallel: the statistics over the batch are those of the global batch.
        let replica = self.replica.as_ref();
        let (z1, z2) = (
            Replica::gather_on(replica, z1),
            Replica::gather_on(replica, z2),
        );
        let (loss, stats) = self.loss.loss(z1, z2, progress);
        MethodOutput {
            stats,
            ..MethodOutput::new(loss).with_embeddings(embeddings)
        }
    }

    replica_in!(
        /// The loss compares images across the batch: every replica computes it on the gathered
        /// outputs (the same value everywhere), and the gather's backward returns each replica
        /// `W` times its rows' gradient, which the average over replicas brings back to the
        /// one-device gradient (`docs/methods.md#on-several-replicas`).
        replica,
        view_threads
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::{BarlowTwinsLossConfig, VicRegLossConfig};
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};
    use crate::method::{BarlowTwinsConfig, VicRegConfig};

    /// Barlow Twins and VICReg train their objective on the two views' projections through one
    /// network (the loss of `online().forward` of each view, in that order), and VICReg logs its
    /// three terms as the step's statistics.
    #[test]
    fn the_objective_sees_both_views_projections_and_vicreg_logs_its_terms() {
        let device = Default::default();
        let (v1, v2) = (images::<Ad>(8, 0.0), images::<Ad>(8, 1.0));
        let mut barlow = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            BarlowTwinsConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap();
        let (z1, z2) = (
            barlow.online().forward(v1.clone()),
            barlow.online().forward(v2.clone()),
        );
        let expected = host(BarlowTwinsLossConfig::new().init().unwrap().forward(z1, z2))[0];
        let out = barlow.forward(v1.clone(), v2.clone(), progress(0, 10, 0, 1));
        assert!((host(out.loss)[0] - expected).abs() < 1e-12);

        let mut vicreg = crate::method::init_method::<Ad, _, ConfigError>(&device, 4, |d| {
            VicRegConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap();
        let (z1, z2) = (
            vicreg.online().forward(v1.clone()),
            vicreg.online().forward(v2.clone()),
        );
        let terms = VicRegLossConfig::new().init().unwrap().terms(z1, z2);
        let out = vicreg.forward(v1, v2, progress(0, 10, 0, 1));
        assert!((host(out.loss)[0] - host(terms.loss)[0]).abs() < 1e-12);
        let stats: Vec<(&str, f64)> = out
            .stats
            .into_iter()
            .map(|(n, v)| (n, host(v)[0]))
            .collect();
        let expected = [
            ("vicreg_invariance", host(terms.invariance)[0]),
            ("vicreg_variance", host(terms.variance)[0]),
            ("vicreg_covariance", host(terms.covariance)[0]),
        ];
        assert_eq!(stats.len(), 3);
        for ((name, value), (want_name, want)) in stats.iter().zip(expected) {
            assert_eq!(*name, want_name);
            assert!((value - want).abs() < 1e-12, "{name}");
        }
    }
}
