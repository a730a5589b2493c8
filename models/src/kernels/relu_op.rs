//! ReLU as one autodiff operation that keeps its *output* for the backward step.
//!
//! Why this file exists: burn-autodiff's rule for `relu` (0.21) keeps the operation's input for
//! its backward step, although the step needs only where the values were positive, which the
//! output says as well (`relu_backward(output, ∂y)` masks where `output ≤ 0`, and
//! `relu(x) ≤ 0` exactly where `x ≤ 0`). In the ResNets, WideResNets and VGGs, which call it
//! through [`super::relu`], the output is kept anyway — the next convolution keeps its input —
//! so burn's rule held one more activation per ReLU: the batch norm's output (or the residual
//! sum) before it. PyTorch keeps the output, and that one
//! tensor per ReLU was the whole difference between the activations our ResNet-18 step kept and
//! PyTorch's (1.45–1.52× at batch 8; docs/gpu.md, "Memory of a step"). Same values and
//! gradients, bit for bit: the same `relu` and `relu_backward` of the inner backend run, the
//! mask taken from the output instead of the input.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;

/// The backward step of [`relu_op`]; its state is the forward's output.
#[derive(Debug)]
struct ReluOpBackward;

impl<I: Backend> Backward<I, 1> for ReluOpBackward {
    type State = FloatTensor<I>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<I>(&ops.node);
        if let Some(node) = node {
            grads.register::<I>(node.id, I::relu_backward(ops.state, grad));
        }
    }
}

/// `max(x, 0)` under autodiff on any backend, its output kept for the backward step (the
/// gradient is `∂y` where the output is positive, 0 elsewhere).
///
/// # Shapes
/// - `x`, output: any, the same
pub fn relu_op<I: Backend, C: CheckpointStrategy, const D: usize>(
    x: Tensor<Autodiff<I, C>, D>,
) -> Tensor<Autodiff<I, C>, D> {
    let x = x.into_primitive().tensor();
    let node = x.node.clone();
    let y = I::relu(x.primitive);
    // Compute-bound in burn's sense: a checkpointing strategy keeps the state rather than
    // recomputing the operation (the state is the output, which the next layer keeps anyway).
    let y = match ReluOpBackward
        .prepare::<C>([node])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(y.clone(), y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    };
    Tensor::from_primitive(TensorPrimitive::Float(y))
}
