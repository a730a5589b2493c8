//! The 3×3 convolution at stride 1 by Winograd's minimal filtering F(2×2, 3×3) (Lavin & Gray,
//! "Fast Algorithms for Convolutional Neural Networks", CVPR 2016, arXiv:1509.09308), forward
//! and both gradients.
//!
//! Why this file exists: a ResNet's 3×3 stride-1 convolutions are nearly all of its arithmetic,
//! and the im2col GEMMs of [`super::conv`] spend 36 multiply-adds per 2×2 block of outputs and
//! channel pair; Winograd's F(2×2, 3×3) spends 16, and its transformed input is 4× the input
//! where im2col's is 9×. No maintained Rust crate computes it (NNPACK and oneDNN do in C/C++).
//!
//! With `d` a 4×4 input patch (stride 2 between patches, so neighbours overlap by two rows or
//! columns), `g` a 3×3 filter and `Y` the patch's 2×2 outputs (cross-correlation, as PyTorch):
//!
//! `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`, with
//! `Bᵀ = [[1,0,−1,0],[0,1,1,0],[0,−1,1,0],[0,1,0,−1]]`, `G = [[1,0,0],[½,½,½],[½,−½,½],[0,0,1]]`,
//! `Aᵀ = [[1,1,1,0],[0,1,−1,−1]]`.
//!
//! Summed over input channels, each of the 16 entries `ξ` of the element-wise product is a
//! GEMM over all tiles `t` of a chunk of images: `M[ξ] = U[ξ] · V[ξ]`, `U[ξ][co][c] = (G g Gᵀ)[ξ]`,
//! `V[ξ][c][t] = (Bᵀ d B)[ξ]`. The gradients are the transposes of the same linear maps:
//!
//! - `∂M = A ∂Y Aᵀ` per tile (zero for the outputs past the map's edge);
//! - weight: `∂U[ξ] = Σ_t ∂M[ξ] · V[ξ]ᵀ`, then `∂g = Gᵀ ∂U G`;
//! - input: `∂V[ξ] = U[ξ]ᵀ · ∂M[ξ]`, then `∂d = B ∂V Bᵀ`, added into the overlapping patches
//!   (entries in the padding dropped).
//!
//! The transforms' coefficients are 0, ±1 and ±½, so F(2×2, 3×3) is as accurate as the direct
//! sum to a few units in the last place (the larger tiles, F(4×4, 3×3), are not: their
//! coefficients reach 8). The unit tests hold it to the definition in f64.

use rayon::prelude::*;

use super::conv::{gemm_on, with_scratch, ConvGeometry};
use super::Real;

/// Channels (in and out) below which [`covers`] leaves a layer to im2col.
pub const MIN_CHANNELS: usize = 64;

/// Output positions (`out_h · out_w`) below which [`covers`] leaves a layer to im2col.
///
/// Both thresholds are measured (2 cores, AVX-512, release): on ResNet-18's SimCLR step
/// (channels 64–512, maps 32×32 to 4×4) Winograd on every 3×3 stride-1 layer and on those with
/// at least 64 channels and 64 positions took the same time (4.57–4.65 s a step at batch 128,
/// against 7.4 s by im2col alone); on the CPU default `small-2x` (16–128 channels, maps 14×14
/// to 2×2, batch 64) every mix of Winograd layers was 1–6 % slower than im2col alone, whose
/// products there are too small for the transforms to pay. So the small networks keep im2col
/// (and their numbers to the bit).
pub const MIN_POSITIONS: usize = 64;

/// The number of transformed entries per tile: the 4×4 patch.
const XI: usize = 16;

/// Whether this file can compute the convolution `g`: a 3×3 kernel at stride 1 without
/// dilation, any zero padding.
pub fn supports(g: &ConvGeometry) -> bool {
    g.kernel == [3, 3] && g.stride == [1, 1] && g.dilation == [1, 1] && g.out_size().is_some()
}

/// Whether [`super::conv`] computes the convolution `g` here: [`supports`], with at least
/// [`MIN_CHANNELS`] input and output channels and [`MIN_POSITIONS`] output positions.
pub fn covers(g: &ConvGeometry) -> bool {
    supports(g)
        && g.in_channels >= MIN_CHANNELS
        && g.out_channels >= MIN_CHANNELS
        && g.out_size().is_some_and(|[h, w]| h * w >= MIN_POSITIONS)
}

/// How a map is cut into 2×2 output tiles: tile `(a, b)` holds outputs `2a..2a+2 × 2b..2b+2`
/// and reads the input patch whose top-left corner is `(2a − pad_h, 2b − pad_w)`.
#[derive(Debug, Clone, Copy)]
struct Tiles {
    rows: usize,
    cols: usize,
    out: [usize; 2],
    size: [usize; 2],
    pad: [usize; 2],
}

impl Tiles {
    fn new(g: &ConvGeometry) -> Self {
        let out = g.out_size().expect("checked by `covers`");
        Self {
            rows: out[0].div_ceil(2),
            cols: out[1].div_ceil(2),
            out,
            size: g.in_size,
            pad: g.padding,
        }
    }

    fn per_image(&self) -> usize {
        self.rows * self.cols
    }

    /// The first input row of tile row `a`'s patches (negative in the padding).
    fn first_row(&self, a: usize) -> isize {
        (2 * a) as isize - self.pad[0] as isize
    }
}

/// Images per chunk: the transformed input and output near `budget` entries, at least one.
fn images_per_chunk(g: &ConvGeometry, tiles: &Tiles, budget: usize) -> usize {
    let per_image = XI * g.in_channels.max(g.out_channels) * tiles.per_image();
    (budget / per_image.max(1)).clamp(1, g.batch.max(1))
}

/// `buf`'s first `16·plane` entries, laid out `[ξ][plane]`, cut into pieces of `piece`
/// entries: item `q` holds piece `q` of each of the 16 planes, so one task per item writes
/// disjoint rows (per channel, `plane = channels·t_len` and `piece = t_len`).
fn split_planes<T>(buf: &mut [T], plane: usize, piece: usize) -> Vec<Vec<&mut [T]>> {
    let mut per_xi: Vec<_> = buf[..XI * plane]
        .chunks_mut(plane)
        .map(|p| p.chunks_mut(piece))
        .collect();
    (0..plane.div_ceil(piece))
        .map(|_| {
            per_xi
                .iter_mut()
                .map(|pieces| pieces.next().expect("as many pieces in every plane"))
                .collect()
        })
        .collect()
}

/// `dst[b] = f(a[b], c[b])` over the shortest of the three.
#[inline(always)]
fn map2<T: Real>(dst: &mut [T], a: &[T], c: &[T], f: impl Fn(T, T) -> T) {
    for ((d, &p), &q) in dst.iter_mut().zip(a).zip(c) {
        *d = f(p, q);
    }
}

/// `dst[b] = −a[b]` over the shorter of the two.
#[inline(always)]
fn negate<T: Real>(dst: &mut [T], a: &[T]) {
    for (d, &p) in dst.iter_mut().zip(a) {
        *d = T::default() - p;
    }
}

/// `dst[b] = f(a[b], c[b], e[b])` over the shortest of the four.
#[inline(always)]
fn map3<T: Real>(dst: &mut [T], a: &[T], c: &[T], e: &[T], f: impl Fn(T, T, T) -> T) {
    for (((d, &p), &q), &r) in dst.iter_mut().zip(a).zip(c).zip(e) {
        *d = f(p, q, r);
    }
}

/// `G·(a, b, c)` plane by plane: `(a, (a + b + c)/2, (a − b + c)/2, c)` into `dst[0..4]`.
fn g_planes<T: Real>(dst: [&mut [T]; 4], [a, b, c]: [&[T]; 3], half: T) {
    let [d0, d1, d2, d3] = dst;
    d0.copy_from_slice(a);
    map3(d1, a, b, c, |p, q, r| (p + q + r) * half);
    map3(d2, a, b, c, |p, q, r| (p - q + r) * half);
    d3.copy_from_slice(c);
}

/// `Gᵀ·(u0, u1, u2, u3)` plane by plane: `(u0 + (u1 + u2)/2, (u1 − u2)/2, (u1 + u2)/2 + u3)`.
fn gt_planes<T: Real>(dst: [&mut [T]; 3], [u0, u1, u2, u3]: [&[T]; 4], half: T) {
    let [d0, d1, d2] = dst;
    map3(d0, u0, u1, u2, |p, q, r| p + (q + r) * half);
    map2(d1, u1, u2, |q, r| (q - r) * half);
    map3(d2, u1, u2, u3, |q, r, s| (q + r) * half + s);
}

/// `n` planes of `len` entries each, cut from `buf`.
fn planes<T, const N: usize>(buf: &mut [T], len: usize) -> [&mut [T]; N] {
    let mut pieces = buf.chunks_mut(len);
    std::array::from_fn(|_| pieces.next().expect("enough planes"))
}

/// Filter pairs per task of the filter transforms.
const PAIRS_PER_TASK: usize = 2048;

/// `G g Gᵀ` of every filter into `u`: `U[ξ][co][c]`. Per task of filter pairs, the 9 taps are
/// laid out as planes first, so both stages are element-wise operations on whole planes.
fn transform_filters<T: Real>(weight: &[T], g: &ConvGeometry, u: &mut [T]) {
    let pairs = g.in_channels * g.out_channels;
    let half = T::from_f64(0.5);
    split_planes(u, pairs, PAIRS_PER_TASK)
        .into_par_iter()
        .enumerate()
        .for_each(|(q, out)| {
            let len = out[0].len();
            let mut buf = vec![T::default(); 21 * len];
            let (taps, columns) = buf.split_at_mut(9 * len);
            for (k, filter) in weight[q * PAIRS_PER_TASK * 9..][..9 * len]
                .chunks(9)
                .enumerate()
            {
                for (tap, &value) in filter.iter().enumerate() {
                    taps[tap * len + k] = value;
                }
            }
            // G on the columns: columns[i][l] = Σ_k G[i][k] g[k][l].
            let tap = |k: usize, l: usize| &taps[(3 * k + l) * len..][..len];
            let mut by_l: [[&mut [T]; 4]; 3] = {
                let mut all = columns.chunks_mut(len);
                std::array::from_fn(|_| std::array::from_fn(|_| all.next().expect("12 planes")))
            };
            for (l, dst) in by_l.iter_mut().enumerate() {
                let [d0, d1, d2, d3] = dst;
                g_planes([d0, d1, d2, d3], [tap(0, l), tap(1, l), tap(2, l)], half);
            }
            // G on the rows: U[4i + j] = Σ_l columns[i][l] G[j][l].
            let [c0, c1, c2] = by_l;
            let mut out = out.into_iter();
            for ((a, b), c) in c0.into_iter().zip(c1).zip(c2) {
                let dst: [&mut [T]; 4] = std::array::from_fn(|_| out.next().expect("16 planes"));
                g_planes(dst, [&*a, &*b, &*c], half);
            }
        });
}

/// `Gᵀ ∂U G` of every filter: the weight gradient `[c_out, c_in, 3, 3]` from `∂U[ξ][co][c]`,
/// plane by plane as [`transform_filters`], the 9 taps put back in place at the end.
fn filter_grads<T: Real>(du: &[T], g: &ConvGeometry) -> Vec<T> {
    let pairs = g.in_channels * g.out_channels;
    let half = T::from_f64(0.5);
    let mut dw = vec![T::default(); pairs * 9];
    dw.par_chunks_mut(9 * PAIRS_PER_TASK)
        .enumerate()
        .for_each(|(q, task)| {
            let len = task.len() / 9;
            let start = q * PAIRS_PER_TASK;
            let plane = |xi: usize| &du[xi * pairs + start..][..len];
            let mut buf = vec![T::default(); 21 * len];
            let (columns, taps) = buf.split_at_mut(12 * len);
            // Gᵀ on the columns: columns[k][j] = Σ_i G[i][k] ∂U[4i + j].
            {
                let mut all = columns.chunks_mut(len);
                for j in 0..4 {
                    let dst: [&mut [T]; 3] =
                        std::array::from_fn(|_| all.next().expect("12 planes"));
                    gt_planes(
                        dst,
                        [plane(j), plane(4 + j), plane(8 + j), plane(12 + j)],
                        half,
                    );
                }
            }
            // … and on the rows: taps[k][l] = Σ_j columns[k][j] G[j][l].
            let column = |j: usize, k: usize| &columns[(3 * j + k) * len..][..len];
            for k in 0..3 {
                let dst: [&mut [T]; 3] = planes(&mut taps[3 * k * len..3 * (k + 1) * len], len);
                gt_planes(
                    dst,
                    [column(0, k), column(1, k), column(2, k), column(3, k)],
                    half,
                );
            }
            for (p, filter) in task.chunks_mut(9).enumerate() {
                for (tap, value) in filter.iter_mut().enumerate() {
                    *value = taps[tap * len + p];
                }
            }
        });
    dw
}

/// `V[ξ][c][t]` (`Bᵀ d B` of every tile's 4×4 patch) for `images` images starting at `first`;
/// `t = image·tiles + a·cols + b`.
///
/// One tile row at a time: the four input rows it reads, padded and split into their even and
/// odd columns (`E[b] = row[2b − pad]`, `O[b] = row[2b + 1 − pad]`), so that `Bᵀ` on the
/// columns and `B` on the rows are element-wise operations on whole rows of tiles.
fn transform_input<T: Real>(
    x: &[T],
    g: &ConvGeometry,
    tiles: &Tiles,
    first: usize,
    images: usize,
    v: &mut [T],
) {
    let [h, w] = tiles.size;
    let cols = tiles.cols;
    let half = cols + 1;
    let t_len = images * tiles.per_image();
    let pw = tiles.pad[1];
    split_planes(v, g.in_channels * t_len, t_len)
        .into_par_iter()
        .enumerate()
        .for_each(|(c, mut out)| {
            // Even and odd columns of the 4 input rows, then of Bᵀ applied to them.
            let mut buf = vec![T::default(); 16 * half];
            let (inputs, transformed) = buf.split_at_mut(8 * half);
            for image in 0..images {
                let plane_start = ((first + image) * g.in_channels + c) * h * w;
                let plane = &x[plane_start..plane_start + h * w];
                for a in 0..tiles.rows {
                    let r0 = tiles.first_row(a);
                    for (r, pair) in inputs.chunks_mut(2 * half).enumerate() {
                        let (even, odd) = pair.split_at_mut(half);
                        let ih = r0 + r as isize;
                        if ih < 0 || ih >= h as isize {
                            even.fill(T::default());
                            odd.fill(T::default());
                            continue;
                        }
                        // Input column s is padded column s + pad: E takes the even ones, O
                        // the odd ones, the rest is padding.
                        even.fill(T::default());
                        odd.fill(T::default());
                        let row = &plane[ih as usize * w..][..w];
                        let e_first = pw % 2;
                        for (d, &value) in even[(e_first + pw) / 2..]
                            .iter_mut()
                            .zip(row.iter().skip(e_first).step_by(2))
                        {
                            *d = value;
                        }
                        let o_first = 1 - e_first;
                        for (d, &value) in odd[(o_first + pw) / 2..]
                            .iter_mut()
                            .zip(row.iter().skip(o_first).step_by(2))
                        {
                            *d = value;
                        }
                    }
                    // Bᵀ on the columns, for the even and the odd halves at once.
                    let d = |r: usize| &inputs[r * 2 * half..(r + 1) * 2 * half];
                    let mut t = transformed.chunks_mut(2 * half);
                    map2(t.next().unwrap(), d(0), d(2), |p, q| p - q);
                    map2(t.next().unwrap(), d(1), d(2), |p, q| p + q);
                    map2(t.next().unwrap(), d(2), d(1), |p, q| p - q);
                    map2(t.next().unwrap(), d(1), d(3), |p, q| p - q);
                    // B on the rows: the tile at b reads E[b], O[b], E[b + 1], O[b + 1].
                    let base = image * tiles.per_image() + a * cols;
                    for i in 0..4 {
                        let (e, o) = transformed[i * 2 * half..(i + 1) * 2 * half].split_at(half);
                        let (e0, e1, o0, o1) = (&e[..cols], &e[1..], &o[..cols], &o[1..]);
                        map2(&mut out[4 * i][base..base + cols], e0, e1, |p, q| p - q);
                        map2(&mut out[4 * i + 1][base..base + cols], o0, e1, |p, q| p + q);
                        map2(&mut out[4 * i + 2][base..base + cols], e1, o0, |p, q| p - q);
                        map2(&mut out[4 * i + 3][base..base + cols], o0, o1, |p, q| p - q);
                    }
                }
            }
        });
}

/// The outputs `y` (`[images, c_out, out_h, out_w]`) from the products `M[ξ][co][t]`: `Aᵀ` on
/// the columns and `A` on the rows, a tile row at a time, the even and odd output columns
/// computed apart and interleaved.
fn transform_output<T: Real>(m: &[T], g: &ConvGeometry, tiles: &Tiles, images: usize, y: &mut [T]) {
    let [oh, ow] = tiles.out;
    let cols = tiles.cols;
    let t_len = images * tiles.per_image();
    let c_out = g.out_channels;
    y[..images * c_out * oh * ow]
        .par_chunks_mut(oh * ow)
        .enumerate()
        .for_each_init(
            || vec![T::default(); 10 * cols],
            |buf, (plane, dst)| {
                let (image, co) = (plane / c_out, plane % c_out);
                let (s, outs) = buf.split_at_mut(8 * cols);
                let (even, odd) = outs.split_at_mut(cols);
                for a in 0..tiles.rows {
                    let base = image * tiles.per_image() + a * cols;
                    let mrow = |xi: usize| &m[(xi * c_out + co) * t_len + base..][..cols];
                    // Aᵀ on the columns: S[u][j].
                    for j in 0..4 {
                        let (s0, s1) = s.split_at_mut(4 * cols);
                        map3(
                            &mut s0[j * cols..(j + 1) * cols],
                            mrow(j),
                            mrow(4 + j),
                            mrow(8 + j),
                            |p, q, r| p + q + r,
                        );
                        map3(
                            &mut s1[j * cols..(j + 1) * cols],
                            mrow(4 + j),
                            mrow(8 + j),
                            mrow(12 + j),
                            |p, q, r| p - q - r,
                        );
                    }
                    for u in 0..2 {
                        let oy = 2 * a + u;
                        if oy >= oh {
                            break;
                        }
                        let su = |j: usize| &s[(4 * u + j) * cols..(4 * u + j + 1) * cols];
                        map3(even, su(0), su(1), su(2), |p, q, r| p + q + r);
                        map3(odd, su(1), su(2), su(3), |p, q, r| p - q - r);
                        let row = &mut dst[oy * ow..(oy + 1) * ow];
                        for ((pair, &e), &o) in row.chunks_mut(2).zip(even.iter()).zip(odd.iter()) {
                            pair[0] = e;
                            if let Some(second) = pair.get_mut(1) {
                                *second = o;
                            }
                        }
                    }
                }
            },
        );
}

/// `∂M[ξ][co][t] = (A ∂Y Aᵀ)[ξ]` from the output gradient of `images` images starting at
/// `first` (zero for the outputs past the map's edge), a tile row at a time.
fn transform_output_grad<T: Real>(
    grad: &[T],
    g: &ConvGeometry,
    tiles: &Tiles,
    first: usize,
    images: usize,
    dm: &mut [T],
) {
    let [oh, ow] = tiles.out;
    let cols = tiles.cols;
    let t_len = images * tiles.per_image();
    split_planes(dm, g.out_channels * t_len, t_len)
        .into_par_iter()
        .enumerate()
        .for_each(|(co, mut out)| {
            // The two output rows' even and odd columns, then A on the columns (C[i], even and
            // odd).
            let mut buf = vec![T::default(); 12 * cols];
            let (dy, c) = buf.split_at_mut(4 * cols);
            for image in 0..images {
                let plane_start = ((first + image) * g.out_channels + co) * oh * ow;
                let plane = &grad[plane_start..plane_start + oh * ow];
                for a in 0..tiles.rows {
                    for (u, pair) in dy.chunks_mut(2 * cols).enumerate() {
                        let (even, odd) = pair.split_at_mut(cols);
                        let oy = 2 * a + u;
                        if oy >= oh {
                            even.fill(T::default());
                            odd.fill(T::default());
                            continue;
                        }
                        let row = &plane[oy * ow..(oy + 1) * ow];
                        for (b, (e, o)) in even.iter_mut().zip(odd.iter_mut()).enumerate() {
                            *e = row[2 * b];
                            *o = row.get(2 * b + 1).copied().unwrap_or_default();
                        }
                    }
                    // A·(y0, y1) = (y0, y0 + y1, y0 − y1, −y1) on the columns …
                    let (y0, y1) = dy.split_at(2 * cols);
                    let mut ci = c.chunks_mut(2 * cols);
                    ci.next().unwrap().copy_from_slice(y0);
                    map2(ci.next().unwrap(), y0, y1, |p, q| p + q);
                    map2(ci.next().unwrap(), y0, y1, |p, q| p - q);
                    negate(ci.next().unwrap(), y1);
                    // … and on the rows.
                    let base = image * tiles.per_image() + a * cols;
                    for i in 0..4 {
                        let (e, o) = c[i * 2 * cols..(i + 1) * 2 * cols].split_at(cols);
                        out[4 * i][base..base + cols].copy_from_slice(e);
                        map2(&mut out[4 * i + 1][base..base + cols], e, o, |p, q| p + q);
                        map2(&mut out[4 * i + 2][base..base + cols], e, o, |p, q| p - q);
                        negate(&mut out[4 * i + 3][base..base + cols], o);
                    }
                }
            }
        });
}

/// Adds `B ∂V Bᵀ` of every tile into the input gradient `dx` of `images` images starting at
/// `first`, a tile row at a time: `B` on the columns, then on the rows, where neighbouring
/// tiles' patches overlap in two columns (added in a fixed order) and neighbouring tile rows
/// in two rows; entries in the padding are dropped.
fn add_input_grad<T: Real>(
    dv: &[T],
    g: &ConvGeometry,
    tiles: &Tiles,
    first: usize,
    images: usize,
    dx: &mut [T],
) {
    let [h, w] = tiles.size;
    let cols = tiles.cols;
    let half = cols + 1;
    let t_len = images * tiles.per_image();
    let c_in = g.in_channels;
    let pw = tiles.pad[1] as isize;
    dx[first * c_in * h * w..(first + images) * c_in * h * w]
        .par_chunks_mut(h * w)
        .enumerate()
        .for_each_init(
            || vec![T::default(); 20 * cols + 2 * half],
            |buf, (plane_index, plane)| {
                let (image, c) = (plane_index / c_in, plane_index % c_in);
                let (t, rest) = buf.split_at_mut(16 * cols);
                let (d, q) = rest.split_at_mut(4 * cols);
                let (q_even, q_odd) = q.split_at_mut(half);
                for a in 0..tiles.rows {
                    let base = image * tiles.per_image() + a * cols;
                    let vrow = |xi: usize| &dv[(xi * c_in + c) * t_len + base..][..cols];
                    // B·(v0..v3) = (v0, v1 − v2 + v3, v1 + v2 − v0, −v3) on the columns: T[r][j].
                    for j in 0..4 {
                        let at = |r: usize| (4 * r + j) * cols..(4 * r + j + 1) * cols;
                        t[at(0)].copy_from_slice(vrow(j));
                        map3(
                            &mut t[at(1)],
                            vrow(4 + j),
                            vrow(8 + j),
                            vrow(12 + j),
                            |p, q, r| p - q + r,
                        );
                        map3(
                            &mut t[at(2)],
                            vrow(4 + j),
                            vrow(8 + j),
                            vrow(j),
                            |p, q, r| p + q - r,
                        );
                        negate(&mut t[at(3)], vrow(12 + j));
                    }
                    let r0 = tiles.first_row(a);
                    for r in 0..4 {
                        let ih = r0 + r as isize;
                        if ih < 0 || ih >= h as isize {
                            continue;
                        }
                        let tr = |j: usize| &t[(4 * r + j) * cols..(4 * r + j + 1) * cols];
                        // … and on the rows: the patch's columns s = 0..4 of every tile.
                        let (d0, rest) = d.split_at_mut(cols);
                        let (d1, rest) = rest.split_at_mut(cols);
                        let (d2, d3) = rest.split_at_mut(cols);
                        d0.copy_from_slice(tr(0));
                        map3(d1, tr(1), tr(2), tr(3), |p, q, r| p - q + r);
                        map3(d2, tr(1), tr(2), tr(0), |p, q, r| p + q - r);
                        negate(d3, tr(3));
                        // Column 2b + s of the padded row: even ones from s = 0 and 2 (the
                        // tile to the left), odd ones from s = 1 and 3.
                        q_even[..cols].copy_from_slice(d0);
                        q_even[cols] = T::default();
                        q_odd[..cols].copy_from_slice(d1);
                        q_odd[cols] = T::default();
                        for b in 0..cols {
                            q_even[b + 1] += d2[b];
                            q_odd[b + 1] += d3[b];
                        }
                        let row = &mut plane[ih as usize * w..(ih as usize + 1) * w];
                        for b in 0..half {
                            let even_at = 2 * b as isize - pw;
                            for (s, value) in [(even_at, q_even[b]), (even_at + 1, q_odd[b])] {
                                if s >= 0 && s < w as isize {
                                    row[s as usize] += value;
                                }
                            }
                        }
                    }
                }
            },
        );
}

/// `dst[ξ] (=|+=) lhs[ξ] · rhs[ξ]` for the 16 entries, in parallel over `ξ` (each product on one
/// thread: 16 of them keep both cores busy without splitting a product).
#[allow(clippy::too_many_arguments)]
fn products<T: Real>(
    [m, n, k]: [usize; 3],
    dst: &mut [T],
    accumulate: bool,
    lhs: &[T],
    lhs_strides: (usize, usize),
    rhs: &[T],
    rhs_strides: (usize, usize),
) {
    dst[..XI * m * n]
        .par_chunks_mut(m * n)
        .zip(lhs[..XI * m * k].par_chunks(m * k))
        .zip(rhs[..XI * k * n].par_chunks(k * n))
        .for_each(|((dst, lhs), rhs)| {
            gemm_on(
                false,
                [m, n, k],
                dst,
                accumulate,
                lhs,
                lhs_strides,
                rhs,
                rhs_strides,
            );
        });
}

/// The convolution's output `[batch, out_channels, out_h, out_w]` for a geometry this file
/// [`supports`], in chunks of images whose transformed input and products stay near `budget`
/// entries.
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`
/// - `weight`: `[out_channels, in_channels, 3, 3]`
pub fn forward<T: Real>(x: &[T], weight: &[T], g: &ConvGeometry, budget: usize) -> Vec<T> {
    assert!(supports(g), "winograd: not a 3×3 stride-1 geometry: {g:?}");
    assert_eq!(x.len(), g.input_len(), "winograd: input length for {g:?}");
    assert_eq!(
        weight.len(),
        g.weight_len(),
        "winograd: weight length for {g:?}"
    );
    let tiles = Tiles::new(g);
    let chunk = images_per_chunk(g, &tiles, budget);
    let (c_in, c_out) = (g.in_channels, g.out_channels);
    let plane = tiles.out[0] * tiles.out[1];
    let mut y = vec![T::default(); g.output_len()];
    let max_t = chunk * tiles.per_image();
    let sizes = [XI * c_in * max_t, XI * c_out * max_t, XI * c_out * c_in];
    with_scratch(sizes, |[v, m, u]: [&mut [T]; 3]| {
        transform_filters(weight, g, u);
        let mut first = 0;
        while first < g.batch {
            let images = chunk.min(g.batch - first);
            let t_len = images * tiles.per_image();
            transform_input(x, g, &tiles, first, images, v);
            // M[ξ][co][t] = Σ_c U[ξ][co][c] · V[ξ][c][t]
            products([c_out, t_len, c_in], m, false, u, (c_in, 1), v, (t_len, 1));
            let y_chunk = &mut y[first * c_out * plane..(first + images) * c_out * plane];
            transform_output(m, g, &tiles, images, y_chunk);
            first += images;
        }
    });
    y
}

/// The gradients `(∂x, ∂w)` of the convolution given its output gradient, each computed only
/// when asked for, for a geometry this file [`supports`].
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`, `weight`: `[out_channels, in_channels, 3, 3]`
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
    assert!(supports(g), "winograd: not a 3×3 stride-1 geometry: {g:?}");
    assert_eq!(x.len(), g.input_len(), "winograd: input length for {g:?}");
    assert_eq!(
        weight.len(),
        g.weight_len(),
        "winograd: weight length for {g:?}"
    );
    assert_eq!(
        grad.len(),
        g.output_len(),
        "winograd: output gradient length for {g:?}"
    );
    let tiles = Tiles::new(g);
    let (c_in, c_out) = (g.in_channels, g.out_channels);
    let mut dx = want_x.then(|| vec![T::default(); g.input_len()]);
    let chunk = images_per_chunk(g, &tiles, budget);
    let max_t = chunk * tiles.per_image();
    let pairs = c_out * c_in;
    let sizes = [
        XI * c_in * max_t,
        XI * c_out * max_t,
        if want_x { XI * pairs } else { 0 },
        if want_w { XI * pairs } else { 0 },
    ];
    with_scratch(sizes, |[v, dm, u, du]: [&mut [T]; 4]| {
        let u = want_x.then(|| {
            transform_filters(weight, g, u);
            &*u
        });
        let mut du = want_w.then_some(du);
        let mut first = 0;
        while first < g.batch {
            let images = chunk.min(g.batch - first);
            let t_len = images * tiles.per_image();
            transform_output_grad(grad, g, &tiles, first, images, dm);
            if let Some(du) = du.as_deref_mut() {
                transform_input(x, g, &tiles, first, images, v);
                // ∂U[ξ][co][c] += Σ_t ∂M[ξ][co][t] · V[ξ][c][t]: V read transposed.
                products(
                    [c_out, c_in, t_len],
                    du,
                    first > 0,
                    dm,
                    (t_len, 1),
                    v,
                    (1, t_len),
                );
            }
            if let (Some(dx), Some(u)) = (dx.as_mut(), u) {
                // ∂V[ξ][c][t] = Σ_co U[ξ][co][c] · ∂M[ξ][co][t]: U read transposed; V's buffer
                // is free again.
                products([c_in, t_len, c_out], v, false, u, (1, c_in), dm, (t_len, 1));
                add_input_grad(v, g, &tiles, first, images, dx);
            }
            first += images;
        }
        let dw = du.map(|du| filter_grads(du, g));
        (dx, dw)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::tests::{assert_close, backward_by_im2col, direct};
    use crate::kernels::test_values as values;

    fn geometry(
        batch: usize,
        channels: [usize; 2],
        size: [usize; 2],
        pad: [usize; 2],
    ) -> ConvGeometry {
        ConvGeometry {
            batch,
            in_channels: channels[0],
            out_channels: channels[1],
            in_size: size,
            kernel: [3, 3],
            stride: [1, 1],
            padding: pad,
            dilation: [1, 1],
        }
    }

    /// Even and odd maps (a last tile half outside the output), no padding, padding 1 and 2,
    /// unequal padding, a map of one output row, batch 1; each with one chunk and with one image
    /// per chunk (the weight gradient summed over chunks).
    fn cases() -> Vec<(ConvGeometry, usize)> {
        [
            geometry(2, [16, 17], [8, 8], [1, 1]),
            geometry(3, [17, 16], [7, 5], [1, 1]),
            geometry(1, [16, 16], [6, 9], [0, 0]),
            geometry(2, [18, 16], [5, 4], [2, 1]),
            geometry(2, [16, 19], [3, 6], [0, 2]),
            geometry(1, [16, 16], [2, 2], [1, 1]),
            // More filter pairs than one task of the filter transforms takes.
            geometry(1, [48, 50], [4, 3], [1, 1]),
        ]
        .into_iter()
        .flat_map(|g| [(g, 1 << 21), (g, 1)])
        .collect()
    }

    /// Winograd reorders the sums (and scales by ½), so it agrees with the definition to
    /// rounding: |values| < 1 and at most 16·9 terms per output give sums below 150, whose f64
    /// rounding is under 1e-13.
    #[test]
    fn forward_equals_the_definition() {
        for (g, budget) in cases() {
            assert!(supports(&g), "{g:?}");
            let x = values(g.input_len(), 1);
            let w = values(g.weight_len(), 2);
            let y = forward(&x, &w, &g, budget);
            let expected = direct(&x, &w, &g);
            assert_close(&y, &expected, 1e-12, &format!("{g:?} budget {budget} y"));
        }
    }

    /// The gradients against im2col's, which `conv::tests` holds to the definition entry by
    /// entry; the same rounding bound as the forward pass (sums over up to 16·9·batch·positions
    /// terms, below 1e-11 in f64).
    #[test]
    fn gradients_equal_im2col() {
        for (g, budget) in cases() {
            let x = values(g.input_len(), 3);
            let w = values(g.weight_len(), 4);
            let dy = values(g.output_len(), 5);
            let (dx, dw) = backward(&x, &w, &dy, &g, (true, true), budget);
            let (ex, ew) = backward_by_im2col(&x, &w, &dy, &g);
            for (name, ours, theirs) in [("∂x", dx.unwrap(), ex), ("∂w", dw.unwrap(), ew)] {
                assert_close(
                    &ours,
                    &theirs,
                    1e-11,
                    &format!("{g:?} budget {budget} {name}"),
                );
            }
            let (only_x, none) = backward(&x, &w, &dy, &g, (true, false), budget);
            assert!(none.is_none() && only_x.is_some());
            let (none, only_w) = backward(&x, &w, &dy, &g, (false, true), budget);
            assert!(none.is_none() && only_w.is_some());
        }
    }

    #[test]
    fn covers_only_three_by_three_at_stride_one_on_large_enough_layers() {
        let g = geometry(1, [64, 64], [8, 8], [1, 1]);
        assert!(supports(&g) && covers(&g));
        for other in [
            ConvGeometry {
                stride: [2, 2],
                ..g
            },
            ConvGeometry {
                dilation: [2, 1],
                ..g
            },
            ConvGeometry {
                kernel: [1, 1],
                ..g
            },
            ConvGeometry {
                in_size: [1, 8],
                padding: [0, 1],
                ..g
            },
        ] {
            assert!(!supports(&other) && !covers(&other), "{other:?}");
        }
        for small in [
            ConvGeometry {
                in_channels: 63,
                ..g
            },
            ConvGeometry {
                out_channels: 32,
                ..g
            },
            ConvGeometry {
                in_size: [8, 7],
                ..g
            },
        ] {
            assert!(supports(&small) && !covers(&small), "{small:?}");
        }
    }
}
