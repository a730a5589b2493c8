//! The GPU backends' steps of the routes in `dispatch.rs`, as plain functions of type-erased
//! values: compiled once, here, instead of in every crate that calls a route.
//!
//! Why: Rust compiles a generic function in the crate that instantiates it. A route step written
//! as `route.on::<Autodiff<Wgpu>>(relu_op)` names the GPU backend's tensor types inside the
//! generic [`relu`](super::relu) and [`batch_norm_train`](super::batch_norm_train), so every test
//! binary, example and CPU `recipe` binary that trains on `Flex` also compiled wgpu's whole stack
//! (burn's fusion, cubecl's kernel builders, its matmul) whenever this crate's `wgpu` feature was
//! on, as it is in the workspace's test build: 30 % of the LLVM IR of the CPU-only integration
//! test binary (`cargo llvm-lines`, 2026-12-01). Behind `fn(Box<dyn Any>)` the caller compiles a
//! type comparison and a box; the steps below are instantiated for their backend in this crate
//! only. Not in this crate's own unit tests, which run on the CPU backends only: there the routes
//! end in burn's operations for a GPU backend, and the wgpu stack is not compiled a second time
//! (the GPU-path tests, `tests/gpu_path` of the root crate, run these steps).

use std::any::Any;

use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::Autodiff;
use burn::prelude::*;

use super::batch_norm_op::{batch_norm_train_op_with, BatchNormKernels};
use super::log_softmax_cube::LogSoftmaxKernels;

/// A route's input or output with its type erased: a tensor, or a tuple of them.
pub(crate) type Erased = Box<dyn Any>;

/// A float tensor under autodiff (no checkpointing) on the inner backend `I`.
type Ad<I, const D: usize> = Tensor<Autodiff<I, NoCheckpointing>, D>;

/// [`relu_op`](super::relu_op::relu_op) on a tensor of rank 1 to 5 on `Autodiff<I>`: `Ok` with
/// the output, `Err` with the input when it is none of these.
fn relu<I: Backend>(x: Erased) -> Result<Erased, Erased> {
    fn rank<I: Backend, const D: usize>(x: Erased) -> Result<Erased, Erased> {
        x.downcast::<Ad<I, D>>()
            .map(|x| Box::new(super::relu_op::relu_op(*x)) as Erased)
    }
    rank::<I, 1>(x)
        .or_else(rank::<I, 2>)
        .or_else(rank::<I, 3>)
        .or_else(rank::<I, 4>)
        .or_else(rank::<I, 5>)
}

/// [`batch_norm_train_op`](super::batch_norm_op::batch_norm_train_op) on `(x, γ, β)` on
/// `Autodiff<I>`: `Ok` with its [`TrainingBatchNorm`](super::batch_norm_op::TrainingBatchNorm),
/// `Err` with the input when it is not such a triple.
fn batch_norm_train<I: Backend, K: BatchNormKernels<I>>(
    input: Erased,
    epsilon: f64,
    groups: usize,
) -> Result<Erased, Erased> {
    input
        .downcast::<(Ad<I, 4>, Ad<I, 1>, Ad<I, 1>)>()
        .map(|input| {
            let (x, gamma, beta) = *input;
            Box::new(batch_norm_train_op_with::<I, NoCheckpointing, K>(
                x, gamma, beta, epsilon, groups,
            )) as Erased
        })
}

/// [`LogSoftmaxKernels::log_softmax_last`] on a tensor of rank 1 to 5 on `Autodiff<I>` when the
/// call is along the last axis (`last`): `Ok` with the output, `Err` with the input otherwise.
fn log_softmax<I: LogSoftmaxKernels>(x: Erased, last: bool) -> Result<Erased, Erased> {
    fn rank<I: LogSoftmaxKernels, const D: usize>(x: Erased) -> Result<Erased, Erased> {
        x.downcast::<Ad<I, D>>()
            .map(|x| Box::new(I::log_softmax_last(*x)) as Erased)
    }
    if !last {
        return Err(x);
    }
    rank::<I, 1>(x)
        .or_else(rank::<I, 2>)
        .or_else(rank::<I, 3>)
        .or_else(rank::<I, 4>)
        .or_else(rank::<I, 5>)
}

/// The steps on `Autodiff<Wgpu>` (the `wgpu` feature).
#[cfg(feature = "wgpu")]
pub(crate) mod wgpu {
    use super::super::batch_norm_cube::CubeKernels;
    use super::Erased;

    /// [`relu`](super::relu) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn relu(x: Erased) -> Result<Erased, Erased> {
        super::relu::<burn::backend::Wgpu>(x)
    }

    /// [`batch_norm_train`](super::batch_norm_train) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn batch_norm_train(
        input: Erased,
        epsilon: f64,
        groups: usize,
    ) -> Result<Erased, Erased> {
        super::batch_norm_train::<burn::backend::Wgpu, CubeKernels>(input, epsilon, groups)
    }

    /// [`log_softmax`](super::log_softmax) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn log_softmax(x: Erased, last: bool) -> Result<Erased, Erased> {
        super::log_softmax::<burn::backend::Wgpu>(x, last)
    }
}

/// The steps on `Autodiff<Cuda>` (the `cuda` feature).
#[cfg(feature = "cuda")]
pub(crate) mod cuda {
    use super::super::batch_norm_cube::CubeKernels;
    use super::Erased;

    /// [`relu`](super::relu) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn relu(x: Erased) -> Result<Erased, Erased> {
        super::relu::<burn::backend::Cuda>(x)
    }

    /// [`batch_norm_train`](super::batch_norm_train) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn batch_norm_train(
        input: Erased,
        epsilon: f64,
        groups: usize,
    ) -> Result<Erased, Erased> {
        super::batch_norm_train::<burn::backend::Cuda, CubeKernels>(input, epsilon, groups)
    }

    /// [`log_softmax`](super::log_softmax) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn log_softmax(x: Erased, last: bool) -> Result<Erased, Erased> {
        super::log_softmax::<burn::backend::Cuda>(x, last)
    }
}
