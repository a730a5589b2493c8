//! The backbone a recipe trains (`--backbone`, `--stem`, `--weights`) and its checks.

use crate::backend;
use crate::backend::Device;
use crate::usage::usage;
use anyhow::Result;
use clap::ValueEnum;
use curriculum_ssl_models::{
    AnyBackbone, AnyBackboneConfig, BlockKind, EfficientNetConfig, LeNetConfig, MobileNetV3Config,
    ResNetConfig, Stem, VggConfig, VitConfig, VitPool, WideResNetConfig,
};
use serde::Serialize;
use std::path::PathBuf;

/// The backbone a recipe trains: every model of `curriculum_ssl_models`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
pub enum BackboneChoice {
    /// ResNet-18 (512-d features): the papers' small-image backbone (CIFAR stem by default).
    Resnet18,
    /// ResNet-34 (512-d features).
    Resnet34,
    /// ResNet-50 (2048-d features, bottleneck blocks).
    Resnet50,
    /// WideResNet-16-8 (512-d features).
    #[value(name = "wrn-16-8")]
    Wrn16x8,
    /// WideResNet-28-10 (640-d features).
    #[value(name = "wrn-28-10")]
    Wrn28x10,
    /// EfficientNet-B0 (1280-d features): one of Light-MoCo's small backbones.
    #[value(name = "efficientnet-b0")]
    EfficientnetB0,
    /// EfficientNet-B1 (1280-d features).
    #[value(name = "efficientnet-b1")]
    EfficientnetB1,
    /// MobileNet-V3-Large (960-d features): Light-MoCo's subject.
    #[value(name = "mobilenet-v3-large")]
    MobilenetV3Large,
    /// MobileNet-V3-Small (576-d features).
    #[value(name = "mobilenet-v3-small")]
    MobilenetV3Small,
    /// VGG-16 with batch norm (512-d features; images of at least 32 pixels).
    #[value(name = "vgg16-bn")]
    Vgg16Bn,
    /// LeNet-5 (84-d features): the SPL-ADVisE embedding network for Fashion-MNIST.
    #[value(name = "lenet5")]
    Lenet5,
    /// ResNet with one block per stage, widths 8–64, ImageNet stem (64-d features): a fast
    /// backbone for CPU demos and CI.
    Small,
    /// The small ResNet four times as wide: widths 32–256, ImageNet stem (256-d features).
    #[value(name = "small-wide")]
    SmallWide,
    /// The small ResNet twice as wide with the stride-2 stem: widths 16–128 on 14×14 to 2×2
    /// maps for 28-pixel images, that last map flattened (512-d features; 128-d with
    /// `--pooled-grid 1`). The CPU default.
    #[value(name = "small-2x")]
    Small2x,
    /// ViT-Micro (96-d class token, 4 blocks): a fast ViT for CPU demos and CI, as `small` is
    /// for the ResNets; patches as ViT-Tiny's.
    #[value(name = "vit-micro")]
    VitMicro,
    /// ViT-Tiny (192-d class token): patches of 16 pixels on images of 96 and more, 4 below.
    #[value(name = "vit-tiny")]
    VitTiny,
    /// ViT-Small (384-d class token), MoCo v3's and DINO's ViT; patches as ViT-Tiny's.
    #[value(name = "vit-small")]
    VitSmall,
    /// ViT-Base (768-d class token); patches as ViT-Tiny's.
    #[value(name = "vit-base")]
    VitBase,
}

/// As on the command line (`resnet18`, `vit-micro`), for messages.
impl std::fmt::Display for BackboneChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.to_possible_value().expect("no skipped variant");
        f.write_str(value.get_name())
    }
}

/// The first layers of a ResNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
pub enum StemChoice {
    /// 3×3 convolution, stride 1, no pooling (small images).
    Cifar,
    /// 7×7 convolution, stride 2, then max pooling (ImageNet).
    Imagenet,
    /// 3×3 convolution, stride 2, no pooling (small images at half resolution).
    Stride2,
}

impl BackboneChoice {
    /// The default for the build: ResNet-18 on a GPU backend, `small-2x` on the CPU (against
    /// `small`, MoCo v3 on the full Fashion-MNIST, 3 seeds: kNN +2.5, linear probe +3.8 points,
    /// studies/cpu_setting).
    pub fn default_for_backend() -> Self {
        if backend::on_cpu() {
            Self::Small2x
        } else {
            Self::Resnet18
        }
    }

    /// Whether it is one of the CPU-sized backbones (`small`, `small-wide`, `small-2x`, `lenet5`,
    /// `vit-micro`), whose 84–512 features want heads narrower than the papers' 2048–4096.
    /// ViT-Micro (96-d) is one: with MoCo v3's 4096-wide heads its two-step run wrote a 312 MB
    /// checkpoint and took 9 s against 0.8 s for `small-2x` (2 cores, 2026-12-03).
    pub fn is_cpu_sized(self) -> bool {
        matches!(
            self,
            Self::Small | Self::SmallWide | Self::Small2x | Self::Lenet5 | Self::VitMicro
        )
    }

    /// Whether it is one of the Vision Transformers.
    pub fn is_vit(self) -> bool {
        matches!(
            self,
            Self::VitMicro | Self::VitTiny | Self::VitSmall | Self::VitBase
        )
    }

    /// Whether `--stem` applies.
    pub fn is_resnet(self) -> bool {
        matches!(
            self,
            Self::Resnet18
                | Self::Resnet34
                | Self::Resnet50
                | Self::Small
                | Self::SmallWide
                | Self::Small2x
        )
    }

    /// The ViTs' patch size on images of `side` pixels: 16 (the papers') from 96 pixels, 4 below
    /// (a 7 × 7 grid on 28-pixel images, 8 × 8 on 32).
    pub fn vit_patch(side: usize) -> usize {
        if side >= 96 {
            16
        } else {
            4
        }
    }

    /// The stem of a ResNet when --stem is not given: CIFAR's for ResNet-18/34/50, ImageNet's
    /// for the small ResNet and its wide variant, the stride-2 stem for `small-2x`.
    pub fn default_stem(self) -> StemChoice {
        match self {
            Self::Small | Self::SmallWide => StemChoice::Imagenet,
            Self::Small2x => StemChoice::Stride2,
            _ => StemChoice::Cifar,
        }
    }

    /// The grid a ResNet's last map is average-pooled to when `--pooled-grid` is not given
    /// ([`ResNetConfig::pooled_grid`]), for images of `side` pixels through `stem` (`None`: the
    /// backbone's default stem): 2 for `small-2x` where its last map is at least 2×2 — on
    /// 28-pixel images it is 2×2, and keeping it rather than averaging it was worth about a
    /// point of kNN accuracy on Fashion-MNIST in a one-seed PyTorch screen
    /// (`benches/pytorch/cpu_setting_fmnist.py`; its output was not kept) —, 1 (global average
    /// pooling) on smaller maps and for every other backbone.
    pub fn default_pooled_grid(self, stem: Option<StemChoice>, side: usize) -> usize {
        let total_stride = match stem.unwrap_or(self.default_stem()) {
            StemChoice::Cifar => 8,
            StemChoice::Stride2 => 16,
            StemChoice::Imagenet => 32,
        };
        match self {
            Self::Small2x if side.div_ceil(total_stride) >= 2 => 2,
            _ => 1,
        }
    }

    /// Its configuration for `channels` input channels and square images of `side` pixels (the
    /// ViTs' positional embeddings are made for that grid); `stem` for the ResNets (default: the
    /// CIFAR stem for ResNet-18/34/50, the ImageNet stem for the small ResNet); `pooled_grid`
    /// the ResNets' [`ResNetConfig::pooled_grid`] (1 for the other backbones, which pool
    /// globally).
    pub fn config(
        self,
        channels: usize,
        side: usize,
        stem: Option<StemChoice>,
        pooled_grid: usize,
    ) -> AnyBackboneConfig {
        let stem = || match stem.unwrap_or(self.default_stem()) {
            StemChoice::Cifar => Stem::Cifar,
            StemChoice::Imagenet => Stem::ImageNet,
            StemChoice::Stride2 => Stem::Stride2,
        };
        let resnet = |c: ResNetConfig| {
            AnyBackboneConfig::ResNet(
                c.with_stem(stem())
                    .with_in_channels(channels)
                    .with_pooled_grid(pooled_grid),
            )
        };
        match self {
            Self::Resnet18 => resnet(ResNetConfig::resnet18()),
            Self::Resnet34 => resnet(ResNetConfig::resnet34()),
            Self::Resnet50 => resnet(ResNetConfig::resnet50()),
            Self::Small | Self::SmallWide | Self::Small2x => AnyBackboneConfig::ResNet(
                ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
                    .with_base_width(match self {
                        Self::Small => 8,
                        Self::Small2x => 16,
                        _ => 32,
                    })
                    .with_in_channels(channels)
                    .with_stem(stem())
                    .with_banded_stem(backend::BANDED_STEM)
                    .with_pooled_grid(pooled_grid),
            ),
            Self::Wrn16x8 => AnyBackboneConfig::WideResNet(
                WideResNetConfig::wrn_16_8().with_in_channels(channels),
            ),
            Self::Wrn28x10 => AnyBackboneConfig::WideResNet(
                WideResNetConfig::wrn_28_10().with_in_channels(channels),
            ),
            Self::EfficientnetB0 => {
                AnyBackboneConfig::EfficientNet(EfficientNetConfig::b0().with_in_channels(channels))
            }
            Self::EfficientnetB1 => {
                AnyBackboneConfig::EfficientNet(EfficientNetConfig::b1().with_in_channels(channels))
            }
            Self::MobilenetV3Large => AnyBackboneConfig::MobileNetV3(
                MobileNetV3Config::large().with_in_channels(channels),
            ),
            Self::MobilenetV3Small => AnyBackboneConfig::MobileNetV3(
                MobileNetV3Config::small().with_in_channels(channels),
            ),
            Self::Vgg16Bn => {
                AnyBackboneConfig::Vgg(VggConfig::vgg16_bn().with_in_channels(channels))
            }
            Self::Lenet5 => {
                AnyBackboneConfig::LeNet(LeNetConfig::lenet5().with_in_channels(channels))
            }
            Self::VitMicro => AnyBackboneConfig::Vit(
                VitConfig::micro(side, Self::vit_patch(side)).with_in_channels(channels),
            ),
            Self::VitTiny => AnyBackboneConfig::Vit(
                VitConfig::tiny(side, Self::vit_patch(side)).with_in_channels(channels),
            ),
            Self::VitSmall => AnyBackboneConfig::Vit(
                VitConfig::small(side, Self::vit_patch(side)).with_in_channels(channels),
            ),
            Self::VitBase => AnyBackboneConfig::Vit(
                VitConfig::base(side, Self::vit_patch(side)).with_in_channels(channels),
            ),
        }
    }
}

/// `config` with a ViT's features pooled by `pool` ([`VitPool`]); any other backbone as it is.
pub fn with_vit_pool(config: AnyBackboneConfig, pool: VitPool) -> AnyBackboneConfig {
    match config {
        AnyBackboneConfig::Vit(vit) => AnyBackboneConfig::Vit(vit.with_pool(pool)),
        other => other,
    }
}

/// A recipe's backbone: its configuration and the torchvision weights it starts from.
#[derive(Debug, Clone)]
pub struct BackboneSpec {
    /// The model.
    pub config: AnyBackboneConfig,
    /// Weights checked by [`BackboneSpec::check`] when the recipe was prepared.
    pub weights: Option<PathBuf>,
}

impl BackboneSpec {
    /// Builds the backbone (with its weights).
    ///
    /// # Panics
    /// If the weights cannot be loaded, which [`BackboneSpec::check`] rules out before
    /// any backbone is built (the same file into the same model).
    pub fn init<B: burn::tensor::backend::Backend>(&self, device: &B::Device) -> AnyBackbone<B> {
        let mut backbone = self.config.init(device);
        if let Some(path) = &self.weights {
            backbone
                .load_torchvision(path)
                .expect("the weights were checked when the recipe was prepared");
        }
        backbone
    }

    /// Builds a throwaway backbone once and checks it against the data before anything else
    /// happens: images of `(height, width, channels)` must fit it (channels, smallest size), and
    /// the weights, if given, must load into it.
    ///
    /// # Errors
    /// Naming `option` (the backbone's option) or `--weights` and what is wrong.
    pub fn check(
        &self,
        (height, width, channels): (usize, usize, usize),
        option: &str,
        device: &Device,
    ) -> Result<()> {
        let mut backbone = self.config.init::<backend::Inner>(device);
        backbone
            .check_input([1, channels, height, width])
            .map_err(|e| usage(format!("{option}: {e}")))?;
        if let AnyBackbone::ResNet(resnet) = &backbone {
            resnet
                .check_pooled_grid(height, width)
                .map_err(|e| usage(format!("{option}: {e}")))?;
        }
        if let Some(path) = &self.weights {
            backbone.load_torchvision(path).map_err(|e| {
                usage(format!(
                    "--weights {}: {e}{}",
                    path.display(),
                    self.stem_hint(&e.to_string())
                ))
            })?;
        }
        Ok(())
    }

    /// For a ResNet whose first convolution did not fit the file's: the --stem that would (the
    /// CIFAR stem is a 3×3 convolution, ImageNet's — torchvision's weights — a 7×7 one).
    fn stem_hint(&self, error: &str) -> &'static str {
        let AnyBackboneConfig::ResNet(c) = &self.config else {
            return "";
        };
        if !error.contains("conv1.weight") {
            return "";
        }
        match c.stem {
            Stem::Cifar => {
                " (the model has the CIFAR stem, a 3×3 first convolution; torchvision's ResNet \
                 weights have ImageNet's 7×7 stem: add --stem imagenet)"
            }
            Stem::ImageNet => {
                " (the model has the ImageNet stem, a 7×7 first convolution; weights trained \
                 with the CIFAR stem need --stem cifar)"
            }
            Stem::Stride2 => {
                " (the model has the stride-2 stem, a 3×3 first convolution; torchvision's \
                 ResNet weights have ImageNet's 7×7 stem: add --stem imagenet)"
            }
        }
    }
}
