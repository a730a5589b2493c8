//! Global average pooling, `[N, C, H, W]` → `[N, C]`, as one autodiff operation whose backward
//! step spreads each channel's gradient evenly over its `H·W` positions.
//!
//! Why this file exists: `layers::global_avg_pool` composes it of two means (over the width,
//! then the height) and a reshape; burn-autodiff's rule for a mean is a tensor of ones made,
//! scaled, and multiplied by the gradient summed over the axis, so the pool costs twelve
//! operations a pass on a fusion backend, where every operation costs the host the same
//! whatever its size (docs/gpu.md, "The thirteenth cut"). Here the forward is one mean over the
//! flattened positions between two reshapes, and the backward a reshape, a scale and a
//! broadcast.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::TensorPrimitive;

/// The backward step of [`global_avg_pool_op`]: one parent, the feature map; its state the
/// map's shape.
#[derive(Debug)]
struct GlobalAvgPoolBackward;

impl<I: Backend> Backward<I, 1> for GlobalAvgPoolBackward {
    type State = [usize; 4];

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<I>(&ops.node);
        let Some(node) = node else { return };
        let [n, c, h, w] = ops.state;
        let dx = Tensor::<I, 2>::from_primitive(TensorPrimitive::Float(grad))
            .reshape([n, c, 1, 1])
            .mul_scalar(1.0 / (h * w) as f64)
            .expand([n, c, h, w]);
        grads.register::<I>(node.id, dx.into_primitive().tensor());
    }
}

/// The mean of each channel of each image over its positions, under autodiff on any backend.
///
/// # Shapes
/// - `x`: `[N, C, H, W]`; output: `[N, C]`
pub fn global_avg_pool_op<I: Backend, C: CheckpointStrategy>(
    x: Tensor<Autodiff<I, C>, 4>,
) -> Tensor<Autodiff<I, C>, 2> {
    let dims = x.dims();
    let [n, c, h, w] = dims;
    let x = x.into_primitive().tensor();
    let node = x.node.clone();
    let pooled = Tensor::<I, 4>::from_primitive(TensorPrimitive::Float(x.primitive))
        .reshape([n, c, h * w])
        .mean_dim(2)
        .reshape([n, c])
        .into_primitive()
        .tensor();
    let out = match GlobalAvgPoolBackward
        .prepare::<C>([node])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(dims, pooled),
        OpsKind::UnTracked(prep) => prep.finish(pooled),
    };
    Tensor::from_primitive(TensorPrimitive::Float(out))
}
