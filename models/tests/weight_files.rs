//! Weight files both ways.
//!
//! Channel adaptation: a ResNet built for one (or two) input channels takes a three-channel
//! torchvision state_dict as timm's `adapt_input_conv` does, and on a grey image gives the
//! three-channel network's features on that image in all three channels (the convolution is
//! linear in its input).
//!
//! Export to PyTorch: a backbone loaded from a torchvision (timm) state_dict and written back
//! with [`AnyBackbone::save_safetensors`] gives that state_dict again — the same keys, shapes and
//! values — less the classifier and `num_batches_tracked` (PyTorch's batch norm fills in a
//! missing counter). The fixtures are PyTorch's own files (`tests/pytorch/export_backbones.py`,
//! `tests/pytorch/export_vit.py`), so the names and layout are checked against PyTorch, not
//! against our import path alone.

use crate::common::{fixture, Infer};
use burn::prelude::*;
use burn_store::{ModuleStore, SafetensorsStore};
use curriculum_ssl_models::import::load_torchvision;
use curriculum_ssl_models::{
    AnyBackbone, Backbone, EfficientNetConfig, ExportNames, MobileNetV3Config, ResNetConfig, Stem,
    VitConfig,
};

/// Checks that `exported` holds exactly the tensors of `original` that `keep` selects, equal.
fn same_tensors(original: &std::path::Path, exported: &std::path::Path, keep: fn(&str) -> bool) {
    let mut theirs = SafetensorsStore::from_file(original);
    let mut ours = SafetensorsStore::from_file(exported);
    let mut want: Vec<String> = theirs
        .keys()
        .unwrap()
        .into_iter()
        .filter(|k| keep(k))
        .collect();
    want.sort();
    let mut got = ours.keys().unwrap();
    got.sort();
    assert_eq!(got, want, "the exported keys are the state_dict's");
    for key in &want {
        let a = theirs
            .get_snapshot(key)
            .unwrap()
            .unwrap()
            .to_data()
            .unwrap();
        let b = ours.get_snapshot(key).unwrap().unwrap().to_data().unwrap();
        assert_eq!(a.shape, b.shape, "{key}");
        assert_eq!(
            a.to_vec::<f32>().unwrap(),
            b.to_vec::<f32>().unwrap(),
            "{key}"
        );
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("models-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn a_resnet_exports_as_the_torchvision_state_dict_it_was_loaded_from() {
    let device = Default::default();
    let original = fixture("resnet18_cifar_w4.safetensors");
    let mut model = ResNetConfig::resnet18()
        .with_stem(Stem::Cifar)
        .with_base_width(4)
        .init::<Infer>(&device);
    load_torchvision(&mut model, None, &original).expect("import");
    let path = scratch("resnet.safetensors");
    let metadata = vec![("recipe".to_string(), "test".to_string())];
    let (names, keys) = AnyBackbone::ResNet(model)
        .save_safetensors(&metadata, &path)
        .unwrap();
    assert_eq!(names, ExportNames::TorchvisionResNet);
    assert!(keys.contains(&"layer2.0.downsample.0.weight".to_string()));
    assert!(keys.contains(&"layer2.0.downsample.1.running_var".to_string()));
    same_tensors(&original, &path, |k| {
        !(k.starts_with("fc.")
            || k.starts_with("input")
            || k.starts_with("expected.")
            || k.ends_with("num_batches_tracked"))
    });
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_vit_exports_as_the_timm_state_dict_it_was_loaded_from() {
    let device = Default::default();
    let original = fixture("vit_timm.safetensors");
    let mut vit = VitConfig::new(16)
        .with_patch_size(4)
        .with_embed_dim(32)
        .with_depth(2)
        .with_num_heads(4)
        .init::<Infer>(&device);
    load_torchvision(&mut vit, None, &original).expect("import");
    let path = scratch("vit.safetensors");
    let (names, _) = AnyBackbone::Vit(vit).save_safetensors(&[], &path).unwrap();
    assert_eq!(names, ExportNames::TimmVit);
    same_tensors(&original, &path, |k| {
        !(k.starts_with("head.")
            || k.starts_with("fc_norm.")
            || k.starts_with("input")
            || k.starts_with("expected."))
    });
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_one_channel_resnet_takes_three_channel_weights_summed_over_the_colours() {
    let device = Default::default();
    let original = fixture("resnet18_cifar_w4.safetensors");
    let config = ResNetConfig::resnet18()
        .with_stem(Stem::Cifar)
        .with_base_width(4);
    let mut rgb = config.clone().init::<Infer>(&device);
    load_torchvision(&mut rgb, None, &original).expect("three channels");
    let mut grey = config.clone().with_in_channels(1).init::<Infer>(&device);
    load_torchvision(&mut grey, None, &original).expect("adapted to one channel");
    let mut two = config.with_in_channels(2).init::<Infer>(&device);
    load_torchvision(&mut two, None, &original).expect("adapted to two channels");

    // The filters: the sum of the colour channels; for two channels, R and G times 3/2.
    let w = rgb.conv1.weight.val();
    let [o, _, kh, kw] = w.dims();
    let summed = w.clone().sum_dim(1);
    let got = grey.conv1.weight.val();
    assert_eq!(got.dims(), [o, 1, kh, kw]);
    assert_eq!(got.into_data(), summed.into_data());
    let expected = w.slice([0..o, 0..2, 0..kh, 0..kw]).mul_scalar(1.5);
    two.conv1.weight.val().into_data().assert_approx_eq::<f32>(
        &expected.into_data(),
        burn::tensor::Tolerance::absolute(1e-7),
    );

    // A grey image: one channel through the adapted network, three equal channels through the
    // original.
    let x: Tensor<Infer, 4> = Tensor::random(
        [2, 1, 16, 16],
        burn::tensor::Distribution::Uniform(-1.0, 1.0),
        &device,
    );
    let a = grey.forward_features(x.clone());
    let b = rgb.forward_features(Tensor::cat(vec![x.clone(), x.clone(), x], 1));
    a.into_data()
        .assert_approx_eq::<f32>(&b.into_data(), burn::tensor::Tolerance::absolute(1e-4));
}

/// A state_dict's tensors that belong to the backbone: no classifier, no batch counters, no
/// fixture entries.
fn backbone_key(k: &str) -> bool {
    !(k.starts_with("classifier.")
        || k.starts_with("fc.")
        || k.starts_with("input")
        || k.starts_with("expected.")
        || k.ends_with("num_batches_tracked"))
}

#[test]
fn efficientnets_and_mobilenets_export_as_the_torchvision_state_dicts_they_were_loaded_from() {
    let device = Default::default();
    let original = fixture("efficientnet_b0_w025_d025.safetensors");
    let mut model = EfficientNetConfig::new(0.25, 0.25)
        .with_stochastic_depth_prob(0.0)
        .init::<Infer>(&device);
    load_torchvision(&mut model, None, &original).expect("import");
    let path = scratch("efficientnet.safetensors");
    let (names, _) = AnyBackbone::EfficientNet(model)
        .save_safetensors(&[], &path)
        .unwrap();
    assert_eq!(names, ExportNames::TorchvisionEfficientNet);
    same_tensors(&original, &path, backbone_key);

    let original = fixture("mobilenet_v3_large_w0125.safetensors");
    let mut model = MobileNetV3Config::large()
        .with_width_mult(0.125)
        .init::<Infer>(&device);
    load_torchvision(&mut model, None, &original).expect("import");
    let path_m = scratch("mobilenet.safetensors");
    let (names, _) = AnyBackbone::MobileNetV3(model)
        .save_safetensors(&[], &path_m)
        .unwrap();
    assert_eq!(names, ExportNames::TorchvisionMobileNetV3);
    same_tensors(&original, &path_m, backbone_key);
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(path_m);
}

/// Full-size models: every key and shape of torchvision's own state_dicts
/// (`tests/pytorch/export_state_dict_keys.py`), less the classifier and the counters.
#[test]
fn full_size_exports_have_torchvisions_keys_and_shapes() {
    use std::collections::BTreeMap;
    type Shapes = BTreeMap<String, Vec<usize>>;
    let text = std::fs::read_to_string(fixture("torchvision_state_dict_keys.json")).unwrap();
    let all: BTreeMap<String, Shapes> = serde_json::from_str(&text).unwrap();
    let device = Default::default();
    let cases: Vec<(&str, AnyBackbone<Infer>)> = vec![
        (
            "resnet50",
            AnyBackbone::ResNet(ResNetConfig::resnet50().init(&device)),
        ),
        (
            "efficientnet_b1",
            AnyBackbone::EfficientNet(EfficientNetConfig::b1().init(&device)),
        ),
        (
            "mobilenet_v3_large",
            AnyBackbone::MobileNetV3(MobileNetV3Config::large().init(&device)),
        ),
    ];
    for (name, model) in cases {
        let path = scratch(&format!("{name}.safetensors"));
        model.save_safetensors(&[], &path).unwrap();
        let mut store = SafetensorsStore::from_file(&path);
        let got: Shapes = store
            .keys()
            .unwrap()
            .into_iter()
            .map(|k| {
                let shape = store.get_snapshot(&k).unwrap().unwrap().shape.to_vec();
                (k, shape)
            })
            .collect();
        let want: Shapes = all[name]
            .iter()
            .filter(|(k, _)| backbone_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "{name}");
        let _ = std::fs::remove_file(path);
    }
}
