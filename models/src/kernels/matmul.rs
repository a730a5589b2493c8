//! Matrix products into outputs written once: batches of strided matrices ([`product`]), the
//! linear layer `x·W + b` ([`linear`]) and its bias gradient ([`column_sums`]).
//!
//! Why this file exists: burn-flex 0.21 allocates every product's output with
//! `FlexTensor::empty`, a zeroed byte vector that `Bytes::from_bytes_vec` then copies into a
//! 16-byte-aligned buffer — a page-faulted zeroing, a `memset` and a `memcpy` of the whole output
//! before the product writes it: 16 % of a SimMIM step on ViT-Tiny at 2 threads (perf; `empty`
//! under `matmul_gemm`). Under autodiff every backward product goes the same way. Here the output
//! is allocated without being written and the `gemm` crate (the one Flex calls) writes it once;
//! the linear layer's bias is written into the output before the product adds to it, and its
//! gradient is one parallel pass over `∂y` rather than burn's sum on one core.
//!
//! Each product is the `gemm` crate's over the same strides, so the values are Flex's own; the
//! column sums go over fixed tasks of rows added in task order (the same bits for any number
//! of threads).

use rayon::prelude::*;

use super::gemm::{gemm_into, gemm_on, written_planes, Real, PARALLEL_GEMM_WORK};

/// Matrices in one slice: matrix `b` of the batch starts at `offsets[b]`, its entry `(i, j)` at
/// `offsets[b] + i·strides.0 + j·strides.1`.
#[derive(Debug, Clone)]
pub struct Matrices<'a, T> {
    /// The values the matrices are read from.
    pub data: &'a [T],
    /// Where each matrix of the batch starts.
    pub offsets: Vec<usize>,
    /// `(row stride, column stride)`.
    pub strides: (usize, usize),
}

impl<'a, T> Matrices<'a, T> {
    /// One matrix starting at the slice's first value.
    pub fn single(data: &'a [T], strides: (usize, usize)) -> Self {
        Self {
            data,
            offsets: vec![0],
            strides,
        }
    }

    /// The same matrices transposed (a view: the strides swapped).
    pub fn transposed(&self) -> Self {
        Self {
            data: self.data,
            offsets: self.offsets.clone(),
            strides: (self.strides.1, self.strides.0),
        }
    }

    /// Matrix `b`'s values from its first on.
    fn matrix(&self, b: usize) -> &'a [T] {
        &self.data[self.offsets[b]..]
    }
}

/// Rows per task of [`column_sums`]: fixed, so the partial sums are added in the same order on
/// any machine.
pub const ROWS_PER_TASK: usize = 64;

/// `lhs[b] · rhs[b]` for every matrix `b` of the batch, row-major `[batch, m, n]`.
///
/// Many matrices (attention's `[N·H]` products) go to the threads a matrix at a time; one
/// large product, or fewer matrices than threads, runs each product on every thread.
///
/// # Shapes
/// - `lhs`: `batch × [m, k]`, `rhs`: `batch × [k, n]` → `[batch, m, n]`
pub fn product<T: Real>([m, n, k]: [usize; 3], lhs: &Matrices<T>, rhs: &Matrices<T>) -> Vec<T> {
    let batch = lhs.offsets.len();
    assert_eq!(
        batch,
        rhs.offsets.len(),
        "product: as many matrices each side"
    );
    let plane = m * n;
    if k == 0 {
        return vec![T::default(); batch * plane];
    }
    let large = m * n * k >= PARALLEL_GEMM_WORK;
    let one_by_one = batch == 1 || (large && batch < rayon::current_num_threads());
    let fill = |b: usize, out: &mut [std::mem::MaybeUninit<T>], parallel: bool| {
        gemm_into(
            parallel,
            [m, n, k],
            out,
            lhs.matrix(b),
            lhs.strides,
            rhs.matrix(b),
            rhs.strides,
        )
    };
    let mut out: Vec<T> = Vec::with_capacity(batch * plane);
    if one_by_one {
        for (b, chunk) in out.spare_capacity_mut()[..batch * plane]
            .chunks_mut(plane.max(1))
            .enumerate()
        {
            fill(b, chunk, large);
        }
        // SAFETY: the capacity is `batch·plane`, and `gemm_into` wrote every entry of each
        // matrix's chunk (above).
        unsafe { out.set_len(batch * plane) };
        out
    } else {
        // SAFETY: `gemm_into` writes every entry of the plane it is given.
        unsafe { written_planes(batch * plane, plane, |b, chunk| fill(b, chunk, false)) }
    }
}

/// The linear layer `x·w + b` over rows: each output row starts as `bias` and the product is
/// added to it.
///
/// # Shapes
/// - `x`: `[rows, k]`, `w`: `[k, n]`, `bias`: `[n]` → `[rows, n]`
pub fn linear<T: Real>(
    [rows, n, k]: [usize; 3],
    x: &Matrices<T>,
    w: &Matrices<T>,
    bias: &[T],
) -> Vec<T> {
    assert_eq!(bias.len(), n, "linear: a bias per output");
    assert_eq!(x.offsets.len(), 1, "linear: one input matrix");
    assert_eq!(w.offsets.len(), 1, "linear: one weight matrix");
    if n == 0 {
        return Vec::new();
    }
    // SAFETY: every row of every task's chunk is written whole with the bias.
    let mut out = unsafe {
        written_planes(rows * n, ROWS_PER_TASK * n, |_, chunk| {
            for row in chunk.chunks_mut(n) {
                for (o, &b) in row.iter_mut().zip(bias) {
                    o.write(b);
                }
            }
        })
    };
    if k > 0 {
        gemm_on(
            rows * n * k >= PARALLEL_GEMM_WORK,
            [rows, n, k],
            &mut out,
            true,
            x.matrix(0),
            x.strides,
            w.matrix(0),
            w.strides,
        );
    }
    out
}

/// The sums of the columns of `dy` (`[rows, n]`, row-major): a linear layer's bias gradient.
/// Each task adds [`ROWS_PER_TASK`] rows in f64; the tasks' sums are added in task order.
///
/// # Shapes
/// - `dy`: `[rows, n]` → `[n]`
pub fn column_sums<T: Real>(dy: &[T], n: usize) -> Vec<T> {
    if n == 0 {
        return Vec::new();
    }
    assert_eq!(dy.len() % n, 0, "column sums: rows of {n}");
    let partials: Vec<Vec<f64>> = dy
        .par_chunks(ROWS_PER_TASK * n)
        .map(|rows| {
            let mut sums = vec![0.0f64; n];
            for row in rows.chunks(n) {
                for (s, v) in sums.iter_mut().zip(row) {
                    *s += v.to_f64();
                }
            }
            sums
        })
        .collect();
    let mut sums = vec![0.0f64; n];
    for partial in &partials {
        for (s, p) in sums.iter_mut().zip(partial) {
            *s += p;
        }
    }
    sums.into_iter().map(T::from_f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::test_values as values;

    /// `Σ_l a[i, l]·b[l, j]` by its definition, row-major operands.
    fn reference(a: &[f64], b: &[f64], [m, n, k]: [usize; 3]) -> Vec<f64> {
        (0..m * n)
            .map(|e| (0..k).map(|l| a[e / n * k + l] * b[l * n + e % n]).sum())
            .collect()
    }

    /// A batch of 5 products, the right-hand side read transposed from `[n, k]` storage, and a
    /// batch of one large enough for every thread: each entry within 1e-13 of the definition
    /// (k ≤ 200 products of values in [−1, 1): the rounding of f64 sums is below 1e-13).
    #[test]
    fn products_equal_their_definition() {
        for (batch, [m, n, k]) in [(5, [7, 9, 11]), (1, [130, 120, 200])] {
            let a = values(batch * m * k, 1);
            let bt = values(batch * n * k, 2); // each matrix stored [n, k]
            let lhs = Matrices {
                data: &a,
                offsets: (0..batch).map(|b| b * m * k).collect(),
                strides: (k, 1),
            };
            let rhs = Matrices {
                data: &bt,
                offsets: (0..batch).map(|b| b * n * k).collect(),
                strides: (k, 1),
            }
            .transposed();
            let out = product([m, n, k], &lhs, &rhs);
            for b in 0..batch {
                let bm: Vec<f64> = (0..k * n)
                    .map(|e| bt[b * n * k + (e % n) * k + e / n])
                    .collect();
                let expected = reference(&a[b * m * k..][..m * k], &bm, [m, n, k]);
                for (o, e) in out[b * m * n..][..m * n].iter().zip(&expected) {
                    assert!((o - e).abs() < 1e-13, "matrix {b}: {o} against {e}");
                }
            }
        }
    }

    /// `x·w + b` and the column sums against their definitions (rows over several tasks).
    #[test]
    fn linear_and_column_sums_equal_their_definitions() {
        let [rows, n, k] = [3 * ROWS_PER_TASK + 5, 6, 4];
        let (x, w, bias) = (values(rows * k, 3), values(k * n, 4), values(n, 5));
        let y = linear(
            [rows, n, k],
            &Matrices::single(&x, (k, 1)),
            &Matrices::single(&w, (n, 1)),
            &bias,
        );
        let expected = reference(&x, &w, [rows, n, k]);
        for (e, (y, p)) in y.iter().zip(&expected).enumerate() {
            assert!((y - (p + bias[e % n])).abs() < 1e-14, "entry {e}");
        }
        let sums = column_sums(&y, n);
        for j in 0..n {
            let s: f64 = (0..rows).map(|i| y[i * n + j]).sum();
            assert!(
                (sums[j] - s).abs() < 1e-12,
                "column {j}: {} against {s}",
                sums[j]
            );
        }
    }
}
