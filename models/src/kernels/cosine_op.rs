//! The mean cosine similarity of rows to fixed targets,
//! `c = mean_i p_i·z_i / (max(‖p_i‖, ε)·max(‖z_i‖, ε))`, as one autodiff operation whose gradient
//! reaches the rows `p` only: the targets are a stop-gradient's (BYOL's and SimSiam's negative
//! cosine loss).
//!
//! Why this file exists: composed of burn's tensor operations (`loss::NegativeCosineLoss`: two
//! normalisations, a product, a row sum and a mean), the loss is 17 operations forward and about
//! 28 backward a call on a fusion backend, autodiff's rule for each (the clamps' masks, the
//! divisions' two-sided rules, the sums' expansions): with BYOL's two calls, 91 of its step's 329
//! (docs/gpu.md, "The twelfth cut"). Here the forward is the three row sums `Σp²`, `Σz²`, `Σp·z`
//! and a few `[N, 1]` values, and the backward one element-wise expression, the gradient
//! written out:
//! `∂p_i = (g/N)·(z_i·a_i − p_i·b_i)` with `a_i = 1/(n_p·n_z)` and `b_i = c_i/n_p²`
//! (`n_p = max(‖p_i‖, ε)`, `c_i` the row's cosine), `b_i = 0` where `‖p_i‖² < ε²` (the clamp
//! passes no gradient to the norm there, as burn's `clamp_min` rule does).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::TensorPrimitive;

/// What the backward step keeps: `z`, `p`, and per row `a_i` and `b_i` (`[N, 1]`).
#[derive(Debug, Clone)]
struct State<I: Backend> {
    p: Tensor<I, 2>,
    z: Tensor<I, 2>,
    a: Tensor<I, 2>,
    b: Tensor<I, 2>,
}

/// The backward step of [`mean_cosine_op`]: one parent, the rows `p`.
#[derive(Debug)]
struct MeanCosineBackward;

impl<I: Backend> Backward<I, 1> for MeanCosineBackward {
    type State = State<I>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<I>(&ops.node);
        let Some(node) = node else { return };
        let State { p, z, a, b } = ops.state;
        let rows = p.dims()[0];
        // The mean's gradient, `g/N` a row.
        let g = Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(grad))
            .div_scalar(rows as f64)
            .reshape([1, 1]);
        let dp = (z * a - p * b) * g;
        grads.register::<I>(node.id, dp.into_primitive().tensor());
    }
}

/// `mean_i cos(p_i, z_i)` under autodiff on any backend, each norm clamped below at `epsilon`
/// (`max(‖x‖, ε)`, as `loss::l2_normalize` takes it); the gradient reaches `p` only (`z` is
/// read as a constant, its graph not followed).
///
/// # Shapes
/// - `p`, `z`: `[N, D]`; output: `[1]`
///
/// # Panics
/// If `p` and `z` differ in shape.
pub fn mean_cosine_op<I: Backend, C: CheckpointStrategy>(
    p: Tensor<Autodiff<I, C>, 2>,
    z: Tensor<Autodiff<I, C>, 2>,
    epsilon: f64,
) -> Tensor<Autodiff<I, C>, 1> {
    assert_eq!(p.dims(), z.dims(), "mean cosine: p and z differ in shape");
    let z = z.inner();
    let p = p.into_primitive().tensor();
    let node = p.node.clone();
    let p = Tensor::<I, 2>::from_primitive(TensorPrimitive::Float(p.primitive));
    let floor = epsilon * epsilon;
    let row_sum = |a: &Tensor<I, 2>, b: &Tensor<I, 2>| (a.clone() * b.clone()).sum_dim(1);
    let (pp, zz, pz) = (row_sum(&p, &p), row_sum(&z, &z), row_sum(&p, &z));
    // `max(Σp², ε²)` by the mask the backward step reads too (on a fusion backend a clamp is
    // a comparison and a fill: the comparison made once).
    let clamped = pp.clone().lower_elem(floor);
    let np2 = pp.mask_fill(clamped.clone(), floor);
    // `1/(n_p·n_z)`, one square root of the product of the clamped squares.
    let a = (np2.clone() * zz.clamp_min(floor)).sqrt().recip();
    let cosine = pz * a.clone();
    let mean = cosine.clone().mean().into_primitive().tensor();
    let out = match MeanCosineBackward
        .prepare::<C>([node])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let b = (cosine / np2).mask_fill(clamped, 0.0);
            prep.finish(State { p, z, a, b }, mean)
        }
        OpsKind::UnTracked(prep) => prep.finish(mean),
    };
    Tensor::from_primitive(TensorPrimitive::Float(out))
}
