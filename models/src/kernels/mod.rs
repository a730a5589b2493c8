//! Kernels the backbones' layers call in place of burn's generic rules, where burn 0.21 has
//! none of its own or keeps more than it needs. Each file says what it computes and why.
//!
//! What a layer calls (`dispatch.rs`): [`conv2d`], [`batch_norm_train`], [`batch_norm_relu_train`], [`batch_norm_1d_train`], [`relu`], [`gelu()`], [`silu()`],
//! [`swap_middle_dims`], [`global_avg_pool`], [`softmax()`], [`log_softmax()`], [`layer_norm()`], [`add_layer_norm`], [`matmul()`] and
//! [`linear`]; the losses' [`mean_cosine`], [`nt_xent`] and [`info_nce`]; and the parameter updates, [`sgd_momentum_step`] and [`moving_average`]. Each sends the call by the
//! backend's type to the kernels it has, and any other backend, element type or layer keeps
//! burn's own operation, with the same values and gradients:
//!
//! | call | `Flex` / `Autodiff<Flex>` (`f32`, `f64`) | `Autodiff<Wgpu>`, `Autodiff<Cuda>` |
//! |---|---|---|
//! | [`conv2d`] | [`conv`]: [`winograd`]'s F(4×4, 3×3) or [`im2col`], forward and backward; a depthwise layer [`depthwise`]'s | burn's |
//! | [`batch_norm_train`] | the slice kernels of [`batch_norm`](mod@batch_norm), under autodiff | [`batch_norm_op`] with the `#[cube]` kernels of `batch_norm_cube.rs` |
//! | [`batch_norm_relu_train`] (a batch norm, a residual added, a ReLU) | the caller's [`batch_norm_train`], `add` and [`relu`] | the same operation and kernels as [`batch_norm_train`], the residual and the ReLU in their last pass forward and their passes backward |
//! | [`batch_norm_1d_train`] (an MLP head's `[N, C]`, its ReLU inside) | `Err`: the caller's composed form | the same operation and kernels on `[N, C, 1, 1]` |
//! | [`relu`] | [`relu_op`](mod@relu_op) (under autodiff) | [`relu_op`](mod@relu_op) |
//! | [`gelu()`] | the slice kernels of [`gelu`](mod@gelu) | [`gelu_composed`] |
//! | [`silu()`] | the slice kernels of [`silu`](mod@silu) | burn's |
//! | [`swap_middle_dims`] | [`layout`]'s copy | burn's `swap_dims` |
//! | [`global_avg_pool`] | `Err`: the caller's two means | [`pool_op`]'s operation (under autodiff) |
//! | [`softmax()`] (last axis) | Flex's fused forward, [`softmax`](mod@softmax)'s backward (under autodiff) | burn's |
//! | [`log_softmax()`] (last axis) | the row kernels of [`log_softmax`](mod@log_softmax), forward and backward | the `#[cube]` kernels of `log_softmax_cube.rs` (under autodiff) |
//! | [`layer_norm()`] | Flex's fused forward, [`layer_norm`](mod@layer_norm)'s backward (under autodiff) | burn's |
//! | [`add_layer_norm`] (a residual add and the norm after it) | [`layer_norm`](mod@layer_norm)'s one pass for both forward, its backward (under autodiff) | burn's add and norm |
//! | [`matmul()`] (same leading dimensions), [`linear`] | [`matmul`](mod@matmul)'s products and column sums, forward and backward | burn's |
//! | [`mean_cosine`] (the negative cosine loss's mean cosine to stop-gradient targets) | `Err`: the caller's composed form | [`cosine_op`]'s operation (under autodiff) |
//! | [`nt_xent`] (SimCLR's loss over the stacked views), [`info_nce`] (MoCo's against a queue) | `Err`: the caller's composed form | [`contrastive_op`]'s operations (under autodiff) |
//! | [`sgd_momentum_step`] (an optimiser's step, on the inner backend) | the caller's tensor operations | the `#[cube]` kernel of `sgd_cube.rs` |
//! | [`sgd_momentum_step_all`] (a module's step) | `Err`: the caller's step of each | one operation of the kernel above on every parameter |
//! | [`moving_average`] (a momentum copy's update) | burn's | the `#[cube]` kernel of `moving_average_cube.rs` (also under autodiff) |
//! | [`moving_average_all`] (all of a momentum copy's updates) | `Err`: the caller's [`moving_average`] each | one operation of the kernel above on every pair |
//!
//! Underneath: the slices' shared arithmetic (`gemm.rs`: the element types ([`Real`]), scratch
//! buffers, the GEMM call; `sums.rs`: sums in f64 over eight lanes) and a convolution's sizes
//! (`geometry.rs`: [`ConvGeometry`]). The files on slices know nothing of burn; `flex.rs`
//! registers them as operations of burn's CPU backend; `batch_norm_cube.rs`,
//! `log_softmax_cube.rs`, `sgd_cube.rs` and `moving_average_cube.rs` hold `#[cube]` kernels
//! (cubecl: one source for wgpu and CUDA), run as custom operations of burn's fusion stream with
//! `cube_op.rs`'s types; `on_gpu.rs` holds the GPU backends' route
//! steps as plain functions, so that a crate training on the CPU does not compile the GPU stacks.

#[allow(unsafe_code)]
pub mod batch_norm;
// The `#[cube]` kernels' callers, the GPU routes of `on_gpu.rs`, are not compiled in this
// crate's unit tests (`on_gpu.rs` says why); the kernels' own unit tests are.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(test, allow(dead_code))]
mod batch_norm_cube;
pub mod batch_norm_op;
pub mod contrastive_op;
pub mod conv;
pub mod cosine_op;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(test, allow(dead_code))]
mod cube_op;
pub mod depthwise;
mod dispatch;
#[cfg(feature = "cpu")]
mod flex;
pub mod gelu;
#[allow(unsafe_code)]
mod gemm;
mod geometry;
pub mod im2col;
pub mod layer_norm;
pub mod layout;
#[allow(unsafe_code)]
pub mod log_softmax;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(test, allow(dead_code))]
mod log_softmax_cube;
#[allow(unsafe_code)]
pub mod matmul;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(test, allow(dead_code))]
mod moving_average_cube;
#[cfg(all(not(test), any(feature = "wgpu", feature = "cuda")))]
mod on_gpu;
pub mod pool_op;
pub mod relu_op;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(test, allow(dead_code))]
mod sgd_cube;
pub mod silu;
#[allow(unsafe_code)]
pub mod softmax;
mod sums;
pub mod winograd;

/// A float tensor's primitive (of any rank) on `B`, as a route of `dispatch.rs` moves it to the
/// GPU steps of `on_gpu.rs` (the lists of `moving_average_all` and `sgd_momentum_step_all`):
/// here, beside both, so that neither file imports the other for it.
pub(crate) struct Primitive<B: burn::prelude::Backend>(
    pub(crate) burn::tensor::ops::FloatTensor<B>,
);

pub use batch_norm_op::{RunningAverages, TrainingBatchNorm};
pub use dispatch::{
    add_layer_norm, batch_norm_1d_train, batch_norm_relu_train, batch_norm_train, conv2d, gelu,
    gelu_composed, global_avg_pool, info_nce, layer_norm, linear, log_softmax, matmul, mean_cosine,
    moving_average, moving_average_all, nt_xent, relu, runs_cpu_kernels, sgd_momentum_step,
    sgd_momentum_step_all, silu, softmax, swap_middle_dims, InfoNceRoute, SgdList, SgdSettings,
};
pub use gemm::Real;
pub use geometry::{covered_geometry, depthwise_geometry, ConvGeometry};
