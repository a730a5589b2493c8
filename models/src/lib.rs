//! Backbones for curriculum-ssl, generic over burn's [`Backend`](burn::tensor::backend::Backend).
//!
//! Every model exposes [`Backbone::forward_features`] (pooled features, no classifier) and
//! [`Backbone::feature_dim`]; classifier heads are separate modules.
#![warn(missing_docs)]

pub mod backbone;

pub use backbone::Backbone;
