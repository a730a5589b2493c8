//! Projection and prediction heads: MLPs of `Linear → BatchNorm → ReLU` blocks ending in a
//! `Linear` (optionally followed by a BatchNorm), with configurable widths.
//!
//! Presets match the papers: [`MlpHeadConfig::simclr`] (2 layers, BN), [`MlpHeadConfig::moco_v2`]
//! (2 layers, no BN), [`MlpHeadConfig::byol`] (2 layers, BN, 4096 hidden),
//! [`MlpHeadConfig::simsiam_projector`] (3 layers with a BN at the output) and
//! [`MlpHeadConfig::light_moco`] (`[2048, 128]`, BN). A linear layer followed by a BatchNorm has
//! no bias (it would be cancelled by the normalisation).

use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::prelude::*;

use crate::error::ConfigError;

/// Configuration of an [`MlpHead`].
#[derive(Config, Debug)]
pub struct MlpHeadConfig {
    /// Input width (the backbone's feature dimension).
    pub input_dim: usize,
    /// Width of every hidden layer.
    pub hidden_dim: usize,
    /// Output width.
    pub output_dim: usize,
    /// Number of linear layers (>= 1; 1 is a plain linear map).
    #[config(default = 2)]
    pub num_layers: usize,
    /// BatchNorm after every hidden linear layer.
    #[config(default = true)]
    pub batch_norm: bool,
    /// BatchNorm after the output layer too (SimSiam's projector).
    #[config(default = false)]
    pub output_batch_norm: bool,
}

impl MlpHeadConfig {
    /// SimCLR projector: `input → hidden (BN, ReLU) → output`.
    pub fn simclr(input_dim: usize, hidden_dim: usize, output_dim: usize) -> Self {
        Self::new(input_dim, hidden_dim, output_dim)
    }

    /// MoCo v2 projector: `input → hidden (ReLU) → output`, no BatchNorm.
    pub fn moco_v2(input_dim: usize, hidden_dim: usize, output_dim: usize) -> Self {
        Self::new(input_dim, hidden_dim, output_dim).with_batch_norm(false)
    }

    /// Light-MoCo projector: `[2048, 128]` with BatchNorm.
    pub fn light_moco(input_dim: usize) -> Self {
        Self::new(input_dim, 2048, 128)
    }

    /// BYOL projector or predictor: `input → 4096 (BN, ReLU) → 256`.
    pub fn byol(input_dim: usize) -> Self {
        Self::new(input_dim, 4096, 256)
    }

    /// SimSiam projector: three layers, BatchNorm after each, output included.
    pub fn simsiam_projector(input_dim: usize, dim: usize) -> Self {
        Self::new(input_dim, dim, dim)
            .with_num_layers(3)
            .with_output_batch_norm(true)
    }

    /// Validates the widths and initialises the head on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<MlpHead<B>, ConfigError> {
        for (field, value) in [
            ("input_dim", self.input_dim),
            ("hidden_dim", self.hidden_dim),
            ("output_dim", self.output_dim),
            ("num_layers", self.num_layers),
        ] {
            if value == 0 {
                return Err(ConfigError::new(field, "must be at least 1"));
            }
        }
        let mut hidden = Vec::new();
        let mut width = self.input_dim;
        for _ in 1..self.num_layers {
            hidden.push(HiddenLayer {
                linear: LinearConfig::new(width, self.hidden_dim)
                    .with_bias(!self.batch_norm)
                    .init(device),
                norm: self
                    .batch_norm
                    .then(|| BatchNormConfig::new(self.hidden_dim).init(device)),
            });
            width = self.hidden_dim;
        }
        Ok(MlpHead {
            hidden,
            output: LinearConfig::new(width, self.output_dim)
                .with_bias(!self.output_batch_norm)
                .init(device),
            output_norm: self
                .output_batch_norm
                .then(|| BatchNormConfig::new(self.output_dim).init(device)),
        })
    }
}

/// One hidden block: `Linear → (BatchNorm) → ReLU`.
#[derive(Module, Debug)]
pub struct HiddenLayer<B: Backend> {
    linear: Linear<B>,
    norm: Option<BatchNorm<B>>,
}

/// An MLP head. Build it with [`MlpHeadConfig::init`].
#[derive(Module, Debug)]
pub struct MlpHead<B: Backend> {
    hidden: Vec<HiddenLayer<B>>,
    output: Linear<B>,
    output_norm: Option<BatchNorm<B>>,
}

impl<B: Backend> MlpHead<B> {
    /// # Shapes
    /// - input: `[N, input_dim]` → `[N, output_dim]`
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = x;
        for layer in &self.hidden {
            x = layer.linear.forward(x);
            if let Some(norm) = &layer.norm {
                x = norm.forward(x);
            }
            x = burn::tensor::activation::relu(x);
        }
        x = self.output.forward(x);
        match &self.output_norm {
            Some(norm) => norm.forward(x),
            None => x,
        }
    }

    /// Output width.
    pub fn output_dim(&self) -> usize {
        self.output.weight.dims()[1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    fn parameters(config: &MlpHeadConfig) -> usize {
        config.init::<B>(&Default::default()).unwrap().num_params()
    }

    #[test]
    fn parameter_counts_by_hand() {
        // burn's `num_params` counts BatchNorm running statistics too: 4 values per channel.
        // SimCLR 512 → 2048 (BN) → 128: 512·2048 + 4·2048 + 2048·128 + 128.
        assert_eq!(
            parameters(&MlpHeadConfig::simclr(512, 2048, 128)),
            512 * 2048 + 4 * 2048 + 2048 * 128 + 128
        );
        // MoCo v2 512 → 512 → 128 without BN: both linears have biases.
        assert_eq!(
            parameters(&MlpHeadConfig::moco_v2(512, 512, 128)),
            512 * 512 + 512 + 512 * 128 + 128
        );
        // SimSiam 512 → 2048 → 2048 → 2048 with BN everywhere (no biases).
        assert_eq!(
            parameters(&MlpHeadConfig::simsiam_projector(512, 2048)),
            512 * 2048 + 4 * 2048 + 2048 * 2048 + 4 * 2048 + 2048 * 2048 + 4 * 2048
        );
    }

    #[test]
    fn shapes_and_bad_widths() {
        let device = Default::default();
        let head = MlpHeadConfig::simclr(8, 16, 4).init::<B>(&device).unwrap();
        let out = head.forward(Tensor::zeros([3, 8], &device));
        assert_eq!(out.dims(), [3, 4]);
        assert_eq!(head.output_dim(), 4);
        let err = MlpHeadConfig::new(8, 0, 4).init::<B>(&device).unwrap_err();
        assert_eq!(err.field, "hidden_dim");
    }
}
