//! The softmax's backward pass over rows (the last axis), from its output `y`:
//! `∂x = y·(∂y − Σ_row ∂y·y)`.
//!
//! Why this file exists: burn 0.21's autodiff has no rule of its own for `softmax`, so under
//! autodiff the backend's fused forward is not used and the softmax runs as its composed form
//! (max, subtraction, exp, sum, division), each a full pass with its own backward rule — on a
//! ViT's attention scores, `[N, heads, T, T]`, the largest tensors of the step, on one core
//! below 4 M values on burn's CPU backend. Here the backward is one row-parallel pass (the
//! forward is burn's own fused `softmax`), which keeps only the output, as PyTorch does.
//!
//! The row sums are taken in f64 (in eight lanes, `sums.rs`); each row is computed alone, so the result
//! is the same bits for any number of threads.

use super::gemm::{written_planes, Real};
use super::sums::lane_sums;

/// Values per parallel task, in whole rows: enough work per task to outweigh its scheduling
/// (attention rows are tens of values).
const VALUES_PER_TASK: usize = 1 << 14;

/// `∂x` of `y = softmax(x)` over rows of `row` values, given `y` and `∂y`.
///
/// # Shapes
/// - `y`, `dy`, returned `∂x`: `[rows, row]` (row-major, any leading shape flattened)
pub fn backward<T: Real>(y: &[T], dy: &[T], row: usize) -> Vec<T> {
    assert!(row > 0, "softmax: an empty last axis");
    assert_eq!(y.len() % row, 0, "softmax: output length for rows of {row}");
    assert_eq!(y.len(), dy.len(), "softmax: ∂y length");
    let task = (VALUES_PER_TASK / row).max(1) * row;
    // SAFETY: every entry of every task's chunk is written below (each row of it, whole).
    unsafe {
        written_planes(y.len(), task, |i, out| {
            let (y, dy) = (&y[i * task..][..out.len()], &dy[i * task..][..out.len()]);
            for ((out, y), dy) in out.chunks_mut(row).zip(y.chunks(row)).zip(dy.chunks(row)) {
                let [dot] = lane_sums(y, dy, |y, dy| [std::array::from_fn(|l| y[l] * dy[l])]);
                for ((o, &y), &dy) in out.iter_mut().zip(y).zip(dy) {
                    o.write(T::from_f64(y.to_f64() * (dy.to_f64() - dot)));
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::test_values as values;

    fn softmax(x: &[f64], row: usize) -> Vec<f64> {
        x.chunks(row)
            .flat_map(|r| {
                let max = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = r.iter().map(|v| (v - max).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| v / s)
            })
            .collect()
    }

    /// `⟨∂y, softmax(x)⟩` by central differences against the backward's `∂x`, for every entry:
    /// in f64 with a step of 1e-5 the difference's error is O(h²) ≈ 1e-10 on these values, far
    /// below the 1e-8 asked.
    #[test]
    fn gradient_equals_central_differences() {
        // Rows of 11 (a remainder after the lanes), enough of them for two tasks.
        let row = 11;
        let rows = 2 * VALUES_PER_TASK / row + 3;
        let x: Vec<f64> = values(rows * row, 1).iter().map(|v| 4.0 * v).collect();
        let dy = values(rows * row, 2);
        let dx = backward(&softmax(&x, row), &dy, row);
        let h = 1e-5;
        for k in (0..x.len()).step_by(997) {
            let (r, start) = (k / row, k / row * row);
            let dot = |x: &[f64]| -> f64 {
                let y = softmax(x, row);
                y.iter()
                    .zip(&dy[start..start + row])
                    .map(|(a, b)| a * b)
                    .sum()
            };
            let mut plus = x[start..start + row].to_vec();
            let mut minus = plus.clone();
            plus[k - start] += h;
            minus[k - start] -= h;
            let fd = (dot(&plus) - dot(&minus)) / (2.0 * h);
            assert!(
                (dx[k] - fd).abs() < 1e-8,
                "row {r}, ∂x[{k}]: {} against {fd}",
                dx[k]
            );
        }
    }
}
