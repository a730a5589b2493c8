//! AIM's prediction head (documented on `AimHead`).

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use curriculum_ssl_models::layers::{gelu, linear_tokens, LayerNorm, LayerNormConfig};
use curriculum_ssl_models::vit::Mlp;

/// One residual block of [`AimHead`]: `x + fc2(GELU(fc1(LayerNorm(x))))`, both layers without
/// bias (lightly's `AIMPredictionHeadBlock`).
#[derive(Module, Debug)]
pub struct AimHeadBlock<B: Backend> {
    /// The norm before the MLP (PyTorch's `LayerNorm`, ε = 1e-5).
    pub norm: LayerNorm<B>,
    /// The MLP, `width → ratio·width → width`.
    pub mlp: Mlp<B>,
}

/// AIM's prediction head: each token's features widened to the head's width, residual MLP
/// blocks, a LayerNorm, and the pixels of a patch.
///
/// The MLP head of AIM (El-Nouby et al. 2024, <https://arxiv.org/abs/2401.08541>, §3: "an MLP
/// prediction head … 12 blocks … of width 2048", applied to every token independently, dropped
/// after pre-training), as lightly's `AIMPredictionHead` builds it: a linear layer `D → width`,
/// `blocks` × [`AimHeadBlock`], a LayerNorm (ε = 1e-5), a linear layer `width → out`; no biases;
/// the linear layers at PyTorch's default initialisation (`LinearConfig`'s), as lightly leaves
/// them.
#[derive(Module, Debug)]
pub struct AimHead<B: Backend> {
    /// The trunk's width → the head's.
    pub embed: Linear<B>,
    /// The residual MLP blocks.
    pub blocks: Vec<AimHeadBlock<B>>,
    /// The final norm.
    pub norm: LayerNorm<B>,
    /// The head's width → a patch's pixels (`p²·C`, in row, column, channel order).
    pub pred: Linear<B>,
}

impl<B: Backend> AimHead<B> {
    /// A head from the trunk's width `input` to `out` values per token, `(width, blocks)` wide
    /// and deep, its blocks' MLPs `mlp_ratio` times as wide.
    pub fn new(
        input: usize,
        (width, blocks): (usize, usize),
        mlp_ratio: f64,
        out: usize,
        device: &B::Device,
    ) -> Self {
        let linear =
            |from: usize, to: usize| LinearConfig::new(from, to).with_bias(false).init(device);
        let norm = || LayerNormConfig::new(width).init(device);
        let hidden = (width as f64 * mlp_ratio) as usize;
        Self {
            embed: linear(input, width),
            blocks: (0..blocks)
                .map(|_| AimHeadBlock {
                    norm: norm(),
                    mlp: Mlp {
                        fc1: linear(width, hidden),
                        fc2: linear(hidden, width),
                    },
                })
                .collect(),
            norm: norm(),
            pred: linear(width, out),
        }
    }

    /// # Shapes
    /// - `tokens`: `[N, T, D]` → `[N, T, out]`
    pub fn forward(&self, tokens: Tensor<B, 3>) -> Tensor<B, 3> {
        let mut x = linear_tokens(&self.embed, tokens);
        for block in &self.blocks {
            let hidden = gelu(linear_tokens(&block.mlp.fc1, block.norm.forward(x.clone())));
            x = x + linear_tokens(&block.mlp.fc2, hidden);
        }
        linear_tokens(&self.pred, self.norm.forward(x))
    }
}
