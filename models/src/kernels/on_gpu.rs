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

use burn::tensor::backend::AutodiffBackend;

use super::batch_norm_op::{batch_norm_train_op_with, BatchNormKernels, RunningAverages};
use super::log_softmax_cube::LogSoftmaxKernels;
use super::moving_average_cube::MovingAverageKernel;
use super::sgd_cube::SgdKernel;
use super::Primitive;
use super::SgdSettings;

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

/// [`mean_cosine_op`](super::cosine_op::mean_cosine_op) on `(p, z)` on `Autodiff<I>`: `Ok` with
/// the output, `Err` with the input when it is no such pair.
fn mean_cosine<I: Backend>(input: Erased, epsilon: f64) -> Result<Erased, Erased> {
    input.downcast::<(Ad<I, 2>, Ad<I, 2>)>().map(|input| {
        let (p, z) = *input;
        Box::new(super::cosine_op::mean_cosine_op(p, z, epsilon)) as Erased
    })
}

/// [`global_avg_pool_op`](super::pool_op::global_avg_pool_op) on `x` on `Autodiff<I>`: `Ok`
/// with the output, `Err` with the input when it is no such tensor.
fn global_avg_pool<I: Backend>(x: Erased) -> Result<Erased, Erased> {
    x.downcast::<Ad<I, 4>>()
        .map(|x| Box::new(super::pool_op::global_avg_pool_op(*x)) as Erased)
}

/// [`nt_xent_op`](super::contrastive_op::nt_xent_op) on `z` on `Autodiff<I>`: `Ok` with the
/// output, `Err` with the input when it is no such tensor.
fn nt_xent<I: Backend>(z: Erased, temperature: f64, epsilon: f64) -> Result<Erased, Erased> {
    z.downcast::<Ad<I, 2>>()
        .map(|z| Box::new(super::contrastive_op::nt_xent_op(*z, temperature, epsilon)) as Erased)
}

/// [`info_nce_op`](super::contrastive_op::info_nce_op) on `(q, k, queue)` on `Autodiff<I>`:
/// `Ok` with the output, `Err` with the input when it is no such triple.
fn info_nce<I: Backend>(input: Erased, temperature: f64, epsilon: f64) -> Result<Erased, Erased> {
    input
        .downcast::<(Ad<I, 2>, Ad<I, 2>, Ad<I, 2>)>()
        .map(|input| {
            let (q, k, queue) = *input;
            Box::new(super::contrastive_op::info_nce_op(
                q,
                k,
                queue,
                temperature,
                epsilon,
            )) as Erased
        })
}

/// [`batch_norm_train_op`](super::batch_norm_op::batch_norm_train_op) on `((x, γ, β, running
/// averages), relu)` on `Autodiff<I>`, followed inside the operation by a ReLU when `relu` is
/// `Some(residual)` (and the residual added before it when given): `Ok` with its
/// [`TrainingBatchNorm`](super::batch_norm_op::TrainingBatchNorm), `Err` with the input when it
/// is not such a pair.
fn batch_norm_train<I: Backend, K: BatchNormKernels<I>>(
    input: Erased,
    epsilon: f64,
    groups: usize,
) -> Result<Erased, Erased> {
    type Input<I> = (
        (
            Ad<I, 4>,
            Ad<I, 1>,
            Ad<I, 1>,
            RunningAverages<Autodiff<I, NoCheckpointing>>,
        ),
        Option<Option<Ad<I, 4>>>,
    );
    input.downcast::<Input<I>>().map(|input| {
        let ((x, gamma, beta, running), relu) = *input;
        Box::new(batch_norm_train_op_with::<I, NoCheckpointing, K>(
            x, gamma, beta, running, epsilon, groups, relu,
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

/// [`SgdKernel::sgd_step`] on a parameter of rank 1 to 5 on `B` with its gradient and buffer:
/// `Ok` with the new parameter and buffer, `Err` with the input when it is none of these or the
/// kernel does not take it.
fn sgd_momentum_step<B: SgdKernel>(input: Erased, settings: SgdSettings) -> Result<Erased, Erased> {
    fn rank<B: SgdKernel, const D: usize>(
        input: Erased,
        settings: SgdSettings,
    ) -> Result<Erased, Erased> {
        type Input<B, const D: usize> = (Tensor<B, D>, Tensor<B, D>, Option<Tensor<B, D>>);
        let (param, grad, velocity) = *input.downcast::<Input<B, D>>()?;
        match B::sgd_step(param, grad, velocity, settings) {
            Ok(stepped) => Ok(Box::new(stepped)),
            Err(input) => Err(Box::new(input)),
        }
    }
    rank::<B, 1>(input, settings)
        .or_else(|input| rank::<B, 2>(input, settings))
        .or_else(|input| rank::<B, 3>(input, settings))
        .or_else(|input| rank::<B, 4>(input, settings))
        .or_else(|input| rank::<B, 5>(input, settings))
}

/// [`MovingAverageKernel::moving_average`] on a pair of tensors of rank 1 to 5 on `B`: `Ok`
/// with the average, `Err` with the input when it is none of these or the kernel does not take
/// it.
fn moving_average<B: MovingAverageKernel>(input: Erased, momentum: f64) -> Result<Erased, Erased> {
    fn rank<B: MovingAverageKernel, const D: usize>(
        input: Erased,
        momentum: f64,
    ) -> Result<Erased, Erased> {
        let (target, online) = *input.downcast::<(Tensor<B, D>, Tensor<B, D>)>()?;
        match B::moving_average(target, online, momentum) {
            Ok(average) => Ok(Box::new(average)),
            Err(input) => Err(Box::new(input)),
        }
    }
    rank::<B, 1>(input, momentum)
        .or_else(|input| rank::<B, 2>(input, momentum))
        .or_else(|input| rank::<B, 3>(input, momentum))
        .or_else(|input| rank::<B, 4>(input, momentum))
        .or_else(|input| rank::<B, 5>(input, momentum))
}

/// [`moving_average`] on `Autodiff<I>`'s tensors: computed on their values (the inner
/// backend's), the average untracked.
fn moving_average_autodiff<I: MovingAverageKernel>(
    input: Erased,
    momentum: f64,
) -> Result<Erased, Erased> {
    fn rank<I: MovingAverageKernel, const D: usize>(
        input: Erased,
        momentum: f64,
    ) -> Result<Erased, Erased> {
        let (target, online) = *input.downcast::<(Ad<I, D>, Ad<I, D>)>()?;
        match I::moving_average(target.inner(), online.inner(), momentum) {
            Ok(average) => Ok(Box::new(Ad::<I, D>::from_inner(average))),
            Err((target, online)) => Err(Box::new((
                Ad::<I, D>::from_inner(target),
                Ad::<I, D>::from_inner(online),
            ))),
        }
    }
    rank::<I, 1>(input, momentum)
        .or_else(|input| rank::<I, 2>(input, momentum))
        .or_else(|input| rank::<I, 3>(input, momentum))
        .or_else(|input| rank::<I, 4>(input, momentum))
        .or_else(|input| rank::<I, 5>(input, momentum))
}

/// [`SgdKernel::sgd_step_all`] on `B`'s list: `Ok` with each new `(θ, v)`, `Err` with the
/// input when it is not such a list or the kernel does not take it.
fn sgd_momentum_step_all<B: SgdKernel>(
    input: Erased,
    settings: SgdSettings,
) -> Result<Erased, Erased> {
    type List<B> = Vec<(Primitive<B>, Primitive<B>, Option<Primitive<B>>)>;
    let list = *input.downcast::<List<B>>()?;
    let list = list
        .into_iter()
        .map(|(p, g, v)| (p.0, g.0, v.map(|v| v.0)))
        .collect();
    match B::sgd_step_all(list, settings) {
        Ok(stepped) => Ok(Box::new(
            stepped
                .into_iter()
                .map(|(p, v)| (Primitive::<B>(p), Primitive::<B>(v)))
                .collect::<Vec<_>>(),
        )),
        Err(list) => Err(Box::new(
            list.into_iter()
                .map(|(p, g, v)| (Primitive::<B>(p), Primitive::<B>(g), v.map(Primitive::<B>)))
                .collect::<List<B>>(),
        )),
    }
}

/// [`MovingAverageKernel::moving_average_all`] on `B`'s pairs: `Ok` with the averages, `Err`
/// with the input when it is not such a list or the kernel does not take it.
fn moving_average_all<B: MovingAverageKernel>(
    input: Erased,
    momentum: f64,
) -> Result<Erased, Erased> {
    let pairs = *input.downcast::<Vec<(Primitive<B>, Primitive<B>)>>()?;
    let pairs = pairs.into_iter().map(|(t, o)| (t.0, o.0)).collect();
    match B::moving_average_all(pairs, momentum) {
        Ok(averages) => Ok(Box::new(
            averages.into_iter().map(Primitive::<B>).collect::<Vec<_>>(),
        )),
        Err(pairs) => Err(Box::new(
            pairs
                .into_iter()
                .map(|(t, o)| (Primitive::<B>(t), Primitive::<B>(o)))
                .collect::<Vec<_>>(),
        )),
    }
}

/// [`moving_average_all`] on `Autodiff<I>`'s pairs: computed on their values (the inner
/// backend's), the averages untracked.
fn moving_average_all_autodiff<I: MovingAverageKernel>(
    input: Erased,
    momentum: f64,
) -> Result<Erased, Erased> {
    type A<I> = Autodiff<I, NoCheckpointing>;
    let pairs = *input.downcast::<Vec<(Primitive<A<I>>, Primitive<A<I>>)>>()?;
    let pairs = pairs
        .into_iter()
        .map(|(t, o)| (A::<I>::inner(t.0), A::<I>::inner(o.0)))
        .collect();
    match I::moving_average_all(pairs, momentum) {
        Ok(averages) => Ok(Box::new(
            averages
                .into_iter()
                .map(|a| Primitive::<A<I>>(A::<I>::from_inner(a)))
                .collect::<Vec<_>>(),
        )),
        Err(pairs) => Err(Box::new(
            pairs
                .into_iter()
                .map(|(t, o)| {
                    (
                        Primitive::<A<I>>(A::<I>::from_inner(t)),
                        Primitive::<A<I>>(A::<I>::from_inner(o)),
                    )
                })
                .collect::<Vec<_>>(),
        )),
    }
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

    /// [`mean_cosine`](super::mean_cosine) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn mean_cosine(input: Erased, epsilon: f64) -> Result<Erased, Erased> {
        super::mean_cosine::<burn::backend::Wgpu>(input, epsilon)
    }

    /// [`global_avg_pool`](super::global_avg_pool) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn global_avg_pool(x: Erased) -> Result<Erased, Erased> {
        super::global_avg_pool::<burn::backend::Wgpu>(x)
    }

    /// [`nt_xent`](super::nt_xent) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn nt_xent(z: Erased, temperature: f64, epsilon: f64) -> Result<Erased, Erased> {
        super::nt_xent::<burn::backend::Wgpu>(z, temperature, epsilon)
    }

    /// [`info_nce`](super::info_nce) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn info_nce(
        input: Erased,
        temperature: f64,
        epsilon: f64,
    ) -> Result<Erased, Erased> {
        super::info_nce::<burn::backend::Wgpu>(input, temperature, epsilon)
    }

    /// [`log_softmax`](super::log_softmax) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn log_softmax(x: Erased, last: bool) -> Result<Erased, Erased> {
        super::log_softmax::<burn::backend::Wgpu>(x, last)
    }

    /// [`sgd_momentum_step`](super::sgd_momentum_step) on `Wgpu`.
    #[inline(never)]
    pub(crate) fn sgd_momentum_step(
        input: Erased,
        settings: super::SgdSettings,
    ) -> Result<Erased, Erased> {
        super::sgd_momentum_step::<burn::backend::Wgpu>(input, settings)
    }

    /// [`sgd_momentum_step_all`](super::sgd_momentum_step_all) on `Wgpu`.
    #[inline(never)]
    pub(crate) fn sgd_momentum_step_all(
        input: Erased,
        settings: super::SgdSettings,
    ) -> Result<Erased, Erased> {
        super::sgd_momentum_step_all::<burn::backend::Wgpu>(input, settings)
    }

    /// [`moving_average`](super::moving_average) on `Wgpu`.
    #[inline(never)]
    pub(crate) fn moving_average(input: Erased, momentum: f64) -> Result<Erased, Erased> {
        super::moving_average::<burn::backend::Wgpu>(input, momentum)
    }

    /// [`moving_average_autodiff`](super::moving_average_autodiff) on `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn moving_average_autodiff(input: Erased, momentum: f64) -> Result<Erased, Erased> {
        super::moving_average_autodiff::<burn::backend::Wgpu>(input, momentum)
    }

    /// [`moving_average_all`](super::moving_average_all) on `Wgpu`.
    #[inline(never)]
    pub(crate) fn moving_average_all(input: Erased, momentum: f64) -> Result<Erased, Erased> {
        super::moving_average_all::<burn::backend::Wgpu>(input, momentum)
    }

    /// [`moving_average_all_autodiff`](super::moving_average_all_autodiff) on
    /// `Autodiff<Wgpu>`.
    #[inline(never)]
    pub(crate) fn moving_average_all_autodiff(
        input: Erased,
        momentum: f64,
    ) -> Result<Erased, Erased> {
        super::moving_average_all_autodiff::<burn::backend::Wgpu>(input, momentum)
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

    /// [`mean_cosine`](super::mean_cosine) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn mean_cosine(input: Erased, epsilon: f64) -> Result<Erased, Erased> {
        super::mean_cosine::<burn::backend::Cuda>(input, epsilon)
    }

    /// [`global_avg_pool`](super::global_avg_pool) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn global_avg_pool(x: Erased) -> Result<Erased, Erased> {
        super::global_avg_pool::<burn::backend::Cuda>(x)
    }

    /// [`nt_xent`](super::nt_xent) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn nt_xent(z: Erased, temperature: f64, epsilon: f64) -> Result<Erased, Erased> {
        super::nt_xent::<burn::backend::Cuda>(z, temperature, epsilon)
    }

    /// [`info_nce`](super::info_nce) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn info_nce(
        input: Erased,
        temperature: f64,
        epsilon: f64,
    ) -> Result<Erased, Erased> {
        super::info_nce::<burn::backend::Cuda>(input, temperature, epsilon)
    }

    /// [`log_softmax`](super::log_softmax) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn log_softmax(x: Erased, last: bool) -> Result<Erased, Erased> {
        super::log_softmax::<burn::backend::Cuda>(x, last)
    }

    /// [`sgd_momentum_step`](super::sgd_momentum_step) on `Cuda`.
    #[inline(never)]
    pub(crate) fn sgd_momentum_step(
        input: Erased,
        settings: super::SgdSettings,
    ) -> Result<Erased, Erased> {
        super::sgd_momentum_step::<burn::backend::Cuda>(input, settings)
    }

    /// [`sgd_momentum_step_all`](super::sgd_momentum_step_all) on `Cuda`.
    #[inline(never)]
    pub(crate) fn sgd_momentum_step_all(
        input: Erased,
        settings: super::SgdSettings,
    ) -> Result<Erased, Erased> {
        super::sgd_momentum_step_all::<burn::backend::Cuda>(input, settings)
    }

    /// [`moving_average`](super::moving_average) on `Cuda`.
    #[inline(never)]
    pub(crate) fn moving_average(input: Erased, momentum: f64) -> Result<Erased, Erased> {
        super::moving_average::<burn::backend::Cuda>(input, momentum)
    }

    /// [`moving_average_autodiff`](super::moving_average_autodiff) on `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn moving_average_autodiff(input: Erased, momentum: f64) -> Result<Erased, Erased> {
        super::moving_average_autodiff::<burn::backend::Cuda>(input, momentum)
    }

    /// [`moving_average_all`](super::moving_average_all) on `Cuda`.
    #[inline(never)]
    pub(crate) fn moving_average_all(input: Erased, momentum: f64) -> Result<Erased, Erased> {
        super::moving_average_all::<burn::backend::Cuda>(input, momentum)
    }

    /// [`moving_average_all_autodiff`](super::moving_average_all_autodiff) on
    /// `Autodiff<Cuda>`.
    #[inline(never)]
    pub(crate) fn moving_average_all_autodiff(
        input: Erased,
        momentum: f64,
    ) -> Result<Erased, Erased> {
        super::moving_average_all_autodiff::<burn::backend::Cuda>(input, momentum)
    }
}
