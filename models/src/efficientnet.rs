//! EfficientNet-B0 and B1 (Tan & Le 2019), laid out as torchvision's `efficientnet_b*`.

use burn::prelude::*;

use crate::backbone::Backbone;
use crate::error::ModelError;
use crate::layers::{
    check_channels_and_size, global_avg_pool, make_divisible, stochastic_depth, Activation,
    ConvBnAct, ConvBnActSpec, SqueezeExcitation,
};

/// One stage of the EfficientNet table (before width and depth scaling).
#[derive(Config, Debug, Copy)]
pub struct MbConvStage {
    /// Expansion ratio of the inverted bottleneck.
    pub expand_ratio: usize,
    /// Depthwise kernel side.
    pub kernel: usize,
    /// Stride of the first block of the stage.
    pub stride: usize,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Number of blocks.
    pub layers: usize,
}

/// Configuration of an [`EfficientNet`].
#[derive(Config, Debug)]
pub struct EfficientNetConfig {
    /// Channel multiplier.
    pub width_mult: f64,
    /// Depth multiplier (number of blocks per stage, rounded up).
    pub depth_mult: f64,
    /// Input channels.
    #[config(default = 3)]
    pub in_channels: usize,
    /// Largest drop probability of stochastic depth; block `i` of `n` uses `p · i / n`
    /// (torchvision's default 0.2). Set 0 to disable.
    #[config(default = 0.2)]
    pub stochastic_depth_prob: f64,
    /// Dropout of the classifier head (0.2 for B0 and B1); used by
    /// [`EfficientNetConfig::classifier`].
    #[config(default = 0.2)]
    pub dropout: f64,
    /// Batch-norm epsilon (torchvision: 1e-5).
    #[config(default = 1e-5)]
    pub bn_eps: f64,
    /// Batch-norm momentum (torchvision: 0.1).
    #[config(default = 0.1)]
    pub bn_momentum: f64,
    /// The B0 stage table; presets use [`EfficientNetConfig::b0_stages`].
    #[config(default = "EfficientNetConfig::b0_stages()")]
    pub stages: Vec<MbConvStage>,
}

impl EfficientNetConfig {
    /// EfficientNet-B0: width 1.0, depth 1.0, 1280 features.
    pub fn b0() -> Self {
        Self::new(1.0, 1.0)
    }
    /// EfficientNet-B1: width 1.0, depth 1.1, 1280 features.
    pub fn b1() -> Self {
        Self::new(1.0, 1.1)
    }

    /// The B0 table: (expand, kernel, stride, in, out, layers).
    pub fn b0_stages() -> Vec<MbConvStage> {
        [
            (1, 3, 1, 32, 16, 1),
            (6, 3, 2, 16, 24, 2),
            (6, 5, 2, 24, 40, 2),
            (6, 3, 2, 40, 80, 3),
            (6, 5, 1, 80, 112, 3),
            (6, 5, 2, 112, 192, 4),
            (6, 3, 1, 192, 320, 1),
        ]
        .into_iter()
        .map(|(e, k, s, i, o, n)| MbConvStage::new(e, k, s, i, o, n))
        .collect()
    }

    fn channels(&self, c: usize) -> usize {
        make_divisible(c as f64 * self.width_mult, 8, None)
    }

    fn depth(&self, n: usize) -> usize {
        (n as f64 * self.depth_mult).ceil() as usize
    }

    /// Length of the feature vectors (4 × the last stage's channels: 1280 for B0/B1).
    pub fn feature_dim(&self) -> usize {
        4 * self.channels(self.stages.last().map(|s| s.out_channels).unwrap_or(320))
    }

    /// torchvision's classifier for this network (dropout, Linear).
    pub fn classifier(&self, num_classes: usize) -> crate::head::ClassifierConfig {
        crate::head::ClassifierConfig::efficientnet(self.feature_dim(), num_classes, self.dropout)
    }

    /// Builds the network.
    ///
    /// # Panics
    /// On an invalid configuration (see [`EfficientNetConfig::try_init`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> EfficientNet<B> {
        self.try_init(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Builds the network, or says why the configuration is invalid.
    pub fn try_init<B: Backend>(&self, device: &B::Device) -> Result<EfficientNet<B>, ModelError> {
        // Written so that NaN fails too (`NaN <= 0.0` is false).
        if self.in_channels == 0
            || self.stages.is_empty()
            || !(self.width_mult > 0.0 && self.width_mult.is_finite())
        {
            return Err(ModelError::InvalidConfig(format!(
                "EfficientNet needs in_channels > 0, a non-empty stage table and a finite \
                 width_mult > 0, got {}, {} stages and {}",
                self.in_channels,
                self.stages.len(),
                self.width_mult
            )));
        }
        // A depth multiplier of 0 (or NaN) leaves every stage without blocks: the head would
        // expect the last stage's channels and get the stem's.
        if !(self.depth_mult > 0.0 && self.depth_mult.is_finite()) {
            return Err(ModelError::InvalidConfig(format!(
                "EfficientNet needs a finite depth_mult > 0, got {}",
                self.depth_mult
            )));
        }
        if let Some((i, stage)) = self.stages.iter().enumerate().find(|(_, s)| {
            s.layers == 0
                || s.kernel == 0
                || s.stride == 0
                || s.expand_ratio == 0
                || s.in_channels == 0
                || s.out_channels == 0
        }) {
            return Err(ModelError::InvalidConfig(format!(
                "EfficientNet's stage {i} needs layers, kernel, stride, expand_ratio and \
                 channels of at least 1, got {stage:?}"
            )));
        }
        if !(0.0..1.0).contains(&self.stochastic_depth_prob) {
            return Err(ModelError::InvalidConfig(format!(
                "stochastic_depth_prob must be in [0, 1), got {}",
                self.stochastic_depth_prob
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
        let stem_out = self.channels(self.stages[0].in_channels);
        let stem = ConvBnAct::new(
            spec(self.in_channels, stem_out, 3, 2, 1, Activation::Silu),
            device,
        );
        let total: usize = self.stages.iter().map(|s| self.depth(s.layers)).sum();
        let mut block_id = 0;
        let mut stages = Vec::new();
        for st in &self.stages {
            let mut blocks = Vec::new();
            for i in 0..self.depth(st.layers) {
                let in_c = if i == 0 {
                    self.channels(st.in_channels)
                } else {
                    self.channels(st.out_channels)
                };
                let out_c = self.channels(st.out_channels);
                let stride = if i == 0 { st.stride } else { 1 };
                let sd = self.stochastic_depth_prob * block_id as f64 / total as f64;
                let expanded = make_divisible((in_c * st.expand_ratio) as f64, 8, None);
                let expand = (expanded != in_c).then(|| {
                    ConvBnAct::new(spec(in_c, expanded, 1, 1, 1, Activation::Silu), device)
                });
                blocks.push(MbConv {
                    expand,
                    depthwise: ConvBnAct::new(
                        spec(
                            expanded,
                            expanded,
                            st.kernel,
                            stride,
                            expanded,
                            Activation::Silu,
                        ),
                        device,
                    ),
                    se: SqueezeExcitation::new(
                        expanded,
                        (in_c / 4).max(1),
                        Activation::Silu,
                        Activation::Sigmoid,
                        device,
                    ),
                    project: ConvBnAct::new(
                        spec(expanded, out_c, 1, 1, 1, Activation::Identity),
                        device,
                    ),
                    use_residual: stride == 1 && in_c == out_c,
                    stochastic_depth: sd,
                });
                block_id += 1;
            }
            stages.push(blocks);
        }
        let last_in = self.channels(self.stages.last().unwrap().out_channels);
        let head = ConvBnAct::new(
            spec(last_in, self.feature_dim(), 1, 1, 1, Activation::Silu),
            device,
        );
        Ok(EfficientNet {
            stem,
            stages,
            head,
            in_channels: self.in_channels,
            feature_dim: self.feature_dim(),
        })
    }
}

/// Mobile inverted bottleneck with squeeze-excitation (torchvision's `MBConv`).
#[derive(Module, Debug)]
pub struct MbConv<B: Backend> {
    /// 1×1 expansion (absent when the expansion ratio is 1).
    pub expand: Option<ConvBnAct<B>>,
    /// Depthwise convolution.
    pub depthwise: ConvBnAct<B>,
    /// Squeeze-excitation on the expanded channels (squeeze to a quarter of the input channels).
    pub se: SqueezeExcitation<B>,
    /// 1×1 projection, no activation.
    pub project: ConvBnAct<B>,
    /// Whether the input is added to the output.
    pub use_residual: bool,
    /// Drop probability of the residual branch in training.
    pub stochastic_depth: f64,
}

impl<B: Backend> MbConv<B> {
    /// # Shapes
    /// - input: `[batch, in, h, w]`; output: `[batch, out, h / stride, w / stride]`
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let mut y = x.clone();
        if let Some(expand) = &self.expand {
            y = expand.forward(y);
        }
        y = self.depthwise.forward(y);
        y = self.se.forward(y);
        y = self.project.forward(y);
        if self.use_residual {
            stochastic_depth(y, self.stochastic_depth).add(x)
        } else {
            y
        }
    }
}

/// EfficientNet without its classifier; see [`EfficientNetConfig`].
#[derive(Module, Debug)]
pub struct EfficientNet<B: Backend> {
    /// 3×3 stride-2 stem (torchvision `features.0`).
    pub stem: ConvBnAct<B>,
    /// The seven stages of MBConv blocks (torchvision `features.1` … `features.7`).
    pub stages: Vec<Vec<MbConv<B>>>,
    /// Final 1×1 convolution to the feature width (torchvision `features.8`).
    pub head: ConvBnAct<B>,
    /// Input channels.
    pub in_channels: usize,
    /// Length of the feature vectors.
    pub feature_dim: usize,
}

impl<B: Backend> EfficientNet<B> {
    /// Checks that a batch of this shape can go through the network.
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        check_channels_and_size("EfficientNet", self.in_channels, 1, shape)
    }

    /// The output of the last 1×1 convolution (torchvision `features.8`): the map the features
    /// pool.
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
        for block in self.stages.iter().flatten() {
            x = block.forward(x);
        }
        self.head.forward(x)
    }
}

impl<B: Backend> Backbone<B> for EfficientNet<B> {
    /// Global-average-pooled output of the last 1×1 convolution.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim]` (1280 for B0/B1)
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        global_avg_pool(self.forward_map(images))
    }

    fn feature_dim(&self) -> usize {
        self.feature_dim
    }

    /// The output of the last 1×1 convolution ([`EfficientNet::forward_map`]).
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, feature_dim, ⌈h / 32⌉, ⌈w / 32⌉]`
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(self.forward_map(images))
    }
}
