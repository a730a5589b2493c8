//! Zero-initialised residual branches (ResNet) and stochastic depth (EfficientNet).

use crate::common::{max_abs_diff, Infer, Train};
use burn::prelude::*;
use curriculum_ssl_models::{Backbone, EfficientNetConfig, ResNetConfig};

fn weight_sum<B: Backend>(t: Tensor<B, 1>) -> f32 {
    t.abs().sum().into_scalar().elem::<f32>()
}

#[test]
fn zero_init_residual_zeroes_the_last_norm_of_each_branch() {
    let device = Default::default();
    for config in [ResNetConfig::resnet18(), ResNetConfig::resnet50()] {
        let plain = config.clone().with_base_width(8).init::<Infer>(&device);
        let zeroed = config
            .with_base_width(8)
            .with_zero_init_residual(true)
            .init::<Infer>(&device);
        for (p, z) in plain
            .layer1
            .iter()
            .chain(&plain.layer4)
            .zip(zeroed.layer1.iter().chain(&zeroed.layer4))
        {
            let (last_p, last_z) = match (&p.bn3, &z.bn3) {
                (Some(a), Some(b)) => (a, b),
                _ => (&p.bn2, &z.bn2),
            };
            assert_eq!(weight_sum(last_z.weight.val()), 0.0);
            assert!(weight_sum(last_p.weight.val()) > 0.0);
            // The other norms keep their unit scale.
            assert!(weight_sum(z.bn1.weight.val()) > 0.0);
        }
    }
}

/// The zeroed scales are trainable leaves: a backward pass reaches them (they were once
/// replaced by an untracked `zeros_like`, which no optimiser step could move).
#[test]
fn zero_initialised_scales_get_gradients() {
    let device = Default::default();
    let net = ResNetConfig::resnet18()
        .with_base_width(8)
        .with_zero_init_residual(true)
        .init::<Train>(&device);
    let x = Tensor::<Train, 4>::ones([2, 3, 32, 32], &device);
    let grads = net.forward_features(x).sum().backward();
    for block in net.layer1.iter().chain(&net.layer4) {
        let grad = block.bn2.weight.val().grad(&grads);
        assert!(grad.is_some(), "the zeroed scale has no gradient");
    }
}

#[test]
fn stochastic_depth_only_in_training() {
    let device = Default::default();
    let x =
        Tensor::<Infer, 4>::random([4, 3, 32, 32], burn::tensor::Distribution::Default, &device);
    let with_sd = EfficientNetConfig::new(0.25, 0.5).with_stochastic_depth_prob(0.9);
    let model = with_sd.init::<Train>(&device);
    // Training: batch-norm statistics are deterministic, so two passes differ only by the
    // randomly dropped residual branches.
    let a = model
        .forward_features(Tensor::from_inner(x.clone()))
        .inner();
    let b = model
        .forward_features(Tensor::from_inner(x.clone()))
        .inner();
    assert!(
        max_abs_diff(a, b) > 1e-4,
        "stochastic depth had no effect in training"
    );
    // Without stochastic depth the two passes agree.
    let model = with_sd
        .clone()
        .with_stochastic_depth_prob(0.0)
        .init::<Train>(&device);
    let a = model
        .forward_features(Tensor::from_inner(x.clone()))
        .inner();
    let b = model
        .forward_features(Tensor::from_inner(x.clone()))
        .inner();
    assert!(max_abs_diff(a, b) < 1e-6);
    // Inference: the identity.
    let model = with_sd.init::<Infer>(&device);
    let a = model.forward_features(x.clone());
    let b = model.forward_features(x);
    assert!(max_abs_diff(a, b) < 1e-6);
}
