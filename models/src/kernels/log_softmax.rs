//! The log-softmax over rows (the last axis), `y = x − m − ln Σ_row e^(x − m)` with `m` the
//! row's maximum, as one row-parallel pass forward and one backward
//! (`∂x = ∂y − e^y·Σ_row ∂y`, from the kept output).
//!
//! Why this file exists: burn 0.21's `log_softmax` is composed — the row maximum, a
//! subtraction, `exp`, a row sum, `ln` and a second subtraction, five full-size passes that
//! keep the shifted values and their exponentials — and burn-autodiff has no rule of its own for
//! it, so about as many passes again run backward (the subtractions' broadcast reductions, the
//! sum's expansion, the `exp`'s product, the two gradients of the shifted values added). Every
//! contrastive and distillation loss takes it over its logits: `[N, 1 + K]` for a MoCo queue of
//! `K` keys, `[2N, 2N]` for NT-Xent, the students' `[N, K]` prototype scores of DINO, iBOT,
//! SwAV and MSN. Each row is computed alone, by one task, in a fixed order, so the result is the
//! same bits for any number of threads.
//!
//! In f32, `e^(x − m)` and `e^y` (both of non-positive arguments) are
//! [`exp_f32_nonpositive`](super::gelu::exp_f32_nonpositive) (within 3e-7 relative; arguments
//! below −87 taken as −87, a term of `e⁻⁸⁷ < 2e-38` beside the maximum's `1`), summed in f64 over
//! eight lanes; `ln`, the row's offset `m + ln Σ` and `x − offset` are taken in f64 and rounded
//! once. In f64 `exp` and `ln` are the standard library's (the exact tests).

use super::gelu::GeluReal;
use super::gemm::written_planes;
use super::sums::{lane_sum_of, lane_sums};

/// Values per parallel task, in whole rows: enough work per task to outweigh its scheduling.
const VALUES_PER_TASK: usize = 1 << 14;

/// One row of [`forward`].
struct ForwardRow<'a, T> {
    x: &'a [T],
    out: &'a mut [std::mem::MaybeUninit<T>],
}

impl<T: GeluReal + PartialOrd> pulp::WithSimd for ForwardRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        // A NaN never wins `>`: it reaches the sum through its own term and makes the row NaN.
        let max = self
            .x
            .iter()
            .fold(self.x[0], |m, &v| if v > m { v } else { m });
        let offset = max.to_f64() + lane_sum_of(self.x, |v| (v - max).exp()).ln();
        for (o, &v) in self.out.iter_mut().zip(self.x) {
            o.write(T::from_f64(v.to_f64() - offset));
        }
    }
}

/// `log softmax(x)` over rows of `row` values.
///
/// # Shapes
/// - `x`, returned `y`: `[rows, row]` (row-major, any leading shape flattened)
pub fn forward<T: GeluReal + PartialOrd>(x: &[T], row: usize) -> Vec<T> {
    assert!(row > 0, "log_softmax: an empty last axis");
    assert_eq!(
        x.len() % row,
        0,
        "log_softmax: input length for rows of {row}"
    );
    let task = (VALUES_PER_TASK / row).max(1) * row;
    // SAFETY: every entry of every task's chunk is written below (each row of it, whole).
    unsafe {
        written_planes(x.len(), task, |i, out| {
            let x = &x[i * task..][..out.len()];
            for (out, x) in out.chunks_mut(row).zip(x.chunks(row)) {
                pulp::Arch::new().dispatch(ForwardRow { x, out });
            }
        })
    }
}

/// One row of [`backward`].
struct BackwardRow<'a, T> {
    y: &'a [T],
    dy: &'a [T],
    out: &'a mut [std::mem::MaybeUninit<T>],
}

impl<T: GeluReal> pulp::WithSimd for BackwardRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let [total] = lane_sums(self.dy, self.dy, |g, _| [*g]);
        for ((o, &y), &dy) in self.out.iter_mut().zip(self.y).zip(self.dy) {
            o.write(T::from_f64(dy.to_f64() - y.exp().to_f64() * total));
        }
    }
}

/// `∂x` of `y = log softmax(x)` over rows of `row` values, given `y` and `∂y`.
///
/// # Shapes
/// - `y`, `dy`, returned `∂x`: `[rows, row]` (row-major, any leading shape flattened)
pub fn backward<T: GeluReal>(y: &[T], dy: &[T], row: usize) -> Vec<T> {
    assert!(row > 0, "log_softmax: an empty last axis");
    assert_eq!(
        y.len() % row,
        0,
        "log_softmax: output length for rows of {row}"
    );
    assert_eq!(y.len(), dy.len(), "log_softmax: ∂y length");
    let task = (VALUES_PER_TASK / row).max(1) * row;
    // SAFETY: every entry of every task's chunk is written below (each row of it, whole).
    unsafe {
        written_planes(y.len(), task, |i, out| {
            let (y, dy) = (&y[i * task..][..out.len()], &dy[i * task..][..out.len()]);
            for ((out, y), dy) in out.chunks_mut(row).zip(y.chunks(row)).zip(dy.chunks(row)) {
                pulp::Arch::new().dispatch(BackwardRow { y, dy, out });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::test_values as values;

    /// The definition, row by row, in f64: `x − ln Σ e^x` with the sum shifted by the maximum.
    fn reference(x: &[f64], row: usize) -> Vec<f64> {
        x.chunks(row)
            .flat_map(|r| {
                let max = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let lse = max + r.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
                r.iter().map(move |v| v - lse)
            })
            .collect()
    }

    /// In f64 the forward pass is the definition to rounding (values of a few units: 1e-14), and
    /// `⟨∂y, log softmax(x)⟩` by central differences (step 1e-5: truncation ~1e-10 on these
    /// values) equals the backward's `∂x` within 1e-8, for rows of 11 (a remainder after the
    /// lanes) over more than two tasks.
    #[test]
    fn f64_values_and_central_differences() {
        let row = 11;
        let rows = 2 * VALUES_PER_TASK / row + 3;
        let x: Vec<f64> = values(rows * row, 3).iter().map(|v| 6.0 * v).collect();
        let y = forward(&x, row);
        for (k, (a, b)) in y.iter().zip(reference(&x, row)).enumerate() {
            assert!((a - b).abs() < 1e-14, "y[{k}]: {a} against {b}");
        }
        let dy = values(rows * row, 4);
        let dx = backward(&y, &dy, row);
        let h = 1e-5;
        for k in (0..x.len()).step_by(991) {
            let start = k / row * row;
            let dot = |r: &[f64]| -> f64 {
                reference(r, row)
                    .iter()
                    .zip(&dy[start..start + row])
                    .map(|(a, b)| a * b)
                    .sum()
            };
            let mut plus = x[start..start + row].to_vec();
            let mut minus = plus.clone();
            plus[k - start] += h;
            minus[k - start] -= h;
            let fd = (dot(&plus) - dot(&minus)) / (2.0 * h);
            assert!((dx[k] - fd).abs() < 1e-8, "∂x[{k}]: {} against {fd}", dx[k]);
        }
    }

    /// A row far from zero (logits of 1e3 and more) or with a masked entry (`−∞`, as a loss
    /// masks an anchor's own column) keeps finite values elsewhere; the masked entry is `−∞`
    /// with no gradient.
    #[test]
    fn shifted_and_masked_rows() {
        let x = [1000.0f64, 1001.0, f64::NEG_INFINITY, 999.0];
        let y = forward(&x, 4);
        let expected = reference(&x, 4);
        for k in [0, 1, 3] {
            assert!((y[k] - expected[k]).abs() < 1e-13, "{k}: {}", y[k]);
        }
        assert_eq!(y[2], f64::NEG_INFINITY);
        let dx = backward(&y, &[1.0, 0.0, 0.0, 0.0], 4);
        assert_eq!(dx[2], 0.0);
        let y32 = forward(&[1000.0f32, 1001.0, f32::NEG_INFINITY, 999.0], 4);
        assert!(y32.iter().enumerate().all(|(k, v)| k == 2 || v.is_finite()));
    }

    /// f32 against the f64 kernel on the same (f32-rounded) inputs. Forward: each term
    /// `e^d`, `d = x − m`, is within 3e-7 relative (the `exp`'s bound) plus `|d|·ε/2` (`d`
    /// rounded to f32), so `ln Σ` is within `3e-7 + ε/2·max|d|` absolute (`Σ e^d ≥ 1`: the
    /// maximum's term); `x − offset` is taken in f64 and rounded once (`ε/2·|y|`). With values
    /// in ±20, `|d| ≤ 40`. Backward, on the same f32 `y` for both: `e^y` within 3e-7 relative,
    /// the row sum of `∂y` the same to f64 rounding, the result rounded once: within
    /// `3e-7·e^y·Σ|∂y| + ε/2·|∂x|`. Rows of 300 (a vector remainder).
    #[test]
    fn f32_follows_f64() {
        let row = 300;
        let x64: Vec<f64> = values(40 * row, 5)
            .iter()
            .map(|v| (20.0 * v) as f32 as f64)
            .collect();
        let dy64: Vec<f64> = values(40 * row, 6)
            .iter()
            .map(|v| *v as f32 as f64)
            .collect();
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        let dy32: Vec<f32> = dy64.iter().map(|&v| v as f32).collect();
        let (y64, y32) = (forward(&x64, row), forward(&x32, row));
        let eps = f32::EPSILON as f64;
        for (k, (&a, &b)) in y64.iter().zip(&y32).enumerate() {
            let bound = 3e-7 + eps * 20.0 + eps * a.abs();
            assert!((a - b as f64).abs() <= bound, "y[{k}]: {b} against {a}");
        }
        // The f32 output fed to both backward kernels, so that only the kernels differ.
        let y_in: Vec<f64> = y32.iter().map(|&v| v as f64).collect();
        let (dx64, dx32) = (backward(&y_in, &dy64, row), backward(&y32, &dy32, row));
        for (r, ((d64, d32), (y, dy))) in dx64
            .chunks(row)
            .zip(dx32.chunks(row))
            .zip(y_in.chunks(row).zip(dy64.chunks(row)))
            .enumerate()
        {
            let total: f64 = dy.iter().map(|v| v.abs()).sum();
            for k in 0..row {
                let bound = 3e-7 * y[k].exp() * total + eps * d64[k].abs() + 1e-30;
                assert!(
                    (d64[k] - d32[k] as f64).abs() <= bound,
                    "row {r}, ∂x[{k}]: {} against {}",
                    d32[k],
                    d64[k]
                );
            }
        }
    }
}
