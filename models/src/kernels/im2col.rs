//! A 2-D convolution (one group) and both of its gradients by im2col: chunked GEMMs over plain
//! slices.
//!
//! Why this file exists: burn 0.21's CPU backend (`Flex`) has a GEMM forward convolution but no
//! backward of its own, so the gradients take burn-backend's generic rules. The weight gradient
//! swaps the batch and channel axes of the input and of the output gradient (two strided
//! copies) and runs a convolution whose "kernel" is the output gradient: a product with 9
//! columns (`k_h·k_w`) and `N·H·W`-long rows, which the `gemm` crate computes with its
//! narrowest tile. The input gradient is a transposed convolution written as a scalar scatter
//! loop. No maintained crate computes these on burn's tensors. Here both are the textbook
//! (Caffe) formulation, with the images batched into each product:
//!
//! - `colᵀ[(c, i, j), (n, p)] = x[n, c, s·oh + d·i − pad, s·ow + d·j − pad]` (im2col, zero
//!   outside the image), for a chunk of images at once;
//! - `G[co, (n, p)] = ∂y[n, co, p]`, the output gradient laid out per channel (copies of
//!   contiguous `H_out·W_out` runs);
//! - weight gradient `∂w[co, (c, i, j)] += G · col` (`M = C_out`, `N = C·k_h·k_w`,
//!   `K = images·H_out·W_out`) — `(c, i, j)` is PyTorch's weight layout, so no reordering;
//! - input gradient `∂col = wᵀ · G`, then col2im adds each column entry back to the input
//!   position it was read from;
//! - the forward pass `y[co, (n, p)] = w · colᵀ`.
//!
//! Each chunk holds as many images as keep `colᵀ` near [`CHUNK_ENTRIES`] values, so the
//! buffers stay in the last-level cache's neighbourhood whatever the batch. The functions
//! here work on contiguous NCHW slices of `f32` or `f64` and know nothing of burn; which of
//! im2col and [Winograd](super::winograd) a layer takes is [`super::conv`]'s choice.

use rayon::prelude::*;

use super::gemm::{gemm, with_scratch, Real};
use super::geometry::ConvGeometry;

/// The number of `colᵀ` entries a chunk aims at (8 MiB of `f32`): enough columns for wide GEMM
/// tiles on the deep layers (few positions per image), few enough to stay near the cache on
/// the shallow ones.
pub const CHUNK_ENTRIES: usize = 1 << 21;

/// The output positions `o` in `0..out_len` whose input index `o·stride + offset` lies in
/// `0..in_len`, as a range.
fn valid_range(out_len: usize, stride: usize, offset: isize, in_len: usize) -> (usize, usize) {
    // First o with o·s + offset ≥ 0.
    let lo = if offset >= 0 {
        0
    } else {
        ((-offset) as usize).div_ceil(stride)
    };
    // Last o with o·s + offset ≤ in_len − 1, plus one.
    let top = in_len as isize - 1 - offset;
    let hi = if top < 0 {
        0
    } else {
        (top as usize / stride + 1).min(out_len)
    };
    (lo.min(hi), hi)
}

/// Where one row `(c, i, j)` of `colᵀ` reads its image plane when the stride is 1 and the rows
/// of the output are as long as the input's (`w_out = w`, e.g. a 3×3 kernel with padding 1, or
/// any 1×1 kernel without padding): output position `k = oh·w + ow` reads input position
/// `k + shift`, so the valid part is one contiguous span of the plane, less a few entries at
/// the ends of its rows (`gap` of them between consecutive rows' valid runs) that fell outside
/// the image on the left or right. `None` when no position reads inside the image.
///
/// This is what keeps the small maps of the CPU backbones fast: a 14×14 map read row by row
/// costs a `memcpy` and two `memset` calls per 14 values; as a span it costs one of each per
/// plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    /// First and one-past-last output position of the span.
    start: usize,
    end: usize,
    /// Input position read by output position 0 (may be negative).
    shift: isize,
    /// Valid output columns `w_lo..w_hi` of every row.
    w_lo: usize,
    w_hi: usize,
}

impl Span {
    /// The span of the row with offsets `off_h` (rows) and `off_w` (columns) into the input,
    /// for geometries where [`Span::applies`].
    fn new(g: &ConvGeometry, off_h: isize, off_w: isize) -> Option<Self> {
        let [h, w] = g.in_size;
        let [oh_len, _] = g.out_size().expect("checked");
        let (h_lo, h_hi) = valid_range(oh_len, 1, off_h, h);
        let (w_lo, w_hi) = valid_range(w, 1, off_w, w);
        (h_lo < h_hi && w_lo < w_hi).then(|| Self {
            start: h_lo * w + w_lo,
            end: (h_hi - 1) * w + w_hi,
            shift: off_h * w as isize + off_w,
            w_lo,
            w_hi,
        })
    }

    /// Whether the geometry reads by spans: stride 1 and output rows as long as the input's.
    fn applies(g: &ConvGeometry) -> bool {
        g.stride == [1, 1] && g.out_size().is_some_and(|[_, ow]| ow == g.in_size[1])
    }

    /// The input positions `start + shift .. end + shift` that the span reads.
    fn source(&self) -> std::ops::Range<usize> {
        let from = (self.start as isize + self.shift) as usize;
        from..from + (self.end - self.start)
    }

    /// The output positions inside the span that lie outside the image (the right end of a
    /// row and the left end of the next, `w − w_hi + w_lo` of them), as ranges.
    fn gaps(&self, w: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
        let gap = w - self.w_hi + self.w_lo;
        let (start, end, w_hi) = (self.start, self.end, self.w_hi);
        (start / w..)
            .map(move |oh| oh * w + w_hi)
            .take_while(move |&from| from < end)
            .filter(move |_| gap > 0)
            .map(move |from| from..from + gap)
    }
}

/// Fills `col` (`[col_rows, images·positions]`) with im2col of `images` images of `x` starting
/// at image `first`.
fn im2col<T: Real>(x: &[T], g: &ConvGeometry, first: usize, images: usize, col: &mut [T]) {
    im2col_by(x, g, first, images, col, Span::applies(g));
}

/// [`im2col`], reading by [`Span`]s when `spans` (which needs [`Span::applies`]), else row by
/// row (the tests compare the two).
fn im2col_by<T: Real>(
    x: &[T],
    g: &ConvGeometry,
    first: usize,
    images: usize,
    col: &mut [T],
    spans: bool,
) {
    let [h, w] = g.in_size;
    let [oh_len, ow_len] = g.out_size().expect("checked");
    let [kh, kw] = g.kernel;
    let positions = oh_len * ow_len;
    let columns = images * positions;
    col[..g.col_rows() * columns]
        .par_chunks_mut(columns)
        .enumerate()
        .for_each(|(row_index, row)| {
            let c = row_index / (kh * kw);
            let i = (row_index / kw) % kh;
            let j = row_index % kw;
            let off_h = (i * g.dilation[0]) as isize - g.padding[0] as isize;
            let off_w = (j * g.dilation[1]) as isize - g.padding[1] as isize;
            let (w_lo, w_hi) = valid_range(ow_len, g.stride[1], off_w, w);
            let (h_lo, h_hi) = valid_range(oh_len, g.stride[0], off_h, h);
            let span = spans.then(|| Span::new(g, off_h, off_w)).flatten();
            for b in 0..images {
                let plane_start = ((first + b) * g.in_channels + c) * h * w;
                let plane = &x[plane_start..plane_start + h * w];
                let out = &mut row[b * positions..(b + 1) * positions];
                if spans {
                    let Some(span) = span else {
                        out.fill(T::default());
                        continue;
                    };
                    out[..span.start].fill(T::default());
                    out[span.start..span.end].copy_from_slice(&plane[span.source()]);
                    out[span.end..].fill(T::default());
                    for gap in span.gaps(w) {
                        for v in &mut out[gap] {
                            *v = T::default();
                        }
                    }
                    continue;
                }
                // Any other geometry: zero once, then copy the valid part of each row.
                out.fill(T::default());
                for oh in h_lo..h_hi {
                    let dst = &mut out[oh * ow_len..(oh + 1) * ow_len];
                    let ih = ((oh * g.stride[0]) as isize + off_h) as usize;
                    let src = &plane[ih * w..(ih + 1) * w];
                    let start = ((w_lo * g.stride[1]) as isize + off_w) as usize;
                    if g.stride[1] == 1 {
                        dst[w_lo..w_hi].copy_from_slice(&src[start..start + (w_hi - w_lo)]);
                    } else {
                        let from = src[start..].iter().step_by(g.stride[1]);
                        for (d, &v) in dst[w_lo..w_hi].iter_mut().zip(from) {
                            *d = v;
                        }
                    }
                }
            }
        });
}

/// Adds each entry of `col` (`[col_rows, images·positions]`) to the input position it was read
/// from by [`im2col`], into `dx`, the gradient planes of `images` images starting at `first`.
/// Each plane's entries are added row `(c, i, j)` by row in that order, whichever path runs,
/// so the sums are the same to the bit.
fn col2im<T: Real>(col: &[T], g: &ConvGeometry, first: usize, images: usize, dx: &mut [T]) {
    col2im_by(col, g, first, images, dx, Span::applies(g));
}

/// [`col2im`], adding by [`Span`]s when `spans` (which needs [`Span::applies`]), else row by
/// row (the tests compare the two).
fn col2im_by<T: Real>(
    col: &[T],
    g: &ConvGeometry,
    first: usize,
    images: usize,
    dx: &mut [T],
    spans: bool,
) {
    let [h, w] = g.in_size;
    let [oh_len, ow_len] = g.out_size().expect("checked");
    let [kh, kw] = g.kernel;
    let positions = oh_len * ow_len;
    let columns = images * positions;
    let planes_start = first * g.in_channels * h * w;
    let offsets = |i: usize, j: usize| {
        (
            (i * g.dilation[0]) as isize - g.padding[0] as isize,
            (j * g.dilation[1]) as isize - g.padding[1] as isize,
        )
    };
    // Each kernel offset's span, the same for every plane: computed once, not per plane.
    let span_of: Vec<Option<Span>> = if spans {
        (0..kh * kw)
            .map(|k| {
                let (off_h, off_w) = offsets(k / kw, k % kw);
                Span::new(g, off_h, off_w)
            })
            .collect()
    } else {
        Vec::new()
    };
    dx[planes_start..planes_start + images * g.in_channels * h * w]
        .par_chunks_mut(h * w)
        .enumerate()
        .for_each_init(Vec::new, |saved, (plane_index, plane)| {
            let b = plane_index / g.in_channels;
            let c = plane_index % g.in_channels;
            for i in 0..kh {
                for j in 0..kw {
                    let (off_h, off_w) = offsets(i, j);
                    let row_index = (c * kh + i) * kw + j;
                    let row = &col[row_index * columns + b * positions..][..positions];
                    if spans {
                        if let Some(span) = &span_of[i * kw + j] {
                            add_span(plane, row, span, w, saved);
                        }
                        continue;
                    }
                    let (w_lo, w_hi) = valid_range(ow_len, g.stride[1], off_w, w);
                    let (h_lo, h_hi) = valid_range(oh_len, g.stride[0], off_h, h);
                    for oh in h_lo..h_hi {
                        let ih = ((oh * g.stride[0]) as isize + off_h) as usize;
                        let dst = &mut plane[ih * w..(ih + 1) * w];
                        let src = &row[oh * ow_len..(oh + 1) * ow_len];
                        let start = ((w_lo * g.stride[1]) as isize + off_w) as usize;
                        let src = &src[w_lo..w_hi];
                        for (d, &v) in dst[start..].iter_mut().step_by(g.stride[1]).zip(src) {
                            *d += v;
                        }
                    }
                }
            }
        });
}

/// `plane[k + shift] += row[k]` over the span, except at its gaps: one long vectorised loop.
/// The plane's entries at the gaps (inside the image, but not read by these positions) are
/// saved in `saved` (the calling task's buffer, reused from call to call: a fresh zeroed array
/// per call cost more than the adds) before and put back after, so they are left exactly as
/// they were.
fn add_span<T: Real>(plane: &mut [T], row: &[T], span: &Span, w: usize, saved: &mut Vec<T>) {
    let dst = &mut plane[span.source()];
    let src = &row[span.start..span.end];
    let local = |k: usize| k - span.start;
    saved.clear();
    for gap in span.gaps(w) {
        saved.extend_from_slice(&dst[local(gap.start)..local(gap.end)]);
    }
    for (d, &v) in dst.iter_mut().zip(src) {
        *d += v;
    }
    let mut next = 0;
    for gap in span.gaps(w) {
        let len = gap.len();
        dst[local(gap.start)..local(gap.end)].copy_from_slice(&saved[next..next + len]);
        next += len;
    }
}

/// `G[co, (b, p)] = grad[first + b, co, p]` for a chunk of `images` images.
fn gather_output_grad<T: Real>(
    grad: &[T],
    g: &ConvGeometry,
    first: usize,
    images: usize,
    out: &mut [T],
) {
    let positions = g.positions();
    let columns = images * positions;
    out[..g.out_channels * columns]
        .par_chunks_mut(columns)
        .enumerate()
        .for_each(|(co, row)| {
            for b in 0..images {
                let src = ((first + b) * g.out_channels + co) * positions;
                row[b * positions..(b + 1) * positions]
                    .copy_from_slice(&grad[src..src + positions]);
            }
        });
}

fn check_lengths(g: &ConvGeometry, x: usize, w: usize) {
    assert!(
        g.out_size().is_some(),
        "conv2d: the kernel does not fit: {g:?}"
    );
    assert_eq!(x, g.input_len(), "conv2d: input length for {g:?}");
    assert_eq!(w, g.weight_len(), "conv2d: weight length for {g:?}");
}

/// The convolution's output `[batch, out_channels, out_h, out_w]`, row-major, in chunks of
/// images whose `colᵀ` stays near `budget` entries.
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`
/// - `weight`: `[out_channels, in_channels, kernel_h, kernel_w]`
pub fn forward<T: Real>(x: &[T], weight: &[T], g: &ConvGeometry, budget: usize) -> Vec<T> {
    check_lengths(g, x.len(), weight.len());
    let positions = g.positions();
    let rows = g.col_rows();
    let chunk = g.images_per_chunk(budget);
    let mut y = vec![T::default(); g.output_len()];
    let (col_len, out_len) = (rows * chunk * positions, g.out_channels * chunk * positions);
    with_scratch([col_len, out_len], |[col, out]: [&mut [T]; 2]| {
        let mut first = 0;
        while first < g.batch {
            let images = chunk.min(g.batch - first);
            let columns = images * positions;
            im2col(x, g, first, images, col);
            gemm(
                [g.out_channels, columns, rows],
                out,
                false,
                weight,
                (rows, 1),
                col,
                (columns, 1),
            );
            let y_chunk =
                &mut y[first * g.out_channels * positions..][..images * g.out_channels * positions];
            y_chunk
                .par_chunks_mut(positions)
                .enumerate()
                .for_each(|(plane, dst)| {
                    let (b, co) = (plane / g.out_channels, plane % g.out_channels);
                    dst.copy_from_slice(&out[co * columns + b * positions..][..positions]);
                });
            first += images;
        }
    });
    y
}

/// The gradients of the convolution with respect to its input and to its weight, given the
/// output gradient, each computed only when asked for, in chunks of images as [`forward`].
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`, `weight`: `[out_channels, in_channels, k_h, k_w]`
/// - `grad`: `[batch, out_channels, out_h, out_w]`
/// - returns `(∂x, ∂w)` shaped as `x` and `weight`
pub fn backward<T: Real>(
    x: &[T],
    weight: &[T],
    grad: &[T],
    g: &ConvGeometry,
    (want_x, want_w): (bool, bool),
    budget: usize,
) -> (Option<Vec<T>>, Option<Vec<T>>) {
    check_lengths(g, x.len(), weight.len());
    assert_eq!(
        grad.len(),
        g.output_len(),
        "conv2d: output gradient length for {g:?}"
    );
    let positions = g.positions();
    let rows = g.col_rows();
    let chunk = g.images_per_chunk(budget);
    let mut dx = want_x.then(|| vec![T::default(); g.input_len()]);
    let mut dw = want_w.then(|| vec![T::default(); g.weight_len()]);
    let (col_len, out_len) = (rows * chunk * positions, g.out_channels * chunk * positions);
    with_scratch([col_len, out_len], |[col, out_grad]: [&mut [T]; 2]| {
        let mut first = 0;
        while first < g.batch {
            let images = chunk.min(g.batch - first);
            let columns = images * positions;
            gather_output_grad(grad, g, first, images, out_grad);
            if let Some(dw) = dw.as_mut() {
                im2col(x, g, first, images, col);
                // ∂w[co, r] += Σ_col G[co, col] · colᵀ[r, col]: colᵀ read transposed.
                gemm(
                    [g.out_channels, rows, columns],
                    dw,
                    first > 0,
                    out_grad,
                    (columns, 1),
                    col,
                    (1, columns),
                );
            }
            if let Some(dx) = dx.as_mut() {
                // ∂colᵀ[r, col] = Σ_co w[co, r] · G[co, col]: the weight read transposed.
                gemm(
                    [rows, columns, g.out_channels],
                    col,
                    false,
                    weight,
                    (1, rows),
                    out_grad,
                    (columns, 1),
                );
                col2im(col, g, first, images, dx);
            }
            first += images;
        }
    });
    (dx, dw)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Both gradients by the im2col path (whatever [`super::super::conv::backward`] would choose).
    pub(in crate::kernels) fn backward_by_im2col(
        x: &[f64],
        w: &[f64],
        dy: &[f64],
        g: &ConvGeometry,
    ) -> (Vec<f64>, Vec<f64>) {
        let (dx, dw) = backward(x, w, dy, g, (true, true), CHUNK_ENTRIES);
        (dx.expect("asked for"), dw.expect("asked for"))
    }

    /// `ours` equals `expected` entry by entry within `tolerance` (and in length).
    pub(in crate::kernels) fn assert_close(
        ours: &[f64],
        expected: &[f64],
        tolerance: f64,
        what: &str,
    ) {
        assert_eq!(ours.len(), expected.len(), "{what}: length");
        for (k, (a, b)) in ours.iter().zip(expected).enumerate() {
            assert!((a - b).abs() < tolerance, "{what}[{k}]: {a} against {b}");
        }
    }

    /// The convolution by its definition, one multiply-add at a time.
    pub(in crate::kernels) fn direct(x: &[f64], w: &[f64], g: &ConvGeometry) -> Vec<f64> {
        let [h, wd] = g.in_size;
        let [oh, ow] = g.out_size().unwrap();
        let [kh, kw] = g.kernel;
        let mut y = vec![0.0; g.batch * g.out_channels * oh * ow];
        for n in 0..g.batch {
            for co in 0..g.out_channels {
                for a in 0..oh {
                    for b in 0..ow {
                        let mut s = 0.0;
                        for c in 0..g.in_channels {
                            for i in 0..kh {
                                for j in 0..kw {
                                    let ih = (a * g.stride[0] + i * g.dilation[0]) as isize
                                        - g.padding[0] as isize;
                                    let iw = (b * g.stride[1] + j * g.dilation[1]) as isize
                                        - g.padding[1] as isize;
                                    if ih < 0 || iw < 0 || ih >= h as isize || iw >= wd as isize {
                                        continue;
                                    }
                                    s += x[((n * g.in_channels + c) * h + ih as usize) * wd
                                        + iw as usize]
                                        * w[((co * g.in_channels + c) * kh + i) * kw + j];
                                }
                            }
                        }
                        y[((n * g.out_channels + co) * oh + a) * ow + b] = s;
                    }
                }
            }
        }
        y
    }

    use crate::kernels::gemm::test_values as values;

    fn geometries() -> Vec<ConvGeometry> {
        let g = |batch, ci, co, size: [usize; 2], k: [usize; 2], s, p, d| ConvGeometry {
            batch,
            in_channels: ci,
            out_channels: co,
            in_size: size,
            kernel: k,
            stride: [s, s],
            padding: [p, p],
            dilation: [d, d],
        };
        vec![
            g(2, 3, 4, [7, 6], [3, 3], 1, 1, 1),
            g(3, 2, 5, [9, 8], [3, 3], 2, 1, 1),
            g(1, 4, 3, [5, 5], [1, 1], 1, 0, 1),
            g(2, 3, 2, [8, 7], [1, 1], 2, 0, 1),
            g(2, 2, 3, [9, 9], [3, 2], 1, 2, 2),
            g(1, 1, 8, [11, 10], [7, 7], 2, 3, 1),
            g(2, 3, 3, [4, 4], [3, 3], 3, 0, 1),
            // Read by spans: gaps of 2 entries per row, and offsets that miss the image.
            g(2, 2, 3, [6, 7], [5, 5], 1, 2, 1),
            g(1, 2, 2, [2, 2], [5, 5], 1, 2, 1),
            // A long map (the gaps' buffer grows).
            g(1, 1, 2, [131, 5], [5, 5], 1, 2, 1),
        ]
    }

    /// The span path and the row-by-row path give the same bits: im2col copies, and col2im adds
    /// each plane's entries in the same order.
    #[test]
    fn spans_equal_rows_to_the_bit() {
        for g in geometries().into_iter().filter(Span::applies) {
            let x = values(g.input_len(), 6);
            let positions = g.positions();
            let len = g.col_rows() * g.batch * positions;
            let (mut by_span, mut by_row) = (vec![7.0; len], vec![-7.0; len]);
            im2col_by(&x, &g, 0, g.batch, &mut by_span, true);
            im2col_by(&x, &g, 0, g.batch, &mut by_row, false);
            assert_eq!(by_span, by_row, "im2col {g:?}");
            let col = values(len, 7);
            let start = values(g.input_len(), 8);
            let (mut dx_span, mut dx_row) = (start.clone(), start);
            col2im_by(&col, &g, 0, g.batch, &mut dx_span, true);
            col2im_by(&col, &g, 0, g.batch, &mut dx_row, false);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&dx_span), bits(&dx_row), "col2im {g:?}");
        }
    }

    #[test]
    fn the_tests_cover_every_span_case() {
        // At least one geometry with gaps of one entry per row, one with more, one without, and
        // one with an offset that misses the image.
        let spans: Vec<ConvGeometry> = geometries().into_iter().filter(Span::applies).collect();
        let offsets = |g: &ConvGeometry| {
            let (kh, kw) = (g.kernel[0] as isize, g.kernel[1] as isize);
            let p = g.padding[0] as isize;
            (0..kh).flat_map(move |i| (0..kw).map(move |j| (i - p, j - p)))
        };
        let all: Vec<(ConvGeometry, Option<Span>)> = spans
            .iter()
            .flat_map(|g| offsets(g).map(|(a, b)| (*g, Span::new(g, a, b))))
            .collect();
        let gap = |g: &ConvGeometry, s: &Span| g.in_size[1] - s.w_hi + s.w_lo;
        assert!(all.iter().any(|(_, s)| s.is_none()));
        for wanted in [0, 1, 2] {
            assert!(
                all.iter()
                    .any(|(g, s)| s.is_some_and(|s| gap(g, &s) == wanted)),
                "gaps of {wanted}"
            );
        }
    }

    #[test]
    fn forward_equals_the_definition() {
        for (g, budget) in cases() {
            let x = values(g.input_len(), 1);
            let w = values(g.weight_len(), 2);
            let y = forward(&x, &w, &g, budget);
            let expected = direct(&x, &w, &g);
            assert_close(&y, &expected, 1e-12, &format!("{g:?} budget {budget} y"));
        }
    }

    /// The gradients against the definition's: `y` is linear in `x` and in `w`, so
    /// `⟨∂y, y(x + e_k)⟩ − ⟨∂y, y(x)⟩` is exactly `∂x[k]` (and likewise for `w`); checked for
    /// every entry, f64, to rounding.
    #[test]
    fn gradients_equal_the_definition() {
        for (g, budget) in cases() {
            let x = values(g.input_len(), 3);
            let w = values(g.weight_len(), 4);
            let dy = values(g.output_len(), 5);
            let (dx, dw) = backward(&x, &w, &dy, &g, (true, true), budget);
            let (dx, dw) = (dx.unwrap(), dw.unwrap());
            let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
            for k in 0..x.len() {
                let mut e = vec![0.0; x.len()];
                e[k] = 1.0;
                let expected = dot(&dy, &direct(&e, &w, &g));
                assert!(
                    (dx[k] - expected).abs() < 1e-12,
                    "{g:?} ∂x[{k}]: {} against {expected}",
                    dx[k]
                );
            }
            for k in 0..w.len() {
                let mut e = vec![0.0; w.len()];
                e[k] = 1.0;
                let expected = dot(&dy, &direct(&x, &e, &g));
                assert!(
                    (dw[k] - expected).abs() < 1e-12,
                    "{g:?} ∂w[{k}]: {} against {expected}",
                    dw[k]
                );
            }
            // Asking for one gradient gives the same numbers.
            let (only_x, none) = backward(&x, &w, &dy, &g, (true, false), budget);
            assert!(none.is_none());
            assert_eq!(only_x.unwrap(), dx);
            let (none, only_w) = backward(&x, &w, &dy, &g, (false, true), budget);
            assert!(none.is_none());
            assert_eq!(only_w.unwrap(), dw);
        }
    }

    /// Each geometry with the whole batch in one chunk (the default budget) and with one image
    /// per chunk (a budget of one entry): the chunk loop's offsets and the weight gradient's
    /// accumulation over chunks are checked by the same definitions.
    fn cases() -> Vec<(ConvGeometry, usize)> {
        geometries()
            .into_iter()
            .flat_map(|g| [(g, CHUNK_ENTRIES), (g, 1)])
            .collect()
    }

    #[test]
    fn valid_range_covers_exactly_the_inside() {
        for out_len in 1..6 {
            for stride in 1..4 {
                for offset in -4isize..4 {
                    for in_len in 1..7 {
                        let (lo, hi) = valid_range(out_len, stride, offset, in_len);
                        for o in 0..out_len {
                            let i = (o * stride) as isize + offset;
                            let inside = i >= 0 && i < in_len as isize;
                            assert_eq!(
                                inside,
                                o >= lo && o < hi,
                                "{out_len} {stride} {offset} {in_len} {o}"
                            );
                        }
                    }
                }
            }
        }
    }
}
