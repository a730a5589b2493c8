//! MobileNet-V3-Large and -Small (Howard et al. 2019), torchvision's layer table and layout.

use burn::prelude::*;

use crate::backbone::Backbone;
use crate::error::ModelError;
use crate::head::ClassifierConfig;
use crate::layers::{
    check_channels_and_size, global_avg_pool, make_divisible, Activation, ConvBnAct, ConvBnActSpec,
    SqueezeExcitation,
};

/// One row of the MobileNet-V3 table.
#[derive(Config, Debug, Copy)]
pub struct InvertedResidualSpec {
    /// Input channels.
    pub in_channels: usize,
    /// Depthwise kernel side.
    pub kernel: usize,
    /// Expanded channels.
    pub expanded: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Whether the block has squeeze-excitation.
    pub use_se: bool,
    /// Hard-swish (true) or ReLU (false).
    pub hard_swish: bool,
    /// Stride of the depthwise convolution.
    pub stride: usize,
}

/// Configuration of a [`MobileNetV3`].
#[derive(Config, Debug)]
pub struct MobileNetV3Config {
    /// The block table (torchvision's `inverted_residual_setting`).
    pub blocks: Vec<InvertedResidualSpec>,
    /// Width of the hidden layer of the classifier head (1280 Large, 1024 Small).
    pub last_channel: usize,
    /// Input channels.
    #[config(default = 3)]
    pub in_channels: usize,
    /// Channel multiplier applied to the table.
    #[config(default = 1.0)]
    pub width_mult: f64,
    /// Batch-norm epsilon (torchvision: 0.001).
    #[config(default = 0.001)]
    pub bn_eps: f64,
    /// Batch-norm momentum (torchvision: 0.01).
    #[config(default = 0.01)]
    pub bn_momentum: f64,
}

fn table(rows: &[(usize, usize, usize, usize, bool, bool, usize)]) -> Vec<InvertedResidualSpec> {
    rows.iter()
        .map(|&(i, k, e, o, se, hs, s)| InvertedResidualSpec::new(i, k, e, o, se, hs, s))
        .collect()
}

impl MobileNetV3Config {
    /// MobileNet-V3-Large: 960 features, head 960 → 1280 → classes.
    pub fn large() -> Self {
        let (f, t) = (false, true);
        Self::new(
            table(&[
                (16, 3, 16, 16, f, f, 1),
                (16, 3, 64, 24, f, f, 2),
                (24, 3, 72, 24, f, f, 1),
                (24, 5, 72, 40, t, f, 2),
                (40, 5, 120, 40, t, f, 1),
                (40, 5, 120, 40, t, f, 1),
                (40, 3, 240, 80, f, t, 2),
                (80, 3, 200, 80, f, t, 1),
                (80, 3, 184, 80, f, t, 1),
                (80, 3, 184, 80, f, t, 1),
                (80, 3, 480, 112, t, t, 1),
                (112, 3, 672, 112, t, t, 1),
                (112, 5, 672, 160, t, t, 2),
                (160, 5, 960, 160, t, t, 1),
                (160, 5, 960, 160, t, t, 1),
            ]),
            1280,
        )
    }

    /// MobileNet-V3-Small: 576 features, head 576 → 1024 → classes.
    pub fn small() -> Self {
        let (f, t) = (false, true);
        Self::new(
            table(&[
                (16, 3, 16, 16, t, f, 2),
                (16, 3, 72, 24, f, f, 2),
                (24, 3, 88, 24, f, f, 1),
                (24, 5, 96, 40, t, t, 2),
                (40, 5, 240, 40, t, t, 1),
                (40, 5, 240, 40, t, t, 1),
                (40, 5, 120, 48, t, t, 1),
                (48, 5, 144, 48, t, t, 1),
                (48, 5, 288, 96, t, t, 2),
                (96, 5, 576, 96, t, t, 1),
                (96, 5, 576, 96, t, t, 1),
            ]),
            1024,
        )
    }

    fn channels(&self, c: usize) -> usize {
        make_divisible(c as f64 * self.width_mult, 8, None)
    }

    /// Length of the feature vectors (6 × the last block's output channels).
    pub fn feature_dim(&self) -> usize {
        6 * self.channels(self.blocks.last().map(|b| b.out_channels).unwrap_or(0))
    }

    /// torchvision's classifier: Linear → hard-swish → dropout 0.2 → Linear.
    pub fn classifier(&self, num_classes: usize) -> ClassifierConfig {
        ClassifierConfig::mobilenet_v3(
            self.feature_dim(),
            self.channels(self.last_channel),
            num_classes,
        )
    }

    /// Builds the network.
    ///
    /// # Panics
    /// On an invalid configuration (see [`MobileNetV3Config::try_init`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> MobileNetV3<B> {
        self.try_init(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Builds the network, or says why the configuration is invalid.
    pub fn try_init<B: Backend>(&self, device: &B::Device) -> Result<MobileNetV3<B>, ModelError> {
        // Written so that NaN fails too (`NaN <= 0.0` is false).
        if self.in_channels == 0
            || self.blocks.is_empty()
            || !(self.width_mult > 0.0 && self.width_mult.is_finite())
        {
            return Err(ModelError::InvalidConfig(format!(
                "MobileNetV3 needs in_channels > 0, a non-empty block table and a finite \
                 width_mult > 0, got {}, {} blocks and {}",
                self.in_channels,
                self.blocks.len(),
                self.width_mult
            )));
        }
        if let Some((i, block)) = self.blocks.iter().enumerate().find(|(_, b)| {
            b.kernel == 0
                || b.stride == 0
                || b.in_channels == 0
                || b.expanded == 0
                || b.out_channels == 0
        }) {
            return Err(ModelError::InvalidConfig(format!(
                "MobileNetV3's block {i} needs kernel, stride and channels of at least 1, got \
                 {block:?}"
            )));
        }
        let spec = |i, o, k, s, g, act| ConvBnActSpec {
            in_channels: i,
            out_channels: o,
            kernel: k,
            stride: s,
            groups: g,
            act,
            bn_eps: self.bn_eps,
            bn_momentum: self.bn_momentum,
        };
        let first = self.channels(self.blocks[0].in_channels);
        let stem = ConvBnAct::new(
            spec(self.in_channels, first, 3, 2, 1, Activation::HardSwish),
            device,
        );
        let blocks = self
            .blocks
            .iter()
            .map(|b| {
                let in_c = self.channels(b.in_channels);
                let exp = self.channels(b.expanded);
                let out_c = self.channels(b.out_channels);
                let act = if b.hard_swish {
                    Activation::HardSwish
                } else {
                    Activation::Relu
                };
                InvertedResidual {
                    expand: (exp != in_c)
                        .then(|| ConvBnAct::new(spec(in_c, exp, 1, 1, 1, act), device)),
                    depthwise: ConvBnAct::new(spec(exp, exp, b.kernel, b.stride, exp, act), device),
                    se: b.use_se.then(|| {
                        SqueezeExcitation::new(
                            exp,
                            make_divisible((exp / 4) as f64, 8, None),
                            Activation::Relu,
                            Activation::HardSigmoid,
                            device,
                        )
                    }),
                    project: ConvBnAct::new(
                        spec(exp, out_c, 1, 1, 1, Activation::Identity),
                        device,
                    ),
                    use_residual: b.stride == 1 && in_c == out_c,
                }
            })
            .collect();
        let last_in = self.channels(self.blocks.last().unwrap().out_channels);
        let head = ConvBnAct::new(
            spec(last_in, self.feature_dim(), 1, 1, 1, Activation::HardSwish),
            device,
        );
        Ok(MobileNetV3 {
            stem,
            blocks,
            head,
            in_channels: self.in_channels,
            feature_dim: self.feature_dim(),
        })
    }
}

/// torchvision's `InvertedResidual` of MobileNet-V3.
#[derive(Module, Debug)]
pub struct InvertedResidual<B: Backend> {
    /// 1×1 expansion (absent when the expanded width equals the input width).
    pub expand: Option<ConvBnAct<B>>,
    /// Depthwise convolution.
    pub depthwise: ConvBnAct<B>,
    /// Squeeze-excitation (ReLU, hard-sigmoid gate).
    pub se: Option<SqueezeExcitation<B>>,
    /// 1×1 projection, no activation.
    pub project: ConvBnAct<B>,
    /// Whether the input is added to the output.
    pub use_residual: bool,
}

impl<B: Backend> InvertedResidual<B> {
    /// # Shapes
    /// - input: `[batch, in, h, w]`; output: `[batch, out, h / stride, w / stride]`
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let mut y = x.clone();
        if let Some(expand) = &self.expand {
            y = expand.forward(y);
        }
        y = self.depthwise.forward(y);
        if let Some(se) = &self.se {
            y = se.forward(y);
        }
        y = self.project.forward(y);
        if self.use_residual {
            y.add(x)
        } else {
            y
        }
    }
}

/// MobileNet-V3 without its classifier; see [`MobileNetV3Config`].
#[derive(Module, Debug)]
pub struct MobileNetV3<B: Backend> {
    /// 3×3 stride-2 stem with hard-swish (torchvision `features.0`).
    pub stem: ConvBnAct<B>,
    /// Inverted residual blocks (torchvision `features.1` … `features.N`).
    pub blocks: Vec<InvertedResidual<B>>,
    /// Final 1×1 convolution with hard-swish (torchvision's last `features` entry).
    pub head: ConvBnAct<B>,
    /// Input channels.
    pub in_channels: usize,
    /// Length of the feature vectors.
    pub feature_dim: usize,
}

impl<B: Backend> MobileNetV3<B> {
    /// Checks that a batch of this shape can go through the network.
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        check_channels_and_size("MobileNetV3", self.in_channels, 1, shape)
    }

    /// The output of the last 1×1 convolution: the map the features pool.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim, ⌈h / 32⌉, ⌈w / 32⌉]`
    ///
    /// # Panics
    /// If the input does not have `in_channels` channels.
    pub fn forward_map(&self, images: Tensor<B, 4>) -> Tensor<B, 4> {
        if let Err(e) = self.check_input(images.dims()) {
            panic!("{e}");
        }
        let mut x = self.stem.forward(images);
        for block in &self.blocks {
            x = block.forward(x);
        }
        self.head.forward(x)
    }
}

impl<B: Backend> Backbone<B> for MobileNetV3<B> {
    /// Global-average-pooled output of the last 1×1 convolution.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim]` (960 Large, 576 Small)
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        global_avg_pool(self.forward_map(images))
    }

    fn feature_dim(&self) -> usize {
        self.feature_dim
    }

    /// The output of the last 1×1 convolution ([`MobileNetV3::forward_map`]).
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim, ⌈h / 32⌉, ⌈w / 32⌉]`
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(self.forward_map(images))
    }
}
