//! The shape shared by the methods whose whole idea is their loss on two views' projections
//! (Barlow Twins, VICReg): backbone + MLP projector, the loss between the two views'
//! projections, no predictor, no momentum network, no queue. The papers' own pieces live in
//! [`super::barlow_twins`] and [`super::vicreg`] (their projectors and defaults) and in
//! `loss/` (their losses).

use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewThreads;
use super::encoder::Projected;
use super::ssl_method::{MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHead;

/// A loss on two views' projections that compares images across the batch (a
/// cross-correlation, a variance): what [`ProjectedPair`] trains with.
pub trait PairObjective<B: Backend>: Clone + std::fmt::Debug + 'static {
    /// The loss and named statistics (each `[1]`, detached) of the two views' projections.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[N, D]` → loss `[1]`
    fn loss(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
    ) -> (Tensor<B, 1>, Vec<(&'static str, Tensor<B, 1>)>);
}

/// A method made of a backbone, a projector and a [`PairObjective`] (Barlow Twins, VICReg).
/// Build one with [`super::BarlowTwinsConfig::init`] or [`super::VicRegConfig::init`].
#[derive(Debug, Clone)]
pub struct ProjectedPair<B: Backend, M: Backbone<B>, L> {
    online: Projected<B, M>,
    loss: L,
    /// The two views' passes back-propagated on two threads, when on.
    view_threads: ViewThreads<B, Projected<B, M>>,
    /// This method's replica in a data-parallel run: the loss sees every replica's projections.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>, L> ProjectedPair<B, M, L> {
    /// A method of `backbone`, `projector` and `loss`.
    pub fn new(backbone: M, projector: MlpHead<B>, loss: L) -> Self {
        Self {
            online: Projected {
                backbone,
                projector,
            },
            loss,
            view_threads: ViewThreads::default(),
            replica: None,
        }
    }

    /// The loss.
    pub fn objective(&self) -> &L {
        &self.loss
    }
}

impl<B, M, L> SslMethod<B> for ProjectedPair<B, M, L>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    L: PairObjective<B>,
{
    type Online = Projected<B, M>;
    type Backbone = M;
    /// Nothing besides the trainable networks.
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
        let [view1, view2] = views.two();
        let ([z1, z2], _) =
            self.view_threads
                .passes(&self.online, [view1, view2], true, |net, x| {
                    (net.forward(x), ())
                });
        let embeddings = Some([z1.clone().detach(), z2.clone().detach()]);
        // Data-parallel: the statistics over the batch are those of the global batch.
        let (z1, z2) = match &self.replica {
            Some(replica) => (replica.gather(z1), replica.gather(z2)),
            None => (z1, z2),
        };
        let (loss, stats) = self.loss.loss(z1, z2);
        MethodOutput {
            loss,
            stats,
            embeddings,
        }
    }

    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        self.view_threads.gradients(loss, &self.online)
    }

    fn set_view_threads(&mut self, on: bool) {
        self.view_threads.set(on);
    }

    /// The loss compares images across the batch: every replica computes it on the gathered
    /// projections (the same value everywhere), and the gather's backward returns each replica
    /// `W` times its rows' gradient, which the average over replicas brings back to the
    /// one-device gradient (`docs/methods.md#on-several-replicas`).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.view_threads.replicated();
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, _: Progress) {}
}
