//! All4One's transformer over a sequence of neighbours (documented on `All4OneTransformer`).

use burn::module::{ModuleMapper, Param, ParamId};
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::prelude::*;
use curriculum_ssl_models::kernels;
use curriculum_ssl_models::layers::{linear_tokens, linear_zero_bias, LayerNorm, LayerNormConfig};
use curriculum_ssl_models::vit::qkv_heads;

use crate::base::error::ConfigError;

/// One post-norm transformer encoder layer, PyTorch's `nn.TransformerEncoderLayer` with its
/// defaults (`norm_first=False`, ReLU, LayerNorm ε 1e-5):
///
/// ```text
/// x = LN1(x + drop(MHA(x)));   x = LN2(x + drop(W2 · drop(relu(W1 · x))))
/// ```
///
/// The attention's dropout acts on its probabilities, as `nn.MultiheadAttention`'s. Parameter
/// layout: `in_proj` is PyTorch's `in_proj_weight` transposed (`[D, 3D]`, columns `q | k | v`).
#[derive(Module, Debug)]
pub struct EncoderLayer<B: Backend> {
    /// Queries, keys and values in one projection, `[D, 3D]` (PyTorch's `in_proj_weight`ᵀ).
    pub in_proj: Linear<B>,
    /// The attention's output projection (`out_proj`).
    pub out_proj: Linear<B>,
    /// First feed-forward layer, `D → dim_feedforward`.
    pub linear1: Linear<B>,
    /// Second feed-forward layer, `dim_feedforward → D`.
    pub linear2: Linear<B>,
    /// Norm after the attention's residual.
    pub norm1: LayerNorm<B>,
    /// Norm after the feed-forward residual.
    pub norm2: LayerNorm<B>,
    /// Dropout at the four places PyTorch's layer has it.
    pub dropout: Dropout,
    /// Number of attention heads.
    pub heads: usize,
}

impl<B: Backend> EncoderLayer<B> {
    /// A layer initialised as PyTorch's: `in_proj` Xavier-uniform with a zero bias, `out_proj`
    /// `nn.Linear`'s default weight with a zero bias, `linear1` / `linear2` `nn.Linear`'s
    /// default, norms γ 1, β 0.
    fn new(d: usize, heads: usize, feedforward: usize, dropout: f64, device: &B::Device) -> Self {
        let mut out_proj = LinearConfig::new(d, d).init(device);
        out_proj.bias = Some(Initializer::Zeros.init([d], device));
        Self {
            in_proj: linear_zero_bias(d, 3 * d, Initializer::XavierUniform { gain: 1.0 }, device),
            out_proj,
            linear1: LinearConfig::new(d, feedforward).init(device),
            linear2: LinearConfig::new(feedforward, d).init(device),
            norm1: LayerNormConfig::new(d).init(device),
            norm2: LayerNormConfig::new(d).init(device),
            dropout: DropoutConfig::new(dropout).init(),
            heads,
        }
    }

    /// Multi-head self-attention with dropout on the probabilities, through `out_proj`.
    fn attention(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [n, t, d] = x.dims();
        let hd = d / self.heads;
        let [q, k, v] = qkv_heads(&self.in_proj, x, self.heads);
        let scores = kernels::matmul(q, k.swap_dims(2, 3)).mul_scalar((hd as f64).powf(-0.5));
        let probabilities = self.dropout.forward(kernels::softmax(scores, 3));
        let out = kernels::matmul(probabilities, v); // [N, H, T, hd]
        linear_tokens(
            &self.out_proj,
            kernels::swap_middle_dims(out).reshape([n, t, d]),
        )
    }

    /// # Shapes
    /// - `x`: `[N, T, D]` → `[N, T, D]`
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let attended = self.dropout.forward(self.attention(x.clone()));
        let (_, x) = self.norm1.forward_after_add(x, attended);
        let hidden = self
            .dropout
            .forward(kernels::relu(linear_tokens(&self.linear1, x.clone())));
        let fed = self.dropout.forward(linear_tokens(&self.linear2, hidden));
        let (_, x) = self.norm2.forward_after_add(x, fed);
        x
    }
}

/// Gives every parameter a new id and a tensor of its own (the values kept): copies of a layer
/// that are trained as parameters of their own. A new id alone is not enough: a cloned tensor
/// is the same autodiff leaf, whose one gradient the optimiser hands to the first parameter
/// that reads it and none to the copies.
struct FreshIds;

impl<B: Backend> ModuleMapper<B> for FreshIds {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (_, tensor, mapper) = param.consume();
        let trained = tensor.is_require_grad();
        let copy = Tensor::from_data(tensor.to_data(), &tensor.device());
        let copy = if trained { copy.require_grad() } else { copy };
        Param::from_mapped_value(ParamId::new(), copy, mapper)
    }
}

/// All4One's transformer: a stack of [`EncoderLayer`]s over the sequence of an image's `k`
/// nearest neighbours (solo-learn's `nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model=D,
/// nhead=8, dim_feedforward=2D, batch_first=True, dropout=0.1), num_layers=3)`, no final norm),
/// and the positional table added to its input ([`positional_table`]).
///
/// As PyTorch's `TransformerEncoder`, which deep-copies the layer it is given, every layer
/// starts with the same weights; here they are distinct parameters (their own ids, so each is
/// trained on its own, as after PyTorch's deep copy).
#[derive(Module, Debug)]
pub struct All4OneTransformer<B: Backend> {
    /// The layers, in order.
    pub layers: Vec<EncoderLayer<B>>,
}

impl<B: Backend> All4OneTransformer<B> {
    /// `layers` identical layers of width `d`, `heads` heads, feed-forward width
    /// `feedforward` and dropout `dropout`. Call it under the seed lock (a method's `init`
    /// runs there): the first layer's weights are drawn here, then copied.
    ///
    /// # Errors
    /// A zero head or layer count, a width that the heads do not divide, or a dropout outside
    /// `[0, 1)` (each named by its All4One setting).
    pub fn new(
        d: usize,
        heads: usize,
        feedforward: usize,
        layers: usize,
        dropout: f64,
        device: &B::Device,
    ) -> Result<Self, ConfigError> {
        if layers == 0 {
            return Err(ConfigError::new(
                "transformer_layers",
                "the transformer needs at least one layer",
            ));
        }
        if heads == 0 || d == 0 || !d.is_multiple_of(heads) {
            return Err(ConfigError::new(
                "transformer_heads",
                format!("{heads} heads do not divide the projection width {d}"),
            ));
        }
        crate::base::seed::check_count(
            crate::base::seed::transformer_values(layers, d, feedforward as f64 / d.max(1) as f64),
            "the transformer's layers",
        )?;
        if !(0.0..1.0).contains(&dropout) {
            return Err(ConfigError::new(
                "transformer_dropout",
                format!("a dropout probability must be in [0, 1), got {dropout}"),
            ));
        }
        let first = EncoderLayer::new(d, heads, feedforward, dropout, device);
        crate::base::seed::materialise(&first);
        let mut all = Vec::with_capacity(layers);
        for _ in 1..layers {
            all.push(first.clone().map(&mut FreshIds));
        }
        all.insert(0, first);
        Ok(Self { layers: all })
    }

    /// The layers' output at the first position of each sequence (solo-learn's
    /// `transformer_encoder(x)[:, 0, :]`).
    ///
    /// # Shapes
    /// - `x`: `[N, k, D]` → `[N, D]`
    pub fn first_token(&self, x: Tensor<B, 3>) -> Tensor<B, 2> {
        let [n, _, d] = x.dims();
        let x = self.layers.iter().fold(x, |x, layer| layer.forward(x));
        x.slice([0..n, 0..1, 0..d]).reshape([n, d])
    }
}

/// The positional table solo-learn adds to a sequence of `k` neighbours of width `d`
/// (`Summer(PositionalEncodingPermute1D(k))`, solo/utils/positional_encodings.py): the permute
/// makes the feature index `j` the position and the sequence index `i` the channel, so
///
/// ```text
/// c = 2⌈k/2⌉,   f_m = 10000^(−2m/c),   row j = [sin(j f_0), cos(j f_0), sin(j f_1), cos(j f_1), …]
/// table[i, j] = row j's element i        (i < k, j < d)
/// ```
///
/// Computed in f64 on the host (solo-learn's frequencies are float32).
///
/// # Shapes
/// → `[k, d]`
pub fn positional_table<B: Backend>(k: usize, d: usize, device: &B::Device) -> Tensor<B, 2> {
    let channels = k.div_ceil(2) * 2;
    let values: Vec<f64> = (0..k)
        .flat_map(|i| {
            (0..d).map(move |j| {
                let frequency = 10000f64.powf(-((2 * (i / 2)) as f64) / channels as f64);
                let angle = j as f64 * frequency;
                if i % 2 == 0 {
                    angle.sin()
                } else {
                    angle.cos()
                }
            })
        })
        .collect();
    Tensor::from_data(TensorData::new(values, [k, d]), device)
}

/// The transformer's two inputs of a view (solo-learn's `training_step`): the neighbours with
/// the positions added (`trans_emb = nn + PE`), and the "shift operation", the second
/// predictor's output in front of the first `k − 1` neighbours (`strange = cat(q, nn)[:, :k]
/// + PE`).
///
/// # Shapes
/// - `neighbours`: `[N, k, D]`, `second_prediction`: `[N, D]`, `table`: `[k, D]` →
///   (`[N, k, D]`, `[N, k, D]`)
pub fn sequences<B: Backend>(
    neighbours: Tensor<B, 3>,
    second_prediction: Tensor<B, 2>,
    table: &Tensor<B, 2>,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let [n, k, d] = neighbours.dims();
    let table: Tensor<B, 3> = table.clone().unsqueeze_dim(0);
    let shifted = Tensor::cat(
        vec![
            second_prediction.reshape([n, 1, d]),
            neighbours.clone().slice([0..n, 0..k - 1, 0..d]),
        ],
        1,
    );
    (neighbours + table.clone(), shifted + table)
}
