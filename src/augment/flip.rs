//! Horizontal flip, per sample.

use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::sampling::{bernoulli, per_sample_mask, probability, select_where};
use crate::base::error::ConfigError;

/// Mirrors every image left–right.
pub fn hflip<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    x.flip([3])
}

/// Mirrors the samples whose flag is set (exact selection with a mask).
pub fn hflip_where<B: Backend>(x: Tensor<B, 4>, flags: &[bool]) -> Tensor<B, 4> {
    if !flags.iter().any(|&f| f) {
        return x;
    }
    let mask = per_sample_mask::<B>(flags, &x.device());
    select_where(mask, hflip(x.clone()), x)
}

/// Random horizontal flip with probability `p` per sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RandomHorizontalFlip {
    /// Probability per sample (torchvision: 0.5).
    pub p: f64,
}

impl RandomHorizontalFlip {
    /// Checks the probability.
    pub fn validate(&self) -> Result<(), ConfigError> {
        probability("hflip.p", self.p)
    }

    /// Draws which of `n` samples are flipped.
    pub fn sample(&self, rng: &mut StdRng, n: usize) -> Vec<bool> {
        bernoulli(rng, self.p, n)
    }

    /// Applies drawn flags.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, flags: &[bool]) -> Tensor<B, 4> {
        hflip_where(x, flags)
    }
}
