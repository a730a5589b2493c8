//! Mixup of the two views of a positive pair (MICO §3.5): `mixed = λ·x1 + (1 − λ)·x2`.
//!
//! λ is the share of the first view in the mixed one: λ = 1 gives `x1` itself (the easiest
//! positive pair), λ = 0 gives `x2` (the usual two-view pair). MICO's curriculum schedules λ
//! (4-step 0.2, 0.4, 0.6, 0.8); plain Mixup uses λ = 0.5. λ can also be drawn per sample from
//! Beta(α, α) (MICO Algorithm 1), with α the scheduled quantity.

use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::sampling::per_sample;
use crate::base::error::{positive, ConfigError};

/// `λ·x1 + (1 − λ)·x2` with one λ for the batch.
pub fn mixup<B: Backend>(x1: Tensor<B, 4>, x2: Tensor<B, 4>, lambda: f64) -> Tensor<B, 4> {
    x1.mul_scalar(lambda).add(x2.mul_scalar(1.0 - lambda))
}

/// `λ_n·x1 + (1 − λ_n)·x2` with one λ per sample.
pub fn mixup_per_sample<B: Backend>(
    x1: Tensor<B, 4>,
    x2: Tensor<B, 4>,
    lambdas: &[f32],
) -> Tensor<B, 4> {
    let device = x1.device();
    let l = per_sample::<B>(lambdas, &device);
    let one_minus = l.clone().neg().add_scalar(1.0);
    x1.mul(l).add(x2.mul(one_minus))
}

/// Where λ comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum MixupLambda {
    /// The same λ (share of the first view, in `[0, 1]`) for every sample.
    Fixed(f64),
    /// λ ~ Beta(α, α) per sample (`α > 0`).
    Beta {
        /// The concentration α.
        alpha: f64,
    },
}

/// Mixup of two views.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mixup {
    /// How λ is chosen.
    pub lambda: MixupLambda,
}

fn standard_normal(rng: &mut StdRng) -> f64 {
    // Box–Muller.
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Gamma(shape, 1) by Marsaglia and Tsang (with the `U^(1/a)` boost for `shape < 1`).
fn gamma(rng: &mut StdRng, shape: f64) -> f64 {
    if shape < 1.0 {
        let u: f64 = 1.0 - rng.random::<f64>();
        return gamma(rng, shape + 1.0) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let z = standard_normal(rng);
        let v = 1.0 + c * z;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u: f64 = 1.0 - rng.random::<f64>();
        if u.ln() < 0.5 * z * z + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// Draws from Beta(a, b).
pub fn sample_beta(rng: &mut StdRng, a: f64, b: f64) -> f64 {
    let x = gamma(rng, a);
    let y = gamma(rng, b);
    if x + y > 0.0 {
        x / (x + y)
    } else {
        0.5
    }
}

impl Mixup {
    /// Checks the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.lambda {
            MixupLambda::Fixed(l) => {
                crate::base::error::in_range("mixup.lambda", l, 0.0, 1.0, false)
            }
            MixupLambda::Beta { alpha } => positive("mixup.alpha", alpha),
        }
    }

    /// Draws `n` values of λ.
    pub fn sample(&self, rng: &mut StdRng, n: usize) -> Vec<f32> {
        match self.lambda {
            MixupLambda::Fixed(l) => vec![l as f32; n],
            MixupLambda::Beta { alpha } => (0..n)
                .map(|_| sample_beta(rng, alpha, alpha) as f32)
                .collect(),
        }
    }

    /// Mixes the views with drawn λs.
    pub fn apply<B: Backend>(
        &self,
        x1: Tensor<B, 4>,
        x2: Tensor<B, 4>,
        lambdas: &[f32],
    ) -> Tensor<B, 4> {
        mixup_per_sample(x1, x2, lambdas)
    }
}
