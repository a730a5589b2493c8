//! Classifier heads, kept apart from the backbones.

use burn::module::Initializer;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::prelude::*;

use crate::layers::{linear_zero_bias, Activation};

/// Configuration of a [`Classifier`]: optional hidden layers, then a linear layer to the classes.
///
/// `ClassifierConfig::new(512, 10)` is a plain linear probe; the torchvision heads are available
/// as presets ([`ClassifierConfig::mobilenet_v3`], [`ClassifierConfig::vgg`],
/// [`ClassifierConfig::efficientnet`]).
#[derive(Config, Debug)]
pub struct ClassifierConfig {
    /// Length of the input feature vectors (the backbone's `feature_dim()`).
    pub in_features: usize,
    /// Number of classes.
    pub num_classes: usize,
    /// Widths of the hidden layers (empty: a single linear layer).
    #[config(default = "Vec::new()")]
    pub hidden: Vec<usize>,
    /// Activation after each hidden layer.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
    /// Dropout probability before every linear layer that follows a hidden layer, and before the
    /// first one when `dropout_first` is set.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Apply dropout to the input features too (EfficientNet's head does).
    #[config(default = false)]
    pub dropout_first: bool,
    /// Initialise weights with N(0, 0.01²) and zero biases (torchvision's MobileNet and VGG do);
    /// otherwise burn's default uniform initialisation.
    #[config(default = false)]
    pub normal_init: bool,
}

impl ClassifierConfig {
    /// torchvision's MobileNet-V3 head: Linear → hard-swish → dropout 0.2 → Linear.
    pub fn mobilenet_v3(in_features: usize, last_channel: usize, num_classes: usize) -> Self {
        Self::new(in_features, num_classes)
            .with_hidden(vec![last_channel])
            .with_activation(Activation::HardSwish)
            .with_dropout(0.2)
            .with_normal_init(true)
    }

    /// torchvision's VGG head on the flattened 7×7 map: two hidden layers of 4096 with ReLU and
    /// dropout 0.5.
    pub fn vgg(in_features: usize, num_classes: usize) -> Self {
        Self::new(in_features, num_classes)
            .with_hidden(vec![4096, 4096])
            .with_dropout(0.5)
            .with_normal_init(true)
    }

    /// torchvision's EfficientNet head: dropout then Linear. Its initialisation is burn's default
    /// (PyTorch's `nn.Linear` default, `U(±1/√in)`, bias too), not torchvision's `U(±1/√out)`
    /// with a zero bias.
    pub fn efficientnet(in_features: usize, num_classes: usize, dropout: f64) -> Self {
        Self::new(in_features, num_classes)
            .with_dropout(dropout)
            .with_dropout_first(true)
    }

    /// Builds the head.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Classifier<B> {
        let mut widths = vec![self.in_features];
        widths.extend(self.hidden.iter().copied());
        widths.push(self.num_classes);
        let layers = widths
            .windows(2)
            .map(|w| {
                if self.normal_init {
                    let normal = Initializer::Normal {
                        mean: 0.0,
                        std: 0.01,
                    };
                    linear_zero_bias(w[0], w[1], normal, device)
                } else {
                    LinearConfig::new(w[0], w[1]).init(device)
                }
            })
            .collect();
        Classifier {
            layers,
            dropout: DropoutConfig::new(self.dropout).init(),
            activation: self.activation,
            dropout_first: self.dropout_first,
        }
    }
}

/// A classifier on pooled features; see [`ClassifierConfig`].
#[derive(Module, Debug)]
pub struct Classifier<B: Backend> {
    /// The linear layers, the last one producing the logits.
    pub layers: Vec<Linear<B>>,
    /// Dropout (active only on autodiff backends).
    pub dropout: Dropout,
    /// Activation after hidden layers.
    #[module(skip)]
    pub activation: Activation,
    /// Whether dropout is applied to the input features.
    pub dropout_first: bool,
}

impl<B: Backend> Classifier<B> {
    /// Logits.
    ///
    /// # Shapes
    /// - input: `[batch, in_features]`
    /// - output: `[batch, num_classes]`
    pub fn forward(&self, features: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = features;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            if i > 0 || self.dropout_first {
                x = self.dropout.forward(x);
            }
            x = layer.forward(x);
            if i < last {
                x = self.activation.apply(x);
            }
        }
        x
    }
}
