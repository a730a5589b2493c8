//! The import path reports bad files as errors naming the problem.

use crate::common::{fixture, Infer};
use curriculum_ssl_models::import::load_torchvision;
use curriculum_ssl_models::{ModelError, ResNetConfig, Stem};

fn small_resnet() -> ResNetConfig {
    ResNetConfig::resnet18()
        .with_stem(Stem::Cifar)
        .with_base_width(4)
}

#[test]
fn missing_file_is_an_error() {
    let mut model = small_resnet().init::<Infer>(&Default::default());
    let err = load_torchvision(&mut model, None, fixture("no_such_file.safetensors")).unwrap_err();
    assert!(matches!(err, ModelError::WeightFile { .. }), "{err}");
}

#[test]
fn missing_tensors_are_listed() {
    // ResNet-34 layout: stage 1 has 3 blocks, the ResNet-18 file only 2.
    let mut model = ResNetConfig::resnet34()
        .with_stem(Stem::Cifar)
        .with_base_width(4)
        .init::<Infer>(&Default::default());
    let err =
        load_torchvision(&mut model, None, fixture("resnet18_cifar_w4.safetensors")).unwrap_err();
    match &err {
        ModelError::MissingKeys { missing, .. } => {
            assert!(
                missing.iter().any(|k| k == "layer1.2.conv1.weight"),
                "{err}"
            );
            assert!(
                missing.iter().any(|k| k == "layer1.2.bn2.running_var"),
                "{err}"
            );
        }
        other => panic!("expected MissingKeys, got {other}"),
    }
    assert!(err.to_string().contains("layer1.2.conv1.weight"));
}

#[test]
fn wrong_shapes_are_reported() {
    let mut model = ResNetConfig::resnet18()
        .with_stem(Stem::Cifar)
        .with_base_width(8)
        .init::<Infer>(&Default::default());
    let err =
        load_torchvision(&mut model, None, fixture("resnet18_cifar_w4.safetensors")).unwrap_err();
    assert!(matches!(err, ModelError::WrongTensor { .. }), "{err}");
    assert!(err.to_string().contains("conv1.weight"), "{err}");
}

#[test]
fn wrong_stem_is_reported() {
    // ImageNet stem: 7×7 first convolution against the file's 3×3.
    let mut model = ResNetConfig::resnet18()
        .with_base_width(4)
        .init::<Infer>(&Default::default());
    let err =
        load_torchvision(&mut model, None, fixture("resnet18_cifar_w4.safetensors")).unwrap_err();
    assert!(err.to_string().contains("conv1.weight"), "{err}");
}
