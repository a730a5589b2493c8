//! Solarisation: pixels at or above a threshold are inverted (`x >= t → 1 − x`), as
//! torchvision's `solarize` on float images.

use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::sampling::{bernoulli, per_sample_mask, probability, select_where};
use crate::base::error::ConfigError;

/// Inverts the pixels `>= threshold`.
pub fn solarize<B: Backend>(x: Tensor<B, 4>, threshold: f64) -> Tensor<B, 4> {
    let mask = x.clone().greater_equal_elem(threshold);
    let inverted = x.clone().neg().add_scalar(1.0);
    x.mask_where(mask, inverted)
}

/// Random solarisation with probability `p` per sample (BYOL: threshold 0.5, p 0 / 0.2 for the
/// two views).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RandomSolarize {
    /// Threshold in `[0, 1]`.
    pub threshold: f64,
    /// Probability per sample.
    pub p: f64,
}

impl RandomSolarize {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::base::error::in_range("solarize.threshold", self.threshold, 0.0, 1.0, false)?;
        probability("solarize.p", self.p)
    }

    /// Draws which of `n` samples are solarised.
    pub fn sample(&self, rng: &mut StdRng, n: usize) -> Vec<bool> {
        bernoulli(rng, self.p, n)
    }

    /// Applies drawn flags.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, flags: &[bool]) -> Tensor<B, 4> {
        if !flags.iter().any(|&f| f) {
            return x;
        }
        let mask = per_sample_mask::<B>(flags, &x.device());
        select_where(mask, solarize(x.clone(), self.threshold), x)
    }
}
