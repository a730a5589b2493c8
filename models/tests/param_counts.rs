//! Parameter counts with a 1000-class head equal torchvision's
//! (`sum(p.numel() for p in model.parameters())`, buffers excluded).

use crate::common::Infer;
use burn::prelude::*;
use curriculum_ssl_models::{
    count_parameters, ClassifierConfig, EfficientNetConfig, MobileNetV3Config, ResNetConfig,
    VggConfig, VggPooling,
};

fn resnet(config: ResNetConfig) -> usize {
    let device = Default::default();
    let model = config.init::<Infer>(&device);
    let head = ClassifierConfig::new(config.feature_dim(), 1000).init::<Infer>(&device);
    count_parameters(&model) + count_parameters(&head)
}

#[test]
fn resnet18_matches_torchvision() {
    assert_eq!(resnet(ResNetConfig::resnet18()), 11_689_512);
}

#[test]
fn resnet34_matches_torchvision() {
    assert_eq!(resnet(ResNetConfig::resnet34()), 21_797_672);
}

#[test]
fn resnet50_matches_torchvision() {
    assert_eq!(resnet(ResNetConfig::resnet50()), 25_557_032);
}

#[test]
fn cifar_stem_changes_only_the_first_convolution() {
    // 7×7×3×64 → 3×3×3×64 weights.
    let cifar = resnet(ResNetConfig::resnet18().with_stem(curriculum_ssl_models::Stem::Cifar));
    assert_eq!(cifar, 11_689_512 - 64 * 3 * (49 - 9));
}

fn efficientnet(config: EfficientNetConfig) -> usize {
    let device = Default::default();
    let model = config.init::<Infer>(&device);
    let head = config.classifier(1000).init::<Infer>(&device);
    count_parameters(&model) + count_parameters(&head)
}

#[test]
fn efficientnet_b0_matches_torchvision() {
    assert_eq!(efficientnet(EfficientNetConfig::b0()), 5_288_548);
}

#[test]
fn efficientnet_b1_matches_torchvision() {
    assert_eq!(efficientnet(EfficientNetConfig::b1()), 7_794_184);
}

fn mobilenet(config: MobileNetV3Config) -> usize {
    let device = Default::default();
    let model = config.init::<Infer>(&device);
    let head = config.classifier(1000).init::<Infer>(&device);
    count_parameters(&model) + count_parameters(&head)
}

#[test]
fn mobilenet_v3_large_matches_torchvision() {
    assert_eq!(mobilenet(MobileNetV3Config::large()), 5_483_032);
}

#[test]
fn mobilenet_v3_small_matches_torchvision() {
    assert_eq!(mobilenet(MobileNetV3Config::small()), 2_542_856);
}

#[test]
fn vgg16_bn_matches_torchvision() {
    let device = Default::default();
    let config = VggConfig::vgg16_bn().with_pooling(VggPooling::Flatten7x7);
    let model = config.init::<Infer>(&device);
    let features = count_parameters(&model);
    drop(model);
    let head = config.classifier(1000).init::<Infer>(&device);
    assert_eq!(features + count_parameters(&head), 138_365_992);
}

#[test]
fn running_statistics_are_not_parameters() {
    // burn's num_params also counts the BN running mean and variance; ResNet-18 has 4800 BN
    // channels (torchvision: 9600 BN weights and biases, 9600 running values).
    let device = Default::default();
    let model = ResNetConfig::resnet18().init::<Infer>(&device);
    assert_eq!(model.num_params() - count_parameters(&model), 2 * 4_800);
}
