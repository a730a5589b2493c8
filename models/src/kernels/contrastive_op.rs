//! The two contrastive losses of SimCLR and MoCo, each as one autodiff operation whose backward
//! step is written out: NT-Xent over a two-view batch ([`nt_xent_op`]) and InfoNCE against a
//! queue of keys ([`info_nce_op`]). Both normalise their rows (NT-Xent's projections,
//! InfoNCE's queries; its keys and queue are unit rows as given) as `x / √max(Σx², ε²)` (PyTorch's
//! `F.normalize`), take a cross-entropy over cosine similarities divided by a temperature `τ`,
//! and average it over the anchors.
//!
//! Why this file exists: composed of burn's tensor operations (`loss::NtXentLoss`,
//! `loss::InfoNceLoss`) each loss is its normalisation's five operations, the similarities, the
//! masks and indices built each step, the log-softmax or log-sum-exp and the gather, and
//! burn-autodiff's rule for every one of them backward (the clamps' masks, the divisions'
//! two-sided rules, the sums' expansions, a scatter into zeros for the gather): about 58
//! operations of SimCLR's step and 80 of MoCo v2's on a fusion backend, where every operation
//! costs the host the same whatever its size (docs/gpu.md, "The thirteenth cut"). Here the
//! forward is the same arithmetic on the inner backend, without autodiff's records, and the
//! backward the gradient in closed form:
//!
//! - rows `ẑ = z·r` with `r = 1/√max(Σz², ε²)`: `∂z = r·(∂ẑ − ẑ·(ẑ·∂ẑ))`, the projection left out
//!   where `Σz² < ε²` (the clamp passes no gradient to the norm there, as burn's `clamp_min`
//!   rule does);
//! - logits `l`, `loss = mean_i (ln Σ_j e^(l_ij) − l_i,pos(i))`: `∂l = (softmax(l) − y)·g/M`
//!   for `M` anchors, `y` the positives' one-hot rows.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::{DType, TensorData, TensorPrimitive};

/// An anchor's logit with itself in NT-Xent (filled in, as `loss::similarity`'s mask): finite
/// in f32 and f64, so that no `inf − inf` appears, and far enough below every other logit that
/// its exponential is exactly zero (in f16 it rounds to `−∞`, whose exponential is zero too;
/// nothing multiplies it).
const MASKED_LOGIT: f64 = -1.0e9;

/// Rows normalised to unit length (`x·r`, `r = 1/√max(Σx², ε²)`), with what their backward
/// step needs.
#[derive(Debug, Clone)]
struct Normalised<I: Backend> {
    /// `[M, D]`: the unit rows.
    rows: Tensor<I, 2>,
    /// `[M, 1]`: `r`.
    scale: Tensor<I, 2>,
    /// `[M, 1]`: where `Σx² < ε²` (the norm clamped: no gradient through it).
    clamped: Tensor<I, 2, Bool>,
}

impl<I: Backend> Normalised<I> {
    /// # Shapes
    /// - `x`: `[M, D]`
    fn new(x: Tensor<I, 2>, epsilon: f64) -> Self {
        let floor = epsilon * epsilon;
        let squares = (x.clone() * x.clone()).sum_dim(1);
        let clamped = squares.clone().lower_elem(floor);
        let scale = squares.mask_fill(clamped.clone(), floor).sqrt().recip();
        Self {
            rows: x * scale.clone(),
            scale,
            clamped,
        }
    }

    /// `∂x` given `∂` of the unit rows.
    ///
    /// # Shapes
    /// - `grad`: `[M, D]` → `[M, D]`
    fn backward(self, grad: Tensor<I, 2>) -> Tensor<I, 2> {
        let along = (self.rows.clone() * grad.clone())
            .sum_dim(1)
            .mask_fill(self.clamped, 0.0);
        (grad - self.rows * along) * self.scale
    }
}

/// What NT-Xent's backward step keeps.
#[derive(Debug, Clone)]
struct NtXentState<I: Backend> {
    normalised: Normalised<I>,
    /// `[M, D]`: each anchor's positive, the unit rows with the views' halves swapped.
    partners: Tensor<I, 2>,
    /// `[M, M]`: `e^(l − m)` a row (zero on the diagonal).
    exponentials: Tensor<I, 2>,
    /// `[M, 1]`: their row sums.
    sums: Tensor<I, 2>,
    temperature: f64,
}

/// The backward step of [`nt_xent_op`]: one parent, the stacked views `z`.
#[derive(Debug)]
struct NtXentBackward;

impl<I: Backend> Backward<I, 1> for NtXentBackward {
    type State = NtXentState<I>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<I>(&ops.node);
        let Some(node) = node else { return };
        let NtXentState {
            normalised,
            partners,
            exponentials,
            sums,
            temperature,
        } = ops.state;
        let anchors = partners.dims()[0];
        // `∂l = (softmax − y)·g/M` and the logits are `ẑẑᵀ/τ`, so `∂ẑ = (∂l + ∂lᵀ)·ẑ/τ`; the
        // one-hot rows `y` swap the views' halves and are symmetric, so their share is
        // `−2·g/(Mτ)` times the partners.
        let g = Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(grad))
            .mul_scalar(1.0 / (anchors as f64 * temperature))
            .reshape([1, 1]);
        let softmax = exponentials / sums * g.clone();
        let rows = normalised.rows.clone();
        let d_rows =
            (softmax.clone() + softmax.transpose()).matmul(rows) - partners * g.mul_scalar(2.0);
        let dz = normalised.backward(d_rows);
        grads.register::<I>(node.id, dz.into_primitive().tensor());
    }
}

/// NT-Xent (SimCLR's loss) on a two-view batch stacked as `z = [z1; z2]` under autodiff on any
/// backend: rows normalised (norms clamped below at `epsilon`), logits `ẑ_i·ẑ_j/τ` over every
/// `j ≠ i`, each anchor's positive the other view of its image (row `i ± B`), and the mean over
/// the `2B` anchors of `−log softmax` at the positive — `loss::NtXentLoss`'s value, with its
/// gradient written out.
///
/// # Shapes
/// - `z`: `[2B, D]`, view 1's rows then view 2's; output: `[1]`
///
/// # Panics
/// If `z` has an odd or zero number of rows.
pub fn nt_xent_op<I: Backend, C: CheckpointStrategy>(
    z: Tensor<Autodiff<I, C>, 2>,
    temperature: f64,
    epsilon: f64,
) -> Tensor<Autodiff<I, C>, 1> {
    let [anchors, _] = z.dims();
    assert!(
        anchors > 0 && anchors % 2 == 0,
        "NT-Xent: {anchors} rows are not two views of a batch"
    );
    let batch = anchors / 2;
    let z = z.into_primitive().tensor();
    let node = z.node.clone();
    let z = Tensor::<I, 2>::from_primitive(TensorPrimitive::Float(z.primitive));
    let normalised = Normalised::new(z, epsilon);
    let rows = normalised.rows.clone();
    let device = rows.device();
    let inverse = 1.0 / temperature;
    // Each anchor's positive by a row product with its partner (the views' halves swapped),
    // and the diagonal's mask from one index of the rows compared with itself: both made on
    // the device from `M` values, where one-hot or mask matrices from the host would be `M²`.
    let partners = Tensor::cat(
        vec![
            rows.clone().narrow(0, batch, batch),
            rows.clone().narrow(0, 0, batch),
        ],
        0,
    );
    let positive = (rows.clone() * partners.clone())
        .sum_dim(1)
        .mul_scalar(inverse);
    let index = Tensor::<I, 1>::from_data(
        TensorData::new(
            (0..anchors).map(|i| i as f32).collect::<Vec<_>>(),
            [anchors],
        ),
        (&device, DType::F32),
    );
    let diagonal =
        (index.clone().reshape([anchors, 1]) - index.reshape([1, anchors])).equal_elem(0.0);
    let logits = rows
        .clone()
        .matmul(rows.transpose())
        .mul_scalar(inverse)
        .mask_fill(diagonal, MASKED_LOGIT);
    let max = logits.clone().max_dim(1);
    let exponentials = (logits - max.clone()).exp();
    let sums = exponentials.clone().sum_dim(1);
    let loss = (sums.clone().log() + max - positive)
        .mean()
        .into_primitive()
        .tensor();
    let out = match NtXentBackward
        .prepare::<C>([node])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(
            NtXentState {
                normalised,
                partners,
                exponentials,
                sums,
                temperature,
            },
            loss,
        ),
        OpsKind::UnTracked(prep) => prep.finish(loss),
    };
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

/// What InfoNCE's backward step keeps.
#[derive(Debug, Clone)]
struct InfoNceState<I: Backend> {
    normalised: Normalised<I>,
    /// `[N, D]`: the unit keys.
    keys: Tensor<I, 2>,
    /// `[K, D]`: the queue.
    queue: Tensor<I, 2>,
    /// `[N, K]`: `e^(l − m)` of the negatives' logits.
    negatives: Tensor<I, 2>,
    /// `[N, 1]`: `e^(l − m)` of the positive's logit.
    positive: Tensor<I, 2>,
    /// `[N, 1]`: the sum of all of a row's.
    sums: Tensor<I, 2>,
    temperature: f64,
}

/// The backward step of [`info_nce_op`]: one parent, the queries `q`.
#[derive(Debug)]
struct InfoNceBackward;

impl<I: Backend> Backward<I, 1> for InfoNceBackward {
    type State = InfoNceState<I>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<I>(&ops.node);
        let Some(node) = node else { return };
        let InfoNceState {
            normalised,
            keys,
            queue,
            negatives,
            positive,
            sums,
            temperature,
        } = ops.state;
        let rows = keys.dims()[0];
        // `∂l = (softmax − y)·g/N` over `[positive, negatives]`; the logits are `q̂·k̂/τ` and
        // `q̂·queueᵀ/τ`, so `∂q̂ = (∂l₊·k̂ + ∂l₋·queue)/τ`.
        let g = Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(grad))
            .mul_scalar(1.0 / (rows as f64 * temperature))
            .reshape([1, 1]);
        let scale = g.clone() / sums;
        let d_positive = positive * scale.clone() - g;
        let dq = keys * d_positive + (negatives * scale).matmul(queue);
        let dq = normalised.backward(dq);
        grads.register::<I>(node.id, dq.into_primitive().tensor());
    }
}

/// What [`info_nce_op`] returns: the loss `[1]` and the unit queries `[N, D]`, untracked.
pub type LossAndUnitQueries<B> = (Tensor<B, 1>, Tensor<B, 2>);

/// InfoNCE against a queue (MoCo's loss) under autodiff on any backend: queries `q` normalised
/// (norms clamped below at `epsilon`), the keys `k̂` and the queue's rows used as given (unit
/// rows: MoCo normalises its keys once, for the loss and for its queue; `loss::InfoNceLoss`
/// normalises a caller's keys before it calls this), logits `[q̂_i·k̂_i, q̂_i·queue_j] / τ`
/// with the positive at index 0, and the mean over the rows of `−log softmax` at the positive —
/// `loss::InfoNceLoss`'s value, with its gradient written out. Only `q` gets a gradient: the
/// keys and the queue are read as constants, their graphs not followed (the stop-gradient of
/// the composed form). Returns the loss and the unit queries `q̂` it computed, untracked (no
/// graph: what MoCo hands its hooks as the step's embeddings, without normalising the queries
/// a second time).
///
/// # Shapes
/// - `q`, `unit_keys`: `[N, D]`; `queue`: `[K, D]`; output: `[1]` and `[N, D]`
///
/// # Panics
/// If `q` and the keys differ in shape or the queue in width. (An empty batch or queue gives a
/// NaN here; `kernels::info_nce` hands such inputs back to the composed form, which refuses
/// them.)
pub fn info_nce_op<I: Backend, C: CheckpointStrategy>(
    q: Tensor<Autodiff<I, C>, 2>,
    unit_keys: Tensor<Autodiff<I, C>, 2>,
    queue: Tensor<Autodiff<I, C>, 2>,
    temperature: f64,
    epsilon: f64,
) -> LossAndUnitQueries<Autodiff<I, C>> {
    assert_eq!(
        q.dims(),
        unit_keys.dims(),
        "InfoNCE: q and the keys differ in shape"
    );
    assert_eq!(
        q.dims()[1],
        queue.dims()[1],
        "InfoNCE: the queue's width is not the queries'"
    );
    let keys = unit_keys.inner();
    let queue = queue.inner();
    let q = q.into_primitive().tensor();
    let node = q.node.clone();
    let q = Tensor::<I, 2>::from_primitive(TensorPrimitive::Float(q.primitive));
    let normalised = Normalised::new(q, epsilon);
    let rows = normalised.rows.clone();
    let unit_queries = Tensor::from_inner(rows.clone());
    let inverse = 1.0 / temperature;
    let positive = (rows.clone() * keys.clone()).sum_dim(1).mul_scalar(inverse);
    let negatives = rows.matmul(queue.clone().transpose()).mul_scalar(inverse);
    let max = negatives.clone().max_dim(1).max_pair(positive.clone());
    let positive_exp = (positive.clone() - max.clone()).exp();
    let negatives_exp = (negatives - max.clone()).exp();
    let sums = negatives_exp.clone().sum_dim(1) + positive_exp.clone();
    let loss = (sums.clone().log() + max - positive)
        .mean()
        .into_primitive()
        .tensor();
    let out = match InfoNceBackward
        .prepare::<C>([node])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(
            InfoNceState {
                normalised,
                keys,
                queue,
                negatives: negatives_exp,
                positive: positive_exp,
                sums,
                temperature,
            },
            loss,
        ),
        OpsKind::UnTracked(prep) => prep.finish(loss),
    };
    (
        Tensor::from_primitive(TensorPrimitive::Float(out)),
        unit_queries,
    )
}
