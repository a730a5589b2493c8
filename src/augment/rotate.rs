//! Rotation by multiples of 90° (RotNet, and the rotation curriculum of MICO §3.2), per sample.
//!
//! `k` quarter turns are counter-clockwise, as `torch.rot90(x, k, dims=(2, 3))` and
//! torchvision's `rotate(x, 90·k)`. Rotations are exact (index permutations).

use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::sampling::per_sample_mask;
use crate::base::error::ConfigError;

/// Rotates every image by `k` quarter turns counter-clockwise (`k` taken mod 4). Odd `k` swaps
/// height and width.
pub fn rot90<B: Backend>(x: Tensor<B, 4>, k: usize) -> Tensor<B, 4> {
    match k % 4 {
        0 => x,
        1 => x.flip([3]).swap_dims(2, 3),
        2 => x.flip([2, 3]),
        _ => x.swap_dims(2, 3).flip([3]),
    }
}

/// Rotates sample `n` by `ks[n]` quarter turns counter-clockwise.
///
/// # Panics
/// If the images are not square and some `k` is odd (the batch would not have one shape).
pub fn rotate_k<B: Backend>(x: Tensor<B, 4>, ks: &[usize]) -> Tensor<B, 4> {
    let [_, _, h, w] = x.dims();
    assert!(
        h == w || ks.iter().all(|k| k % 2 == 0),
        "quarter turns of non-square {h}x{w} images"
    );
    let device = x.device();
    let mut out: Option<Tensor<B, 4>> = None;
    for r in 0..4 {
        let flags: Vec<bool> = ks.iter().map(|k| k % 4 == r).collect();
        if !flags.iter().any(|&f| f) {
            continue;
        }
        let term = rot90(x.clone(), r).mul(per_sample_mask::<B>(&flags, &device));
        out = Some(match out {
            Some(o) => o.add(term),
            None => term,
        });
    }
    out.unwrap_or(x)
}

/// Random rotation by `k` quarter turns, `k` uniform in `0..=max_quarter_turns` (0: off; 3: all
/// four rotations, as RotNet). A curriculum raises `max_quarter_turns` 0 → 1 → 2 → 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RandomRotation90 {
    /// Largest number of quarter turns (0 to 3).
    pub max_quarter_turns: usize,
}

impl RandomRotation90 {
    /// Checks the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_quarter_turns > 3 {
            return Err(ConfigError::new(
                "rotation.max_quarter_turns",
                format!("must be 0 to 3, got {}", self.max_quarter_turns),
            ));
        }
        Ok(())
    }

    /// Draws `n` rotations (also the RotNet labels).
    pub fn sample(&self, rng: &mut StdRng, n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| rng.random_range(0..=self.max_quarter_turns))
            .collect()
    }

    /// Applies drawn rotations.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, ks: &[usize]) -> Tensor<B, 4> {
        rotate_k(x, ks)
    }
}
