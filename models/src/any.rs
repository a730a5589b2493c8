//! One backbone type for every model of the crate, for programs that choose the model at run
//! time (the `recipe` binary's `--backbone`): a burn module enum whose variants are the models,
//! and the matching configuration enum.

use burn::prelude::*;

use crate::import::{load_torchvision, save_safetensors, TorchvisionImport};
use crate::ModelError;
use crate::{
    AsVit, Backbone, EfficientNet, EfficientNetConfig, LeNet, LeNetConfig, MobileNetV3,
    MobileNetV3Config, ResNet, ResNetConfig, Vgg, VggConfig, Vit, VitConfig, WideResNet,
    WideResNetConfig,
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
    /// A Vision Transformer.
    Vit(Vit<B>),
}

impl<B: Backend> AsVit<B> for AnyBackbone<B> {
    fn as_vit(&self) -> Option<&Vit<B>> {
        match self {
            Self::Vit(m) => Some(m),
            _ => None,
        }
    }
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
            Self::Vit(m) => m.forward_features(images),
        }
    }

    /// The ResNet's grouped pass; the other variants' groups one after the other (the trait's
    /// default).
    ///
    /// # Shapes
    /// - input: `[groups · batch, channels, height, width]`
    /// - output: `[groups · batch, feature_dim]`
    fn forward_features_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        match self {
            Self::ResNet(m) => m.forward_features_grouped(images, groups),
            Self::WideResNet(m) => m.forward_features_grouped(images, groups),
            Self::EfficientNet(m) => m.forward_features_grouped(images, groups),
            Self::MobileNetV3(m) => m.forward_features_grouped(images, groups),
            Self::Vgg(m) => m.forward_features_grouped(images, groups),
            Self::LeNet(m) => m.forward_features_grouped(images, groups),
            Self::Vit(m) => m.forward_features_grouped(images, groups),
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
            Self::Vit(m) => m.feature_dim(),
        }
    }

    /// The variant's own feature map (every model of the crate has one).
    ///
    /// # Shapes
    /// - input: `[batch, channels, height, width]`
    /// - output: `[batch, map_channels, map_height, map_width]`
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        match self {
            Self::ResNet(m) => m.forward_feature_map(images),
            Self::WideResNet(m) => m.forward_feature_map(images),
            Self::EfficientNet(m) => m.forward_feature_map(images),
            Self::MobileNetV3(m) => m.forward_feature_map(images),
            Self::Vgg(m) => m.forward_feature_map(images),
            Self::LeNet(m) => m.forward_feature_map(images),
            Self::Vit(m) => m.forward_feature_map(images),
        }
    }
}

impl<B: Backend> AnyBackbone<B> {
    /// Checks that images of `shape` (`[batch, channels, height, width]`) fit the model: the
    /// channel count it was built for and the smallest size its downsampling allows.
    ///
    /// # Errors
    /// Naming what does not fit, as the model's own `check_input`.
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        match self {
            Self::ResNet(m) => m.check_input(shape),
            Self::WideResNet(m) => m.check_input(shape),
            Self::EfficientNet(m) => m.check_input(shape),
            Self::MobileNetV3(m) => m.check_input(shape),
            Self::Vgg(m) => m.check_input(shape),
            Self::LeNet(m) => m.check_input(shape),
            Self::Vit(m) => m.check_input(shape),
        }
    }

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
            Self::Vit(m) => load_torchvision(m, None, path),
            Self::WideResNet(_) | Self::Vgg(_) | Self::LeNet(_) => Err(ModelError::InvalidConfig(
                "torchvision weights can be loaded into the ResNets, EfficientNets and \
                 MobileNet-V3s only (timm weights into the ViT)"
                    .into(),
            )),
        }
    }
}

/// The names under which [`AnyBackbone::save_safetensors`] wrote a backbone's tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportNames {
    /// torchvision's and timm's `resnet*` keys.
    TorchvisionResNet,
    /// torchvision's `efficientnet_b*` keys.
    TorchvisionEfficientNet,
    /// torchvision's `mobilenet_v3_*` keys.
    TorchvisionMobileNetV3,
    /// timm's `VisionTransformer` keys.
    TimmVit,
    /// The burn module's own paths (no PyTorch model has this architecture's layout: the
    /// WideResNets, VGG and LeNet here), with PyTorch's tensor layout.
    Burn,
}

impl<B: Backend> AnyBackbone<B> {
    /// The key names [`AnyBackbone::save_safetensors`] writes this backbone under.
    pub fn export_names(&self) -> ExportNames {
        match self {
            Self::ResNet(_) => ExportNames::TorchvisionResNet,
            Self::EfficientNet(_) => ExportNames::TorchvisionEfficientNet,
            Self::MobileNetV3(_) => ExportNames::TorchvisionMobileNetV3,
            Self::Vit(_) => ExportNames::TimmVit,
            Self::WideResNet(_) | Self::Vgg(_) | Self::LeNet(_) => ExportNames::Burn,
        }
    }

    /// Writes the backbone to a safetensors file in PyTorch's layout, under torchvision's or
    /// timm's key names where the architecture exists there ([`ExportNames`]), with `metadata`
    /// in the header. Returns the names used and the keys written.
    ///
    /// # Errors
    /// [`ModelError::WeightWrite`] if the file cannot be written.
    pub fn save_safetensors(
        &self,
        metadata: &[(String, String)],
        path: &std::path::Path,
    ) -> Result<(ExportNames, Vec<String>), ModelError> {
        let names = self.export_names();
        let keys = match self {
            Self::ResNet(m) => save(m, m.export_renames(), metadata, path),
            Self::EfficientNet(m) => save(m, m.export_renames(), metadata, path),
            Self::MobileNetV3(m) => save(m, m.export_renames(), metadata, path),
            Self::Vit(m) => save(m, m.export_renames(), metadata, path),
            Self::WideResNet(m) => save_safetensors(m, &[], metadata, path),
            Self::Vgg(m) => save_safetensors(m, &[], metadata, path),
            Self::LeNet(m) => save_safetensors(m, &[], metadata, path),
        }?;
        Ok((names, keys))
    }
}

/// [`save_safetensors`] with a model's renames (none: its own paths).
fn save<B: Backend, M: burn_store::ModuleSnapshot<B>>(
    model: &M,
    renames: Option<Vec<(String, String)>>,
    metadata: &[(String, String)],
    path: &std::path::Path,
) -> Result<Vec<String>, ModelError> {
    save_safetensors(model, &renames.unwrap_or_default(), metadata, path)
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
    /// A Vision Transformer.
    Vit(VitConfig),
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
            Self::Vit(c) => AnyBackbone::Vit(c.init(device)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Flex, NdArray};

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

    fn input(shape: [usize; 4]) -> Tensor<Flex, 4> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 257) as f32 / 128.0 - 1.0)
            .collect();
        Tensor::from_data(TensorData::new(v, shape), &Default::default())
    }

    /// Every variant returns its last spatial map, of the documented shape, and its pooled
    /// features are exactly that map's global average (LeNet: its fully connected layers read
    /// that map through the 5×5 pool, the identity at 28×28). On Flex, whose kernels give the
    /// same bits on every call (NdArray's threaded convolutions do not, so two forward passes
    /// there may differ in the last bits).
    #[test]
    fn every_variant_has_a_feature_map_that_its_features_pool() {
        use crate::layers::global_avg_pool;
        use crate::{BlockKind, Stem};
        let device = Default::default();
        let cases: Vec<(AnyBackboneConfig, [usize; 4], [usize; 4])> = vec![
            (
                AnyBackboneConfig::ResNet(
                    ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
                        .with_base_width(4)
                        .with_stem(Stem::Cifar),
                ),
                [2, 3, 32, 32],
                [2, 32, 4, 4],
            ),
            (
                AnyBackboneConfig::WideResNet(WideResNetConfig::new(10, 1)),
                [2, 3, 12, 12],
                [2, 64, 3, 3],
            ),
            (
                AnyBackboneConfig::EfficientNet(EfficientNetConfig::b0()),
                [2, 3, 64, 64],
                [2, 1280, 2, 2],
            ),
            (
                AnyBackboneConfig::MobileNetV3(MobileNetV3Config::small()),
                [2, 3, 64, 64],
                [2, 576, 2, 2],
            ),
            (
                AnyBackboneConfig::Vgg(VggConfig::new(vec![8, 0, 16, 0])),
                [2, 3, 16, 16],
                [2, 16, 4, 4],
            ),
        ];
        for (config, shape, map_shape) in cases {
            let model = config.init::<Flex>(&device);
            let x = input(shape);
            let map = model
                .forward_feature_map(x.clone())
                .expect("every model of the crate has a feature map");
            assert_eq!(map.dims(), map_shape, "{config:?}");
            let pooled: Vec<f32> = global_avg_pool(map).into_data().to_vec().unwrap();
            let features: Vec<f32> = model.forward_features(x).into_data().to_vec().unwrap();
            assert_eq!(pooled.len(), shape[0] * model.feature_dim());
            // Exactly: the features are computed from the same map by the same pooling.
            assert_eq!(pooled, features, "{config:?}");
        }
        let lenet = AnyBackboneConfig::LeNet(LeNetConfig::lenet5()).init::<Flex>(&device);
        let map = lenet.forward_feature_map(input([2, 1, 28, 28])).unwrap();
        assert_eq!(map.dims(), [2, 16, 5, 5]);
    }
}
