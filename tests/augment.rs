//! Augmentation: torchvision parity of the colour operations (fixture recorded by
//! `tests/pytorch/colour_ops.py`), geometry on known pixels, mixup arithmetic, determinism and
//! config validation.

use burn::backend::Flex;
use burn::tensor::{Tensor, TensorData};
use curriculum_ssl::augment::blur::{
    blur_host, gaussian_blur, gaussian_kernel1d, RandomGaussianBlur,
};
use curriculum_ssl::augment::colour::host as host_colour;
use curriculum_ssl::augment::colour::{
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, grayscale_like, ColorJitter,
    RandomGrayscale,
};
use curriculum_ssl::augment::crop::{resized_crop, CropBox, RandomResizedCrop};
use curriculum_ssl::augment::flip::hflip_where;
use curriculum_ssl::augment::host::{self, HostView};
use curriculum_ssl::augment::mixup::{mixup, mixup_per_sample, sample_beta, Mixup, MixupLambda};
use curriculum_ssl::augment::normalize::{normalize, Normalize};
use curriculum_ssl::augment::per_sample;
use curriculum_ssl::augment::rotate::{rot90, rotate_k};
use curriculum_ssl::augment::solarize::solarize;
use curriculum_ssl::pipeline::Augmenter;
use curriculum_ssl::pipeline::{PipelineConfig, Preset};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::Value;

/// The CPU backend in f32 (not `NdArray<f32>`: burn keeps one default float type per device type
/// and process, and the f64 tests of this binary use `NdArray<f64>`).
type B = Flex;

fn dev() -> burn::tensor::Device<B> {
    Default::default()
}

fn tensor(data: Vec<f32>, shape: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(data, shape), &dev())
}

fn values(t: Tensor<B, 4>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().unwrap()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn shape4(v: &Value) -> [usize; 4] {
    let s: Vec<usize> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    [s[0], s[1], s[2], s[3]]
}

#[test]
fn colour_ops_match_torchvision() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/colour_ops.json"
    ))
    .unwrap();
    let fx: Value = serde_json::from_str(&text).unwrap();
    let mut worst: std::collections::BTreeMap<String, f32> = Default::default();
    let cases = fx["ops"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for case in cases {
        let op = case["op"].as_str().unwrap();
        let inp = &fx["inputs"][case["input"].as_str().unwrap()];
        let x = tensor(floats(&inp["data"]), shape4(&inp["shape"]));
        let params = floats(&case["params"]);
        let p = || per_sample::<B>(&params, &dev());
        let out = match op {
            "brightness" => adjust_brightness(x, p()),
            "contrast" => adjust_contrast(x, p()),
            "saturation" => adjust_saturation(x, p()),
            "hue" => adjust_hue(x, p()),
            "grayscale" => grayscale_like(x),
            "solarize" => {
                // One threshold per sample: run each sample alone.
                let n = x.dims()[0];
                let parts: Vec<Tensor<B, 4>> = (0..n)
                    .map(|i| solarize(x.clone().narrow(0, i, 1), params[i] as f64))
                    .collect();
                Tensor::cat(parts, 0)
            }
            "blur" => {
                let k = case["kernel_size"].as_u64().unwrap() as usize;
                let kernels: Vec<Vec<f64>> = params
                    .iter()
                    .map(|&s| gaussian_kernel1d(k, s as f64))
                    .collect();
                gaussian_blur(x, &kernels)
            }
            "normalize" => {
                let m: Vec<f64> = floats(&case["mean"]).iter().map(|&v| v as f64).collect();
                let s: Vec<f64> = floats(&case["std"]).iter().map(|&v| v as f64).collect();
                normalize(x, &m, &s)
            }
            other => panic!("unknown op {other}"),
        };
        assert_eq!(out.dims(), shape4(&case["shape"]), "{op}");
        let host = host_op(
            op,
            case,
            floats(&inp["data"]),
            shape4(&inp["shape"]),
            &params,
        );
        let err_host = max_abs(&host, &floats(&case["output"]));
        assert!(
            err_host <= 1e-4,
            "host {op} {:?} on {}: max abs error {err_host}",
            params,
            case["input"]
        );
        let err = max_abs(&values(out), &floats(&case["output"]));
        assert!(
            err <= 1e-4,
            "{op} {:?} on {}: max abs error {err}",
            params,
            case["input"]
        );
        let w = worst.entry(op.to_string()).or_insert(0.0);
        *w = w.max(err);
    }
    for op in [
        "brightness",
        "contrast",
        "saturation",
        "hue",
        "grayscale",
        "blur",
        "solarize",
        "normalize",
    ] {
        assert!(worst.contains_key(op), "no case for {op}");
    }
    eprintln!(
        "torchvision {}: max abs error per op: {worst:?}",
        fx["torchvision"]
    );
}

/// One fixture case of `colour_ops_match_torchvision` through the host kernels
/// (`curriculum_ssl::augment::host`), image by image.
fn host_op(
    op: &str,
    case: &Value,
    mut x: Vec<f32>,
    [n, c, h, w]: [usize; 4],
    params: &[f32],
) -> Vec<f32> {
    let image = c * h * w;
    for (i, img) in x.chunks_exact_mut(image).enumerate() {
        let f = || params[i];
        match op {
            "brightness" => host_colour::brightness(img, f()),
            "contrast" => host_colour::contrast(img, c, f()),
            "saturation" => host_colour::saturation(img, c, f()),
            "hue" => host_colour::hue(img, c, f()),
            "grayscale" => host_colour::grayscale(img, c),
            "solarize" => host::apply_values(
                img,
                [1, c, h, w],
                &HostView {
                    solarize: Some((f() as f64, &[true])),
                    ..HostView::default()
                },
            ),
            "blur" => {
                let k = case["kernel_size"].as_u64().unwrap() as usize;
                let kernel: Vec<f32> = gaussian_kernel1d(k, f() as f64)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                blur_host(img, [c, h, w], &kernel, &mut Vec::new());
            }
            "normalize" => {
                let m: Vec<f64> = floats(&case["mean"]).iter().map(|&v| v as f64).collect();
                let s: Vec<f64> = floats(&case["std"]).iter().map(|&v| v as f64).collect();
                let nz = Normalize::new(&m, &s);
                host::apply_values(
                    img,
                    [1, c, h, w],
                    &HostView {
                        normalize: Some(&nz),
                        ..HostView::default()
                    },
                );
            }
            other => panic!("unknown op {other}"),
        }
    }
    assert_eq!(n * image, x.len());
    x
}

/// A 1-channel batch whose pixel (n, r, c) is `100 n + 10 r + c`.
fn known(n: usize, h: usize, w: usize) -> Tensor<B, 4> {
    let mut v = Vec::new();
    for s in 0..n {
        for r in 0..h {
            for c in 0..w {
                v.push((100 * s + 10 * r + c) as f32);
            }
        }
    }
    tensor(v, [n, 1, h, w])
}

#[test]
fn crop_cuts_boxes_and_interpolates_bilinearly() {
    let x = known(2, 6, 6);
    // Full box at the same size: identity.
    let full = CropBox {
        top: 0,
        left: 0,
        height: 6,
        width: 6,
    };
    let y = resized_crop(x.clone(), &[full, full], 6, 6);
    assert!(max_abs(&values(y), &values(x.clone())) < 1e-4);

    // One-to-one boxes, different per sample.
    let b0 = CropBox {
        top: 1,
        left: 2,
        height: 3,
        width: 3,
    };
    let b1 = CropBox {
        top: 3,
        left: 0,
        height: 3,
        width: 3,
    };
    let y = values(resized_crop(x.clone(), &[b0, b1], 3, 3));
    let mut want = Vec::new();
    for (s, b) in [(0, b0), (1, b1)] {
        for r in 0..3 {
            for c in 0..3 {
                want.push((100 * s + 10 * (b.top + r) + b.left + c) as f32);
            }
        }
    }
    assert!(max_abs(&y, &want) < 1e-4, "{y:?}");

    // A 2x2 box scaled to 4x4: source coordinate 0.5u − 0.25 clamped to the box, so the weights
    // of the two box pixels along each axis are (1,0), (.75,.25), (.25,.75), (0,1).
    let b = CropBox {
        top: 2,
        left: 3,
        height: 2,
        width: 2,
    };
    let y = values(resized_crop(x.clone().narrow(0, 0, 1), &[b], 4, 4));
    let wts = [(1.0, 0.0), (0.75, 0.25), (0.25, 0.75), (0.0, 1.0)];
    let p = |r: usize, c: usize| (10 * r + c) as f32;
    let mut want = Vec::new();
    for (ya, yb) in wts {
        for (xa, xb) in wts {
            let top = xa * p(2, 3) + xb * p(2, 4);
            let bottom = xa * p(3, 3) + xb * p(3, 4);
            want.push(ya * top + yb * bottom);
        }
    }
    assert!(max_abs(&y, &want) < 1e-4, "{y:?} vs {want:?}");
}

#[test]
fn random_resized_crop_boxes_respect_the_ranges() {
    let c = RandomResizedCrop {
        size: (32, 32),
        scale: (0.2, 0.6),
        ratio: (0.5, 2.0),
    };
    let mut rng = StdRng::seed_from_u64(3);
    for b in c.sample(&mut rng, 500, 64, 48) {
        assert!(b.top + b.height <= 64 && b.left + b.width <= 48, "{b:?}");
        let area = (b.height * b.width) as f64 / (64.0 * 48.0);
        // Rounding the sides to integers moves the area and ratio a little.
        assert!((0.17..=0.65).contains(&area), "{b:?} area {area}");
        let ratio = b.width as f64 / b.height as f64;
        assert!((0.45..=2.2).contains(&ratio), "{b:?} ratio {ratio}");
    }
    let bad = RandomResizedCrop {
        scale: (0.9, 0.2),
        ..c
    };
    let e = bad.validate().unwrap_err();
    assert_eq!(e.field, "crop.scale");
    assert!(e.reason.contains("greater than"), "{e}");
}

#[test]
fn flip_and_rotation_move_known_pixels() {
    let x = known(2, 2, 3);
    let y = values(hflip_where(x.clone(), &[true, false]));
    assert_eq!(
        y,
        vec![2., 1., 0., 12., 11., 10., 100., 101., 102., 110., 111., 112.]
    );

    // [[0, 1], [10, 11]] counter-clockwise.
    let sq = known(1, 2, 2);
    assert_eq!(values(rot90(sq.clone(), 1)), vec![1., 11., 0., 10.]);
    assert_eq!(values(rot90(sq.clone(), 2)), vec![11., 10., 1., 0.]);
    assert_eq!(values(rot90(sq.clone(), 3)), vec![10., 0., 11., 1.]);
    assert_eq!(values(rot90(sq.clone(), 4)), vec![0., 1., 10., 11.]);
    let batch = known(4, 2, 2);
    let y = values(rotate_k(batch, &[0, 1, 2, 3]));
    assert_eq!(
        y,
        vec![
            0., 1., 10., 11., //
            101., 111., 100., 110., //
            211., 210., 201., 200., //
            310., 300., 311., 301.
        ]
    );
}

#[test]
fn mixup_arithmetic() {
    let x1 = tensor(vec![1.0, 2.0, 3.0, 4.0], [2, 1, 1, 2]);
    let x2 = tensor(vec![10.0, 20.0, 30.0, 40.0], [2, 1, 1, 2]);
    let y = values(mixup(x1.clone(), x2.clone(), 0.3));
    let want = [0.3 + 7.0, 0.6 + 14.0, 0.9 + 21.0, 1.2 + 28.0];
    assert!(max_abs(&y, &want) < 1e-5, "{y:?}");
    let y = values(mixup_per_sample(x1.clone(), x2.clone(), &[1.0, 0.25]));
    let want = [1.0, 2.0, 0.75 + 22.5, 1.0 + 30.0];
    assert!(max_abs(&y, &want) < 1e-5, "{y:?}");
    let m = Mixup {
        lambda: MixupLambda::Fixed(0.8),
    };
    let mut rng = StdRng::seed_from_u64(0);
    assert_eq!(m.sample(&mut rng, 3), vec![0.8; 3]);
    assert!(Mixup {
        lambda: MixupLambda::Fixed(1.2)
    }
    .validate()
    .is_err());
    // Beta(2, 2): mean 1/2, variance 1/20; Beta(0.5, 0.5): variance 1/8.
    for (a, var) in [(2.0, 0.05), (0.5, 0.125)] {
        let s: Vec<f64> = (0..20_000).map(|_| sample_beta(&mut rng, a, a)).collect();
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        let v = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / s.len() as f64;
        assert!((mean - 0.5).abs() < 0.01, "alpha {a}: mean {mean}");
        assert!((v - var).abs() < 0.005, "alpha {a}: variance {v}");
        assert!(s.iter().all(|x| (0.0..=1.0).contains(x)));
    }
}

#[test]
fn colour_jitter_applies_each_samples_own_order() {
    let x = tensor(
        (0..2 * 3 * 4 * 4)
            .map(|i| ((i * 37) % 101) as f32 / 100.0)
            .collect(),
        [2, 3, 4, 4],
    );
    let j = ColorJitter {
        brightness: 0.5,
        contrast: 0.5,
        saturation: 0.5,
        hue: 0.2,
        p: 1.0,
    };
    let mut rng = StdRng::seed_from_u64(11);
    let params = j.sample(&mut rng, 2);
    let y = values(j.apply(x.clone(), &params));
    for n in 0..2 {
        let mut s = x.clone().narrow(0, n, 1);
        for &op in &params.order[n] {
            let f = per_sample::<B>(&[params.factors[n][op]], &dev());
            s = match op {
                0 => adjust_brightness(s, f),
                1 => adjust_contrast(s, f),
                2 => adjust_saturation(s, f),
                _ => adjust_hue(s, f),
            };
        }
        let per = 3 * 16;
        assert!(max_abs(&y[n * per..(n + 1) * per], &values(s)) < 1e-6);
    }
    // Strength: the knob multiplies the magnitudes; hue is capped at 0.5.
    let s3 = ColorJitter::simclr(1.0).scaled(3.0);
    assert!((s3.brightness - 2.4).abs() < 1e-12 && s3.hue == 0.5);
    // Strength 0 leaves the images unchanged.
    let zero = j.scaled(0.0);
    let params = zero.sample(&mut rng, 2);
    assert_eq!(values(zero.apply(x.clone(), &params)), values(x.clone()));
    // Grayscale on flagged samples only.
    let g = values(RandomGrayscale { p: 1.0 }.apply(x.clone(), &[false, true]));
    assert_eq!(g[..48], values(x.clone())[..48]);
    assert!((g[48] - g[64]).abs() < 1e-7 && (g[64] - g[80]).abs() < 1e-7);
}

#[test]
fn pipeline_is_reproducible_per_seed_and_key() {
    let x = tensor(
        (0..4 * 3 * 32 * 32)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect(),
        [4, 3, 32, 32],
    );
    let make = |seed| {
        let mut c = PipelineConfig::preset(Preset::MocoV2, 32, 3);
        c.seed = seed;
        c.init(3).unwrap()
    };
    let a: Augmenter = make(1);
    let v1 = a.two_views(x.clone(), 5);
    let v2 = make(1).two_views(x.clone(), 5);
    assert_eq!(v1.view1.dims(), [4, 3, 32, 32]);
    assert_eq!(values(v1.view1.clone()), values(v2.view1.clone()));
    assert_eq!(values(v1.view2.clone()), values(v2.view2));
    assert_ne!(values(v1.view1.clone()), values(v1.view2.clone()));
    let other_seed = make(2).two_views(x.clone(), 5);
    assert!(max_abs(&values(v1.view1.clone()), &values(other_seed.view1)) > 0.1);
    let other_key = a.two_views(x.clone(), 6);
    assert!(max_abs(&values(v1.view1), &values(other_key.view1)) > 0.1);

    // BYOL on 28x28 grayscale, with mixup: λ = 1 gives the first view back.
    let g = tensor(
        (0..2 * 28 * 28).map(|i| (i % 255) as f32 / 255.0).collect(),
        [2, 1, 28, 28],
    );
    let mut c = PipelineConfig::preset(Preset::Byol, 28, 1);
    c.mixup = Some(Mixup {
        lambda: MixupLambda::Fixed(1.0),
    });
    let mut aug = c.init(1).unwrap();
    let v = aug.two_views(g.clone(), 0);
    assert_eq!(v.lambdas, Some(vec![1.0, 1.0]));
    assert!(max_abs(&values(v.view1), &values(v.view2)) < 1e-6);
    aug.set_strength(3.0).unwrap();
    assert!(aug.set_strength(-1.0).is_err());
    assert_eq!(aug.config().strength, 3.0);
}

/// The host path (`Augmenter::with_host_ops`) draws what the tensor path draws and computes the
/// same expressions: the same views and geometry for SimCLR (96 px RGB, 11-pixel blur), MoCo v2
/// (40 px RGB, at colour strength 2 so that clamps and hue wrap-arounds are hit) and BYOL (28 px
/// gray, solarisation), whole images and pre-cut ones. Tolerance: every operation is the same
/// IEEE f32 operation in the same order but two: the contrast's mean (summed in f64 on the host,
/// in f32 by the tensor form: a few ulps of a value in [0, 1]) and the blur (taps summed one by
/// one against a matrix product: at most k·ε ≈ 11 × 6e-8 of values in [0, 1]); later operations
/// are Lipschitz with constant at most ~3 (a blend's factor ≤ 3, hue's piecewise-linear maps),
/// and the normalisation divides by std ≥ 0.2: below 1e-5 on any CPU, where a wrong draw or
/// formula moves values by 1e-2 or more.
#[test]
fn host_ops_give_the_tensor_views() {
    let cases = [
        (Preset::SimClr, 96, 3, 1.0),
        (Preset::MocoV2, 40, 3, 2.0),
        (Preset::Byol, 28, 1, 1.0),
    ];
    for (preset, side, c, strength) in cases {
        let n = 6;
        let x = tensor(
            (0..n * c * (side + 8) * (side + 8))
                .map(|i| ((i * 7919) % 1000) as f32 / 999.0)
                .collect(),
            [n, c, side + 8, side + 8],
        );
        let mut config = PipelineConfig::preset(preset, side, c);
        config.seed = 3;
        config.strength = strength;
        let tensor_path = config.clone().init(c).unwrap();
        assert!(!tensor_path.host_ops());
        let host_path = config.init(c).unwrap().with_host_ops(true);
        for key in 0..3 {
            let a = tensor_path.two_views(x.clone(), key);
            let b = host_path.two_views(x.clone(), key);
            assert_eq!(a.geometry, b.geometry);
            for (va, vb) in [(a.view1, b.view1), (a.view2, b.view2)] {
                let err = max_abs(&values(va), &values(vb));
                assert!(err < 1e-5, "{preset:?} key {key}: {err}");
            }
        }
    }
}

#[test]
fn impossible_configs_are_named() {
    let mut c = PipelineConfig::preset(Preset::SimClr, 32, 3);
    c.strength = f64::NAN;
    assert_eq!(c.clone().init(3).unwrap_err().field, "strength");
    let c = PipelineConfig::preset(Preset::SimClr, 32, 3);
    assert_eq!(c.clone().init(1).unwrap_err().field, "normalize");
    let mut c = PipelineConfig::preset(Preset::MocoV2, 32, 3);
    c.view2.blur = Some(RandomGaussianBlur {
        kernel_size: 4,
        sigma: (0.1, 2.0),
        p: 0.5,
    });
    assert_eq!(c.clone().init(3).unwrap_err().field, "blur.kernel_size");
    let mut c = PipelineConfig::preset(Preset::MocoV2, 32, 3);
    c.view1.blur = Some(RandomGaussianBlur {
        kernel_size: 3,
        sigma: (2.0, 0.1),
        p: 0.5,
    });
    assert_eq!(c.clone().init(3).unwrap_err().field, "blur.sigma");
    let mut c = PipelineConfig::preset(Preset::MocoV2, 32, 3);
    if let Some(j) = c.view1.jitter.as_mut() {
        j.hue = 0.7;
    }
    assert_eq!(c.clone().init(3).unwrap_err().field, "color_jitter.hue");
    let n = Normalize::new(&[0.5], &[0.0]);
    assert_eq!(n.validate_for(1).unwrap_err().field, "normalize.std");
}
