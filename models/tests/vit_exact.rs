//! The ViT's exact tests, in f64 on `NdArray<f64>`: `VitPool::PatchMean` against the trunk
//! written out, and prefix-causal attention through the blocks.
//!
//! Kept out of the crate's unit tests, which run `NdArray<f32>`: burn 0.21 keeps one default
//! float type per device type, process-wide (`get_device_settings`, keyed by `NdArrayDevice`
//! for both element types), so whichever of the two a process touches first sets it for the
//! other; under `cargo test` (one process) these tests then ran in f32 and failed to read their
//! f64 values back. This binary uses `NdArray` in f64 only.

use burn::backend::NdArray;
use burn::module::Param;
use burn::prelude::*;
use curriculum_ssl_models::vit::{forward_blocks, forward_blocks_biased, prefix_causal_bias};
use curriculum_ssl_models::{Backbone, Vit, VitConfig, VitPool};

type F = NdArray<f64>;

/// The unit tests' tiny ViT: 16 × 16 RGB images in 4 × 4 patches, tokens 8 wide, two blocks of
/// two heads.
fn tiny() -> VitConfig {
    VitConfig::new(16)
        .with_patch_size(4)
        .with_embed_dim(8)
        .with_depth(2)
        .with_num_heads(2)
}

/// `VitPool::PatchMean`: the features are the mean of the feature map (the patch tokens
/// encoded alone, averaged over the grid: two readings of one pass, to f64 rounding), do
/// not move when the class token does (the sequence has none), and equal the mean of the
/// trunk's tokens written out (patches + their positions through `forward_blocks`); the
/// default `Token` features do move with the class token. In f64, to 1e-12.
#[test]
fn patch_mean_features_leave_the_class_token_out() {
    let device = Default::default();
    let token = tiny().init::<F>(&device);
    let mut mean = token.clone();
    mean.pool = VitPool::PatchMean;
    let x: Vec<f64> = (0..2 * 3 * 16 * 16)
        .map(|i| (0.17 * i as f64).cos())
        .collect();
    let x = Tensor::<F, 4>::from_data(TensorData::new(x, [2, 3, 16, 16]), &device);
    let host = |t: Tensor<F, 2>| -> Vec<f64> { t.into_data().to_vec().unwrap() };
    let features = host(mean.forward_features(x.clone()));
    let map = mean.forward_feature_map(x.clone()).unwrap(); // [2, 8, 4, 4]
    let from_map = host(map.reshape([2, 8, 16]).mean_dim(2).reshape([2, 8]));
    let (patches, _) = mean.patch_tokens(x.clone());
    let positions = mean.pos_embed.val().slice([0..1, 1..17, 0..8]);
    let by_hand = forward_blocks(&mean.blocks, patches + positions, &mean.norm);
    let by_hand = host(by_hand.mean_dim(1).reshape([2, 8]));
    for (a, (b, c)) in features.iter().zip(from_map.iter().zip(&by_hand)) {
        assert!(
            (a - b).abs() < 1e-12 && (a - c).abs() < 1e-12,
            "{a} {b} {c}"
        );
    }
    // Not the same for every channel: the first block's LayerNorm removes a constant shift.
    let bump: Vec<f64> = (0..8).map(|c| 0.5 * (c as f64 - 3.5)).collect();
    let bump = Tensor::<F, 3>::from_data(TensorData::new(bump, [1, 1, 8]), &device);
    let moved = |mut vit: Vit<F>| {
        vit.cls_token = Param::from_tensor(vit.cls_token.val() + bump.clone());
        host(vit.forward_features(x.clone()))
    };
    assert_eq!(moved(mean.clone()), features);
    let before = host(token.forward_features(x.clone()));
    let after = moved(token);
    let change = before
        .iter()
        .zip(&after)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(change > 1e-3, "the class token's output moved by {change}");
}

/// Prefix-causal attention through the blocks: a prefix as long as the sequence is the
/// unbiased trunk (the bias all zeros: the same values); with a prefix of 3 of 6 tokens,
/// changing token 4 moves tokens 4 and 5 only, and changing token 1 (in the prefix) moves
/// every token, the prefix's earlier ones included.
#[test]
fn prefix_causal_attention_sees_the_prefix_and_the_past_only() {
    let device = Default::default();
    let vit = tiny().init::<F>(&device);
    let bias = prefix_causal_bias::<F>(&[1, 3], 3, &device);
    let values: Vec<f64> = bias.clone().into_data().to_vec().unwrap();
    let inf = f64::NEG_INFINITY;
    #[rustfmt::skip]
    let expected = [
        0.0, inf, inf,   0.0, 0.0, inf,   0.0, 0.0, 0.0,
        0.0, 0.0, 0.0,   0.0, 0.0, 0.0,   0.0, 0.0, 0.0,
    ];
    assert_eq!(values, expected);
    assert_eq!(bias.dims(), [2, 1, 3, 3]);

    let tokens = |shift: Option<(usize, f64)>| {
        let v: Vec<f64> = (0..6 * 8)
            .map(|i| {
                // Not the same for every channel: a LayerNorm removes a constant shift.
                let bump = shift.map_or(0.0, |(t, d)| {
                    if i / 8 == t {
                        d * ((i % 8) as f64 - 2.5)
                    } else {
                        0.0
                    }
                });
                (0.31 * i as f64).sin() + bump
            })
            .collect();
        Tensor::<F, 3>::from_data(TensorData::new(v, [1, 6, 8]), &device)
    };
    let run = |x: Tensor<F, 3>, bias: Option<&Tensor<F, 4>>| -> Vec<f64> {
        forward_blocks_biased(&vit.blocks, x, &vit.norm, bias)
            .into_data()
            .to_vec()
            .unwrap()
    };
    let plain = run(tokens(None), None);
    assert_eq!(
        plain,
        forward_blocks(&vit.blocks, tokens(None), &vit.norm)
            .into_data()
            .to_vec::<f64>()
            .unwrap()
    );
    let all_prefix = prefix_causal_bias::<F>(&[6], 6, &device);
    assert_eq!(run(tokens(None), Some(&all_prefix)), plain);

    let bias = prefix_causal_bias::<F>(&[3], 6, &device);
    let base = run(tokens(None), Some(&bias));
    let moved = |after: Vec<f64>| -> Vec<bool> {
        (0..6)
            .map(|t| (0..8).any(|c| (after[t * 8 + c] - base[t * 8 + c]).abs() > 1e-12))
            .collect()
    };
    let late = moved(run(tokens(Some((4, 0.5))), Some(&bias)));
    assert_eq!(late, [false, false, false, false, true, true]);
    let early = moved(run(tokens(Some((1, 0.5))), Some(&bias)));
    assert_eq!(early, [true; 6]);
}
