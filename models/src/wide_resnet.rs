//! Wide residual networks WRN-d-k (Zagoruyko & Komodakis 2016), CIFAR layout with
//! pre-activation blocks and dropout between the two convolutions.

use burn::nn::conv::Conv2d;
use burn::nn::{Dropout, DropoutConfig};
use burn::prelude::*;

use crate::backbone::Backbone;
use crate::error::ModelError;
use crate::kernels;
use crate::layers::{
    check_channels_and_size, conv2d, global_avg_pool, BatchNorm2d, BatchNorm2dConfig,
};

/// Configuration of a [`WideResNet`].
#[derive(Config, Debug)]
pub struct WideResNetConfig {
    /// Depth `d`; `d − 4` must be a multiple of 6 (blocks per group = `(d − 4) / 6`).
    pub depth: usize,
    /// Widening factor `k`: group widths are `16k, 32k, 64k`.
    pub widen_factor: usize,
    /// Dropout probability between the two convolutions of a block.
    #[config(default = 0.3)]
    pub dropout: f64,
    /// Input channels.
    #[config(default = 3)]
    pub in_channels: usize,
}

impl WideResNetConfig {
    /// WRN-16-8: 2 blocks per group, 512 features.
    pub fn wrn_16_8() -> Self {
        Self::new(16, 8)
    }
    /// WRN-28-10: 4 blocks per group, 640 features.
    pub fn wrn_28_10() -> Self {
        Self::new(28, 10)
    }

    /// Length of the feature vectors (`64k`).
    pub fn feature_dim(&self) -> usize {
        64 * self.widen_factor
    }

    /// Builds the network.
    ///
    /// # Panics
    /// On an invalid configuration (see [`WideResNetConfig::try_init`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> WideResNet<B> {
        self.try_init(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Builds the network, or says why the configuration is invalid.
    pub fn try_init<B: Backend>(&self, device: &B::Device) -> Result<WideResNet<B>, ModelError> {
        if self.depth < 10 || !(self.depth - 4).is_multiple_of(6) || self.widen_factor == 0 {
            return Err(ModelError::InvalidConfig(format!(
                "WideResNet depth must be 6n + 4 with n ≥ 1 and widen_factor ≥ 1, got {} and {}",
                self.depth, self.widen_factor
            )));
        }
        if self.in_channels == 0 {
            return Err(ModelError::InvalidConfig("in_channels must be > 0".into()));
        }
        // burn's `DropoutConfig::init` asserts a probability in [0, 1]; NaN would pass it.
        if !(0.0..=1.0).contains(&self.dropout) {
            return Err(ModelError::InvalidConfig(format!(
                "WideResNet's dropout must be a probability in [0, 1], got {}",
                self.dropout
            )));
        }
        let n = (self.depth - 4) / 6;
        let k = self.widen_factor;
        let mut in_c = 16;
        let mut blocks = Vec::new();
        for (width, stride) in [(16 * k, 1), (32 * k, 2), (64 * k, 2)] {
            for i in 0..n {
                let s = if i == 0 { stride } else { 1 };
                blocks.push(WideBlock {
                    bn1: BatchNorm2dConfig::new(in_c).init(device),
                    conv1: conv2d(in_c, width, 3, s, 1, 1, false, device),
                    bn2: BatchNorm2dConfig::new(width).init(device),
                    conv2: conv2d(width, width, 3, 1, 1, 1, false, device),
                    shortcut: (in_c != width)
                        .then(|| conv2d(in_c, width, 1, s, 0, 1, false, device)),
                    dropout: DropoutConfig::new(self.dropout).init(),
                });
                in_c = width;
            }
        }
        Ok(WideResNet {
            conv1: conv2d(self.in_channels, 16, 3, 1, 1, 1, false, device),
            blocks,
            bn: BatchNorm2dConfig::new(in_c).init(device),
            in_channels: self.in_channels,
            feature_dim: self.feature_dim(),
        })
    }
}

/// Pre-activation wide block: BN → ReLU → conv → BN → ReLU → dropout → conv, plus shortcut.
#[derive(Module, Debug)]
pub struct WideBlock<B: Backend> {
    /// Norm of the input.
    pub bn1: BatchNorm2d<B>,
    /// First 3×3 convolution (with the group's stride).
    pub conv1: Conv2d<B>,
    /// Norm after `conv1`.
    pub bn2: BatchNorm2d<B>,
    /// Second 3×3 convolution.
    pub conv2: Conv2d<B>,
    /// 1×1 projection of the (pre-activated) input when the width changes.
    pub shortcut: Option<Conv2d<B>>,
    /// Dropout between the convolutions.
    pub dropout: Dropout,
}

impl<B: Backend> WideBlock<B> {
    /// # Shapes
    /// - input: `[batch, in, h, w]`; output: `[batch, width, h / stride, w / stride]`
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let pre = self.bn1.forward_grouped_relu(x.clone(), 1, None);
        let residual = match &self.shortcut {
            Some(conv) => kernels::conv2d(conv, pre.clone()),
            None => x,
        };
        let y = self
            .bn2
            .forward_grouped_relu(kernels::conv2d(&self.conv1, pre), 1, None);
        let y = kernels::conv2d(&self.conv2, self.dropout.forward(y));
        y.add(residual)
    }
}

/// A wide ResNet without its classifier; see [`WideResNetConfig`].
#[derive(Module, Debug)]
pub struct WideResNet<B: Backend> {
    /// 3×3 stem to 16 channels.
    pub conv1: Conv2d<B>,
    /// The `3n` blocks.
    pub blocks: Vec<WideBlock<B>>,
    /// Final norm (followed by ReLU and pooling).
    pub bn: BatchNorm2d<B>,
    /// Input channels.
    pub in_channels: usize,
    /// Length of the feature vectors.
    pub feature_dim: usize,
}

impl<B: Backend> WideResNet<B> {
    /// Checks that a batch of this shape can go through the network.
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        check_channels_and_size("WideResNet", self.in_channels, 1, shape)
    }

    /// The last group's output after the final BN and ReLU: the map the features pool.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, 64k, ⌈h / 4⌉, ⌈w / 4⌉]`
    ///
    /// # Panics
    /// If the input does not have `in_channels` channels.
    pub fn forward_map(&self, images: Tensor<B, 4>) -> Tensor<B, 4> {
        if let Err(e) = self.check_input(images.dims()) {
            panic!("{e}");
        }
        let mut x = kernels::conv2d(&self.conv1, images);
        for block in &self.blocks {
            x = block.forward(x);
        }
        self.bn.forward_grouped_relu(x, 1, None)
    }
}

impl<B: Backend> Backbone<B> for WideResNet<B> {
    /// BN → ReLU → global average pool of the last group.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, 64k]`
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        global_avg_pool(self.forward_map(images))
    }

    fn feature_dim(&self) -> usize {
        self.feature_dim
    }

    /// BN → ReLU output of the last group ([`WideResNet::forward_map`]).
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, 64k, ⌈h / 4⌉, ⌈w / 4⌉]`
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(self.forward_map(images))
    }
}
