//! MAE's decoder (documented on `MaeDecoder`).

use burn::module::Param;
use burn::nn::{Initializer, Linear};
use burn::prelude::*;
use curriculum_ssl_models::layers::{linear_tokens, linear_zero_bias};
use curriculum_ssl_models::layers::{LayerNorm, LayerNormConfig};
use curriculum_ssl_models::vit::{forward_blocks, VitBlock};

use super::masking::{sine_cosine_2d, PatchMask};

/// MAE's decoder: the encoded visible tokens widened to the decoder's width, a mask token at
/// every hidden patch, transformer blocks, and the pixels of every patch.
///
/// MAE's decoder (He et al. 2022, <https://arxiv.org/abs/2111.06377>, §3): the network that puts
/// a mask token at every hidden patch and predicts every patch's pixels from the encoded visible
/// ones. A module of its own, as lightly's `MAEDecoderTIMM`: [`Mae`](super::Mae) holds the idea
/// (mask, encode the visible patches, the loss on the hidden ones), this type the network.
#[derive(Module, Debug)]
pub struct MaeDecoder<B: Backend> {
    /// Encoder width → decoder width.
    pub embed: Linear<B>,
    /// The token at every hidden patch, `[1, 1, decoder_dim]`.
    pub mask_token: Param<Tensor<B, 3>>,
    /// Transformer blocks.
    pub blocks: Vec<VitBlock<B>>,
    /// Final norm.
    pub norm: LayerNorm<B>,
    /// Decoder width → a patch's pixels (`p²·C`, in row, column, channel order).
    pub pred: Linear<B>,
}

impl<B: Backend> MaeDecoder<B> {
    /// A decoder from the encoder's width `width` to `out` values per patch, `(dim, heads,
    /// depth)` wide, with MAE's initialisation (Xavier-uniform linear layers, its blocks' too —
    /// the authors' `_init_weights` and lightly's `MAEDecoderTIMM` —, the mask token normal
    /// with σ = 0.02). The shape is checked by the caller
    /// (`masking::check_token_transformer`).
    pub fn new(
        width: usize,
        (dim, heads, depth): (usize, usize, usize),
        out: usize,
        device: &B::Device,
    ) -> Self {
        let xavier = Initializer::XavierUniform { gain: 1.0 };
        let linear = |from: usize, to: usize| linear_zero_bias(from, to, xavier.clone(), device);
        Self {
            embed: linear(width, dim),
            mask_token: Initializer::Normal {
                mean: 0.0,
                std: 0.02,
            }
            .init([1, 1, dim], device),
            blocks: (0..depth)
                .map(|_| VitBlock::with_initializer(dim, heads, 4.0, 1e-6, xavier.clone(), device))
                .collect(),
            norm: LayerNormConfig::new(dim).with_epsilon(1e-6).init(device),
            pred: linear(dim, out),
        }
    }

    /// The predicted pixels of every patch from the encoded class token and visible patches.
    ///
    /// # Shapes
    /// - `encoded`: `[N, 1 + visible, D]` → `[N, L, p²·C]` (`L = grid.0 · grid.1`)
    pub fn forward(
        &self,
        encoded: Tensor<B, 3>,
        mask: &PatchMask,
        grid: (usize, usize),
    ) -> Tensor<B, 3> {
        let x = linear_tokens(&self.embed, encoded);
        let [n, tokens, dim] = x.dims();
        let class = x.clone().slice([0..n, 0..1, 0..dim]);
        let patches = mask.scatter(x.slice([0..n, 1..tokens, 0..dim]), self.mask_token.val());
        let positions = sine_cosine_2d::<B>(grid, dim, &patches.device());
        let x = Tensor::cat(vec![class, patches], 1) + positions;
        let x = linear_tokens(&self.pred, forward_blocks(&self.blocks, x, &self.norm));
        let [_, l1, out] = x.dims();
        x.slice([0..n, 1..l1, 0..out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::host;
    use burn::backend::NdArray;

    type Inner = NdArray<f64>;

    /// MAE's initialisation: every linear layer of the decoder, its blocks' too, Xavier-uniform
    /// — uniform on ±√(6 / (fan_in + fan_out)) — with zero biases, as the authors'
    /// `_init_weights` and lightly's `MAEDecoderTIMM` draw them (timm's N(0, 0.02²) for the
    /// blocks until 2026-11-27; Xavier-uniform biases until 2026-11-28).
    #[test]
    fn the_decoder_blocks_are_xavier_uniform() {
        let device = Default::default();
        let decoder = crate::base::seed::init_module::<Inner, _>(&device, 0, |d| {
            MaeDecoder::<Inner>::new(192, (128, 4, 1), 16, d)
        });
        let attn = &decoder.blocks[0].attn;
        let mlp = &decoder.blocks[0].mlp;
        for (name, linear, fan_in, fan_out) in [
            ("qkv", &attn.qkv, 128, 384),
            ("proj", &attn.proj, 128, 128),
            ("fc1", &mlp.fc1, 128, 512),
            ("fc2", &mlp.fc2, 512, 128),
        ] {
            let w = host(linear.weight.val());
            let bound = (6.0 / (fan_in + fan_out) as f64).sqrt();
            let max = w.iter().fold(0f64, |m, v| m.max(v.abs()));
            let sd = (w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64).sqrt();
            // At least 16,384 draws: the largest lies within 1 % of the bound but for a
            // chance of 0.99^16384 ≈ e^-164, and the root mean square (bound / √3) within 2 %
            // (its relative standard error is 0.35 %: 5.7 of them); N(0, 0.02²) fails both.
            assert!(
                max <= bound && max > 0.99 * bound,
                "{name}: max {max}, bound {bound}"
            );
            let expected = bound / 3f64.sqrt();
            assert!(
                (sd / expected - 1.0).abs() < 0.02,
                "{name}: sd {sd}, Xavier {expected}"
            );
        }
        // The authors' `constant_(bias, 0)` after the Xavier draw, on every linear layer.
        for linear in [
            &decoder.embed,
            &attn.qkv,
            &attn.proj,
            &mlp.fc1,
            &mlp.fc2,
            &decoder.pred,
        ] {
            let bias = host(linear.bias.as_ref().expect("a bias").val());
            assert!(bias.iter().all(|&b| b == 0.0));
        }
    }
}
