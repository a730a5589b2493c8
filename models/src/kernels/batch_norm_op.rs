//! Batch normalisation in training as one autodiff operation written in the backend's own tensor
//! operations, with the backward step derived by hand: what the GPU backends (wgpu, CUDA) run
//! where the CPU has the slice kernels of [`super::batch_norm`].
//!
//! Why this file exists: the composed form (`layers::BatchNorm2d`'s fallback) leaves the
//! gradient to burn-autodiff's rules for each of its dozen operations: every broadcast
//! multiply and add reduces its operand's gradient back to `[1, c, 1]`, the means are
//! differentiated through, and each rule is a kernel of its own on a GPU (docs/gpu.md counts
//! them). Here the forward is two reductions over the activation (`μ`, then `σ²` of the centred
//! values: the two-pass variance, no cancellation) and one element-wise pass; the backward two
//! reductions (`S₁ = Σ ∂y`, `S₂ = Σ ∂y·(x − μ)` per channel, as means) and one element-wise
//! pass: `∂x = γ·r·(∂y − S₁/M − (x − μ)·r²·S₂/M)`, `∂γ = r·S₂`, `∂β = S₁`, with
//! `r = 1/√(σ² + ε)` and `M = N·H·W` — the exact gradient through the batch moments, as
//! autodiff derives it from the composed form. Generic over the inner backend, so the same
//! code is checked in f64 on the CPU (`models/tests/batch_norm.rs`) and on the GPU path
//! (`tests/gpu_path`).
//!
//! Groups: the batch may be `G` equal batches stacked (the two views of a method passed through
//! the network as one batch, `layers::BatchNorm2d::forward_grouped`); each group is normalised
//! with its own moments, so the numbers are those of `G` separate calls, in one set of kernels:
//! the channels-last matrix is read as `[G, M, C]` and every reduction is over its middle axis.
//!
//! The activation is read as a `[N·H·W, C]` matrix, channels last (`channels_last`): burn's
//! cubecl convolutions compute in channels-last memory and hand back an NCHW view of it, so
//! the matrix is that memory as it lies (no copy), each per-channel statistic is one reduction
//! over its rows, and the output goes back as the same kind of view, which the next
//! convolution reads without a copy. (An NCHW-contiguous input costs one copy, as any
//! reshape of it did before.)

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;

/// What [`super::batch_norm_train`] and [`batch_norm_train_op`] compute.
#[derive(Debug)]
pub struct TrainingBatchNorm<B: Backend> {
    /// `γ·x̂ + β`, shaped as the input.
    pub output: Tensor<B, 4>,
    /// Per-channel batch mean of each group, `[groups, c]`, untracked.
    pub mean: Tensor<B, 2>,
    /// Per-channel biased batch variance of each group, `[groups, c]`, untracked.
    pub var: Tensor<B, 2>,
}

/// What the backward step keeps: the input, `γ`, and per group and channel `μ` and `r`
/// (`[groups, 1, c]`).
#[derive(Debug, Clone)]
struct State<I: Backend> {
    groups: usize,
    x: FloatTensor<I>,
    gamma: FloatTensor<I>,
    mean: FloatTensor<I>,
    inv_std: FloatTensor<I>,
}

/// The backward step of [`batch_norm_train_op`].
#[derive(Debug)]
struct BatchNormOpBackward;

fn float<I: Backend, const D: usize>(t: FloatTensor<I>) -> Tensor<I, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// `[n, c, h, w]` as `groups` stacked `[n·h·w / groups, c]` matrices of its channels-last
/// order (`[groups, n·h·w / groups, c]`): a view of the memory when that memory is
/// channels-last (a cubecl convolution's output), else one copy.
fn channels_last<I: Backend>(x: Tensor<I, 4>, groups: usize) -> Tensor<I, 3> {
    let [n, c, h, w] = x.dims();
    x.permute([0, 2, 3, 1])
        .reshape([groups, n / groups * h * w, c])
}

/// The inverse of [`channels_last`]: the `[groups, n·h·w / groups, c]` matrices as an
/// `[n, c, h, w]` view of the same memory.
fn channels_first<I: Backend>(m: Tensor<I, 3>, [n, c, h, w]: [usize; 4]) -> Tensor<I, 4> {
    m.reshape([n, h, w, c]).permute([0, 3, 1, 2])
}

/// Per channel, the sum over the groups of `[groups, 1, c]` values, `[c]` (no reduction for
/// one group).
fn over_groups<I: Backend>(v: Tensor<I, 3>) -> Tensor<I, 1> {
    let [groups, _, c] = v.dims();
    if groups == 1 {
        v.reshape([c])
    } else {
        v.sum_dim(0).reshape([c])
    }
}

impl<I: Backend> Backward<I, 3> for BatchNormOpBackward {
    type State = State<I>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let grad = grads.consume::<I>(&ops.node);
        let State {
            groups,
            x,
            gamma,
            mean,
            inv_std,
        } = ops.state;
        let x: Tensor<I, 4> = float(x);
        let dims @ [n, c, h, w] = x.dims();
        let count = (n / groups * h * w) as f64;
        let gamma = float::<I, 1>(gamma).reshape([1, 1, c]);
        let (dy, x) = (
            channels_last(float::<I, 4>(grad), groups),
            channels_last(x, groups),
        );
        let (mean, inv_std): (Tensor<I, 3>, Tensor<I, 3>) = (float(mean), float(inv_std));
        // S₁/M and S₂/M of each group, and from them (per channel) the gradients of β and γ
        // (summed over the groups, as separate calls' gradients add) and the coefficients of ∂x.
        let m1 = dy.clone().mean_dim(1);
        let m2 = (dy.clone() * (x.clone() - mean.clone())).mean_dim(1);
        let dbeta = over_groups(m1.clone().mul_scalar(count));
        let dgamma = over_groups(m2.clone().mul(inv_std.clone()).mul_scalar(count));
        let scale = gamma * inv_std.clone();
        let slope = m2 * inv_std.square();
        if let Some(node) = node_x {
            // `x − μ` again rather than kept from above: one element-wise kernel reads `x`,
            // `∂y` and the per-channel values, and no centred copy is written.
            let dx = channels_first((dy - m1 - (x - mean) * slope) * scale, dims);
            grads.register::<I>(node.id, dx.into_primitive().tensor());
        }
        if let Some(node) = node_gamma {
            grads.register::<I>(node.id, dgamma.into_primitive().tensor());
        }
        if let Some(node) = node_beta {
            grads.register::<I>(node.id, dbeta.into_primitive().tensor());
        }
    }
}

/// Batch norm in training under autodiff on any backend: `y = γ·x̂ + β` tracked (gradients of
/// `x`, `γ` and `β` by the backward step above), and the per-channel batch mean and biased
/// variance of each of the `groups` stacked batches (`[groups, c]`, untracked) for the running
/// averages. With `groups` > 1 each group is normalised with its own moments: the numbers of
/// `groups` separate calls on the groups, concatenated (their parameter gradients summed).
///
/// # Shapes
/// - `x`: `[n, c, h, w]` with `n` a multiple of `groups`, `gamma` and `beta`: `[c]`
/// - output: `[n, c, h, w]`, mean and variance `[groups, c]`
///
/// # Panics
/// If `groups` is 0 or does not divide `n`.
pub fn batch_norm_train_op<I: Backend, C: CheckpointStrategy>(
    x: Tensor<Autodiff<I, C>, 4>,
    gamma: Tensor<Autodiff<I, C>, 1>,
    beta: Tensor<Autodiff<I, C>, 1>,
    epsilon: f64,
    groups: usize,
) -> TrainingBatchNorm<Autodiff<I, C>> {
    let dims @ [n, c, _, _] = x.dims();
    assert!(
        groups > 0 && n.is_multiple_of(groups),
        "batch norm over {groups} groups of a batch of {n}"
    );
    let (x, gamma, beta) = (
        x.into_primitive().tensor(),
        gamma.into_primitive().tensor(),
        beta.into_primitive().tensor(),
    );
    let gamma2 = float::<I, 1>(gamma.primitive.clone()).reshape([1, 1, c]);
    let beta2 = float::<I, 1>(beta.primitive.clone()).reshape([1, 1, c]);
    let xm = channels_last(float::<I, 4>(x.primitive.clone()), groups);
    let mean = xm.clone().mean_dim(1);
    // `x − μ` is not kept: its square's mean reads it in the reduction's kernel.
    let var = (xm.clone() - mean.clone()).square().mean_dim(1);
    let inv_std = var.clone().add_scalar(epsilon).sqrt().recip();
    let scale = gamma2 * inv_std.clone();
    // `y = x·(γ·r) + (β − μ·γ·r)`: one element-wise kernel over `x` (no centred copy).
    let shift = beta2 - mean.clone() * scale.clone();
    let y = channels_first(xm * scale + shift, dims)
        .into_primitive()
        .tensor();
    let y = match BatchNormOpBackward
        .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let state = State {
                groups,
                x: x.primitive,
                gamma: gamma.primitive,
                mean: mean.clone().into_primitive().tensor(),
                inv_std: inv_std.into_primitive().tensor(),
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(y),
    };
    let untracked =
        |t: Tensor<I, 3>| Tensor::<Autodiff<I, C>, 2>::from_inner(t.reshape([groups, c]));
    TrainingBatchNorm {
        output: Tensor::from_primitive(TensorPrimitive::Float(y)),
        mean: untracked(mean),
        var: untracked(var),
    }
}
