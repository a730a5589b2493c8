//! Batch norm in training as four `#[cube]` kernels, two passes over the activation each way:
//! what [`batch_norm_op`](super::batch_norm_op) runs on `Autodiff<Wgpu>` and `Autodiff<Cuda>`
//! (cubecl compiles the same source for both), where the CPU has its slice kernels.
//!
//! Why this file exists: written in burn's tensor operations the operation's forward pass is
//! two reductions (`μ`, then `σ²` of `x − μ`), a few per-channel kernels and one element-wise
//! pass, and its backward two reductions and one element-wise pass; burn's fusion merges some
//! of them, and which ones autotune decides on the device (docs/gpu.md counts them). Here each
//! way is exactly two kernels, and the per-channel arithmetic rides in the second:
//!
//! - forward: `bn_forward_partials` reads each chunk of rows of the activation once for its
//!   per-channel mean and once more (from cache) for its sum of squared deviations from that
//!   mean; `bn_forward_apply` combines the chunks' moments (Chan's formula: no cancellation,
//!   as the two-pass variance), computes `r = 1/√(σ² + ε)`, `a = γ·r`, `b = β − μ·a` per
//!   channel in each cube and writes `y = a·x + b`, `μ` and `r` (what the backward pass
//!   reads), and the running averages moved by the moments (what was a dozen operations of
//!   burn's fusion stream a layer and group);
//! - backward: `bn_backward_partials` sums `∂y` and `∂y·(x − μ)` per chunk;
//!   `bn_backward_apply` adds the chunks up (`S₁`, `S₂`) and writes
//!   `∂x = γ·r·(∂y − S₁/M − (x − μ)·r²·S₂/M)`, and `∂β = S₁`, `∂γ = r·S₂` per group.
//!
//! With an epilogue (`kernels::batch_norm_relu_train`: a ResNet block's `relu(bn(x) + identity)`)
//! `bn_forward_apply` adds the residual and applies the ReLU before it writes `y`, and the
//! backward kernels take `g = ∂y` where the output is positive, 0 elsewhere (burn's
//! `relu_backward`), in place of `∂y`, the second writing `g` as the residual's gradient. The
//! residual, the output and the residual's gradient are `ComptimeOption` arguments and the ReLU
//! a `#[comptime]` flag: a layer without an epilogue compiles to kernels without its reads.
//!
//! An MLP head's batch norm of `[N, C]` features (`kernels::batch_norm_1d_train`) runs through
//! the same kernels as an `[N, C, 1, 1]` activation (one row an image), its running variance
//! following the biased batch variance (`unbias` 1: burn's `BatchNorm`, which the heads follow).
//!
//! The kernels see the activation as a `[groups, M, C]` matrix (`M = N·H·W / groups` rows: an
//! image's positions, image after image) and read it where it lies, through a `Layout`: burn's
//! row-major NCHW, or the NHWC buffer a cubecl convolution writes and burn sees as NCHW; their
//! outputs are written in the input's layout. (Until the eighth cut they read a channels-last
//! copy of every activation that was not one already.) A cube is 32 channels by 8 row lanes:
//! channels-last, a plane reads 32 neighbouring channels of one row (coalesced); NCHW, a plane's
//! 32 reads are `h·w` apart (not coalesced), and the cube's 8 planes read 8 neighbouring
//! positions of each channel, one 32-byte sector in f32, shared through the cache (not yet
//! timed on a GPU). The 8 lanes' sums are added in shared memory. The grid is (channel tiles, chunks of rows,
//! groups); the partial kernels' chunks are at most `MAX_PARTS` (64) per group, so each apply
//! cube combines at most that many partial moments per channel, 8 lanes sharing the work.
//! Sums accumulate in f32 whatever the element type. The partial moments live in f32 buffers
//! between the two kernels of a pass.
//!
//! burn's fusion runs the kernels as one custom operation each way (`OperationIr::Custom`, as
//! burn-vision's connected components do): the fusion stream executes what precedes them,
//! hands over the inner `CubeBackend`'s tensors, and takes the outputs back as fusion tensors.
//! The operations' inputs and outputs are what the autodiff operation holds (the `[n, c, h, w]`
//! activation and its gradient, the `[groups, c]` moments, the `[c]` parameter gradients), and
//! no more: an output nobody reads is still a fusion tensor, whose drop is one more operation of
//! the stream (the batch variance was one a layer and step until the ninth cut; an untracked
//! call, such as a momentum encoder's, returns no moments at all); the
//! parameters' gradients are summed over the groups on the inner tensors inside the operation,
//! and activations of two layouts (an NCHW gradient beside an NHWC input) copied into NHWC
//! there. As operations of the stream they were about two dozen reshapes and permutations per
//! layer and step, each registered, matched and run by the fusion thread: 23 % of a ResNet-18
//! SimCLR step's operations (docs/gpu.md, "The fourth cut").
//!
//! Checked on lavapipe against the CPU's slice kernels (`tests/gpu_path`: values, gradients and
//! moments, one and two groups, channels not a multiple of 32, rows over several chunks), and
//! by every GPU-path test of a method's two optimiser steps with a batch-norm backbone.

use std::marker::PhantomData;

use burn::prelude::*;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr};

use super::batch_norm_op::{
    self, BatchNormKernels, Composed, Epilogue, Grads, Moments, RunningAverages, Saved,
};
use super::cube_op::{output, tensor, Inner, Runtime};
use device::{backward_cube, forward_cube};

/// The kernels and their launches on the inner backend's tensors (cubecl's prelude has its own
/// `Tensor` and `Float`, hence a module of their own).
mod device {
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::ops::{permute_nchw_to_nhwc, permute_nhwc_to_nchw};
    use burn_cubecl::tensor::CubeTensor;
    use burn_cubecl::CubeRuntime;
    use cubecl::prelude::*;

    /// Channels per cube (the cube's x extent: one plane of 32 reads a row's 32 neighbouring
    /// channels).
    const TILE: u32 = 32;
    /// Row lanes per cube (the cube's y extent).
    const LANES: u32 = 8;
    /// At most this many chunks of rows per group in the partial kernels: what each cube of the
    /// apply kernels combines per channel.
    pub(super) const MAX_PARTS: usize = 64;
    /// The fewest rows a partial kernel's chunk has.
    const MIN_PART_ROWS: usize = 256;
    /// Rows per cube of the apply kernels (more when a group has more than 32,768 such chunks, to
    /// keep the grid's y extent within every device's limit).
    const APPLY_ROWS: usize = 512;

    /// How the kernels find an activation `[n, c, h, w]`'s values (`x`, the residual, `y`, `∂y`,
    /// the ReLU's output, `∂x`: all of one layout): `channels` = `c`, `hw` = `h·w`, and the
    /// strides of an image, a channel and a position (`h·w` flattened). burn's row-major NCHW is
    /// `(c·hw, hw, 1)`; the channels-last memory of a cubecl convolution's output (an NHWC buffer
    /// seen as NCHW) `(hw·c, 1, c)`. Read in place, either needs no copy into the kernels'
    /// `[groups, M, C]` matrix (row `group · M + r` is image `row / hw`, position `row % hw`).
    #[derive(CubeLaunch, CubeType)]
    pub(super) struct Layout {
        channels: u32,
        hw: u32,
        image: u32,
        channel: u32,
        position: u32,
    }

    /// The sum over the cube's 8 row lanes of each lane's `value`, for the cube's channel
    /// `UNIT_POS_X`; every unit of the column gets the same sum, added in the same order.
    #[cube]
    fn lanes_sum(shared: &mut SharedMemory<f32>, value: f32) -> f32 {
        let x = UNIT_POS_X as usize;
        shared[UNIT_POS_Y as usize * 32 + x] = value;
        sync_cube();
        let mut total = shared[x];
        for lane in 1..8usize {
            total += shared[lane * 32 + x];
        }
        sync_cube();
        total
    }

    /// `∂y` at `at`, or 0 where the fused ReLU's `output` is `≤ 0` (burn's `relu_backward`), in
    /// f32.
    #[cube]
    fn masked<F: Float>(dy: &Tensor<F>, output: &ComptimeOption<Tensor<F>>, at: usize) -> f32 {
        let mut g = f32::cast_from(dy[at]);
        #[comptime]
        if let ComptimeOption::Some(output) = output {
            if f32::cast_from(output[at]) <= 0.0 {
                g = 0.0;
            }
        }
        g
    }

    /// The rows `[start, end)` of chunk `part` of a group of `rows` rows, chunks of `chunk` rows.
    #[cube]
    fn chunk_bounds(part: usize, chunk: usize, rows: usize) -> (usize, usize) {
        let start = part * chunk;
        let mut end = start + chunk;
        if end > rows {
            end = rows;
        }
        (start, end)
    }

    /// Where row `row` (over all groups: `group · M + r`) of channel `c` lies in an activation
    /// of `layout` (see [`Layout`]): the row is image `row / hw`, position `row % hw`.
    #[cube]
    fn address(row: usize, c: usize, layout: &Layout) -> usize {
        let hw = layout.hw as usize;
        (row / hw) * layout.image as usize
            + c * layout.channel as usize
            + (row % hw) * layout.position as usize
    }

    /// Forward, first pass: per group, chunk of rows and channel, the chunk's mean and its sum of
    /// squared deviations from that mean (`part_mean`, `part_m2`: `[groups, parts, C]`).
    #[cube(launch)]
    fn bn_forward_partials<F: Float>(
        x: &Tensor<F>,
        part_mean: &mut Tensor<f32>,
        part_m2: &mut Tensor<f32>,
        rows: u32,
        chunk: u32,
        layout: Layout,
        #[define(F)] _dtype: StorageType,
    ) {
        let channels = layout.channels as usize;
        let parts = part_mean.shape(1);
        let rows = rows as usize;
        let c = CUBE_POS_X as usize * 32 + UNIT_POS_X as usize;
        let part = CUBE_POS_Y as usize;
        let group = CUBE_POS_Z as usize;
        let (start, end) = chunk_bounds(part, chunk as usize, rows);
        let base = group * rows;
        let mut shared = SharedMemory::<f32>::new(256usize);

        let mut sum = 0.0f32;
        if c < channels {
            let mut r = start + UNIT_POS_Y as usize;
            while r < end {
                sum += f32::cast_from(x[address(base + r, c, &layout)]);
                r += 8;
            }
        }
        let mean = lanes_sum(&mut shared, sum) / ((end - start) as f32);

        let mut m2 = 0.0f32;
        if c < channels {
            let mut r = start + UNIT_POS_Y as usize;
            while r < end {
                let d = f32::cast_from(x[address(base + r, c, &layout)]) - mean;
                m2 += d * d;
                r += 8;
            }
        }
        let m2 = lanes_sum(&mut shared, m2);

        if c < channels && UNIT_POS_Y == 0 {
            let at = (group * parts + part) * channels + c;
            part_mean[at] = mean;
            part_m2[at] = m2;
        }
    }

    /// The group's `μ` and biased `σ²` for the cube's channel `c`, combined from its chunks'
    /// partial moments (Chan's formula: `μ = Σ nₚ·μₚ / M`, then `M₂ = Σ (M₂ₚ + nₚ·(μₚ − μ)²)`);
    /// the cube's 8 lanes share the chunks, and every unit of the column gets the same values.
    #[cube]
    #[allow(clippy::too_many_arguments)]
    fn group_moments(
        part_mean: &Tensor<f32>,
        part_m2: &Tensor<f32>,
        shared: &mut SharedMemory<f32>,
        group: usize,
        c: usize,
        channels: usize,
        rows: usize,
        part_chunk: usize,
    ) -> (f32, f32) {
        let parts = part_mean.shape(1);
        let total = rows as f32;
        let mut weighted = 0.0f32;
        if c < channels {
            let mut p = UNIT_POS_Y as usize;
            while p < parts {
                let (start, end) = chunk_bounds(p, part_chunk, rows);
                weighted += ((end - start) as f32) * part_mean[(group * parts + p) * channels + c];
                p += 8;
            }
        }
        let mean = lanes_sum(shared, weighted) / total;
        let mut m2 = 0.0f32;
        if c < channels {
            let mut p = UNIT_POS_Y as usize;
            while p < parts {
                let (start, end) = chunk_bounds(p, part_chunk, rows);
                let at = (group * parts + p) * channels + c;
                let d = part_mean[at] - mean;
                m2 += part_m2[at] + ((end - start) as f32) * d * d;
                p += 8;
            }
        }
        let var = lanes_sum(shared, m2) / total;
        (mean, var)
    }

    /// Forward, second pass: each cube combines its channels' partial moments
    /// ([`group_moments`]), writes `y = γ·r·x + (β − μ·γ·r)` over its chunk of rows, and the
    /// cubes of the first chunk write the group's `μ` and `r = 1/√(σ² + ε)` (`[groups, C]`, what
    /// the backward pass reads). The cubes of the first chunk of the first group also move the running
    /// averages (`[C]`) by each group's moments in turn, as separate calls would:
    /// `r ← keep·r + m·μ`, `v ← keep·v + (σ²·unbias)·m` (`keep = 1 − m`, `unbias = M/(M − 1)`
    /// for an unbiased running variance, 1 for a biased one),
    /// recomputing the other groups' moments from their partial moments (a few dozen values a
    /// channel) rather than waiting for their cubes.
    #[cube(launch)]
    // `if relu` is resolved when the kernel is expanded, the `if` inside it on the device: not
    // one condition.
    #[allow(clippy::too_many_arguments, clippy::collapsible_if)]
    fn bn_forward_apply<F: Float>(
        x: &Tensor<F>,
        gamma: &Tensor<F>,
        beta: &Tensor<F>,
        residual: &ComptimeOption<Tensor<F>>,
        running_mean: &Tensor<F>,
        running_var: &Tensor<F>,
        part_mean: &Tensor<f32>,
        part_m2: &Tensor<f32>,
        y: &mut Tensor<F>,
        mean_out: &mut Tensor<F>,
        inv_std_out: &mut Tensor<F>,
        running_mean_out: &mut Tensor<F>,
        running_var_out: &mut Tensor<F>,
        rows: u32,
        part_chunk: u32,
        apply_chunk: u32,
        epsilon: f32,
        keep: f32,
        momentum: f32,
        unbias: f32,
        layout: Layout,
        #[comptime] relu: bool,
        #[define(F)] _dtype: StorageType,
    ) {
        let channels = layout.channels as usize;
        let groups = part_mean.shape(0);
        let rows = rows as usize;
        let c = CUBE_POS_X as usize * 32 + UNIT_POS_X as usize;
        let block = CUBE_POS_Y as usize;
        let group = CUBE_POS_Z as usize;
        let mut shared = SharedMemory::<f32>::new(256usize);
        let (mean, var) = group_moments(
            part_mean,
            part_m2,
            &mut shared,
            group,
            c,
            channels,
            rows,
            part_chunk as usize,
        );

        // The condition is the same for every unit of the cube: all of them reach the
        // synchronisations inside `group_moments`.
        if block == 0 && group == 0 {
            let mut moved_mean = 0.0f32;
            let mut moved_var = 0.0f32;
            if c < channels {
                moved_mean = f32::cast_from(running_mean[c]);
                moved_var = f32::cast_from(running_var[c]);
            }
            for g in 0..groups {
                let (mu, sigma2) = group_moments(
                    part_mean,
                    part_m2,
                    &mut shared,
                    g,
                    c,
                    channels,
                    rows,
                    part_chunk as usize,
                );
                moved_mean = moved_mean * keep + mu * momentum;
                moved_var = moved_var * keep + sigma2 * unbias * momentum;
            }
            if c < channels && UNIT_POS_Y == 0 {
                running_mean_out[c] = F::cast_from(moved_mean);
                running_var_out[c] = F::cast_from(moved_var);
            }
        }

        if c < channels {
            let inv_std = 1.0f32 / (var + epsilon).sqrt();
            let scale = f32::cast_from(gamma[c]) * inv_std;
            let shift = f32::cast_from(beta[c]) - mean * scale;
            if block == 0 && UNIT_POS_Y == 0 {
                mean_out[group * channels + c] = F::cast_from(mean);
                inv_std_out[group * channels + c] = F::cast_from(inv_std);
            }
            let (start, end) = chunk_bounds(block, apply_chunk as usize, rows);
            let base = group * rows;
            let mut r = start + UNIT_POS_Y as usize;
            while r < end {
                let at = address(base + r, c, &layout);
                let mut v = f32::cast_from(x[at]) * scale + shift;
                #[comptime]
                if let ComptimeOption::Some(residual) = residual {
                    v += f32::cast_from(residual[at]);
                }
                // As burn's `relu`: 0 where `v ≤ 0` (a mask fill, not a maximum).
                if relu {
                    if v <= 0.0 {
                        v = 0.0;
                    }
                }
                y[at] = F::cast_from(v);
                r += 8;
            }
        }
    }

    /// Backward, first pass: per group, chunk of rows and channel, `Σ ∂y` and `Σ ∂y·(x − μ)`
    /// (`part_s1`, `part_s2`: `[groups, parts, C]`).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    fn bn_backward_partials<F: Float>(
        dy: &Tensor<F>,
        x: &Tensor<F>,
        output: &ComptimeOption<Tensor<F>>,
        mean: &Tensor<F>,
        part_s1: &mut Tensor<f32>,
        part_s2: &mut Tensor<f32>,
        rows: u32,
        chunk: u32,
        layout: Layout,
        #[define(F)] _dtype: StorageType,
    ) {
        let channels = layout.channels as usize;
        let parts = part_s1.shape(1);
        let rows = rows as usize;
        let c = CUBE_POS_X as usize * 32 + UNIT_POS_X as usize;
        let part = CUBE_POS_Y as usize;
        let group = CUBE_POS_Z as usize;
        let (start, end) = chunk_bounds(part, chunk as usize, rows);
        let base = group * rows;
        let mut shared = SharedMemory::<f32>::new(256usize);

        let mut s1 = 0.0f32;
        let mut s2 = 0.0f32;
        if c < channels {
            let mu = f32::cast_from(mean[group * channels + c]);
            let mut r = start + UNIT_POS_Y as usize;
            while r < end {
                let at = address(base + r, c, &layout);
                let g = masked(dy, output, at);
                s1 += g;
                s2 += g * (f32::cast_from(x[at]) - mu);
                r += 8;
            }
        }
        let s1 = lanes_sum(&mut shared, s1);
        let s2 = lanes_sum(&mut shared, s2);

        if c < channels && UNIT_POS_Y == 0 {
            let at = (group * parts + part) * channels + c;
            part_s1[at] = s1;
            part_s2[at] = s2;
        }
    }

    /// Backward, second pass: each cube adds its channels' partial sums into `S₁`, `S₂`, writes
    /// `∂x = γ·r·(∂y − S₁/M − (x − μ)·r²·S₂/M)` over its chunk of rows, and the cubes of the first
    /// chunk write the group's `∂β = S₁` and `∂γ = r·S₂` (`[groups, C]`).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    fn bn_backward_apply<F: Float>(
        dy: &Tensor<F>,
        x: &Tensor<F>,
        output: &ComptimeOption<Tensor<F>>,
        gamma: &Tensor<F>,
        mean: &Tensor<F>,
        inv_std: &Tensor<F>,
        part_s1: &Tensor<f32>,
        part_s2: &Tensor<f32>,
        dx: &mut Tensor<F>,
        dresidual: &mut ComptimeOption<Tensor<F>>,
        dgamma: &mut Tensor<F>,
        dbeta: &mut Tensor<F>,
        rows: u32,
        apply_chunk: u32,
        layout: Layout,
        #[define(F)] _dtype: StorageType,
    ) {
        let channels = layout.channels as usize;
        let parts = part_s1.shape(1);
        let rows = rows as usize;
        let c = CUBE_POS_X as usize * 32 + UNIT_POS_X as usize;
        let block = CUBE_POS_Y as usize;
        let group = CUBE_POS_Z as usize;
        let mut shared = SharedMemory::<f32>::new(256usize);

        let mut s1 = 0.0f32;
        let mut s2 = 0.0f32;
        if c < channels {
            let mut p = UNIT_POS_Y as usize;
            while p < parts {
                let at = (group * parts + p) * channels + c;
                s1 += part_s1[at];
                s2 += part_s2[at];
                p += 8;
            }
        }
        let s1 = lanes_sum(&mut shared, s1);
        let s2 = lanes_sum(&mut shared, s2);

        if c < channels {
            let total = rows as f32;
            let mu = f32::cast_from(mean[group * channels + c]);
            let r_ = f32::cast_from(inv_std[group * channels + c]);
            let scale = f32::cast_from(gamma[c]) * r_;
            let m1 = s1 / total;
            let slope = s2 / total * r_ * r_;
            if block == 0 && UNIT_POS_Y == 0 {
                dbeta[group * channels + c] = F::cast_from(s1);
                dgamma[group * channels + c] = F::cast_from(s2 * r_);
            }
            let (start, end) = chunk_bounds(block, apply_chunk as usize, rows);
            let base = group * rows;
            let mut r = start + UNIT_POS_Y as usize;
            while r < end {
                let at = address(base + r, c, &layout);
                let g = masked(dy, output, at);
                #[comptime]
                if let ComptimeOption::Some(dresidual) = dresidual {
                    dresidual[at] = F::cast_from(g);
                }
                let centred = f32::cast_from(x[at]) - mu;
                dx[at] = F::cast_from(scale * (g - m1 - centred * slope));
                r += 8;
            }
        }
    }

    /// Rows per chunk of the partial kernels and their count, for a group of `rows` rows.
    pub(super) fn part_chunks(rows: usize) -> (usize, usize) {
        let chunk = rows.div_ceil(MAX_PARTS).max(MIN_PART_ROWS);
        (chunk, rows.div_ceil(chunk).max(1))
    }

    /// Rows per cube of the apply kernels and their count.
    pub(super) fn apply_chunks(rows: usize) -> (usize, usize) {
        let chunk = rows.div_ceil(32_768).max(APPLY_ROWS);
        (chunk, rows.div_ceil(chunk).max(1))
    }

    fn tiles(channels: usize) -> u32 {
        channels.div_ceil(TILE as usize) as u32
    }

    /// An uninitialised tensor of `shape`, row-major without padding: the kernels index it as
    /// contiguous. (burn's `empty_device_dtype` lays rows out for the device, and CUDA's layout
    /// pads each row to an alignment when its bytes are not a multiple of it: `C = 96` in f32
    /// would be read back with other strides than the kernels wrote.)
    fn empty_like<R: CubeRuntime>(
        like: &CubeTensor<R>,
        shape: Vec<usize>,
        dtype: burn::tensor::DType,
    ) -> CubeTensor<R> {
        empty_device_contiguous_dtype::<R>(
            like.client.clone(),
            like.device.clone(),
            shape.into(),
            dtype,
        )
    }

    /// The two memory layouts of an activation `[n, c, h, w]` the kernels read in place.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Dense {
        /// burn's row-major NCHW.
        Nchw,
        /// An NHWC buffer seen as NCHW (a cubecl convolution's output).
        Nhwc,
    }

    /// `t`'s layout, if it is one of [`Dense`] (NCHW where both hold: a channel or a position
    /// alone). Strides of axes of extent 1 are not looked at.
    pub(super) fn dense<R: CubeRuntime>(t: &CubeTensor<R>) -> Option<Dense> {
        let (shape, strides) = (t.meta.shape(), t.meta.strides());
        let [_, c, h, w] = shape.dims();
        let has = |expected: [usize; 4]| (0..4).all(|i| shape[i] == 1 || strides[i] == expected[i]);
        if has([c * h * w, h * w, w, 1]) {
            Some(Dense::Nchw)
        } else if has([h * w * c, 1, w * c, c]) {
            Some(Dense::Nhwc)
        } else {
            None
        }
    }

    /// The activations `ts` (each `[n, c, h, w]`) as they are when they share one [`Dense`]
    /// layout, else all in NHWC (a copy of those that are not): what cubecl's convolutions
    /// write and read, so that the outputs, written in the same layout, go on to the next
    /// convolution (or its gradients) without a copy of their own.
    fn one_layout<R: CubeRuntime, const K: usize>(
        ts: [Option<CubeTensor<R>>; K],
    ) -> (Dense, [Option<CubeTensor<R>>; K]) {
        let layouts: Vec<_> = ts.iter().flatten().map(dense).collect();
        match layouts.first() {
            Some(Some(first)) if layouts.iter().all(|l| *l == Some(*first)) => (*first, ts),
            _ => (
                Dense::Nhwc,
                ts.map(|t| {
                    t.map(|t| match dense(&t) {
                        Some(Dense::Nhwc) => t,
                        _ => permute_nhwc_to_nchw(into_contiguous(permute_nchw_to_nhwc(t))),
                    })
                }),
            ),
        }
    }

    /// The kernels' view of activations of `dims` in `layout`.
    fn layout_args<R: CubeRuntime>(dense: Dense, [_, c, h, w]: [usize; 4]) -> LayoutLaunch<R> {
        let hw = h * w;
        let (channel, position) = match dense {
            Dense::Nchw => (hw, 1),
            Dense::Nhwc => (1, c),
        };
        LayoutLaunch::new(
            c as u32,
            hw as u32,
            (c * hw) as u32,
            channel as u32,
            position as u32,
        )
    }

    /// An uninitialised activation of `dims` (`[n, c, h, w]`) in `layout`.
    fn empty_activation<R: CubeRuntime>(
        like: &CubeTensor<R>,
        [n, c, h, w]: [usize; 4],
        layout: Dense,
        dtype: burn::tensor::DType,
    ) -> CubeTensor<R> {
        match layout {
            Dense::Nchw => empty_like(like, vec![n, c, h, w], dtype),
            Dense::Nhwc => permute_nhwc_to_nchw(empty_like(like, vec![n, h, w, c], dtype)),
        }
    }

    /// The forward kernels on the inner backend's tensors: `x` `[n, c, h, w]` (`groups` equal
    /// batches stacked), `γ`, `β` and the running mean and variance `[C]`, the epilogue's
    /// `residual` (`[n, c, h, w]`) and `relu`; returns `y` `[n, c, h, w]` in `x`'s layout
    /// (`γ·x̂ + β`, plus the residual, through the ReLU), `μ`, `r` `[groups, C]` and the
    /// running mean and variance moved with `momentum` (`[C]`; the variance towards the unbiased
    /// batch variance when `unbiased`, else the biased). The activations are read where they
    /// are when they share one [`Dense`] layout, else copied into NHWC.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_cube<R: CubeRuntime>(
        x: CubeTensor<R>,
        gamma: CubeTensor<R>,
        beta: CubeTensor<R>,
        [running_mean, running_var]: [CubeTensor<R>; 2],
        residual: Option<CubeTensor<R>>,
        relu: bool,
        epsilon: f64,
        momentum: f64,
        unbiased: bool,
        groups: usize,
    ) -> [CubeTensor<R>; 5] {
        let [gamma, beta, running_mean, running_var] =
            [gamma, beta, running_mean, running_var].map(into_contiguous);
        let (layout, [x, residual]) = one_layout([Some(x), residual]);
        let x = x.expect("the input is given");
        let dims @ [n, channels, h, w] = x.meta.shape().dims();
        let rows = n / groups * h * w;
        let unbias = if unbiased {
            rows as f64 / (rows - 1) as f64
        } else {
            1.0
        };
        let dtype = x.dtype;
        let (part_chunk, parts) = part_chunks(rows);
        let (apply_chunk, blocks) = apply_chunks(rows);
        let f32_dtype = burn::tensor::DType::F32;
        let part_mean = empty_like(&x, vec![groups, parts, channels], f32_dtype);
        let part_m2 = empty_like(&x, vec![groups, parts, channels], f32_dtype);
        let y = empty_activation(&x, dims, layout, dtype);
        let [mean, inv_std] = [0; 2].map(|_| empty_like(&x, vec![groups, channels], dtype));
        let [moved_mean, moved_var] = [0; 2].map(|_| empty_like(&x, vec![channels], dtype));
        let client = x.client.clone();
        let cube_dim = CubeDim::new_2d(TILE, LANES);
        bn_forward_partials::launch::<R>(
            &client,
            CubeCount::Static(tiles(channels), parts as u32, groups as u32),
            cube_dim,
            x.clone().into_tensor_arg(),
            part_mean.clone().into_tensor_arg(),
            part_m2.clone().into_tensor_arg(),
            rows as u32,
            part_chunk as u32,
            layout_args(layout, dims),
            dtype.into(),
        );
        bn_forward_apply::launch::<R>(
            &client,
            CubeCount::Static(tiles(channels), blocks as u32, groups as u32),
            cube_dim,
            x.into_tensor_arg(),
            gamma.into_tensor_arg(),
            beta.into_tensor_arg(),
            residual.map(|t| t.into_tensor_arg()).into(),
            running_mean.into_tensor_arg(),
            running_var.into_tensor_arg(),
            part_mean.into_tensor_arg(),
            part_m2.into_tensor_arg(),
            y.clone().into_tensor_arg(),
            mean.clone().into_tensor_arg(),
            inv_std.clone().into_tensor_arg(),
            moved_mean.clone().into_tensor_arg(),
            moved_var.clone().into_tensor_arg(),
            rows as u32,
            part_chunk as u32,
            apply_chunk as u32,
            epsilon as f32,
            (1.0 - momentum) as f32,
            momentum as f32,
            unbias as f32,
            layout_args(layout, dims),
            relu,
            dtype.into(),
        );
        [y, mean, inv_std, moved_mean, moved_var]
    }

    /// The backward kernels on the inner backend's tensors: `∂y`, `x` `[n, c, h, w]` (`groups`
    /// equal batches stacked), the fused ReLU's `output` (`[n, c, h, w]`, its mask), `γ` `[C]`,
    /// `μ`, `r` `[groups, C]`; returns `∂x` `[n, c, h, w]`, `∂γ`, `∂β` `[groups, C]`, and with
    /// `residual` the residual's gradient (`∂y` through the ReLU's mask, `[n, c, h, w]`), the
    /// activations in one layout, as [`forward_cube`] reads and writes them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward_cube<R: CubeRuntime>(
        dy: CubeTensor<R>,
        x: CubeTensor<R>,
        output: Option<CubeTensor<R>>,
        gamma: CubeTensor<R>,
        mean: CubeTensor<R>,
        inv_std: CubeTensor<R>,
        residual: bool,
        groups: usize,
    ) -> ([CubeTensor<R>; 3], Option<CubeTensor<R>>) {
        let [gamma, mean, inv_std] = [gamma, mean, inv_std].map(into_contiguous);
        let (layout, [dy, x, output]) = one_layout([Some(dy), Some(x), output]);
        let (dy, x) = (dy.expect("∂y is given"), x.expect("x is given"));
        let dims @ [n, channels, h, w] = x.meta.shape().dims();
        let rows = n / groups * h * w;
        let dtype = x.dtype;
        let (part_chunk, parts) = part_chunks(rows);
        let (apply_chunk, blocks) = apply_chunks(rows);
        let f32_dtype = burn::tensor::DType::F32;
        let part_s1 = empty_like(&x, vec![groups, parts, channels], f32_dtype);
        let part_s2 = empty_like(&x, vec![groups, parts, channels], f32_dtype);
        let dx = empty_activation(&x, dims, layout, dtype);
        let dresidual = residual.then(|| empty_activation(&x, dims, layout, dtype));
        let [dgamma, dbeta] = [0; 2].map(|_| empty_like(&x, vec![groups, channels], dtype));
        let client = x.client.clone();
        let cube_dim = CubeDim::new_2d(TILE, LANES);
        bn_backward_partials::launch::<R>(
            &client,
            CubeCount::Static(tiles(channels), parts as u32, groups as u32),
            cube_dim,
            dy.clone().into_tensor_arg(),
            x.clone().into_tensor_arg(),
            output.clone().map(|t| t.into_tensor_arg()).into(),
            mean.clone().into_tensor_arg(),
            part_s1.clone().into_tensor_arg(),
            part_s2.clone().into_tensor_arg(),
            rows as u32,
            part_chunk as u32,
            layout_args(layout, dims),
            dtype.into(),
        );
        bn_backward_apply::launch::<R>(
            &client,
            CubeCount::Static(tiles(channels), blocks as u32, groups as u32),
            cube_dim,
            dy.into_tensor_arg(),
            x.into_tensor_arg(),
            output.map(|t| t.into_tensor_arg()).into(),
            gamma.into_tensor_arg(),
            mean.into_tensor_arg(),
            inv_std.into_tensor_arg(),
            part_s1.into_tensor_arg(),
            part_s2.into_tensor_arg(),
            dx.clone().into_tensor_arg(),
            dresidual.clone().map(|t| t.into_tensor_arg()).into(),
            dgamma.clone().into_tensor_arg(),
            dbeta.clone().into_tensor_arg(),
            rows as u32,
            apply_chunk as u32,
            layout_args(layout, dims),
            dtype.into(),
        );
        ([dx, dgamma, dbeta], dresidual)
    }
}

/// The forward kernels as one custom operation of burn's fusion stream, the layout changes of
/// the activation and the running averages' update included; its inputs are `x`, `γ`, `β`, the
/// running averages and, when the epilogue has one, the residual.
#[derive(Clone, Debug)]
struct ForwardOp<R, F, I, BT> {
    desc: CustomOpIr,
    epsilon: f64,
    momentum: f64,
    unbiased: bool,
    groups: usize,
    relu: bool,
    _backend: PhantomData<(R, F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<Runtime<R, F, I, BT>> for ForwardOp<R, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<Runtime<R, F, I, BT> as FusionRuntime>::FusionHandle>,
    ) {
        let (inputs, outputs) = (&self.desc.inputs, &self.desc.outputs);
        let [x, gamma, beta, running_mean, running_var] = std::array::from_fn(|i| &inputs[i]);
        let mut get = |t| handles.get_float_tensor::<Inner<R, F, I, BT>>(t);
        let x = get(x);
        let residual = inputs.get(5).map(&mut get);
        let [y, mean, inv_std, moved_mean, moved_var] = forward_cube::<R>(
            x,
            get(gamma),
            get(beta),
            [get(running_mean), get(running_var)],
            residual,
            self.relu,
            self.epsilon,
            self.momentum,
            self.unbiased,
            self.groups,
        );
        // Untracked, the moments are no outputs: their buffers go back to the pool here.
        let results = match outputs.len() {
            5 => vec![y, mean, inv_std, moved_mean, moved_var],
            _ => vec![y, moved_mean, moved_var],
        };
        for (ir, tensor) in outputs.iter().zip(results) {
            handles.register_float_tensor::<Inner<R, F, I, BT>>(&ir.id, tensor);
        }
    }
}

/// The backward kernels as one custom operation of burn's fusion stream, the layout changes and
/// the parameters' sums over the groups included; its inputs are `∂y`, `x`, `γ`, `μ`, `r` and,
/// with a fused ReLU, its output, and its outputs `∂x`, `∂γ`, `∂β` and, with a residual, its
/// gradient.
#[derive(Clone, Debug)]
struct BackwardOp<R, F, I, BT> {
    desc: CustomOpIr,
    groups: usize,
    _backend: PhantomData<(R, F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<Runtime<R, F, I, BT>> for BackwardOp<R, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<Runtime<R, F, I, BT> as FusionRuntime>::FusionHandle>,
    ) {
        let (inputs, outputs) = (&self.desc.inputs, &self.desc.outputs);
        let [dy, x, gamma, mean, inv_std] = std::array::from_fn(|i| &inputs[i]);
        let mut get = |t| handles.get_float_tensor::<Inner<R, F, I, BT>>(t);
        let (dy, x, output) = (get(dy), get(x), inputs.get(5).map(&mut get));
        let ([dx, dgamma, dbeta], dresidual) = backward_cube::<R>(
            dy,
            x,
            output,
            get(gamma),
            get(mean),
            get(inv_std),
            outputs.len() == 4,
            self.groups,
        );
        let sum = |t| {
            batch_norm_op::over_groups(tensor::<Inner<R, F, I, BT>, 2>(t))
                .into_primitive()
                .tensor()
        };
        let results = [dx, sum(dgamma), sum(dbeta)].into_iter().chain(dresidual);
        for (ir, tensor) in outputs.iter().zip(results) {
            handles.register_float_tensor::<Inner<R, F, I, BT>>(&ir.id, tensor);
        }
    }
}

/// The `#[cube]` kernels of this file as [`BatchNormKernels`] of `Fusion<CubeBackend<…>>`, the
/// inner backend of `Autodiff<Wgpu>` and `Autodiff<Cuda>`, for operands of one element type
/// (f32, or bf16 under `--precision bf16`, summed in f32); operands of mixed types take
/// [`Composed`]. Each way is one operation of burn's fusion stream, whose inputs and outputs
/// have the shapes the autodiff operation hands over and keeps (no reshapes or permutations
/// around it in the stream: in a ResNet-18 step they were a quarter of its operations).
#[derive(Debug)]
pub(crate) struct CubeKernels;

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    BatchNormKernels<Fusion<Inner<R, F, I, BT>>> for CubeKernels
{
    fn forward(
        x: Tensor<Fusion<Inner<R, F, I, BT>>, 4>,
        gamma: Tensor<Fusion<Inner<R, F, I, BT>>, 1>,
        beta: Tensor<Fusion<Inner<R, F, I, BT>>, 1>,
        running: RunningAverages<Fusion<Inner<R, F, I, BT>>>,
        epsilon: f64,
        groups: usize,
        epilogue: Epilogue<Fusion<Inner<R, F, I, BT>>>,
        keep: bool,
    ) -> Moments<Fusion<Inner<R, F, I, BT>>> {
        let dtype = x.dtype();
        if [
            gamma.dtype(),
            beta.dtype(),
            running.mean.dtype(),
            running.var.dtype(),
        ] != [dtype; 4]
            || epilogue
                .residual
                .as_ref()
                .is_some_and(|r| r.dtype() != dtype)
        {
            // The kernels read every operand in one element type.
            return Composed::forward(x, gamma, beta, running, epsilon, groups, epilogue, keep);
        }
        let [n, c, h, w] = x.dims();
        let (momentum, unbiased) = (running.momentum, running.unbiased);
        let [x, gamma, beta, running_mean, running_var] = [
            x.into_primitive().tensor(),
            gamma.into_primitive().tensor(),
            beta.into_primitive().tensor(),
            running.mean.into_primitive().tensor(),
            running.var.into_primitive().tensor(),
        ];
        let residual = epilogue.residual.map(|r| r.into_primitive().tensor());
        let client = x.client.clone();
        // `y`, then `μ` and `r` for the backward step (when there is one), then the running
        // averages.
        let mut outputs = vec![output(&x, vec![n, c, h, w])];
        if keep {
            outputs.extend([output(&x, vec![groups, c]), output(&x, vec![groups, c])]);
        }
        outputs.extend([output(&x, vec![c]), output(&x, vec![c])]);
        let inputs: Vec<_> = [x, gamma, beta, running_mean, running_var]
            .into_iter()
            .chain(residual)
            .collect();
        let streams = OperationStreams::with_inputs(&inputs);
        // The ReLU is no input or output of its own: its own name tells the two operations apart.
        let name = if epilogue.relu {
            "curriculum_ssl_batch_norm_relu_forward"
        } else {
            "curriculum_ssl_batch_norm_forward"
        };
        let desc = CustomOpIr::new(
            name,
            &inputs.into_iter().map(|t| t.into_ir()).collect::<Vec<_>>(),
            &outputs,
        );
        let mut results = client
            .register(
                streams,
                OperationIr::Custom(desc.clone()),
                ForwardOp::<R, F, I, BT> {
                    desc,
                    epsilon,
                    momentum,
                    unbiased,
                    groups,
                    relu: epilogue.relu,
                    _backend: PhantomData,
                },
            )
            .into_iter();
        let mut next = || results.next().expect("the outputs registered above");
        let output = tensor(next());
        let saved = keep.then(|| Saved {
            mean: tensor(next()),
            inv_std: tensor(next()),
        });
        Moments {
            output,
            saved,
            running: RunningAverages {
                mean: tensor(next()),
                var: tensor(next()),
                momentum,
                unbiased,
            },
        }
    }

    fn backward(
        dy: Tensor<Fusion<Inner<R, F, I, BT>>, 4>,
        x: Tensor<Fusion<Inner<R, F, I, BT>>, 4>,
        relu_output: Option<Tensor<Fusion<Inner<R, F, I, BT>>, 4>>,
        gamma: Tensor<Fusion<Inner<R, F, I, BT>>, 1>,
        mean: Tensor<Fusion<Inner<R, F, I, BT>>, 2>,
        inv_std: Tensor<Fusion<Inner<R, F, I, BT>>, 2>,
        groups: usize,
        residual: bool,
    ) -> Grads<Fusion<Inner<R, F, I, BT>>> {
        let dtype = x.dtype();
        if [dy.dtype(), gamma.dtype(), mean.dtype(), inv_std.dtype()] != [dtype; 4]
            || relu_output.as_ref().is_some_and(|o| o.dtype() != dtype)
        {
            return Composed::backward(dy, x, relu_output, gamma, mean, inv_std, groups, residual);
        }
        let [n, c, h, w] = x.dims();
        let mut inputs = vec![
            dy.into_primitive().tensor(),
            x.into_primitive().tensor(),
            gamma.into_primitive().tensor(),
            mean.into_primitive().tensor(),
            inv_std.into_primitive().tensor(),
        ];
        inputs.extend(relu_output.map(|o| o.into_primitive().tensor()));
        let client = inputs[0].client.clone();
        let mut outputs = vec![
            output(&inputs[0], vec![n, c, h, w]),
            output(&inputs[0], vec![c]),
            output(&inputs[0], vec![c]),
        ];
        if residual {
            outputs.push(output(&inputs[0], vec![n, c, h, w]));
        }
        let streams = OperationStreams::with_inputs(&inputs);
        let desc = CustomOpIr::new(
            "curriculum_ssl_batch_norm_backward",
            &inputs.into_iter().map(|t| t.into_ir()).collect::<Vec<_>>(),
            &outputs,
        );
        let mut grads = client
            .register(
                streams,
                OperationIr::Custom(desc.clone()),
                BackwardOp::<R, F, I, BT> {
                    desc,
                    groups,
                    _backend: PhantomData,
                },
            )
            .into_iter();
        let mut next = || grads.next().expect("the outputs registered above");
        let (dx, dgamma, dbeta) = (tensor(next()), tensor(next()), tensor(next()));
        (dx, dgamma, dbeta, grads.next().map(tensor))
    }
}

#[cfg(test)]
mod tests {
    use super::device::{apply_chunks, part_chunks, MAX_PARTS};

    #[test]
    fn chunks_cover_the_rows_within_the_limits() {
        for rows in [1, 255, 256, 257, 2_048, 16_384, 16_385, 262_144, 6_422_528] {
            let (chunk, parts) = part_chunks(rows);
            assert!(parts <= MAX_PARTS && chunk * parts >= rows && chunk * (parts - 1) < rows);
            let (chunk, blocks) = apply_chunks(rows);
            assert!(blocks <= 32_768 && chunk * blocks >= rows && chunk * (blocks - 1) < rows);
        }
    }
}
