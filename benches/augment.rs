//! Two-view MoCo v2 augmentation (small-image variant) of a batch of 256 32×32 RGB images on the
//! CPU backend (burn's `Flex`): upload of the bytes, then both views (crop, flip, colour jitter,
//! grayscale, blur, normalisation), per-sample random parameters.
//!
//! Run: `cargo bench --bench augment`. The torchvision counterpart is `benches/pytorch/augment.py`;
//! the numbers side by side are in `benches/README.md`.

use burn::backend::Flex;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use curriculum_ssl::data::HostBatch;
use curriculum_ssl::pipeline::{PipelineConfig, Preset};

type B = Flex;

const N: usize = 256;

fn batch() -> HostBatch {
    // Deterministic pseudo-random bytes (an LCG), 256 images of 32×32×3.
    let mut s: u32 = 12345;
    let pixels = (0..N * 32 * 32 * 3)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 24) as u8
        })
        .collect();
    HostBatch {
        pixels,
        len: N,
        height: 32,
        width: 32,
        channels: 3,
        labels: None,
        indices: (0..N).collect(),
    }
}

fn bench(c: &mut Criterion) {
    let device = Default::default();
    let host = batch();
    let aug = PipelineConfig::preset(Preset::MocoV2, 32, 3)
        .init(3)
        .expect("valid preset");
    let mut group = c.benchmark_group("augment");
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(10));
    group.throughput(Throughput::Elements(N as u64));
    let mut key = 0u64;
    group.bench_function("moco_v2_two_views_256x32x32_flex", |b| {
        b.iter(|| {
            key += 1;
            let x = host.to_device::<B>(&device).images;
            let v = aug.two_views(x, key);
            // Materialise both views.
            let a = v.view1.into_data();
            let b2 = v.view2.into_data();
            (a, b2)
        })
    });
    // Where the time goes: each stage of one view on its own, same batch.
    let cfg = aug.config().view1.clone();
    let x0 = host.to_device::<B>(&device).images;
    let mut rng = aug.rng(0);
    let crop = cfg.crop.expect("preset has a crop");
    let boxes = crop.sample(&mut rng, N, 32, 32);
    group.bench_function("stage_crop", |b| {
        b.iter(|| crop.apply(x0.clone(), &boxes).into_data())
    });
    let jitter = cfg.jitter.expect("preset has a jitter");
    let jp = jitter.sample(&mut rng, N);
    group.bench_function("stage_colour_jitter", |b| {
        b.iter(|| jitter.apply(x0.clone(), &jp).into_data())
    });
    let blur = cfg.blur.expect("preset has a blur");
    let kernels = blur.sample(&mut rng, N);
    group.bench_function("stage_blur", |b| {
        b.iter(|| blur.apply(x0.clone(), &kernels).into_data())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
