//! Vision Transformer (Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021,
//! <https://arxiv.org/abs/2010.11929>), as timm's `VisionTransformer` builds it: a patch
//! embedding (a convolution of kernel and stride `patch_size`), a class token, learned absolute
//! positional embeddings, `depth` pre-norm blocks (LayerNorm → multi-head self-attention with one
//! fused `qkv` projection → residual; LayerNorm → MLP with GELU → residual), a final LayerNorm,
//! and the class token's output as the features (timm's `global_pool="token"`; [`VitPool`] can
//! make them the mean of the patch tokens encoded without it, for a method that never trains
//! the class token).
//!
//! Presets: ViT-Tiny (192 wide, 3 heads), ViT-Small (384, 6) and ViT-Base (768, 12), depth 12,
//! and ViT-Micro (96 wide, 3 heads, depth 4: CPU demos and smoke tests); MLP ratio 4,
//! LayerNorm `ε = 1e-6`. The patch size and the image size are parameters; images of another
//! size than the configured one get positional embeddings interpolated (bicubic,
//! align-corners off, as timm's `resample_abs_pos_embed` without its antialiasing, which only
//! matters when shrinking the grid). Weights load from timm state_dicts
//! ([`crate::import::vit_key`]).
//!
//! The feature map for heat maps ([`Backbone::forward_feature_map`]) is the patch tokens after
//! the final norm, laid out on the patch grid.

use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, Linear};
use burn::prelude::*;
use burn::tensor::module::interpolate;
use burn::tensor::ops::{InterpolateMode, InterpolateOptions};

use crate::backbone::Backbone;
use crate::error::ModelError;
use crate::kernels;
use crate::layers::{
    check_channels_and_size, gelu, linear_tokens, linear_zero_bias, LayerNorm, LayerNormConfig,
};

/// Configuration of a [`Vit`].
#[derive(Config, Debug)]
pub struct VitConfig {
    /// Side of the square images the positional embeddings are made for (224 for ImageNet).
    pub image_size: usize,
    /// Side of a square patch (16 for ViT-*/16).
    #[config(default = 16)]
    pub patch_size: usize,
    /// Input channels.
    #[config(default = 3)]
    pub in_channels: usize,
    /// Token width.
    #[config(default = 384)]
    pub embed_dim: usize,
    /// Number of blocks.
    #[config(default = 12)]
    pub depth: usize,
    /// Attention heads (they divide `embed_dim`).
    #[config(default = 6)]
    pub num_heads: usize,
    /// Hidden width of the MLP as a multiple of `embed_dim`.
    #[config(default = 4.0)]
    pub mlp_ratio: f64,
    /// `ε` of the LayerNorms (timm's 1e-6).
    #[config(default = 1e-6)]
    pub layer_norm_eps: f64,
    /// What the features are ([`VitPool`]): the class token's output (timm's default) or the
    /// mean of the patch tokens encoded without it (AIM's trunk).
    #[config(default = "VitPool::Token")]
    pub pool: VitPool,
}

/// What a [`Vit`]'s features ([`Backbone::forward_features`]) and feature map are.
#[derive(Config, Debug, PartialEq, Eq, Copy)]
pub enum VitPool {
    /// The class token's output after the final norm (timm's `global_pool="token"`); the
    /// feature map is the patch tokens of the same pass.
    Token,
    /// The patch tokens encoded without the class token (the sequence is the patches alone,
    /// attending to each other), after the final norm, averaged
    /// ([`Vit::encode_patches_alone`]): the features of a method that never trains the class
    /// token (AIM). timm's `global_pool="avg"` with `fc_norm=False` on a ViT without a class
    /// token; lightly's AIM benchmark averages the same tokens without the final norm. The
    /// feature map is those patch tokens.
    PatchMean,
}

// Written out: `#[derive(Default)]` does not see `#[default]` through burn's `Config` derive.
#[allow(clippy::derivable_impls)]
impl Default for VitPool {
    fn default() -> Self {
        VitPool::Token
    }
}

impl VitPool {
    /// Whether this is [`VitPool::Token`] (the default, left out of the run records).
    pub fn is_token(&self) -> bool {
        *self == VitPool::Token
    }
}

impl VitConfig {
    /// ViT-Micro: 96 wide, 4 blocks, 3 heads. Not one of the paper's sizes: a ViT for CPU demos
    /// and smoke tests, as the small ResNets are for the convolutional recipes (about a
    /// twelfth of ViT-Tiny's multiply-adds per token).
    pub fn micro(image_size: usize, patch_size: usize) -> Self {
        Self::new(image_size)
            .with_patch_size(patch_size)
            .with_embed_dim(96)
            .with_depth(4)
            .with_num_heads(3)
    }

    /// ViT-Tiny: 192 wide, 12 blocks, 3 heads.
    pub fn tiny(image_size: usize, patch_size: usize) -> Self {
        Self::new(image_size)
            .with_patch_size(patch_size)
            .with_embed_dim(192)
            .with_num_heads(3)
    }

    /// ViT-Small: 384 wide, 12 blocks, 6 heads.
    pub fn small(image_size: usize, patch_size: usize) -> Self {
        Self::new(image_size)
            .with_patch_size(patch_size)
            .with_embed_dim(384)
            .with_num_heads(6)
    }

    /// ViT-Base: 768 wide, 12 blocks, 12 heads.
    pub fn base(image_size: usize, patch_size: usize) -> Self {
        Self::new(image_size)
            .with_patch_size(patch_size)
            .with_embed_dim(768)
            .with_num_heads(12)
    }

    /// Patches along a side of the configured image.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size.max(1)
    }

    /// Why this configuration cannot be built, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.patch_size == 0 || self.image_size < self.patch_size {
            return Err(format!(
                "patch size {} must be at least 1 and at most the image size {}",
                self.patch_size, self.image_size
            ));
        }
        let left = self.image_size % self.patch_size;
        if left != 0 {
            return Err(format!(
                "image size {} is not a multiple of the patch size {}: the last {left} rows and \
                 columns of pixels would reach no patch",
                self.image_size, self.patch_size
            ));
        }
        if self.embed_dim == 0 || self.num_heads == 0 || self.depth == 0 || self.in_channels == 0 {
            return Err("width, heads, depth and channels must be at least 1".into());
        }
        if !self.embed_dim.is_multiple_of(self.num_heads) {
            return Err(format!(
                "{} heads do not divide the width {}",
                self.num_heads, self.embed_dim
            ));
        }
        if !(self.mlp_ratio.is_finite() && self.mlp_ratio > 0.0) {
            return Err(format!(
                "mlp_ratio must be positive, got {}",
                self.mlp_ratio
            ));
        }
        Ok(())
    }

    /// Initialises the network: linear weights and the positional embeddings from `N(0, 0.02²)`
    /// (timm truncates at ±2, which never happens at this scale), biases 0, LayerNorms 1 and 0,
    /// the patch embedding as a default convolution, as timm's ViT; the class token from
    /// `N(0, 0.02²)` as the DINO and MAE authors' ViTs (timm's draws it from `N(0, 10⁻¹²)`).
    ///
    /// # Panics
    /// On a configuration [`VitConfig::check`] refuses.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Vit<B> {
        if let Err(reason) = self.check() {
            panic!("VitConfig: {reason}");
        }
        let d = self.embed_dim;
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let tokens = self.grid() * self.grid() + 1;
        Vit {
            patch_embed: Conv2dConfig::new(
                [self.in_channels, d],
                [self.patch_size, self.patch_size],
            )
            .with_stride([self.patch_size, self.patch_size])
            .init(device),
            cls_token: normal.init([1, 1, d], device),
            pos_embed: normal.init([1, tokens, d], device),
            blocks: (0..self.depth)
                .map(|_| {
                    VitBlock::new(
                        d,
                        self.num_heads,
                        self.mlp_ratio,
                        self.layer_norm_eps,
                        device,
                    )
                })
                .collect(),
            norm: LayerNormConfig::new(d)
                .with_epsilon(self.layer_norm_eps)
                .init(device),
            pool: self.pool,
            patch_size: self.patch_size,
        }
    }
}

/// Multi-head self-attention with a fused `qkv` projection (timm's `Attention`).
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    /// Queries, keys and values in one projection, `[D, 3D]`.
    pub qkv: Linear<B>,
    /// Output projection.
    pub proj: Linear<B>,
    /// Number of heads.
    pub num_heads: usize,
}

impl<B: Backend> Attention<B> {
    /// # Shapes
    /// - `x`: `[N, T, D]` → `[N, T, D]`
    ///
    /// The queries, keys and values are three products with the column blocks of `qkv`'s
    /// weight (views, not copies), each laid out `[N, H, T, hd]` by one copy
    /// ([`kernels::swap_middle_dims`]): the same values as one `[D, 3D]` product split by
    /// reshape and permute, without the strided copies of that split on the CPU backend, or
    /// the full-size zeros that its slices' gradients are scattered into.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        self.forward_biased(x, None)
    }

    /// [`Attention::forward`] with `attn_bias` added to the scaled scores before the softmax (an
    /// attention mask: 0 where a query may attend a key, −∞ where it may not, as
    /// [`prefix_causal_bias`] makes; PyTorch's `scaled_dot_product_attention` adds a boolean
    /// mask so). `None` is [`Attention::forward`]: the same operations, nothing added.
    ///
    /// # Shapes
    /// - `x`: `[N, T, D]` → `[N, T, D]`
    /// - `attn_bias`: `[N, 1, T, T]` (query, key; the same for every head)
    pub fn forward_biased(
        &self,
        x: Tensor<B, 3>,
        attn_bias: Option<&Tensor<B, 4>>,
    ) -> Tensor<B, 3> {
        let [n, t, d] = x.dims();
        let hd = d / self.num_heads;
        let [q, k, v] = qkv_heads(&self.qkv, x, self.num_heads);
        let mut scores: Tensor<B, 4> =
            kernels::matmul(q, k.swap_dims(2, 3)).mul_scalar((hd as f64).powf(-0.5));
        if let Some(attn_bias) = attn_bias {
            scores = scores + attn_bias.clone();
        }
        let out = kernels::matmul(kernels::softmax(scores, 3), v); // [N, H, T, hd]
        linear_tokens(
            &self.proj,
            kernels::swap_middle_dims(out).reshape([n, t, d]),
        )
    }
}

/// The queries, keys and values of the tokens `x` through the fused projection `qkv` (`[D, 3D]`,
/// columns `q | k | v`), each laid out per head for `heads` heads: three products with the
/// column blocks of `qkv`'s weight (views, not copies), each laid out by one copy
/// ([`kernels::swap_middle_dims`]). What [`Attention`] and other multi-head attentions (All4One's
/// transformer) project their tokens with.
///
/// # Shapes
/// - `x`: `[N, T, D]` → three `[N, H, T, D/H]`
pub fn qkv_heads<B: Backend>(qkv: &Linear<B>, x: Tensor<B, 3>, heads: usize) -> [Tensor<B, 4>; 3] {
    let [n, t, d] = x.dims();
    let hd = d / heads;
    let rows = x.reshape([n * t, d]);
    let weight = qkv.weight.val();
    let bias = qkv.bias.as_ref().map(|b| b.val());
    // Part i of [N·T, 3D] = [N·T, 3, H, hd] → [N, H, T, hd].
    [0, 1, 2].map(|i| {
        let columns = i * d..(i + 1) * d;
        let y = kernels::linear(
            rows.clone(),
            weight.clone().slice([0..d, columns.clone()]),
            bias.as_ref().map(|b| b.clone().slice([columns])),
        );
        kernels::swap_middle_dims(y.reshape([n, t, heads, hd]))
    })
}

/// The MLP of a block: `D → hidden (GELU) → D`.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// First layer.
    pub fc1: Linear<B>,
    /// Second layer.
    pub fc2: Linear<B>,
}

/// One pre-norm transformer block.
#[derive(Module, Debug)]
pub struct VitBlock<B: Backend> {
    /// Norm before the attention.
    pub norm1: LayerNorm<B>,
    /// Self-attention.
    pub attn: Attention<B>,
    /// Norm before the MLP.
    pub norm2: LayerNorm<B>,
    /// The MLP.
    pub mlp: Mlp<B>,
}

impl<B: Backend> VitBlock<B> {
    /// A block of width `dim` with `heads` attention heads, an MLP `mlp_ratio` times as wide,
    /// LayerNorms with `ε = eps`; linear weights drawn from `N(0, 0.02²)` (timm's), biases zero.
    pub fn new(dim: usize, heads: usize, mlp_ratio: f64, eps: f64, device: &B::Device) -> Self {
        let timm = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        Self::with_initializer(dim, heads, mlp_ratio, eps, timm, device)
    }

    /// [`VitBlock::new`] with the linear weights drawn by `initializer` (MAE's decoder:
    /// Xavier-uniform, the fused `qkv` weight as one `[D, 3D]` layer as in the authors' code);
    /// biases zero.
    pub fn with_initializer(
        dim: usize,
        heads: usize,
        mlp_ratio: f64,
        eps: f64,
        initializer: Initializer,
        device: &B::Device,
    ) -> Self {
        let linear =
            |from: usize, to: usize| linear_zero_bias(from, to, initializer.clone(), device);
        let norm = || LayerNormConfig::new(dim).with_epsilon(eps).init(device);
        let hidden = (dim as f64 * mlp_ratio) as usize;
        Self {
            norm1: norm(),
            attn: Attention {
                qkv: linear(dim, 3 * dim),
                proj: linear(dim, dim),
                num_heads: heads,
            },
            norm2: norm(),
            mlp: Mlp {
                fc1: linear(dim, hidden),
                fc2: linear(hidden, dim),
            },
        }
    }

    /// # Shapes
    /// - `x`: `[N, T, D]` → `[N, T, D]`
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let normed = self.norm1.forward(x.clone());
        let (x, branch) = self.forward_to_last_add(x, normed, None);
        x + branch
    }

    /// The block on `x`, `normed = norm1(x)` given, and `next`, the norm after the block (the
    /// next block's `norm1` or the final norm), on its output: `(output, next(output))`, each
    /// residual add taken with the norm after it ([`LayerNorm::forward_after_add`]).
    ///
    /// # Shapes
    /// - `x`, `normed`: `[N, T, D]` → both outputs `[N, T, D]`
    pub fn forward_normed(
        &self,
        x: Tensor<B, 3>,
        normed: Tensor<B, 3>,
        next: &LayerNorm<B>,
    ) -> (Tensor<B, 3>, Tensor<B, 3>) {
        self.forward_normed_biased(x, normed, next, None)
    }

    /// [`VitBlock::forward_normed`] with an attention `bias` ([`Attention::forward_biased`]).
    ///
    /// # Shapes
    /// - `x`, `normed`: `[N, T, D]`, `bias`: `[N, 1, T, T]` → both outputs `[N, T, D]`
    pub fn forward_normed_biased(
        &self,
        x: Tensor<B, 3>,
        normed: Tensor<B, 3>,
        next: &LayerNorm<B>,
        bias: Option<&Tensor<B, 4>>,
    ) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let (x, branch) = self.forward_to_last_add(x, normed, bias);
        next.forward_after_add(x, branch)
    }

    /// The residual stream after the attention and the MLP's output, the two sides of the
    /// block's last add.
    fn forward_to_last_add(
        &self,
        x: Tensor<B, 3>,
        normed: Tensor<B, 3>,
        bias: Option<&Tensor<B, 4>>,
    ) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let attended = self.attn.forward_biased(normed, bias);
        let (x, h) = self.norm2.forward_after_add(x, attended);
        let hidden = gelu(linear_tokens(&self.mlp.fc1, h));
        (x, linear_tokens(&self.mlp.fc2, hidden))
    }
}

/// `blocks` in turn on `x`, then `norm` — a ViT's trunk after its tokens are built (the encoder,
/// MAE's decoder, I-JEPA's predictor) — with every residual add taken together with the norm
/// after it ([`VitBlock::forward_normed`]): the same values as each block's
/// [`VitBlock::forward`] and `norm.forward` in turn, to rounding.
///
/// # Shapes
/// - `x`: `[N, T, D]` → `[N, T, D]`
pub fn forward_blocks<B: Backend>(
    blocks: &[VitBlock<B>],
    x: Tensor<B, 3>,
    norm: &LayerNorm<B>,
) -> Tensor<B, 3> {
    forward_blocks_biased(blocks, x, norm, None)
}

/// [`forward_blocks`] with the attention `bias` added to every block's attention scores
/// ([`Attention::forward_biased`]; e.g. AIM's prefix-causal mask, [`prefix_causal_bias`]).
/// `None` is [`forward_blocks`].
///
/// # Shapes
/// - `x`: `[N, T, D]`, `bias`: `[N, 1, T, T]` → `[N, T, D]`
pub fn forward_blocks_biased<B: Backend>(
    blocks: &[VitBlock<B>],
    x: Tensor<B, 3>,
    norm: &LayerNorm<B>,
    bias: Option<&Tensor<B, 4>>,
) -> Tensor<B, 3> {
    let Some(first) = blocks.first() else {
        return norm.forward(x);
    };
    let mut normed = first.norm1.forward(x.clone());
    let mut x = x;
    for (i, block) in blocks.iter().enumerate() {
        let next = blocks.get(i + 1).map_or(norm, |b| &b.norm1);
        (x, normed) = block.forward_normed_biased(x, normed, next, bias);
    }
    normed
}

/// The attention bias of prefix-causal attention (AIM, El-Nouby et al. 2024,
/// <https://arxiv.org/abs/2401.08541>, §3; lightly's `MaskedCausalAttention`): for a sequence
/// `n` of `tokens` tokens whose first `prefixes[n]` are its prefix, query `i` may attend key `j`
/// when `j ≤ i` (causal) or `j < prefixes[n]` (the prefix, seen by every token, so the prefix
/// attends within itself bidirectionally). Entries 0 where it may, −∞ where it may not; the
/// diagonal is always allowed, so no row of the softmax is empty. A prefix of 0 is fully causal,
/// one of `tokens` fully bidirectional.
///
/// # Shapes
/// → `[prefixes.len(), 1, tokens, tokens]` (query, key)
pub fn prefix_causal_bias<B: Backend>(
    prefixes: &[usize],
    tokens: usize,
    device: &B::Device,
) -> Tensor<B, 4> {
    let values: Vec<f32> = prefixes
        .iter()
        .flat_map(|&prefix| {
            (0..tokens * tokens).map(move |e| {
                let (query, key) = (e / tokens, e % tokens);
                if key <= query || key < prefix {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Tensor::from_data(
        TensorData::new(values, [prefixes.len(), 1, tokens, tokens]),
        device,
    )
}

/// A Vision Transformer. Build it with [`VitConfig::init`].
#[derive(Module, Debug)]
pub struct Vit<B: Backend> {
    /// Patch embedding: kernel and stride `patch_size`.
    pub patch_embed: Conv2d<B>,
    /// The class token, `[1, 1, D]`.
    pub cls_token: Param<Tensor<B, 3>>,
    /// Positional embeddings of the class token and the configured grid, `[1, 1 + g², D]`.
    pub pos_embed: Param<Tensor<B, 3>>,
    /// The blocks.
    pub blocks: Vec<VitBlock<B>>,
    /// The final norm.
    pub norm: LayerNorm<B>,
    /// Side of a patch.
    pub patch_size: usize,
    /// What the features are (the configuration's; not in the record).
    #[module(skip)]
    pub pool: VitPool,
}

impl<B: Backend> Vit<B> {
    /// Checks that images of `shape` (`[batch, channels, height, width]`) fit: the channel count
    /// it was built for, and at least one patch per side (pixels past the last whole patch are
    /// not seen, as a strided convolution leaves them).
    ///
    /// # Errors
    /// [`ModelError::ChannelMismatch`] or [`ModelError::ImageTooSmall`].
    pub fn check_input(&self, shape: [usize; 4]) -> Result<(), ModelError> {
        check_channels_and_size("ViT", self.in_channels(), self.patch_size, shape)
    }

    /// Token width.
    ///
    /// Read from the parameter's shape without initialising it: a lazily initialised parameter
    /// would otherwise draw from the backend's generator here, outside any seeded section.
    pub fn embed_dim(&self) -> usize {
        self.cls_token.lazy_shape().dims::<3>()[2]
    }

    /// The image channels it was built for (read without initialising a parameter, as
    /// [`Vit::embed_dim`]).
    pub fn in_channels(&self) -> usize {
        self.patch_embed.weight.lazy_shape().dims::<4>()[1]
    }

    /// The patch tokens of the configured grid (read without initialising a parameter, as
    /// [`Vit::embed_dim`]).
    pub fn grid_tokens(&self) -> usize {
        self.pos_embed.lazy_shape().dims::<3>()[1] - 1
    }

    /// The positional embeddings for a grid of `h × w` patches: the stored ones when the grid is
    /// the configured one, otherwise the grid part interpolated bicubically (the class token's
    /// embedding is kept).
    ///
    /// # Shapes
    /// → `[1, 1 + h·w, D]`
    pub fn pos_embed_for(&self, h: usize, w: usize) -> Tensor<B, 3> {
        let pos = self.pos_embed.val();
        let [_, tokens, d] = pos.dims();
        let side = ((tokens - 1) as f64).sqrt().round() as usize;
        if side * side == h * w && side == h {
            return pos;
        }
        let cls = pos.clone().slice([0..1, 0..1, 0..d]);
        let grid = pos
            .slice([0..1, 1..tokens, 0..d])
            .reshape([1, side, side, d])
            .permute([0, 3, 1, 2]);
        let grid = interpolate(
            grid,
            [h, w],
            InterpolateOptions::new(InterpolateMode::Bicubic).with_align_corners(false),
        );
        let grid = grid.permute([0, 2, 3, 1]).reshape([1, h * w, d]);
        Tensor::cat(vec![cls, grid], 1)
    }

    /// Every token after the final norm: the class token first, then the patches row by row.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, 1 + (H/p)(W/p), D]`
    pub fn forward_tokens(&self, images: Tensor<B, 4>) -> Tensor<B, 3> {
        let (patches, grid) = self.patch_tokens(images);
        self.encode_patch_tokens(patches, grid)
    }

    /// The patch embedding of every whole patch, row by row, before the positional embeddings,
    /// and the patch grid `(rows, cols)` (what masked image modelling edits before encoding).
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, (H/p)(W/p), D]`
    pub fn patch_tokens(&self, images: Tensor<B, 4>) -> (Tensor<B, 3>, (usize, usize)) {
        let patches = kernels::conv2d(&self.patch_embed, images); // [N, D, h, w]
        let [n, d, h, w] = patches.dims();
        (patches.reshape([n, d, h * w]).swap_dims(1, 2), (h, w))
    }

    /// The class token prepended to `patches`, the positional embeddings of a `grid` added, the
    /// blocks and the final norm.
    ///
    /// # Shapes
    /// - `patches`: `[N, rows·cols, D]` → `[N, 1 + rows·cols, D]`
    pub fn encode_patch_tokens(
        &self,
        patches: Tensor<B, 3>,
        (h, w): (usize, usize),
    ) -> Tensor<B, 3> {
        let [n, _, d] = patches.dims();
        let cls = self.cls_token.val().expand([n, 1, d]);
        let x = Tensor::cat(vec![cls, patches], 1) + self.pos_embed_for(h, w);
        forward_blocks(&self.blocks, x, &self.norm)
    }

    /// The patch tokens alone, without the class token: `patches` with the positional
    /// embeddings of a `grid` added (and no class token), the blocks with the attention `bias`
    /// added to their scores if there is one (AIM's prefix-causal mask, [`prefix_causal_bias`];
    /// `None`: the patches attend to each other), and the final norm.
    ///
    /// # Shapes
    /// - `patches`: `[N, rows·cols, D]`, `bias`: `[N, 1, rows·cols, rows·cols]` →
    ///   `[N, rows·cols, D]`
    pub fn encode_patches_alone(
        &self,
        patches: Tensor<B, 3>,
        (h, w): (usize, usize),
        bias: Option<&Tensor<B, 4>>,
    ) -> Tensor<B, 3> {
        let [_, k, d] = patches.dims();
        let positions = self.pos_embed_for(h, w).slice([0..1, 1..1 + k, 0..d]);
        forward_blocks_biased(&self.blocks, patches + positions, &self.norm, bias)
    }
}

impl<B: Backend> Backbone<B> for Vit<B> {
    /// The class token's output, or the mean of the patch tokens encoded alone ([`VitPool`]).
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        match self.pool {
            VitPool::Token => {
                let tokens = self.forward_tokens(images);
                let [n, _, d] = tokens.dims();
                tokens.slice([0..n, 0..1, 0..d]).reshape([n, d])
            }
            VitPool::PatchMean => {
                let (patches, grid) = self.patch_tokens(images);
                let tokens = self.encode_patches_alone(patches, grid, None);
                let [n, _, d] = tokens.dims();
                tokens.mean_dim(1).reshape([n, d])
            }
        }
    }

    fn feature_dim(&self) -> usize {
        self.embed_dim()
    }

    /// The patch tokens on the patch grid, `[N, D, H/p, W/p]` (of the pass [`VitPool`] says).
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        let [_, _, height, width] = images.dims();
        let (h, w) = (height / self.patch_size, width / self.patch_size);
        let patches = match self.pool {
            VitPool::Token => {
                let tokens = self.forward_tokens(images);
                let [n, t, d] = tokens.dims();
                tokens.slice([0..n, 1..t, 0..d])
            }
            VitPool::PatchMean => {
                let (patches, grid) = self.patch_tokens(images);
                self.encode_patches_alone(patches, grid, None)
            }
        };
        let [n, _, d] = patches.dims();
        Some(patches.swap_dims(1, 2).reshape([n, d, h, w]))
    }
}

/// A backbone that may be a Vision Transformer: masked image modelling (MAE) reaches its patch
/// tokens through [`AsVit::as_vit`] and refuses a backbone without them.
pub trait AsVit<B: Backend> {
    /// The Vision Transformer this backbone is, if it is one.
    fn as_vit(&self) -> Option<&Vit<B>>;
}

impl<B: Backend> AsVit<B> for Vit<B> {
    fn as_vit(&self) -> Option<&Vit<B>> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f32>;

    fn tiny() -> VitConfig {
        VitConfig::new(16)
            .with_patch_size(4)
            .with_embed_dim(8)
            .with_depth(2)
            .with_num_heads(2)
    }

    #[test]
    fn shapes_features_map_and_another_input_size() {
        let device = Default::default();
        let vit = tiny().init::<B>(&device);
        let x = Tensor::<B, 4>::ones([2, 3, 16, 16], &device);
        assert_eq!(vit.forward_features(x.clone()).dims(), [2, 8]);
        assert_eq!(vit.forward_feature_map(x).unwrap().dims(), [2, 8, 4, 4]);
        // A larger image: a 6 × 6 grid with interpolated positional embeddings.
        let big = Tensor::<B, 4>::ones([2, 3, 24, 24], &device);
        assert_eq!(vit.pos_embed_for(6, 6).dims(), [1, 37, 8]);
        assert_eq!(vit.forward_features(big).dims(), [2, 8]);
        // The configured grid keeps the stored embeddings exactly.
        let same = vit.pos_embed_for(4, 4).into_data();
        assert_eq!(same, vit.pos_embed.val().into_data());
    }

    #[test]
    fn impossible_configurations_are_explained() {
        assert!(tiny()
            .with_num_heads(3)
            .check()
            .unwrap_err()
            .contains("divide"));
        assert!(tiny()
            .with_patch_size(32)
            .check()
            .unwrap_err()
            .contains("patch size"));
        // 30 pixels in patches of 4: a 7 x 7 grid would leave 2 rows and columns unseen.
        let err = VitConfig::tiny(30, 4).check().unwrap_err();
        assert!(
            err.contains("image size 30 is not a multiple of the patch size 4")
                && err.contains("the last 2 rows"),
            "{err}"
        );
        assert!(VitConfig::tiny(32, 4).check().is_ok());
        assert_eq!(VitConfig::small(224, 16).grid(), 14);
        assert_eq!(VitConfig::tiny(224, 16).embed_dim, 192);
        assert_eq!(VitConfig::base(224, 16).num_heads, 12);
    }

    #[test]
    fn blocks_start_as_timms() {
        // timm's `init_weights_vit_timm`: trunc_normal_(std 0.02) on every linear weight (at
        // ±2, so never truncated at this scale), biases 0. The sample standard deviation of
        // n >= 4,096 draws is off by about 1/sqrt(2n) < 1.2 %: 5 % is more than four of those.
        use crate::layers::tests::weight_std_and_zero_bias;
        let vit = tiny().with_embed_dim(64).init::<B>(&Default::default());
        for block in &vit.blocks {
            for layer in [
                &block.attn.qkv,
                &block.attn.proj,
                &block.mlp.fc1,
                &block.mlp.fc2,
            ] {
                let bias = layer.bias.as_ref().map(|b| b.val());
                let (std, n, zero) = weight_std_and_zero_bias(layer.weight.val(), bias);
                assert!(n >= 4096 && (std / 0.02 - 1.0).abs() < 0.05, "std {std}");
                assert!(zero, "bias not zero");
            }
        }
    }
}
