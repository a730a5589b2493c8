//! Per-channel normalisation `(x − mean) / std`.

use burn::tensor::{backend::Backend, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::base::error::ConfigError;

/// ImageNet channel means (RGB).
pub const IMAGENET_MEAN: [f64; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations (RGB).
pub const IMAGENET_STD: [f64; 3] = [0.229, 0.224, 0.225];
/// CIFAR-10 channel means (RGB).
pub const CIFAR10_MEAN: [f64; 3] = [0.4914, 0.4822, 0.4465];
/// CIFAR-10 channel standard deviations (RGB).
pub const CIFAR10_STD: [f64; 3] = [0.2470, 0.2435, 0.2616];
/// Fashion-MNIST mean (one channel).
pub const FASHION_MNIST_MEAN: [f64; 1] = [0.2860];
/// Fashion-MNIST standard deviation (one channel).
pub const FASHION_MNIST_STD: [f64; 1] = [0.3530];

/// `(x − mean[c]) / std[c]` for each channel `c`.
///
/// # Panics
/// If `mean` / `std` do not have one entry per channel ([`Normalize::validate_for`] checks it).
pub fn normalize<B: Backend>(x: Tensor<B, 4>, mean: &[f64], std: &[f64]) -> Tensor<B, 4> {
    let c = x.dims()[1];
    assert!(
        mean.len() == c && std.len() == c,
        "one mean and std per channel"
    );
    let n = x.dims()[0];
    let device = x.device();
    // One value per (image, channel), `[n, c, 1, 1]`, rather than `[1, c, 1, 1]`: burn's CPU
    // backend broadcasts the former over `h·w` with a vectorised loop and the latter element by
    // element (see `BatchNorm2d` in the models crate). Same values, same operations.
    let per_image = |v: &[f64]| {
        let values: Vec<f32> = (0..n).flat_map(|_| v.iter().map(|&v| v as f32)).collect();
        Tensor::<B, 4>::from_data(TensorData::new(values, [n, c, 1, 1]), &device)
    };
    x.sub(per_image(mean)).div(per_image(std))
}

/// Normalisation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalize {
    /// Channel means.
    pub mean: Vec<f64>,
    /// Channel standard deviations (> 0).
    pub std: Vec<f64>,
}

impl Normalize {
    /// Settings from arrays.
    pub fn new(mean: &[f64], std: &[f64]) -> Self {
        Self {
            mean: mean.to_vec(),
            std: std.to_vec(),
        }
    }

    /// Checks the settings for images with `channels` channels.
    pub fn validate_for(&self, channels: usize) -> Result<(), ConfigError> {
        if self.mean.len() != channels || self.std.len() != channels {
            return Err(ConfigError::new(
                "normalize",
                format!(
                    "needs {channels} means and stds, got {} and {}",
                    self.mean.len(),
                    self.std.len()
                ),
            ));
        }
        for &s in &self.std {
            crate::base::error::positive("normalize.std", s)?;
        }
        for &m in &self.mean {
            if !m.is_finite() {
                return Err(ConfigError::new(
                    "normalize.mean",
                    format!("must be finite, got {m}"),
                ));
            }
        }
        Ok(())
    }

    /// Applies the normalisation.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        normalize(x, &self.mean, &self.std)
    }

    /// Undoes the normalisation: `x·std[c] + mean[c]` (back to pixel values).
    ///
    /// # Panics
    /// If `x` does not have one channel per mean.
    pub fn invert<B: Backend>(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let inverse = Normalize {
            mean: self
                .mean
                .iter()
                .zip(&self.std)
                .map(|(m, s)| -m / s)
                .collect(),
            std: self.std.iter().map(|s| 1.0 / s).collect(),
        };
        inverse.apply(x)
    }
}
