//! Evaluation of frozen representations: features of a dataset, the weighted kNN monitor, and
//! the linear probe. All work on a backbone loaded from a checkpoint as well as during training
//! (see [`crate::train::load_backbone`]).
//!
//! - [`extract_features`]: frozen [`Features`] of a whole dataset, batch by batch, for the kNN
//!   monitor and the linear probe.
//! - [`KnnClassifier`] ([`KnnConfig`]): weighted k-nearest-neighbour classification of frozen
//!   features, scored as an [`Accuracy`].
//! - [`KnnMonitor`]: the kNN monitor run during training, at several `(k, T)` ([`KnnResult`]).
//! - [`LinearProbeConfig`]: the linear probe, a linear classifier trained on cached features
//!   ([`ProbeOptimizer`], [`ProbeResult`]).
//! - [`few_label_indices`]: the few-label protocol's class-balanced fraction of the labels.
//! - [`RawPixels`]: the baseline every learned representation has to beat, the normalised pixels
//!   themselves.

mod features;
mod few_labels;
mod knn;
mod linear_probe;
mod monitor;
mod raw_pixels;

pub use features::{extract_features, Features};
pub use few_labels::few_label_indices;
pub use knn::{Accuracy, KnnClassifier, KnnConfig};
pub use linear_probe::{LinearProbeConfig, ProbeOptimizer, ProbeResult};
pub use monitor::{KnnMonitor, KnnResult};
pub use raw_pixels::RawPixels;
