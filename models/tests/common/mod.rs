//! Helpers shared by the integration tests.
#![allow(dead_code)]

use burn::prelude::*;

/// Inference backend (no autodiff: batch norm uses running statistics).
pub type Infer = burn::backend::Flex;
/// Training backend (autodiff: batch norm uses batch statistics and updates running averages).
pub type Train = burn::backend::Autodiff<burn::backend::Flex>;

/// Largest absolute difference between two tensors of the same shape.
pub fn max_abs_diff<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f32 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    a.sub(b).abs().max().into_scalar().elem::<f32>()
}

/// Path of a fixture file of the repository's `tests/fixtures`.
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}
