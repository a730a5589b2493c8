//! Backbones for curriculum-ssl, generic over burn's [`Backend`].
//!
//! Every model exposes [`Backbone::forward_features`] (pooled features, no classifier),
//! [`Backbone::feature_dim`] and [`Backbone::forward_feature_map`] (the spatial map the features
//! pool); classifier heads are separate modules ([`head::Classifier`]).
//!
//! | model | config preset | features |
//! |---|---|---|
//! | ResNet-18/34/50 | [`ResNetConfig::resnet18`], `resnet34`, `resnet50` | 512 / 512 / 2048 |
//! | EfficientNet-B0/B1 | [`EfficientNetConfig::b0`], `b1` | 1280 |
//! | MobileNet-V3-Large/Small | [`MobileNetV3Config::large`], `small` | 960 / 576 |
//! | WRN-16-8 / 28-10 | [`WideResNetConfig::wrn_16_8`], `wrn_28_10` | 512 / 640 |
//! | VGG-16-BN | [`VggConfig::vgg16_bn`] | 512 (or 25 088) |
//! | LeNet-5 | [`LeNetConfig::lenet5`] | 84 |
//! | ViT-Tiny/Small/Base | [`VitConfig::tiny`], `small`, `base` | 192 / 384 / 768 |
//!
//! Batch norm follows PyTorch exactly ([`layers::BatchNorm2d`]); torchvision weights load with
//! [`import::load_torchvision`] (timm's for the ViT).
#![warn(missing_docs)]
// Unsafe code only in the CPU kernels that write uninitialised output buffers whole before
// anyone reads them (`kernels::{gemm, matmul, batch_norm, softmax, log_softmax}`, allowed there
// by name, each site with its SAFETY comment).
#![deny(unsafe_code)]

pub mod any;
pub mod backbone;
pub mod banded_conv;
pub mod efficientnet;
pub mod error;
pub mod head;
pub mod import;
pub mod kernels;
pub mod layers;
pub mod lenet;
pub mod mobilenet_v3;
pub mod replica_stats;
pub mod resnet;
pub mod running_stat;
pub mod vgg;
pub mod vit;
pub mod wide_resnet;

pub use any::{AnyBackbone, AnyBackboneConfig, ExportNames};
pub use backbone::{Backbone, TrainableBackbone};
pub use efficientnet::{EfficientNet, EfficientNetConfig};
pub use error::ModelError;
pub use head::{Classifier, ClassifierConfig};
pub use lenet::{LeNet, LeNetConfig};
pub use mobilenet_v3::{MobileNetV3, MobileNetV3Config};
pub use resnet::{BlockKind, ResNet, ResNetConfig, Stem};
pub use vgg::{Vgg, VggConfig, VggPooling};
pub use vit::{AsVit, Vit, VitConfig, VitPool};
pub use wide_resnet::{WideResNet, WideResNetConfig};

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;

/// Number of trainable parameters, as PyTorch's `sum(p.numel() for p in model.parameters())`
/// counts them: batch-norm running statistics (buffers) are left out, unlike burn's
/// `Module::num_params`.
pub fn count_parameters<B: Backend, M: Module<B>>(module: &M) -> usize {
    struct Counter {
        path: Vec<String>,
        count: usize,
    }
    impl<B: Backend> ModuleVisitor<B> for Counter {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let buffer = self
                .path
                .last()
                .is_some_and(|n| n == "running_mean" || n == "running_var");
            if !buffer {
                self.count += param.shape().num_elements();
            }
        }
    }
    let mut counter = Counter {
        path: Vec::new(),
        count: 0,
    };
    module.visit(&mut counter);
    counter.count
}
