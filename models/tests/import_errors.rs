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

/// A tensor the model takes stored as integers (a batch norm's weight as I64) is named, not
/// converted: burn's conversion panicked (`Expected float dtype, got I64`) and the `recipe`
/// binary then hung. Integer tensors the model does not take (torchvision's
/// `num_batches_tracked`) are still allowed.
#[test]
fn integer_tensors_the_model_takes_are_named() {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    let bytes = std::fs::read(fixture("resnet18_cifar_w4.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let target = "layer1.0.bn1.weight";
    let int_data: Vec<u8> = {
        let view = file.tensor(target).unwrap();
        let n: usize = view.shape().iter().product();
        vec![0u8; n * 8]
    };
    let tensors: Vec<(String, TensorView<'_>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            if name == target {
                let shape = view.shape().to_vec();
                (name, TensorView::new(Dtype::I64, shape, &int_data).unwrap())
            } else {
                (name, view)
            }
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("import-int-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("int.safetensors");
    std::fs::write(&path, safetensors::serialize(tensors, None).unwrap()).unwrap();
    let mut model = small_resnet().init::<Infer>(&Default::default());
    let err = load_torchvision(&mut model, None, &path).unwrap_err();
    assert!(
        matches!(err, ModelError::WrongTensor { .. })
            && err.to_string().contains("layer1.0.bn1.weight is I64"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A FIFO given as the weight file is refused without being opened (opening it blocked until
/// something wrote to it), and a directory is named as one.
#[test]
fn a_fifo_or_a_directory_is_not_a_weight_file() {
    let dir = std::env::temp_dir().join(format!("import-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("w.safetensors");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut model = small_resnet().init::<Infer>(&Default::default());
    let err = load_torchvision(&mut model, None, &fifo).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let err = load_torchvision(&mut model, None, &dir).unwrap_err();
    assert!(err.to_string().contains("a directory"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
