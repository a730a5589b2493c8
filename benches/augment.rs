//! Two-view MoCo v2 augmentation (small-image variant) of a batch of 256 32×32 RGB images on the
//! CPU backend (burn's `Flex`): upload of the bytes, then both views (crop, flip, colour jitter,
//! grayscale, blur, normalisation), per-sample random parameters.
//!
//! Run: `cargo bench --bench augment`. The torchvision counterpart is `benches/pytorch/augment.py`;
//! the numbers side by side are in `benches/README.md`.
//!
//! `AUGMENT_SIDE=224 cargo bench --bench augment` times instead what a streamed run does on the
//! CPU after the loader: two views of 64 images already cut at 224 px (as `StreamLoader` hands
//! them over) through the rest of MoCo v2's and SimCLR's ImageNet pipelines (flip, colour
//! jitter, grayscale, a 23-pixel blur, normalisation), and each stage alone. The torchvision
//! counterpart is `benches/pytorch/augment_224.py`.

use burn::backend::Flex;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use curriculum_ssl::augment::crop::CropBox;
use curriculum_ssl::augment::host::{self, HostImages, HostJitter, HostView};
use curriculum_ssl::data::HostBatch;
use curriculum_ssl::method::Progress;
use curriculum_ssl::pipeline::{PipelineConfig, Preset, ViewSource};

type B = Flex;

const N: usize = 256;

fn batch() -> HostBatch {
    batch_of(N, 32, 12345)
}

/// Deterministic pseudo-random bytes (an LCG): `n` images of `side`×`side`×3.
fn batch_of(n: usize, side: usize, seed: u32) -> HostBatch {
    let mut s: u32 = seed;
    let pixels = (0..n * side * side * 3)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 24) as u8
        })
        .collect();
    HostBatch {
        pixels,
        len: n,
        height: side,
        width: side,
        channels: 3,
        labels: None,
        indices: (0..n).collect(),
    }
}

/// Images per batch at 224 px.
const N224: usize = 64;

/// The streamed path at 224 px (see the module docs).
fn bench_224(c: &mut Criterion) {
    let device = Default::default();
    let boxes = vec![
        CropBox {
            top: 0,
            left: 0,
            height: 224,
            width: 224,
        };
        N224
    ];
    let bytes = [1u32, 2].map(|seed| batch_of(N224, 224, seed));
    // What `FeedBatch::upload` hands the augmenter: the views uploaded (the tensor path), or
    // their bytes (the host path); made in the timed loop, as a run makes them every step.
    let source = |host: bool| -> ViewSource<B> {
        if host {
            ViewSource::HostCut {
                views: bytes
                    .iter()
                    .map(|b| {
                        let images = HostImages {
                            pixels: b.pixels.clone(),
                            shape: [N224, 224, 224, 3],
                        };
                        (images, boxes.clone())
                    })
                    .collect(),
                device,
            }
        } else {
            ViewSource::Cut(
                bytes
                    .iter()
                    .map(|b| (b.to_device::<B>(&device).images, boxes.clone()))
                    .collect(),
            )
        }
    };
    let mut group = c.benchmark_group("augment_224");
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(20));
    group.throughput(Throughput::Elements(N224 as u64));
    for (name, preset) in [("moco_v2", Preset::MocoV2), ("simclr", Preset::SimClr)] {
        let mut config = PipelineConfig::preset(preset, 224, 3);
        // The loader cut the crops: the device does the rest.
        config.view1.crop = None;
        config.view2.crop = None;
        let aug = config.init(3).expect("valid preset");
        // The tensor path (the GPU's), then the host path the recipes take on the CPU.
        for host in [false, true] {
            let aug = aug.clone().with_host_ops(host);
            let mut step = 0usize;
            let path = if host { "_host" } else { "" };
            group.bench_function(format!("{name}_two_cut_views_{N224}x224_flex{path}"), |b| {
                b.iter(|| {
                    step += 1;
                    let progress = Progress {
                        step,
                        total_steps: 1 << 20,
                        epoch: 0,
                        total_epochs: 1,
                    };
                    let v = aug.redrawn_views_from(&source(host), progress, 0);
                    (v.view1.into_data(), v.view2.into_data())
                })
            });
        }
        if preset != Preset::MocoV2 {
            continue;
        }
        // Where the time goes: each stage of one view alone, on the whole batch.
        let cfg = aug.config().view1.clone();
        let x0 = batch_of(N224, 224, 1).to_device::<B>(&device).images;
        let mut rng = aug.rng(0);
        let flip = cfg.hflip.expect("preset has a flip");
        let flips = flip.sample(&mut rng, N224);
        group.bench_function("stage_flip_224", |b| {
            b.iter(|| flip.apply(x0.clone(), &flips).into_data())
        });
        let jitter = cfg.jitter.expect("preset has a jitter");
        let jp = jitter.sample(&mut rng, N224);
        group.bench_function("stage_colour_jitter_224", |b| {
            b.iter(|| jitter.apply(x0.clone(), &jp).into_data())
        });
        let gray = cfg.grayscale.expect("preset has a grayscale");
        let gp = gray.sample(&mut rng, N224);
        group.bench_function("stage_grayscale_224", |b| {
            b.iter(|| gray.apply(x0.clone(), &gp).into_data())
        });
        let blur = cfg.blur.expect("preset has a blur");
        let kernels = blur.sample(&mut rng, N224);
        group.bench_function("stage_blur_23_224", |b| {
            b.iter(|| blur.apply(x0.clone(), &kernels).into_data())
        });
        let normalize = cfg.normalize.clone().expect("preset has a normalisation");
        group.bench_function("stage_normalize_224", |b| {
            b.iter(|| normalize.apply(x0.clone()).into_data())
        });
        // The host path's stages (`augment::host`), one view of the same batch.
        let kernels32: Vec<Option<Vec<f32>>> = kernels
            .iter()
            .map(|k| (!blur.is_identity(k)).then(|| k.iter().map(|&v| v as f32).collect()))
            .collect();
        let jp32 = HostJitter {
            enabled: jitter.enabled(),
            apply: &jp.apply,
            order: &jp.order,
            factors: &jp.factors,
        };
        let host_stages: [(&str, HostView); 4] = [
            ("stage_host_read_back_and_upload_224", HostView::default()),
            (
                "stage_host_colour_jitter_224",
                HostView {
                    jitter: Some(jp32),
                    ..HostView::default()
                },
            ),
            (
                "stage_host_blur_23_224",
                HostView {
                    blur: Some(&kernels32),
                    ..HostView::default()
                },
            ),
            (
                "stage_host_all_224",
                HostView {
                    flip: Some(&flips),
                    jitter: Some(jp32),
                    grayscale: Some(&gp),
                    blur: Some(&kernels32),
                    solarize: None,
                    normalize: Some(&normalize),
                },
            ),
        ];
        for (name, ops) in host_stages {
            group.bench_function(name, |b| {
                b.iter(|| host::apply(x0.clone(), &ops).into_data())
            });
        }
        group.bench_function("stage_upload_224", |b| {
            let host = batch_of(N224, 224, 1);
            b.iter(|| host.to_device::<B>(&device).images.into_data())
        });
    }
    group.finish();
}

fn bench(c: &mut Criterion) {
    if std::env::var("AUGMENT_SIDE").is_ok_and(|s| s == "224") {
        return bench_224(c);
    }
    let device = Default::default();
    let host = batch();
    let aug = PipelineConfig::preset(Preset::MocoV2, 32, 3)
        .init(3)
        .expect("valid preset");
    let mut group = c.benchmark_group("augment");
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(10));
    group.throughput(Throughput::Elements(N as u64));
    for host_ops in [false, true] {
        let aug = aug.clone().with_host_ops(host_ops);
        let path = if host_ops { "_host" } else { "" };
        let mut key = 0u64;
        group.bench_function(format!("moco_v2_two_views_256x32x32_flex{path}"), |b| {
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
    }
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
