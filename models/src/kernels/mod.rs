//! CPU kernels the backbones' layers call in place of burn's generic rules where burn 0.21's
//! CPU backend (`Flex`) has none of its own: the 2-D convolution's backward pass (and its
//! forward pass, so both use one memory layout; [`conv`], whose 3×3 stride-1 layers go by
//! Winograd's F(4×4, 3×3), [`winograd`]) and the training batch norm, fused
//! ([`batch_norm`]), the exact GELU ([`gelu`](mod@gelu)) and attention's swap of tokens and heads
//! ([`layout`]) — each file says what it computes and why. For the GPU backends, the training
//! batch norm as one autodiff operation in their own tensor operations ([`batch_norm_op`]). Under
//! autodiff on `Flex`, `Wgpu` and `Cuda`, a ReLU that keeps its output rather than its input for
//! the backward step ([`relu_op`](mod@relu_op), [`relu`]).
//!
//! [`conv2d`] is what a layer calls: on `Flex` and `Autodiff<Flex>` with `f32` or `f64`
//! tensors and a covered layer (one group, symmetric padding) it runs these kernels; on every
//! other backend, element type or layer it is `Conv2d::forward`, unchanged. [`batch_norm_train`]
//! likewise, outside a synchronised (data-parallel) batch norm: the slice kernels on
//! `Autodiff<Flex>`, [`batch_norm_op`] on `Autodiff<Wgpu>` and `Autodiff<Cuda>` (with this
//! crate's `wgpu` / `cuda` features), the caller's composed form elsewhere.
//!
//! Why a run-time type check rather than burn's backend-extension trait: the extension pattern
//! puts a bound (`B: ConvKernels`) on every generic function that reaches a convolution — every
//! backbone, method, task and hook of both crates — and every project that embeds this crate
//! would have to implement the trait for its own backend. Rust has no specialisation, so the
//! choice "Flex's kernel here, burn's op elsewhere" is made once, here, by comparing `B` with
//! the two CPU backend types (`TypeId`) and moving the tensors across by a checked downcast
//! (`Any`): no `unsafe`, no bound, and any other backend keeps burn's own operation.

pub mod batch_norm;
pub mod batch_norm_op;
pub mod conv;
#[cfg(feature = "cpu")]
mod flex;
pub mod gelu;
pub mod layout;
pub mod relu_op;
pub mod winograd;

use std::cell::RefCell;
use std::thread::LocalKey;

use burn::nn::conv::Conv2d;
use burn::nn::PaddingConfig2d;
use burn::prelude::*;

pub use conv::ConvGeometry;

/// A fixed pseudo-random sequence for the kernels' unit tests (an LCG), values in [−1, 1).
#[cfg(test)]
fn test_values(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Element types the kernels run in: `f32` and `f64` (the `gemm` crate dispatches on the type).
pub trait Real:
    Copy
    + Send
    + Sync
    + 'static
    + Default
    + PartialEq
    + core::ops::AddAssign
    + core::ops::Add<Output = Self>
    + core::ops::Sub<Output = Self>
    + core::ops::Mul<Output = Self>
{
    /// The multiplicative identity.
    const ONE: Self;
    /// This thread's scratch buffer of this type (`conv::with_scratch`).
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self>>>;
    /// The value in f64 (exact).
    fn to_f64(self) -> f64;
    /// The nearest value to `v`.
    fn from_f64(v: f64) -> Self;
}
impl Real for f32 {
    const ONE: Self = 1.0;
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self>>> {
        &SCRATCH_F32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl Real for f64 {
    const ONE: Self = 1.0;
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self>>> {
        &SCRATCH_F64
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// A vector of `len` values computed plane by plane in parallel: `fill(i, plane)` writes the
/// entries of plane `i` (`plane` of them; the last may be shorter). What an output whose every
/// entry is computed needs, without the zeroing pass of `vec![0; len]` (a `memset` of the whole
/// output, about 1 % of a ResNet-18 training step for each of the outputs that use this).
///
/// # Safety
/// `fill` must write every entry of the plane it is given (`MaybeUninit::write`); the vector's
/// entries are read as initialised afterwards.
pub(crate) unsafe fn written_planes<T: Real>(
    len: usize,
    plane: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<T>]) + Sync + Send,
) -> Vec<T> {
    use rayon::prelude::*;
    let mut out: Vec<T> = Vec::with_capacity(len);
    out.spare_capacity_mut()[..len]
        .par_chunks_mut(plane.max(1))
        .enumerate()
        .for_each(|(i, chunk)| fill(i, chunk));
    // SAFETY: the capacity is `len`, and the caller's `fill` wrote all `len` entries (above).
    unsafe { out.set_len(len) };
    out
}

thread_local! {
    static SCRATCH_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SCRATCH_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// `value` as a `U` when `T` is `U` (a checked downcast), else `value` back.
#[cfg(any(feature = "cpu", feature = "wgpu", feature = "cuda"))]
fn same_type<T: 'static, U: 'static>(value: T) -> Result<U, T> {
    use std::any::Any;
    let mut slot = Some(value);
    match (&mut slot as &mut dyn Any).downcast_mut::<Option<U>>() {
        Some(u) => Ok(u.take().expect("filled above")),
        None => Err(slot.expect("untouched by a failed downcast")),
    }
}

/// `value` as a `U`, where the caller has checked that `T` is `U`.
#[cfg(any(feature = "cpu", feature = "wgpu", feature = "cuda"))]
fn cast<T: 'static, U: 'static>(value: T, why: &str) -> U {
    match same_type(value) {
        Ok(u) => u,
        Err(_) => panic!("kernels: a type check failed after it passed: {why}"),
    }
}

/// The sizes of `conv` applied to an input of shape `x_shape` when the kernels cover the layer
/// (one group, no padding or symmetric explicit padding, channels that match, a kernel that
/// fits), else `None`.
pub fn covered_geometry<B: Backend>(conv: &Conv2d<B>, x_shape: [usize; 4]) -> Option<ConvGeometry> {
    let [batch, in_channels, h, w] = x_shape;
    let [out_channels, weight_in, kernel_h, kernel_w] = conv.weight.dims();
    let padding = match conv.padding {
        PaddingConfig2d::Valid => [0, 0],
        PaddingConfig2d::Explicit(top, left, bottom, right) if top == bottom && left == right => {
            [top, left]
        }
        _ => return None,
    };
    if conv.groups != 1 || weight_in != in_channels || batch == 0 {
        return None;
    }
    let g = ConvGeometry {
        batch,
        in_channels,
        out_channels,
        in_size: [h, w],
        kernel: [kernel_h, kernel_w],
        stride: conv.stride,
        padding,
        dilation: conv.dilation,
    };
    g.out_size().filter(|[oh, ow]| oh * ow > 0).map(|_| g)
}

/// ReLU of a tensor: under autodiff on `Flex`, `Wgpu` or `Cuda` (with this crate's `cpu`,
/// `wgpu` / `cuda` features) [`relu_op`](relu_op::relu_op), which keeps the output for the
/// backward step where burn's rule keeps the input (one activation fewer per ReLU whose output
/// is kept anyway, as a convolution's input is); elsewhere `burn::tensor::activation::relu`.
/// The same values and gradients either way.
pub fn relu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    let x = match relu_on::<burn::backend::Flex, B, D>(x) {
        Ok(y) => return y,
        Err(x) => x,
    };
    #[cfg(feature = "wgpu")]
    let x = match relu_on::<burn::backend::Wgpu, B, D>(x) {
        Ok(y) => return y,
        Err(x) => x,
    };
    #[cfg(feature = "cuda")]
    let x = match relu_on::<burn::backend::Cuda, B, D>(x) {
        Ok(y) => return y,
        Err(x) => x,
    };
    burn::tensor::activation::relu(x)
}

/// [`relu_op::relu_op`] when `B` is `Autodiff<I>`, else `Err(x)`.
#[cfg(any(feature = "cpu", feature = "wgpu", feature = "cuda"))]
fn relu_on<I: Backend, B: Backend, const D: usize>(
    x: Tensor<B, D>,
) -> Result<Tensor<B, D>, Tensor<B, D>> {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::Autodiff;
    let x: Tensor<Autodiff<I, NoCheckpointing>, D> = same_type(x)?;
    Ok(cast(relu_op::relu_op(x), "B is Autodiff<I>"))
}

/// Whether [`conv2d`] runs this module's kernels for `conv` on `x` (the backend is `Flex` or
/// `Autodiff<Flex>`, the element type `f32` or `f64`, the layer covered by
/// [`covered_geometry`]) rather than `Conv2d::forward`.
pub fn runs_cpu_kernels<B: Backend>(conv: &Conv2d<B>, x: &Tensor<B, 4>) -> bool {
    #[cfg(feature = "cpu")]
    {
        use burn::backend::{Autodiff, Flex};
        use std::any::TypeId;
        let backend = TypeId::of::<B>();
        let dtype = x.dtype();
        (backend == TypeId::of::<Flex>() || backend == TypeId::of::<Autodiff<Flex>>())
            && flex::supported(dtype)
            && conv.weight.val().dtype() == dtype
            && covered_geometry(conv, x.dims()).is_some()
    }
    #[cfg(not(feature = "cpu"))]
    {
        let _ = (conv, x);
        false
    }
}

/// `conv.forward(x)`: through this module's CPU kernels where [`runs_cpu_kernels`] says so,
/// else burn's own operation. The same values up to the order of the sums, and the same
/// gradients for the input, the weight and the bias.
///
/// # Shapes
/// - `x`: `[batch, in_channels, h, w]` → `[batch, out_channels, h_out, w_out]`
pub fn conv2d<B: Backend>(conv: &Conv2d<B>, x: Tensor<B, 4>) -> Tensor<B, 4> {
    #[cfg(feature = "cpu")]
    if runs_cpu_kernels(conv, &x) {
        let g = covered_geometry(conv, x.dims()).expect("checked by runs_cpu_kernels");
        let y = run_on_flex(x, conv.weight.val(), g);
        return match &conv.bias {
            Some(bias) => add_channel_bias(y, bias.val()),
            None => y,
        };
    }
    conv.forward(x)
}

/// The kernels on `B`, which is `Flex` or `Autodiff<Flex>` (checked by the caller).
#[cfg(feature = "cpu")]
fn run_on_flex<B: Backend>(x: Tensor<B, 4>, weight: Tensor<B, 4>, g: ConvGeometry) -> Tensor<B, 4> {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorPrimitive;
    type Ad = Autodiff<Flex>;
    let x = match same_type::<Tensor<B, 4>, Tensor<Ad, 4>>(x) {
        Ok(x) => {
            let w: Tensor<Ad, 4> = cast(weight, "the weight is on x's backend");
            let y = flex::conv2d_autodiff::<NoCheckpointing>(
                x.into_primitive().tensor(),
                w.into_primitive().tensor(),
                g,
            );
            let y = Tensor::<Ad, 4>::from_primitive(TensorPrimitive::Float(y));
            return cast(y, "B is Autodiff<Flex>");
        }
        Err(x) => x,
    };
    let x: Tensor<Flex, 4> = cast(x, "B is Flex when not Autodiff<Flex>");
    let w: Tensor<Flex, 4> = cast(weight, "the weight is on x's backend");
    let y = flex::forward(
        &x.into_primitive().tensor(),
        &w.into_primitive().tensor(),
        &g,
    );
    cast(
        Tensor::<Flex, 4>::from_primitive(TensorPrimitive::Float(y)),
        "B is Flex",
    )
}

/// `y + bias` per channel, the bias repeated per image (`[n, c, 1]`), the operand Flex
/// broadcasts with its vectorised loop (see `layers::BatchNorm2d`).
#[cfg(feature = "cpu")]
fn add_channel_bias<B: Backend>(y: Tensor<B, 4>, bias: Tensor<B, 1>) -> Tensor<B, 4> {
    let [n, c, h, w] = y.dims();
    let bias = bias.reshape([1, c, 1]);
    let bias = if n == 1 { bias } else { bias.repeat_dim(0, n) };
    y.reshape([n, c, h * w]).add(bias).reshape([n, c, h, w])
}

/// The exact GELU `x·Φ(x)`: through [`gelu`](mod@gelu)'s kernels on `Flex` and `Autodiff<Flex>` with
/// `f32` or `f64` values, else [`gelu_composed`] (the form whose gradient is exact on
/// every backend). The same values within the kernel's `erf` error in f32 (3.9e-7), to
/// rounding in f64, and the same gradient.
pub fn gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    if flex::supported(x.dtype()) {
        use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
        use burn::backend::{Autodiff, Flex};
        use burn::tensor::TensorPrimitive;
        type Ad = Autodiff<Flex>;
        let x = match same_type::<Tensor<B, D>, Tensor<Ad, D>>(x) {
            Ok(x) => {
                let y = flex::gelu_autodiff::<NoCheckpointing>(x.into_primitive().tensor());
                let y = Tensor::<Ad, D>::from_primitive(TensorPrimitive::Float(y));
                return cast(y, "B is Autodiff<Flex>");
            }
            Err(x) => x,
        };
        match same_type::<Tensor<B, D>, Tensor<Flex, D>>(x) {
            Ok(x) => {
                let y = flex::gelu_forward(&x.into_primitive().tensor());
                let y = Tensor::<Flex, D>::from_primitive(TensorPrimitive::Float(y));
                return cast(y, "B is Flex");
            }
            Err(x) => return gelu_composed(x),
        }
    }
    gelu_composed(x)
}

/// `x.swap_dims(1, 2)` laid out contiguously, `[a, b, c, d] → [a, c, b, d]`: through
/// [`layout`]'s copy on `Flex` and `Autodiff<Flex>` with `f32` or `f64` values (the gradient
/// swapped back the same way), elsewhere burn's `swap_dims` (a view each backend copies when
/// it must). The same values and gradients.
pub fn swap_middle_dims<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    #[cfg(feature = "cpu")]
    if flex::supported(x.dtype()) {
        use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
        use burn::backend::{Autodiff, Flex};
        use burn::tensor::TensorPrimitive;
        type Ad = Autodiff<Flex>;
        let x = match same_type::<Tensor<B, 4>, Tensor<Ad, 4>>(x) {
            Ok(x) => {
                let y = flex::swap_middle_autodiff::<NoCheckpointing>(x.into_primitive().tensor());
                let y = Tensor::<Ad, 4>::from_primitive(TensorPrimitive::Float(y));
                return cast(y, "B is Autodiff<Flex>");
            }
            Err(x) => x,
        };
        match same_type::<Tensor<B, 4>, Tensor<Flex, 4>>(x) {
            Ok(x) => {
                let y = flex::swap_middle_forward(&x.into_primitive().tensor());
                let y = Tensor::<Flex, 4>::from_primitive(TensorPrimitive::Float(y));
                return cast(y, "B is Flex");
            }
            Err(x) => return x.swap_dims(1, 2),
        }
    }
    x.swap_dims(1, 2)
}

/// The exact GELU composed from `erf`, so that its gradient is exact on every backend.
///
/// Hand-written because burn 0.21's `activation::gelu` pairs an exact forward with the
/// derivative of the tanh approximation (`burn-backend`'s default `gelu_backward`, which
/// `NdArray` and the cubecl backends — wgpu, CUDA — use; only Flex overrides it with the exact
/// one): a ViT's gradients then differ from PyTorch's in the fourth digit
/// (`tests/methods.rs`, `mae_matches_lightly_in_f64`; `tests/gradients.rs`, the ViT block's).
/// `erf`'s backward is exact everywhere.
pub fn gelu_composed<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    // A product, not `div_scalar(√2)`: burn-autodiff 0.21 takes a scalar division's
    // derivative in f32.
    x.clone() * (x.mul_scalar(core::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5
}

/// What [`batch_norm_train`] computes.
#[derive(Debug)]
pub struct TrainingBatchNorm<B: Backend> {
    /// `γ·x̂ + β`, shaped as the input.
    pub output: Tensor<B, 4>,
    /// Per-channel batch mean, `[c]`, untracked.
    pub mean: Tensor<B, 1>,
    /// Per-channel biased batch variance, `[c]`, untracked.
    pub var: Tensor<B, 1>,
}

/// Batch norm in training as one autodiff operation with a backward step of its own, outside
/// a synchronised (data-parallel) batch norm ([`crate::replica_stats`]): on `Autodiff<Flex>`
/// with `f32` / `f64` tensors through the slice kernels ([`batch_norm`]), on the wgpu and CUDA
/// backends (`Autodiff<Wgpu>`, `Autodiff<Cuda>`, the models crate's `wgpu` / `cuda` features)
/// through their own tensor operations ([`batch_norm_op`]): `Ok` with the output and the
/// per-channel batch moments; else `Err(x)`, for the caller's composed path.
///
/// # Shapes
/// - `x`: `[n, c, h, w]`, `gamma` and `beta`: `[c]`
pub fn batch_norm_train<B: Backend>(
    x: Tensor<B, 4>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Result<TrainingBatchNorm<B>, Tensor<B, 4>> {
    if crate::replica_stats::synchronised::<B>() {
        return Err(x);
    }
    #[cfg(feature = "cpu")]
    let x = match flex_batch_norm(x, gamma.clone(), beta.clone(), epsilon) {
        Ok(done) => return Ok(done),
        Err(x) => x,
    };
    #[cfg(feature = "wgpu")]
    let x = match batch_norm_on::<burn::backend::Wgpu, B>(x, gamma.clone(), beta.clone(), epsilon) {
        Ok(done) => return Ok(done),
        Err(x) => x,
    };
    #[cfg(feature = "cuda")]
    let x = match batch_norm_on::<burn::backend::Cuda, B>(x, gamma.clone(), beta.clone(), epsilon) {
        Ok(done) => return Ok(done),
        Err(x) => x,
    };
    let _ = (gamma, beta, epsilon);
    Err(x)
}

/// [`batch_norm_op::batch_norm_train_op`] when `B` is `Autodiff<I>`, else `Err(x)`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn batch_norm_on<I: Backend, B: Backend>(
    x: Tensor<B, 4>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Result<TrainingBatchNorm<B>, Tensor<B, 4>> {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::Autodiff;
    type Ad<I> = Autodiff<I, NoCheckpointing>;
    let x: Tensor<Ad<I>, 4> = same_type(x)?;
    let gamma: Tensor<Ad<I>, 1> = cast(gamma, "γ is on x's backend");
    let beta: Tensor<Ad<I>, 1> = cast(beta, "β is on x's backend");
    let out = batch_norm_op::batch_norm_train_op(x, gamma, beta, epsilon);
    Ok(TrainingBatchNorm {
        output: cast(out.output, "B is Autodiff<I>"),
        mean: cast(out.mean, "B is Autodiff<I>"),
        var: cast(out.var, "B is Autodiff<I>"),
    })
}

/// The slice kernels of [`batch_norm`] when `B` is `Autodiff<Flex>` and the tensors are `f32` /
/// `f64`, else `Err(x)`.
#[cfg(feature = "cpu")]
fn flex_batch_norm<B: Backend>(
    x: Tensor<B, 4>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Result<TrainingBatchNorm<B>, Tensor<B, 4>> {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorPrimitive;
    type Ad = Autodiff<Flex>;
    let dtype = x.dtype();
    if !flex::supported(dtype) || gamma.dtype() != dtype || beta.dtype() != dtype {
        return Err(x);
    }
    let x: Tensor<Ad, 4> = same_type(x)?;
    let gamma: Tensor<Ad, 1> = cast(gamma, "γ is on x's backend");
    let beta: Tensor<Ad, 1> = cast(beta, "β is on x's backend");
    let device = x.device();
    let (y, mean, var) = flex::batch_norm_autodiff::<NoCheckpointing>(
        x.into_primitive().tensor(),
        gamma.into_primitive().tensor(),
        beta.into_primitive().tensor(),
        epsilon,
    );
    let y = Tensor::<Ad, 4>::from_primitive(TensorPrimitive::Float(y));
    // The moments in the parameters' type, as the running averages are kept.
    let moment = |values: Vec<f64>| {
        let len = values.len();
        Tensor::<Ad, 1>::from_data(TensorData::new(values, [len]), (&device, dtype))
    };
    Ok(TrainingBatchNorm {
        output: cast(y, "B is Autodiff<Flex>"),
        mean: cast(moment(mean), "B is Autodiff<Flex>"),
        var: cast(moment(var), "B is Autodiff<Flex>"),
    })
}
