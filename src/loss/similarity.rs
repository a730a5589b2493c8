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

/// The floor `ε` of a row's norm, `max(‖x‖, ε)`, in [`l2_normalize`] (PyTorch's `F.normalize`'s
/// default).
pub(crate) const NORM_FLOOR: f64 = 1e-12;

/// Row-wise L2 normalisation, `x / max(‖x‖, 1e-12)` (PyTorch's `F.normalize`).
///
/// A zero row stays zero and its gradient finite, as PyTorch's: the norm is taken as
/// `√max(Σx², ε²)`, the same value, whose gradient is zero below `ε` where `sqrt`'s would be
/// infinite at zero (`max(√Σx², ε)` gives `0 · ∞ = NaN` there: a ReLU backbone's all-dead
/// feature vector made every gradient of the step NaN).
///
/// # Shapes
/// - `x`: `[n, d]` → `[n, d]`
pub fn l2_normalize<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    x.clone() / safe_norm(x, 1, NORM_FLOOR)
}

/// `max(‖x‖, eps)` along `dim` (kept), as `√max(Σx², eps²)`: the same value, with a zero
/// gradient where the norm is under `eps` instead of a NaN at zero.
pub(crate) fn safe_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    dim: usize,
    eps: f64,
) -> Tensor<B, D> {
    x.powi_scalar(2).sum_dim(dim).clamp_min(eps * eps).sqrt()
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
        Self::stacked(Tensor::cat(vec![z1, z2], 0))
    }

    /// As [`TwoViewSimilarities::new`], the views stacked already: `z = [z1; z2]`, `[2B, D]`
    /// with `B ≥ 1`.
    pub(crate) fn stacked(z: Tensor<B, 2>) -> Self {
        let [rows, _] = z.dims();
        let device = z.device();
        let z = l2_normalize(z);
        let sim = z.clone().matmul(z.transpose());
        Self {
            sim,
            positive_index: positive_index(rows / 2, &device),
            diagonal: diagonal_mask(rows, &device),
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
    let log_probs = curriculum_ssl_models::kernels::log_softmax(logits, 1);
    log_probs.gather(1, target).mean().neg()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};

    type Ad = Autodiff<NdArray<f64>>;

    /// The gradient of `Σ c·x/max(‖x‖, ε)` with `c = (1, 2)`: at the zero row `c/ε` (the norm's
    /// branch is zero below ε; PyTorch's `F.normalize` gives the same, its norm's backward
    /// masking the zero norm), at `(3, 4)` `(c − y (y·c)) / ‖x‖ = (−0.064, 0.048)` with
    /// `y = (0.6, 0.8)`.
    #[test]
    fn a_zero_row_has_a_finite_gradient() {
        let device = Default::default();
        let x = Tensor::<Ad, 2>::from_data([[0.0, 0.0], [3.0, 4.0]], &device).require_grad();
        let c = Tensor::<Ad, 2>::from_data([[1.0, 2.0]], &device);
        let y = l2_normalize(x.clone());
        let values: Vec<f64> = y.clone().into_data().to_vec().unwrap();
        assert_eq!(values, vec![0.0, 0.0, 0.6, 0.8]);
        let grads = (y * c).sum().backward();
        let g: Vec<f64> = x.grad(&grads).unwrap().into_data().to_vec().unwrap();
        let expected = [1e12, 2e12, -0.064, 0.048];
        for (a, b) in g.iter().zip(expected) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{g:?}");
        }
    }
}
