//! Batch normalisation in training as one autodiff operation with its backward step derived by
//! hand: what the GPU backends (wgpu, CUDA) run where the CPU has the slice kernels of
//! [`super::batch_norm`].
//!
//! Why this file exists: the composed form (`layers::BatchNorm2d`'s fallback) leaves the
//! gradient to burn-autodiff's rules for each of its dozen operations: every broadcast
//! multiply and add reduces its operand's gradient back to `[1, c, 1]`, the means are
//! differentiated through, and each rule is a kernel of its own on a GPU (docs/gpu.md counts
//! them). Here the forward is the per-channel moments (`μ`, then `σ²` of the centred values:
//! the two-pass variance, no cancellation) and one element-wise pass; the backward the sums
//! `S₁ = Σ ∂y`, `S₂ = Σ ∂y·(x − μ)` per channel and one element-wise pass:
//! `∂x = γ·r·(∂y − S₁/M − (x − μ)·r²·S₂/M)`, `∂γ = r·S₂`, `∂β = S₁`, with `r = 1/√(σ² + ε)` and
//! `M = N·H·W` — the exact gradient through the batch moments, as autodiff derives it from the
//! composed form. The passes are `BatchNormKernels`: `Composed`, in the inner backend's
//! tensor operations (any backend: checked in f64 on the CPU, `models/tests/batch_norm.rs`),
//! or on `Autodiff<Wgpu>` and `Autodiff<Cuda>` the two `#[cube]` kernels each way of
//! `batch_norm_cube.rs` (checked on lavapipe against the CPU, `tests/gpu_path`).
//!
//! Epilogue: [`batch_norm_relu_train_op`] adds a residual and applies a ReLU inside the same
//! operation (`max(γ·x̂ + β + residual, 0)`); its backward step masks `∂y` by the kept output
//! (burn's `relu_backward`) before the sums above and hands the masked `∂y` to the residual.
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
//! convolution reads without a copy. (`Composed` copies an NCHW-contiguous input into that
//! matrix; the GPU backends' `#[cube]` kernels read either layout where it lies.)

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;
use std::marker::PhantomData;

/// What [`super::batch_norm_train`] and [`batch_norm_train_op`] (and their fused forms
/// [`super::batch_norm_relu_train`], [`batch_norm_relu_train_op`]) compute, and
/// [`super::batch_norm_1d_train`] (`D` = 2).
#[derive(Debug)]
pub struct TrainingBatchNorm<B: Backend, const D: usize = 4> {
    /// `γ·x̂ + β` (the fused forms: `max(γ·x̂ + β + residual, 0)`), shaped as the input.
    pub output: Tensor<B, D>,
    /// The running averages given, moved by each group's batch moments in turn
    /// ([`update_running_averages`]), `[c]` each, untracked, on the input's device.
    pub running: RunningAverages<B>,
}

/// A batch norm's running averages, the weight of a batch's moments in them (PyTorch's
/// `momentum`, 0.1 by default) and which batch variance they follow: what a training step
/// moves.
#[derive(Debug, Clone)]
pub struct RunningAverages<B: Backend> {
    /// Running mean, `[c]`.
    pub mean: Tensor<B, 1>,
    /// Running variance, `[c]`: of the unbiased or the biased batch variance ([`Self::unbiased`]).
    pub var: Tensor<B, 1>,
    /// Weight of the new batch statistics.
    pub momentum: f64,
    /// Whether the running variance follows the *unbiased* batch variance (`σ²·M/(M − 1)` for
    /// `M` values a channel: PyTorch's `BatchNorm1d` / `BatchNorm2d`, this crate's
    /// [`BatchNorm2d`](crate::layers::BatchNorm2d)) or the biased one (`σ²`: burn's
    /// `BatchNorm`, which the heads' batch norms follow). The normalisation uses the biased
    /// variance either way.
    pub unbiased: bool,
}

/// The running averages moved towards each group's batch mean and batch variance in turn, as
/// PyTorch's `BatchNorm2d` (or, not [`RunningAverages::unbiased`], burn's `BatchNorm`) moves
/// them, and as `groups` separate calls would: `r ← (1 − m)·r + m·μ`,
/// `v ← (1 − m)·v + m·σ²·M/(M − 1)` (unbiased; biased: `m·σ²`), with `var` the biased variance
/// of `count` (`M`) values per channel of each group. The result is on the device of the
/// moments and carries no gradient.
///
/// # Shapes
/// - `running`: `[c]` each; `mean`, `var`: `[groups, c]`
/// - output: `[c]` each
pub fn update_running_averages<B: Backend>(
    running: RunningAverages<B>,
    mean: Tensor<B, 2>,
    var: Tensor<B, 2>,
    count: usize,
) -> RunningAverages<B> {
    let RunningAverages {
        mean: mut running_mean,
        var: mut running_var,
        momentum: m,
        unbiased,
    } = running;
    let device = mean.device();
    running_mean = running_mean.to_device(&device);
    running_var = running_var.to_device(&device);
    let [groups, c] = mean.dims();
    let group = |t: &Tensor<B, 2>, g: usize| t.clone().narrow(0, g, 1).reshape([c]);
    for g in 0..groups {
        running_mean = running_mean
            .mul_scalar(1.0 - m)
            .add(group(&mean, g).mul_scalar(m));
        let batch_var = match unbiased {
            true => group(&var, g).mul_scalar(count as f64 / (count - 1) as f64),
            false => group(&var, g),
        };
        running_var = running_var.mul_scalar(1.0 - m).add(batch_var.mul_scalar(m));
    }
    RunningAverages {
        mean: running_mean.detach(),
        var: running_var.detach(),
        momentum: m,
        unbiased,
    }
}

/// How the operation computes its passes on the inner backend `I`: [`Composed`] in burn's
/// tensor operations on any backend, or the `#[cube]` kernels of `batch_norm_cube.rs` on the
/// GPU backends. Both see the activation as a `[groups, M, C]` matrix ([`Composed`] through
/// [`channels_last`], the `#[cube]` kernels through the strides of its NCHW or NHWC memory);
/// each makes its layout changes itself, so that the GPU's are made on the device's tensors
/// inside their operation instead of as operations of burn's fusion stream.
pub(crate) trait BatchNormKernels<I: Backend>:
    'static + Send + Sync + std::fmt::Debug
{
    /// `y = γ·x̂ + β` followed by the `epilogue` (the residual added, then the ReLU), the
    /// running averages moved by each group in turn ([`update_running_averages`]) and, when
    /// `keep` (a backward step will read them), per group and channel `μ` and `r = 1/√(σ² + ε)`.
    ///
    /// # Shapes
    /// - `x`: `[n, c, h, w]` (`groups` stacked batches), `gamma`, `beta`: `[c]`, running
    ///   averages `[c]`, the residual `[n, c, h, w]`
    /// - output `[n, c, h, w]`, moments (when `keep`) `[groups, c]`, running averages `[c]`
    #[allow(clippy::too_many_arguments)]
    fn forward(
        x: Tensor<I, 4>,
        gamma: Tensor<I, 1>,
        beta: Tensor<I, 1>,
        running: RunningAverages<I>,
        epsilon: f64,
        groups: usize,
        epilogue: Epilogue<I>,
        keep: bool,
    ) -> Moments<I>;

    /// `(∂x, ∂γ, ∂β, ∂residual)`: with `g = ∂y` where the fused ReLU's `output` is positive and
    /// 0 elsewhere (`g = ∂y` without one), per group `∂x = γ·r·(g − S₁/M − (x − μ)·r²·S₂/M)`,
    /// and `∂γ = Σ r·S₂`, `∂β = Σ S₁` summed over the groups (separate calls' gradients add),
    /// with `S₁ = Σ g` and `S₂ = Σ g·(x − μ)` over each group's rows; `∂residual = g` when the
    /// epilogue added one.
    ///
    /// # Shapes
    /// - `dy`, `x`, `output`: `[n, c, h, w]`, `gamma`: `[c]`, `mean`, `inv_std`: `[groups, c]`
    /// - `∂x`, `∂residual`: `[n, c, h, w]`, `∂γ`, `∂β`: `[c]`
    #[allow(clippy::too_many_arguments)]
    fn backward(
        dy: Tensor<I, 4>,
        x: Tensor<I, 4>,
        output: Option<Tensor<I, 4>>,
        gamma: Tensor<I, 1>,
        mean: Tensor<I, 2>,
        inv_std: Tensor<I, 2>,
        groups: usize,
        residual: bool,
    ) -> Grads<I>;
}

/// What follows the normalisation inside the operation (a ResNet's `relu(bn(x) + identity)`):
/// an optional residual added, then an optional ReLU.
#[derive(Debug, Clone)]
pub(crate) struct Epilogue<I: Backend> {
    /// Added to `γ·x̂ + β`, `[n, c, h, w]`.
    pub residual: Option<Tensor<I, 4>>,
    /// `max(·, 0)` last.
    pub relu: bool,
}

/// What [`BatchNormKernels::backward`] returns: `(∂x, ∂γ, ∂β, ∂residual)`.
pub(crate) type Grads<I> = (
    Tensor<I, 4>,
    Tensor<I, 1>,
    Tensor<I, 1>,
    Option<Tensor<I, 4>>,
);

/// What [`BatchNormKernels::forward`] returns.
#[derive(Debug)]
pub(crate) struct Moments<I: Backend> {
    /// `γ·x̂ + β`, `[n, c, h, w]`.
    pub output: Tensor<I, 4>,
    /// What the backward step reads, when asked for.
    pub saved: Option<Saved<I>>,
    /// The running averages after the step, `[c]` each.
    pub running: RunningAverages<I>,
}

/// The per-group moments the backward step reads.
#[derive(Debug)]
pub(crate) struct Saved<I: Backend> {
    /// `μ`, `[groups, c]`.
    pub mean: Tensor<I, 2>,
    /// `r = 1/√(σ² + ε)`, `[groups, c]`.
    pub inv_std: Tensor<I, 2>,
}

/// [`BatchNormKernels`] in burn's tensor operations, on any backend: the forward two
/// reductions (`μ`, then `σ²` of `x − μ`: the two-pass variance, no cancellation) and one
/// element-wise pass, the backward two reductions and one element-wise pass.
#[derive(Debug)]
pub(crate) struct Composed;

impl<I: Backend> BatchNormKernels<I> for Composed {
    fn forward(
        x: Tensor<I, 4>,
        gamma: Tensor<I, 1>,
        beta: Tensor<I, 1>,
        running: RunningAverages<I>,
        epsilon: f64,
        groups: usize,
        epilogue: Epilogue<I>,
        keep: bool,
    ) -> Moments<I> {
        let dims @ [_, c, _, _] = x.dims();
        let xm = channels_last(x, groups);
        let count = xm.dims()[1];
        let (gamma, beta) = (gamma.reshape([1, 1, c]), beta.reshape([1, 1, c]));
        let mean = xm.clone().mean_dim(1);
        // `x − μ` is not kept: its square's mean reads it in the reduction's kernel.
        let var = (xm.clone() - mean.clone()).square().mean_dim(1);
        let inv_std = var.clone().add_scalar(epsilon).sqrt().recip();
        let scale = gamma * inv_std.clone();
        // `y = x·(γ·r) + (β − μ·γ·r)`: one element-wise kernel over `x` (no centred copy).
        let shift = beta - mean.clone() * scale.clone();
        let per_group = |t: Tensor<I, 3>| t.reshape([groups, c]);
        let (mean, var) = (per_group(mean), per_group(var));
        let mut output = channels_first(xm * scale + shift, dims);
        if let Some(residual) = epilogue.residual {
            output = output + residual;
        }
        if epilogue.relu {
            output = burn::tensor::activation::relu(output);
        }
        Moments {
            output,
            running: update_running_averages(running, mean.clone(), var, count),
            saved: keep.then(|| Saved {
                mean,
                inv_std: per_group(inv_std),
            }),
        }
    }

    fn backward(
        dy: Tensor<I, 4>,
        x: Tensor<I, 4>,
        output: Option<Tensor<I, 4>>,
        gamma: Tensor<I, 1>,
        mean: Tensor<I, 2>,
        inv_std: Tensor<I, 2>,
        groups: usize,
        residual: bool,
    ) -> Grads<I> {
        let dims @ [_, c, _, _] = x.dims();
        // The ReLU's backward (burn's: 0 where its output is ≤ 0), the residual's gradient.
        let dy = match output {
            Some(output) => float(I::relu_backward(
                output.into_primitive().tensor(),
                dy.into_primitive().tensor(),
            )),
            None => dy,
        };
        let dresidual = residual.then(|| dy.clone());
        let (dy, x) = (channels_last(dy, groups), channels_last(x, groups));
        let count = x.dims()[1] as f64;
        let gamma = gamma.reshape([1, 1, c]);
        let (mean, inv_std) = (
            mean.reshape([groups, 1, c]),
            inv_std.reshape([groups, 1, c]),
        );
        // S₁/M and S₂/M of each group, and from them the gradients of β and γ and the
        // coefficients of ∂x.
        let m1 = dy.clone().mean_dim(1);
        let m2 = (dy.clone() * (x.clone() - mean.clone())).mean_dim(1);
        let dbeta = m1.clone().mul_scalar(count);
        let dgamma = m2.clone().mul(inv_std.clone()).mul_scalar(count);
        let scale = gamma * inv_std.clone();
        let slope = m2 * inv_std.square();
        // `x − μ` again rather than kept from above: one element-wise kernel reads `x`, `∂y`
        // and the per-channel values, and no centred copy is written.
        let dx = (dy - m1 - (x - mean) * slope) * scale;
        (
            channels_first(dx, dims),
            over_groups(dgamma),
            over_groups(dbeta),
            dresidual,
        )
    }
}

/// What the backward step keeps: the input, `γ`, per group and channel `μ` and `r`
/// (`[groups, c]`), and with a fused ReLU its output (the next layer keeps it anyway).
#[derive(Debug, Clone)]
struct State<I: Backend> {
    groups: usize,
    x: FloatTensor<I>,
    output: Option<FloatTensor<I>>,
    gamma: FloatTensor<I>,
    mean: FloatTensor<I>,
    inv_std: FloatTensor<I>,
}

/// The backward step of [`batch_norm_train_op`] and [`batch_norm_relu_train_op`], by the kernels
/// `K`: `N` = 3 parents (`x`, `γ`, `β`), or 4 with the residual.
#[derive(Debug)]
struct BatchNormOpBackward<K, const N: usize>(PhantomData<K>);

fn float<I: Backend, const D: usize>(t: FloatTensor<I>) -> Tensor<I, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// `[n, c, h, w]` as `groups` stacked `[n·h·w / groups, c]` matrices of its channels-last
/// order (`[groups, n·h·w / groups, c]`): a view of the memory when that memory is
/// channels-last (a cubecl convolution's output), else one copy.
pub(super) fn channels_last<I: Backend>(x: Tensor<I, 4>, groups: usize) -> Tensor<I, 3> {
    let [n, c, h, w] = x.dims();
    x.permute([0, 2, 3, 1])
        .reshape([groups, n / groups * h * w, c])
}

/// The inverse of [`channels_last`]: the `[groups, n·h·w / groups, c]` matrices as an
/// `[n, c, h, w]` view of the same memory.
pub(super) fn channels_first<I: Backend>(
    m: Tensor<I, 3>,
    [n, c, h, w]: [usize; 4],
) -> Tensor<I, 4> {
    m.reshape([n, h, w, c]).permute([0, 3, 1, 2])
}

/// Per channel, the sum over the groups of `[groups, c]` or `[groups, 1, c]` values, `[c]` (no
/// reduction for one group).
pub(super) fn over_groups<I: Backend, const D: usize>(v: Tensor<I, D>) -> Tensor<I, 1> {
    let dims = v.dims();
    let (groups, c) = (dims[0], dims[D - 1]);
    if groups == 1 {
        v.reshape([c])
    } else {
        v.sum_dim(0).reshape([c])
    }
}

impl<I: Backend, K: BatchNormKernels<I>, const N: usize> Backward<I, N>
    for BatchNormOpBackward<K, N>
{
    type State = State<I>;

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let mut parents = ops.parents.into_iter();
        let mut parent = || parents.next().flatten();
        let (node_x, node_gamma, node_beta, node_residual) =
            (parent(), parent(), parent(), parent());
        let grad = grads.consume::<I>(&ops.node);
        let State {
            groups,
            x,
            output,
            gamma,
            mean,
            inv_std,
        } = ops.state;
        let (dx, dgamma, dbeta, dresidual) = K::backward(
            float(grad),
            float(x),
            output.map(float),
            float(gamma),
            float(mean),
            float(inv_std),
            groups,
            // The residual's gradient only where it is tracked.
            node_residual.is_some(),
        );
        if let (Some(node), Some(dresidual)) = (node_residual, dresidual) {
            grads.register::<I>(node.id, dresidual.into_primitive().tensor());
        }
        if let Some(node) = node_x {
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
/// `x`, `γ` and `β` by the backward step above), and the running averages moved by the batch
/// moments of each of the `groups` stacked batches in turn ([`update_running_averages`]). With
/// `groups` > 1 each group is normalised with its own moments: the numbers of `groups` separate
/// calls on the groups, concatenated (their parameter gradients summed, the running averages
/// moved by one call after the other).
///
/// # Shapes
/// - `x`: `[n, c, h, w]` with `n` a multiple of `groups`, `gamma`, `beta` and the running
///   averages: `[c]`
/// - output: `[n, c, h, w]`, running averages `[c]`
///
/// # Panics
/// If `groups` is 0 or does not divide `n`, or a group has one value per channel (its
/// unbiased variance is undefined, and PyTorch refuses it; with a biased running variance too).
pub fn batch_norm_train_op<I: Backend, C: CheckpointStrategy>(
    x: Tensor<Autodiff<I, C>, 4>,
    gamma: Tensor<Autodiff<I, C>, 1>,
    beta: Tensor<Autodiff<I, C>, 1>,
    running: RunningAverages<Autodiff<I, C>>,
    epsilon: f64,
    groups: usize,
) -> TrainingBatchNorm<Autodiff<I, C>> {
    batch_norm_train_op_with::<I, C, Composed>(x, gamma, beta, running, epsilon, groups, None)
}

/// [`batch_norm_train_op`] with a ReLU after it, and a `residual` added before the ReLU when
/// given, as one operation: `max(γ·x̂ + β + residual, 0)`, a ResNet block's last batch norm with
/// its shortcut (`residual`) or any batch norm a ReLU follows. The gradients are those of the
/// composition (burn's `relu` and `add` after [`batch_norm_train_op`]); the backward step keeps
/// the output for the ReLU's mask instead of a tensor of its own.
///
/// # Shapes
/// - as [`batch_norm_train_op`]; `residual`: `[n, c, h, w]`
///
/// # Panics
/// As [`batch_norm_train_op`], and if the residual's shape is not the input's.
pub fn batch_norm_relu_train_op<I: Backend, C: CheckpointStrategy>(
    x: Tensor<Autodiff<I, C>, 4>,
    gamma: Tensor<Autodiff<I, C>, 1>,
    beta: Tensor<Autodiff<I, C>, 1>,
    running: RunningAverages<Autodiff<I, C>>,
    epsilon: f64,
    groups: usize,
    residual: Option<Tensor<Autodiff<I, C>, 4>>,
) -> TrainingBatchNorm<Autodiff<I, C>> {
    batch_norm_train_op_with::<I, C, Composed>(
        x,
        gamma,
        beta,
        running,
        epsilon,
        groups,
        Some(residual),
    )
}

/// [`batch_norm_train_op`] by the kernels `K`; with `relu` = `Some(residual)` the ReLU (and the
/// residual) of [`batch_norm_relu_train_op`] follow inside the operation.
pub(crate) fn batch_norm_train_op_with<
    I: Backend,
    C: CheckpointStrategy,
    K: BatchNormKernels<I>,
>(
    x: Tensor<Autodiff<I, C>, 4>,
    gamma: Tensor<Autodiff<I, C>, 1>,
    beta: Tensor<Autodiff<I, C>, 1>,
    running: RunningAverages<Autodiff<I, C>>,
    epsilon: f64,
    groups: usize,
    relu: Option<Option<Tensor<Autodiff<I, C>, 4>>>,
) -> TrainingBatchNorm<Autodiff<I, C>> {
    let [n, _, h, w] = x.dims();
    assert!(
        groups > 0 && n.is_multiple_of(groups),
        "batch norm over {groups} groups of a batch of {n}"
    );
    assert!(
        n / groups * h * w > 1,
        "batch norm in training needs more than one value per channel in each of {groups} \
         groups of an input {:?}",
        x.dims()
    );
    if let Some(Some(residual)) = &relu {
        assert_eq!(
            residual.dims(),
            x.dims(),
            "batch norm's residual and input differ in shape"
        );
    }
    let device = x.device();
    let running = RunningAverages {
        mean: running.mean.inner().to_device(&device),
        var: running.var.inner().to_device(&device),
        momentum: running.momentum,
        unbiased: running.unbiased,
    };
    let (x, gamma, beta) = (
        x.into_primitive().tensor(),
        gamma.into_primitive().tensor(),
        beta.into_primitive().tensor(),
    );
    let (relu, residual) = match relu {
        Some(residual) => (true, residual.map(|r| r.into_primitive().tensor())),
        None => (false, None),
    };
    // Whether a backward step follows is known before the forward runs (burn's own operations
    // decide it first too): untracked (a momentum encoder), the operation keeps no moments and
    // takes its operands by move, so that on a fusion backend nothing it reads or writes is
    // left for a drop of its own.
    let forward = |x, gamma, beta, residual: Option<FloatTensor<I>>, keep| {
        K::forward(
            float(x),
            float(gamma),
            float(beta),
            running,
            epsilon,
            groups,
            Epilogue {
                residual: residual.map(float),
                relu,
            },
            keep,
        )
    };
    // The same step with 3 parents (`x`, `γ`, `β`) or 4 (and the residual); burn-autodiff's node
    // type is not public, hence a macro rather than a function of the parents.
    macro_rules! track {
        ($parents:literal, $nodes:expr, $residual:expr) => {
            match BatchNormOpBackward::<K, $parents>(PhantomData)
                .prepare::<C>($nodes)
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => {
                    let Moments {
                        output,
                        saved,
                        running,
                    } = forward(
                        x.primitive.clone(),
                        gamma.primitive.clone(),
                        beta.primitive,
                        $residual,
                        true,
                    );
                    let Saved { mean, inv_std } = saved.expect("the moments were asked for");
                    let y = output.into_primitive().tensor();
                    let state = State {
                        groups,
                        x: x.primitive,
                        output: relu.then(|| y.clone()),
                        gamma: gamma.primitive,
                        mean: mean.into_primitive().tensor(),
                        inv_std: inv_std.into_primitive().tensor(),
                    };
                    (prep.finish(state, y), running)
                }
                OpsKind::UnTracked(prep) => {
                    let moments = forward(
                        x.primitive,
                        gamma.primitive,
                        beta.primitive,
                        $residual,
                        false,
                    );
                    (
                        prep.finish(moments.output.into_primitive().tensor()),
                        moments.running,
                    )
                }
            }
        };
    }
    let (nx, ngamma, nbeta) = (x.node.clone(), gamma.node.clone(), beta.node.clone());
    let (y, running) = match residual {
        Some(residual) => track!(
            4,
            [nx, ngamma, nbeta, residual.node],
            Some(residual.primitive)
        ),
        None => track!(3, [nx, ngamma, nbeta], None),
    };
    TrainingBatchNorm {
        output: Tensor::from_primitive(TensorPrimitive::Float(y)),
        running: RunningAverages {
            mean: Tensor::from_inner(running.mean),
            var: Tensor::from_inner(running.var),
            momentum: running.momentum,
            unbiased: running.unbiased,
        },
    }
}
