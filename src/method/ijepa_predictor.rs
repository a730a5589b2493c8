//! I-JEPA's predictor (documented on `IjepaPredictor`).

use burn::module::Param;
use burn::nn::{Initializer, Linear};
use burn::prelude::*;
use curriculum_ssl_models::layers::{linear_tokens, linear_zero_bias};
use curriculum_ssl_models::layers::{LayerNorm, LayerNormConfig};
use curriculum_ssl_models::vit::{forward_blocks, VitBlock};

use super::masking::{sine_cosine_2d, PatchMask};

/// I-JEPA's predictor: the context tokens narrowed to the predictor's width with their fixed
/// sine-cosine positions, a mask token at the position of every target patch, transformer
/// blocks, a norm, and the target patches' tokens widened back to the encoder's width.
///
/// I-JEPA's predictor (Assran et al. 2023, <https://arxiv.org/abs/2301.08243>, §3): the narrow
/// transformer that predicts the target blocks' representations from the context's. A module of
/// its own, as lightly's `IJEPAPredictorTIMM`: [`Ijepa`](super::Ijepa) holds the idea (the
/// blocks, the context encoder, the EMA target and the loss), this type the network.
#[derive(Module, Debug)]
pub struct IjepaPredictor<B: Backend> {
    /// Encoder width → predictor width.
    pub embed: Linear<B>,
    /// The token at every target patch, `[1, 1, predictor_dim]`.
    pub mask_token: Param<Tensor<B, 3>>,
    /// Transformer blocks.
    pub blocks: Vec<VitBlock<B>>,
    /// Final norm.
    pub norm: LayerNorm<B>,
    /// Predictor width → encoder width.
    pub proj: Linear<B>,
}

impl<B: Backend> IjepaPredictor<B> {
    /// A predictor between an encoder of width `width` and `(dim, heads, depth)` blocks,
    /// initialised as the authors' `VisionTransformerPredictor`: every linear weight and the mask
    /// token from `N(0, 0.02²)` (their truncated normal at ±2 never truncates at this scale),
    /// biases zero, LayerNorms 1 and 0, and in block `l` (from 1) the attention's output
    /// projection and the MLP's second layer divided by `√(2l)` (their `fix_init_weight`).
    /// lightly's `IJEPAPredictorTIMM` keeps PyTorch's `nn.Linear` defaults and a zero mask token.
    pub fn new(
        width: usize,
        (dim, heads, depth): (usize, usize, usize),
        device: &B::Device,
    ) -> Self {
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let blocks = (1..=depth)
            .map(|l| {
                let mut block = VitBlock::new(dim, heads, 4.0, 1e-6, device);
                let rescaled = Initializer::Normal {
                    mean: 0.0,
                    std: 0.02 / (2.0 * l as f64).sqrt(),
                };
                block.attn.proj = linear_zero_bias(dim, dim, rescaled.clone(), device);
                let [hidden, _] = block.mlp.fc2.weight.lazy_shape().dims();
                block.mlp.fc2 = linear_zero_bias(hidden, dim, rescaled, device);
                block
            })
            .collect();
        Self {
            embed: linear_zero_bias(width, dim, normal.clone(), device),
            mask_token: normal.init([1, 1, dim], device),
            blocks,
            norm: LayerNormConfig::new(dim).with_epsilon(1e-6).init(device),
            proj: linear_zero_bias(dim, width, normal, device),
        }
    }

    /// The predicted tokens of every target block from the encoded context.
    ///
    /// # Shapes
    /// - `context`: `[N, K_c, D]` (the context patches' tokens, in `context`'s order) →
    ///   `[M·N, K_t, D]` (block-major: block 0 of every image, then block 1, …)
    pub fn forward(
        &self,
        context: Tensor<B, 3>,
        context_mask: &PatchMask,
        target_masks: &[PatchMask],
        grid: (usize, usize),
    ) -> Tensor<B, 3> {
        let x = linear_tokens(&self.embed, context);
        let [n, kc, dim] = x.dims();
        let l = grid.0 * grid.1;
        let positions = sine_cosine_2d::<B>(grid, dim, &x.device())
            .slice([0..1, 1..1 + l, 0..dim])
            .expand([n, l, dim]);
        let x = x + context_mask.gather(positions.clone());
        let m = target_masks.len();
        let queries: Vec<Tensor<B, 3>> = target_masks
            .iter()
            .map(|mask| {
                let kt = mask.visible();
                mask.gather(positions.clone()) + self.mask_token.val().expand([n, kt, dim])
            })
            .collect();
        let kt = queries[0].dims()[1];
        let context = Tensor::cat(vec![x; m], 0);
        let x = Tensor::cat(vec![context, Tensor::cat(queries, 0)], 1);
        let x = forward_blocks(&self.blocks, x, &self.norm).slice([0..m * n, kc..kc + kt, 0..dim]);
        linear_tokens(&self.proj, x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::host;
    use burn::backend::NdArray;

    #[test]
    fn the_predictor_starts_as_the_authors() {
        // The authors' VisionTransformerPredictor: trunc_normal_(std 0.02) on every linear
        // weight and the mask token, biases 0, and block l's `attn.proj` and `mlp.fc2` divided
        // by sqrt(2 l) (fix_init_weight).
        use crate::method::testing::assert_initialised;
        let p = crate::base::seed::init_module::<NdArray<f64>, _>(&Default::default(), 0, |d| {
            IjepaPredictor::new(128, (64, 4, 2), d)
        });
        assert_initialised(&p.embed, 0.02, "embed");
        assert_initialised(&p.proj, 0.02, "proj");
        for (i, block) in p.blocks.iter().enumerate() {
            let scale = 1.0 / (2.0 * (i + 1) as f64).sqrt();
            assert_initialised(&block.attn.qkv, 0.02, "qkv");
            assert_initialised(&block.attn.proj, 0.02 * scale, "attn.proj");
            assert_initialised(&block.mlp.fc1, 0.02, "fc1");
            assert_initialised(&block.mlp.fc2, 0.02 * scale, "fc2");
        }
        let token = host(p.mask_token.val());
        assert!(token.iter().all(|t| t.abs() < 0.2) && token.iter().any(|&t| t != 0.0));
    }
}
