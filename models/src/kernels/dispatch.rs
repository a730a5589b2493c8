//! What a layer calls — [`conv2d`], [`batch_norm_train`], [`relu`], [`gelu`],
//! [`swap_middle_dims`], [`softmax`], [`log_softmax`], [`layer_norm`], [`add_layer_norm`], [`matmul`], [`linear`] — and the one mechanism that sends each call to the kernels its backend
//! has: a [`Route`] that tries the backends in turn by their type and ends in burn's own
//! operation.
//!
//! Why a run-time type check rather than burn's backend-extension trait: the extension pattern
//! puts a bound (`B: ConvKernels`) on every generic function that reaches a convolution — every
//! backbone, method, task and hook of both crates — and every project that embeds this crate
//! would have to implement the trait for its own backend. Rust has no specialisation, so the
//! choice "Flex's kernel here, burn's op elsewhere" is made here, by comparing `B` with the
//! backend types this crate has kernels for (`TypeId`) and moving the tensors across by a
//! checked downcast (`Any`): no `unsafe`, no bound, and any other backend keeps burn's own
//! operation.

#[cfg(any(feature = "cpu", feature = "wgpu", feature = "cuda"))]
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::nn::conv::Conv2d;
use burn::prelude::*;

use super::batch_norm_op;
#[cfg(feature = "cpu")]
use super::flex;
#[cfg(feature = "cpu")]
use super::geometry::{covered_geometry, depthwise_geometry, ConvGeometry};
use super::Primitive;
use batch_norm_op::{RunningAverages, TrainingBatchNorm};

/// `value` as a `U` when `T` is `U` (a checked downcast), else `value` back.
#[cfg_attr(
    not(any(feature = "cpu", feature = "wgpu", feature = "cuda")),
    allow(dead_code)
)]
fn same_type<T: 'static, U: 'static>(value: T) -> Result<U, T> {
    use std::any::Any;
    let mut slot = Some(value);
    match (&mut slot as &mut dyn Any).downcast_mut::<Option<U>>() {
        Some(u) => Ok(u.take().expect("filled above")),
        None => Err(slot.expect("untouched by a failed downcast")),
    }
}

/// Values whose type names a backend — tensors, tuples of them, plain numbers — and the same
/// values' type on another backend `C`: what a [`Route`] moves across when `C` is the caller's
/// backend.
pub(crate) trait OnBackend: Sized + 'static {
    /// The same values with `C` as their backend.
    type On<C: Backend>: OnBackend;
}

impl<B: Backend, const D: usize> OnBackend for Tensor<B, D> {
    type On<C: Backend> = Tensor<C, D>;
}

impl OnBackend for f64 {
    type On<C: Backend> = f64;
}

impl<B: Backend> OnBackend for TrainingBatchNorm<B> {
    type On<C: Backend> = TrainingBatchNorm<C>;
}

impl<B: Backend> OnBackend for RunningAverages<B> {
    type On<C: Backend> = RunningAverages<C>;
}

impl<B: Backend> OnBackend for Primitive<B> {
    type On<C: Backend> = Primitive<C>;
}

impl<X: OnBackend> OnBackend for Vec<X> {
    type On<C: Backend> = Vec<X::On<C>>;
}

impl<X: OnBackend> OnBackend for Option<X> {
    type On<C: Backend> = Option<X::On<C>>;
}

impl<X: OnBackend, Y: OnBackend> OnBackend for (X, Y) {
    type On<C: Backend> = (X::On<C>, Y::On<C>);
}

impl<X: OnBackend, Y: OnBackend, Z: OnBackend> OnBackend for (X, Y, Z) {
    type On<C: Backend> = (X::On<C>, Y::On<C>, Z::On<C>);
}

impl<W: OnBackend, X: OnBackend, Y: OnBackend, Z: OnBackend> OnBackend for (W, X, Y, Z) {
    type On<C: Backend> = (W::On<C>, X::On<C>, Y::On<C>, Z::On<C>);
}

/// A call on the caller's backend, tried against backend types in turn: [`Route::on`] runs its
/// function when the caller's backend is that type (the input moved to it, the output moved
/// back), the first that matches wins, and [`Route::or`] ends the route with the operation
/// every backend has.
pub(crate) struct Route<In, Out> {
    state: Result<Out, In>,
}

#[cfg_attr(
    not(any(feature = "cpu", feature = "wgpu", feature = "cuda")),
    allow(dead_code)
)]
impl<In: OnBackend, Out: OnBackend> Route<In, Out> {
    /// A call not yet taken.
    pub(crate) fn new(input: In) -> Self {
        Self { state: Err(input) }
    }

    /// `f` on the input when the caller's backend is `C` and no earlier step took the call.
    pub(crate) fn on<C: Backend>(self, f: impl FnOnce(In::On<C>) -> Out::On<C>) -> Self {
        self.on_if::<C>(true, f)
    }

    /// [`Route::on`] where `condition` holds too (an element type or a layer the kernels
    /// cover).
    pub(crate) fn on_if<C: Backend>(
        self,
        condition: bool,
        f: impl FnOnce(In::On<C>) -> Out::On<C>,
    ) -> Self {
        let state = match self.state {
            Err(input) if condition => match same_type::<In, In::On<C>>(input) {
                Ok(input) => match same_type::<Out::On<C>, Out>(f(input)) {
                    Ok(out) => Ok(out),
                    Err(_) => unreachable!("the output's backend is the input's"),
                },
                Err(input) => Err(input),
            },
            state => state,
        };
        Self { state }
    }

    /// `f` on the input, its type erased, when the caller's backend is `C` and no earlier step
    /// took the call; `f` hands the input back (`Err`) when it does not take it. Unlike
    /// [`Route::on`], nothing of `C`'s operations is compiled where the route is instantiated:
    /// `f` is a plain function compiled once in this crate (`on_gpu.rs` says why).
    #[cfg(all(not(test), any(feature = "wgpu", feature = "cuda")))]
    pub(crate) fn on_erased<C: Backend>(
        self,
        f: impl FnOnce(super::on_gpu::Erased) -> Result<super::on_gpu::Erased, super::on_gpu::Erased>,
    ) -> Self {
        use std::any::TypeId;
        let state = match self.state {
            Err(input) if TypeId::of::<In>() == TypeId::of::<In::On<C>>() => {
                match f(Box::new(input)) {
                    Ok(out) => Ok(*out
                        .downcast::<Out>()
                        .unwrap_or_else(|_| unreachable!("the output's backend is the input's"))),
                    Err(input) => Err(*input
                        .downcast::<In>()
                        .unwrap_or_else(|_| unreachable!("a step hands its input back"))),
                }
            }
            state => state,
        };
        Self { state }
    }

    /// The output, or the input when no step took the call.
    pub(crate) fn result(self) -> Result<Out, In> {
        self.state
    }

    /// The output, or `fallback` on the input when no step took the call.
    pub(crate) fn or(self, fallback: impl FnOnce(In) -> Out) -> Out {
        self.state.unwrap_or_else(fallback)
    }
}

/// `Autodiff<I>` as the kernels' autodiff operations take it (no checkpointing: burn's default).
#[cfg(any(feature = "cpu", feature = "wgpu", feature = "cuda"))]
type Ad<I> = burn::backend::Autodiff<I, NoCheckpointing>;

/// The primitive of a float tensor, for the kernels that work on burn's primitives.
#[cfg(feature = "cpu")]
fn primitive<B: Backend, const D: usize>(x: Tensor<B, D>) -> burn::tensor::ops::FloatTensor<B> {
    x.into_primitive().tensor()
}

/// A float tensor of a primitive.
#[cfg(feature = "cpu")]
fn float<B: Backend, const D: usize>(x: burn::tensor::ops::FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(x))
}

/// ReLU of a tensor: under autodiff on `Flex`, `Wgpu` or `Cuda` (with this crate's `cpu`,
/// `wgpu` / `cuda` features) [`relu_op`](super::relu_op::relu_op), which keeps the output for the
/// backward step where burn's rule keeps the input (one activation fewer per ReLU whose output
/// is kept anyway, as a convolution's input is); elsewhere `burn::tensor::activation::relu`.
/// The same values and gradients either way.
pub fn relu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let route = Route::new(x);
    #[cfg(feature = "cpu")]
    let route = route.on::<Ad<burn::backend::Flex>>(super::relu_op::relu_op);
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<Ad<burn::backend::Wgpu>>(super::on_gpu::wgpu::relu);
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<Ad<burn::backend::Cuda>>(super::on_gpu::cuda::relu);
    route.or(burn::tensor::activation::relu)
}

/// The hyperparameters of one SGD step with momentum, as PyTorch's `torch.optim.SGD` takes
/// them (in f64; the kernel computes in f32).
#[derive(Debug, Clone, Copy)]
pub struct SgdSettings {
    /// Learning rate `lr`.
    pub lr: f64,
    /// Momentum `μ` (> 0: without momentum there is no buffer to keep).
    pub momentum: f64,
    /// L2 penalty `wd` added to the gradient (0: none).
    pub weight_decay: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
}

/// PyTorch's SGD step with momentum on one parameter `θ` with gradient `g` and momentum buffer
/// `v` (`None` before the first step): `g ← g + wd·θ` (when `wd > 0`), `v ← μ·v + g` (`v = g`
/// at the first step), `θ ← θ − lr·(Nesterov ? g + μ·v : v)`. On the wgpu and CUDA backends
/// (the inner backends an optimiser steps on, with this crate's `wgpu` / `cuda` features) one
/// operation of burn's fusion stream and one `#[cube]` kernel (`sgd_cube.rs`, for operands of
/// one element type): `Ok((θ, v))`; elsewhere `Err` with the inputs, for the caller's tensor
/// operations (the same arithmetic: burn's fusion merges them into one kernel on a GPU, but
/// records each).
///
/// # Shapes
/// - `param`, `grad`, `velocity`: the parameter's (rank 1 to 5)
#[allow(clippy::type_complexity)]
pub fn sgd_momentum_step<B: Backend, const D: usize>(
    param: Tensor<B, D>,
    grad: Tensor<B, D>,
    velocity: Option<Tensor<B, D>>,
    settings: SgdSettings,
) -> Result<(Tensor<B, D>, Tensor<B, D>), (Tensor<B, D>, Tensor<B, D>, Option<Tensor<B, D>>)> {
    let route = Route::new((param, grad, velocity));
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<burn::backend::Wgpu>(|input| {
        super::on_gpu::wgpu::sgd_momentum_step(input, settings)
    });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<burn::backend::Cuda>(|input| {
        super::on_gpu::cuda::sgd_momentum_step(input, settings)
    });
    let _ = settings;
    route.result()
}

/// A list of parameters to step: each `(θ, g, v)` as burn's primitives (of any rank), `v`
/// `None` before the first step.
pub type SgdList<B> = Vec<(
    burn::tensor::ops::FloatTensor<B>,
    burn::tensor::ops::FloatTensor<B>,
    Option<burn::tensor::ops::FloatTensor<B>>,
)>;

/// [`sgd_momentum_step`] on every parameter of a list (a module's) as ONE operation of burn's
/// fusion stream and one `#[cube]` kernel launch for up to 64 parameters on the wgpu and CUDA
/// backends (`sgd_cube.rs`): `Ok` with each new `(θ, v)` in the list's order. Elsewhere, or when
/// the list mixes element types or devices, a parameter's three shapes differ, or some
/// parameters have a buffer and others none, `Err` with the list, for [`sgd_momentum_step`] or
/// the caller's tensor operations on each.
///
/// # Shapes
/// - each `θ`, `g`, `v`: one shape, of any rank; each new `θ` and `v`: the same
#[allow(clippy::type_complexity)]
pub fn sgd_momentum_step_all<B: Backend>(
    list: SgdList<B>,
    settings: SgdSettings,
) -> Result<
    Vec<(
        burn::tensor::ops::FloatTensor<B>,
        burn::tensor::ops::FloatTensor<B>,
    )>,
    SgdList<B>,
> {
    let list: Vec<_> = list
        .into_iter()
        .map(|(p, g, v)| (Primitive::<B>(p), Primitive::<B>(g), v.map(Primitive::<B>)))
        .collect();
    let route: Route<_, Vec<(Primitive<B>, Primitive<B>)>> = Route::new(list);
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<burn::backend::Wgpu>(|input| {
        super::on_gpu::wgpu::sgd_momentum_step_all(input, settings)
    });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<burn::backend::Cuda>(|input| {
        super::on_gpu::cuda::sgd_momentum_step_all(input, settings)
    });
    let _ = settings;
    match route.result() {
        Ok(stepped) => Ok(stepped.into_iter().map(|(p, v)| (p.0, v.0)).collect()),
        Err(list) => Err(list
            .into_iter()
            .map(|(p, g, v)| (p.0, g.0, v.map(|v| v.0)))
            .collect()),
    }
}

/// The exponential moving average of a momentum copy's parameter, `m·target + (1 − m)·online`
/// (MoCo's key encoder, BYOL's target): on the wgpu and CUDA backends, under autodiff or not,
/// one operation of burn's fusion stream and one `#[cube]` kernel (`moving_average_cube.rs`,
/// for operands of one element type; the result carries no gradient); elsewhere burn's
/// operations, detached. The same arithmetic either way.
///
/// # Shapes
/// - `target`, `online`, output: the parameter's (rank 1 to 5)
pub fn moving_average<B: Backend, const D: usize>(
    target: Tensor<B, D>,
    online: Tensor<B, D>,
    momentum: f64,
) -> Tensor<B, D> {
    let route = Route::new((target, online));
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route
        .on_erased::<burn::backend::Wgpu>(|input| {
            super::on_gpu::wgpu::moving_average(input, momentum)
        })
        .on_erased::<Ad<burn::backend::Wgpu>>(|input| {
            super::on_gpu::wgpu::moving_average_autodiff(input, momentum)
        });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route
        .on_erased::<burn::backend::Cuda>(|input| {
            super::on_gpu::cuda::moving_average(input, momentum)
        })
        .on_erased::<Ad<burn::backend::Cuda>>(|input| {
            super::on_gpu::cuda::moving_average_autodiff(input, momentum)
        });
    route.or(|(target, online)| (target * momentum + online * (1.0 - momentum)).detach())
}

/// [`moving_average`] of every `(target, online)` pair of a momentum copy's parameters (burn's
/// primitives, of any rank) as ONE operation of burn's fusion stream and one `#[cube]` kernel
/// launch for up to 64 pairs (as many as the device's bindings allow) on the wgpu and CUDA
/// backends, under autodiff or not (`moving_average_cube.rs`): `Ok` with the averages in the
/// pairs' order, untracked. Elsewhere, or when the list mixes element types or devices or a
/// pair's two shapes differ, `Err` with the pairs, for [`moving_average`] on each.
///
/// # Shapes
/// - each pair's `target` and `online`: one shape, of any rank; its average: the same
#[allow(clippy::type_complexity)]
pub fn moving_average_all<B: Backend>(
    pairs: Vec<(
        burn::tensor::ops::FloatTensor<B>,
        burn::tensor::ops::FloatTensor<B>,
    )>,
    momentum: f64,
) -> Result<
    Vec<burn::tensor::ops::FloatTensor<B>>,
    Vec<(
        burn::tensor::ops::FloatTensor<B>,
        burn::tensor::ops::FloatTensor<B>,
    )>,
> {
    let pairs: Vec<_> = pairs
        .into_iter()
        .map(|(t, o)| (Primitive::<B>(t), Primitive::<B>(o)))
        .collect();
    let route: Route<_, Vec<Primitive<B>>> = Route::new(pairs);
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route
        .on_erased::<burn::backend::Wgpu>(|input| {
            super::on_gpu::wgpu::moving_average_all(input, momentum)
        })
        .on_erased::<Ad<burn::backend::Wgpu>>(|input| {
            super::on_gpu::wgpu::moving_average_all_autodiff(input, momentum)
        });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route
        .on_erased::<burn::backend::Cuda>(|input| {
            super::on_gpu::cuda::moving_average_all(input, momentum)
        })
        .on_erased::<Ad<burn::backend::Cuda>>(|input| {
            super::on_gpu::cuda::moving_average_all_autodiff(input, momentum)
        });
    let _ = momentum;
    match route.result() {
        Ok(averages) => Ok(averages.into_iter().map(|a| a.0).collect()),
        Err(pairs) => Err(pairs.into_iter().map(|(t, o)| (t.0, o.0)).collect()),
    }
}

/// Whether [`conv2d`] runs this module's kernels for `conv` on `x` (the backend is `Flex` or
/// `Autodiff<Flex>`, the element type `f32` or `f64`, the layer covered by
/// [`covered_geometry`](super::covered_geometry) or, depthwise, by
/// [`depthwise_geometry`](super::depthwise_geometry)) rather than `Conv2d::forward`.
pub fn runs_cpu_kernels<B: Backend>(conv: &Conv2d<B>, x: &Tensor<B, 4>) -> bool {
    #[cfg(feature = "cpu")]
    {
        cpu_kernels(conv, x).is_some()
    }
    #[cfg(not(feature = "cpu"))]
    {
        let _ = (conv, x);
        false
    }
}

/// The sizes and the kernels of `conv` on `x` where this module's CPU kernels run it: a
/// `Flex` or `Autodiff<Flex>` backend, `f32` or `f64` input and weight alike, and a layer of
/// one group ([`covered_geometry`]) or a depthwise one ([`depthwise_geometry`]).
#[cfg(feature = "cpu")]
fn cpu_kernels<B: Backend>(
    conv: &Conv2d<B>,
    x: &Tensor<B, 4>,
) -> Option<(ConvGeometry, flex::ConvKind)> {
    use burn::backend::Flex;
    use std::any::TypeId;
    let backend = TypeId::of::<B>();
    let dtype = x.dtype();
    let runs = (backend == TypeId::of::<Flex>() || backend == TypeId::of::<Ad<Flex>>())
        && flex::supported(dtype)
        && conv.weight.val().dtype() == dtype;
    if !runs {
        return None;
    }
    covered_geometry(conv, x.dims())
        .map(|g| (g, flex::ConvKind::Dense))
        .or_else(|| depthwise_geometry(conv, x.dims()).map(|g| (g, flex::ConvKind::Depthwise)))
}

/// `conv.forward(x)`: through this module's CPU kernels where [`runs_cpu_kernels`] says so,
/// else burn's own operation. The same values up to the order of the sums, and the same
/// gradients for the input, the weight and the bias.
///
/// # Shapes
/// - `x`: `[batch, in_channels, h, w]` → `[batch, out_channels, h_out, w_out]`
pub fn conv2d<B: Backend>(conv: &Conv2d<B>, x: Tensor<B, 4>) -> Tensor<B, 4> {
    #[cfg(feature = "cpu")]
    if let Some((g, kind)) = cpu_kernels(conv, &x) {
        use burn::backend::Flex;
        let y = Route::new((x, conv.weight.val()))
            .on::<Ad<Flex>>(|(x, w)| {
                float(flex::conv2d_autodiff::<NoCheckpointing>(
                    primitive(x),
                    primitive(w),
                    g,
                    kind,
                ))
            })
            .on::<Flex>(|(x, w)| float(flex::forward(&primitive(x), &primitive(w), &g, kind)))
            .result()
            .unwrap_or_else(|_| unreachable!("cpu_kernels checked the backend"));
        return match &conv.bias {
            Some(bias) => add_channel_bias(y, bias.val()),
            None => y,
        };
    }
    conv.forward(x)
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

/// The exact GELU `x·Φ(x)`: through [`gelu`](mod@super::gelu)'s kernels on `Flex` and
/// `Autodiff<Flex>` with `f32` or `f64` values, else [`gelu_composed`] (the form whose
/// gradient is exact on every backend). The same values within the kernel's `erf` error in
/// f32 (3.9e-7), to rounding in f64, and the same gradient.
pub fn gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    return pointwise(x, flex::GELU, gelu_composed);
    #[cfg(not(feature = "cpu"))]
    gelu_composed(x)
}

/// SiLU, `x·σ(x)`: through [`silu`](mod@super::silu)'s kernels on `Flex` and `Autodiff<Flex>`
/// with `f32` or `f64` values, else burn's `activation::silu`. The same values and gradient,
/// within the kernel's `exp` error in f32 (6e-7 relative) and to rounding in f64.
pub fn silu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    return pointwise(x, flex::SILU, burn::tensor::activation::silu);
    #[cfg(not(feature = "cpu"))]
    burn::tensor::activation::silu(x)
}

/// `x` through the CPU kernels of the pointwise operation `op` on `Flex` and `Autodiff<Flex>`
/// with `f32` or `f64` values, else through `fallback`.
#[cfg(feature = "cpu")]
fn pointwise<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    op: flex::Pointwise,
    fallback: fn(Tensor<B, D>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    use burn::backend::Flex;
    let covered = flex::supported(x.dtype());
    Route::new(x)
        .on_if::<Ad<Flex>>(covered, |x| {
            float(flex::pointwise_autodiff::<NoCheckpointing>(
                op,
                primitive(x),
            ))
        })
        .on_if::<Flex>(covered, |x| {
            float(flex::pointwise_forward(op, &primitive(x)))
        })
        .or(fallback)
}

/// `x.swap_dims(1, 2)` laid out contiguously, `[a, b, c, d] → [a, c, b, d]`: through
/// [`layout`](super::layout)'s copy on `Flex` and `Autodiff<Flex>` with `f32` or `f64` values
/// (the gradient swapped back the same way), elsewhere burn's `swap_dims` (a view each backend
/// copies when it must). The same values and gradients.
pub fn swap_middle_dims<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    #[cfg(feature = "cpu")]
    let route = {
        use burn::backend::Flex;
        let covered = flex::supported(x.dtype());
        Route::new(x)
            .on_if::<Ad<Flex>>(covered, |x| {
                float(flex::swap_middle_autodiff::<NoCheckpointing>(primitive(x)))
            })
            .on_if::<Flex>(covered, |x| float(flex::swap_middle_forward(&primitive(x))))
    };
    #[cfg(not(feature = "cpu"))]
    let route = Route::new(x);
    route.or(|x| x.swap_dims(1, 2))
}

/// The softmax of `x` along `dim`: along the last axis on `Autodiff<Flex>` with `f32` or `f64`
/// values, Flex's fused forward with the backward step of [`softmax`](mod@super::softmax) (one
/// row-parallel pass from the kept output); elsewhere `burn::tensor::activation::softmax` (on
/// `Flex` without autodiff, Flex's fused forward too). The same values, and the same gradient
/// to rounding.
///
/// # Shapes
/// - `x`, output: any, the same
pub fn softmax<B: Backend, const D: usize>(x: Tensor<B, D>, dim: usize) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    let route = {
        let covered = dim + 1 == D && flex::supported(x.dtype());
        Route::new(x).on_if::<Ad<burn::backend::Flex>>(covered, |x| {
            float(flex::softmax_autodiff::<NoCheckpointing>(primitive(x)))
        })
    };
    #[cfg(not(feature = "cpu"))]
    let route = Route::new(x);
    route.or(|x| burn::tensor::activation::softmax(x, dim))
}

/// The log-softmax of `x` along `dim`, `x − ln Σ e^x`: along the last axis on `Flex` and
/// `Autodiff<Flex>` with `f32` or `f64` values, [`log_softmax`](mod@super::log_softmax)'s
/// row-parallel pass (under autodiff with its backward step, one pass from the kept output);
/// along the last axis on `Autodiff<Wgpu>` and `Autodiff<Cuda>` the `#[cube]` kernels of
/// `log_softmax_cube.rs` (one kernel each way); elsewhere `burn::tensor::activation::log_softmax`. The same values and gradient to rounding.
///
/// # Shapes
/// - `x`, output: any, the same
pub fn log_softmax<B: Backend, const D: usize>(x: Tensor<B, D>, dim: usize) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    let route = {
        use burn::backend::Flex;
        let covered = dim + 1 == D && flex::supported(x.dtype());
        Route::new(x)
            .on_if::<Ad<Flex>>(covered, |x| {
                float(flex::log_softmax_autodiff::<NoCheckpointing>(primitive(x)))
            })
            .on_if::<Flex>(covered, |x| float(flex::log_softmax_forward(&primitive(x))))
    };
    #[cfg(not(feature = "cpu"))]
    let route = Route::new(x);
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<Ad<burn::backend::Wgpu>>(|x| {
        super::on_gpu::wgpu::log_softmax(x, dim + 1 == D)
    });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<Ad<burn::backend::Cuda>>(|x| {
        super::on_gpu::cuda::log_softmax(x, dim + 1 == D)
    });
    route.or(|x| burn::tensor::activation::log_softmax(x, dim))
}

/// Layer norm over the last axis, `γ·(x − μ)/√(σ² + ε) + β` (biased `σ²`): on `Autodiff<Flex>`
/// with `f32` or `f64` values, Flex's fused forward with the backward step of
/// [`layer_norm`](mod@super::layer_norm) (one row-parallel pass from the kept input);
/// elsewhere the backend's `layer_norm` (burn's `LayerNorm::forward`). The same values, and
/// the same gradients to rounding.
///
/// # Shapes
/// - `x`, output: `[..., d]`; `gamma`, `beta`: `[d]`
pub fn layer_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    let route = {
        let dtype = x.dtype();
        let covered = flex::supported(dtype) && gamma.dtype() == dtype && beta.dtype() == dtype;
        Route::new((x, gamma, beta)).on_if::<Ad<burn::backend::Flex>>(
            covered,
            |(x, gamma, beta)| {
                float(flex::layer_norm_autodiff::<NoCheckpointing>(
                    primitive(x),
                    primitive(gamma),
                    primitive(beta),
                    epsilon,
                ))
            },
        )
    };
    #[cfg(not(feature = "cpu"))]
    let route = Route::new((x, gamma, beta));
    route.or(|(x, gamma, beta)| {
        Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(B::layer_norm(
            x.into_primitive().tensor(),
            gamma.into_primitive().tensor(),
            Some(beta.into_primitive().tensor()),
            epsilon,
        )))
    })
}

/// The residual add and the layer norm after it, `s = x + branch` and `γ·(s − μ)/√(σ² + ε) + β`
/// over the last axis: `(s, norm(s))`, what a pre-norm transformer block computes at each
/// residual add a norm follows. On `Flex` and `Autodiff<Flex>` with `f32` or `f64` values (and
/// `x`, `branch` of one shape), one row-parallel pass of
/// [`layer_norm::add_forward`](super::layer_norm::add_forward) writes both, and under autodiff
/// the norm's backward step is [`layer_norm()`]'s; elsewhere `x + branch` and [`layer_norm()`].
/// The same sum to the bit, the same norm and gradients to rounding.
///
/// # Shapes
/// - `x`, `branch`, both outputs: `[..., d]`; `gamma`, `beta`: `[d]`
pub fn add_layer_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    branch: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> (Tensor<B, D>, Tensor<B, D>) {
    #[cfg(feature = "cpu")]
    let route = {
        use burn::backend::Flex;
        let dtype = x.dtype();
        let covered = flex::supported(dtype)
            && [branch.dtype(), gamma.dtype(), beta.dtype()] == [dtype; 3]
            && x.dims() == branch.dims();
        let run = |((x, branch), gamma, beta): ((Tensor<Flex, D>, Tensor<Flex, D>), _, _)| {
            let (sum, y) = flex::add_layer_norm_forward(
                &primitive(x),
                &primitive(branch),
                &primitive::<Flex, 1>(gamma),
                &primitive::<Flex, 1>(beta),
                epsilon,
            );
            (float(sum), float(y))
        };
        Route::new(((x, branch), gamma, beta))
            .on_if::<Ad<Flex>>(covered, |((x, branch), gamma, beta)| {
                let (sum, y) = flex::add_layer_norm_autodiff::<NoCheckpointing>(
                    primitive(x),
                    primitive(branch),
                    primitive(gamma),
                    primitive(beta),
                    epsilon,
                );
                (float(sum), float(y))
            })
            .on_if::<Flex>(covered, run)
    };
    #[cfg(not(feature = "cpu"))]
    let route = Route::new(((x, branch), gamma, beta));
    route.or(|((x, branch), gamma, beta)| {
        let sum = x + branch;
        (sum.clone(), layer_norm(sum, gamma, beta, epsilon))
    })
}

/// `lhs · rhs` over the last two dimensions: on `Flex` and `Autodiff<Flex>` with `f32` or `f64`
/// values and the same leading dimensions, [`matmul`](mod@super::matmul)'s product (the output
/// written once; under autodiff the two backward products too); elsewhere burn's `matmul`. The
/// same values (the same `gemm` crate over the same strides) and gradients.
///
/// # Shapes
/// - `lhs`: `[.., m, k]`, `rhs`: `[.., k, n]` → `[.., m, n]`
pub fn matmul<B: Backend, const D: usize>(lhs: Tensor<B, D>, rhs: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(feature = "cpu")]
    let route = {
        use burn::backend::Flex;
        let dtype = lhs.dtype();
        let covered = flex::supported(dtype)
            && rhs.dtype() == dtype
            && flex::matmul_covered(&lhs.dims(), &rhs.dims());
        Route::new((lhs, rhs))
            .on_if::<Ad<Flex>>(covered, |(l, r)| {
                float(flex::matmul_autodiff::<NoCheckpointing>(
                    primitive(l),
                    primitive(r),
                ))
            })
            .on_if::<Flex>(covered, |(l, r)| {
                float(flex::matmul_forward(&primitive(l), &primitive(r)))
            })
    };
    #[cfg(not(feature = "cpu"))]
    let route = Route::new((lhs, rhs));
    route.or(|(l, r)| l.matmul(r))
}

/// The linear layer `x·w + b` over the last axis (burn's `module::linear`, what
/// `Linear::forward` calls): on `Flex` and `Autodiff<Flex>` with `f32` or `f64` values, the
/// rows of `x` through [`matmul`](mod@super::matmul)'s `linear` (the bias written into the
/// output before the product adds to it; under autodiff the bias gradient in one parallel
/// pass); elsewhere burn's. The same values to the order of the bias add, and the same
/// gradients.
///
/// # Shapes
/// - `x`: `[..., k]`, `weight`: `[k, n]`, `bias`: `[n]` → `[..., n]`
pub fn linear<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, D> {
    let dims = x.dims();
    let [k, n] = weight.dims();
    if dims[D - 1] != k {
        // burn's own error names the mismatch.
        return burn::tensor::module::linear(x, weight, bias);
    }
    // Rows of a 2-D product on every backend: burn's weight gradient of a linear layer on a
    // 3-D input is a batched `[N, k, n]` product summed afterwards (see
    // `layers::linear_tokens`).
    let x = x.reshape([dims[..D - 1].iter().product::<usize>(), k]);
    let y = match bias {
        None => matmul(x, weight),
        Some(bias) => {
            #[cfg(feature = "cpu")]
            let route = {
                use burn::backend::Flex;
                let dtype = x.dtype();
                let covered =
                    flex::supported(dtype) && weight.dtype() == dtype && bias.dtype() == dtype;
                Route::new((x, weight, bias))
                    .on_if::<Ad<Flex>>(covered, |(x, w, b)| {
                        float(flex::linear_autodiff::<NoCheckpointing>(
                            primitive(x),
                            primitive(w),
                            primitive(b),
                        ))
                    })
                    .on_if::<Flex>(covered, |(x, w, b)| {
                        float(flex::linear_forward(
                            &primitive(x),
                            &primitive(w),
                            &primitive(b),
                        ))
                    })
            };
            #[cfg(not(feature = "cpu"))]
            let route = Route::new((x, weight, bias));
            route.or(|(x, w, b)| burn::tensor::module::linear(x, w, Some(b)))
        }
    };
    let mut out = dims;
    out[D - 1] = n;
    y.reshape(out)
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
    // A product, not `div_scalar(√2)`: upstream burn-autodiff 0.21 takes a scalar division's
    // derivative in f32 (patched in this workspace, not in one that embeds the crate).
    x.clone() * (x.mul_scalar(core::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5
}

/// `mean_i cos(p_i, z_i)` with each norm clamped below at `epsilon` and the gradient reaching
/// `p` only (`z` a stop-gradient's targets: BYOL's and SimSiam's negative cosine loss), as one
/// autodiff operation on the wgpu and CUDA backends ([`cosine_op`](super::cosine_op)): `Ok` with
/// the mean, `[1]`; else `Err((p, z))` for the caller's composed form (the CPU's, whose numbers
/// the loss tests fix against lightly's).
///
/// # Shapes
/// - `p`, `z`: `[N, D]`; output: `[1]`
pub fn mean_cosine<B: Backend>(
    p: Tensor<B, 2>,
    z: Tensor<B, 2>,
    epsilon: f64,
) -> Result<Tensor<B, 1>, (Tensor<B, 2>, Tensor<B, 2>)> {
    if p.dims() != z.dims() {
        return Err((p, z));
    }
    let route = Route::<_, Tensor<B, 1>>::new((p, z));
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<Ad<burn::backend::Wgpu>>(|input| {
        super::on_gpu::wgpu::mean_cosine(input, epsilon)
    });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<Ad<burn::backend::Cuda>>(|input| {
        super::on_gpu::cuda::mean_cosine(input, epsilon)
    });
    let _ = epsilon;
    route.result()
}

/// Global average pooling, `[N, C, H, W]` → `[N, C]`, as one autodiff operation on the wgpu and
/// CUDA backends ([`pool_op::global_avg_pool_op`](super::pool_op::global_avg_pool_op)): `Ok`
/// with the means; else `Err(x)` for the caller's composed form.
///
/// # Shapes
/// - `x`: `[N, C, H, W]`; output: `[N, C]`
pub fn global_avg_pool<B: Backend>(x: Tensor<B, 4>) -> Result<Tensor<B, 2>, Tensor<B, 4>> {
    let route = Route::<_, Tensor<B, 2>>::new(x);
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<Ad<burn::backend::Wgpu>>(super::on_gpu::wgpu::global_avg_pool);
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<Ad<burn::backend::Cuda>>(super::on_gpu::cuda::global_avg_pool);
    route.result()
}

/// NT-Xent (SimCLR's loss) over two views stacked as `z = [z1; z2]`, rows normalised with
/// norms clamped below at `epsilon`, as one autodiff operation on the wgpu and CUDA backends
/// ([`contrastive_op::nt_xent_op`](super::contrastive_op::nt_xent_op)): `Ok` with the mean over
/// the `2B` anchors, `[1]`; else `Err(z)` for the caller's composed form (the CPU's, whose
/// numbers the loss tests fix against lightly's).
///
/// # Shapes
/// - `z`: `[2B, D]`; output: `[1]`
pub fn nt_xent<B: Backend>(
    z: Tensor<B, 2>,
    temperature: f64,
    epsilon: f64,
) -> Result<Tensor<B, 1>, Tensor<B, 2>> {
    let [rows, _] = z.dims();
    if rows == 0 || rows % 2 != 0 {
        return Err(z);
    }
    let route = Route::<_, Tensor<B, 1>>::new(z);
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<Ad<burn::backend::Wgpu>>(|input| {
        super::on_gpu::wgpu::nt_xent(input, temperature, epsilon)
    });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<Ad<burn::backend::Cuda>>(|input| {
        super::on_gpu::cuda::nt_xent(input, temperature, epsilon)
    });
    let _ = (temperature, epsilon);
    route.result()
}

/// InfoNCE (MoCo's loss) of queries `q` against their unit keys and a queue of unit rows, `q`
/// normalised with norms clamped below at `epsilon`, the keys and the queue as given, and the
/// gradient reaching `q` only, as one autodiff operation on the wgpu and CUDA backends
/// ([`contrastive_op::info_nce_op`](super::contrastive_op::info_nce_op)): `Ok` with the mean
/// over the rows, `[1]`, and the unit queries, untracked; else `Err((q, unit_keys, queue))`
/// for the caller's composed form.
///
/// # Shapes
/// - `q`, `unit_keys`: `[N, D]`; `queue`: `[K, D]`; output: `[1]` and `[N, D]`
pub fn info_nce<B: Backend>(
    q: Tensor<B, 2>,
    unit_keys: Tensor<B, 2>,
    queue: Tensor<B, 2>,
    temperature: f64,
    epsilon: f64,
) -> InfoNceRoute<B> {
    let ([rows, width], [queue_len, queue_width]) = (q.dims(), queue.dims());
    if q.dims() != unit_keys.dims() || width != queue_width || rows == 0 || queue_len == 0 {
        return Err((q, unit_keys, queue));
    }
    let route = Route::<_, (Tensor<B, 1>, Tensor<B, 2>)>::new((q, unit_keys, queue));
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<Ad<burn::backend::Wgpu>>(|input| {
        super::on_gpu::wgpu::info_nce(input, temperature, epsilon)
    });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<Ad<burn::backend::Cuda>>(|input| {
        super::on_gpu::cuda::info_nce(input, temperature, epsilon)
    });
    let _ = (temperature, epsilon);
    route.result()
}

/// What [`info_nce`] returns: the loss and the unit queries, or its input handed back (`q`,
/// the unit keys, the queue).
pub type InfoNceRoute<B> = Result<
    super::contrastive_op::LossAndUnitQueries<B>,
    (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>),
>;

/// Batch norm in training as one autodiff operation with a backward step of its own, outside
/// a synchronised (data-parallel) batch norm ([`crate::replica_stats`]): on `Autodiff<Flex>`
/// with `f32` / `f64` tensors through the slice kernels ([`batch_norm`](super::batch_norm)), on
/// the wgpu and CUDA backends (`Autodiff<Wgpu>`, `Autodiff<Cuda>`, the models crate's `wgpu` /
/// `cuda` features) through their own tensor operations ([`batch_norm_op`]): `Ok` with the
/// output (each of the `groups` stacked batches normalised with its own moments:
/// [`batch_norm_op::batch_norm_train_op`]) and the `running` averages moved by each group's
/// moments in turn; else `Err((x, running))`, the input and the running averages as they
/// were, for the caller's composed path, also when a group has a single value per channel (no
/// unbiased variance). The CPU's slice kernels take one group only.
///
/// # Shapes
/// - `x`: `[n, c, h, w]` (`n` a multiple of `groups`), `gamma`, `beta` and the running
///   averages: `[c]`
/// - output: as `x`
pub fn batch_norm_train<B: Backend>(
    x: Tensor<B, 4>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    running: RunningAverages<B>,
    epsilon: f64,
    groups: usize,
) -> Result<TrainingBatchNorm<B>, (Tensor<B, 4>, RunningAverages<B>)> {
    batch_norm_route(x, gamma, beta, running, epsilon, groups, None, true)
        .map_err(|(x, _, running)| (x, running))
}

/// Batch norm of features `[n, c]` (an MLP head's) in training as one autodiff operation, on
/// the wgpu and CUDA backends outside a synchronised batch norm: the features normalised as an
/// `[n, c, 1, 1]` activation by [`batch_norm_train`]'s operation (each of the `groups` stacked
/// batches with its own moments), followed inside it by a ReLU when `relu`; `Ok` with the
/// output `[n, c]` and the `running` averages moved by each group's moments in turn (towards
/// the biased batch variance unless [`RunningAverages::unbiased`]); else `Err((x, running))`,
/// as given, for the caller's composed form: on the CPU (its slice kernels work per plane of
/// an image, here one value each: the composed form is the faster there), on other backends,
/// and when a group has a single row.
///
/// # Shapes
/// - `x`: `[n, c]` (`n` a multiple of `groups`), `gamma`, `beta` and the running averages: `[c]`
/// - output: as `x`
#[allow(clippy::type_complexity)]
pub fn batch_norm_1d_train<B: Backend>(
    x: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    running: RunningAverages<B>,
    epsilon: f64,
    groups: usize,
    relu: bool,
) -> Result<TrainingBatchNorm<B, 2>, (Tensor<B, 2>, RunningAverages<B>)> {
    let [n, c] = x.dims();
    let relu = relu.then_some(None);
    match batch_norm_route(
        x.reshape([n, c, 1, 1]),
        gamma,
        beta,
        running,
        epsilon,
        groups,
        relu,
        false,
    ) {
        Ok(TrainingBatchNorm { output, running }) => Ok(TrainingBatchNorm {
            output: output.reshape([n, c]),
            running,
        }),
        Err((x, _, running)) => Err((x.reshape([n, c]), running)),
    }
}

/// [`batch_norm_train`] followed by a ReLU, with `residual` added before it when given, as one
/// operation ([`batch_norm_op::batch_norm_relu_train_op`]: a ResNet block's
/// `relu(bn(x) + identity)`), on the wgpu and CUDA backends under autodiff: `Ok` with
/// `max(γ·x̂ + β + residual, 0)` as the output and the running averages moved;
/// else `Err((x, residual, running))`, for the caller's composition of [`batch_norm_train`], `add` and
/// [`relu`] (the CPU's slice kernels have no such epilogue, and the numbers are the same).
///
/// # Shapes
/// - as [`batch_norm_train`]; `residual`: `[n, c, h, w]`
#[allow(clippy::type_complexity)]
pub fn batch_norm_relu_train<B: Backend>(
    x: Tensor<B, 4>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    running: RunningAverages<B>,
    epsilon: f64,
    groups: usize,
    residual: Option<Tensor<B, 4>>,
) -> Result<TrainingBatchNorm<B>, (Tensor<B, 4>, Option<Tensor<B, 4>>, RunningAverages<B>)> {
    if residual.as_ref().is_some_and(|r| r.dims() != x.dims()) {
        return Err((x, residual, running));
    }
    batch_norm_route(
        x,
        gamma,
        beta,
        running,
        epsilon,
        groups,
        Some(residual),
        true,
    )
    .map_err(|(x, relu, running)| (x, relu.flatten(), running))
}

/// The route of [`batch_norm_train`] and, with `relu` = `Some(residual)`,
/// [`batch_norm_relu_train`] (the GPU backends only), and of [`batch_norm_1d_train`]: the CPU's
/// slice kernels only where `on_cpu`.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn batch_norm_route<B: Backend>(
    x: Tensor<B, 4>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    running: RunningAverages<B>,
    epsilon: f64,
    groups: usize,
    relu: Option<Option<Tensor<B, 4>>>,
    on_cpu: bool,
) -> Result<
    TrainingBatchNorm<B>,
    (
        Tensor<B, 4>,
        Option<Option<Tensor<B, 4>>>,
        RunningAverages<B>,
    ),
> {
    let [n, _, h, w] = x.dims();
    if crate::replica_stats::synchronised::<B>()
        || groups == 0
        || !n.is_multiple_of(groups)
        || n / groups * h * w < 2
    {
        return Err((x, relu, running));
    }
    #[cfg(feature = "cpu")]
    let covered = {
        let dtype = x.dtype();
        on_cpu
            && groups == 1
            && relu.is_none()
            && flex::supported(dtype)
            && gamma.dtype() == dtype
            && beta.dtype() == dtype
    };
    let route = Route::new(((x, gamma, beta, running), relu));
    #[cfg(feature = "cpu")]
    let route = route
        .on_if::<Ad<burn::backend::Flex>>(covered, |((x, gamma, beta, running), _)| {
            flex_batch_norm(x, gamma, beta, running, epsilon)
        });
    #[cfg(all(not(test), feature = "wgpu"))]
    let route = route.on_erased::<Ad<burn::backend::Wgpu>>(|input| {
        super::on_gpu::wgpu::batch_norm_train(input, epsilon, groups)
    });
    #[cfg(all(not(test), feature = "cuda"))]
    let route = route.on_erased::<Ad<burn::backend::Cuda>>(|input| {
        super::on_gpu::cuda::batch_norm_train(input, epsilon, groups)
    });
    let _ = (epsilon, groups, on_cpu);
    route
        .result()
        .map_err(|((x, _, _, running), relu)| (x, relu, running))
}

/// The slice kernels of [`batch_norm`](super::batch_norm) on `Autodiff<Flex>` (`f32` / `f64`
/// tensors), the moments in the parameters' element type, as the running averages are kept.
#[cfg(feature = "cpu")]
fn flex_batch_norm(
    x: Tensor<Ad<burn::backend::Flex>, 4>,
    gamma: Tensor<Ad<burn::backend::Flex>, 1>,
    beta: Tensor<Ad<burn::backend::Flex>, 1>,
    running: RunningAverages<Ad<burn::backend::Flex>>,
    epsilon: f64,
) -> TrainingBatchNorm<Ad<burn::backend::Flex>> {
    let [n, _, h, w] = x.dims();
    let (device, dtype) = (x.device(), x.dtype());
    let (y, mean, var) = flex::batch_norm_autodiff::<NoCheckpointing>(
        primitive(x),
        primitive(gamma),
        primitive(beta),
        epsilon,
    );
    let moment = |values: Vec<f64>| {
        let len = values.len();
        Tensor::from_data(TensorData::new(values, [1, len]), (&device, dtype))
    };
    TrainingBatchNorm {
        output: float(y),
        running: batch_norm_op::update_running_averages(
            running,
            moment(mean),
            moment(var),
            n * h * w,
        ),
    }
}
