//! The library's error, over every more specific one.

use crate::base::error::ConfigError;

/// The library's error: every fallible public function returns `Result<_, Error>` or one of the
/// more specific errors it converts from.
///
/// Shapes that cannot be combined are programming errors inside a training step and panic with a
/// message naming both shapes (see [`crate::loss`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An impossible hyperparameter.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A dataset file or directory that cannot be used.
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    /// Clustering, selection or sampling of SPL-ADVisE that cannot be done on its input.
    #[error(transparent)]
    Selection(#[from] SplAdviseError),
}

/// What can go wrong in SPL-ADVisE's clustering, selection or sampling ([`crate::spl_advise`]): every variant names the input at
/// fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SplAdviseError {
    /// An impossible hyperparameter.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Two inputs that must describe the same examples have different lengths.
    #[error("`{what}` has {got} entries, expected {expected}")]
    Length {
        /// The input with the wrong length.
        what: &'static str,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        got: usize,
    },
    /// A loss or a coordinate that is NaN or infinite.
    #[error("`{what}[{index}]` is {value}, not a finite number")]
    NonFinite {
        /// The input holding the value.
        what: &'static str,
        /// Its position (an example, or a flat row-major offset for data).
        index: usize,
        /// The value.
        value: f64,
    },
    /// Row-major data whose length is not a multiple of the dimension.
    #[error("`data` has {len} values, not a multiple of the dimension {dim}")]
    Ragged {
        /// Values given.
        len: usize,
        /// Dimension of a point.
        dim: usize,
    },
    /// A negative loss given to a loss-weighted sampler.
    #[error("`losses[{index}]` is {value}; sampling weights must be >= 0")]
    NegativeLoss {
        /// Its position in the batch.
        index: usize,
        /// The value.
        value: f64,
    },
    /// Clustering was asked of no points.
    #[error("cannot cluster an empty set of points")]
    NoPoints,
    /// More clusters than points were asked of k-means.
    #[error("cannot make {clusters} clusters of {points} points")]
    TooFewPoints {
        /// Clusters asked for.
        clusters: usize,
        /// Points given.
        points: usize,
    },
    /// An example index or a cluster id beyond the end of what it indexes.
    #[error("`{what}` holds {index}, but there are only {len}")]
    OutOfRange {
        /// The input holding the index.
        what: &'static str,
        /// The index.
        index: usize,
        /// The number of valid indices.
        len: usize,
    },
    /// A cluster of a [`ClusterIndex`](crate::spl_advise::ClusterIndex) with no example.
    #[error("cluster {cluster} has no example")]
    EmptyCluster {
        /// The cluster id.
        cluster: usize,
    },
    /// A cluster of a [`ClusterIndex`](crate::spl_advise::ClusterIndex) holding examples of two classes.
    #[error("cluster {cluster} holds examples of classes {first} and {second}")]
    MixedCluster {
        /// The cluster id.
        cluster: usize,
        /// The class of its first example.
        first: usize,
        /// Another class found in it.
        second: usize,
    },
    /// A cluster with fewer clusters of other classes than a magnet batch needs.
    #[error(
        "cluster {cluster} (class {class}) has {available} clusters of other classes, but a \
         batch of {clusters_per_batch} clusters needs {}",
        clusters_per_batch - 1
    )]
    TooFewImpostors {
        /// The cluster id.
        cluster: usize,
        /// Its class.
        class: usize,
        /// Clusters of other classes in the index.
        available: usize,
        /// `M`, the clusters of one batch.
        clusters_per_batch: usize,
    },
}
