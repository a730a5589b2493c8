//! The kernels of [`super::conv`], [`super::depthwise`], [`super::batch_norm`], [`super::gelu`],
//! [`super::silu`], [`super::layout`], [`super::softmax`], [`super::log_softmax`] and
//! [`super::layer_norm`] as operations of burn's CPU backend (`Flex`): the convolution, the
//! GELU, the log-softmax and the swap of the middle dimensions with and without autodiff,
//! the training batch norm, the softmax and the layer norm under autodiff (the last two with
//! Flex's own fused forward), the residual add with the layer norm after it, each with a backward step of its own (registered the way burn-autodiff registers
//! its `conv2d`, so the graph behaves the same) in place of burn's generic gradient rules.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::Autodiff;
use burn::tensor::ops::{ActivationOps, FloatTensor, ModuleOps};
use burn::tensor::{DType, TensorData};

use super::gemm::Real;
use super::geometry::ConvGeometry;
use super::{
    batch_norm, conv, depthwise, gelu, layer_norm, layout, log_softmax, matmul, silu, softmax,
};

/// Whether the kernels run in this element type (`f32` and `f64`).
pub(super) fn supported(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
}

fn flex_tensor<T: burn::tensor::Element>(values: Vec<T>, shape: [usize; 4]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}

/// Which kernels a convolution runs: one group ([`conv`]) or one filter per channel
/// ([`depthwise`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConvKind {
    /// One group: Winograd or im2col.
    Dense,
    /// `groups = in_channels = out_channels`, weight `[c, 1, k_h, k_w]`.
    Depthwise,
}

/// The convolution's output. `x` and `weight` share a [`supported`] element type.
pub(super) fn forward(
    x: &FlexTensor,
    weight: &FlexTensor,
    g: &ConvGeometry,
    kind: ConvKind,
) -> FlexTensor {
    let (x, weight) = (x.to_contiguous(), weight.to_contiguous());
    let [oh, ow] = g.out_size().expect("checked by the dispatch");
    let shape = [g.batch, g.out_channels, oh, ow];
    macro_rules! run {
        ($t:ty) => {{
            let (x, w) = (x.storage::<$t>(), weight.storage::<$t>());
            let y = match kind {
                ConvKind::Dense => conv::forward(x, w, g),
                ConvKind::Depthwise => depthwise::forward(x, w, g),
            };
            flex_tensor(y, shape)
        }};
    }
    match x.dtype() {
        DType::F64 => run!(f64),
        _ => run!(f32),
    }
}

/// `(∂x, ∂w)`, each when wanted.
fn backward(
    x: &FlexTensor,
    weight: &FlexTensor,
    grad: &FlexTensor,
    g: &ConvGeometry,
    kind: ConvKind,
    wanted: (bool, bool),
) -> (Option<FlexTensor>, Option<FlexTensor>) {
    let (x, weight, grad) = (
        x.to_contiguous(),
        weight.to_contiguous(),
        grad.to_contiguous(),
    );
    let x_shape = [g.batch, g.in_channels, g.in_size[0], g.in_size[1]];
    let w_shape = match kind {
        ConvKind::Dense => [g.out_channels, g.in_channels, g.kernel[0], g.kernel[1]],
        ConvKind::Depthwise => [g.out_channels, 1, g.kernel[0], g.kernel[1]],
    };
    macro_rules! run {
        ($t:ty) => {{
            let (x, w, grad) = (
                x.storage::<$t>(),
                weight.storage::<$t>(),
                grad.storage::<$t>(),
            );
            let (dx, dw) = match kind {
                ConvKind::Dense => conv::backward(x, w, grad, g, wanted),
                ConvKind::Depthwise => depthwise::backward(x, w, grad, g, wanted),
            };
            (
                dx.map(|v| flex_tensor(v, x_shape)),
                dw.map(|v| flex_tensor(v, w_shape)),
            )
        }};
    }
    match x.dtype() {
        DType::F64 => run!(f64),
        _ => run!(f32),
    }
}

/// The backward step of [`conv2d_autodiff`].
#[derive(Debug)]
struct Conv2dBackward;

impl Backward<Flex, 2> for Conv2dBackward {
    /// The input's and the weight's checkpoints, the sizes and the kernels.
    type State = (NodeId, NodeId, ConvGeometry, ConvKind);

    fn backward(
        self,
        ops: Ops<Self::State, 2>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let [node_x, node_w] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let (x_state, w_state, g, kind) = ops.state;
        let x = checkpointer.retrieve_node_output::<FlexTensor>(x_state);
        let w = checkpointer.retrieve_node_output::<FlexTensor>(w_state);
        let wanted = (node_x.is_some(), node_w.is_some());
        let (dx, dw) = backward(&x, &w, &grad, &g, kind, wanted);
        if let (Some(node), Some(dx)) = (node_x, dx) {
            grads.register::<Flex>(node.id, dx);
        }
        if let (Some(node), Some(dw)) = (node_w, dw) {
            grads.register::<Flex>(node.id, dw);
        }
    }
}

/// The convolution (no bias) under autodiff; `x` and `weight` share a [`supported`] element
/// type and match `g`.
pub(super) fn conv2d_autodiff<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
    weight: FloatTensor<Autodiff<Flex, C>>,
    g: ConvGeometry,
    kind: ConvKind,
) -> FloatTensor<Autodiff<Flex, C>> {
    match Conv2dBackward
        .prepare::<C>([x.node.clone(), weight.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let x_state = prep.checkpoint(&x);
            let w_state = prep.checkpoint(&weight);
            let y = forward(&x.primitive, &weight.primitive, &g, kind);
            prep.finish((x_state, w_state, g, kind), y)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(&x.primitive, &weight.primitive, &g, kind)),
    }
}

/// What the backward step of [`batch_norm_autodiff`] keeps: the input (shared, not copied),
/// `γ`, the batch moments and the sizes.
#[derive(Debug, Clone)]
struct BatchNormState {
    x: FlexTensor,
    gamma: FlexTensor,
    mean: Vec<f64>,
    var: Vec<f64>,
    epsilon: f64,
    dims: batch_norm::Dims,
}

/// The backward step of [`batch_norm_autodiff`].
#[derive(Debug)]
struct BatchNormBackward;

impl Backward<Flex, 3> for BatchNormBackward {
    type State = BatchNormState;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node).to_contiguous();
        let s = ops.state;
        let wanted = (node_x.is_some(), node_gamma.is_some(), node_beta.is_some());
        let [n, c, hw] = s.dims;
        let (x, gamma) = (s.x.to_contiguous(), s.gamma.to_contiguous());
        macro_rules! run {
            ($t:ty) => {{
                let grads = batch_norm::backward(
                    x.storage::<$t>(),
                    grad.storage::<$t>(),
                    s.dims,
                    gamma.storage::<$t>(),
                    &s.mean,
                    &s.var,
                    s.epsilon,
                    wanted,
                );
                let x_shape = x.layout().shape().clone();
                (
                    grads
                        .x
                        .map(|v| FlexTensor::from_data(TensorData::new(v, x_shape))),
                    grads
                        .gamma
                        .map(|v| FlexTensor::from_data(TensorData::new(v, [c]))),
                    grads
                        .beta
                        .map(|v| FlexTensor::from_data(TensorData::new(v, [c]))),
                )
            }};
        }
        debug_assert_eq!(x.layout().shape().num_elements(), n * c * hw);
        let (dx, dgamma, dbeta) = match x.dtype() {
            DType::F64 => run!(f64),
            _ => run!(f32),
        };
        for (node, value) in [(node_x, dx), (node_gamma, dgamma), (node_beta, dbeta)] {
            if let (Some(node), Some(value)) = (node, value) {
                grads.register::<Flex>(node.id, value);
            }
        }
    }
}

/// Batch norm in training under autodiff: `(y, μ, σ²)` (biased `σ²`, per channel). `x` is
/// `[n, c, h, w]`; `x`, `gamma` and `beta` share a [`supported`] element type.
pub(super) fn batch_norm_autodiff<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
    gamma: FloatTensor<Autodiff<Flex, C>>,
    beta: FloatTensor<Autodiff<Flex, C>>,
    epsilon: f64,
) -> (FloatTensor<Autodiff<Flex, C>>, Vec<f64>, Vec<f64>) {
    let input = x.primitive.to_contiguous();
    let shape = input.layout().shape().clone();
    let dims = [shape[0], shape[1], shape[2] * shape[3]];
    let (g, b) = (
        gamma.primitive.to_contiguous(),
        beta.primitive.to_contiguous(),
    );
    macro_rules! run {
        ($t:ty) => {{
            let out = batch_norm::forward(
                input.storage::<$t>(),
                dims,
                g.storage::<$t>(),
                b.storage::<$t>(),
                epsilon,
            );
            (
                FlexTensor::from_data(TensorData::new(out.y, shape.clone())),
                out.mean,
                out.var,
            )
        }};
    }
    let (y, mean, var) = match input.dtype() {
        DType::F64 => run!(f64),
        _ => run!(f32),
    };
    let y = match BatchNormBackward
        .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let state = BatchNormState {
                x: input,
                gamma: g,
                mean: mean.clone(),
                var: var.clone(),
                epsilon,
                dims,
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(y),
    };
    (y, mean, var)
}

/// A pointwise operation whose backward step reads its input: its forward and backward slice
/// kernels in each [`supported`] element type (the GELU's and SiLU's).
#[derive(Debug, Clone, Copy)]
pub(super) struct Pointwise {
    forward_f32: fn(&[f32]) -> Vec<f32>,
    forward_f64: fn(&[f64]) -> Vec<f64>,
    backward_f32: fn(&[f32], &[f32]) -> Vec<f32>,
    backward_f64: fn(&[f64], &[f64]) -> Vec<f64>,
}

/// The exact GELU ([`gelu`]).
pub(super) const GELU: Pointwise = Pointwise {
    forward_f32: gelu::forward::<f32>,
    forward_f64: gelu::forward::<f64>,
    backward_f32: gelu::backward::<f32>,
    backward_f64: gelu::backward::<f64>,
};

/// SiLU ([`silu`]).
pub(super) const SILU: Pointwise = Pointwise {
    forward_f32: silu::forward::<f32>,
    forward_f64: silu::forward::<f64>,
    backward_f32: silu::backward::<f32>,
    backward_f64: silu::backward::<f64>,
};

/// `op`'s forward kernel on a tensor of a [`supported`] element type, shaped as the input.
pub(super) fn pointwise_forward(op: Pointwise, x: &FlexTensor) -> FlexTensor {
    let x = x.to_contiguous();
    let shape = x.layout().shape().clone();
    let y = match x.dtype() {
        DType::F64 => TensorData::new((op.forward_f64)(x.storage::<f64>()), shape),
        _ => TensorData::new((op.forward_f32)(x.storage::<f32>()), shape),
    };
    FlexTensor::from_data(y)
}

/// The backward step of [`pointwise_autodiff`]: keeps the input (shared, not copied).
#[derive(Debug)]
struct PointwiseBackward(Pointwise);

impl Backward<Flex, 1> for PointwiseBackward {
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node).to_contiguous();
        let Some(node) = node else { return };
        let x = ops.state.to_contiguous();
        let shape = x.layout().shape().clone();
        let op = self.0;
        let dx = match x.dtype() {
            DType::F64 => TensorData::new(
                (op.backward_f64)(x.storage::<f64>(), grad.storage::<f64>()),
                shape,
            ),
            _ => TensorData::new(
                (op.backward_f32)(x.storage::<f32>(), grad.storage::<f32>()),
                shape,
            ),
        };
        grads.register::<Flex>(node.id, FlexTensor::from_data(dx));
    }
}

/// `op` under autodiff; `x` has a [`supported`] element type.
pub(super) fn pointwise_autodiff<C: CheckpointStrategy>(
    op: Pointwise,
    x: FloatTensor<Autodiff<Flex, C>>,
) -> FloatTensor<Autodiff<Flex, C>> {
    match PointwiseBackward(op)
        .prepare::<C>([x.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let y = pointwise_forward(op, &x.primitive);
            prep.finish(x.primitive, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(pointwise_forward(op, &x.primitive)),
    }
}

/// [`layout::swap_middle`] of a 4-D tensor of a [`supported`] element type.
pub(super) fn swap_middle_forward(x: &FlexTensor) -> FlexTensor {
    let x = x.to_contiguous();
    let s = x.layout().shape().clone();
    let dims = [s[0], s[1], s[2], s[3]];
    let shape = [s[0], s[2], s[1], s[3]];
    match x.dtype() {
        DType::F64 => flex_tensor(layout::swap_middle(x.storage::<f64>(), dims), shape),
        _ => flex_tensor(layout::swap_middle(x.storage::<f32>(), dims), shape),
    }
}

/// The backward step of [`swap_middle_autodiff`]: the same swap of the gradient.
#[derive(Debug)]
struct SwapMiddleBackward;

impl Backward<Flex, 1> for SwapMiddleBackward {
    type State = ();

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        if let Some(node) = node {
            grads.register::<Flex>(node.id, swap_middle_forward(&grad));
        }
    }
}

/// [`swap_middle_forward`] under autodiff.
pub(super) fn swap_middle_autodiff<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
) -> FloatTensor<Autodiff<Flex, C>> {
    SwapMiddleBackward
        .prepare::<C>([x.node.clone()])
        .compute_bound()
        .stateless(swap_middle_forward(&x.primitive))
}

/// The backward step of [`softmax_autodiff`]: keeps the output.
#[derive(Debug)]
struct SoftmaxBackward;

impl Backward<Flex, 1> for SoftmaxBackward {
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        from_output_backward(ops, grads, softmax::backward, softmax::backward);
    }
}

/// The backward step of a row operation over the last axis that keeps its output `y`
/// ([`SoftmaxBackward`], [`LogSoftmaxBackward`]): `∂x` from `y` and `∂y` by `kernel`, in f64
/// or f32 as the values are, registered for the input.
fn from_output_backward(
    ops: Ops<FlexTensor, 1>,
    grads: &mut Gradients,
    f64_kernel: fn(&[f64], &[f64], usize) -> Vec<f64>,
    f32_kernel: fn(&[f32], &[f32], usize) -> Vec<f32>,
) {
    let [node] = ops.parents;
    let grad = grads.consume::<Flex>(&ops.node).to_contiguous();
    let Some(node) = node else { return };
    let y = ops.state.to_contiguous();
    let shape = y.layout().shape().clone();
    let row = *shape.last().expect("a row operation's output has an axis");
    let dx = match y.dtype() {
        DType::F64 => TensorData::new(
            f64_kernel(y.storage::<f64>(), grad.storage::<f64>(), row),
            shape,
        ),
        _ => TensorData::new(
            f32_kernel(y.storage::<f32>(), grad.storage::<f32>(), row),
            shape,
        ),
    };
    grads.register::<Flex>(node.id, FlexTensor::from_data(dx));
}

/// `forward` of `x`'s values under autodiff, with `backward` as its step, which keeps the output
/// (compute-bound: a checkpointing strategy keeps the output rather than recomputing it).
fn keeping_output<C: CheckpointStrategy, Bw: Backward<Flex, 1, State = FlexTensor>>(
    backward: Bw,
    x: FloatTensor<Autodiff<Flex, C>>,
    forward: impl FnOnce(FlexTensor) -> FlexTensor,
) -> FloatTensor<Autodiff<Flex, C>> {
    let node = x.node.clone();
    let y = forward(x.primitive);
    match backward.prepare::<C>([node]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(y.clone(), y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    }
}

/// The softmax over the last axis under autodiff: Flex's fused forward, the backward step of
/// [`softmax::backward`] from the kept output. `x` has a [`supported`] element type.
pub(super) fn softmax_autodiff<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
) -> FloatTensor<Autodiff<Flex, C>> {
    let last = x.primitive.layout().shape().num_dims() - 1;
    keeping_output::<C, _>(SoftmaxBackward, x, |x| {
        <Flex as ActivationOps<Flex>>::softmax(x, last)
    })
}

/// [`log_softmax::forward`] over the last axis of a tensor of a [`supported`] element type.
pub(super) fn log_softmax_forward(x: &FlexTensor) -> FlexTensor {
    let x = x.to_contiguous();
    let shape = x.layout().shape().clone();
    let row = *shape.last().expect("a log-softmax's input has an axis");
    let y = match x.dtype() {
        DType::F64 => TensorData::new(log_softmax::forward(x.storage::<f64>(), row), shape),
        _ => TensorData::new(log_softmax::forward(x.storage::<f32>(), row), shape),
    };
    FlexTensor::from_data(y)
}

/// The backward step of [`log_softmax_autodiff`]: keeps the output.
#[derive(Debug)]
struct LogSoftmaxBackward;

impl Backward<Flex, 1> for LogSoftmaxBackward {
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        from_output_backward(ops, grads, log_softmax::backward, log_softmax::backward);
    }
}

/// The log-softmax over the last axis under autodiff: [`log_softmax::forward`], and the
/// backward step of [`log_softmax::backward`] from the kept output. `x` has a [`supported`]
/// element type.
pub(super) fn log_softmax_autodiff<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
) -> FloatTensor<Autodiff<Flex, C>> {
    keeping_output::<C, _>(LogSoftmaxBackward, x, |x| log_softmax_forward(&x))
}

/// What the layer norm's backward step keeps: the input, `γ` and `ε`.
#[derive(Debug, Clone)]
struct LayerNormState {
    x: FlexTensor,
    gamma: FlexTensor,
    epsilon: f64,
}

/// The backward step of [`layer_norm_autodiff`].
#[derive(Debug)]
struct LayerNormBackward;

impl Backward<Flex, 3> for LayerNormBackward {
    type State = LayerNormState;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node).to_contiguous();
        let LayerNormState { x, gamma, epsilon } = ops.state;
        let (x, gamma) = (x.to_contiguous(), gamma.to_contiguous());
        let shape = x.layout().shape().clone();
        let d = gamma.layout().shape().num_elements();
        macro_rules! run {
            ($t:ty) => {{
                let g = layer_norm::backward(
                    x.storage::<$t>(),
                    gamma.storage::<$t>(),
                    grad.storage::<$t>(),
                    epsilon,
                );
                (
                    TensorData::new(g.dx, shape),
                    TensorData::new(g.dgamma, [d]),
                    TensorData::new(g.dbeta, [d]),
                )
            }};
        }
        let (dx, dgamma, dbeta) = match x.dtype() {
            DType::F64 => run!(f64),
            _ => run!(f32),
        };
        for (node, value) in [(node_x, dx), (node_gamma, dgamma), (node_beta, dbeta)] {
            if let Some(node) = node {
                grads.register::<Flex>(node.id, FlexTensor::from_data(value));
            }
        }
    }
}

/// Layer norm over the last axis under autodiff, `γ·x̂ + β`: Flex's fused forward, the backward
/// step of [`layer_norm::backward`] from the kept input. `x`, `gamma` and `beta` share a
/// [`supported`] element type; `gamma` and `beta` are `[d]`, `d` the last axis of `x`.
pub(super) fn layer_norm_autodiff<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
    gamma: FloatTensor<Autodiff<Flex, C>>,
    beta: FloatTensor<Autodiff<Flex, C>>,
    epsilon: f64,
) -> FloatTensor<Autodiff<Flex, C>> {
    let forward = |x: &FlexTensor, gamma: &FlexTensor, beta: FlexTensor| {
        <Flex as ModuleOps<Flex>>::layer_norm(x.clone(), gamma.clone(), Some(beta), epsilon)
    };
    match LayerNormBackward
        .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let y = forward(&x.primitive, &gamma.primitive, beta.primitive);
            let state = LayerNormState {
                x: x.primitive,
                gamma: gamma.primitive,
                epsilon,
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => {
            prep.finish(forward(&x.primitive, &gamma.primitive, beta.primitive))
        }
    }
}

/// `(x + branch, LayerNorm(x + branch))` over the last axis, both written by one pass of
/// [`layer_norm::add_forward`]. All four share a [`supported`] element type; `x` and `branch`
/// one shape; `gamma` and `beta` are `[d]`, `d` the last axis.
pub(super) fn add_layer_norm_forward(
    x: &FlexTensor,
    branch: &FlexTensor,
    gamma: &FlexTensor,
    beta: &FlexTensor,
    epsilon: f64,
) -> (FlexTensor, FlexTensor) {
    let (x, branch) = (x.to_contiguous(), branch.to_contiguous());
    let (gamma, beta) = (gamma.to_contiguous(), beta.to_contiguous());
    let shape = x.layout().shape().clone();
    macro_rules! run {
        ($t:ty) => {{
            let (sum, y) = layer_norm::add_forward(
                x.storage::<$t>(),
                branch.storage::<$t>(),
                gamma.storage::<$t>(),
                beta.storage::<$t>(),
                epsilon,
            );
            (
                FlexTensor::from_data(TensorData::new(sum, shape.clone())),
                FlexTensor::from_data(TensorData::new(y, shape)),
            )
        }};
    }
    match x.dtype() {
        DType::F64 => run!(f64),
        _ => run!(f32),
    }
}

/// The backward step of the residual add in [`add_layer_norm_autodiff`]: `∂x = ∂branch = ∂s`
/// (the two sides share one shape).
#[derive(Debug)]
struct ResidualAddBackward;

impl Backward<Flex, 2> for ResidualAddBackward {
    type State = ();

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        match ops.parents {
            [Some(x), Some(branch)] => {
                grads.register::<Flex>(x.id, grad.clone());
                grads.register::<Flex>(branch.id, grad);
            }
            [Some(one), None] | [None, Some(one)] => grads.register::<Flex>(one.id, grad),
            [None, None] => {}
        }
    }
}

/// A float tensor of `Autodiff<Flex, C>`.
type AdTensor<C> = FloatTensor<Autodiff<Flex, C>>;

/// The residual add and the layer norm after it under autodiff, `s = x + branch` and
/// `γ·ŝ + β`: both from one forward pass ([`add_layer_norm_forward`]), registered as two steps
/// of the graph, the add (its gradient passed to both sides) and the norm of `s` (the backward
/// step of [`layer_norm_autodiff`], from the kept `s`), so that `s`'s gradient gathers the
/// norm's and the rest of the residual stream's as burn's own add would.
pub(super) fn add_layer_norm_autodiff<C: CheckpointStrategy>(
    x: AdTensor<C>,
    branch: AdTensor<C>,
    gamma: AdTensor<C>,
    beta: AdTensor<C>,
    epsilon: f64,
) -> (AdTensor<C>, AdTensor<C>) {
    let (sum, y) = add_layer_norm_forward(
        &x.primitive,
        &branch.primitive,
        &gamma.primitive,
        &beta.primitive,
        epsilon,
    );
    let sum = ResidualAddBackward
        .prepare::<C>([x.node.clone(), branch.node.clone()])
        .compute_bound()
        .stateless(sum);
    let normed = match LayerNormBackward
        .prepare::<C>([sum.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let state = LayerNormState {
                x: sum.primitive.clone(),
                gamma: gamma.primitive,
                epsilon,
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(y),
    };
    (sum, normed)
}

/// `t` itself, or a contiguous copy when one of its strides is negative (a flipped view): what
/// [`matrices`] reads.
fn strided(t: &FlexTensor) -> FlexTensor {
    match t.layout().strides().iter().all(|&s| s >= 0) {
        true => t.clone(),
        false => t.to_contiguous(),
    }
}

/// The element types a tensor's storage is read in here.
trait Stored: Real {
    /// `t`'s whole buffer.
    fn stored(t: &FlexTensor) -> &[Self];
}

impl Stored for f32 {
    fn stored(t: &FlexTensor) -> &[Self] {
        t.storage()
    }
}

impl Stored for f64 {
    fn stored(t: &FlexTensor) -> &[Self] {
        t.storage()
    }
}

/// The matrices of a tensor of rank ≥ 2 with non-negative strides (see [`strided`]): one per
/// index of its leading dimensions, its last two dimensions' strides.
fn matrices<T: Stored>(t: &FlexTensor) -> matmul::Matrices<'_, T> {
    let layout = t.layout();
    let (dims, strides) = (layout.shape(), layout.strides());
    let rank = dims.num_dims();
    let mut offsets = vec![layout.start_offset()];
    for axis in 0..rank - 2 {
        let stride = strides[axis] as usize;
        offsets = offsets
            .iter()
            .flat_map(|&o| (0..dims[axis]).map(move |i| o + i * stride))
            .collect();
    }
    matmul::Matrices {
        data: T::stored(t),
        offsets,
        strides: (strides[rank - 2] as usize, strides[rank - 1] as usize),
    }
}

/// Whether [`matmul_forward`] takes `lhs · rhs` of these shapes: ranks of at least 2, the same
/// leading dimensions (no broadcast), the inner sizes equal.
pub(super) fn matmul_covered(lhs: &[usize], rhs: &[usize]) -> bool {
    let rank = lhs.len();
    rank >= 2
        && rhs.len() == rank
        && lhs[..rank - 2] == rhs[..rank - 2]
        && lhs[rank - 1] == rhs[rank - 2]
}

/// Which operand of a [`product`] is read transposed (its last two dimensions swapped).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Transposed {
    Neither,
    Lhs,
    Rhs,
}

/// `lhs · rhs` over the last two dimensions, one of them read transposed by `t` (a view: the
/// strides swapped), the output written once (see [`matmul`]); the leading dimensions are
/// `lhs`'s. The operands share a [`supported`] element type.
fn product(lhs: &FlexTensor, rhs: &FlexTensor, t: Transposed) -> FlexTensor {
    let (lhs, rhs) = (strided(lhs), strided(rhs));
    let (l, r) = (lhs.layout().shape(), rhs.layout().shape());
    let rank = l.num_dims();
    let [m, k] = match t {
        Transposed::Lhs => [l[rank - 1], l[rank - 2]],
        _ => [l[rank - 2], l[rank - 1]],
    };
    let n = match t {
        Transposed::Rhs => r[rank - 2],
        _ => r[rank - 1],
    };
    let mut shape: Vec<usize> = (0..rank - 2).map(|a| l[a]).collect();
    shape.extend([m, n]);
    macro_rules! run {
        ($t:ty) => {{
            let (a, b) = (matrices::<$t>(&lhs), matrices::<$t>(&rhs));
            let values = match t {
                Transposed::Neither => matmul::product([m, n, k], &a, &b),
                Transposed::Lhs => matmul::product([m, n, k], &a.transposed(), &b),
                Transposed::Rhs => matmul::product([m, n, k], &a, &b.transposed()),
            };
            FlexTensor::from_data(TensorData::new(values, shape))
        }};
    }
    match lhs.dtype() {
        DType::F64 => run!(f64),
        _ => run!(f32),
    }
}

/// `lhs · rhs` over the last two dimensions, the output written once (see [`matmul`]). The
/// tensors pass [`matmul_covered`] and share a [`supported`] element type.
pub(super) fn matmul_forward(lhs: &FlexTensor, rhs: &FlexTensor) -> FlexTensor {
    product(lhs, rhs, Transposed::Neither)
}

/// What [`MatmulBackward`] keeps: `lhs` when `rhs` takes a gradient, `rhs` when `lhs` does.
#[derive(Debug, Clone)]
struct MatmulState {
    lhs: Option<FlexTensor>,
    rhs: Option<FlexTensor>,
}

impl MatmulState {
    /// What the backward step of `lhs · rhs` needs: each side's values only when the other
    /// side takes a gradient.
    fn keep<C: CheckpointStrategy>(
        lhs: FloatTensor<Autodiff<Flex, C>>,
        rhs: FloatTensor<Autodiff<Flex, C>>,
    ) -> Self {
        let untracked = (
            lhs.node.requirement.is_none(),
            rhs.node.requirement.is_none(),
        );
        Self {
            lhs: (!untracked.1).then_some(lhs.primitive),
            rhs: (!untracked.0).then_some(rhs.primitive),
        }
    }

    /// Registers `∂lhs = ∂y · rhsᵀ` and `∂rhs = lhsᵀ · ∂y` for the parents that take them.
    fn register(
        self,
        grad: &FlexTensor,
        [node_lhs, node_rhs]: [Option<NodeId>; 2],
        grads: &mut Gradients,
    ) {
        if let (Some(node), Some(rhs)) = (node_lhs, &self.rhs) {
            grads.register::<Flex>(node, product(grad, rhs, Transposed::Rhs));
        }
        if let (Some(node), Some(lhs)) = (node_rhs, &self.lhs) {
            grads.register::<Flex>(node, product(lhs, grad, Transposed::Lhs));
        }
    }
}

/// The backward step of [`matmul_autodiff`]: `∂lhs = ∂y · rhsᵀ`, `∂rhs = lhsᵀ · ∂y`.
#[derive(Debug)]
struct MatmulBackward;

impl Backward<Flex, 2> for MatmulBackward {
    type State = MatmulState;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let parents = ops.parents.map(|node| node.map(|node| node.id));
        ops.state.register(&grad, parents, grads);
    }
}

/// `lhs · rhs` under autodiff through [`matmul_forward`], with [`MatmulBackward`]; the tensors
/// pass [`matmul_covered`] and share a [`supported`] element type.
pub(super) fn matmul_autodiff<C: CheckpointStrategy>(
    lhs: FloatTensor<Autodiff<Flex, C>>,
    rhs: FloatTensor<Autodiff<Flex, C>>,
) -> FloatTensor<Autodiff<Flex, C>> {
    let y = matmul_forward(&lhs.primitive, &rhs.primitive);
    match MatmulBackward
        .prepare::<C>([lhs.node.clone(), rhs.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(MatmulState::keep::<C>(lhs, rhs), y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    }
}

/// The linear layer `x·w + b` (see [`matmul::linear`]): `x` `[rows, k]`, `w` `[k, n]`, `bias`
/// `[n]`, one [`supported`] element type.
pub(super) fn linear_forward(x: &FlexTensor, w: &FlexTensor, bias: &FlexTensor) -> FlexTensor {
    let (x, w, bias) = (strided(x), strided(w), bias.to_contiguous());
    let ([rows, k], n) = (x.layout().shape().dims::<2>(), w.layout().shape()[1]);
    let (dims, shape) = ([rows, n, k], [rows, n]);
    macro_rules! run {
        ($t:ty) => {
            FlexTensor::from_data(TensorData::new(
                matmul::linear::<$t>(dims, &matrices(&x), &matrices(&w), bias.storage()),
                shape,
            ))
        };
    }
    match x.dtype() {
        DType::F64 => run!(f64),
        _ => run!(f32),
    }
}

/// The backward step of [`linear_autodiff`]: [`MatmulBackward`]'s for `x` and `w`, and
/// `∂b = Σ_rows ∂y` ([`matmul::column_sums`]).
#[derive(Debug)]
struct LinearBackward;

impl Backward<Flex, 3> for LinearBackward {
    /// `x` as `lhs`, `w` as `rhs`.
    type State = MatmulState;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_w, node_b] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let ids = [node_x, node_w].map(|node| node.map(|node| node.id));
        ops.state.register(&grad, ids, grads);
        if let Some(node) = node_b {
            let grad = grad.to_contiguous();
            let n = grad.layout().shape()[1];
            let db = match grad.dtype() {
                DType::F64 => TensorData::new(matmul::column_sums(grad.storage::<f64>(), n), [n]),
                _ => TensorData::new(matmul::column_sums(grad.storage::<f32>(), n), [n]),
            };
            grads.register::<Flex>(node.id, FlexTensor::from_data(db));
        }
    }
}

/// The linear layer under autodiff through [`linear_forward`], with [`LinearBackward`]: `x`
/// `[rows, k]`, `w` `[k, n]`, `bias` `[n]`, one [`supported`] element type.
pub(super) fn linear_autodiff<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
    w: FloatTensor<Autodiff<Flex, C>>,
    bias: FloatTensor<Autodiff<Flex, C>>,
) -> FloatTensor<Autodiff<Flex, C>> {
    let y = linear_forward(&x.primitive, &w.primitive, &bias.primitive);
    match LinearBackward
        .prepare::<C>([x.node.clone(), w.node.clone(), bias.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(MatmulState::keep::<C>(x, w), y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    }
}
