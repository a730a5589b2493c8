//! ResNet-18/34/50 (He et al. 2016), laid out as torchvision's `resnet*` so that its state_dicts
//! load with one renaming rule (see [`crate::import`]).

use burn::module::Initializer;
use burn::nn::conv::Conv2d;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::PaddingConfig2d;
use burn::prelude::*;

use crate::backbone::Backbone;
use crate::banded_conv::banded_conv2d;
use crate::error::ModelError;
use crate::kernels;
use crate::layers::{
    check_channels_and_size, conv2d, grid_avg_pool, BatchNorm2d, BatchNorm2dConfig,
};

/// Residual block type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BlockKind {
    /// Two 3×3 convolutions (ResNet-18/34), expansion 1.
    Basic,
    /// 1×1 → 3×3 → 1×1 convolutions (ResNet-50), expansion 4, stride on the 3×3 (v1.5).
    Bottleneck,
}

impl BlockKind {
    /// Ratio of a block's output channels to its width.
    pub fn expansion(&self) -> usize {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

/// Stem of the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Stem {
    /// 7×7 convolution with stride 2 and a 3×3 max-pool with stride 2 (for 224×224 images).
    ImageNet,
    /// 3×3 convolution with stride 1 and no max-pool (for 32×32 and 28×28 images).
    Cifar,
    /// 3×3 convolution with stride 2 and no max-pool: small images at half resolution from the
    /// first layer (28×28 → 14×14), a quarter of the CIFAR stem's cost in every later layer and
    /// without the ImageNet stem's fourfold reduction before the first block.
    Stride2,
}

/// Configuration of a [`ResNet`].
#[derive(Config, Debug)]
pub struct ResNetConfig {
    /// Block type.
    pub block: BlockKind,
    /// Number of blocks in each of the four stages.
    pub layers: [usize; 4],
    /// Input channels (1 for Fashion-MNIST, 3 for RGB).
    #[config(default = 3)]
    pub in_channels: usize,
    /// Stem type.
    #[config(default = "Stem::ImageNet")]
    pub stem: Stem,
    /// Initialise the last batch norm of each residual branch with zeros, so that each block
    /// starts as the identity (torchvision's `zero_init_residual`).
    #[config(default = false)]
    pub zero_init_residual: bool,
    /// Channels of the stem and width of the first stage (64 in the paper; smaller values make
    /// narrow variants, with stage widths `w, 2w, 4w, 8w`).
    #[config(default = 64)]
    pub base_width: usize,
    /// Compute the stem convolution as products with banded matrices
    /// ([`crate::banded_conv::banded_conv2d`]): the same numbers up to the order of the sums,
    /// and faster on burn's CPU backend for small images with few channels, where that
    /// backend's own small-channel kernel and weight gradient are slow (the small ResNet on
    /// 28×28×1, forward + backward at batch 128: 60.9 → 51.4 ms, `cargo bench --bench
    /// backbones`). Off by
    /// default; worth it on the CPU only (GPU backends have fast convolution kernels).
    #[config(default = false)]
    pub banded_stem: bool,
    /// Side of the grid the last stage's map is average-pooled to
    /// ([`crate::layers::grid_avg_pool`]): 1 (the default) is the usual global average pooling;
    /// 2 gives `4 × 8w` features that keep which quarter of the image each channel fired in — on
    /// 28-pixel images through the stride-2 stem the last map is 2×2 already, so the features
    /// are that map flattened.
    #[config(default = 1)]
    pub pooled_grid: usize,
}

impl ResNetConfig {
    /// ResNet-18: basic blocks `[2, 2, 2, 2]`, 512 features.
    pub fn resnet18() -> Self {
        Self::new(BlockKind::Basic, [2, 2, 2, 2])
    }
    /// ResNet-34: basic blocks `[3, 4, 6, 3]`, 512 features.
    pub fn resnet34() -> Self {
        Self::new(BlockKind::Basic, [3, 4, 6, 3])
    }
    /// ResNet-50: bottleneck blocks `[3, 4, 6, 3]`, 2048 features.
    pub fn resnet50() -> Self {
        Self::new(BlockKind::Bottleneck, [3, 4, 6, 3])
    }

    /// Length of the feature vectors.
    pub fn feature_dim(&self) -> usize {
        self.base_width * 8 * self.block.expansion() * self.pooled_grid * self.pooled_grid
    }

    /// Builds the network.
    ///
    /// # Panics
    /// If `in_channels` or `base_width` is 0 (use [`ResNetConfig::try_init`] for an error).
    pub fn init<B: Backend>(&self, device: &B::Device) -> ResNet<B> {
        self.try_init(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Builds the network, or says why the configuration is invalid.
    pub fn try_init<B: Backend>(&self, device: &B::Device) -> Result<ResNet<B>, ModelError> {
        if self.in_channels == 0 || self.base_width == 0 || self.pooled_grid == 0 {
            return Err(ModelError::InvalidConfig(format!(
                "ResNet needs in_channels > 0, base_width > 0 and pooled_grid > 0, got {}, {} and {}",
                self.in_channels, self.base_width, self.pooled_grid
            )));
        }
        // A stage of no blocks would leave the features a stage narrower than `feature_dim`
        // says (`[1, 1, 1, 0]`: 4w channels out, 8w announced), and the head's product would
        // fail at the first step.
        if self.layers.contains(&0) {
            return Err(ModelError::InvalidConfig(format!(
                "ResNet needs at least one block in every stage, got layers {:?}",
                self.layers
            )));
        }
        let w = self.base_width;
        let (conv1, maxpool) = match self.stem {
            Stem::ImageNet => (
                conv2d(self.in_channels, w, 7, 2, 3, 1, false, device),
                Some(
                    MaxPool2dConfig::new([3, 3])
                        .with_strides([2, 2])
                        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                        .init(),
                ),
            ),
            Stem::Cifar => (conv2d(self.in_channels, w, 3, 1, 1, 1, false, device), None),
            Stem::Stride2 => (conv2d(self.in_channels, w, 3, 2, 1, 1, false, device), None),
        };
        let mut in_planes = w;
        let mut stage = |planes: usize, blocks: usize, stride: usize| {
            (0..blocks)
                .map(|i| {
                    let s = if i == 0 { stride } else { 1 };
                    let block = ResidualBlock::new(
                        self.block,
                        in_planes,
                        planes,
                        s,
                        self.zero_init_residual,
                        device,
                    );
                    in_planes = planes * self.block.expansion();
                    block
                })
                .collect::<Vec<_>>()
        };
        let layer1 = stage(w, self.layers[0], 1);
        let layer2 = stage(2 * w, self.layers[1], 2);
        let layer3 = stage(4 * w, self.layers[2], 2);
        let layer4 = stage(8 * w, self.layers[3], 2);
        Ok(ResNet {
            conv1,
            bn1: BatchNorm2dConfig::new(w).init(device),
            maxpool,
            layer1,
            layer2,
            layer3,
            layer4,
            in_channels: self.in_channels,
            feature_dim: self.feature_dim(),
            banded_stem: self.banded_stem,
            pooled_grid: self.pooled_grid,
        })
    }
}

/// The 1×1 convolution + norm on the shortcut of a block that changes shape
/// (torchvision: `downsample.0` and `downsample.1`).
#[derive(Module, Debug)]
pub struct Downsample<B: Backend> {
    /// 1×1 convolution with the block's stride.
    pub conv: Conv2d<B>,
    /// Batch norm.
    pub bn: BatchNorm2d<B>,
}

/// A basic or bottleneck residual block (`conv3`/`bn3` exist only in bottlenecks).
#[derive(Module, Debug)]
pub struct ResidualBlock<B: Backend> {
    /// First convolution (3×3 with the stride in basic blocks, 1×1 in bottlenecks).
    pub conv1: Conv2d<B>,
    /// Norm after `conv1`.
    pub bn1: BatchNorm2d<B>,
    /// Second convolution (3×3; carries the stride in bottlenecks).
    pub conv2: Conv2d<B>,
    /// Norm after `conv2`.
    pub bn2: BatchNorm2d<B>,
    /// Third convolution (bottleneck only, 1×1 expanding ×4).
    pub conv3: Option<Conv2d<B>>,
    /// Norm after `conv3`.
    pub bn3: Option<BatchNorm2d<B>>,
    /// Projection shortcut when the shape changes.
    pub downsample: Option<Downsample<B>>,
}

impl<B: Backend> ResidualBlock<B> {
    fn new(
        kind: BlockKind,
        in_planes: usize,
        planes: usize,
        stride: usize,
        zero_init: bool,
        device: &B::Device,
    ) -> Self {
        let out = planes * kind.expansion();
        let bn = |c: usize| BatchNorm2dConfig::new(c).init::<B>(device);
        let zero = |mut norm: BatchNorm2d<B>| {
            if zero_init {
                norm.weight = Initializer::Zeros.init(norm.weight.lazy_shape(), device);
            }
            norm
        };
        let downsample = (stride != 1 || in_planes != out).then(|| Downsample {
            conv: conv2d(in_planes, out, 1, stride, 0, 1, false, device),
            bn: bn(out),
        });
        match kind {
            BlockKind::Basic => Self {
                conv1: conv2d(in_planes, planes, 3, stride, 1, 1, false, device),
                bn1: bn(planes),
                conv2: conv2d(planes, planes, 3, 1, 1, 1, false, device),
                bn2: zero(bn(planes)),
                conv3: None,
                bn3: None,
                downsample,
            },
            BlockKind::Bottleneck => Self {
                conv1: conv2d(in_planes, planes, 1, 1, 0, 1, false, device),
                bn1: bn(planes),
                conv2: conv2d(planes, planes, 3, stride, 1, 1, false, device),
                bn2: bn(planes),
                conv3: Some(conv2d(planes, out, 1, 1, 0, 1, false, device)),
                bn3: Some(zero(bn(out))),
                downsample,
            },
        }
    }

    /// # Shapes
    /// - input: `[batch, in_planes, h, w]`
    /// - output: `[batch, planes · expansion, h / stride, w / stride]`
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.forward_grouped(x, 1)
    }

    /// [`ResidualBlock::forward`] on `groups` equal batches stacked along the first axis,
    /// each batch-normalised with its own moments ([`BatchNorm2d::forward_grouped`]).
    ///
    /// # Shapes
    /// - input: `[groups · batch, in_planes, h, w]`
    /// - output: `[groups · batch, planes · expansion, h / stride, w / stride]`
    pub fn forward_grouped(&self, x: Tensor<B, 4>, groups: usize) -> Tensor<B, 4> {
        let identity = match &self.downsample {
            Some(d) => {
                d.bn.forward_grouped(kernels::conv2d(&d.conv, x.clone()), groups)
            }
            None => x.clone(),
        };
        // Each batch norm with the ReLU after it (and the last with the shortcut added before
        // its ReLU) as one operation on the GPU backends (`BatchNorm2d::forward_grouped_relu`).
        let norm_relu =
            |bn: &BatchNorm2d<B>, y, residual| bn.forward_grouped_relu(y, groups, residual);
        let y = norm_relu(&self.bn1, kernels::conv2d(&self.conv1, x), None);
        match (&self.conv3, &self.bn3) {
            (Some(conv3), Some(bn3)) => {
                let y = norm_relu(&self.bn2, kernels::conv2d(&self.conv2, y), None);
                norm_relu(bn3, kernels::conv2d(conv3, y), Some(identity))
            }
            _ => norm_relu(&self.bn2, kernels::conv2d(&self.conv2, y), Some(identity)),
        }
    }
}

/// A ResNet without its classifier; see [`ResNetConfig`].
#[derive(Module, Debug)]
pub struct ResNet<B: Backend> {
    /// Stem convolution.
    pub conv1: Conv2d<B>,
    /// Stem norm.
    pub bn1: BatchNorm2d<B>,
    /// Stem max-pool (ImageNet stem only).
    pub maxpool: Option<MaxPool2d>,
    /// Stage 1 (stride 1).
    pub layer1: Vec<ResidualBlock<B>>,
    /// Stage 2 (stride 2).
    pub layer2: Vec<ResidualBlock<B>>,
    /// Stage 3 (stride 2).
    pub layer3: Vec<ResidualBlock<B>>,
    /// Stage 4 (stride 2).
    pub layer4: Vec<ResidualBlock<B>>,
    /// Input channels.
    pub in_channels: usize,
    /// Length of the feature vectors.
    pub feature_dim: usize,
    /// Whether the stem convolution runs as banded products ([`ResNetConfig::banded_stem`]).
    pub banded_stem: bool,
    /// The grid the features are pooled to ([`ResNetConfig::pooled_grid`]).
    pub pooled_grid: usize,
}

impl<B: Backend> ResNet<B> {
    /// Checks that a batch of this shape can go through the network.
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        // Every stem pads enough that any image of at least 1×1 goes through.
        check_channels_and_size("ResNet", self.in_channels, 1, shape)
    }

    /// Checks that images of `height × width` leave a last map at least as large as the grid
    /// the features are pooled to ([`ResNetConfig::pooled_grid`]). Smaller inputs still go
    /// through — adaptive pooling repeats cells, as PyTorch's does, so that a multi-crop
    /// method's small local crops give features of the global views' length —, but a
    /// network whose main images are that small is misconfigured.
    pub fn check_pooled_grid(&self, height: usize, width: usize) -> Result<(), ModelError> {
        let [map_height, map_width] = self.map_size(height, width);
        if map_height.min(map_width) < self.pooled_grid {
            return Err(ModelError::MapSmallerThanGrid {
                model: "ResNet",
                height,
                width,
                map_height,
                map_width,
                grid: self.pooled_grid,
            });
        }
        Ok(())
    }

    /// The side of the last stage's map for images of `height × width`: every stride-2 layer
    /// (padded 3×3 and 7×7 convolutions, the padded 3×3 max-pool) rounds its input's half up,
    /// so the map is the image divided by the total stride, rounded up.
    pub fn map_size(&self, height: usize, width: usize) -> [usize; 2] {
        let stem = self.conv1.stride[0] * if self.maxpool.is_some() { 2 } else { 1 };
        let stride = stem * 8;
        [height.div_ceil(stride), width.div_ceil(stride)]
    }

    /// Feature map before pooling.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim / grid², h / s, w / s]` (rounded up:
    ///   [`ResNet::map_size`]) with `s` = 32 (ImageNet stem), 16 (stride-2 stem) or 8 (CIFAR)
    pub fn forward_map(&self, images: Tensor<B, 4>) -> Tensor<B, 4> {
        self.forward_map_grouped(images, 1)
    }

    /// [`ResNet::forward_map`] on `groups` equal batches stacked along the first axis, each
    /// batch-normalised with its own moments: the maps of each batch on its own, concatenated
    /// ([`Backbone::forward_features_grouped`]).
    ///
    /// # Shapes
    /// - input: `[groups · batch, in_channels, h, w]`
    /// - output: `[groups · batch, feature_dim / grid², h / s, w / s]` (as
    ///   [`ResNet::forward_map`])
    pub fn forward_map_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 4> {
        if let Err(e) = self.check_input(images.dims()) {
            panic!("{e}");
        }
        let stem = if self.banded_stem {
            banded_conv2d(images, &self.conv1)
        } else {
            kernels::conv2d(&self.conv1, images)
        };
        let mut x = self.bn1.forward_grouped_relu(stem, groups, None);
        if let Some(pool) = &self.maxpool {
            x = pool.forward(x);
        }
        for block in self
            .layer1
            .iter()
            .chain(&self.layer2)
            .chain(&self.layer3)
            .chain(&self.layer4)
        {
            x = block.forward_grouped(x, groups);
        }
        x
    }
}

impl<B: Backend> Backbone<B> for ResNet<B> {
    /// The last stage's output average-pooled to [`ResNetConfig::pooled_grid`] (globally by
    /// default).
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim]` (512 for ResNet-18/34, 2048 for ResNet-50, × grid²)
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        grid_avg_pool(self.forward_map(images), self.pooled_grid)
    }

    /// One pass of the stacked batches, each batch-normalised with its own moments
    /// ([`ResNet::forward_map_grouped`]).
    ///
    /// # Shapes
    /// - input: `[groups · batch, in_channels, h, w]`
    /// - output: `[groups · batch, feature_dim]`
    fn forward_features_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        grid_avg_pool(self.forward_map_grouped(images, groups), self.pooled_grid)
    }

    fn feature_dim(&self) -> usize {
        self.feature_dim
    }

    /// The output of the last stage ([`ResNet::forward_map`]).
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim / grid², h / s, w / s]` (rounded up:
    ///   [`ResNet::map_size`]) with `s` = 32 (ImageNet stem), 16 (stride-2 stem) or 8 (CIFAR)
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(self.forward_map(images))
    }
}
