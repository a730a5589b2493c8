//! The depthwise 2-D convolution — one filter per channel (`groups = in_channels =
//! out_channels`, weight `[c, 1, k_h, k_w]`), EfficientNet's and MobileNet-V3's 3 × 3 and 5 × 5
//! layers — and both its gradients, plane by plane on every core.
//!
//! burn 0.21 has no depthwise kernel on the CPU: `Flex` runs a grouped convolution as one
//! convolution per group, and burn-autodiff's backward of a grouped convolution goes through a
//! transposed convolution and a weight gradient per group, each a GEMM of one row. A depthwise
//! layer is a handful of multiply-adds per output, so the work is the memory traffic: here each
//! output plane is computed from its input plane in one pass per filter tap, the tap's weight
//! times a row of the input (contiguous at stride 1, so the inner loop vectorises).
//!
//! Every output entry sums its taps in the same order whatever the thread count (threads split
//! the planes, never a sum), so results do not depend on the number of cores. The weight's
//! gradient sums each row's products in the element type and the rows in `f64`.

use rayon::prelude::*;

use super::gemm::Real;
use super::geometry::ConvGeometry;

/// For output index `o` along one axis and a tap at offset `tap` (`kernel index · dilation`),
/// the input index `o · stride + tap − padding`, or `None` outside the input.
#[cfg(test)]
fn input_index(o: usize, tap: usize, stride: usize, padding: usize, size: usize) -> Option<usize> {
    (o * stride + tap)
        .checked_sub(padding)
        .filter(|&i| i < size)
}

/// The output indices `o` along one axis whose input index for the tap lies inside the input:
/// `o · stride + tap − padding ∈ [0, size)`, as a range of `o` within `[0, out)`.
fn valid_outputs(
    tap: usize,
    stride: usize,
    padding: usize,
    size: usize,
    out: usize,
) -> std::ops::Range<usize> {
    // o · s ≥ padding − tap  and  o · s ≤ size − 1 + padding − tap.
    let first = padding.saturating_sub(tap).div_ceil(stride);
    let last = match (size + padding).checked_sub(tap + 1) {
        Some(top) => (top / stride + 1).min(out),
        None => 0,
    };
    first.min(last)..last
}

/// A filter tap `(a, b)` and where it reaches: the output rows and columns whose input lies
/// inside the input, and the input positions that go with them. What the three kernels below
/// walk; computed once per call.
struct Tap {
    /// `a · k_w + b`: the tap's place in its channel's filter.
    index: usize,
    /// The output rows `i` it reaches; the input row of `i` is `i · stride + row_shift`.
    rows: std::ops::Range<usize>,
    /// `a · dilation − padding` (never negative for a row in `rows`, so it is applied after the
    /// product; kept as the two parts).
    row_shift: (usize, usize),
    /// The output columns it reaches.
    columns: std::ops::Range<usize>,
    /// The input column of the first of `columns`; the next ones are `stride` apart.
    first_column: usize,
}

impl Tap {
    /// The input row that output row `i` (in `rows`) reads.
    fn input_row(&self, i: usize, stride: usize) -> usize {
        i * stride + self.row_shift.0 - self.row_shift.1
    }
}

/// The taps of `g`'s filter that reach at least one output, in filter order.
fn taps(g: &ConvGeometry) -> Vec<Tap> {
    let [h, w] = g.in_size;
    let [oh, ow] = g.out_size().expect("a geometry whose kernel fits");
    let mut taps = Vec::new();
    for a in 0..g.kernel[0] {
        let rows = valid_outputs(a * g.dilation[0], g.stride[0], g.padding[0], h, oh);
        for b in 0..g.kernel[1] {
            let columns = valid_outputs(b * g.dilation[1], g.stride[1], g.padding[1], w, ow);
            if rows.is_empty() || columns.is_empty() {
                continue;
            }
            taps.push(Tap {
                index: a * g.kernel[1] + b,
                rows: rows.clone(),
                row_shift: (a * g.dilation[0], g.padding[0]),
                first_column: columns.start * g.stride[1] + b * g.dilation[1] - g.padding[1],
                columns,
            });
        }
    }
    taps
}

/// The depthwise convolution's output `[batch, c, out_h, out_w]`, row-major.
///
/// # Shapes
/// - `x`: `[batch, c, in_h, in_w]` (`g.in_channels = g.out_channels = c`)
/// - `weight`: `[c, 1, kernel_h, kernel_w]`
pub fn forward<T: Real>(x: &[T], weight: &[T], g: &ConvGeometry) -> Vec<T> {
    let c = g.in_channels;
    let [h, w] = g.in_size;
    let [kh, kw] = g.kernel;
    let [oh, ow] = g.out_size().expect("a geometry whose kernel fits");
    assert_eq!(x.len(), g.batch * c * h * w, "depthwise input");
    assert_eq!(weight.len(), c * kh * kw, "depthwise weight");
    let taps = taps(g);
    let step = g.stride[1];
    let mut y = vec![T::default(); g.batch * c * oh * ow];
    y.par_chunks_mut((oh * ow).max(1))
        .enumerate()
        .for_each(|(plane, out)| {
            let channel = plane % c;
            let input = &x[plane * h * w..(plane + 1) * h * w];
            let filter = &weight[channel * kh * kw..(channel + 1) * kh * kw];
            for tap in &taps {
                let value = filter[tap.index];
                let (first, len) = (tap.first_column, tap.columns.len());
                for i in tap.rows.clone() {
                    let ih = tap.input_row(i, g.stride[0]);
                    let row = &input[ih * w..(ih + 1) * w];
                    let out_row = &mut out[i * ow..(i + 1) * ow][tap.columns.clone()];
                    if step == 1 {
                        for (o, &v) in out_row.iter_mut().zip(&row[first..first + len]) {
                            *o += value * v;
                        }
                    } else {
                        for (k, o) in out_row.iter_mut().enumerate() {
                            *o += value * row[first + k * step];
                        }
                    }
                }
            }
        });
    y
}

/// The gradients of the depthwise convolution with respect to its input and to its weight,
/// given the output gradient; each is computed only when asked for (`wanted`: `(∂x, ∂w)`).
///
/// # Shapes
/// - `x`: `[batch, c, in_h, in_w]`, `weight`: `[c, 1, k_h, k_w]`
/// - `grad`: `[batch, c, out_h, out_w]`
/// - returns `(∂x, ∂w)` shaped as `x` and `weight`
pub fn backward<T: Real>(
    x: &[T],
    weight: &[T],
    grad: &[T],
    g: &ConvGeometry,
    wanted: (bool, bool),
) -> (Option<Vec<T>>, Option<Vec<T>>) {
    let c = g.in_channels;
    let [h, w] = g.in_size;
    let [kh, kw] = g.kernel;
    let [oh, ow] = g.out_size().expect("a geometry whose kernel fits");
    assert_eq!(
        grad.len(),
        g.batch * c * oh * ow,
        "depthwise output gradient"
    );
    let taps = taps(g);
    let step = g.stride[1];
    let dx = wanted.0.then(|| {
        let mut dx = vec![T::default(); g.batch * c * h * w];
        dx.par_chunks_mut((h * w).max(1))
            .enumerate()
            .for_each(|(plane, dx)| {
                let channel = plane % c;
                let dy = &grad[plane * oh * ow..(plane + 1) * oh * ow];
                let filter = &weight[channel * kh * kw..(channel + 1) * kh * kw];
                for tap in &taps {
                    let value = filter[tap.index];
                    let (first, len) = (tap.first_column, tap.columns.len());
                    for i in tap.rows.clone() {
                        let ih = tap.input_row(i, g.stride[0]);
                        let dx_row = &mut dx[ih * w..(ih + 1) * w];
                        let dy_row = &dy[i * ow..(i + 1) * ow][tap.columns.clone()];
                        if step == 1 {
                            for (d, &v) in dx_row[first..first + len].iter_mut().zip(dy_row) {
                                *d += value * v;
                            }
                        } else {
                            for (k, &v) in dy_row.iter().enumerate() {
                                dx_row[first + k * step] += value * v;
                            }
                        }
                    }
                }
            });
        dx
    });
    let dw = wanted.1.then(|| {
        // A tap that reaches no output keeps its zero.
        let mut dw = vec![T::default(); c * kh * kw];
        dw.par_chunks_mut((kh * kw).max(1))
            .enumerate()
            .for_each(|(channel, dw)| {
                for tap in &taps {
                    let first = tap.first_column;
                    let mut total = 0.0f64;
                    for n in 0..g.batch {
                        let plane = n * c + channel;
                        let input = &x[plane * h * w..(plane + 1) * h * w];
                        let dy = &grad[plane * oh * ow..(plane + 1) * oh * ow];
                        for i in tap.rows.clone() {
                            let ih = tap.input_row(i, g.stride[0]);
                            let row = &input[ih * w..(ih + 1) * w];
                            let dy_row = &dy[i * ow..(i + 1) * ow][tap.columns.clone()];
                            let mut sum = T::default();
                            for (k, &v) in dy_row.iter().enumerate() {
                                sum += v * row[first + k * step];
                            }
                            total += sum.to_f64();
                        }
                    }
                    dw[tap.index] = T::from_f64(total);
                }
            });
        dw
    });
    (dx, dw)
}

/// The definition, one output at a time, for the tests.
#[cfg(test)]
fn forward_by_definition(x: &[f64], weight: &[f64], g: &ConvGeometry) -> Vec<f64> {
    let c = g.in_channels;
    let [h, w] = g.in_size;
    let [kh, kw] = g.kernel;
    let [oh, ow] = g.out_size().unwrap();
    let mut y = vec![0.0; g.batch * c * oh * ow];
    for n in 0..g.batch {
        for ch in 0..c {
            for i in 0..oh {
                for j in 0..ow {
                    let mut s = 0.0;
                    for a in 0..kh {
                        for b in 0..kw {
                            let ih =
                                input_index(i, a * g.dilation[0], g.stride[0], g.padding[0], h);
                            let iw =
                                input_index(j, b * g.dilation[1], g.stride[1], g.padding[1], w);
                            if let (Some(ih), Some(iw)) = (ih, iw) {
                                s += x[((n * c + ch) * h + ih) * w + iw]
                                    * weight[(ch * kh + a) * kw + b];
                            }
                        }
                    }
                    y[((n * c + ch) * oh + i) * ow + j] = s;
                }
            }
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::super::gemm::test_values;
    use super::*;

    fn geometry(
        batch: usize,
        c: usize,
        size: [usize; 2],
        kernel: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
    ) -> ConvGeometry {
        ConvGeometry {
            batch,
            in_channels: c,
            out_channels: c,
            in_size: size,
            kernel: [kernel, kernel],
            stride: [stride, stride],
            padding: [padding, padding],
            dilation: [dilation, dilation],
        }
    }

    /// EfficientNet's and MobileNet's shapes (3 × 3 and 5 × 5, stride 1 and 2, "same"
    /// padding), odd sizes, a kernel wider than the padded input allows at the edges, no
    /// padding, and dilation.
    fn cases() -> Vec<ConvGeometry> {
        vec![
            geometry(2, 3, [7, 7], 3, 1, 1, 1),
            geometry(2, 3, [8, 9], 3, 2, 1, 1),
            geometry(1, 4, [9, 7], 5, 1, 2, 1),
            geometry(3, 2, [9, 9], 5, 2, 2, 1),
            geometry(2, 2, [6, 5], 3, 1, 0, 1),
            geometry(1, 3, [4, 4], 5, 2, 2, 1),
            geometry(2, 2, [9, 8], 3, 1, 2, 2),
            geometry(1, 2, [2, 3], 3, 3, 1, 1),
        ]
    }

    /// The forward pass is the definition's to rounding (f64: each output is the same taps,
    /// summed in another order).
    #[test]
    fn forward_is_the_definition() {
        for (k, g) in cases().into_iter().enumerate() {
            let [h, w] = g.in_size;
            let c = g.in_channels;
            let x = test_values(g.batch * c * h * w, 10 + k as u64);
            let weight = test_values(c * g.kernel[0] * g.kernel[1], 20 + k as u64);
            let fast = forward(&x, &weight, &g);
            let slow = forward_by_definition(&x, &weight, &g);
            assert_eq!(fast.len(), slow.len(), "{g:?}");
            for (a, b) in fast.iter().zip(&slow) {
                assert!((a - b).abs() <= 1e-14, "{g:?}: {a} vs {b}");
            }
        }
    }

    /// Both gradients are those of the loss `Σ y · r` for a fixed `r`: `∂x` and `∂w` against
    /// central finite differences of the definition (f64; the loss is linear in each argument,
    /// so the difference quotient is exact up to rounding, 1e-9 with steps of 1e-3 on values
    /// of order one).
    #[test]
    fn gradients_are_the_finite_differences_of_the_definition() {
        for (k, g) in cases().into_iter().enumerate() {
            let [h, w] = g.in_size;
            let c = g.in_channels;
            let [oh, ow] = g.out_size().unwrap();
            let x = test_values(g.batch * c * h * w, 30 + k as u64);
            let weight = test_values(c * g.kernel[0] * g.kernel[1], 40 + k as u64);
            let r = test_values(g.batch * c * oh * ow, 50 + k as u64);
            let loss = |x: &[f64], weight: &[f64]| -> f64 {
                forward_by_definition(x, weight, &g)
                    .iter()
                    .zip(&r)
                    .map(|(y, r)| y * r)
                    .sum()
            };
            let (dx, dw) = backward(&x, &weight, &r, &g, (true, true));
            let (dx, dw) = (dx.unwrap(), dw.unwrap());
            let step = 1e-3;
            for i in 0..x.len() {
                let (mut up, mut down) = (x.clone(), x.clone());
                up[i] += step;
                down[i] -= step;
                let numeric = (loss(&up, &weight) - loss(&down, &weight)) / (2.0 * step);
                assert!(
                    (dx[i] - numeric).abs() < 1e-9,
                    "{g:?} dx[{i}]: {} vs {numeric}",
                    dx[i]
                );
            }
            for i in 0..weight.len() {
                let (mut up, mut down) = (weight.clone(), weight.clone());
                up[i] += step;
                down[i] -= step;
                let numeric = (loss(&x, &up) - loss(&x, &down)) / (2.0 * step);
                assert!(
                    (dw[i] - numeric).abs() < 1e-9,
                    "{g:?} dw[{i}]: {} vs {numeric}",
                    dw[i]
                );
            }
            // Asked for one gradient, it computes that one only.
            let (only_dx, none) = backward(&x, &weight, &r, &g, (true, false));
            assert!(none.is_none() && only_dx.is_some());
        }
    }

    /// The valid output range is the set of outputs whose input index exists, for every small
    /// case (checked against `input_index` one output at a time).
    #[test]
    fn valid_outputs_are_those_with_an_input() {
        for size in 1..7 {
            for stride in 1..4 {
                for padding in 0..3 {
                    for tap in 0..6 {
                        for out in 0..8 {
                            let range = valid_outputs(tap, stride, padding, size, out);
                            for o in 0..out {
                                let has = input_index(o, tap, stride, padding, size).is_some();
                                assert_eq!(
                                    range.contains(&o),
                                    has,
                                    "size {size} stride {stride} padding {padding} tap {tap} out {out} o {o}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
