//! Every augmentation operation and preset on the GPU path against the CPU, from the same
//! images and the same host draws: the per-sample parameters come from the host generator, so
//! both backends apply the same crops, flips, jitter factors, kernels and flags, and any
//! difference is the kernels'.

use burn::prelude::*;
use curriculum_ssl::augment::blur::{gaussian_blur, gaussian_kernel1d, RandomGaussianBlur};
use curriculum_ssl::augment::colour::*;
use curriculum_ssl::augment::crop::{resized_crop, CropBox, RandomResizedCrop};
use curriculum_ssl::augment::flip::{hflip, RandomHorizontalFlip};
use curriculum_ssl::augment::mixup::{mixup, Mixup, MixupLambda};
use curriculum_ssl::augment::normalize::{Normalize, CIFAR10_MEAN, CIFAR10_STD};
use curriculum_ssl::augment::per_sample;
use curriculum_ssl::augment::rotate::{rot90, RandomRotation90};
use curriculum_ssl::augment::solarize::{solarize, RandomSolarize};
use curriculum_ssl::curriculum::rotation::{mix_rotated, rotate_in_boxes};
use curriculum_ssl::curriculum::{posterize, PolicyChoice};
use curriculum_ssl::curriculum::{
    MixupCurriculumConfig, SchedulerConfig, SelfPacedAutoAugmentConfig, StrengthCurriculumConfig,
};
use curriculum_ssl::method::Progress;
use curriculum_ssl::pipeline::PipelineConfig;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::harness::*;

const N: usize = 8;
const C: usize = 3;
const S: usize = 12;

/// Every operation applied to the same RGB batch `[8, 3, 12, 12]` on one backend, by name.
fn all_ops<B: Backend>(device: &B::Device) -> Vec<(String, Vec<f32>)> {
    let x = image_tensor::<B>(&pixels(N, C, S, S, 0.3), [N, C, S, S], device);
    let y = image_tensor::<B>(&pixels(N, C, S, S, 1.1), [N, C, S, S], device);
    let rng = |seed| StdRng::seed_from_u64(seed);
    let factors = |base: f32| -> Tensor<B, 4> {
        let f: Vec<f32> = (0..N).map(|i| base + 0.1 * i as f32).collect();
        per_sample::<B>(&f, device)
    };
    let mut out: Vec<(String, Tensor<B, 4>)> = Vec::new();
    let mut push = |name: &str, t: Tensor<B, 4>| {
        assert_eq!(&t.device(), device, "{name}: output device");
        out.push((name.to_string(), t))
    };

    // Geometry.
    let crop = RandomResizedCrop::new(S);
    let boxes = crop.sample(&mut rng(1), N, S, S);
    push("random resized crop", crop.apply(x.clone(), &boxes));
    let small: Vec<CropBox> = (0..N)
        .map(|i| CropBox {
            top: i % 3,
            left: (i + 1) % 4,
            height: 7 + i % 5,
            width: 6 + i % 6,
        })
        .collect();
    push(
        "resized crop to 8 x 8",
        resized_crop(x.clone(), &small, 8, 8),
    );
    let large = image_tensor::<B>(&pixels(N, C, 28, 28, 0.9), [N, C, 28, 28], device);
    let boxes28 = crop.sample(&mut rng(10), N, 28, 28);
    push("random resized crop 28 to 12", crop.apply(large, &boxes28));
    push("hflip", hflip(x.clone()));
    let flip = RandomHorizontalFlip { p: 0.5 };
    push(
        "random hflip",
        flip.apply(x.clone(), &flip.sample(&mut rng(2), N)),
    );
    for k in 1..4 {
        push(&format!("rot90 k={k}"), rot90(x.clone(), k));
    }
    let rotation = RandomRotation90 {
        max_quarter_turns: 3,
    };
    let ks = rotation.sample(&mut rng(3), N);
    push("random rotation", rotation.apply(x.clone(), &ks));

    // Colour.
    push("brightness", adjust_brightness(x.clone(), factors(0.5)));
    push("contrast", adjust_contrast(x.clone(), factors(0.4)));
    push("saturation", adjust_saturation(x.clone(), factors(0.2)));
    let hue: Vec<f32> = (0..N).map(|i| -0.4 + 0.1 * i as f32).collect();
    push("hue", adjust_hue(x.clone(), per_sample::<B>(&hue, device)));
    push("rgb to grayscale", rgb_to_grayscale(x.clone()));
    push("rgb to hsv", rgb_to_hsv(x.clone()));
    push("hsv to rgb", hsv_to_rgb(rgb_to_hsv(x.clone())));
    let jitter = ColorJitter::simclr(1.0);
    let params = jitter.sample(&mut rng(4), N);
    push("colour jitter", jitter.apply(x.clone(), &params));
    let gray = RandomGrayscale { p: 0.5 };
    push(
        "random grayscale",
        gray.apply(x.clone(), &gray.sample(&mut rng(5), N)),
    );

    // Blur, solarisation, mixup, normalisation.
    let blur = RandomGaussianBlur {
        kernel_size: RandomGaussianBlur::kernel_for(S),
        sigma: (0.1, 2.0),
        p: 1.0,
    };
    push(
        "random blur",
        blur.apply(x.clone(), &blur.sample(&mut rng(6), N)),
    );
    let kernels: Vec<Vec<f64>> = (0..N)
        .map(|i| gaussian_kernel1d(5, 0.5 + 0.2 * i as f64))
        .collect();
    push("gaussian blur k=5", gaussian_blur(x.clone(), &kernels));
    push("solarize", solarize(x.clone(), 0.5));
    let sol = RandomSolarize {
        threshold: 0.6,
        p: 0.5,
    };
    push(
        "random solarize",
        sol.apply(x.clone(), &sol.sample(&mut rng(7), N)),
    );
    push("mixup 0.3", mixup(x.clone(), y.clone(), 0.3));
    let beta = Mixup {
        lambda: MixupLambda::Beta { alpha: 1.0 },
    };
    let lambdas = beta.sample(&mut rng(8), N);
    push(
        "mixup per sample",
        beta.apply(x.clone(), y.clone(), &lambdas),
    );
    push(
        "normalize",
        Normalize::new(&CIFAR10_MEAN, &CIFAR10_STD).apply(x.clone()),
    );

    // The curricula's image operations: AutoAugment's sub-policies and posterisation, RotNet's
    // rotate-and-mix and crop-and-rotate.
    let auto = SelfPacedAutoAugmentConfig::new().init().unwrap();
    for index in 0..5 {
        let choice = PolicyChoice {
            index,
            magnitude: 0.6,
        };
        push(
            &format!("auto-augment sub-policy {index}"),
            auto.apply(x.clone(), choice, &mut rng(9 + index as u64)),
        );
    }
    push("posterize 5.5 bits", posterize(x.clone(), 5.5));
    push("rotate-and-mix", mix_rotated(x.clone(), &ks, 0.5));
    let object_boxes: Vec<CropBox> = (0..N)
        .map(|i| CropBox {
            top: i % 4,
            left: (i + 2) % 5,
            height: 5 + i % 4,
            width: 6 + i % 3,
        })
        .collect();
    push("crop-and-rotate", rotate_in_boxes(x, &ks, &object_boxes));
    out.into_iter().map(|(n, t)| (n, host(t))).collect()
}

#[test]
fn every_augmentation_operation_matches_the_cpu() {
    let Some(device) = gpu() else { return };
    let cpu = all_ops::<Cpu>(&CpuDevice::default());
    let gpu = all_ops::<Gpu>(&device);
    let mut seen = Comparisons::default();
    for ((name, c), (_, g)) in cpu.iter().zip(&gpu) {
        seen.close(name, c, g);
    }
    seen.report("augmentation operations");
}

/// The presets' two views (SimCLR, MoCo v2, BYOL; RGB and one channel), and a pipeline with
/// every augmenter curriculum on (mixup curriculum, strength curriculum, self-paced
/// AutoAugment), from the same keys.
fn presets<B: Backend>(device: &B::Device) -> Vec<(String, Vec<f32>)> {
    let mut out = Vec::new();
    for channels in [3, 1] {
        let x = image_tensor::<B>(&pixels(N, channels, S, S, 0.7), [N, channels, S, S], device);
        let mut pipelines = vec![
            ("SimCLR", PipelineConfig::simclr(S, channels)),
            ("MoCo v2", PipelineConfig::moco_v2(S, channels)),
            ("BYOL", PipelineConfig::byol(S, channels)),
        ];
        let mut curricula = PipelineConfig::moco_v2(S, channels);
        curricula.mixup_curriculum = Some(MixupCurriculumConfig::mico());
        curricula.strength_curriculum = Some(StrengthCurriculumConfig {
            target: 2.0,
            schedule: Some(SchedulerConfig::four_step()),
        });
        curricula.auto_augment = Some(SelfPacedAutoAugmentConfig::new());
        pipelines.push(("curricula", curricula));
        for (name, config) in pipelines {
            let augmenter = config.init(channels).unwrap();
            for step in [0, 5] {
                let progress = Progress {
                    step,
                    total_steps: 8,
                    epoch: step / 4,
                    total_epochs: 2,
                };
                let views = augmenter.two_views_at(x.clone(), progress);
                for (v, t) in [("view 1", views.view1), ("view 2", views.view2)] {
                    assert_eq!(&t.device(), device);
                    out.push((format!("{name} {channels} ch step {step} {v}"), host(t)));
                }
            }
        }
    }
    out
}

#[test]
fn every_augmentation_preset_matches_the_cpu() {
    let Some(device) = gpu() else { return };
    let cpu = presets::<Cpu>(&CpuDevice::default());
    let gpu = presets::<Gpu>(&device);
    let mut seen = Comparisons::default();
    for ((name, c), (_, g)) in cpu.iter().zip(&gpu) {
        seen.close(name, c, g);
    }
    seen.report("augmentation presets");
}
