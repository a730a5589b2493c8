//! Batch normalisation in training as one autodiff operation written in the backend's own tensor
//! operations, with the backward step derived by hand: what the GPU backends (wgpu, CUDA) run
//! where the CPU has the slice kernels of [`super::batch_norm`].
//!
//! Why this file exists: the composed form (`layers::BatchNorm2d`'s fallback) leaves the
//! gradient to burn-autodiff's rules for each of its dozen operations: every broadcast
//! multiply and add reduces its operand's gradient back to `[1, c, 1]`, the means are
//! differentiated through, and each rule is a kernel of its own on a GPU (about 30 launches per
//! layer and step in a ResNet-18, docs/gpu.md). Here the forward is two reductions over the
//! activation (`μ`, then `σ²` of the centred values: the two-pass variance, no cancellation) and
//! one element-wise pass; the backward two reductions (`S₁ = Σ ∂y`, `S₂ = Σ ∂y·(x − μ)` per
//! channel, as means) and one element-wise pass:
//! `∂x = γ·r·(∂y − S₁/M − (x − μ)·r²·S₂/M)`, `∂γ = r·S₂`, `∂β = S₁`, with `r = 1/√(σ² + ε)`
//! and `M = N·H·W` — the exact gradient through the batch moments, as autodiff derives it from
//! the composed form. burn's fusion merges each pass's element-wise chain into its reduction or
//! into one kernel. Generic over the inner backend, so the same code is checked in f64 on the
//! CPU (`models/tests/batch_norm.rs`) and on the GPU path (`tests/gpu_path`).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;

use super::TrainingBatchNorm;

/// What the backward step keeps: the input, `γ`, and per channel `μ` and `r` (`[1, c, 1]`).
#[derive(Debug, Clone)]
struct State<I: Backend> {
    x: FloatTensor<I>,
    gamma: FloatTensor<I>,
    mean: FloatTensor<I>,
    inv_std: FloatTensor<I>,
    dims: [usize; 4],
}

/// The backward step of [`batch_norm_train_op`].
#[derive(Debug)]
struct BatchNormOpBackward;

fn float<I: Backend, const D: usize>(t: FloatTensor<I>) -> Tensor<I, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// Per-channel mean of a `[n, c, positions]` tensor, `[1, c, 1]`: the mean over the positions
/// (contiguous), then the sum over the images of those means over `n`. Means rather than sums: a
/// sum of `M` values overflows half precision (65,504) where their mean does not.
///
/// Written for burn's fusion (burn-cubecl-fusion 0.21): a reduction joins a fused kernel only
/// after an element-wise operation of its input's shape, and the operations after it join it
/// only when it reduces another axis than the last. The scaling by `1/n` is that operation for
/// the sum over the images (axis 0), so the per-channel arithmetic that follows (`1/√(σ² + ε)`,
/// `γ·r`, the backward step's coefficients) can run in that sum's kernel rather than as one
/// kernel per operation on `c` values.
fn channel_mean<I: Backend>(v: Tensor<I, 3>) -> Tensor<I, 3> {
    let n = v.dims()[0];
    v.mean_dim(2).mul_scalar(1.0 / n as f64).sum_dim(0)
}

impl<I: Backend> Backward<I, 3> for BatchNormOpBackward {
    type State = State<I>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let grad = grads.consume::<I>(&ops.node);
        let State {
            x,
            gamma,
            mean,
            inv_std,
            dims: [n, c, h, w],
        } = ops.state;
        let count = (n * h * w) as f64;
        // Reshapes first: in fusion's stream a reshape between two operations separates them.
        let gamma = float::<I, 1>(gamma).reshape([1, c, 1]);
        let dy: Tensor<I, 3> = float::<I, 4>(grad).reshape([n, c, h * w]);
        let x: Tensor<I, 3> = float::<I, 4>(x).reshape([n, c, h * w]);
        let (mean, inv_std): (Tensor<I, 3>, Tensor<I, 3>) = (float(mean), float(inv_std));
        // S₁/M and S₂/M, and from them (per channel) the gradients of β and γ and the
        // coefficients of ∂x.
        let m1 = channel_mean(dy.clone());
        let m2 = channel_mean(dy.clone() * (x.clone() - mean.clone()));
        let dbeta = m1.clone().mul_scalar(count);
        let dgamma = m2.clone().mul(inv_std.clone()).mul_scalar(count);
        let scale = gamma * inv_std.clone();
        let slope = m2 * inv_std.square();
        if let Some(node) = node_x {
            // `x − μ` again rather than kept from above: one element-wise kernel reads `x`,
            // `∂y` and the per-channel values, and no centred copy is written.
            let dx = (dy - m1 - (x - mean) * slope) * scale;
            grads.register::<I>(node.id, dx.reshape([n, c, h, w]).into_primitive().tensor());
        }
        if let Some(node) = node_gamma {
            grads.register::<I>(node.id, dgamma.reshape([c]).into_primitive().tensor());
        }
        if let Some(node) = node_beta {
            grads.register::<I>(node.id, dbeta.reshape([c]).into_primitive().tensor());
        }
    }
}

/// Batch norm in training under autodiff on any backend: `y = γ·x̂ + β` tracked (gradients of
/// `x`, `γ` and `β` by the backward step above), and the per-channel batch mean and biased
/// variance (`[c]`, untracked) for the running averages.
///
/// # Shapes
/// - `x`: `[n, c, h, w]`, `gamma` and `beta`: `[c]`
/// - output: `[n, c, h, w]`, mean and variance `[c]`
pub fn batch_norm_train_op<I: Backend, C: CheckpointStrategy>(
    x: Tensor<Autodiff<I, C>, 4>,
    gamma: Tensor<Autodiff<I, C>, 1>,
    beta: Tensor<Autodiff<I, C>, 1>,
    epsilon: f64,
) -> TrainingBatchNorm<Autodiff<I, C>> {
    let dims @ [n, c, h, w] = x.dims();
    let (x, gamma, beta) = (
        x.into_primitive().tensor(),
        gamma.into_primitive().tensor(),
        beta.into_primitive().tensor(),
    );
    // Reshapes first: in fusion's stream a reshape between two operations separates them.
    let x3: Tensor<I, 3> = float::<I, 4>(x.primitive.clone()).reshape([n, c, h * w]);
    let gamma3 = float::<I, 1>(gamma.primitive.clone()).reshape([1, c, 1]);
    let shift = float::<I, 1>(beta.primitive.clone()).reshape([1, c, 1]);
    // `x − μ` is not kept: its square's mean reads it in the reduction's kernel.
    let mean = channel_mean(x3.clone());
    let var = channel_mean((x3.clone() - mean.clone()).square());
    let inv_std = var.clone().add_scalar(epsilon).sqrt().recip();
    let scale = gamma3 * inv_std.clone();
    // `y = x·(γ·r) + (β − μ·γ·r)`: one element-wise kernel over `x` (no centred copy).
    let shift = shift - mean.clone() * scale.clone();
    let y = (x3 * scale + shift)
        .reshape([n, c, h, w])
        .into_primitive()
        .tensor();
    let y = match BatchNormOpBackward
        .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let state = State {
                x: x.primitive,
                gamma: gamma.primitive,
                mean: mean.clone().into_primitive().tensor(),
                inv_std: inv_std.into_primitive().tensor(),
                dims,
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(y),
    };
    let untracked = |t: Tensor<I, 3>| Tensor::<Autodiff<I, C>, 1>::from_inner(t.reshape([c]));
    TrainingBatchNorm {
        output: Tensor::from_primitive(TensorPrimitive::Float(y)),
        mean: untracked(mean),
        var: untracked(var),
    }
}
