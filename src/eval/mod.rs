//! Evaluation of frozen representations.

pub mod knn;

pub use knn::{Accuracy, KnnClassifier, KnnConfig};
