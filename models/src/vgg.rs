//! VGG-16 with batch norm (Simonyan & Zisserman 2015), torchvision's `vgg16_bn` layout.

use burn::nn::conv::Conv2d;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::prelude::*;

use crate::backbone::Backbone;
use crate::error::ModelError;
use crate::head::ClassifierConfig;
use crate::kernels;
use crate::layers::{
    check_channels_and_size, conv2d, global_avg_pool, BatchNorm2d, BatchNorm2dConfig,
};

/// How the last feature map becomes a vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum VggPooling {
    /// Global average pooling: 512 features (the usual choice for SSL and small images).
    Global,
    /// torchvision's adaptive average pool to 7×7, flattened: 25 088 features, for the original
    /// 4096-4096 classifier ([`ClassifierConfig::vgg`]).
    Flatten7x7,
}

/// Configuration of a [`Vgg`].
#[derive(Config, Debug)]
pub struct VggConfig {
    /// Convolution widths; 0 stands for a 2×2 max-pool.
    pub layout: Vec<usize>,
    /// Input channels.
    #[config(default = 3)]
    pub in_channels: usize,
    /// Feature pooling.
    #[config(default = "VggPooling::Global")]
    pub pooling: VggPooling,
}

impl VggConfig {
    /// VGG-16 (configuration "D") with batch norm.
    pub fn vgg16_bn() -> Self {
        Self::new(vec![
            64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0,
        ])
    }

    fn last_width(&self) -> usize {
        self.layout
            .iter()
            .rev()
            .copied()
            .find(|&c| c > 0)
            .unwrap_or(self.in_channels)
    }

    /// Length of the feature vectors.
    pub fn feature_dim(&self) -> usize {
        match self.pooling {
            VggPooling::Global => self.last_width(),
            VggPooling::Flatten7x7 => self.last_width() * 49,
        }
    }

    /// torchvision's classifier (two hidden layers of 4096) on these features.
    pub fn classifier(&self, num_classes: usize) -> ClassifierConfig {
        ClassifierConfig::vgg(self.feature_dim(), num_classes)
    }

    /// Builds the network.
    ///
    /// # Panics
    /// On an invalid configuration (see [`VggConfig::try_init`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Vgg<B> {
        self.try_init(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Builds the network, or says why the configuration is invalid.
    pub fn try_init<B: Backend>(&self, device: &B::Device) -> Result<Vgg<B>, ModelError> {
        if self.in_channels == 0 || !self.layout.iter().any(|&c| c > 0) {
            return Err(ModelError::InvalidConfig(
                "VGG needs in_channels > 0 and at least one convolution".into(),
            ));
        }
        let mut in_c = self.in_channels;
        let mut layers = Vec::new();
        for &c in &self.layout {
            if c == 0 {
                layers.push(VggLayer {
                    conv: None,
                    bn: None,
                    pool: Some(MaxPool2dConfig::new([2, 2]).init()),
                });
            } else {
                layers.push(VggLayer {
                    conv: Some(conv2d(in_c, c, 3, 1, 1, 1, true, device)),
                    bn: Some(BatchNorm2dConfig::new(c).init(device)),
                    pool: None,
                });
                in_c = c;
            }
        }
        let num_pools = self.layout.iter().filter(|&&c| c == 0).count();
        Ok(Vgg {
            layers,
            avgpool: (self.pooling == VggPooling::Flatten7x7)
                .then(|| AdaptiveAvgPool2dConfig::new([7, 7]).init()),
            in_channels: self.in_channels,
            min_side: 1 << num_pools,
            feature_dim: self.feature_dim(),
        })
    }
}

/// Either a 3×3 convolution + BN + ReLU or a 2×2 max-pool.
#[derive(Module, Debug)]
pub struct VggLayer<B: Backend> {
    /// Convolution (with bias).
    pub conv: Option<Conv2d<B>>,
    /// Norm after the convolution.
    pub bn: Option<BatchNorm2d<B>>,
    /// Max-pool.
    pub pool: Option<MaxPool2d>,
}

/// VGG without its classifier; see [`VggConfig`].
#[derive(Module, Debug)]
pub struct Vgg<B: Backend> {
    /// The feature layers in order.
    pub layers: Vec<VggLayer<B>>,
    /// Adaptive 7×7 pool ([`VggPooling::Flatten7x7`] only).
    pub avgpool: Option<AdaptiveAvgPool2d>,
    /// Input channels.
    pub in_channels: usize,
    /// Smallest image side (2^number of max-pools).
    pub min_side: usize,
    /// Length of the feature vectors.
    pub feature_dim: usize,
}

impl<B: Backend> Vgg<B> {
    /// Checks that a batch of this shape can go through the network.
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        check_channels_and_size("VGG", self.in_channels, self.min_side, shape)
    }

    /// The output of the last layer (convolution block or max-pool), before the feature pooling.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]` with `h, w ≥ 2^pools` (32 for VGG-16)
    /// - output: `[batch, last width, h / 2^pools, w / 2^pools]` (`[batch, 512, h/32, w/32]` for
    ///   VGG-16)
    ///
    /// # Panics
    /// If the input has the wrong channel count or is too small.
    pub fn forward_map(&self, images: Tensor<B, 4>) -> Tensor<B, 4> {
        if let Err(e) = self.check_input(images.dims()) {
            panic!("{e}");
        }
        let mut x = images;
        for layer in &self.layers {
            if let (Some(conv), Some(bn)) = (&layer.conv, &layer.bn) {
                x = bn.forward_grouped_relu(kernels::conv2d(conv, x), 1, None);
            }
            if let Some(pool) = &layer.pool {
                x = pool.forward(x);
            }
        }
        x
    }
}

impl<B: Backend> Backbone<B> for Vgg<B> {
    /// Pooled output of the last convolution block.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]` with `h, w ≥ 32` for VGG-16
    /// - output: `[batch, 512]` (global pooling) or `[batch, 25088]` (7×7 flattened)
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.forward_map(images);
        match &self.avgpool {
            Some(pool) => {
                let x = pool.forward(x);
                let [n, c, h, w] = x.dims();
                x.reshape([n, c * h * w])
            }
            None => global_avg_pool(x),
        }
    }

    fn feature_dim(&self) -> usize {
        self.feature_dim
    }

    /// The last layer's output ([`Vgg::forward_map`]), which both poolings read.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, 512, h / 32, w / 32]` for VGG-16
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(self.forward_map(images))
    }
}
