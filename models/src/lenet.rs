//! LeNet-5 (LeCun et al. 1998): the small embedding network and student of SPL-ADVisE.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::prelude::*;

use crate::backbone::Backbone;
use crate::error::ModelError;
use crate::kernels;
use crate::layers::{check_channels_and_size, conv_init, out_size, Activation};

/// Configuration of a [`LeNet`].
#[derive(Config, Debug)]
pub struct LeNetConfig {
    /// Input channels (1 for (Fashion-)MNIST).
    #[config(default = 1)]
    pub in_channels: usize,
    /// Padding of the first 5×5 convolution: 2 keeps 28×28 inputs at 28×28 (the MNIST
    /// convention), 0 is the original 32×32 layout.
    #[config(default = 2)]
    pub conv1_padding: usize,
    /// Length of the embedding (width of the last fully connected layer; 84 in LeNet-5).
    #[config(default = 84)]
    pub embedding_dim: usize,
    /// Activation (ReLU, or Tanh as in the original).
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
}

impl LeNetConfig {
    /// LeNet-5 for 28×28 grey images: conv 6@5×5 (pad 2) → pool → conv 16@5×5 → pool →
    /// 120 → 84.
    pub fn lenet5() -> Self {
        Self::new()
    }

    /// Builds the network.
    ///
    /// # Panics
    /// On an invalid configuration (see [`LeNetConfig::try_init`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> LeNet<B> {
        self.try_init(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Builds the network, or says why the configuration is invalid.
    pub fn try_init<B: Backend>(&self, device: &B::Device) -> Result<LeNet<B>, ModelError> {
        if self.in_channels == 0 || self.embedding_dim == 0 {
            return Err(ModelError::InvalidConfig(
                "LeNet needs in_channels > 0 and embedding_dim > 0".into(),
            ));
        }
        // Smallest side whose second pooled map is at least 1×1.
        let min_side = (1..)
            .find(|&s| {
                let a = out_size(s, 5, 1, self.conv1_padding) / 2;
                out_size(a, 5, 1, 0) / 2 >= 1
            })
            .unwrap_or(usize::MAX);
        Ok(LeNet {
            conv1: lenet_conv(self.in_channels, 6, self.conv1_padding, device),
            conv2: lenet_conv(6, 16, 0, device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            adapt: AdaptiveAvgPool2dConfig::new([5, 5]).init(),
            fc1: LinearConfig::new(16 * 25, 120).init(device),
            fc2: LinearConfig::new(120, self.embedding_dim).init(device),
            activation: self.activation,
            in_channels: self.in_channels,
            min_side,
        })
    }
}

/// A 5 × 5 convolution of LeNet: weights Kaiming-normal fan-out (ReLU gain) and the bias drawn
/// by the same initialiser (burn's `with_initializer`). This is the crate's LeNet since its
/// first version, kept as it is because the SPL-ADVisE study and the rotation curriculum's tests
/// were measured on it; it follows no reference (torchvision has no LeNet; PyTorch's default
/// would be Kaiming-uniform fan-in), and it differs from [`crate::layers::conv2d`], whose bias is
/// zero as torchvision's.
fn lenet_conv<B: Backend>(
    in_channels: usize,
    out_channels: usize,
    padding: usize,
    device: &B::Device,
) -> Conv2d<B> {
    Conv2dConfig::new([in_channels, out_channels], [5, 5])
        .with_padding(PaddingConfig2d::Explicit(
            padding, padding, padding, padding,
        ))
        .with_initializer(conv_init())
        .init(device)
}

/// LeNet-5 up to its embedding layer; see [`LeNetConfig`].
#[derive(Module, Debug)]
pub struct LeNet<B: Backend> {
    /// 6 filters of 5×5.
    pub conv1: Conv2d<B>,
    /// 16 filters of 5×5.
    pub conv2: Conv2d<B>,
    /// 2×2 max-pool.
    pub pool: MaxPool2d,
    /// Adaptive average pool to 5×5 (the identity for 28×28 and 32×32 LeNet inputs).
    pub adapt: AdaptiveAvgPool2d,
    /// 400 → 120.
    pub fc1: Linear<B>,
    /// 120 → embedding.
    pub fc2: Linear<B>,
    /// Activation.
    #[module(skip)]
    pub activation: Activation,
    /// Input channels.
    pub in_channels: usize,
    /// Smallest image side.
    pub min_side: usize,
}

impl<B: Backend> LeNet<B> {
    /// Checks that a batch of this shape can go through the network.
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        check_channels_and_size("LeNet", self.in_channels, self.min_side, shape)
    }

    /// The map after the second convolution and its pooling (16 channels), before the
    /// adaptive 5×5 pool and the fully connected layers.
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, 16, h2, w2]` (`5 × 5` for 28×28 inputs with padding 2 and for 32×32
    ///   inputs without)
    ///
    /// # Panics
    /// If the input has the wrong channel count or is too small.
    pub fn forward_map(&self, images: Tensor<B, 4>) -> Tensor<B, 4> {
        if let Err(e) = self.check_input(images.dims()) {
            panic!("{e}");
        }
        let act = self.activation;
        let x = self
            .pool
            .forward(act.apply(kernels::conv2d(&self.conv1, images)));
        self.pool
            .forward(act.apply(kernels::conv2d(&self.conv2, x)))
    }
}

impl<B: Backend> Backbone<B> for LeNet<B> {
    /// The embedding (output of the last fully connected layer, after its activation).
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, embedding_dim]`
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let act = self.activation;
        let x = self.adapt.forward(self.forward_map(images));
        let [n, c, h, w] = x.dims();
        let x = act.apply(self.fc1.forward(x.reshape([n, c * h * w])));
        act.apply(self.fc2.forward(x))
    }

    fn feature_dim(&self) -> usize {
        self.fc2.weight.dims()[1]
    }

    /// The map after the second convolution and pooling ([`LeNet::forward_map`]).
    ///
    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, 16, h2, w2]`
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(self.forward_map(images))
    }
}
