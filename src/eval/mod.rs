//! Evaluation of frozen representations: features of a dataset, the weighted kNN monitor, and
//! the linear probe. All work on a backbone loaded from a checkpoint as well as during training
//! (see [`crate::train::load_backbone`]).

pub mod features;
pub mod few_labels;
pub mod knn;
pub mod linear_probe;
pub mod monitor;
pub mod raw_pixels;

pub use features::{extract_features, Features};
pub use few_labels::few_label_indices;
pub use knn::{Accuracy, KnnClassifier, KnnConfig};
pub use linear_probe::{LinearProbeConfig, ProbeOptimizer, ProbeResult};
pub use monitor::{KnnMonitor, KnnResult};
pub use raw_pixels::RawPixels;
