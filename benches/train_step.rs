//! One training step (two views forward, backward, SGD update, EMA / queue update) of SimCLR,
//! MoCo v2, BYOL and SimSiam with ResNet-18 (CIFAR stem) at batch 128 on 32×32 images, on the
//! CPU backend (`Autodiff<Flex>`). Augmentation is left out (timed in `benches/augment.rs`);
//! the views are fixed random tensors, as in the PyTorch script.
//!
//! `cargo bench --bench train_step`; `METHODS=simclr,byol` runs a subset, `BENCH_BATCH` sets
//! the batch, and `VIEW_THREADS=1` back-propagates the two views' passes on two threads
//! (`SslMethod::set_view_passes`, what the recipes do on the CPU; off by default here, as in
//! the library). The same steps in PyTorch: `benches/pytorch/train_step.py`; results side by side
//! in `benches/README.md`.

use std::time::Duration;

use burn::backend::{Autodiff, Flex};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl_models::{ResNet, ResNetConfig, Stem};

type B = Autodiff<Flex>;

#[path = "common/allocator.rs"]
mod allocator;
#[path = "common/step.rs"]
mod step;

fn resnet18(device: &<B as burn::tensor::backend::BackendTypes>::Device) -> ResNet<B> {
    ResNetConfig::resnet18().with_stem(Stem::Cifar).init(device)
}

fn batch() -> usize {
    std::env::var("BENCH_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(128)
}

fn run<S: SslMethod<B>>(c: &mut Criterion, name: &str, build: impl FnOnce() -> S) {
    if let Ok(list) = std::env::var("METHODS") {
        if !list.split(',').any(|n| n.trim() == name) {
            return;
        }
    }
    let n = batch();
    let device = Default::default();
    let mut method = build();
    method.set_view_passes(if std::env::var("VIEW_THREADS").is_ok_and(|v| v == "1") {
        ViewPasses::Threads
    } else {
        ViewPasses::Separate
    });
    let mut optimizer = SgdConfig::new().init::<B, S::Online>().unwrap();
    let views = step::fixed_views::<B>(n, &device);
    let mut index = 0;
    let mut group = c.benchmark_group("train_step");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(10))
        .sampling_mode(criterion::SamplingMode::Flat)
        .throughput(Throughput::Elements(n as u64));
    group.bench_function(name, |b| {
        b.iter(|| {
            step::train_step(&mut method, &mut optimizer, &views, index);
            index += 1;
        })
    });
    group.finish();
}

fn train_step(c: &mut Criterion) {
    allocator::keep_freed_pages();
    let device = Default::default();
    run(c, "simclr", || {
        SimClrConfig::new()
            .init(|_| resnet18(&device), &device)
            .unwrap()
    });
    run(c, "moco_v2", || {
        MocoConfig::moco_v2()
            .init(resnet18, batch(), &device)
            .unwrap()
    });
    run(c, "byol", || {
        ByolConfig::new().init(resnet18, &device).unwrap()
    });
    run(c, "simsiam", || {
        SimSiamConfig::new()
            .init(|_| resnet18(&device), &device)
            .unwrap()
    });
}

criterion_group!(benches, train_step);
criterion_main!(benches);
