//! Every tensor of the full-size torchvision state_dicts (keys and shapes exported by
//! `tests/pytorch/export_state_dict_keys.py`) maps onto a tensor of the same shape in our backbone
//! or its 1000-class head, and every tensor of ours is covered: the renaming of the import path
//! is complete for ResNet-18/50, EfficientNet-B0/B1 and MobileNet-V3-Large.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{fixture, Infer};
use burn_store::ModuleSnapshot;
use curriculum_ssl_models::import::{
    efficientnet_head_key, mobilenet_v3_head_key, resnet_head_key, TorchvisionImport,
};
use curriculum_ssl_models::{
    ClassifierConfig, EfficientNetConfig, MobileNetV3Config, ResNetConfig,
};

type Shapes = BTreeMap<String, Vec<usize>>;

fn torchvision(model: &str) -> Shapes {
    let text = std::fs::read_to_string(fixture("torchvision_state_dict_keys.json")).unwrap();
    let all: BTreeMap<String, Shapes> = serde_json::from_str(&text).unwrap();
    all[model].clone()
}

fn shapes<M: ModuleSnapshot<Infer>>(module: &M) -> Shapes {
    module
        .collect(None, None, false)
        .iter()
        .map(|s| (s.full_path(), s.shape.to_vec()))
        .collect()
}

fn check<M: TorchvisionImport<Infer>>(
    name: &str,
    model: &M,
    head: ClassifierConfig,
    head_key: fn(&str) -> Option<String>,
) {
    let device = Default::default();
    let ours = shapes(model);
    let head = shapes(&head.init::<Infer>(&device));
    let mut covered = BTreeSet::new();
    let mut covered_head = BTreeSet::new();
    for (key, shape) in torchvision(name) {
        if key.ends_with("num_batches_tracked") {
            continue;
        }
        if let Some(path) = model.torchvision_key(&key) {
            let got = ours
                .get(&path)
                .unwrap_or_else(|| panic!("{name}: {key} maps to {path}, which the model lacks"));
            assert_eq!(got, &shape, "{name}: {key} → {path}");
            covered.insert(path);
        } else {
            let path = head_key(&key).unwrap_or_else(|| panic!("{name}: {key} is not mapped"));
            let got = head
                .get(&path)
                .unwrap_or_else(|| panic!("{name}: {key} maps to {path}, which the head lacks"));
            // Linear weights are stored transposed in burn.
            let mut expected = shape.clone();
            expected.reverse();
            assert!(got == &shape || got == &expected, "{name}: {key} → {path}");
            covered_head.insert(path);
        }
    }
    let uncovered: Vec<_> = ours.keys().filter(|p| !covered.contains(*p)).collect();
    assert!(
        uncovered.is_empty(),
        "{name}: not in the state_dict: {uncovered:?}"
    );
    let uncovered: Vec<_> = head.keys().filter(|p| !covered_head.contains(*p)).collect();
    assert!(
        uncovered.is_empty(),
        "{name}: head not in the state_dict: {uncovered:?}"
    );
}

#[test]
fn resnet_keys_cover_torchvision() {
    let device = Default::default();
    for (name, config) in [
        ("resnet18", ResNetConfig::resnet18()),
        ("resnet50", ResNetConfig::resnet50()),
    ] {
        let model = config.init::<Infer>(&device);
        check(
            name,
            &model,
            ClassifierConfig::new(config.feature_dim(), 1000),
            resnet_head_key,
        );
    }
}

#[test]
fn efficientnet_keys_cover_torchvision() {
    let device = Default::default();
    for (name, config) in [
        ("efficientnet_b0", EfficientNetConfig::b0()),
        ("efficientnet_b1", EfficientNetConfig::b1()),
    ] {
        let model = config.init::<Infer>(&device);
        check(name, &model, config.classifier(1000), efficientnet_head_key);
    }
}

#[test]
fn mobilenet_v3_large_keys_cover_torchvision() {
    let device = Default::default();
    let config = MobileNetV3Config::large();
    let model = config.init::<Infer>(&device);
    check(
        "mobilenet_v3_large",
        &model,
        config.classifier(1000),
        mobilenet_v3_head_key,
    );
}
