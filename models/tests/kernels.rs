//! The CPU convolution kernels (`kernels::conv2d`, models/src/kernels) against burn's own
//! `Conv2d::forward` on the same backend (`Flex`, with and without autodiff), in f64: the output
//! and the gradients of the input, the weight and the bias on odd shapes (stride 2, padding,
//! dilation, 1×1, batch 1, a rectangular kernel, a bias); and the gradients against central
//! finite differences of a non-linear loss. The GELU and the token/head swap against their
//! composed forms.

use crate::common::fresh_leaves;
use burn::backend::{Autodiff, Flex, NdArray};
use burn::module::{AutodiffModule, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::PaddingConfig2d;
use burn::prelude::*;
use burn::tensor::DType;
use curriculum_ssl_models::kernels;

type Ad = Autodiff<Flex>;

#[derive(Debug, Clone, Copy)]
struct Case {
    batch: usize,
    channels: [usize; 2],
    size: [usize; 2],
    kernel: [usize; 2],
    stride: usize,
    padding: usize,
    dilation: usize,
    bias: bool,
}

/// A case, its fields in order (the table below reads as one line per case).
#[allow(clippy::too_many_arguments)]
const fn case(
    batch: usize,
    channels: [usize; 2],
    size: [usize; 2],
    kernel: [usize; 2],
    stride: usize,
    padding: usize,
    dilation: usize,
    bias: bool,
) -> Case {
    Case {
        batch,
        channels,
        size,
        kernel,
        stride,
        padding,
        dilation,
        bias,
    }
}

const CASES: [Case; 9] = [
    case(2, [3, 4], [7, 6], [3, 3], 1, 1, 1, false),
    case(3, [2, 5], [9, 8], [3, 3], 2, 1, 1, true),
    case(1, [4, 3], [5, 5], [1, 1], 1, 0, 1, false),
    case(2, [3, 6], [8, 7], [1, 1], 2, 0, 1, true),
    case(2, [2, 3], [9, 9], [3, 2], 1, 2, 2, false),
    case(1, [1, 8], [11, 10], [7, 7], 2, 3, 1, false),
    case(4, [5, 2], [4, 4], [3, 3], 3, 0, 1, true),
    // By Winograd's F(4×4, 3×3) (`kernels::winograd::covers`: 3×3 at stride 1, 64 channels and
    // 64 output positions or more); maps whose last tile is partly outside the output, padding 0.
    case(2, [64, 65], [8, 8], [3, 3], 1, 1, 1, true),
    case(1, [65, 64], [11, 10], [3, 3], 1, 0, 1, false),
];

/// A fixed pseudo-random sequence (an LCG), values in [−1, 1).
fn values(len: usize, seed: u64) -> Vec<f64> {
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

fn f64_tensor<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    device: &B::Device,
) -> Tensor<B, D> {
    let len = shape.iter().product();
    Tensor::from_data(
        TensorData::new(values(len, seed), shape),
        (device, DType::F64),
    )
}

/// The layer of `c`, its parameters in f64.
fn layer<B: Backend>(c: Case, device: &B::Device) -> Conv2d<B> {
    let [cin, cout] = c.channels;
    let mut conv = Conv2dConfig::new([cin, cout], c.kernel)
        .with_stride([c.stride, c.stride])
        .with_dilation([c.dilation, c.dilation])
        .with_padding(PaddingConfig2d::Explicit(
            c.padding, c.padding, c.padding, c.padding,
        ))
        .with_bias(c.bias)
        .init::<B>(device);
    conv.weight = Param::from_tensor(f64_tensor(
        [cout, cin, c.kernel[0], c.kernel[1]],
        11,
        device,
    ));
    if c.bias {
        conv.bias = Some(Param::from_tensor(f64_tensor([cout], 12, device)));
    }
    conv
}

fn input<B: Backend>(c: Case, device: &B::Device) -> Tensor<B, 4> {
    f64_tensor([c.batch, c.channels[0], c.size[0], c.size[1]], 13, device)
}

fn vec(t: Tensor<Flex, 4>) -> Vec<f64> {
    t.into_data().to_vec::<f64>().unwrap()
}

/// Largest difference relative to the larger magnitude (plus 1, so near-zero entries compare
/// absolutely).
fn max_rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs() / (1.0 + p.abs().max(q.abs())))
        .fold(0.0, f64::max)
}

/// `Σ y ⊙ r` and its gradients through `run`, for input `x` and `conv`.
fn loss_and_grads(
    conv: &Conv2d<Ad>,
    x: Tensor<Ad, 4>,
    run: impl Fn(&Conv2d<Ad>, Tensor<Ad, 4>) -> Tensor<Ad, 4>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Option<Vec<f64>>) {
    let x = x.require_grad();
    let y = run(conv, x.clone());
    let r = f64_tensor::<Ad, 4>(y.dims(), 14, &y.device());
    let grads = (y.clone() * r).sum().backward();
    let dx = vec(x.grad(&grads).unwrap());
    let dw = vec(conv.weight.grad(&grads).unwrap());
    let db = conv
        .bias
        .as_ref()
        .map(|b| b.grad(&grads).unwrap().into_data().to_vec::<f64>().unwrap());
    (vec(y.inner()), dx, dw, db)
}

/// Both sides compute the same sums in another order (f64): 1e-12 relative is thousands of
/// ulps of room for sums of at most a few hundred terms of size ≤ 1, and far below any
/// indexing error (an entry off by one position changes the values by O(1)).
#[test]
fn outputs_and_gradients_equal_burns_convolution() {
    let device = Default::default();
    for c in CASES {
        let conv = layer::<Ad>(c, &device);
        let x = input::<Ad>(c, &device);
        assert!(kernels::runs_cpu_kernels(&conv, &x), "{c:?}");
        let g = kernels::covered_geometry(&conv, x.dims()).expect("covered");
        assert_eq!(kernels::winograd::covers(&g), c.channels[0] >= 64, "{c:?}");
        assert_equals_burns(&conv, &x, c);
    }
}

/// `kernels::conv2d` against burn's `Conv2d::forward` in f64 on `Autodiff<Flex>` (the output,
/// the input's, the weight's and the bias's gradients to 1e-12 relative) and on plain `Flex`
/// (the output), the kernels running on both.
fn assert_equals_burns(conv: &Conv2d<Ad>, x: &Tensor<Ad, 4>, c: Case) {
    let ours = loss_and_grads(conv, x.clone(), kernels::conv2d);
    // Through leaves the first backward pass has not consumed (`common::fresh_leaves`).
    let burns = loss_and_grads(&fresh_leaves(conv), x.clone(), |conv, x| conv.forward(x));
    assert!(max_rel(&ours.0, &burns.0) < 1e-12, "{c:?} output");
    assert!(max_rel(&ours.1, &burns.1) < 1e-12, "{c:?} input gradient");
    assert!(max_rel(&ours.2, &burns.2) < 1e-12, "{c:?} weight gradient");
    assert_eq!(ours.3.is_some(), c.bias);
    if let (Some(a), Some(b)) = (&ours.3, &burns.3) {
        assert!(max_rel(a, b) < 1e-12, "{c:?} bias gradient");
    }

    // Inference: the forward kernel on plain Flex.
    let valid = conv.valid();
    let x = x.clone().inner();
    assert!(kernels::runs_cpu_kernels(&valid, &x), "{c:?}");
    let a = vec(kernels::conv2d(&valid, x.clone()));
    let b = vec(valid.forward(x));
    assert!(max_rel(&a, &b) < 1e-12, "{c:?} inference output");
}

/// A depthwise layer (`groups = in = out channels`: EfficientNet's and MobileNet-V3's 3 × 3 and
/// 5 × 5 at strides 1 and 2, "same" padding; an odd map, no padding, dilation) through
/// `kernels::depthwise` equals burn's grouped convolution: outputs and the input's, weight's and
/// bias's gradients in f64 to 1e-12 relative (the same products of at most 25 taps, or of the
/// batch's positions for the weight, summed in another order), with and without autodiff. In
/// f32 the two differ by rounding only: at most 1e-5 relative to the largest entry for these
/// sums of at most a few thousand terms of size ≤ 1 (each side's error is below n·ε·max ≈
/// 2e-4·max in the worst case, and ~√n·ε in practice), far below an indexing error's O(1).
#[test]
fn depthwise_layers_equal_burns_grouped_convolution() {
    let device = Default::default();
    let cases = [
        case(2, [4, 4], [7, 6], [3, 3], 1, 1, 1, false),
        case(3, [3, 3], [9, 8], [3, 3], 2, 1, 1, true),
        case(2, [5, 5], [9, 9], [5, 5], 1, 2, 1, true),
        case(2, [2, 2], [8, 7], [5, 5], 2, 2, 1, false),
        case(1, [3, 3], [6, 7], [3, 3], 1, 0, 1, true),
        case(2, [2, 2], [9, 9], [3, 3], 1, 2, 2, false),
    ];
    for c in cases {
        let mut conv = Conv2dConfig::new(c.channels, c.kernel)
            .with_stride([c.stride, c.stride])
            .with_dilation([c.dilation, c.dilation])
            .with_padding(PaddingConfig2d::Explicit(
                c.padding, c.padding, c.padding, c.padding,
            ))
            .with_groups(c.channels[0])
            .with_bias(c.bias)
            .init::<Ad>(&device);
        conv.weight = Param::from_tensor(f64_tensor(
            [c.channels[1], 1, c.kernel[0], c.kernel[1]],
            21,
            &device,
        ));
        if c.bias {
            conv.bias = Some(Param::from_tensor(f64_tensor([c.channels[1]], 22, &device)));
        }
        let x = input::<Ad>(c, &device);
        assert!(kernels::runs_cpu_kernels(&conv, &x), "{c:?}");
        let g = kernels::depthwise_geometry(&conv, x.dims()).expect("depthwise");
        assert_eq!(kernels::covered_geometry(&conv, x.dims()), None, "{c:?}");
        assert_eq!(g.in_channels, c.channels[0]);
        assert_equals_burns(&conv, &x, c);

        // f32: the same layer and input rounded to f32.
        let mut conv32 = conv.valid();
        conv32.weight = Param::from_tensor(conv32.weight.val().cast(DType::F32));
        conv32.bias = conv32
            .bias
            .map(|b| Param::from_tensor(b.val().cast(DType::F32)));
        let x32 = x.inner().cast(DType::F32);
        assert!(kernels::runs_cpu_kernels(&conv32, &x32), "{c:?}");
        let a: Vec<f64> = kernels::conv2d(&conv32, x32.clone())
            .cast(DType::F64)
            .into_data()
            .to_vec()
            .unwrap();
        let b: Vec<f64> = conv32
            .forward(x32)
            .cast(DType::F64)
            .into_data()
            .to_vec()
            .unwrap();
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        assert!(worst <= 1e-5 * scale, "{c:?} f32: {worst} against {scale}");
    }
}

/// `L = Σ tanh(y) ⊙ r`: each gradient entry against `(L(θ + h) − L(θ − h)) / 2h`, h = 1e-5,
/// for every input and weight entry of two cases. The truncation error is O(h²·L''') ≈ 1e-10
/// and the rounding error O(ε·|L| / h) ≈ 1e-10 for |L| ≲ 10 in f64, so 1e-7 is far above both
/// and far below a wrong gradient. (Winograd's layers are too large for this; its gradients
/// equal im2col's, `kernels::winograd::tests`.)
#[test]
fn gradients_equal_finite_differences() {
    let device = Default::default();
    for c in [CASES[1], CASES[4]] {
        let conv = layer::<Ad>(c, &device);
        let x = input::<Ad>(c, &device);
        let loss = |conv: &Conv2d<Ad>, x: Tensor<Ad, 4>| {
            let y = kernels::conv2d(conv, x);
            let r = f64_tensor::<Ad, 4>(y.dims(), 15, &y.device());
            (y.tanh() * r).sum()
        };
        let xg = x.clone().require_grad();
        let grads = loss(&conv, xg.clone()).backward();
        let dx = vec(xg.grad(&grads).unwrap());
        let dw = vec(conv.weight.grad(&grads).unwrap());
        // Read as f64 data: `into_scalar` would round through Flex's default element type, f32.
        let scalar = |l: Tensor<Ad, 1>| l.into_data().to_vec::<f64>().unwrap()[0];
        let h = 1e-5;
        let x_values = vec(x.clone().inner());
        for k in 0..x_values.len() {
            let shifted = |delta: f64| {
                let mut v = x_values.clone();
                v[k] += delta;
                Tensor::<Ad, 4>::from_data(TensorData::new(v, x.dims()), (&device, DType::F64))
            };
            let fd =
                (scalar(loss(&conv, shifted(h))) - scalar(loss(&conv, shifted(-h)))) / (2.0 * h);
            assert!(
                (fd - dx[k]).abs() < 1e-7,
                "{c:?} ∂x[{k}]: {} against {fd}",
                dx[k]
            );
        }
        let w_values = vec(conv.weight.val().inner());
        for k in 0..w_values.len() {
            let shifted = |delta: f64| {
                let mut v = w_values.clone();
                v[k] += delta;
                let mut moved = conv.clone();
                moved.weight = Param::from_tensor(Tensor::from_data(
                    TensorData::new(v, conv.weight.dims()),
                    (&device, DType::F64),
                ));
                moved
            };
            let fd = (scalar(loss(&shifted(h), x.clone())) - scalar(loss(&shifted(-h), x.clone())))
                / (2.0 * h);
            assert!(
                (fd - dw[k]).abs() < 1e-7,
                "{c:?} ∂w[{k}]: {} against {fd}",
                dw[k]
            );
        }
    }
}

/// The kernels run on `Flex` and `Autodiff<Flex>` in f32 and f64 for a covered layer, and burn's
/// operation runs everywhere else: a grouped convolution, `Same` padding (asymmetric for an even
/// kernel), another backend.
#[test]
fn the_kernels_run_exactly_where_they_cover_the_layer() {
    let device = Default::default();
    let f32_conv = Conv2dConfig::new([3, 4], [3, 3]).init::<Ad>(&device);
    let f32_x = Tensor::<Ad, 4>::zeros([2, 3, 8, 8], &device);
    assert!(kernels::runs_cpu_kernels(&f32_conv, &f32_x));
    assert!(kernels::runs_cpu_kernels(
        &f32_conv.valid(),
        &f32_x.clone().inner()
    ));

    let grouped = Conv2dConfig::new([4, 4], [3, 3])
        .with_groups(2)
        .init::<Ad>(&device);
    assert!(!kernels::runs_cpu_kernels(
        &grouped,
        &Tensor::zeros([2, 4, 8, 8], &device)
    ));
    let same = Conv2dConfig::new([3, 4], [2, 2])
        .with_padding(PaddingConfig2d::Same)
        .init::<Ad>(&device);
    assert!(!kernels::runs_cpu_kernels(&same, &f32_x));
    // The grouped layer through `conv2d` is burn's operation: the same output shape.
    let y = kernels::conv2d(&grouped, Tensor::zeros([2, 4, 8, 8], &device));
    assert_eq!(y.dims(), [2, 4, 6, 6]);

    let nd_device = Default::default();
    let nd_conv = Conv2dConfig::new([3, 4], [3, 3]).init::<NdArray<f64>>(&nd_device);
    assert!(!kernels::runs_cpu_kernels(
        &nd_conv,
        &Tensor::zeros([2, 3, 8, 8], &nd_device)
    ));
}

/// `Σ run(x) ⊙ r` on `Autodiff<Flex>`: the output and the input's gradient.
fn value_and_grad(
    x: Tensor<Ad, 3>,
    run: impl Fn(Tensor<Ad, 3>) -> Tensor<Ad, 3>,
) -> (Vec<f64>, Vec<f64>) {
    let x = x.require_grad();
    let y = run(x.clone());
    let r = f64_tensor::<Ad, 3>(y.dims(), 15, &y.device()).cast(y.dtype());
    let grads = (y.clone() * r).sum().backward();
    (as_f64(y.inner()), as_f64(x.grad(&grads).unwrap()))
}

/// The GELU kernel (`kernels::gelu`, what `layers::gelu` calls) against the composed form
/// (`kernels::gelu_composed`) on the same backend, with and without autodiff. In f64 both use
/// libm's `erf`: the same values and input gradients to 1e-14 (a few ulps: the two evaluate
/// `Φ` in another order). In f32 the kernel's `erf` is within 3.9e-7 of the exact one and
/// libm's within an ulp, so values differ by at most 3.9e-7·|x|/2 plus rounding (≤ 1.2e-6
/// here, |x| ≤ 4, against values up to 4) and gradients by about as much times |r| ≤ 1; the
/// bound 4e-6 holds that with room and is far below a wrong formula's error (the tanh
/// approximation's derivative differs by 1e-3).
#[test]
fn gelu_kernel_equals_the_composed_gelu() {
    let device = Default::default();
    let x = f64_tensor::<Ad, 3>([3, 5, 70], 16, &device).mul_scalar(4.0);
    let (y, dx) = value_and_grad(x.clone(), curriculum_ssl_models::layers::gelu);
    let (y_ref, dx_ref) = value_and_grad(x.clone(), kernels::gelu_composed);
    assert!(max_rel(&y, &y_ref) < 1e-14, "f64 values");
    assert!(max_rel(&dx, &dx_ref) < 1e-14, "f64 gradients");
    // Without autodiff (feature extraction) the same values.
    let plain = kernels::gelu(x.clone().inner());
    let plain = plain.into_data().to_vec::<f64>().unwrap();
    assert!(
        max_rel(&plain, &y_ref) < 1e-14,
        "f64 values without autodiff"
    );

    let x32 = x.cast(DType::F32);
    let (y, dx) = value_and_grad(x32.clone(), curriculum_ssl_models::layers::gelu);
    let (y_ref, dx_ref) = value_and_grad(x32, kernels::gelu_composed);
    let largest = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max)
    };
    assert!(
        largest(&y, &y_ref) < 4e-6,
        "f32 values: {}",
        largest(&y, &y_ref)
    );
    assert!(
        largest(&dx, &dx_ref) < 4e-6,
        "f32 gradients: {}",
        largest(&dx, &dx_ref)
    );
}

/// `kernels::silu` (EfficientNet's activation, `layers::Activation::Silu`) against burn's
/// `activation::silu` on `Autodiff<Flex>`, on values up to ±12: in f64 the same values and input
/// gradients to 1e-13 relative (both compute `x·σ(x)` with libm's `exp`, in another arrangement:
/// `1/(1 + e⁻ˣ)` against `e^(−|x|)` and its complement), with and without autodiff; in f32
/// within 1e-5 absolute (the kernel's `exp` is within 3e-7 relative and libm's within an ulp:
/// `|x·σ(x)| ≤ 12` gives at most 12·(3e-7 + a few ε) ≈ 1e-5 on the values, less on the
/// gradients, whose factor `σ(1 + x(1 − σ))` is below 1.1 in size).
#[test]
fn silu_kernel_equals_burns_silu() {
    use burn::tensor::activation::silu;
    let device = Default::default();
    let x = f64_tensor::<Ad, 3>([3, 5, 70], 17, &device).mul_scalar(12.0);
    let (y, dx) = value_and_grad(x.clone(), kernels::silu);
    let (y_ref, dx_ref) = value_and_grad(x.clone(), silu);
    assert!(max_rel(&y, &y_ref) < 1e-13, "f64 values");
    assert!(max_rel(&dx, &dx_ref) < 1e-13, "f64 gradients");
    let plain = kernels::silu(x.clone().inner());
    let plain = plain.into_data().to_vec::<f64>().unwrap();
    assert!(
        max_rel(&plain, &y_ref) < 1e-13,
        "f64 values without autodiff"
    );

    let x32 = x.cast(DType::F32);
    let (y, dx) = value_and_grad(x32.clone(), kernels::silu);
    let (y_ref, dx_ref) = value_and_grad(x32, silu);
    assert!(
        largest(&y, &y_ref) < 1e-5,
        "f32 values: {}",
        largest(&y, &y_ref)
    );
    assert!(
        largest(&dx, &dx_ref) < 1e-5,
        "f32 gradients: {}",
        largest(&dx, &dx_ref)
    );
}

/// `kernels::relu` (the ResNets' ReLU, which keeps its output for the backward step) against
/// burn's `relu` (which keeps its input) on `Autodiff<Flex>`: the same values and input
/// gradients exactly, in f64 and f32 — the same inner `relu` and `relu_backward` run, the mask
/// read from the output instead of the input, and `relu(x) ≤ 0` exactly where `x ≤ 0`. The
/// inputs hold exact zeros (gradient 0 on both sides) and the input is used twice, as a residual
/// block's is, so its gradient accumulates through the operation.
#[test]
fn relu_keeping_its_output_equals_burns_relu() {
    use burn::tensor::activation::relu;
    let device = Default::default();
    let x = f64_tensor::<Ad, 3>([3, 5, 70], 17, &device)
        .mul_scalar(4.0)
        .round();
    let zeros = x.clone().equal_elem(0.0).int().sum().into_scalar();
    assert!(zeros > 0, "the inputs hold exact zeros");
    let twice = |f: fn(Tensor<Ad, 3>) -> Tensor<Ad, 3>| move |x: Tensor<Ad, 3>| f(x.clone()) * x;
    for dtype in [DType::F64, DType::F32] {
        let x = x.clone().cast(dtype);
        let (y_ref, dx_ref) = value_and_grad(x.clone(), twice(relu));
        // The operation itself, and the dispatching call the backbones make.
        for run in [twice(kernels::relu_op::relu_op), twice(kernels::relu)] {
            let (y, dx) = value_and_grad(x.clone(), run);
            assert_eq!(y, y_ref, "{dtype:?} values");
            assert_eq!(dx, dx_ref, "{dtype:?} gradients");
        }
    }
}

/// `kernels::swap_middle_dims` (attention's token/head swap) against burn's `swap_dims(1, 2)`
/// on `Autodiff<Flex>` in f64 and without autodiff: the same values and the same input
/// gradient, exactly (both are copies of the same numbers; the loss weights the output by a
/// fixed tensor so that a misplaced value changes the gradient).
#[test]
fn swap_middle_dims_equals_swap_dims() {
    let device = Default::default();
    let x = f64_tensor::<Ad, 4>([2, 5, 3, 4], 17, &device).require_grad();
    let run = |f: &dyn Fn(Tensor<Ad, 4>) -> Tensor<Ad, 4>| {
        // A leaf of its own per run (`common::fresh_leaves` says why).
        let x = x.clone().detach().require_grad();
        let y = f(x.clone());
        let r = f64_tensor::<Ad, 4>(y.dims(), 18, &device);
        // The reshape makes burn's strided view contiguous too.
        let flat = y.clone().reshape([2 * 3 * 5 * 4]);
        let grads = (y * r).sum().backward();
        let as_vec = |t: Tensor<Flex, 1>| t.into_data().to_vec::<f64>().unwrap();
        let dx = x.grad(&grads).unwrap().reshape([2 * 5 * 3 * 4]);
        (as_vec(flat.inner()), as_vec(dx))
    };
    let (y, dx) = run(&|x| kernels::swap_middle_dims(x));
    let (y_ref, dx_ref) = run(&|x| x.swap_dims(1, 2));
    assert_eq!(y, y_ref, "values");
    assert_eq!(dx, dx_ref, "gradients");
    let plain = kernels::swap_middle_dims(x.clone().inner()).reshape([2 * 3 * 5 * 4]);
    assert_eq!(
        plain.into_data().to_vec::<f64>().unwrap(),
        y_ref,
        "without autodiff"
    );
}

/// `Σ run(x, γ, β) ⊙ r` on `Autodiff<Flex>`: the output and the gradients of `x`, `γ` and `β`,
/// each as f64 values.
type NormRun = dyn Fn(Tensor<Ad, 3>, Tensor<Ad, 1>, Tensor<Ad, 1>) -> Tensor<Ad, 3>;
fn norm_value_and_grads(
    x: Tensor<Ad, 3>,
    gamma: Tensor<Ad, 1>,
    beta: Tensor<Ad, 1>,
    run: &NormRun,
) -> [Vec<f64>; 4] {
    let (x, gamma, beta) = (x.require_grad(), gamma.require_grad(), beta.require_grad());
    let y = run(x.clone(), gamma.clone(), beta.clone());
    let r = f64_tensor::<Ad, 3>(y.dims(), 21, &y.device()).cast(y.dtype());
    let grads = (y.clone() * r).sum().backward();
    [
        as_f64(y.inner()),
        as_f64(x.grad(&grads).unwrap()),
        as_f64(gamma.grad(&grads).unwrap()),
        as_f64(beta.grad(&grads).unwrap()),
    ]
}

/// A tensor's values as f64.
fn as_f64<const D: usize>(t: Tensor<Flex, D>) -> Vec<f64> {
    t.cast(DType::F64).into_data().to_vec::<f64>().unwrap()
}

/// Largest absolute difference.
fn largest(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f64::max)
}

/// `kernels::softmax` over the last axis (Flex's fused forward with a backward pass of its own
/// under autodiff; what the ViT's attention calls) against burn's `activation::softmax`, which
/// `Autodiff<Flex>` runs as its composed form (max, exp, sum, division, each with its own
/// rule). In f64 the same values and input gradients to 1e-15 (measured 2.8e-17: the two sum
/// in another order). In f32 a row's sum of 70 terms carries at most 70·2⁻²⁴ ≈ 4.2e-6 relative
/// error on either side, whatever order the CPU's vectors add in, and `y ≤ 1`, `|∂y| ≤ 1`: the
/// sides agree within 1e-5 (measured 3e-8); a wrong formula (e.g. without the row sum) is off
/// by 1e-2 or more. Along another axis it is burn's softmax itself, to the bit.
#[test]
fn softmax_kernel_equals_burns_composed_softmax() {
    use burn::tensor::activation::softmax;
    let device = Default::default();
    let x = f64_tensor::<Ad, 3>([3, 5, 70], 19, &device).mul_scalar(4.0);
    for dtype in [DType::F64, DType::F32] {
        let x = x.clone().cast(dtype);
        let (y, dx) = value_and_grad(x.clone(), |x| kernels::softmax(x, 2));
        let (y_ref, dx_ref) = value_and_grad(x.clone(), |x| softmax(x, 2));
        let bound = if dtype == DType::F64 { 1e-15 } else { 1e-5 };
        assert!(
            largest(&y, &y_ref) < bound,
            "{dtype:?} values: {}",
            largest(&y, &y_ref)
        );
        assert!(
            largest(&dx, &dx_ref) < bound,
            "{dtype:?} gradients: {}",
            largest(&dx, &dx_ref)
        );
        let (y1, dx1) = value_and_grad(x.clone(), |x| kernels::softmax(x, 1));
        let (y1_ref, dx1_ref) = value_and_grad(x, |x| softmax(x, 1));
        assert_eq!((y1, dx1), (y1_ref, dx1_ref), "{dtype:?} along axis 1");
    }
}

/// `kernels::log_softmax` over the last axis (one row pass forward and one backward of its
/// own; what the losses call) against burn's `activation::log_softmax`, which `Flex` and
/// `Autodiff<Flex>` run as its composed form (max, subtraction, exp, sum, log, subtraction, each
/// with its own rule), on logits up to ±8 in rows of 70 (`|y|` up to about 20). In f64 the same
/// values and input gradients to 1e-13 (measured 3.6e-15 and 1.8e-15: rounding of values of
/// that size, sums in another order). In f32 the composed side rounds `x − m` (up to 16: `ε/2·16 ≈ 1e-6` in each
/// exponent and in the output) and sums 70 terms in f32 (`70·2⁻²⁴ ≈ 4.2e-6` relative); ours
/// takes them in f64: the values within 2e-5 and the gradients (`∂y − e^y·Σ∂y`, `|Σ∂y| ≤ 70`,
/// each `e^y` within about 5e-6 relative on the composed side) within 5e-4 on any CPU
/// (measured 1.9e-6 and 2.4e-7); a
/// wrong formula (the row sum left out) is off by 1 or more. Along another axis it is burn's
/// own, to the bit, and without autodiff the same kernel.
#[test]
fn log_softmax_kernel_equals_burns_composed_log_softmax() {
    use burn::tensor::activation::log_softmax;
    let device = Default::default();
    let x = f64_tensor::<Ad, 3>([3, 5, 70], 23, &device).mul_scalar(8.0);
    for dtype in [DType::F64, DType::F32] {
        let x = x.clone().cast(dtype);
        let (y, dx) = value_and_grad(x.clone(), |x| kernels::log_softmax(x, 2));
        let (y_ref, dx_ref) = value_and_grad(x.clone(), |x| log_softmax(x, 2));
        let (value_bound, grad_bound) = if dtype == DType::F64 {
            (1e-13, 1e-13)
        } else {
            (2e-5, 5e-4)
        };
        assert!(
            largest(&y, &y_ref) < value_bound,
            "{dtype:?} values: {}",
            largest(&y, &y_ref)
        );
        assert!(
            largest(&dx, &dx_ref) < grad_bound,
            "{dtype:?} gradients: {}",
            largest(&dx, &dx_ref)
        );
        let plain = as_f64(kernels::log_softmax(x.clone().inner(), 2));
        assert!(largest(&plain, &y) == 0.0, "{dtype:?} without autodiff");
        let (y1, dx1) = value_and_grad(x.clone(), |x| kernels::log_softmax(x, 1));
        let (y1_ref, dx1_ref) = value_and_grad(x, |x| log_softmax(x, 1));
        assert_eq!((y1, dx1), (y1_ref, dx1_ref), "{dtype:?} along axis 1");
    }
}

/// `layers::LayerNorm` (`kernels::layer_norm`: Flex's fused forward with a backward pass of its
/// own under autodiff; the ViTs' norms) against burn's `nn::LayerNorm`, which `Autodiff<Flex>`
/// runs as its composed form, with the same `γ`, `β` and `ε`: values and the gradients of `x`,
/// `γ` and `β`, relative to 1 + |v|. In f64 the same to 1e-13 (measured 1.2e-15: sums in
/// another order). In f32 each of a row's sums (70 terms) carries at most 70·2⁻²⁴ ≈ 4.2e-6
/// relative error on the composed side (ours sums in f64), and ∂γ, ∂β add 15 rows more: the
/// sides agree within 2e-5 (measured 5.3e-7) on any CPU; a wrong formula (a missing mean term
/// of ∂x) is off by 1e-1.
#[test]
fn layer_norm_kernel_equals_burns_composed_layer_norm() {
    use curriculum_ssl_models::layers::LayerNormConfig;
    let device = Default::default();
    let x = f64_tensor::<Ad, 3>([3, 5, 70], 22, &device)
        .mul_scalar(3.0)
        .add_scalar(0.5);
    let gamma = f64_tensor::<Ad, 1>([70], 23, &device).add_scalar(1.0);
    let beta = f64_tensor::<Ad, 1>([70], 24, &device);
    for dtype in [DType::F64, DType::F32] {
        let (x, gamma, beta) = (
            x.clone().cast(dtype),
            gamma.clone().cast(dtype),
            beta.clone().cast(dtype),
        );
        let ours = move |x: Tensor<Ad, 3>, gamma: Tensor<Ad, 1>, beta: Tensor<Ad, 1>| {
            let mut norm = LayerNormConfig::new(70).with_epsilon(1e-6).init(&device);
            norm.gamma = Param::from_tensor(gamma);
            norm.beta = Some(Param::from_tensor(beta));
            norm.forward(x)
        };
        let burns = move |x: Tensor<Ad, 3>, gamma: Tensor<Ad, 1>, beta: Tensor<Ad, 1>| {
            let mut norm = burn::nn::LayerNormConfig::new(70)
                .with_epsilon(1e-6)
                .init(&device);
            norm.gamma = Param::from_tensor(gamma);
            norm.beta = Some(Param::from_tensor(beta));
            norm.forward(x)
        };
        let got = norm_value_and_grads(x.clone(), gamma.clone(), beta.clone(), &ours);
        let want = norm_value_and_grads(x, gamma, beta, &burns);
        let bound = if dtype == DType::F64 { 1e-13 } else { 2e-5 };
        for (what, (a, b)) in ["values", "∂x", "∂γ", "∂β"]
            .iter()
            .zip(got.iter().zip(&want))
        {
            assert!(max_rel(a, b) < bound, "{dtype:?} {what}: {}", max_rel(a, b));
        }
    }
}

/// `kernels::add_layer_norm` (one pass writes the residual sum and its norm; the ViT blocks'
/// adds) against burn's add followed by burn's `nn::LayerNorm` (its composed form under
/// `Autodiff<Flex>`), with both outputs in the loss (`Σ s ⊙ r₁ + Σ y ⊙ r₂`, so `s`'s gradient
/// gathers the norm's and the stream's): the sum, the norm and the gradients of `x`, the
/// branch, `γ` and `β`, relative to 1 + |v|. The sum is the same bits (one rounding of `x + b`
/// either way). The rest as the layer norm's test above: in f64 within 1e-13 (sums in another
/// order), in f32 within 2e-5 on any CPU (the composed side's f32 row sums of 70 terms, 4.2e-6
/// relative each; ours in f64); a norm of `x` instead of `x + b`, or the add's gradient passed
/// to one side only, is off by 1e-1 or more. Without autodiff the same kernel gives the same
/// bits.
#[test]
fn add_layer_norm_equals_the_add_and_burns_composed_layer_norm() {
    let device = Default::default();
    let x = f64_tensor::<Ad, 3>([3, 5, 70], 25, &device)
        .mul_scalar(3.0)
        .add_scalar(0.5);
    let branch = f64_tensor::<Ad, 3>([3, 5, 70], 26, &device).mul_scalar(2.0);
    let gamma = f64_tensor::<Ad, 1>([70], 27, &device).add_scalar(1.0);
    let beta = f64_tensor::<Ad, 1>([70], 28, &device);
    type Run = dyn Fn(
        Tensor<Ad, 3>,
        Tensor<Ad, 3>,
        Tensor<Ad, 1>,
        Tensor<Ad, 1>,
    ) -> (Tensor<Ad, 3>, Tensor<Ad, 3>);
    let value_and_grads =
        |x: &Tensor<Ad, 3>, b: &Tensor<Ad, 3>, g: &Tensor<Ad, 1>, be: &Tensor<Ad, 1>, run: &Run| {
            let (x, b) = (x.clone().require_grad(), b.clone().require_grad());
            let (g, be) = (g.clone().require_grad(), be.clone().require_grad());
            let (s, y) = run(x.clone(), b.clone(), g.clone(), be.clone());
            let r1 = f64_tensor::<Ad, 3>(s.dims(), 29, &device).cast(s.dtype());
            let r2 = f64_tensor::<Ad, 3>(y.dims(), 30, &device).cast(y.dtype());
            let grads = ((s.clone() * r1).sum() + (y.clone() * r2).sum()).backward();
            [
                as_f64(s.inner()),
                as_f64(y.inner()),
                as_f64(x.grad(&grads).unwrap()),
                as_f64(b.grad(&grads).unwrap()),
                as_f64(g.grad(&grads).unwrap()),
                as_f64(be.grad(&grads).unwrap()),
            ]
        };
    for dtype in [DType::F64, DType::F32] {
        let [x, branch] = [&x, &branch].map(|t| t.clone().cast(dtype));
        let [gamma, beta] = [&gamma, &beta].map(|t| t.clone().cast(dtype));
        let ours: &Run = &|x, b, g, be| kernels::add_layer_norm(x, b, g, be, 1e-6);
        let burns: &Run = &|x, b, g, be| {
            let mut norm = burn::nn::LayerNormConfig::new(70)
                .with_epsilon(1e-6)
                .init(&Default::default());
            norm.gamma = Param::from_tensor(g);
            norm.beta = Some(Param::from_tensor(be));
            let s = x + b;
            (s.clone(), norm.forward(s))
        };
        let got = value_and_grads(&x, &branch, &gamma, &beta, ours);
        let want = value_and_grads(&x, &branch, &gamma, &beta, burns);
        assert_eq!(got[0], want[0], "{dtype:?}: the sum");
        let bound = if dtype == DType::F64 { 1e-13 } else { 2e-5 };
        for (what, (a, b)) in ["values", "∂x", "∂branch", "∂γ", "∂β"]
            .iter()
            .zip(got[1..].iter().zip(&want[1..]))
        {
            assert!(max_rel(a, b) < bound, "{dtype:?} {what}: {}", max_rel(a, b));
        }
        let (s, y) =
            kernels::add_layer_norm(x.inner(), branch.inner(), gamma.inner(), beta.inner(), 1e-6);
        assert_eq!(
            [as_f64(s), as_f64(y)],
            [got[0].clone(), got[1].clone()],
            "{dtype:?} without autodiff"
        );
    }
}

/// `vit::forward_blocks` (every residual add taken with the norm after it, by
/// `kernels::add_layer_norm`) against the same two blocks and final norm composed as a
/// pre-norm ViT writes them (`x + attn(norm1(x))`, `x + mlp(norm2(x))`, then the norm; burn's
/// adds), and `VitBlock::forward` against one block of that composition, in f64 on
/// `Autodiff<Flex>`: the outputs and the input's gradient within 1e-12 (measured: rounding of
/// the norms' sums taken in another order); a norm skipped or taken at the wrong add is off by
/// 1e-2 or more.
#[test]
fn vit_trunk_with_fused_adds_equals_the_blocks_composed() {
    use burn::module::{Module, ModuleMapper};
    use curriculum_ssl_models::layers::{gelu, linear_tokens, LayerNormConfig};
    use curriculum_ssl_models::vit::{forward_blocks, VitBlock};
    struct ToF64;
    impl ModuleMapper<Ad> for ToF64 {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<Ad, D>>) -> Param<Tensor<Ad, D>> {
            p.map(|t| t.cast(DType::F64))
        }
    }
    let device = Default::default();
    let blocks: Vec<VitBlock<Ad>> = (0..2)
        .map(|_| VitBlock::new(16, 2, 4.0, 1e-6, &device).map(&mut ToF64))
        .collect();
    let norm = LayerNormConfig::new(16)
        .with_epsilon(1e-6)
        .init::<Ad>(&device)
        .map(&mut ToF64);
    let block = |b: &VitBlock<Ad>, x: Tensor<Ad, 3>| {
        let x = x.clone() + b.attn.forward(b.norm1.forward(x));
        let hidden = gelu(linear_tokens(&b.mlp.fc1, b.norm2.forward(x.clone())));
        x + linear_tokens(&b.mlp.fc2, hidden)
    };
    let x = f64_tensor::<Ad, 3>([2, 7, 16], 31, &device).mul_scalar(2.0);
    let (y, dx) = value_and_grad(x.clone(), |x| forward_blocks(&blocks, x, &norm));
    let (y_ref, dx_ref) = value_and_grad(x.clone(), |x| {
        norm.forward(blocks.iter().fold(x, |x, b| block(b, x)))
    });
    assert!(
        largest(&y, &y_ref) < 1e-12,
        "trunk: {}",
        largest(&y, &y_ref)
    );
    assert!(
        largest(&dx, &dx_ref) < 1e-12,
        "trunk ∂x: {}",
        largest(&dx, &dx_ref)
    );
    let (y, dx) = value_and_grad(x.clone(), |x| blocks[0].forward(x));
    let (y_ref, dx_ref) = value_and_grad(x, |x| block(&blocks[0], x));
    assert!(
        largest(&y, &y_ref) < 1e-12,
        "block: {}",
        largest(&y, &y_ref)
    );
    assert!(
        largest(&dx, &dx_ref) < 1e-12,
        "block ∂x: {}",
        largest(&dx, &dx_ref)
    );
}

/// The products' error bound for `a · b` and its two gradients against `r` (`Σ (a·b) ⊙ r`):
/// each of `a·b`, `r·bᵀ` and `aᵀ·r` is a sum of products, and any order of summation (vector
/// lanes, FMA, blocking) computes `Σ_l x_l·y_l` within `γ_k·Σ_l |x_l·y_l|` of the exact sum,
/// `γ_k ≈ k·u` (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1), `u` the unit
/// roundoff. Two implementations therefore agree within twice that, entry by entry: these are
/// the bounds, from the absolute values' products in f64.
fn product_bounds<const D: usize>(
    a: &Tensor<Flex, D>,
    b: &Tensor<Flex, D>,
    r: &Tensor<Flex, D>,
    u: f64,
) -> [Vec<f64>; 3] {
    let (a, b, r) = (a.clone().abs(), b.clone().abs(), r.clone().abs());
    let k = |t: &Tensor<Flex, D>, axis: usize| t.dims()[axis] as f64;
    let bound = |t: Tensor<Flex, D>, k: f64| -> Vec<f64> {
        let v: Vec<f64> = t.into_data().to_vec().unwrap();
        v.into_iter().map(|s| 2.0 * (k + 1.0) * u * s).collect()
    };
    [
        bound(a.clone().matmul(b.clone()), k(&a, D - 1)),
        bound(
            r.clone().matmul(b.clone().swap_dims(D - 2, D - 1)),
            k(&b, D - 1),
        ),
        bound(a.clone().swap_dims(D - 2, D - 1).matmul(r), k(&a, D - 2)),
    ]
}

/// `Σ run(a, b) ⊙ r` on `Autodiff<Flex>`: the output and the gradients of `a` and `b`.
fn product_value_and_grads<const D: usize>(
    a: Tensor<Ad, D>,
    b: Tensor<Ad, D>,
    r: Tensor<Ad, D>,
    run: impl Fn(Tensor<Ad, D>, Tensor<Ad, D>) -> Tensor<Ad, D>,
) -> [Vec<f64>; 3] {
    let (a, b) = (a.require_grad(), b.require_grad());
    let y = run(a.clone(), b.clone());
    let grads = (y.clone() * r).sum().backward();
    [
        as_f64(y.inner()),
        as_f64(a.grad(&grads).unwrap()),
        as_f64(b.grad(&grads).unwrap()),
    ]
}

/// `kernels::matmul` (the products written into fresh outputs, forward and backward; the ViT's
/// attention) against burn's `matmul` on `Autodiff<Flex>`: values and both gradients, entry by
/// entry within [`product_bounds`] (`u` = 2⁻⁵³ in f64, 2⁻²⁴ in f32, the inputs the same f32
/// values on both sides), on a batch of attention-like products whose right side is a
/// transposed view (strided, as `k.swap_dims(2, 3)`) and on one product large enough for the
/// threaded GEMM. Without autodiff, `Flex` itself: the same values. A transposition missing
/// from a gradient is off by O(1), far outside the bounds (≤ 1e-3 in f32 here).
#[test]
fn matmul_kernel_equals_burns_matmul() {
    let device = Default::default();
    for dtype in [DType::F64, DType::F32] {
        let u = if dtype == DType::F64 {
            f64::EPSILON / 2.0
        } else {
            f32::EPSILON as f64 / 2.0
        };
        // [N, H, T, hd] · [N, H, hd, T] with the right side a view of [N, H, T, hd].
        let a = f64_tensor::<Ad, 4>([2, 3, 7, 9], 31, &device).cast(dtype);
        let b = f64_tensor::<Ad, 4>([2, 3, 5, 9], 32, &device).cast(dtype);
        let r = f64_tensor::<Ad, 4>([2, 3, 7, 5], 33, &device).cast(dtype);
        let ours = product_value_and_grads(a.clone(), b.clone(), r.clone(), |a, b| {
            kernels::matmul(a, b.swap_dims(2, 3))
        });
        let burns = product_value_and_grads(a.clone(), b.clone(), r.clone(), |a, b| {
            a.matmul(b.swap_dims(2, 3))
        });
        let f64s = |t: &Tensor<Ad, 4>| t.clone().inner().cast(DType::F64);
        let mut bounds = product_bounds(&f64s(&a), &f64s(&b).swap_dims(2, 3), &f64s(&r), u);
        // ∂b is the gradient of the view's storage: ∂(bᵀ) swapped back.
        let [_, _, bt] = &mut bounds;
        *bt = Tensor::<Flex, 4>::from_data(
            TensorData::new(bt.clone(), [2, 3, 9, 5]),
            (&device, DType::F64),
        )
        .swap_dims(2, 3)
        .into_data()
        .to_vec()
        .unwrap();
        check_within(&ours, &burns, &bounds, &format!("{dtype:?} batched"));
        // One large 2-D product: the threaded GEMM.
        let a = f64_tensor::<Ad, 2>([200, 190], 34, &device).cast(dtype);
        let b = f64_tensor::<Ad, 2>([190, 201], 35, &device).cast(dtype);
        let r = f64_tensor::<Ad, 2>([200, 201], 36, &device).cast(dtype);
        let ours = product_value_and_grads(a.clone(), b.clone(), r.clone(), kernels::matmul);
        let burns = product_value_and_grads(a.clone(), b.clone(), r.clone(), |a, b| a.matmul(b));
        let f64s = |t: &Tensor<Ad, 2>| t.clone().inner().cast(DType::F64);
        let bounds = product_bounds(&f64s(&a), &f64s(&b), &f64s(&r), u);
        check_within(&ours, &burns, &bounds, &format!("{dtype:?} 2-D"));
        let (a, b) = (a.inner(), b.inner());
        assert_eq!(
            kernels::matmul(a.clone(), b.clone()).into_data(),
            a.matmul(b).into_data(),
            "{dtype:?}: Flex without autodiff"
        );
    }
}

/// Every entry of `ours` within `bounds` of `burns` (values, then each gradient).
fn check_within(ours: &[Vec<f64>], burns: &[Vec<f64>], bounds: &[Vec<f64>], what: &str) {
    for (i, ((a, b), bound)) in ours.iter().zip(burns).zip(bounds).enumerate() {
        assert_eq!(a.len(), b.len());
        for (e, ((x, y), m)) in a.iter().zip(b).zip(bound).enumerate() {
            assert!(
                (x - y).abs() <= *m,
                "{what}, output {i} entry {e}: {x} against {y}, bound {m}"
            );
        }
    }
}

/// `kernels::linear` (what `layers::linear_tokens` and the ViT's attention call: the bias
/// written into the output before the product, its gradient one pass of column sums) against
/// burn's `module::linear` (what `Linear::forward` calls) on `Autodiff<Flex>`, on tokens `[N, T, k]` and a weight that is a
/// column block of a wider one (a strided view, as the attention's `qkv` parts): values and the
/// gradients of `x`, `w` and `b`, entry by entry within [`product_bounds`] of the rows' products
/// (one term more for the bias add), the bias gradient within `2·γ_rows·Σ|r|` (its sums of 70
/// rows; ours in f64), the wide weight's other columns exactly 0 on both sides. A bias gradient
/// of one row or a missing transposition is off by O(1), far outside.
#[test]
fn linear_kernel_equals_burns_linear() {
    let device = Default::default();
    let [n, t, k, out] = [5, 14, 24, 10];
    for dtype in [DType::F64, DType::F32] {
        let u = if dtype == DType::F64 {
            f64::EPSILON / 2.0
        } else {
            f32::EPSILON as f64 / 2.0
        };
        let x = f64_tensor::<Ad, 3>([n, t, k], 41, &device).cast(dtype);
        let wide = f64_tensor::<Ad, 2>([k, 30], 42, &device).cast(dtype);
        let bias = f64_tensor::<Ad, 1>([out], 43, &device).cast(dtype);
        let r = f64_tensor::<Ad, 3>([n, t, out], 44, &device).cast(dtype);
        let run = |kernel: bool| -> [Vec<f64>; 4] {
            let (x, wide, bias) = (
                x.clone().require_grad(),
                wide.clone().require_grad(),
                bias.clone().require_grad(),
            );
            let w = wide.clone().slice([0..k, 12..12 + out]);
            let y = if kernel {
                kernels::linear(x.clone(), w, Some(bias.clone()))
            } else {
                // What `Linear::forward` calls.
                burn::tensor::module::linear(x.clone(), w, Some(bias.clone()))
            };
            let grads = (y.clone() * r.clone()).sum().backward();
            [
                as_f64(y.inner()),
                as_f64(x.grad(&grads).unwrap()),
                as_f64(wide.grad(&grads).unwrap()),
                as_f64(bias.grad(&grads).unwrap()),
            ]
        };
        let f64s = |t: &Tensor<Ad, 3>| {
            t.clone()
                .inner()
                .cast(DType::F64)
                .reshape([n * t_of(t), t.dims()[2]])
        };
        fn t_of(t: &Tensor<Ad, 3>) -> usize {
            t.dims()[1]
        }
        let w = wide
            .clone()
            .inner()
            .cast(DType::F64)
            .slice([0..k, 12..12 + out]);
        let b: Vec<f64> = bias
            .clone()
            .inner()
            .cast(DType::F64)
            .into_data()
            .to_vec()
            .unwrap();
        let [mut values, dx, dw] = product_bounds(&f64s(&x), &w, &f64s(&r), u);
        for (e, v) in values.iter_mut().enumerate() {
            *v += 2.0 * (k as f64 + 1.0) * u * b[e % out].abs();
        }
        let mut dwide = vec![0.0; k * 30];
        for (e, v) in dw.iter().enumerate() {
            dwide[e / out * 30 + 12 + e % out] = *v;
        }
        let rows = (n * t) as f64;
        let r_abs: Vec<f64> = f64s(&r).abs().sum_dim(0).into_data().to_vec().unwrap();
        let db: Vec<f64> = r_abs.iter().map(|s| 2.0 * (rows + 1.0) * u * s).collect();
        check_within(
            &run(true),
            &run(false),
            &[values, dx, dwide, db],
            &format!("{dtype:?}"),
        );
    }
}
