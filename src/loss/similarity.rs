//! What the contrastive losses share: row-wise L2 normalisation, the stop-gradient, and the
//! similarity matrix of a two-view batch with its positives' columns and masks.

use burn::prelude::*;

use super::shape_checks::{assert_min_batch, assert_same_shape};

/// Added to a masked logit (an anchor's similarity with itself). Finite so that no `inf - inf`
/// can appear, large enough that `exp` of it underflows to exactly zero in f32 and f64.
pub(crate) const MASKED_LOGIT: f64 = -1.0e9;

/// The stop-gradient of an input: no gradient flows through it, and none is computed for it.
///
/// burn's `detach` keeps a leaf's `require_grad`, so a detached leaf (a queue or keys built with
/// `require_grad`) still has its own gradient computed in the backward pass — for a queue of
/// 65,536 keys that is a full extra `[B, K]ᵀ × [B, D]` product, and for SoftNCE a scatter into
/// the whole queue, all thrown away. Clearing the flag as well skips that work.
pub(crate) fn stop_gradient<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    x.detach().set_require_grad(false)
}

/// Row-wise L2 normalisation, `x / max(‖x‖, 1e-12)` (PyTorch's `F.normalize`).
///
/// # Shapes
/// - `x`: `[n, d]` → `[n, d]`
pub fn l2_normalize<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
    x / norm
}

/// The two views stacked into one `[2B, D]` batch of unit vectors, their cosine-similarity
/// matrix `[2B, 2B]`, the column of each row's positive (`i ± B`) as `[2B, 1]` and a mask of the
/// diagonal (self-similarities).
pub(crate) struct TwoViewSimilarities<B: Backend> {
    pub(crate) sim: Tensor<B, 2>,
    pub(crate) positive_index: Tensor<B, 2, Int>,
    pub(crate) diagonal: Tensor<B, 2, Bool>,
}

impl<B: Backend> TwoViewSimilarities<B> {
    pub(crate) fn new(loss: &str, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Self {
        assert_same_shape(loss, ("z1", z1.dims()), ("z2", z2.dims()));
        assert_min_batch(loss, "z1", z1.dims(), 1);
        let [batch, _] = z1.dims();
        let device = z1.device();
        let z = l2_normalize(Tensor::cat(vec![z1, z2], 0));
        let sim = z.clone().matmul(z.transpose());
        Self {
            sim,
            positive_index: positive_index(batch, &device),
            diagonal: diagonal_mask(2 * batch, &device),
        }
    }

    /// As [`TwoViewSimilarities::new`], with the negatives taken from another pair of batches
    /// (e.g. the images hardened by PGD): entry `(i, k)` is the cosine similarity of anchor `i`
    /// (of `[z1; z2]`) with candidate `k` of `[n1; n2]`, except at each anchor's positive, which
    /// stays `s(zᵢ, z_{i±B})` between the clean views. The diagonal (an anchor against its own
    /// image's candidate) is masked as before. With `n1 = z1`, `n2 = z2` this is
    /// [`TwoViewSimilarities::new`] exactly.
    pub(crate) fn with_negatives(
        loss: &str,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
        n1: Tensor<B, 2>,
        n2: Tensor<B, 2>,
    ) -> Self {
        assert_same_shape(loss, ("z1", z1.dims()), ("z2", z2.dims()));
        assert_same_shape(loss, ("z1", z1.dims()), ("n1", n1.dims()));
        assert_same_shape(loss, ("z1", z1.dims()), ("n2", n2.dims()));
        assert_min_batch(loss, "z1", z1.dims(), 1);
        let [batch, _] = z1.dims();
        let n = 2 * batch;
        let device = z1.device();
        let z = l2_normalize(Tensor::cat(vec![z1, z2], 0));
        let partner = Tensor::cat(
            vec![
                z.clone().narrow(0, batch, batch),
                z.clone().narrow(0, 0, batch),
            ],
            0,
        );
        let positive = (z.clone() * partner).sum_dim(1);
        let candidates = l2_normalize(Tensor::cat(vec![n1, n2], 0));
        let index = positive_index(batch, &device);
        let sim = z
            .matmul(candidates.transpose())
            .mask_where(positive_mask(batch, &device), positive.repeat_dim(1, n));
        Self {
            sim,
            positive_index: index,
            diagonal: diagonal_mask(n, &device),
        }
    }
}

/// `[2B, 1]` column index of each anchor's positive in a two-view batch: `i + B` for the
/// first view, `i − B` for the second.
pub(crate) fn positive_index<B: Backend>(batch: usize, device: &B::Device) -> Tensor<B, 2, Int> {
    let n = 2 * batch;
    let idx: Vec<i64> = (0..n).map(|i| ((i + batch) % n) as i64).collect();
    Tensor::<B, 1, Int>::from_data(TensorData::new(idx, [n]), device).reshape([n, 1])
}

/// `[2B, 2B]` boolean mask of a two-view batch, true at each anchor's positive (column
/// `i ± B` of row `i`).
pub(crate) fn positive_mask<B: Backend>(batch: usize, device: &B::Device) -> Tensor<B, 2, Bool> {
    let n = 2 * batch;
    let at_positive: Vec<bool> = (0..n * n).map(|e| e % n == (e / n + batch) % n).collect();
    Tensor::from_data(TensorData::new(at_positive, [n, n]), device)
}

/// `[n, n]` boolean mask, true on the diagonal.
pub(crate) fn diagonal_mask<B: Backend>(n: usize, device: &B::Device) -> Tensor<B, 2, Bool> {
    Tensor::<B, 2>::eye(n, device).greater_elem(0.5)
}

/// Mean over rows of `logsumexp(logits) − logits[target]`: cross-entropy with hard targets.
///
/// # Shapes
/// - `logits`: `[n, c]`, `target`: `[n, 1]` → `[1]`
pub(crate) fn cross_entropy_at<B: Backend>(
    logits: Tensor<B, 2>,
    target: Tensor<B, 2, Int>,
) -> Tensor<B, 1> {
    let log_probs = burn::tensor::activation::log_softmax(logits, 1);
    log_probs.gather(1, target).mean().neg()
}
