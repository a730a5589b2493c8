//! CAPI's cross-attention predictor (documented on `CapiPredictor`).

use burn::module::{Initializer, Param};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use curriculum_ssl_models::kernels;
use curriculum_ssl_models::layers::{gelu, linear_tokens, LayerNorm, LayerNormConfig};
use curriculum_ssl_models::vit::Mlp;

use super::masking::PatchMask;

/// The rotary position table of a `rows × cols` grid of patches for heads `head_dim` wide
/// (timm's `RotaryEmbeddingCat(dim = head_dim, in_pixels = False, feat_shape = [rows, cols])`,
/// which lightly's `CAPIPredictorTIMM` builds), computed in `f64` on the host: `nb = head_dim / 4`
/// bands `b_j = 10000^(−j/nb)`; the patch `t = r·cols + c` turns by the angles
/// `[r·b_0, …, r·b_{nb−1}, c·b_0, …, c·b_{nb−1}]`, each repeated twice (one per coordinate of a
/// rotated pair); its row is `[sin(angles) | cos(angles)]`.
///
/// # Shapes
/// → `rows·cols` rows of `2·head_dim` values, row-major
pub fn rope_table((rows, cols): (usize, usize), head_dim: usize) -> Vec<f64> {
    let nb = head_dim / 4;
    let bands: Vec<f64> = (0..nb)
        .map(|j| 10000f64.powf(-(j as f64) / nb as f64))
        .collect();
    let mut table = Vec::with_capacity(rows * cols * 2 * head_dim);
    for r in 0..rows {
        for c in 0..cols {
            let angles: Vec<f64> = bands
                .iter()
                .map(|b| r as f64 * b)
                .chain(bands.iter().map(|b| c as f64 * b))
                .flat_map(|a| [a, a])
                .collect();
            table.extend(angles.iter().map(|a| a.sin()));
            table.extend(angles.iter().map(|a| a.cos()));
        }
    }
    table
}

/// `x·cos + rot(x)·sin`, `rot([x0, x1, x2, x3, …]) = [−x1, x0, −x3, x2, …]` (timm's
/// `apply_rot_embed` on interleaved pairs).
///
/// # Shapes
/// - `x`: `[B, H, T, hd]`, `sin`, `cos`: `[B, T, hd]` (the same for every head) → `[B, H, T, hd]`
fn rotate<B: Backend>(x: Tensor<B, 4>, sin: Tensor<B, 3>, cos: Tensor<B, 3>) -> Tensor<B, 4> {
    let [b, h, t, hd] = x.dims();
    let pairs = x.clone().reshape([b, h, t, hd / 2, 2]);
    let even = pairs.clone().slice([0..b, 0..h, 0..t, 0..hd / 2, 0..1]);
    let odd = pairs.slice([0..b, 0..h, 0..t, 0..hd / 2, 1..2]);
    let turned = Tensor::cat(vec![odd.neg(), even], 4).reshape([b, h, t, hd]);
    let heads = |e: Tensor<B, 3>| e.reshape([b, 1, t, hd]).expand([b, h, t, hd]);
    x * heads(cos) + turned * heads(sin)
}

/// One block of [`CapiPredictor`]: the queries attend to the context (which no block updates),
/// queries and keys turned by their patches' rotary positions, then an MLP; pre-norm, residual.
#[derive(Module, Debug)]
pub struct RopeCrossBlock<B: Backend> {
    /// Norm of the queries before the attention.
    pub query_norm: LayerNorm<B>,
    /// Norm of the context before the keys and values.
    pub context_norm: LayerNorm<B>,
    /// Queries, `[D, D]`.
    pub to_query: Linear<B>,
    /// Keys (the first `D` outputs) and values (the next `D`), `[D, 2D]`.
    pub to_key_value: Linear<B>,
    /// Output projection of the attention.
    pub projection: Linear<B>,
    /// Norm before the MLP.
    pub mlp_norm: LayerNorm<B>,
    /// The MLP, `D → D·mlp_ratio (GELU) → D`.
    pub mlp: Mlp<B>,
    /// Attention heads.
    pub num_heads: usize,
}

impl<B: Backend> RopeCrossBlock<B> {
    /// A block of width `dim` with `heads` heads and an MLP `mlp_ratio` times as wide, as
    /// lightly's `_RoPECrossAttentionBlock`: PyTorch's default `nn.Linear` (biases on) and
    /// `nn.LayerNorm` (ε 1e-5) throughout.
    pub fn new(dim: usize, heads: usize, mlp_ratio: f64, device: &B::Device) -> Self {
        let hidden = (dim as f64 * mlp_ratio) as usize;
        let linear = |from, to| LinearConfig::new(from, to).init(device);
        let norm = || LayerNormConfig::new(dim).init(device);
        Self {
            query_norm: norm(),
            context_norm: norm(),
            to_query: linear(dim, dim),
            to_key_value: linear(dim, 2 * dim),
            projection: linear(dim, dim),
            mlp_norm: norm(),
            mlp: Mlp {
                fc1: linear(dim, hidden),
                fc2: linear(hidden, dim),
            },
            num_heads: heads,
        }
    }

    /// The queries after the block.
    ///
    /// # Shapes
    /// - `queries`: `[B, Q, D]`, `context`: `[B, C, D]`, `query_rope`: `[B, Q, 2·hd]`,
    ///   `context_rope`: `[B, C, 2·hd]` (`[sin | cos]` rows of [`rope_table`]) → `[B, Q, D]`
    pub fn forward(
        &self,
        queries: Tensor<B, 3>,
        context: Tensor<B, 3>,
        query_rope: (Tensor<B, 3>, Tensor<B, 3>),
        context_rope: (Tensor<B, 3>, Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        let [b, q, d] = queries.dims();
        let c = context.dims()[1];
        let h = self.num_heads;
        let hd = d / h;
        let split = |x: Tensor<B, 3>, t: usize| kernels::swap_middle_dims(x.reshape([b, t, h, hd]));
        let query = split(
            linear_tokens(&self.to_query, self.query_norm.forward(queries.clone())),
            q,
        );
        let rows = self.context_norm.forward(context).reshape([b * c, d]);
        let weight = self.to_key_value.weight.val();
        let bias = self.to_key_value.bias.as_ref().map(|b| b.val());
        let part = |i: usize| {
            let columns = i * d..(i + 1) * d;
            let y = kernels::linear(
                rows.clone(),
                weight.clone().slice([0..d, columns.clone()]),
                bias.as_ref().map(|b| b.clone().slice([columns])),
            );
            split(y.reshape([b, c, d]), c)
        };
        let (keys, values) = (part(0), part(1));
        let query = rotate(query, query_rope.0, query_rope.1);
        let keys = rotate(keys, context_rope.0, context_rope.1);
        let scores =
            kernels::matmul(query, keys.swap_dims(2, 3)).mul_scalar((hd as f64).powf(-0.5));
        let out = kernels::matmul(kernels::softmax(scores, 3), values);
        let out = kernels::swap_middle_dims(out).reshape([b, q, d]);
        let queries = queries + linear_tokens(&self.projection, out);
        let hidden = gelu(linear_tokens(
            &self.mlp.fc1,
            self.mlp_norm.forward(queries.clone()),
        ));
        queries + linear_tokens(&self.mlp.fc2, hidden)
    }
}

/// CAPI's predictor: a learned mask token at every patch to predict cross-attends, block after
/// block, to the encoder's tokens of the visible patches, with rotary positions ([`rope_table`])
/// on queries and keys and no positional table; a final norm.
///
/// lightly 1.6's `CAPIPredictorTIMM` (after the reference, facebookresearch/capi): unlike MAE's
/// decoder it does not put the mask tokens back into the full sequence, and the context is the
/// same in every block. A module of its own: [`Capi`](super::Capi) holds the idea (the masks,
/// the teacher, the clustering heads and the loss), this type the network.
#[derive(Module, Debug)]
pub struct CapiPredictor<B: Backend> {
    /// The token at every patch to predict, `[1, 1, D]`.
    pub mask_token: Param<Tensor<B, 3>>,
    /// Cross-attention blocks.
    pub blocks: Vec<RopeCrossBlock<B>>,
    /// Final norm (ε 1e-5).
    pub norm: LayerNorm<B>,
}

impl<B: Backend> CapiPredictor<B> {
    /// A predictor of width `dim` with `depth` blocks of `heads` heads and MLPs `mlp_ratio` times
    /// as wide; the mask token from `N(0, 0.02²)` (lightly's `normal_(std = 0.02)`), the blocks
    /// as [`RopeCrossBlock::new`], the norm 1 and 0.
    pub fn new(
        dim: usize,
        (heads, depth): (usize, usize),
        mlp_ratio: f64,
        device: &B::Device,
    ) -> Self {
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        Self {
            mask_token: normal.init([1, 1, dim], device),
            blocks: (0..depth)
                .map(|_| RopeCrossBlock::new(dim, heads, mlp_ratio, device))
                .collect(),
            norm: LayerNormConfig::new(dim).init(device),
        }
    }

    /// The predicted tokens of the patches `predict` keeps, from the encoder's tokens of the
    /// patches `context` keeps, on a `grid` of patches.
    ///
    /// # Shapes
    /// - `tokens`: `[B, C, D]` (the context patches' tokens, in `context`'s order) → `[B, Q, D]`
    ///   (in `predict`'s order)
    pub fn forward(
        &self,
        tokens: Tensor<B, 3>,
        context: &PatchMask,
        predict: &PatchMask,
        grid: (usize, usize),
    ) -> Tensor<B, 3> {
        let [b, _, d] = tokens.dims();
        let h = self.blocks.first().map_or(1, |block| block.num_heads);
        let hd = d / h;
        let l = grid.0 * grid.1;
        let device = tokens.device();
        let table =
            Tensor::<B, 1>::from_data(TensorData::new(rope_table(grid, hd), [l * 2 * hd]), &device)
                .reshape([1, l, 2 * hd])
                .expand([b, l, 2 * hd]);
        let halves = |mask: &PatchMask| {
            let rope = mask.gather(table.clone());
            let t = rope.dims()[1];
            (
                rope.clone().slice([0..b, 0..t, 0..hd]),
                rope.slice([0..b, 0..t, hd..2 * hd]),
            )
        };
        let (query_rope, context_rope) = (halves(predict), halves(context));
        let q = predict.visible();
        let mut queries = self.mask_token.val().expand([b, q, d]);
        for block in &self.blocks {
            queries = block.forward(
                queries,
                tokens.clone(),
                query_rope.clone(),
                context_rope.clone(),
            );
        }
        self.norm.forward(queries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::host;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// The table of a 1 × 2 grid at head width 4 (one band of 1): patch 1 sits at row 0,
    /// column 1, so its angles are [0, 0, 1, 1].
    #[test]
    fn the_rope_table_is_timms() {
        let table = rope_table((1, 2), 4);
        let (s, c) = (1f64.sin(), 1f64.cos());
        let patch0 = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let patch1 = [0.0, 0.0, s, s, 1.0, 1.0, c, c];
        assert_eq!(table.len(), 16);
        for (g, e) in table.iter().zip(patch0.iter().chain(&patch1)) {
            assert!((g - e).abs() < 1e-15, "{table:?}");
        }
    }

    /// A rotation by the angles `θ` of the table turns each interleaved pair `(x0, x1)` to
    /// `(x0 cos θ − x1 sin θ, x1 cos θ + x0 sin θ)`.
    #[test]
    fn the_rotation_turns_each_pair() {
        let device = Default::default();
        let x = Tensor::<B, 4>::from_data(
            TensorData::new(vec![1.0, 2.0, 3.0, 4.0], [1, 1, 1, 4]),
            &device,
        );
        let angles = [0.3, 0.3, 1.1, 1.1];
        let sin = angles.map(f64::sin);
        let cos = angles.map(f64::cos);
        let table = |v: [f64; 4]| {
            Tensor::<B, 3>::from_data(TensorData::new(v.to_vec(), [1, 1, 4]), &device)
        };
        let got = host(rotate(x, table(sin), table(cos)));
        let turn =
            |a: f64, x0: f64, x1: f64| [x0 * a.cos() - x1 * a.sin(), x1 * a.cos() + x0 * a.sin()];
        let want: Vec<f64> = turn(0.3, 1.0, 2.0)
            .into_iter()
            .chain(turn(1.1, 3.0, 4.0))
            .collect();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-15, "{got:?} vs {want:?}");
        }
    }
}
