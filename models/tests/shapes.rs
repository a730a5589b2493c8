//! Output shapes of every backbone for 28×28×1, 32×32×3, 96×96×3 and 224×224×3 inputs (the
//! small ones with the stems that fit them), in inference mode.

use crate::common::Infer;
use burn::prelude::*;
use curriculum_ssl_models::{
    Backbone, EfficientNetConfig, LeNetConfig, MobileNetV3Config, ModelError, ResNetConfig, Stem,
    VggConfig, VggPooling, WideResNetConfig,
};

/// Runs `model` on a zero batch of `[2, c, s, s]` and checks the output shape.
fn check<M: Backbone<Infer>>(model: &M, c: usize, s: usize, dim: usize) {
    let device = Default::default();
    let x = Tensor::<Infer, 4>::random([2, c, s, s], burn::tensor::Distribution::Default, &device);
    let y = model.forward_features(x);
    assert_eq!(y.dims(), [2, dim], "input {c}×{s}×{s}");
    assert_eq!(model.feature_dim(), dim);
    let values: Vec<f32> = y.into_data().to_vec().unwrap();
    assert!(
        values.iter().all(|v| v.is_finite()),
        "non-finite features for {s}×{s}"
    );
}

#[test]
fn resnet_shapes() {
    let device = Default::default();
    for (config, dim) in [
        (ResNetConfig::resnet18(), 512),
        (ResNetConfig::resnet34(), 512),
        (ResNetConfig::resnet50(), 2048),
    ] {
        let imagenet = config.clone().init::<Infer>(&device);
        check(&imagenet, 3, 224, dim);
        check(&imagenet, 3, 96, dim);
        let cifar = config.clone().with_stem(Stem::Cifar).init::<Infer>(&device);
        check(&cifar, 3, 32, dim);
        let mnist = config
            .clone()
            .with_stem(Stem::Cifar)
            .with_in_channels(1)
            .init::<Infer>(&device);
        check(&mnist, 1, 28, dim);
        let stride2 = config
            .with_stem(Stem::Stride2)
            .with_in_channels(1)
            .init::<Infer>(&device);
        check(&stride2, 1, 28, dim);
        // 28 → 14 (stem) → 14, 7, 4, 2 (stages).
        let map = stride2.forward_map(Tensor::zeros([2, 1, 28, 28], &device));
        assert_eq!(map.dims(), [2, dim, 2, 2]);
    }
}

#[test]
fn efficientnet_shapes() {
    let device = Default::default();
    for config in [EfficientNetConfig::b0(), EfficientNetConfig::b1()] {
        let rgb = config.init::<Infer>(&device);
        for s in [224, 96, 32] {
            check(&rgb, 3, s, 1280);
        }
        let grey = config.with_in_channels(1).init::<Infer>(&device);
        check(&grey, 1, 28, 1280);
    }
}

#[test]
fn mobilenet_v3_shapes() {
    let device = Default::default();
    for (config, dim) in [
        (MobileNetV3Config::large(), 960),
        (MobileNetV3Config::small(), 576),
    ] {
        let rgb = config.init::<Infer>(&device);
        for s in [224, 96, 32] {
            check(&rgb, 3, s, dim);
        }
        let grey = config.with_in_channels(1).init::<Infer>(&device);
        check(&grey, 1, 28, dim);
    }
}

#[test]
fn wide_resnet_shapes() {
    let device = Default::default();
    let wrn = WideResNetConfig::wrn_16_8().init::<Infer>(&device);
    check(&wrn, 3, 32, 512);
    check(&wrn, 3, 96, 512);
    let grey = WideResNetConfig::wrn_16_8()
        .with_in_channels(1)
        .init::<Infer>(&device);
    check(&grey, 1, 28, 512);
    let wrn = WideResNetConfig::wrn_28_10().init::<Infer>(&device);
    check(&wrn, 3, 32, 640);
    // 224×224 goes through the same code; a narrow WRN-16-1 keeps the test fast.
    let narrow = WideResNetConfig::new(16, 1).init::<Infer>(&device);
    check(&narrow, 3, 224, 64);
}

#[test]
fn vgg16_bn_shapes() {
    let device = Default::default();
    let vgg = VggConfig::vgg16_bn().init::<Infer>(&device);
    for s in [224, 96, 32] {
        check(&vgg, 3, s, 512);
    }
    let flat = VggConfig::vgg16_bn()
        .with_pooling(VggPooling::Flatten7x7)
        .init::<Infer>(&device);
    check(&flat, 3, 224, 25_088);
    // Five 2×2 max-pools: 28×28 is too small.
    let grey = VggConfig::vgg16_bn()
        .with_in_channels(1)
        .init::<Infer>(&device);
    assert!(matches!(
        grey.check_input([2, 1, 28, 28]),
        Err(ModelError::ImageTooSmall { min: 32, .. })
    ));
    check(&grey, 1, 32, 512);
}

#[test]
fn lenet_shapes() {
    let device = Default::default();
    let grey = LeNetConfig::lenet5().init::<Infer>(&device);
    check(&grey, 1, 28, 84);
    let rgb = LeNetConfig::lenet5()
        .with_in_channels(3)
        .with_conv1_padding(0)
        .init::<Infer>(&device);
    for s in [224, 96, 32] {
        check(&rgb, 3, s, 84);
    }
    assert!(matches!(
        rgb.check_input([1, 3, 12, 12]),
        Err(ModelError::ImageTooSmall { min: 16, .. })
    ));
}

#[test]
#[should_panic(expected = "expected 3 input channels, got 1")]
fn wrong_channel_count_panics_with_the_shapes() {
    let device = Default::default();
    let model = ResNetConfig::resnet18()
        .with_stem(Stem::Cifar)
        .with_base_width(4)
        .init::<Infer>(&device);
    assert!(matches!(
        model.check_input([2, 1, 28, 28]),
        Err(ModelError::ChannelMismatch {
            expected: 3,
            got: 1,
            ..
        })
    ));
    model.forward_features(Tensor::zeros([2, 1, 28, 28], &device));
}

/// `pooled_grid`: the features are the last map's averages over a grid's cells (PyTorch's
/// `AdaptiveAvgPool2d` cells: rows `⌊i·h/g⌋ .. ⌈(i+1)·h/g⌉`, overlapping when `g` does not
/// divide `h`), flattened channel by channel (`torch.flatten(x, 1)`), computed here from
/// `forward_map` by that definition; grid 1 is the global average. Maps of 2×2 (28 pixels
/// through the stride-2 stem: small-2x's default, the map flattened), 3×3 (42: overlapping
/// cells) and 4×4 (56). Means of at most four f32 values: the same within 1e-6 relative
/// whichever order a kernel adds them in.
#[test]
fn resnet_pooled_grid_averages_the_cells_and_flattens_channel_by_channel() {
    let device = Default::default();
    let small_2x = |grid: usize| {
        ResNetConfig::new(curriculum_ssl_models::BlockKind::Basic, [1, 1, 1, 1])
            .with_base_width(16)
            .with_in_channels(1)
            .with_stem(Stem::Stride2)
            .with_pooled_grid(grid)
    };
    assert_eq!(small_2x(2).feature_dim(), 512);
    assert_eq!(small_2x(1).feature_dim(), 128);
    for grid in [1, 2] {
        let model = small_2x(grid).init::<Infer>(&device);
        for side in [28, 42, 56] {
            let x = Tensor::<Infer, 4>::random(
                [2, 1, side, side],
                burn::tensor::Distribution::Default,
                &device,
            );
            let map = model.forward_map(x.clone());
            let [n, c, h, w] = map.dims();
            assert_eq!([h, w], [side / 14, side / 14]);
            assert_eq!(model.map_size(side, side), [h, w]);
            let map: Vec<f32> = map.into_data().to_vec().unwrap();
            let features: Vec<f32> = model.forward_features(x).into_data().to_vec().unwrap();
            let cells = grid * grid;
            assert_eq!(features.len(), n * c * cells);
            let span = |i: usize, len: usize| (i * len / grid, ((i + 1) * len).div_ceil(grid));
            for (i, got) in features.iter().enumerate() {
                let (b, ch, cell) = (i / (c * cells), i / cells % c, i % cells);
                let ((y0, y1), (x0, x1)) = (span(cell / grid, h), span(cell % grid, w));
                let mut sum = 0.0f32;
                for y in y0..y1 {
                    for x in x0..x1 {
                        sum += map[((b * c + ch) * h + y) * w + x];
                    }
                }
                let want = sum / ((y1 - y0) * (x1 - x0)) as f32;
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "grid {grid}, side {side}, feature {i}: {got} vs {want}"
                );
            }
        }
        // A map smaller than the grid is refused by the check a recipe runs (the forward pass
        // itself repeats cells, for multi-crop's small local crops).
        assert_eq!(model.check_pooled_grid(14, 14).is_err(), grid > 1);
    }
    let zero = ResNetConfig::resnet18()
        .with_pooled_grid(0)
        .try_init::<Infer>(&device);
    assert!(matches!(zero, Err(ModelError::InvalidConfig(m)) if m.contains("pooled_grid")));
}

/// Configurations that would build a network whose forward pass fails (or whose features are
/// narrower than `feature_dim` says) are refused by `try_init`, naming the setting: a ResNet
/// stage of no blocks (`[1, 1, 1, 0]` gave 4w features where 8w were announced), WideResNet's
/// dropout outside [0, 1] (burn's `DropoutConfig::init` asserted inside `try_init`; NaN passed),
/// EfficientNet's and MobileNet-V3's NaN multipliers, a depth multiplier of 0 (every stage
/// empty) and a stride or kernel of 0.
#[test]
fn configurations_that_cannot_train_are_refused_by_try_init() {
    let device = Default::default();
    let refused = |r: Result<(), ModelError>, word: &str| match r {
        Err(ModelError::InvalidConfig(m)) => assert!(m.contains(word), "{word}: {m}"),
        other => panic!("{word}: {other:?}"),
    };
    let mut resnet = ResNetConfig::resnet18();
    resnet.layers = [1, 1, 1, 0];
    refused(resnet.try_init::<Infer>(&device).map(drop), "layers");
    for dropout in [1.5, -0.1, f64::NAN] {
        refused(
            WideResNetConfig::wrn_16_8()
                .with_dropout(dropout)
                .try_init::<Infer>(&device)
                .map(drop),
            "dropout",
        );
    }
    let efficientnet = |edit: &dyn Fn(&mut EfficientNetConfig)| {
        let mut config = EfficientNetConfig::b0();
        edit(&mut config);
        config.try_init::<Infer>(&device).map(drop)
    };
    refused(efficientnet(&|c| c.width_mult = f64::NAN), "width_mult");
    refused(efficientnet(&|c| c.depth_mult = 0.0), "depth_mult");
    refused(efficientnet(&|c| c.depth_mult = f64::NAN), "depth_mult");
    refused(efficientnet(&|c| c.stages[2].stride = 0), "stage 2");
    let mobilenet = |edit: &dyn Fn(&mut MobileNetV3Config)| {
        let mut config = MobileNetV3Config::small();
        edit(&mut config);
        config.try_init::<Infer>(&device).map(drop)
    };
    refused(mobilenet(&|c| c.width_mult = f64::NAN), "width_mult");
    refused(mobilenet(&|c| c.blocks[1].kernel = 0), "block 1");
}
