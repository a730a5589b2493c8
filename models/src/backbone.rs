//! The [`Backbone`] trait: what every feature extractor offers to the SSL frameworks.

use burn::module::{AutodiffModule, ModuleDisplay};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// A network that turns a batch of images into one pooled feature vector per image.
///
/// Every model of this crate implements it, and so can a user's own network: the frameworks of
/// `curriculum-ssl` only need [`Backbone::forward_features`] and [`Backbone::feature_dim`];
/// [`Backbone::forward_feature_map`] is optional (crop-and-rotate's heat maps need it). The classifier head, when there is one, is kept
/// separate so that the same backbone serves pretraining, kNN monitoring and linear probing.
/// (`#[derive(Module)]` provides `ModuleDisplay`.)
pub trait Backbone<B: Backend>: Module<B> + ModuleDisplay + 'static {
    /// Pooled features, without any classifier.
    ///
    /// # Shapes
    /// - input: `[batch, channels, height, width]`
    /// - output: `[batch, feature_dim]`
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2>;

    /// Length of the vectors returned by [`Backbone::forward_features`].
    fn feature_dim(&self) -> usize;

    /// The last spatial feature map, before the pooling that [`Backbone::forward_features`]
    /// applies: what heat maps of the object are computed from (MICO's crop-and-rotate, after
    /// ContrastiveCrop, takes its channel mean).
    ///
    /// Every model of this crate returns one, and its `forward_features` pools that very map, so
    /// the two cannot disagree. The default is `None`: a user's backbone that does not override
    /// it still trains every method, but cannot run crop-and-rotate (the trainer says so before
    /// the first step).
    ///
    /// # Shapes
    /// - input: `[batch, channels, height, width]`
    /// - output: `[batch, map_channels, map_height, map_width]`
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        let _ = images;
        None
    }
}

/// A backbone that trains: a [`Backbone`] of an autodiff backend whose inference copy
/// ([`AutodiffModule::valid`]) is a backbone of the inner backend, which evaluation (kNN
/// monitoring, linear probes) and export use during and after training. Implemented for every
/// such module; `M: TrainableBackbone<B>` stands for the three bounds.
pub trait TrainableBackbone<B: AutodiffBackend>:
    Backbone<B> + AutodiffModule<B, InnerModule: Backbone<B::InnerBackend>>
{
}

impl<B, M> TrainableBackbone<B> for M
where
    B: AutodiffBackend,
    M: Backbone<B> + AutodiffModule<B, InnerModule: Backbone<B::InnerBackend>>,
{
}
