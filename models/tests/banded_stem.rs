//! The banded convolution (`curriculum_ssl_models::banded_conv`) against burn's own `conv2d`,
//! in f64: outputs and the gradients of the weight, the bias and the input; and the small ResNet
//! with its stem run either way.
//!
//! Kept out of the crate's unit tests: among them, after the ones on the CPU backend (`Flex`,
//! f32) had run in the same process, `NdArray<f64>` layers were created in f32 (burn keeps a
//! default float type per device, process-wide).

use crate::common::fresh_leaves;
use burn::backend::{Autodiff, NdArray};
use burn::nn::conv::Conv2dConfig;
use burn::nn::PaddingConfig2d;
use burn::prelude::*;
use curriculum_ssl_models::banded_conv::{banded_conv2d, MAX_BAND_ENTRIES};
use curriculum_ssl_models::{Backbone, BlockKind, ResNet, ResNetConfig, Stem};

type Ad = Autodiff<NdArray<f64>>;

fn values<const D: usize>(t: Tensor<NdArray<f64>, D>) -> Vec<f64> {
    t.into_data().to_vec().unwrap()
}

fn assert_close(label: &str, a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{label}: lengths");
    let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * scale,
            "{label}[{i}]: banded {x} against burn's conv2d {y}"
        );
    }
}

/// The banded product against burn's own convolution in f64: the output and the gradients
/// of the weight, the bias and the input, for a loss that weights every output differently.
fn check(
    [n, c, h, w]: [usize; 4],
    c_out: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: PaddingConfig2d,
    bias: bool,
) {
    let device = Default::default();
    let conv = Conv2dConfig::new([c, c_out], kernel)
        .with_stride(stride)
        .with_padding(padding)
        .with_bias(bias)
        .init::<Ad>(&device);
    // Parameters are drawn lazily, by each copy on its own: draw them once for all the copies.
    let conv = conv.clone().load_record(conv.into_record());
    let data: Vec<f64> = (0..n * c * h * w)
        .map(|i| ((i as f64) * 0.731).sin())
        .collect();
    let x = Tensor::<Ad, 4>::from_data(TensorData::new(data, [n, c, h, w]), &device).require_grad();
    // Each run through leaves of its own (`common::fresh_leaves` says why).
    let run = |banded: bool| {
        let (x, conv) = (x.clone().detach().require_grad(), fresh_leaves(&conv));
        let y = if banded {
            banded_conv2d(x.clone(), &conv)
        } else {
            conv.forward(x.clone())
        };
        let dims = y.dims();
        let weights: Vec<f64> = (0..dims.iter().product::<usize>())
            .map(|i| ((i as f64) * 0.377).cos())
            .collect();
        let weights = Tensor::<Ad, 4>::from_data(TensorData::new(weights, dims), &device);
        let grads = (y.clone() * weights).sum().backward();
        let mut out = vec![values(y.inner()), values(x.grad(&grads).unwrap())];
        out.push(values(conv.weight.val().grad(&grads).unwrap()));
        if let Some(b) = &conv.bias {
            out.push(values(b.val().grad(&grads).unwrap()));
        }
        (dims, out)
    };
    let (dims, banded) = run(true);
    let (expected_dims, expected) = run(false);
    assert_eq!(dims, expected_dims, "output shape");
    for (label, (a, b)) in [
        "output",
        "input gradient",
        "weight gradient",
        "bias gradient",
    ]
    .iter()
    .zip(banded.iter().zip(&expected))
    {
        assert_close(label, a, b);
    }
}

#[test]
fn equals_burns_conv2d_on_the_small_resnet_stem() {
    // 1 → 8 channels, 7×7, stride 2, padding 3, on 28×28 (the CPU default backbone).
    check(
        [3, 1, 28, 28],
        8,
        [7, 7],
        [2, 2],
        PaddingConfig2d::Explicit(3, 3, 3, 3),
        false,
    );
}

#[test]
fn equals_burns_conv2d_for_other_shapes_strides_and_paddings() {
    let cases = [
        // RGB, the CIFAR stem's 3×3 stride 1.
        (
            [2, 3, 8, 8],
            4,
            [3, 3],
            [1, 1],
            PaddingConfig2d::Explicit(1, 1, 1, 1),
            true,
        ),
        // A non-square image and kernel, unequal strides and paddings, rows and columns the
        // stride does not divide.
        (
            [2, 2, 9, 11],
            3,
            [3, 5],
            [3, 2],
            PaddingConfig2d::Explicit(1, 2, 1, 2),
            true,
        ),
        // No padding; a kernel as high as the image.
        (
            [2, 1, 5, 7],
            2,
            [5, 3],
            [1, 2],
            PaddingConfig2d::Valid,
            false,
        ),
    ];
    for (shape, c_out, kernel, stride, padding, bias) in cases {
        check(shape, c_out, kernel, stride, padding, bias);
    }
}

#[test]
fn falls_back_to_the_layer_where_it_does_not_apply() {
    // Dilation is not covered, and neither is a band above the bound: both must still give
    // the layer's own output.
    let device = Default::default();
    let dilated = Conv2dConfig::new([1, 2], [3, 3])
        .with_dilation([2, 2])
        .init::<NdArray<f64>>(&device);
    let x = Tensor::<NdArray<f64>, 4>::ones([1, 1, 7, 7], &device);
    assert_eq!(
        values(banded_conv2d(x.clone(), &dilated)),
        values(dilated.forward(x))
    );
    let large = Conv2dConfig::new([3, 64], [7, 7])
        .with_stride([2, 2])
        .with_padding(PaddingConfig2d::Explicit(3, 3, 3, 3))
        .init::<NdArray<f64>>(&device);
    let x = Tensor::<NdArray<f64>, 4>::ones([1, 3, 96, 96], &device);
    const { assert!(64 * 48 * 3 * 96 * 7 > MAX_BAND_ENTRIES) };
    assert_eq!(
        values(banded_conv2d(x.clone(), &large)),
        values(large.forward(x))
    );
}

#[test]
fn banded_stem_gives_the_features_and_gradients_of_the_plain_stem() {
    // The small ResNet with the same weights, its stem (ImageNet's 7×7 stride 2, and the 3×3
    // stride-2 stem of `small-2x`) run both ways, in training mode (batch statistics): the
    // features and the stem's weight gradient agree to rounding.
    for stem in [Stem::ImageNet, Stem::Stride2] {
        stem_run_both_ways(stem);
    }
}

fn stem_run_both_ways(stem: Stem) {
    let device = Default::default();
    let config = ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_base_width(4)
        .with_stem(stem)
        .with_in_channels(1);
    let plain = config.init::<Ad>(&device);
    let banded = config
        .clone()
        .with_banded_stem(true)
        .init::<Ad>(&device)
        .load_record(plain.clone().into_record());
    // `plain`'s own parameters are drawn lazily: load the values its copy drew.
    let plain = plain.load_record(banded.clone().into_record());
    assert!(!plain.banded_stem && banded.banded_stem);
    let data: Vec<f64> = (0..4 * 28 * 28).map(|i| (i as f64 * 0.19).sin()).collect();
    let x = Tensor::<Ad, 4>::from_data(TensorData::new(data, [4, 1, 28, 28]), &device);
    // The two networks share their parameter tensors, so each run goes through a copy with
    // leaves of its own (`fresh_leaves`; CI once saw `grad` return `None` here without).
    let run = |net: &ResNet<Ad>| {
        let net = fresh_leaves(net);
        let features = net.forward_features(x.clone());
        let grads = (features.clone() * features.clone()).sum().backward();
        let stem = net
            .conv1
            .weight
            .val()
            .grad(&grads)
            .expect("the stem's weight has a gradient");
        (
            features.inner().into_data().to_vec::<f64>().unwrap(),
            stem.into_data().to_vec::<f64>().unwrap(),
        )
    };
    let (a, b) = (run(&plain), run(&banded));
    assert_eq!((a.0.len(), a.1.len()), (b.0.len(), b.1.len()));
    for (i, (x, y)) in
        a.0.iter()
            .chain(&a.1)
            .zip(b.0.iter().chain(&b.1))
            .enumerate()
    {
        assert!(
            (x - y).abs() <= 1e-10 * (1.0 + y.abs()),
            "{stem:?}: entry {i} of {} features then {} gradients: {x} against {y}",
            a.0.len(),
            a.1.len()
        );
    }
}
