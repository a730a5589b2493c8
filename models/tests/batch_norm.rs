//! `BatchNorm2d` follows PyTorch: batch statistics (biased variance) in training, running
//! averages updated with the unbiased variance, running statistics in inference.

mod common;

use burn::module::AutodiffModule;
use burn::prelude::*;
use common::{max_abs_diff, Infer, Train};
use curriculum_ssl_models::layers::BatchNorm2dConfig;

#[test]
fn train_step_then_inference() {
    let device = Default::default();
    let bn = BatchNorm2dConfig::new(2).init::<Train>(&device);
    // Channel 0 holds 1, 2, 3, 4; channel 1 holds 0, 0, 0, 8 (batch 2, 1×2 maps).
    let x = Tensor::<Train, 1>::from_floats([1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0, 8.0], &device)
        .reshape([2, 2, 1, 2]);
    let y = bn.forward(x);
    // Channel 0: mean 2.5, biased variance 1.25 → (x − 2.5) / sqrt(1.25 + 1e-5).
    let s0 = (1.25f32 + 1e-5).sqrt();
    // Channel 1: mean 2, biased variance 12 → (x − 2) / sqrt(12 + 1e-5).
    let s1 = (12f32 + 1e-5).sqrt();
    let expected = Tensor::<Infer, 1>::from_floats(
        [
            -1.5 / s0,
            -0.5 / s0,
            -2.0 / s1,
            -2.0 / s1,
            0.5 / s0,
            1.5 / s0,
            -2.0 / s1,
            6.0 / s1,
        ],
        &device,
    )
    .reshape([2, 2, 1, 2]);
    assert!(max_abs_diff(y.inner(), expected) < 1e-6);

    // Running averages with momentum 0.1: mean 0.1·[2.5, 2]; variance 0.9 + 0.1·unbiased, where
    // the unbiased variances are 5/3 and 16.
    let valid = bn.valid();
    let mean = Tensor::<Infer, 1>::from_floats([0.25, 0.2], &device);
    let var = Tensor::<Infer, 1>::from_floats([0.9 + 0.5 / 3.0, 0.9 + 1.6], &device);
    assert!(max_abs_diff(valid.running_mean.value(), mean.clone()) < 1e-6);
    assert!(max_abs_diff(valid.running_var.value(), var.clone()) < 1e-6);

    // Inference uses them.
    let x = Tensor::<Infer, 1>::from_floats([1.0, 1.0], &device).reshape([1, 2, 1, 1]);
    let y = valid.forward(x);
    let expected = Tensor::<Infer, 1>::from_floats([1.0, 1.0], &device)
        .sub(mean)
        .div(var.add_scalar(1e-5).sqrt())
        .reshape([1, 2, 1, 1]);
    assert!(max_abs_diff(y, expected) < 1e-6);
}
