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

    /// The features of `groups` equal batches stacked along the first axis (a method's views
    /// of one batch), as [`Backbone::forward_features`] gives each batch on its own: a network
    /// whose batch norms see one batch at a time (every CNN of this crate) normalises each
    /// group with its own moments. The default runs the groups one after the other; the
    /// ResNets override it with one pass whose batch norms take the groups apart
    /// ([`crate::layers::BatchNorm2d::forward_grouped`]): the same numbers up to rounding, with
    /// half the kernel launches for two views on a GPU, and one gradient per parameter instead
    /// of two to add.
    ///
    /// # Shapes
    /// - input: `[groups · batch, channels, height, width]`
    /// - output: `[groups · batch, feature_dim]`
    ///
    /// # Panics
    /// If `groups` is 0 or does not divide the batch.
    fn forward_features_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        let n = images.dims()[0];
        assert!(
            groups > 0 && n.is_multiple_of(groups),
            "a batch of {n} is not {groups} equal groups"
        );
        if groups == 1 {
            return self.forward_features(images);
        }
        Tensor::cat(
            images
                .chunk(groups, 0)
                .into_iter()
                .map(|group| self.forward_features(group))
                .collect(),
            0,
        )
    }

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
