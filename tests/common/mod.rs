//! Helpers shared by the integration tests: f64 backends and seeded random inputs.
#![allow(dead_code)]

use burn::backend::{Autodiff, NdArray};
use burn::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Exact backend for value checks.
pub type Exact = NdArray<f64>;
/// Exact backend with autodiff for gradient checks.
pub type ExactAd = Autodiff<NdArray<f64>>;

/// `rows × cols` values uniform in [-1, 1) from a seeded generator.
pub fn random_values(rows: usize, cols: usize, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows * cols)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect()
}

/// A `[rows, cols]` tensor of the given values.
pub fn tensor<B: Backend>(values: &[f64], rows: usize, cols: usize) -> Tensor<B, 2> {
    Tensor::from_data(
        TensorData::new(values.to_vec(), [rows, cols]),
        &Default::default(),
    )
}

/// Rows normalised to unit length.
pub fn unit_rows(values: &[f64], cols: usize) -> Vec<f64> {
    values
        .chunks(cols)
        .flat_map(|row| {
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            row.iter().map(move |x| x / norm).collect::<Vec<_>>()
        })
        .collect()
}

/// Scalar value of a one-element tensor.
pub fn value<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().elem::<f64>()
}
