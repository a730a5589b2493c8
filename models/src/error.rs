//! Errors of the models crate.

use thiserror::Error;

/// What can go wrong when building a backbone, checking its input or importing weights.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The image batch does not have the channel count the backbone was built for.
    #[error("{model}: expected {expected} input channels, got {got} (input shape {shape:?})")]
    ChannelMismatch {
        /// Name of the backbone.
        model: &'static str,
        /// Channels the backbone was configured with.
        expected: usize,
        /// Channels of the input.
        got: usize,
        /// Full input shape `[batch, channels, height, width]`.
        shape: [usize; 4],
    },
    /// The images are smaller than the smallest size the network's down-sampling can handle.
    #[error(
        "{model}: images of {height}x{width} are too small, the network needs at least {min}x{min}"
    )]
    ImageTooSmall {
        /// Name of the backbone.
        model: &'static str,
        /// Input height.
        height: usize,
        /// Input width.
        width: usize,
        /// Smallest accepted side.
        min: usize,
    },
    /// The images are too small for the grid the features are pooled to: the last map has
    /// fewer cells than the grid, which would repeat features instead of pooling them.
    #[error(
        "{model}: images of {height}x{width} leave a last map of {map_height}x{map_width}, \
         smaller than the pooled grid of {grid}x{grid} (use a smaller pooled grid)"
    )]
    MapSmallerThanGrid {
        /// Name of the backbone.
        model: &'static str,
        /// Input height.
        height: usize,
        /// Input width.
        width: usize,
        /// Height of the last map.
        map_height: usize,
        /// Width of the last map.
        map_width: usize,
        /// Side of the pooled grid.
        grid: usize,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The weight file could not be opened or parsed.
    #[error("cannot read weights from {path}: {message}")]
    WeightFile {
        /// The file.
        path: String,
        /// What the reader said.
        message: String,
    },
    /// The weight file could not be written.
    #[error("cannot write weights to {path}: {message}")]
    WeightWrite {
        /// The file.
        path: String,
        /// What the writer said.
        message: String,
    },
    /// The state_dict lacks tensors the model needs.
    #[error("state_dict {path} is missing {} tensor(s) the model needs: {}", missing.len(), missing.join(", "))]
    MissingKeys {
        /// The file.
        path: String,
        /// Model paths (after key renaming) that were not found.
        missing: Vec<String>,
    },
    /// A tensor of the state_dict has the wrong shape (or dtype) for the model.
    #[error("state_dict {path}: {message}")]
    WrongTensor {
        /// The file.
        path: String,
        /// Which tensor and how it differs.
        message: String,
    },
}
