//! One backbone type for every model of the crate, for programs that choose the model at run
//! time (the `recipe` binary's `--backbone`): a burn module enum whose variants are the models,
//! and the matching configuration enum.

use burn::prelude::*;

use crate::import::load_torchvision;
use crate::ModelError;
use crate::{
    Backbone, EfficientNet, EfficientNetConfig, LeNet, LeNetConfig, MobileNetV3, MobileNetV3Config,
    ResNet, ResNetConfig, Vgg, VggConfig, WideResNet, WideResNetConfig,
};

/// Any backbone of the crate.
#[derive(Module, Debug)]
pub enum AnyBackbone<B: Backend> {
    /// ResNet-18/34/50 or a custom ResNet.
    ResNet(ResNet<B>),
    /// WideResNet (WRN-16-8, WRN-28-10).
    WideResNet(WideResNet<B>),
    /// EfficientNet-B0/B1.
    EfficientNet(EfficientNet<B>),
    /// MobileNet-V3 Large/Small.
    MobileNetV3(MobileNetV3<B>),
    /// VGG-16 with batch norm.
    Vgg(Vgg<B>),
    /// LeNet-5.
    LeNet(LeNet<B>),
}

impl<B: Backend> Backbone<B> for AnyBackbone<B> {
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        match self {
            Self::ResNet(m) => m.forward_features(images),
            Self::WideResNet(m) => m.forward_features(images),
            Self::EfficientNet(m) => m.forward_features(images),
            Self::MobileNetV3(m) => m.forward_features(images),
            Self::Vgg(m) => m.forward_features(images),
            Self::LeNet(m) => m.forward_features(images),
        }
    }

    fn feature_dim(&self) -> usize {
        match self {
            Self::ResNet(m) => m.feature_dim(),
            Self::WideResNet(m) => m.feature_dim(),
            Self::EfficientNet(m) => m.feature_dim(),
            Self::MobileNetV3(m) => m.feature_dim(),
            Self::Vgg(m) => m.feature_dim(),
            Self::LeNet(m) => m.feature_dim(),
        }
    }
}

impl<B: Backend> AnyBackbone<B> {
    /// Loads torchvision weights (a safetensors export of its `state_dict`) into the backbone.
    ///
    /// # Errors
    /// For the models torchvision has no weights of ours for (WideResNet, VGG, LeNet here), and
    /// the errors of [`load_torchvision`] (file, missing tensors, wrong shapes).
    pub fn load_torchvision(&mut self, path: &std::path::Path) -> Result<(), ModelError> {
        match self {
            Self::ResNet(m) => load_torchvision(m, None, path),
            Self::EfficientNet(m) => load_torchvision(m, None, path),
            Self::MobileNetV3(m) => load_torchvision(m, None, path),
            Self::WideResNet(_) | Self::Vgg(_) | Self::LeNet(_) => Err(ModelError::InvalidConfig(
                "torchvision weights can be loaded into the ResNets, EfficientNets and \
                 MobileNet-V3s only"
                    .into(),
            )),
        }
    }
}

/// The configuration of an [`AnyBackbone`].
#[derive(Debug, Clone)]
pub enum AnyBackboneConfig {
    /// A ResNet.
    ResNet(ResNetConfig),
    /// A WideResNet.
    WideResNet(WideResNetConfig),
    /// An EfficientNet.
    EfficientNet(EfficientNetConfig),
    /// A MobileNet-V3.
    MobileNetV3(MobileNetV3Config),
    /// A VGG.
    Vgg(VggConfig),
    /// A LeNet.
    LeNet(LeNetConfig),
}

impl AnyBackboneConfig {
    /// Builds the backbone.
    ///
    /// # Panics
    /// On the configurations each model's own `init` refuses (zero channels or widths).
    pub fn init<B: Backend>(&self, device: &B::Device) -> AnyBackbone<B> {
        match self {
            Self::ResNet(c) => AnyBackbone::ResNet(c.init(device)),
            Self::WideResNet(c) => AnyBackbone::WideResNet(c.init(device)),
            Self::EfficientNet(c) => AnyBackbone::EfficientNet(c.init(device)),
            Self::MobileNetV3(c) => AnyBackbone::MobileNetV3(c.init(device)),
            Self::Vgg(c) => AnyBackbone::Vgg(c.init(device)),
            Self::LeNet(c) => AnyBackbone::LeNet(c.init(device)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    /// Every variant forwards to its model: the same features as the model itself.
    #[test]
    fn variants_give_their_models_features() {
        let device = Default::default();
        let config = LeNetConfig::lenet5();
        let any = AnyBackboneConfig::LeNet(config.clone()).init::<NdArray>(&device);
        let AnyBackbone::LeNet(inner) = &any else {
            panic!("a LeNet config builds a LeNet");
        };
        let x = Tensor::<NdArray, 4>::ones([2, 1, 28, 28], &device);
        let a = any.forward_features(x.clone()).into_data();
        let b = inner.forward_features(x).into_data();
        assert_eq!(a, b);
        assert_eq!(any.feature_dim(), inner.feature_dim());
        assert_eq!(any.feature_dim(), 84);
    }
}
