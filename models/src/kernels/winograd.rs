//! The 3×3 convolution at stride 1 by Winograd's minimal filtering F(m×m, 3×3) (Lavin & Gray,
//! "Fast Algorithms for Convolutional Neural Networks", CVPR 2016, arXiv:1509.09308), forward
//! and both gradients, for output tiles of 2×2 ([`F2`]) and 4×4 ([`F4`]).
//!
//! Why this file exists: a ResNet's 3×3 stride-1 convolutions are nearly all of its arithmetic,
//! and the im2col GEMMs of [`super::im2col`] spend 9 multiply-adds per output and channel pair;
//! F(2×2, 3×3) spends 16/4 = 4 and F(4×4, 3×3) 36/16 = 2.25, and their transformed inputs are
//! 4× and 2.25× the input where im2col's is 9×. No maintained Rust crate computes them (NNPACK
//! and oneDNN do in C/C++).
//!
//! With `n = m + 2`, `d` an n×n input patch (stride m between patches, so neighbours overlap by
//! two rows or columns), `g` a 3×3 filter and `Y` the patch's m×m outputs (cross-correlation, as
//! PyTorch):
//!
//! `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`, with `Bᵀ` n×n, `G` n×3 and `Aᵀ` m×n ([`Algorithm`]).
//!
//! Summed over input channels, each of the n² entries `ξ` of the element-wise product is a GEMM
//! over all tiles `t` of a chunk of images: `M[ξ] = U[ξ] · V[ξ]`, `U[ξ][co][c] = (G g Gᵀ)[ξ]`,
//! `V[ξ][c][t] = (Bᵀ d B)[ξ]`. The gradients are the transposes of the same linear maps:
//!
//! - `∂M = A ∂Y Aᵀ` per tile (zero for the outputs past the map's edge);
//! - weight: `∂U[ξ] = Σ_t ∂M[ξ] · V[ξ]ᵀ`, then `∂g = Gᵀ ∂U G`;
//! - input: `∂V[ξ] = U[ξ]ᵀ · ∂M[ξ]`, then `∂d = B ∂V Bᵀ`, added into the overlapping patches
//!   (entries in the padding dropped).
//!
//! Accuracy: F(2×2, 3×3)'s coefficients are 0, ±1 and ±½, so it is as accurate as the direct
//! sum to a few units in the last place. F(4×4, 3×3)'s reach 8 (and ⅙, 1/12, 1/24, which f32
//! rounds), so in f32 its rounding acts on magnitudes larger than the outputs' (bounded in
//! `tests::f4_in_f32_is_within_its_rounding_bound`). It is the one [`forward`] and
//! [`backward`] run ([`ALGORITHM`]): on ResNet-18's SimCLR step (batch 128, 2 cores, AVX-512,
//! the same transform code for both) a step took 3.92–3.96 s against 4.28–4.49 s with F(2×2).
//! The unit tests hold both to the definition in f64.

use rayon::prelude::*;

use super::gemm::{gemm_on, with_scratch, Real};
use super::geometry::ConvGeometry;

/// Channels (in and out) below which [`covers`] leaves a layer to im2col.
pub const MIN_CHANNELS: usize = 64;

/// Output positions (`out_h · out_w`) below which [`covers`] leaves a layer with fewer than
/// [`WIDE_CHANNELS`] channels to im2col.
///
/// Both thresholds are measured (2 cores, AVX-512, release): on ResNet-18's SimCLR step
/// (channels 64–512, maps 32×32 to 4×4) Winograd F(2×2) on every 3×3 stride-1 layer and on those
/// with at least 64 channels and 64 positions took the same time (4.57–4.65 s a step at batch
/// 128, against 7.4 s by im2col alone); on the CPU default `small-2x` (16–128 channels, maps
/// 14×14 to 2×2, batch 64) every mix of Winograd layers was 1–6 % slower than im2col alone, whose
/// products there are too small for the transforms to pay. So the small networks keep im2col
/// (and their numbers to the bit).
pub const MIN_POSITIONS: usize = 64;

/// Channels (in and out) from which [`covers`] takes maps down to one full F(4×4) tile
/// ([`MIN_WIDE_POSITIONS`]): with this many the products outweigh the transforms even on a
/// 4×4 map. Measured with F(4×4) (2 cores, AMD EPYC with AVX-512, release, alternating runs):
/// ResNet-18's SimCLR step at batch 128, whose last stage is 512 channels on 4×4 maps, 3.49–4.12
/// s against 4.34–4.60 s with that stage by im2col (MoCo v2, BYOL, SimSiam 6–22 % faster too);
/// forward + backward at batch 64 of ResNet-34 15 %, ResNet-50 10 %, VGG-16-BN 23 % faster.
/// The CPU default `small-2x` has at most 128 channels and keeps im2col there.
pub const WIDE_CHANNELS: usize = 256;

/// Output positions below which [`covers`] leaves even a layer of [`WIDE_CHANNELS`] channels to
/// im2col: one full F(4×4) tile, the case measured (4×4 maps). A 2×2 map is one zero-padded
/// tile whose 36 products for 4 outputs are no fewer than direct convolution's 9 per output, so
/// it stays; a 3×3 map (36 for 9) might pay but is in none of the backbones measured, and stays
/// with im2col too.
pub const MIN_WIDE_POSITIONS: usize = 16;

/// One of Winograd's F(m×m, 3×3): the output tile's side `m` and the transform matrices, row
/// major, with `n = m + 2` the input patch's side.
#[derive(Debug)]
pub struct Algorithm {
    /// The output tile's side.
    pub m: usize,
    /// `Bᵀ`, n×n: the input transform.
    bt: &'static [f64],
    /// `G`, n×3: the filter transform.
    g: &'static [f64],
    /// `Aᵀ`, m×n: the output transform.
    at: &'static [f64],
}

/// F(2×2, 3×3): 16 products per 2×2 outputs, coefficients 0, ±1, ±½ (Lavin & Gray, eq. 8).
pub const F2: Algorithm = Algorithm {
    m: 2,
    #[rustfmt::skip]
    bt: &[
        1.0, 0.0, -1.0, 0.0,
        0.0, 1.0, 1.0, 0.0,
        0.0, -1.0, 1.0, 0.0,
        0.0, 1.0, 0.0, -1.0,
    ],
    #[rustfmt::skip]
    g: &[
        1.0, 0.0, 0.0,
        0.5, 0.5, 0.5,
        0.5, -0.5, 0.5,
        0.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    at: &[
        1.0, 1.0, 1.0, 0.0,
        0.0, 1.0, -1.0, -1.0,
    ],
};

/// F(4×4, 3×3): 36 products per 4×4 outputs, interpolation points 0, ±1, ±2 and ∞ (Lavin &
/// Gray, section 4.2).
pub const F4: Algorithm = Algorithm {
    m: 4,
    #[rustfmt::skip]
    bt: &[
        4.0, 0.0, -5.0, 0.0, 1.0, 0.0,
        0.0, -4.0, -4.0, 1.0, 1.0, 0.0,
        0.0, 4.0, -4.0, -1.0, 1.0, 0.0,
        0.0, -2.0, -1.0, 2.0, 1.0, 0.0,
        0.0, 2.0, -1.0, -2.0, 1.0, 0.0,
        0.0, 4.0, 0.0, -5.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    g: &[
        1.0 / 4.0, 0.0, 0.0,
        -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0,
        -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0,
        1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0,
        1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0,
        0.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    at: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 0.0,
        0.0, 1.0, -1.0, 2.0, -2.0, 0.0,
        0.0, 1.0, 1.0, 4.0, 4.0, 0.0,
        0.0, 1.0, -1.0, 8.0, -8.0, 1.0,
    ],
};

impl Algorithm {
    /// The input patch's side, `m + 2`.
    fn n(&self) -> usize {
        self.m + 2
    }
}

/// An [`Algorithm`]'s matrices in `T`, each with its transpose, row major.
struct Coefs<T> {
    m: usize,
    n: usize,
    /// `Bᵀ` (n×n) and `B`.
    bt: Vec<T>,
    b: Vec<T>,
    /// `G` (n×3) and `Gᵀ` (3×n).
    g: Vec<T>,
    gt: Vec<T>,
    /// `Aᵀ` (m×n) and `A` (n×m).
    at: Vec<T>,
    a: Vec<T>,
}

impl<T: Real> Coefs<T> {
    fn new(alg: &Algorithm) -> Self {
        let (m, n) = (alg.m, alg.n());
        let cast = |v: &[f64]| v.iter().map(|&c| T::from_f64(c)).collect::<Vec<_>>();
        let transpose = |v: &[f64], rows: usize, cols: usize| {
            (0..cols * rows)
                .map(|k| T::from_f64(v[(k % rows) * cols + k / rows]))
                .collect::<Vec<_>>()
        };
        Self {
            m,
            n,
            bt: cast(alg.bt),
            b: transpose(alg.bt, n, n),
            g: cast(alg.g),
            gt: transpose(alg.g, n, 3),
            at: cast(alg.at),
            a: transpose(alg.at, m, n),
        }
    }

    fn xi(&self) -> usize {
        self.n * self.n
    }
}

/// Row `i` of a row-major matrix with `cols` columns.
fn row<T>(matrix: &[T], cols: usize, i: usize) -> &[T] {
    &matrix[i * cols..(i + 1) * cols]
}

/// `dst[b] = Σ_k coefs[k] · src(k)[b]` over the terms with a non-zero coefficient (zero if there
/// are none): one element-wise pass over `dst` that vectorises, the sum of each entry kept in a
/// register.
#[inline(always)]
fn combine<'a, T: Real>(dst: &mut [T], coefs: &[T], src: impl Fn(usize) -> &'a [T]) {
    let len = dst.len();
    let mut terms: [(T, &[T]); 6] = [(T::default(), &[]); 6];
    let mut count = 0;
    for (k, &c) in coefs.iter().enumerate() {
        if c != T::default() {
            terms[count] = (c, &src(k)[..len]);
            count += 1;
        }
    }
    match count {
        0 => dst.fill(T::default()),
        1 => sum_of::<T, 1>(dst, &terms),
        2 => sum_of::<T, 2>(dst, &terms),
        3 => sum_of::<T, 3>(dst, &terms),
        4 => sum_of::<T, 4>(dst, &terms),
        5 => sum_of::<T, 5>(dst, &terms),
        _ => sum_of::<T, 6>(dst, &terms),
    }
}

/// Entries per block of [`sum_of`]: one AVX-512 register of f32.
const BLOCK: usize = 16;

/// `dst[b] = Σ_{k < K} c_k · s_k[b]` for the first `K` of `terms` (each `s_k` as long as `dst`),
/// a block of [`BLOCK`] entries at a time: fixed-size arrays, so the block's sums are
/// vectorised in registers and stored once (no bounds checks or possible aliasing of `dst`
/// with a source inside the block).
#[inline(always)]
fn sum_of<T: Real, const K: usize>(dst: &mut [T], terms: &[(T, &[T]); 6]) {
    let len = dst.len();
    let coefs: [T; K] = std::array::from_fn(|k| terms[k].0);
    let srcs: [&[T]; K] = std::array::from_fn(|k| &terms[k].1[..len]);
    let (blocks, rest) = dst.as_chunks_mut::<BLOCK>();
    for (q, block) in blocks.iter_mut().enumerate() {
        let src = |k: usize| -> &[T; BLOCK] {
            srcs[k][q * BLOCK..(q + 1) * BLOCK]
                .try_into()
                .expect("a block of every source")
        };
        let s0 = src(0);
        let mut acc: [T; BLOCK] = std::array::from_fn(|l| coefs[0] * s0[l]);
        for (k, &c) in coefs.iter().enumerate().skip(1) {
            let sk = src(k);
            for (a, &v) in acc.iter_mut().zip(sk) {
                *a += c * v;
            }
        }
        *block = acc;
    }
    let done = len - rest.len();
    for (b, d) in rest.iter_mut().enumerate() {
        let mut acc = coefs[0] * srcs[0][done + b];
        for k in 1..K {
            acc += coefs[k] * srcs[k][done + b];
        }
        *d = acc;
    }
}

/// `dense[k] = strided[k·m]` for every `k` both have: one phase of a row at stride `m`, the tile
/// side. (`cols`, the tiles of a row, is 1–8 on a ResNet's maps: too short for the loop to gain
/// from vectors; compiled with a constant stride it was no faster.)
#[inline(always)]
fn gather<T: Real>(dense: &mut [T], strided: &[T], m: usize) {
    for (d, &v) in dense.iter_mut().zip(strided.iter().step_by(m)) {
        *d = v;
    }
}

/// `op(&mut strided[k·m], dense[k])` for every `k` both have: [`gather`]'s inverse.
#[inline(always)]
fn scatter<T: Real>(strided: &mut [T], dense: &[T], m: usize, op: impl Fn(&mut T, T)) {
    for (s, &v) in strided.iter_mut().step_by(m).zip(dense) {
        op(s, v);
    }
}

/// How a map is cut into m×m output tiles: tile `(a, b)` holds outputs `ma..ma+m × mb..mb+m`
/// and reads the input patch whose top-left corner is `(ma − pad_h, mb − pad_w)`.
#[derive(Debug, Clone, Copy)]
struct Tiles {
    m: usize,
    rows: usize,
    cols: usize,
    out: [usize; 2],
    size: [usize; 2],
    pad: [usize; 2],
}

impl Tiles {
    fn new(g: &ConvGeometry, m: usize) -> Self {
        let out = g.out_size().expect("checked by `supports`");
        Self {
            m,
            rows: out[0].div_ceil(m),
            cols: out[1].div_ceil(m),
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
        (self.m * a) as isize - self.pad[0] as isize
    }

    /// The length of a padded row buffer: every column a tile row's patches read, `m·cols + 2`.
    fn padded_width(&self) -> usize {
        self.m * self.cols + 2
    }
}

/// Images per chunk: the transformed input and output near `budget` entries, at least one.
fn images_per_chunk(g: &ConvGeometry, xi: usize, tiles: &Tiles, budget: usize) -> usize {
    let per_image = xi * g.in_channels.max(g.out_channels) * tiles.per_image();
    (budget / per_image.max(1)).clamp(1, g.batch.max(1))
}

/// `buf`'s first `xi·plane` entries, laid out `[ξ][plane]`, cut into pieces of `piece`
/// entries: item `q` holds piece `q` of each of the `xi` planes, so one task per item writes
/// disjoint rows (per channel, `plane = channels·t_len` and `piece = t_len`).
fn split_planes<T>(buf: &mut [T], xi: usize, plane: usize, piece: usize) -> Vec<Vec<&mut [T]>> {
    let mut per_xi: Vec<_> = buf[..xi * plane]
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

/// Filter pairs per task of the filter transforms.
const PAIRS_PER_TASK: usize = 2048;

/// `G g Gᵀ` of every filter into `u`: `U[ξ][co][c]`. Per task of filter pairs, the 9 taps are
/// laid out as planes first, so both stages are element-wise operations on whole planes.
fn transform_filters<T: Real>(weight: &[T], g: &ConvGeometry, c: &Coefs<T>, u: &mut [T]) {
    let pairs = g.in_channels * g.out_channels;
    let n = c.n;
    split_planes(u, c.xi(), pairs, PAIRS_PER_TASK)
        .into_par_iter()
        .enumerate()
        .for_each(|(q, mut out)| {
            let len = out[0].len();
            let mut buf = vec![T::default(); (9 + 3 * n) * len];
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
            for (il, dst) in columns.chunks_mut(len).enumerate() {
                let (i, l) = (il / 3, il % 3);
                combine(dst, row(&c.g, 3, i), |k| &taps[(3 * k + l) * len..][..len]);
            }
            // G on the rows: U[n·i + j] = Σ_l G[j][l] columns[i][l].
            for (ij, dst) in out.iter_mut().enumerate() {
                let (i, j) = (ij / n, ij % n);
                combine(dst, row(&c.g, 3, j), |l| {
                    &columns[(3 * i + l) * len..][..len]
                });
            }
        });
}

/// `Gᵀ ∂U G` of every filter: the weight gradient `[c_out, c_in, 3, 3]` from `∂U[ξ][co][c]`,
/// plane by plane as [`transform_filters`], the 9 taps put back in place at the end.
fn filter_grads<T: Real>(du: &[T], g: &ConvGeometry, c: &Coefs<T>) -> Vec<T> {
    let pairs = g.in_channels * g.out_channels;
    let n = c.n;
    let mut dw = vec![T::default(); pairs * 9];
    dw.par_chunks_mut(9 * PAIRS_PER_TASK)
        .enumerate()
        .for_each(|(q, task)| {
            let len = task.len() / 9;
            let start = q * PAIRS_PER_TASK;
            let plane = |xi: usize| &du[xi * pairs + start..][..len];
            let mut buf = vec![T::default(); (3 * n + 9) * len];
            let (columns, taps) = buf.split_at_mut(3 * n * len);
            // Gᵀ on the columns: columns[k][j] = Σ_i G[i][k] ∂U[n·i + j].
            for (kj, dst) in columns.chunks_mut(len).enumerate() {
                let (k, j) = (kj / n, kj % n);
                combine(dst, row(&c.gt, n, k), |i| plane(n * i + j));
            }
            // … and on the rows: taps[k][l] = Σ_j G[j][l] columns[k][j].
            for (kl, dst) in taps.chunks_mut(len).enumerate() {
                let (k, l) = (kl / 3, kl % 3);
                combine(dst, row(&c.gt, n, l), |j| {
                    &columns[(n * k + j) * len..][..len]
                });
            }
            for (p, filter) in task.chunks_mut(9).enumerate() {
                for (tap, value) in filter.iter_mut().enumerate() {
                    *value = taps[tap * len + p];
                }
            }
        });
    dw
}

/// Tiles per piece of the transforms (rounded to whole tile rows, at least one): every stage
/// of a transform is an element-wise operation on planes of a piece's tiles, long enough to
/// vectorise and short enough to stay in the first-level cache (F(4×4): 2 × 36 planes of 128
/// f32 = 36 KiB).
const PIECE: usize = 128;

/// The pieces of `tile_rows` tile rows of `cols` tiles each: ranges of whole tile rows.
fn pieces(tile_rows: usize, cols: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let per_piece = (PIECE / cols.max(1)).max(1);
    (0..tile_rows)
        .step_by(per_piece)
        .map(move |start| start..(start + per_piece).min(tile_rows))
}

/// Per channel, the `[h·w]` planes of that channel of every image of `buf` (`[images][channels]`
/// planes), so one task per channel owns its planes in every image.
fn planes_by_channel<T>(buf: &mut [T], channels: usize, plane: usize) -> Vec<Vec<&mut [T]>> {
    let mut by_channel: Vec<Vec<&mut [T]>> = (0..channels).map(|_| Vec::new()).collect();
    for (k, p) in buf.chunks_mut(plane).enumerate() {
        by_channel[k % channels].push(p);
    }
    by_channel
}

/// What every task of a transform reads: the geometry, the algorithm's matrices, the tiles,
/// and the chunk of `images` images starting at `first`.
struct Chunk<'a, T> {
    g: &'a ConvGeometry,
    c: &'a Coefs<T>,
    tiles: &'a Tiles,
    first: usize,
    images: usize,
}

impl<T> Chunk<'_, T> {
    /// The chunk's tiles, `images · tiles per image`.
    fn t_len(&self) -> usize {
        self.images * self.tiles.per_image()
    }
}

/// Runs `task(i, planes)` for every channel's planes of `split` in parallel, each task compiled
/// for the widest vectors the CPU has (AVX-512, AVX2, else SSE2), chosen at run time by `pulp`
/// as `kernels::gelu` is: a task's `with_simd` is inlined into each width's function.
fn dispatch_each<'a, T: Send, Op: pulp::WithSimd<Output = ()>>(
    split: Vec<Vec<&'a mut [T]>>,
    task: impl Fn(usize, Vec<&'a mut [T]>) -> Op + Sync + Send,
) {
    split
        .into_par_iter()
        .enumerate()
        .for_each(|(i, planes)| pulp::Arch::new().dispatch(task(i, planes)));
}

/// `V[ξ][c][t]` (`Bᵀ d B` of every tile's n×n patch) for the chunk's images;
/// `t = (image·rows + a)·cols + b`, one [`InputTask`] per channel.
fn transform_input<T: Real>(x: &[T], chunk: &Chunk<'_, T>, v: &mut [T]) {
    let t_len = chunk.t_len();
    let split = split_planes(v, chunk.c.xi(), chunk.g.in_channels * t_len, t_len);
    dispatch_each(split, |channel, out| InputTask {
        chunk,
        x,
        channel,
        out,
    });
}

/// One channel of [`transform_input`], a piece of tile rows at a time: the n input rows each
/// tile row reads, padded and cut into their n phases (`P[r][s][b] = row[m·b + s − pad]`),
/// then `Bᵀ` on the columns and `B` on the rows as element-wise operations on the piece's
/// planes ([`dispatch_each`]).
struct InputTask<'a, T> {
    chunk: &'a Chunk<'a, T>,
    x: &'a [T],
    channel: usize,
    out: Vec<&'a mut [T]>,
}

impl<T: Real> pulp::WithSimd for InputTask<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Self {
            chunk,
            x,
            channel,
            mut out,
        } = self;
        let Chunk {
            g,
            c,
            tiles,
            first,
            images,
        } = *chunk;
        let [h, w] = tiles.size;
        let (m, n, cols) = (c.m, c.n, tiles.cols);
        let pw = tiles.pad[1];
        let width = tiles.padded_width();
        let plane_len = PIECE.max(cols);
        // `width ≥ w + 2·pad` (the tiles cover `out_w = w + 2·pad − 2` columns and read two
        // more), so only `padded[pad..pad + w]` is ever written, the rest stays zero.
        let mut buf = vec![T::default(); width + 2 * n * n * plane_len];
        let (padded, rest) = buf.split_at_mut(width);
        let (phases, transformed) = rest.split_at_mut(n * n * plane_len);
        for piece in pieces(images * tiles.rows, cols) {
            let len = piece.len() * cols;
            for (k, tile_row) in piece.clone().enumerate() {
                let (image, a) = (tile_row / tiles.rows, tile_row % tiles.rows);
                let plane_start = ((first + image) * g.in_channels + channel) * h * w;
                let plane = &x[plane_start..plane_start + h * w];
                let r0 = tiles.first_row(a);
                for r in 0..n {
                    let ih = r0 + r as isize;
                    let inside = ih >= 0 && ih < h as isize;
                    if inside {
                        // Padded column p is input column p − pad.
                        padded[pw..pw + w].copy_from_slice(&plane[ih as usize * w..][..w]);
                    }
                    for s in 0..n {
                        let dst = &mut phases[(n * r + s) * plane_len + k * cols..][..cols];
                        if inside {
                            // `padded` holds `m·cols + 2 ≥ m·(cols − 1) + s + 1` entries.
                            gather(dst, &padded[s..], m);
                        } else {
                            dst.fill(T::default());
                        }
                    }
                }
            }
            // Bᵀ on the columns: T[i][s] = Σ_r Bᵀ[i][r] P[r][s].
            let p = |r: usize, s: usize| &phases[(n * r + s) * plane_len..][..len];
            for (is, dst) in transformed.chunks_mut(plane_len).enumerate() {
                let (i, s) = (is / n, is % n);
                combine(&mut dst[..len], row(&c.bt, n, i), |r| p(r, s));
            }
            // B on the rows: V[n·i + j] = Σ_s Bᵀ[j][s] T[i][s].
            let t0 = piece.start * cols;
            let t = |i: usize, s: usize| &transformed[(n * i + s) * plane_len..][..len];
            for (ij, dst) in out.iter_mut().enumerate() {
                let (i, j) = (ij / n, ij % n);
                combine(&mut dst[t0..t0 + len], row(&c.bt, n, j), |s| t(i, s));
            }
        }
    }
}

/// The outputs `y` (`[images, c_out, out_h, out_w]`) from the products `M[ξ][co][t]`, one
/// [`OutputTask`] per output channel.
fn transform_output<T: Real>(mm: &[T], chunk: &Chunk<'_, T>, y: &mut [T]) {
    let [oh, ow] = chunk.tiles.out;
    let c_out = chunk.g.out_channels;
    let split = planes_by_channel(&mut y[..chunk.images * c_out * oh * ow], c_out, oh * ow);
    dispatch_each(split, |co, dst| OutputTask { chunk, mm, co, dst });
}

/// One output channel of [`transform_output`], a piece of tile rows at a time: `Aᵀ` on the
/// columns and `A` on the rows, the m×m output phases computed apart and then put in place
/// ([`dispatch_each`]).
struct OutputTask<'a, T> {
    chunk: &'a Chunk<'a, T>,
    mm: &'a [T],
    co: usize,
    dst: Vec<&'a mut [T]>,
}

impl<T: Real> pulp::WithSimd for OutputTask<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Self {
            chunk,
            mm,
            co,
            mut dst,
        } = self;
        let (g, c, tiles, images) = (chunk.g, chunk.c, chunk.tiles, chunk.images);
        let [oh, ow] = tiles.out;
        let (m, n, cols) = (c.m, c.n, tiles.cols);
        let t_len = chunk.t_len();
        let c_out = g.out_channels;
        let plane_len = PIECE.max(cols);
        let mut buf = vec![T::default(); (m * n + m * m) * plane_len];
        let (s, outs) = buf.split_at_mut(m * n * plane_len);
        for piece in pieces(images * tiles.rows, cols) {
            let len = piece.len() * cols;
            let t0 = piece.start * cols;
            let mrow = |xi: usize| &mm[(xi * c_out + co) * t_len + t0..][..len];
            // Aᵀ on the columns: S[u][j] = Σ_i Aᵀ[u][i] M[n·i + j] …
            for (uj, plane) in s.chunks_mut(plane_len).enumerate() {
                let (u, j) = (uj / n, uj % n);
                combine(&mut plane[..len], row(&c.at, n, u), |i| mrow(n * i + j));
            }
            // … and A on the rows: Y[u][v] = Σ_j Aᵀ[v][j] S[u][j].
            for (uv, plane) in outs.chunks_mut(plane_len).enumerate() {
                let (u, v) = (uv / m, uv % m);
                combine(&mut plane[..len], row(&c.at, n, v), |j| {
                    &s[(n * u + j) * plane_len..][..len]
                });
            }
            for (k, tile_row) in piece.enumerate() {
                let (image, a) = (tile_row / tiles.rows, tile_row % tiles.rows);
                for u in 0..m.min(oh - m * a) {
                    let out_row = &mut dst[image][(m * a + u) * ow..][..ow];
                    for v in 0..m.min(ow) {
                        let phase = &outs[(m * u + v) * plane_len + k * cols..][..cols];
                        scatter(&mut out_row[v..], phase, m, |o, value| *o = value);
                    }
                }
            }
        }
    }
}

/// `∂M[ξ][co][t] = (A ∂Y Aᵀ)[ξ]` from the output gradient of the chunk's images (zero for the
/// outputs past the map's edge), one [`OutputGradTask`] per output channel.
fn transform_output_grad<T: Real>(grad: &[T], chunk: &Chunk<'_, T>, dm: &mut [T]) {
    let t_len = chunk.t_len();
    let split = split_planes(dm, chunk.c.xi(), chunk.g.out_channels * t_len, t_len);
    dispatch_each(split, |co, out| OutputGradTask {
        chunk,
        grad,
        co,
        out,
    });
}

/// One output channel of [`transform_output_grad`], a piece of tile rows at a time
/// ([`dispatch_each`]).
struct OutputGradTask<'a, T> {
    chunk: &'a Chunk<'a, T>,
    grad: &'a [T],
    co: usize,
    out: Vec<&'a mut [T]>,
}

impl<T: Real> pulp::WithSimd for OutputGradTask<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Self {
            chunk,
            grad,
            co,
            mut out,
        } = self;
        let Chunk {
            g,
            c,
            tiles,
            first,
            images,
        } = *chunk;
        let [oh, ow] = tiles.out;
        let (m, n, cols) = (c.m, c.n, tiles.cols);
        let plane_len = PIECE.max(cols);
        // The output gradient cut into its m×m phases (∂Y[u][v]), then A on the columns
        // (C[i][v]).
        let mut buf = vec![T::default(); (m * m + n * m) * plane_len];
        let (dy, cc) = buf.split_at_mut(m * m * plane_len);
        for piece in pieces(images * tiles.rows, cols) {
            let len = piece.len() * cols;
            for (k, tile_row) in piece.clone().enumerate() {
                let (image, a) = (tile_row / tiles.rows, tile_row % tiles.rows);
                let plane_start = ((first + image) * g.out_channels + co) * oh * ow;
                let plane = &grad[plane_start..plane_start + oh * ow];
                for u in 0..m {
                    let oy = m * a + u;
                    for v in 0..m {
                        let dst = &mut dy[(m * u + v) * plane_len + k * cols..][..cols];
                        if oy >= oh {
                            dst.fill(T::default());
                            continue;
                        }
                        let grad_row = &plane[oy * ow..(oy + 1) * ow];
                        dst.fill(T::default());
                        gather(dst, grad_row.get(v..).unwrap_or_default(), m);
                    }
                }
            }
            // A on the columns: C[i][v] = Σ_u Aᵀ[u][i] ∂Y[u][v] …
            for (iv, dst) in cc.chunks_mut(plane_len).enumerate() {
                let (i, v) = (iv / m, iv % m);
                combine(&mut dst[..len], row(&c.a, m, i), |u| {
                    &dy[(m * u + v) * plane_len..][..len]
                });
            }
            // … and on the rows: ∂M[n·i + j] = Σ_v Aᵀ[v][j] C[i][v].
            let t0 = piece.start * cols;
            for (ij, dst) in out.iter_mut().enumerate() {
                let (i, j) = (ij / n, ij % n);
                combine(&mut dst[t0..t0 + len], row(&c.a, m, j), |v| {
                    &cc[(m * i + v) * plane_len..][..len]
                });
            }
        }
    }
}

/// Adds `B ∂V Bᵀ` of every tile into the input gradient `dx` of the chunk's images, one
/// [`InputGradTask`] per input channel.
fn add_input_grad<T: Real>(dv: &[T], chunk: &Chunk<'_, T>, dx: &mut [T]) {
    let [h, w] = chunk.tiles.size;
    let c_in = chunk.g.in_channels;
    let (first, images) = (chunk.first, chunk.images);
    let planes = &mut dx[first * c_in * h * w..(first + images) * c_in * h * w];
    dispatch_each(planes_by_channel(planes, c_in, h * w), |channel, dst| {
        InputGradTask {
            chunk,
            dv,
            channel,
            dst,
        }
    });
}

/// One input channel of [`add_input_grad`], a piece of tile rows at a time: `B` on the columns
/// and on the rows, then each patch row added into its input row, where neighbouring tiles'
/// patches overlap in two columns and neighbouring tile rows in two rows (added in a fixed
/// order); entries in the padding are dropped ([`dispatch_each`]).
struct InputGradTask<'a, T> {
    chunk: &'a Chunk<'a, T>,
    dv: &'a [T],
    channel: usize,
    dst: Vec<&'a mut [T]>,
}

impl<T: Real> pulp::WithSimd for InputGradTask<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Self {
            chunk,
            dv,
            channel,
            mut dst,
        } = self;
        let (g, c, tiles, images) = (chunk.g, chunk.c, chunk.tiles, chunk.images);
        let [h, w] = tiles.size;
        let (m, n, cols) = (c.m, c.n, tiles.cols);
        let t_len = chunk.t_len();
        let c_in = g.in_channels;
        let pw = tiles.pad[1];
        let width = tiles.padded_width();
        let plane_len = PIECE.max(cols);
        let mut buf = vec![T::default(); 2 * n * n * plane_len + width];
        let (t, rest) = buf.split_at_mut(n * n * plane_len);
        let (d, padded) = rest.split_at_mut(n * n * plane_len);
        for piece in pieces(images * tiles.rows, cols) {
            let len = piece.len() * cols;
            let t0 = piece.start * cols;
            let vrow = |xi: usize| &dv[(xi * c_in + channel) * t_len + t0..][..len];
            // B on the columns: T[r][j] = Σ_i Bᵀ[i][r] ∂V[n·i + j] …
            for (rj, plane) in t.chunks_mut(plane_len).enumerate() {
                let (r, j) = (rj / n, rj % n);
                combine(&mut plane[..len], row(&c.b, n, r), |i| vrow(n * i + j));
            }
            // … and on the rows: D[r][s] = Σ_j Bᵀ[j][s] T[r][j].
            for (rs, plane) in d.chunks_mut(plane_len).enumerate() {
                let (r, s) = (rs / n, rs % n);
                combine(&mut plane[..len], row(&c.b, n, s), |j| {
                    &t[(n * r + j) * plane_len..][..len]
                });
            }
            for (k, tile_row) in piece.enumerate() {
                let (image, a) = (tile_row / tiles.rows, tile_row % tiles.rows);
                let r0 = tiles.first_row(a);
                for r in 0..n {
                    let ih = r0 + r as isize;
                    if ih < 0 || ih >= h as isize {
                        continue;
                    }
                    // The patch row r of every tile added at padded column m·b + s, which
                    // is input column m·b + s − pad (`width ≥ w + 2·pad`).
                    padded.fill(T::default());
                    // At most two terms meet at an entry, so the order of the sums is moot.
                    for s in 0..n {
                        let patch = &d[(n * r + s) * plane_len + k * cols..][..cols];
                        scatter(&mut padded[s..], patch, m, |p, value| *p += value);
                    }
                    let input_row = &mut dst[image][ih as usize * w..][..w];
                    for (x, &value) in input_row.iter_mut().zip(&padded[pw..pw + w]) {
                        *x += value;
                    }
                }
            }
        }
    }
}

/// `dst[ξ] (=|+=) lhs[ξ] · rhs[ξ]` for the `xi` entries, in parallel over `ξ` (each product on
/// one thread: 16 or 36 of them keep both cores busy without splitting a product).
#[allow(clippy::too_many_arguments)]
fn products<T: Real>(
    xi: usize,
    [m, n, k]: [usize; 3],
    dst: &mut [T],
    accumulate: bool,
    lhs: &[T],
    lhs_strides: (usize, usize),
    rhs: &[T],
    rhs_strides: (usize, usize),
) {
    dst[..xi * m * n]
        .par_chunks_mut(m * n)
        .zip(lhs[..xi * m * k].par_chunks(m * k))
        .zip(rhs[..xi * k * n].par_chunks(k * n))
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

/// Whether this file can compute the convolution `g`: a 3×3 kernel at stride 1 without
/// dilation, any zero padding.
pub fn supports(g: &ConvGeometry) -> bool {
    g.kernel == [3, 3] && g.stride == [1, 1] && g.dilation == [1, 1] && g.out_size().is_some()
}

/// Whether [`super::conv`] computes the convolution `g` here: [`supports`], with at least
/// [`MIN_CHANNELS`] input and output channels and [`MIN_POSITIONS`] output positions, or at
/// least [`WIDE_CHANNELS`] and [`MIN_WIDE_POSITIONS`].
pub fn covers(g: &ConvGeometry) -> bool {
    let channels = g.in_channels.min(g.out_channels);
    let min_positions = if channels >= WIDE_CHANNELS {
        MIN_WIDE_POSITIONS
    } else {
        MIN_POSITIONS
    };
    supports(g)
        && channels >= MIN_CHANNELS
        && g.out_size().is_some_and(|[h, w]| h * w >= min_positions)
}

/// The algorithm [`forward`] and [`backward`] use for the layers this file [`covers`].
pub const ALGORITHM: &Algorithm = &F4;

/// The convolution's output `[batch, out_channels, out_h, out_w]` by [`ALGORITHM`] for a
/// geometry this file [`supports`] (see [`forward_by`]).
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`
/// - `weight`: `[out_channels, in_channels, 3, 3]`
pub fn forward<T: Real>(x: &[T], weight: &[T], g: &ConvGeometry, budget: usize) -> Vec<T> {
    forward_by(ALGORITHM, x, weight, g, budget)
}

/// The convolution's output `[batch, out_channels, out_h, out_w]` by `alg`, for a geometry this
/// file [`supports`], in chunks of images whose transformed input and products stay near
/// `budget` entries.
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`
/// - `weight`: `[out_channels, in_channels, 3, 3]`
pub fn forward_by<T: Real>(
    alg: &Algorithm,
    x: &[T],
    weight: &[T],
    g: &ConvGeometry,
    budget: usize,
) -> Vec<T> {
    assert!(supports(g), "winograd: not a 3×3 stride-1 geometry: {g:?}");
    assert_eq!(x.len(), g.input_len(), "winograd: input length for {g:?}");
    assert_eq!(
        weight.len(),
        g.weight_len(),
        "winograd: weight length for {g:?}"
    );
    let c = Coefs::new(alg);
    let xi = c.xi();
    let tiles = Tiles::new(g, c.m);
    let per_chunk = images_per_chunk(g, xi, &tiles, budget);
    let (c_in, c_out) = (g.in_channels, g.out_channels);
    let plane = tiles.out[0] * tiles.out[1];
    let mut y = vec![T::default(); g.output_len()];
    let max_t = per_chunk * tiles.per_image();
    let sizes = [xi * c_in * max_t, xi * c_out * max_t, xi * c_out * c_in];
    with_scratch(sizes, |[v, m, u]: [&mut [T]; 3]| {
        transform_filters(weight, g, &c, u);
        let mut first = 0;
        while first < g.batch {
            let images = per_chunk.min(g.batch - first);
            let t_len = images * tiles.per_image();
            let chunk = Chunk {
                g,
                c: &c,
                tiles: &tiles,
                first,
                images,
            };
            transform_input(x, &chunk, v);
            // M[ξ][co][t] = Σ_c U[ξ][co][c] · V[ξ][c][t]
            products(
                xi,
                [c_out, t_len, c_in],
                m,
                false,
                u,
                (c_in, 1),
                v,
                (t_len, 1),
            );
            let y_chunk = &mut y[first * c_out * plane..(first + images) * c_out * plane];
            transform_output(m, &chunk, y_chunk);
            first += images;
        }
    });
    y
}

/// The gradients `(∂x, ∂w)` of the convolution by [`ALGORITHM`] (see [`backward_by`]).
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
    wanted: (bool, bool),
    budget: usize,
) -> (Option<Vec<T>>, Option<Vec<T>>) {
    backward_by(ALGORITHM, x, weight, grad, g, wanted, budget)
}

/// The gradients `(∂x, ∂w)` of the convolution by `alg` given its output gradient, each computed
/// only when asked for, for a geometry this file [`supports`].
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`, `weight`: `[out_channels, in_channels, 3, 3]`
/// - `grad`: `[batch, out_channels, out_h, out_w]`
/// - returns `(∂x, ∂w)` shaped as `x` and `weight`
#[allow(clippy::too_many_arguments)]
pub fn backward_by<T: Real>(
    alg: &Algorithm,
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
    let c = Coefs::new(alg);
    let xi = c.xi();
    let tiles = Tiles::new(g, c.m);
    let (c_in, c_out) = (g.in_channels, g.out_channels);
    let mut dx = want_x.then(|| vec![T::default(); g.input_len()]);
    let per_chunk = images_per_chunk(g, xi, &tiles, budget);
    let max_t = per_chunk * tiles.per_image();
    let pairs = c_out * c_in;
    let sizes = [
        xi * c_in * max_t,
        xi * c_out * max_t,
        if want_x { xi * pairs } else { 0 },
        if want_w { xi * pairs } else { 0 },
    ];
    with_scratch(sizes, |[v, dm, u, du]: [&mut [T]; 4]| {
        let u = want_x.then(|| {
            transform_filters(weight, g, &c, u);
            &*u
        });
        let mut du = want_w.then_some(du);
        let mut first = 0;
        while first < g.batch {
            let images = per_chunk.min(g.batch - first);
            let t_len = images * tiles.per_image();
            let chunk = Chunk {
                g,
                c: &c,
                tiles: &tiles,
                first,
                images,
            };
            transform_output_grad(grad, &chunk, dm);
            if let Some(du) = du.as_deref_mut() {
                transform_input(x, &chunk, v);
                // ∂U[ξ][co][c] += Σ_t ∂M[ξ][co][t] · V[ξ][c][t]: V read transposed.
                products(
                    xi,
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
                products(
                    xi,
                    [c_in, t_len, c_out],
                    v,
                    false,
                    u,
                    (1, c_in),
                    dm,
                    (t_len, 1),
                );
                add_input_grad(v, &chunk, dx);
            }
            first += images;
        }
        let dw = du.map(|du| filter_grads(du, g, &c));
        (dx, dw)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::test_values as values;
    use crate::kernels::im2col::tests::{assert_close, backward_by_im2col, direct};

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

    /// Maps whose last tile is partly outside the output, no padding, padding 1 and 2, unequal
    /// padding, a map of one output row, batch 1; each with one chunk and with one image per
    /// chunk (the weight gradient summed over chunks).
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
            // More tiles than one piece of the transforms (both algorithms), and a tile row
            // longer than a piece.
            geometry(3, [16, 16], [30, 29], [1, 1]),
            geometry(1, [16, 16], [3, 300], [1, 1]),
        ]
        .into_iter()
        .flat_map(|g| [(g, 1 << 21), (g, 1)])
        .collect()
    }

    /// Winograd reorders the sums (and scales them: by ½ in F(2×2, 3×3), by up to 8 and ⅙ in
    /// F(4×4, 3×3)), so it agrees with the definition to rounding: |values| < 1 and at most 16·9
    /// terms per output give sums below 150, whose f64 rounding, even through F(4×4)'s
    /// coefficients (below 64 on any path of a term), stays under 1e-12.
    #[test]
    fn forward_equals_the_definition() {
        for (alg, tol) in [(&F2, 1e-12), (&F4, 1e-12)] {
            for (g, budget) in cases() {
                assert!(supports(&g), "{g:?}");
                let x = values(g.input_len(), 1);
                let w = values(g.weight_len(), 2);
                let y = forward_by(alg, &x, &w, &g, budget);
                let expected = direct(&x, &w, &g);
                let what = format!("F({m}×{m}) {g:?} budget {budget} y", m = alg.m);
                assert_close(&y, &expected, tol, &what);
            }
        }
    }

    /// The gradients against im2col's, which `conv::tests` holds to the definition entry by
    /// entry; the same rounding bound as the forward pass, times 10 for the sums over up to
    /// `batch·positions` terms.
    #[test]
    fn gradients_equal_im2col() {
        for (alg, tol) in [(&F2, 1e-11), (&F4, 1e-11)] {
            for (g, budget) in cases() {
                let x = values(g.input_len(), 3);
                let w = values(g.weight_len(), 4);
                let dy = values(g.output_len(), 5);
                let (dx, dw) = backward_by(alg, &x, &w, &dy, &g, (true, true), budget);
                let (ex, ew) = backward_by_im2col(&x, &w, &dy, &g);
                for (name, ours, theirs) in [("∂x", dx.unwrap(), ex), ("∂w", dw.unwrap(), ew)] {
                    let what = format!("F({m}×{m}) {g:?} budget {budget} {name}", m = alg.m);
                    assert_close(&ours, &theirs, tol, &what);
                }
                let (only_x, none) = backward_by(alg, &x, &w, &dy, &g, (true, false), budget);
                assert!(none.is_none() && only_x.is_some());
                let (none, only_w) = backward_by(alg, &x, &w, &dy, &g, (false, true), budget);
                assert!(none.is_none() && only_w.is_some());
            }
        }
    }

    /// F(4×4, 3×3) in f32 against the definition (in f64, on the same f32 inputs), bounded entry
    /// by entry by the standard rounding analysis, which holds for any summation order and with
    /// or without fused multiply-adds, so on every CPU: each of the ~90 operations on a term's
    /// path (two 4-term stages of the input transform, two 3-term stages of the filter
    /// transform with its rounded ⅙, 1/12, 1/24, the product, the GEMM's sum over 64 channels in
    /// any order, two 5-term stages of the output transform) multiplies it by at most (1 + ε),
    /// so `|ŷ − y| ≤ γ₁₀₀ · Σ_c |Aᵀ|[(|G||g||G|ᵀ) ⊙ (|Bᵀ||d||B|)]|A|`, the same algorithm run in
    /// f64 on the absolute values of the data and of the matrices.
    #[test]
    fn f4_in_f32_is_within_its_rounding_bound() {
        let g = geometry(2, [64, 64], [12, 11], [1, 1]);
        let x: Vec<f32> = values(g.input_len(), 6).iter().map(|&v| v as f32).collect();
        let w: Vec<f32> = values(g.weight_len(), 7)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let y = forward_by(&F4, &x, &w, &g, 1 << 21);
        let wide = |v: &[f32]| v.iter().map(|&e| f64::from(e)).collect::<Vec<_>>();
        let exact = direct(&wide(&x), &wide(&w), &g);
        let leak = |m: &[f64]| -> &'static [f64] {
            Box::leak(
                m.iter()
                    .map(|c| c.abs())
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            )
        };
        let absolute = Algorithm {
            m: 4,
            bt: leak(F4.bt),
            g: leak(F4.g),
            at: leak(F4.at),
        };
        let abs = |v: &[f32]| v.iter().map(|&e| f64::from(e).abs()).collect::<Vec<_>>();
        let scale = forward_by(&absolute, &abs(&x), &abs(&w), &g, 1 << 21);
        let gamma = 100.0 * f64::from(f32::EPSILON) / 2.0;
        for (k, ((&ours, &truth), &bound)) in y.iter().zip(&exact).zip(&scale).enumerate() {
            let error = (f64::from(ours) - truth).abs();
            assert!(
                error <= gamma * bound,
                "y[{k}]: {ours} against {truth}, error {error:e} above {:e}",
                gamma * bound
            );
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
        // ResNet-18's last stage at 32 px (512 channels, 4×4 maps) is covered; the same map
        // with 128 channels (`small-2x`'s widest), a 2×2 map at 512, or 128 input channels into
        // 512 output channels are not.
        let wide = geometry(1, [512, 512], [4, 4], [1, 1]);
        assert!(covers(&wide));
        for narrow in [
            geometry(1, [128, 128], [4, 4], [1, 1]),
            geometry(1, [512, 512], [2, 2], [1, 1]),
            geometry(1, [128, 512], [4, 4], [1, 1]),
        ] {
            assert!(supports(&narrow) && !covers(&narrow), "{narrow:?}");
        }
    }
}
