//! Helpers shared by the integration tests.
#![allow(dead_code)]

use burn::module::{AutodiffModule, ModuleMapper, Param};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// Inference backend (no autodiff: batch norm uses running statistics).
pub type Infer = burn::backend::Flex;
/// Training backend (autodiff: batch norm uses batch statistics and updates running averages).
pub type Train = burn::backend::Autodiff<burn::backend::Flex>;

/// Exact-gradient backend of the kernels' operation tests (`contrastive`, `cosine`).
pub type Exact = burn::backend::Autodiff<burn::backend::ndarray::NdArray<f64>>;

/// A `[rows, cols]` f64 matrix of `v` on [`Exact`].
pub fn f64s(v: &[f64], dims: [usize; 2]) -> Tensor<Exact, 2> {
    Tensor::from_data(
        burn::tensor::TensorData::new(v.to_vec(), dims),
        (&Default::default(), burn::tensor::DType::F64),
    )
}

/// A tensor's values as f64s (of an f64 tensor).
pub fn values<K: Backend, const D: usize>(t: Tensor<K, D>) -> Vec<f64> {
    t.into_data().to_vec().unwrap()
}

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

/// `module` with every trainable parameter a new leaf over the same values (`detach` then
/// `require_grad`; the parameter ids are kept). A test that runs a second forward and backward
/// pass through parameters a backward pass already consumed goes through such a copy:
/// burn-autodiff 0.21 drops a leaf's graph entry when a backward pass consumes it, and an
/// operation on that leaf afterwards can be swept by a `backward()` on another thread (another
/// test of the binary) before its step is registered, losing the gradient (tracel-ai/burn#5573;
/// measured here: 81 of 300 such second passes lost the stem's weight gradient beside three
/// threads looping on `backward()`, none through fresh leaves). The same mapper as the root
/// crate's `method::fresh_leaves`, which this crate's tests cannot depend on.
pub fn fresh_leaves<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) -> M {
    struct FreshLeaves;
    impl<B: AutodiffBackend> ModuleMapper<B> for FreshLeaves {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.map(|t| {
                if t.is_require_grad() {
                    t.detach().require_grad()
                } else {
                    t
                }
            })
        }
    }
    module.clone().map(&mut FreshLeaves)
}
