//! Forward + backward of each backbone at batch 64 on the CPU backend (`Autodiff<Flex>`).
//!
//! `cargo bench --bench backbones`; set `BACKBONES=small_resnet,small_resnet_banded_stem` (the CPU
//! default backbone with its stem as burn's convolution or as banded products) or
//! `BACKBONES=resnet18_cifar,lenet5` to run a subset and
//! `BENCH_BATCH` to change the batch size. The same work in PyTorch: `benches/pytorch/backbones.py`;
//! results side by side in `benches/README.md`.

use std::time::Duration;

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use curriculum_ssl_models::{
    Backbone, BlockKind, EfficientNetConfig, LeNetConfig, MobileNetV3Config, ResNetConfig, Stem,
    VggConfig, WideResNetConfig,
};

type B = Autodiff<Flex>;

#[path = "common/allocator.rs"]
mod allocator;

/// One training-mode forward, a scalar loss (mean of the features) and its backward pass.
fn step<M: Backbone<B>>(model: &M, images: &Tensor<B, 4>) {
    let loss = model.forward_features(images.clone()).mean();
    let grads = loss.backward();
    std::hint::black_box(grads);
}

/// Benchmarks the backbone `model()` builds, unless `BACKBONES` leaves `name` out: the model is
/// built only when it runs (building every backbone first took 4–6 % of a filtered profile).
fn run<M: Backbone<B>>(
    c: &mut Criterion,
    name: &str,
    model: impl FnOnce() -> M,
    shape: [usize; 3],
) {
    let wanted = std::env::var("BACKBONES").ok();
    if let Some(list) = &wanted {
        if !list.split(',').any(|n| n.trim() == name) {
            return;
        }
    }
    let model = model();
    let batch: usize = std::env::var("BENCH_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(64);
    let device = Default::default();
    let images = Tensor::<B, 4>::random(
        [batch, shape[0], shape[1], shape[2]],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let mut group = c.benchmark_group("backbones");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(5))
        .sampling_mode(criterion::SamplingMode::Flat)
        .throughput(Throughput::Elements(batch as u64));
    group.bench_function(name, |b| b.iter(|| step(&model, &images)));
    group.finish();
}

fn backbones(c: &mut Criterion) {
    allocator::keep_freed_pages();
    let device = Default::default();
    // The CPU default backbone (one basic block per stage, widths 8-64, ImageNet stem) on
    // Fashion-MNIST's 28×28×1, with its stem as burn's convolution and as banded products.
    let small = ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_base_width(8)
        .with_in_channels(1);
    run(c, "small_resnet", || small.init::<B>(&device), [1, 28, 28]);
    run(
        c,
        "small_resnet_banded_stem",
        || small.with_banded_stem(true).init::<B>(&device),
        [1, 28, 28],
    );
    let cifar = |config: ResNetConfig| config.with_stem(Stem::Cifar).init::<B>(&device);
    run(
        c,
        "resnet18_cifar",
        || cifar(ResNetConfig::resnet18()),
        [3, 32, 32],
    );
    run(
        c,
        "resnet34_cifar",
        || cifar(ResNetConfig::resnet34()),
        [3, 32, 32],
    );
    run(
        c,
        "resnet50_cifar",
        || cifar(ResNetConfig::resnet50()),
        [3, 32, 32],
    );
    run(
        c,
        "efficientnet_b0",
        || EfficientNetConfig::b0().init::<B>(&device),
        [3, 32, 32],
    );
    run(
        c,
        "efficientnet_b1",
        || EfficientNetConfig::b1().init::<B>(&device),
        [3, 32, 32],
    );
    run(
        c,
        "mobilenet_v3_large",
        || MobileNetV3Config::large().init::<B>(&device),
        [3, 32, 32],
    );
    run(
        c,
        "mobilenet_v3_small",
        || MobileNetV3Config::small().init::<B>(&device),
        [3, 32, 32],
    );
    run(
        c,
        "wrn_16_8",
        || WideResNetConfig::wrn_16_8().init::<B>(&device),
        [3, 32, 32],
    );
    run(
        c,
        "wrn_28_10",
        || WideResNetConfig::wrn_28_10().init::<B>(&device),
        [3, 32, 32],
    );
    run(
        c,
        "vgg16_bn",
        || VggConfig::vgg16_bn().init::<B>(&device),
        [3, 32, 32],
    );
    run(
        c,
        "lenet5",
        || LeNetConfig::lenet5().init::<B>(&device),
        [1, 28, 28],
    );
}

criterion_group!(benches, backbones);
criterion_main!(benches);
