//! Numerical parity with PyTorch, through the weight-import path.
//!
//! The fixtures are written by `tests/pytorch/export_backbones.py` (torchvision models at reduced
//! width with randomised batch-norm statistics): the torchvision state_dict, an input batch,
//! PyTorch's pooled features in eval and train mode, the head's logits in eval mode, and every
//! running mean / variance after the train-mode forward.

use crate::common::{fixture, max_abs_diff, Infer, Train};
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn_store::{ModuleSnapshot, ModuleStore, SafetensorsStore};
use curriculum_ssl_models::import::{
    load_torchvision, HeadImport, TorchvisionHead, TorchvisionImport,
};
use curriculum_ssl_models::{
    Backbone, BlockKind, Classifier, ClassifierConfig, EfficientNetConfig, MobileNetV3Config,
    ResNetConfig, Stem,
};

const TOL: f32 = 1e-4;

fn read<B: Backend, const D: usize>(
    store: &mut SafetensorsStore,
    name: &str,
    device: &B::Device,
) -> Tensor<B, D> {
    let snapshot = store
        .get_snapshot(name)
        .expect("fixture readable")
        .unwrap_or_else(|| panic!("fixture lacks {name}"));
    Tensor::from_data(snapshot.to_data().expect("tensor data"), device)
}

/// Loads `file` into `model` and `head`, then checks eval features, eval logits, train features
/// and the running statistics after one train-mode forward. Returns (eval, train) max errors.
fn check_parity<M>(
    file: &str,
    mut model: M,
    head_config: ClassifierConfig,
    layout: TorchvisionHead,
) -> (f32, f32)
where
    M: TorchvisionImport<Train> + Backbone<Train> + AutodiffModule<Train>,
    M::InnerModule: Backbone<Infer> + ModuleSnapshot<Infer>,
{
    let device = Default::default();
    let path = fixture(file);
    let mut head: Classifier<Train> = head_config.init(&device);
    load_torchvision(
        &mut model,
        Some(HeadImport {
            head: &mut head,
            layout,
        }),
        &path,
    )
    .expect("import");

    let mut store = SafetensorsStore::from_file(&path);
    let input: Tensor<Infer, 4> = read(&mut store, "input", &device);

    // Eval mode: running statistics.
    let eval_model = model.valid();
    let features = eval_model.forward_features(input.clone());
    let expected: Tensor<Infer, 2> = read(&mut store, "expected.eval.features", &device);
    let eval_err = max_abs_diff(features.clone(), expected);
    let logits = head.valid().forward(features);
    let expected_logits: Tensor<Infer, 2> = read(&mut store, "expected.eval.logits", &device);
    let logits_err = max_abs_diff(logits, expected_logits);

    // Train mode: batch statistics, running averages updated.
    let features = model.forward_features(Tensor::from_inner(input));
    let expected: Tensor<Infer, 2> = read(&mut store, "expected.train.features", &device);
    let train_err = max_abs_diff(features.inner(), expected);

    let after = model.valid();
    let snapshots = after.collect(None, None, false);
    let keys: Vec<String> = store.keys().expect("keys");
    let mut checked = 0;
    let mut stats_err = 0f32;
    for key in keys
        .iter()
        .filter(|k| k.starts_with("expected.after_train."))
    {
        let tv_key = key.trim_start_matches("expected.after_train.");
        let path = model.torchvision_key(tv_key).expect("mapped key");
        let ours = snapshots
            .iter()
            .find(|s| s.full_path() == path)
            .unwrap_or_else(|| panic!("model has no {path}"));
        let ours: Tensor<Infer, 1> = Tensor::from_data(ours.to_data().unwrap(), &device);
        let theirs: Tensor<Infer, 1> = read(&mut store, key, &device);
        stats_err = stats_err.max(max_abs_diff(ours, theirs));
        checked += 1;
    }
    println!(
        "{file}: eval features {eval_err:.3e}, eval logits {logits_err:.3e}, train features \
         {train_err:.3e}, running stats ({checked} tensors) {stats_err:.3e}"
    );
    assert!(checked > 10, "too few running statistics in the fixture");
    assert!(eval_err < TOL, "eval features differ by {eval_err}");
    assert!(logits_err < TOL, "eval logits differ by {logits_err}");
    assert!(train_err < TOL, "train features differ by {train_err}");
    assert!(stats_err < TOL, "running statistics differ by {stats_err}");
    (eval_err, train_err)
}

#[test]
fn resnet18_cifar_stem_matches_pytorch() {
    let device = Default::default();
    let config = ResNetConfig::resnet18()
        .with_stem(Stem::Cifar)
        .with_base_width(4);
    let model = config.init::<Train>(&device);
    check_parity(
        "resnet18_cifar_w4.safetensors",
        model,
        ClassifierConfig::new(config.feature_dim(), 10),
        TorchvisionHead::ResNet,
    );
}

/// The `small-2x` shape: one block per stage and the stride-2 stem (3×3, no max-pool), on
/// one-channel 28×28 images.
#[test]
fn resnet_stride2_stem_matches_pytorch() {
    let device = Default::default();
    let config = ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_stem(Stem::Stride2)
        .with_in_channels(1)
        .with_base_width(4);
    let model = config.init::<Train>(&device);
    check_parity(
        "resnet10_stride2_w4.safetensors",
        model,
        ClassifierConfig::new(config.feature_dim(), 10),
        TorchvisionHead::ResNet,
    );
}

#[test]
fn efficientnet_b0_matches_pytorch() {
    let device = Default::default();
    let config = EfficientNetConfig::new(0.25, 0.25).with_stochastic_depth_prob(0.0);
    let model = config.init::<Train>(&device);
    assert_eq!(model.feature_dim(), 320);
    check_parity(
        "efficientnet_b0_w025_d025.safetensors",
        model,
        config.classifier(10),
        TorchvisionHead::EfficientNet,
    );
}

#[test]
fn mobilenet_v3_large_matches_pytorch() {
    let device = Default::default();
    let config = MobileNetV3Config::large().with_width_mult(0.125);
    let model = config.init::<Train>(&device);
    assert_eq!(model.feature_dim(), 144);
    check_parity(
        "mobilenet_v3_large_w0125.safetensors",
        model,
        config.classifier(10),
        TorchvisionHead::MobileNetV3,
    );
}

/// timm's `VisionTransformer` (`tests/pytorch/export_vit.py`: image 16, patch 4, width 32,
/// depth 2, 4 heads, randomised LayerNorms) loaded through the import path: the class-token
/// features on the configured grid, and on a 6 × 6 grid with bicubically resized positional
/// embeddings, to 1e-4.
#[test]
fn vit_matches_timm() {
    use curriculum_ssl_models::VitConfig;
    let device = Default::default();
    let path = fixture("vit_timm.safetensors");
    let mut vit = VitConfig::new(16)
        .with_patch_size(4)
        .with_embed_dim(32)
        .with_depth(2)
        .with_num_heads(4)
        .init::<Infer>(&device);
    load_torchvision(&mut vit, None, &path).expect("import");
    let mut store = SafetensorsStore::from_file(&path);
    for (input, expected) in [
        ("input", "expected.features"),
        ("input_large", "expected.features_large"),
    ] {
        let x: Tensor<Infer, 4> = read(&mut store, input, &device);
        let want: Tensor<Infer, 2> = read(&mut store, expected, &device);
        let got = vit.forward_features(x);
        let err = max_abs_diff(got, want);
        println!("ViT {input}: max |Δ| = {err:.2e}");
        assert!(err < TOL, "ViT on {input}: {err}");
    }
}
