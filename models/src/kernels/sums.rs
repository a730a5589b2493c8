//! Sums over slices in f64, in eight running lanes: what the batch norm's, the layer norm's and
//! the softmax's slice kernels reduce with. Summing one value at a time waits four cycles per
//! add on the one before; eight independent lanes vectorise and overlap, and the lanes are
//! added at the end, so the order of every sum is fixed by the slice's length alone (the same
//! bits on every CPU and for any thread count).

use super::gemm::Real;

/// Independent running sums per slice: one f64 add waits on the one before (four cycles each),
/// eight lanes of them vectorise and overlap. The lanes are added at the end, so the order of
/// the sum is fixed by the slice's length alone.
pub(crate) const LANES: usize = 8;

/// Lanes of values in f64.
pub(crate) type Lanes = [f64; LANES];

/// `Σ_k f(a[k], b[k])` componentwise in f64, over [`LANES`] running sums: `f` maps whole lanes
/// of `a` and `b` (in f64) to `K` lanes of terms, element-wise operations on fixed-size arrays
/// that the compiler vectorises.
#[inline(always)]
pub(crate) fn lane_sums<T: Real, const K: usize>(
    a: &[T],
    b: &[T],
    f: impl Fn(&Lanes, &Lanes) -> [Lanes; K],
) -> [f64; K] {
    let mut lanes = [[0.0f64; LANES]; K];
    let len = a.len().min(b.len());
    let ((a_chunks, a_rest), (b_chunks, b_rest)) =
        (a[..len].as_chunks::<LANES>(), b[..len].as_chunks::<LANES>());
    let widen =
        |c: &[T]| -> Lanes { std::array::from_fn(|l| c.get(l).map_or(0.0, |v| v.to_f64())) };
    for (ca, cb) in a_chunks.iter().zip(b_chunks) {
        let terms = f(&ca.map(T::to_f64), &cb.map(T::to_f64));
        for (lane, term) in lanes.iter_mut().zip(&terms) {
            for (sum, &value) in lane.iter_mut().zip(term) {
                *sum += value;
            }
        }
    }
    let mut sums = lanes.map(|lane| lane.iter().sum::<f64>());
    // The remainder through the same `f`, its first `a_rest.len()` lanes added one by one.
    let terms = f(&widen(a_rest), &widen(b_rest));
    for (sum, term) in sums.iter_mut().zip(&terms) {
        for &value in &term[..a_rest.len()] {
            *sum += value;
        }
    }
    sums
}

/// `Σ f(v)` over `values` in f64, in the same [`LANES`] running sums and order as
/// [`lane_sums`], with `f` applied in the values' own type before widening (the log-softmax's
/// vectorised f32 `exp`, which [`lane_sums`]' f64 lanes would take in f64).
#[inline(always)]
pub(crate) fn lane_sum_of<T: Real>(values: &[T], f: impl Fn(T) -> T) -> f64 {
    let (chunks, rest) = values.as_chunks::<LANES>();
    let mut lanes: Lanes = [0.0; LANES];
    for chunk in chunks {
        for (sum, &v) in lanes.iter_mut().zip(chunk) {
            *sum += f(v).to_f64();
        }
    }
    let mut sum = lanes.iter().sum::<f64>();
    for &v in rest {
        sum += f(v).to_f64();
    }
    sum
}
