//! What the augmentations share: per-sample parameters drawn on the host and uploaded as small
//! tensors, and row selection within a batch.

pub(crate) use crate::base::error::probability;

use burn::tensor::{backend::Backend, Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::Rng;

/// A per-sample scalar as a `[N, 1, 1, 1]` tensor (broadcasts over channels and pixels).
pub fn per_sample<B: Backend>(values: &[f32], device: &B::Device) -> Tensor<B, 4> {
    Tensor::from_data(
        TensorData::new(values.to_vec(), [values.len(), 1, 1, 1]),
        device,
    )
}

/// A per-sample 0/1 mask as a `[N, 1, 1, 1]` float tensor.
pub fn per_sample_mask<B: Backend>(flags: &[bool], device: &B::Device) -> Tensor<B, 4> {
    let v: Vec<f32> = flags.iter().map(|&f| if f { 1.0 } else { 0.0 }).collect();
    per_sample(&v, device)
}

/// `mask · a + (1 − mask) · b` with a per-sample 0/1 mask: exact selection (no rounding), one
/// tensor expression for the whole batch.
pub fn select_where<B: Backend>(
    mask: Tensor<B, 4>,
    a: Tensor<B, 4>,
    b: Tensor<B, 4>,
) -> Tensor<B, 4> {
    let keep = mask.clone().neg().add_scalar(1.0);
    a.mul(mask).add(b.mul(keep))
}

/// An index tensor `[len]` from host indices.
pub fn index_tensor<B: Backend>(indices: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let v: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(v, [indices.len()]), device)
}

/// The batch `x` with its rows `rows[k]` replaced by `y[k]` (exact: one gather from
/// `cat([x, y])`). `rows` must be distinct and `y` must have `rows.len()` rows.
pub fn replace_rows<B: Backend>(x: Tensor<B, 4>, rows: &[usize], y: Tensor<B, 4>) -> Tensor<B, 4> {
    let n = x.dims()[0];
    if rows.len() == n && rows.iter().enumerate().all(|(k, &r)| k == r) {
        return y;
    }
    let mut perm: Vec<usize> = (0..n).collect();
    for (k, &r) in rows.iter().enumerate() {
        perm[r] = n + k;
    }
    let device = x.device();
    Tensor::cat(vec![x, y], 0).select(0, index_tensor::<B>(&perm, &device))
}

/// Draws `n` Bernoulli(`p`) flags.
pub fn bernoulli(rng: &mut StdRng, p: f64, n: usize) -> Vec<bool> {
    (0..n).map(|_| rng.random::<f64>() < p).collect()
}

/// Draws a uniform number in `[lo, hi]` (returns `lo` when the range is empty).
pub fn uniform(rng: &mut StdRng, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        lo + (hi - lo) * rng.random::<f64>()
    } else {
        lo
    }
}

/// Checks that `(lo, hi)` is an ordered range of finite numbers with `lo >= min`.
pub(crate) fn range(
    field: &'static str,
    (lo, hi): (f64, f64),
    min: f64,
    open_min: bool,
) -> Result<(), crate::base::error::ConfigError> {
    use crate::base::error::ConfigError;
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(ConfigError::new(
            field,
            format!("bounds must be finite, got ({lo}, {hi})"),
        ));
    }
    if lo > hi {
        return Err(ConfigError::new(
            field,
            format!("min {lo} is greater than max {hi}"),
        ));
    }
    let ok = if open_min { lo > min } else { lo >= min };
    if !ok {
        let op = if open_min { ">" } else { ">=" };
        return Err(ConfigError::new(
            field,
            format!("min must be {op} {min}, got {lo}"),
        ));
    }
    Ok(())
}
