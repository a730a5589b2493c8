//! The [`Backbone`] trait: what every feature extractor offers to the SSL frameworks.

use burn::module::ModuleDisplay;
use burn::prelude::*;

/// A network that turns a batch of images into one pooled feature vector per image.
///
/// Every model of this crate implements it, and so can a user's own network: the frameworks of
/// `curriculum-ssl` only need these two methods. The classifier head, when there is one, is kept
/// separate so that the same backbone serves pretraining, kNN monitoring and linear probing.
/// (`#[derive(Module)]` provides `ModuleDisplay`.)
pub trait Backbone<B: Backend>: Module<B> + ModuleDisplay {
    /// Pooled features, without any classifier.
    ///
    /// # Shapes
    /// - input: `[batch, channels, height, width]`
    /// - output: `[batch, feature_dim]`
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2>;

    /// Length of the vectors returned by [`Backbone::forward_features`].
    fn feature_dim(&self) -> usize;
}
