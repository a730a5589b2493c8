//! Projection and prediction heads: MLPs of `Linear → BatchNorm → ReLU` (or GELU) blocks ending
//! in a `Linear` (optionally followed by a BatchNorm), with configurable widths.
//!
//! Presets match the papers: [`MlpHeadConfig::simclr`] (2 layers, BN), [`MlpHeadConfig::moco_v2`]
//! (2 layers, no BN), [`MlpHeadConfig::byol`] (2 layers, BN, 4096 hidden),
//! [`MlpHeadConfig::simsiam_projector`] (3 layers with a BN without affine parameters at the
//! output) and [`MlpHeadConfig::light_moco`] (`[2048, 128]`, no BN, as Lin et al.'s paper and
//! code build it), [`MlpHeadConfig::msn`] (3 layers, BN, GELU). A linear layer followed by a BatchNorm has no bias (it would be cancelled by
//! the normalisation). See `docs/methods.md#methods`.

use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use curriculum_ssl_models::kernels::batch_norm_1d_train;
use curriculum_ssl_models::layers::step_running_averages;
use curriculum_ssl_models::replica_stats::replica_mean;
use curriculum_ssl_models::running_stat::RunningStat;

use crate::base::error::ConfigError;

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
    /// Whether that output BatchNorm has the learnable scale and shift `γ`, `β` (burn's
    /// `BatchNorm`); `false` normalises only, as SimSiam's `BatchNorm1d(dim, affine=False)`.
    #[config(default = true)]
    pub output_batch_norm_affine: bool,
    /// A bias on the output layer (when no BatchNorm follows it); lightly's MMCR head has none.
    #[config(default = true)]
    pub output_bias: bool,
}

/// The activation of an [`MlpHead`]'s hidden layers, chosen when it is applied
/// ([`MlpHead::forward_with`]): not part of the record, so checkpoints written before it existed
/// load unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadActivation {
    /// `max(x, 0)`.
    Relu,
    /// The exact GELU, `x·Φ(x)` (PyTorch's `nn.GELU()` default).
    Gelu,
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

    /// Light-MoCo projector: `input → 2048 (ReLU) → 128`, no BatchNorm (Lin et al. 2022, §3.1.1
    /// and §4.1: "a two-layer MLP projector with dimension [2048, 128]"; their public model
    /// builder has no BatchNorm either).
    pub fn light_moco(input_dim: usize) -> Self {
        Self::moco_v2(input_dim, 2048, 128)
    }

    /// BYOL projector or predictor: `input → 4096 (BN, ReLU) → 256`.
    pub fn byol(input_dim: usize) -> Self {
        Self::new(input_dim, 4096, 256)
    }

    /// SimSiam projector: three layers, BatchNorm after each, output included; the output's
    /// BatchNorm has no affine parameters (Chen & He 2021, §3 and their code:
    /// `nn.BatchNorm1d(dim, affine=False)`).
    pub fn simsiam_projector(input_dim: usize, dim: usize) -> Self {
        Self::new(input_dim, dim, dim)
            .with_num_layers(3)
            .with_output_batch_norm(true)
            .with_output_batch_norm_affine(false)
    }

    /// MSN projector: three layers, `input → hidden (BN) → hidden (BN) → output`, applied with
    /// GELU ([`MlpHead::forward_with`]; Assran et al. 2022, §4: "a 3-layer projection head with
    /// output dimension 256 and batch-normalization at the input and hidden layers"; the
    /// authors' code and lightly's `MSNProjectionHead` use GELU, 2048 hidden).
    pub fn msn(input_dim: usize, hidden_dim: usize, output_dim: usize) -> Self {
        Self::new(input_dim, hidden_dim, output_dim).with_num_layers(3)
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
        // Sized from the settings before anything is made: a batch norm's running statistics
        // are allocated when it is made (`hidden_dim=1000000000` took 7.5 GB before the
        // network's size was checked), and a layer count of 2³² would loop that many times.
        let wide = |a: usize, b: usize| (a as u64).saturating_mul(b as u64);
        let (h, out) = (self.hidden_dim as u64, self.output_dim as u64);
        let hidden_layers = (self.num_layers - 1) as u64;
        // A hidden layer's bias, or its batch norm's γ, β and two running statistics.
        let per_hidden = if self.batch_norm {
            h.saturating_mul(4)
        } else {
            h
        };
        let hidden = if hidden_layers == 0 {
            0
        } else {
            wide(self.input_dim, self.hidden_dim)
                .saturating_add(per_hidden)
                .saturating_add(
                    wide(self.hidden_dim, self.hidden_dim)
                        .saturating_add(per_hidden)
                        .saturating_mul(hidden_layers - 1),
                )
        };
        let width = if hidden_layers == 0 {
            self.input_dim
        } else {
            self.hidden_dim
        };
        let output_extra = match (self.output_batch_norm, self.output_batch_norm_affine) {
            (true, true) => out.saturating_mul(4),
            (true, false) => out.saturating_mul(2),
            (false, _) if self.output_bias => out,
            (false, _) => 0,
        };
        let count = hidden
            .saturating_add(wide(width, self.output_dim))
            .saturating_add(output_extra);
        crate::base::seed::check_count(count, "the projection head")?;
        let mut hidden = Vec::new();
        let mut width = self.input_dim;
        for _ in 1..self.num_layers {
            hidden.push(HiddenLayer {
                linear: LinearConfig::new(width, self.hidden_dim)
                    .with_bias(!self.batch_norm)
                    .init(device),
                norm: self
                    .batch_norm
                    .then(|| BatchNorm1d::new(self.hidden_dim, device)),
            });
            width = self.hidden_dim;
        }
        Ok(MlpHead {
            hidden,
            output: LinearConfig::new(width, self.output_dim)
                .with_bias(self.output_bias && !self.output_batch_norm)
                .init(device),
            output_norm: (self.output_batch_norm && self.output_batch_norm_affine)
                .then(|| BatchNorm1d::new(self.output_dim, device)),
            output_norm_plain: (self.output_batch_norm && !self.output_batch_norm_affine)
                .then(|| PlainBatchNorm::new(self.output_dim, device)),
        })
    }
}

/// One hidden block: `Linear → (BatchNorm) → ReLU`.
#[derive(Module, Debug)]
pub struct HiddenLayer<B: Backend> {
    linear: Linear<B>,
    norm: Option<BatchNorm1d<B>>,
}

/// Batch normalisation of `[N, C]` features with learnable scale `γ` and shift `β`: burn's
/// `BatchNorm` (the same parameter names, so records load unchanged, and the same arithmetic:
/// momentum 0.1, ε = 1e-5, biased batch variance in the running average), whose batch moments
/// are averaged over data-parallel replicas when a trainer synchronises them
/// ([`curriculum_ssl_models::replica_stats`]).
#[derive(Module, Debug)]
pub struct BatchNorm1d<B: Backend> {
    /// The learnable scale `γ`.
    pub gamma: Param<Tensor<B, 1>>,
    /// The learnable shift `β`.
    pub beta: Param<Tensor<B, 1>>,
    /// The running mean.
    pub running_mean: RunningStat<Tensor<B, 1>>,
    /// The running (biased) variance.
    pub running_var: RunningStat<Tensor<B, 1>>,
    /// Weight of the batch statistics in the running averages.
    pub momentum: f64,
    /// Added to the variance before the square root.
    pub epsilon: f64,
}

impl<B: Backend> BatchNorm1d<B> {
    /// `channels` features: `γ = 1`, `β = 0`, running mean 0 and variance 1.
    pub fn new(channels: usize, device: &B::Device) -> Self {
        Self {
            gamma: burn::module::Initializer::Ones.init([channels], device),
            beta: burn::module::Initializer::Zeros.init([channels], device),
            running_mean: RunningStat::new(Tensor::zeros([channels], device)),
            running_var: RunningStat::new(Tensor::ones([channels], device)),
            momentum: 0.1,
            epsilon: 1e-5,
        }
    }

    /// # Shapes
    /// - input: `[N, C]` → `[N, C]`
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward_grouped(x, 1)
    }

    /// [`BatchNorm1d::forward`] on `groups` equal batches stacked along the first axis, each
    /// normalised with its own moments in training (the running averages moved by each group
    /// in turn), in one set of operations: in training on wgpu and CUDA one operation with its
    /// own backward step (`kernels::batch_norm_1d_train`), elsewhere burn's tensor operations.
    ///
    /// # Shapes
    /// - input: `[groups · N, C]` → `[groups · N, C]`
    pub fn forward_grouped(&self, x: Tensor<B, 2>, groups: usize) -> Tensor<B, 2> {
        match self.fused(x, groups, false) {
            Ok(y) => y,
            Err(x) => self.composed(x, groups),
        }
    }

    /// `max(forward_grouped(x), 0)`: the batch norm a ReLU follows (a hidden layer's), in
    /// training on wgpu and CUDA one operation for the two; elsewhere
    /// [`BatchNorm1d::forward_grouped`] and burn's `relu`, with the same values and gradients.
    ///
    /// # Shapes
    /// - input: `[groups · N, C]` → `[groups · N, C]`
    pub fn forward_grouped_relu(&self, x: Tensor<B, 2>, groups: usize) -> Tensor<B, 2> {
        match self.fused(x, groups, true) {
            Ok(y) => y,
            Err(x) => burn::tensor::activation::relu(self.composed(x, groups)),
        }
    }

    /// In training, the batch norm (and the ReLU, when `relu`) as one operation where
    /// [`batch_norm_1d_train`] takes it: `Ok` with the output, else `Err` with the input.
    fn fused(
        &self,
        x: Tensor<B, 2>,
        groups: usize,
        relu: bool,
    ) -> Result<Tensor<B, 2>, Tensor<B, 2>> {
        let stats = [&self.running_mean, &self.running_var];
        let parameters = [self.gamma.val(), self.beta.val()];
        fused_normalised(
            x,
            groups,
            parameters,
            stats,
            self.momentum,
            self.epsilon,
            relu,
        )
    }

    /// [`BatchNorm1d::forward_grouped`] in burn's tensor operations.
    fn composed(&self, x: Tensor<B, 2>, groups: usize) -> Tensor<B, 2> {
        let channels = x.dims()[1];
        let stats = [&self.running_mean, &self.running_var];
        composed_normalised(x, groups, stats, self.momentum, self.epsilon)
            .mul(self.gamma.val().reshape([1, channels]))
            .add(self.beta.val().reshape([1, channels]))
    }
}

/// In training (an autodiff backend), `x` (`[groups · N, C]`) normalised with each group's
/// moments, scaled and shifted by `[γ, β]` and, when `relu`, through a ReLU, as one operation
/// where [`batch_norm_1d_train`] takes it (wgpu and CUDA), the running averages
/// (`[running_mean, running_var]`) moved towards the biased variance (burn's `BatchNorm`): `Ok`
/// with the output; else `Err` with `x`, the running averages left for the composed form.
fn fused_normalised<B: Backend>(
    x: Tensor<B, 2>,
    groups: usize,
    [gamma, beta]: [Tensor<B, 1>; 2],
    stats: [&RunningStat<Tensor<B, 1>>; 2],
    momentum: f64,
    epsilon: f64,
    relu: bool,
) -> Result<Tensor<B, 2>, Tensor<B, 2>> {
    if !B::ad_enabled(&x.device()) {
        return Err(x);
    }
    step_running_averages(stats, momentum, false, |running| match batch_norm_1d_train(
        x, gamma, beta, running, epsilon, groups, relu,
    ) {
        Ok(done) => Ok((done.running, done.output)),
        Err((x, running)) => Err((running, x)),
    })
}

/// `(x − mean) / √(var + ε)` of each of the `groups` stacked batches of `x` (`[groups · N, C]`)
/// with its own moments in training ([`grouped_normalised`]; one group: [`normalised`]), with
/// the running ones otherwise, in burn's tensor operations.
fn composed_normalised<B: Backend>(
    x: Tensor<B, 2>,
    groups: usize,
    stats: [&RunningStat<Tensor<B, 1>>; 2],
    momentum: f64,
    epsilon: f64,
) -> Tensor<B, 2> {
    if groups == 1 || !B::ad_enabled(&x.device()) {
        return normalised(x, stats, momentum, epsilon);
    }
    let [rows, channels] = x.dims();
    grouped_normalised(x, groups, stats, momentum, epsilon).reshape([rows, channels])
}

/// The per-channel mean and biased variance `[1, C]` to normalise `x` `[N, C]` with: the batch's
/// (averaged over data-parallel replicas when synchronised), which also move the running
/// averages, in training (an autodiff backend); the running ones otherwise. The arithmetic is
/// burn's `BatchNorm`'s, operation for operation.
fn moments<B: Backend>(
    x: &Tensor<B, 2>,
    running_mean: &RunningStat<Tensor<B, 1>>,
    running_var: &RunningStat<Tensor<B, 1>>,
    momentum: f64,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let device = x.device();
    let [n, channels] = x.dims();
    if !B::ad_enabled(&device) {
        return (
            running_mean
                .value()
                .to_device(&device)
                .reshape([1, channels]),
            running_var
                .value()
                .to_device(&device)
                .reshape([1, channels]),
        );
    }
    let channel_mean = |t: Tensor<B, 2>| {
        t.swap_dims(0, 1)
            .reshape([channels, n])
            .mean_dim(1)
            .reshape([1, channels])
    };
    let (mean, _) = replica_mean(channel_mean(x.clone()));
    let (var, _) = replica_mean(channel_mean(x.clone().sub(mean.clone()).square()));
    // The running average handed over by move (`RunningStat::step`: no release of its own).
    let update = |state: &RunningStat<Tensor<B, 1>>, batch: Tensor<B, 2>| {
        state.step(|running| {
            let moved = running
                .to_device(&device)
                .mul_scalar(1.0 - momentum)
                .add(batch.detach().mul_scalar(momentum).reshape([channels]))
                .detach();
            Ok((moved, ()))
        })
    };
    update(running_mean, mean.clone());
    update(running_var, var.clone());
    (mean, var)
}

/// `(x − mean) / √(var + ε)` of `x` (`[N, C]`) with the moments of [`moments`] (the running
/// averages `[running_mean, running_var]` moved by the batch's in training).
fn normalised<B: Backend>(
    x: Tensor<B, 2>,
    [running_mean, running_var]: [&RunningStat<Tensor<B, 1>>; 2],
    momentum: f64,
    epsilon: f64,
) -> Tensor<B, 2> {
    let (mean, var) = moments(&x, running_mean, running_var, momentum);
    (x - mean) / var.add_scalar(epsilon).sqrt()
}

/// `(x − mean) / √(var + ε)` of each of the `groups` stacked batches of `x` (`[groups · N, C]`)
/// with its own batch moments, as `[groups, N, C]`: in training, the running averages
/// (`[running_mean, running_var]`) moved by each group's in turn, as `groups` calls of
/// [`moments`] would (data-parallel replicas average each group's).
fn grouped_normalised<B: Backend>(
    x: Tensor<B, 2>,
    groups: usize,
    [running_mean, running_var]: [&RunningStat<Tensor<B, 1>>; 2],
    momentum: f64,
    epsilon: f64,
) -> Tensor<B, 3> {
    let device = x.device();
    let [rows, channels] = x.dims();
    let x = x.reshape([groups, rows / groups, channels]);
    let (mean, _) = replica_mean(x.clone().mean_dim(1));
    let (var, _) = replica_mean(x.clone().sub(mean.clone()).square().mean_dim(1));
    // One update per group, as one call per group makes them (each `RunningStat::step` reads
    // the state the one before left).
    let means = mean.clone().detach().iter_dim(0);
    let vars = var.clone().detach().iter_dim(0);
    for (group_mean, group_var) in means.zip(vars) {
        for (state, batch) in [(running_mean, group_mean), (running_var, group_var)] {
            state.step(|running| {
                let moved = running
                    .to_device(&device)
                    .mul_scalar(1.0 - momentum)
                    .add(batch.mul_scalar(momentum).reshape([channels]))
                    .detach();
                Ok((moved, ()))
            });
        }
    }
    (x - mean) / var.add_scalar(epsilon).sqrt()
}

/// BatchNorm without affine parameters: `(x − mean) / sqrt(var + ε)` per channel of `[N, C]`,
/// with the batch's statistics in training (autodiff backend; averaged over data-parallel
/// replicas when synchronised) and the running ones otherwise.
/// The running statistics follow burn's `BatchNorm` exactly (momentum 0.1, ε = 1e-5, biased
/// batch variance), so the only difference from it is the absence of `γ` and `β`.
#[derive(Module, Debug)]
pub struct PlainBatchNorm<B: Backend> {
    running_mean: RunningStat<Tensor<B, 1>>,
    running_var: RunningStat<Tensor<B, 1>>,
    momentum: f64,
    epsilon: f64,
}

impl<B: Backend> PlainBatchNorm<B> {
    /// `channels` features, running mean 0 and variance 1.
    pub fn new(channels: usize, device: &B::Device) -> Self {
        Self {
            running_mean: RunningStat::new(Tensor::zeros([channels], device)),
            running_var: RunningStat::new(Tensor::ones([channels], device)),
            momentum: 0.1,
            epsilon: 1e-5,
        }
    }

    /// # Shapes
    /// - input: `[N, C]` → `[N, C]`
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward_grouped(x, 1)
    }

    /// [`PlainBatchNorm::forward`] on `groups` equal batches stacked along the first axis,
    /// each normalised with its own moments ([`BatchNorm1d::forward_grouped`]; in training on
    /// wgpu and CUDA one operation, with `γ = 1` and `β = 0` as untracked constants).
    ///
    /// # Shapes
    /// - input: `[groups · N, C]` → `[groups · N, C]`
    pub fn forward_grouped(&self, x: Tensor<B, 2>, groups: usize) -> Tensor<B, 2> {
        let stats = [&self.running_mean, &self.running_var];
        let (momentum, epsilon) = (self.momentum, self.epsilon);
        let device = x.device();
        // In training only: inference builds no constants.
        let x = if B::ad_enabled(&device) {
            let channels = x.dims()[1];
            let identity = [
                Tensor::ones([channels], &device),
                Tensor::zeros([channels], &device),
            ];
            match fused_normalised(x, groups, identity, stats, momentum, epsilon, false) {
                Ok(y) => return y,
                Err(x) => x,
            }
        } else {
            x
        };
        composed_normalised(x, groups, stats, momentum, epsilon)
    }
}

/// An MLP head. Build it with [`MlpHeadConfig::init`].
#[derive(Module, Debug)]
pub struct MlpHead<B: Backend> {
    hidden: Vec<HiddenLayer<B>>,
    output: Linear<B>,
    output_norm: Option<BatchNorm1d<B>>,
    output_norm_plain: Option<PlainBatchNorm<B>>,
}

impl<B: Backend> MlpHead<B> {
    /// The head with ReLU after its hidden layers.
    ///
    /// # Shapes
    /// - input: `[N, input_dim]` → `[N, output_dim]`
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward_with(x, HeadActivation::Relu)
    }

    /// The head with `activation` after its hidden layers (MSN's projector: GELU).
    ///
    /// # Shapes
    /// - input: `[N, input_dim]` → `[N, output_dim]`
    pub fn forward_with(&self, x: Tensor<B, 2>, activation: HeadActivation) -> Tensor<B, 2> {
        self.forward_grouped_with(x, activation, 1)
    }

    /// [`MlpHead::forward`] on `groups` equal batches stacked along the first axis, as each
    /// batch on its own: one pass, each BatchNorm normalising each group with its own moments
    /// ([`BatchNorm1d::forward_grouped`]).
    ///
    /// # Shapes
    /// - input: `[groups · N, input_dim]` → `[groups · N, output_dim]`
    ///
    /// # Panics
    /// If `groups` is 0 or does not divide `groups · N`.
    pub fn forward_grouped(&self, x: Tensor<B, 2>, groups: usize) -> Tensor<B, 2> {
        self.forward_grouped_with(x, HeadActivation::Relu, groups)
    }

    /// [`MlpHead::forward_with`] on `groups` stacked batches ([`MlpHead::forward_grouped`]).
    ///
    /// # Shapes
    /// - input: `[groups · N, input_dim]` → `[groups · N, output_dim]`
    ///
    /// # Panics
    /// If `groups` is 0 or does not divide `groups · N`.
    pub fn forward_grouped_with(
        &self,
        x: Tensor<B, 2>,
        activation: HeadActivation,
        groups: usize,
    ) -> Tensor<B, 2> {
        let n = x.dims()[0];
        assert!(
            groups > 0 && n.is_multiple_of(groups),
            "a batch of {n} is not {groups} equal groups"
        );
        let mut x = x;
        for layer in &self.hidden {
            x = layer.linear.forward(x);
            x = match (&layer.norm, activation) {
                // In training on a GPU backend one operation for the two.
                (Some(norm), HeadActivation::Relu) => norm.forward_grouped_relu(x, groups),
                (Some(norm), HeadActivation::Gelu) => {
                    curriculum_ssl_models::layers::gelu(norm.forward_grouped(x, groups))
                }
                (None, HeadActivation::Relu) => burn::tensor::activation::relu(x),
                (None, HeadActivation::Gelu) => curriculum_ssl_models::layers::gelu(x),
            };
        }
        x = self.output.forward(x);
        if let Some(norm) = &self.output_norm {
            x = norm.forward_grouped(x, groups);
        }
        if let Some(norm) = &self.output_norm_plain {
            x = norm.forward_grouped(x, groups);
        }
        x
    }

    /// Output width.
    pub fn output_dim(&self) -> usize {
        self.output.weight.lazy_shape().dims::<2>()[1]
    }

    /// The widths of the hidden layers, input side first (empty for a single linear layer).
    pub fn hidden_dims(&self) -> Vec<usize> {
        self.hidden
            .iter()
            .map(|layer| layer.linear.weight.lazy_shape().dims::<2>()[1])
            .collect()
    }

    /// Whether the hidden layers have a BatchNorm.
    pub fn has_hidden_batch_norm(&self) -> bool {
        self.hidden.iter().any(|layer| layer.norm.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::module::AutodiffModule;
    use burn::nn::BatchNormConfig;

    type B = NdArray<f64>;
    type Ad = burn::backend::Autodiff<B>;

    /// The head's size is checked from its settings before any layer is made: a batch norm's
    /// running statistics are allocated when it is made (SimCLR's `hidden_dim=1000000000` took
    /// 7.5 GB before the check on the finished network), and a count of layers is checked before
    /// the loop that makes them.
    /// Its count is that of the parameters and statistics the head holds (checked against
    /// `parameter_count` of a small one).
    #[test]
    fn a_head_over_the_size_limit_is_refused_before_a_layer_is_made() {
        let device = Default::default();
        let config = MlpHeadConfig::new(8, 1_000_000, 8);
        let (made, refused) =
            crate::base::seed::with_size_limit(1000, || config.init::<B>(&device).map(drop));
        assert_eq!(made.unwrap_err().field, crate::base::seed::SIZE_FIELD);
        assert!(refused.unwrap() >= 16_000_000);
        // 2²⁰ layers of 8 (about 100 values each), counted before the first is made.
        let deep = MlpHeadConfig::new(8, 8, 8).with_num_layers(1 << 20);
        let (made, _) =
            crate::base::seed::with_size_limit(1 << 20, || deep.init::<B>(&device).map(drop));
        assert_eq!(made.unwrap_err().field, crate::base::seed::SIZE_FIELD);
        // The settings' count is the made head's, parameters and running statistics.
        for config in [
            MlpHeadConfig::new(6, 10, 4),
            MlpHeadConfig::new(6, 10, 4).with_num_layers(3),
            MlpHeadConfig::new(6, 10, 4).with_batch_norm(false),
            MlpHeadConfig::new(6, 10, 4).with_output_batch_norm(true),
        ] {
            let head = config.init::<B>(&device).unwrap();
            let made = crate::base::seed::parameter_count(&head);
            let (at, refused) =
                crate::base::seed::with_size_limit(made, || config.init::<B>(&device).map(drop));
            assert!(at.is_ok() && refused.is_none(), "{config:?}: {made} values");
        }
    }

    /// `output_bias` takes the output layer's bias away (lightly's MMCR head); a BatchNorm
    /// after the output layer takes it away whatever it says.
    #[test]
    fn the_output_bias_is_optional() {
        let device = Default::default();
        for (bias, norm, expected) in [
            (true, false, true),
            (false, false, false),
            (true, true, false),
        ] {
            let head = crate::base::seed::init_module::<Ad, _>(&device, 1, |d| {
                MlpHeadConfig::new(3, 6, 4)
                    .with_output_bias(bias)
                    .with_output_batch_norm(norm)
                    .init::<Ad>(d)
                    .unwrap()
            });
            assert_eq!(head.output.bias.is_some(), expected, "{bias} {norm}");
        }
    }

    /// A grouped pass (two stacked batches of 5 rows, of different means and scales) equals
    /// one pass per group, in f64: the outputs, the gradient of the input, and the running
    /// statistics of every BatchNorm (hidden, affine output, plain output) after both groups.
    /// Sums of at most 10 terms in another order: 1e-12 relative.
    #[test]
    fn a_grouped_pass_equals_one_pass_per_group() {
        let device = Default::default();
        for affine in [true, false] {
            let config = MlpHeadConfig::new(3, 6, 4)
                .with_output_batch_norm(true)
                .with_output_batch_norm_affine(affine);
            let head = crate::base::seed::init_module::<Ad, _>(&device, 1, |d| {
                config.init::<Ad>(d).unwrap()
            });
            let other = config
                .init::<Ad>(&device)
                .unwrap()
                .load_record(head.clone().into_record());
            let values: Vec<f64> = (0..30)
                .map(|i| ((i * 7 % 11) as f64 - 5.0) * if i < 15 { 1.0 } else { 3.0 } + 0.1)
                .collect();
            let x = || {
                Tensor::<Ad, 1>::from_data(TensorData::new(values.clone(), [30]), &device)
                    .reshape([10, 3])
                    .require_grad()
            };
            let (xa, xb) = (x(), x());
            let grouped = head.forward_grouped(xa.clone(), 2);
            let halves = Tensor::cat(
                xb.clone()
                    .chunk(2, 0)
                    .into_iter()
                    .map(|g| other.forward(g))
                    .collect(),
                0,
            );
            let weights = Tensor::<Ad, 1>::from_data(
                TensorData::new(
                    (0..40).map(|i| (i as f64 * 0.3).sin()).collect::<Vec<_>>(),
                    [40],
                ),
                &device,
            )
            .reshape([10, 4]);
            let ga = (grouped.clone() * weights.clone()).sum().backward();
            let gb = (halves.clone() * weights).sum().backward();
            let host = |t: Tensor<B, 2>| -> Vec<f64> { t.into_data().to_vec().unwrap() };
            let running = |h: &MlpHead<Ad>| -> Vec<f64> {
                let mut v = Vec::new();
                let mut push = |s: &RunningStat<Tensor<Ad, 1>>| {
                    v.extend(s.value_sync().into_data().to_vec::<f64>().unwrap())
                };
                for layer in &h.hidden {
                    let norm = layer.norm.as_ref().unwrap();
                    push(&norm.running_mean);
                    push(&norm.running_var);
                }
                if let Some(n) = &h.output_norm {
                    push(&n.running_mean);
                    push(&n.running_var);
                }
                if let Some(n) = &h.output_norm_plain {
                    push(&n.running_mean);
                    push(&n.running_var);
                }
                v
            };
            let pairs = [
                ("output", host(grouped.inner()), host(halves.inner())),
                (
                    "∂x",
                    host(xa.grad(&ga).unwrap()),
                    host(xb.grad(&gb).unwrap()),
                ),
                ("running statistics", running(&head), running(&other)),
            ];
            for (name, a, b) in pairs {
                assert_eq!(a.len(), b.len(), "{name}");
                for (p, q) in a.iter().zip(&b) {
                    assert!(
                        (p - q).abs() <= 1e-12 * p.abs().max(q.abs()).max(1.0),
                        "affine {affine}, {name}: {p} against {q}"
                    );
                }
            }
        }
    }

    fn parameters(config: &MlpHeadConfig) -> usize {
        // Under the seed lock: `num_params` reads the lazily initialised parameters.
        crate::base::seed::init_module::<B, _>(&Default::default(), 0, |d| {
            config.init::<B>(d).unwrap()
        })
        .num_params()
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
        // SimSiam 512 → 2048 → 2048 → 2048 with BN everywhere (no biases); the output BN has
        // no γ, β (affine=False), only its running mean and variance: 2 values per channel.
        assert_eq!(
            parameters(&MlpHeadConfig::simsiam_projector(512, 2048)),
            512 * 2048 + 4 * 2048 + 2048 * 2048 + 4 * 2048 + 2048 * 2048 + 2 * 2048
        );
        // Light-MoCo 512 → 2048 → 128, no BN (Lin et al.'s projector): both linears have biases.
        assert_eq!(
            parameters(&MlpHeadConfig::light_moco(512)),
            512 * 2048 + 2048 + 2048 * 128 + 128
        );
    }

    /// The number of tensors that receive a gradient (what an optimiser trains).
    fn trainable_tensors(config: MlpHeadConfig) -> usize {
        type Ad = burn::backend::Autodiff<B>;
        let device = Default::default();
        let head =
            crate::base::seed::init_module::<Ad, _>(&device, 0, |d| config.init::<Ad>(d).unwrap());
        let n = 4 * config.input_dim;
        let data: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
        let x = Tensor::<Ad, 2>::from_data(TensorData::new(data, [4, config.input_dim]), &device);
        let out = head.forward(x);
        let m = 4 * config.output_dim;
        let weights: Vec<f64> = (0..m).map(|i| (i as f64 * 0.91).cos()).collect();
        let weights =
            Tensor::<Ad, 2>::from_data(TensorData::new(weights, [4, config.output_dim]), &device);
        let grads = (out * weights).sum().backward();
        burn::optim::GradientsParams::from_grads(grads, &head).len()
    }

    #[test]
    fn simsiam_output_batch_norm_has_no_gamma_or_beta() {
        // Two hidden blocks (weight, γ, β) and the output weight: 7 trained tensors; SimSiam's
        // last BN adds none.
        assert_eq!(trainable_tensors(MlpHeadConfig::simsiam_projector(6, 5)), 7);
        // The affine variant has γ and β at the output too (burn's BatchNorm).
        assert_eq!(
            trainable_tensors(
                MlpHeadConfig::simsiam_projector(6, 5).with_output_batch_norm_affine(true)
            ),
            9
        );
    }

    #[test]
    fn plain_batch_norm_equals_burn_batch_norm_at_gamma_one_beta_zero() {
        type Ad = burn::backend::Autodiff<B>;
        let device = Default::default();
        let x = Tensor::<Ad, 2>::from_data(
            [
                [1.0, -2.0, 0.5],
                [3.0, 0.0, 0.25],
                [-1.0, 4.0, 2.0],
                [0.5, 1.0, -3.0],
            ],
            &device,
        );
        let plain = PlainBatchNorm::<Ad>::new(3, &device);
        let burn_bn = BatchNormConfig::new(3).init::<Ad>(&device);
        let close = |a: Tensor<Ad, 2>, b: Tensor<Ad, 2>| {
            let a: Vec<f64> = a.into_data().to_vec().unwrap();
            let b: Vec<f64> = b.into_data().to_vec().unwrap();
            a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-12)
        };
        // Training: batch statistics; and the same running statistics afterwards.
        assert!(close(plain.forward(x.clone()), burn_bn.forward(x.clone())));
        let out: Vec<f64> = plain.forward(x.clone()).into_data().to_vec().unwrap();
        for c in 0..3 {
            let col: Vec<f64> = (0..4).map(|r| out[r * 3 + c]).collect();
            let mean = col.iter().sum::<f64>() / 4.0;
            let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 4.0;
            assert!(
                mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-4,
                "{mean} {var}"
            );
        }
        burn_bn.forward(x.clone());
        // Inference: the running statistics.
        let (plain, burn_bn) = (plain.valid(), burn_bn.valid());
        let x = x.inner();
        let a: Vec<f64> = plain.forward(x.clone()).into_data().to_vec().unwrap();
        let b: Vec<f64> = burn_bn.forward(x).into_data().to_vec().unwrap();
        assert!(
            a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-12),
            "{a:?} {b:?}"
        );
    }

    #[test]
    fn batch_norm_1d_is_burns_batch_norm_bit_for_bit_and_loads_its_record() {
        let device = Default::default();
        let x = Tensor::<Ad, 2>::from_floats(
            [
                [1.0, -2.0],
                [3.0, 0.0],
                [-1.0, 4.0],
                [0.5, 1.0],
                [2.0, -0.5],
            ],
            &device,
        );
        let burn_bn = BatchNormConfig::new(2).init::<Ad>(&device);
        // Same parameter names: burn's record loads into ours, γ and β set off their defaults.
        let burn_bn = burn_bn.map(&mut Scale);
        let record = burn_bn.clone().into_record();
        let ours = BatchNorm1d::<Ad>::new(2, &device).load_record(BatchNorm1dRecord {
            gamma: record.gamma,
            beta: record.beta,
            running_mean: record.running_mean,
            running_var: record.running_var,
            momentum: record.momentum,
            epsilon: record.epsilon,
        });
        let host = |t: Tensor<Ad, 2>| t.into_data().to_vec::<f64>().unwrap();
        // Training (twice: the running statistics move the same way), then inference.
        for _ in 0..2 {
            assert_eq!(
                host(ours.forward(x.clone())),
                host(burn_bn.forward(x.clone()))
            );
        }
        let (ours, burn_bn) = (ours.valid(), burn_bn.valid());
        let a: Vec<f64> = ours
            .forward(x.clone().inner())
            .into_data()
            .to_vec()
            .unwrap();
        let b: Vec<f64> = burn_bn.forward(x.inner()).into_data().to_vec().unwrap();
        assert_eq!(a, b);
    }

    /// Multiplies every float parameter by 1.5 and adds 0.25, so that γ and β matter.
    struct Scale;

    impl burn::module::ModuleMapper<Ad> for Scale {
        fn map_float<const D: usize>(
            &mut self,
            param: burn::module::Param<Tensor<Ad, D>>,
        ) -> burn::module::Param<Tensor<Ad, D>> {
            // On the inner tensor, so that the parameter stays a leaf (a record of a
            // computed tensor cannot be loaded as a parameter).
            param.map(|t| {
                Tensor::from_inner(t.inner().mul_scalar(1.5).add_scalar(0.25)).require_grad()
            })
        }
    }

    #[test]
    fn shapes_and_bad_widths() {
        let device = Default::default();
        let head = crate::base::seed::init_module::<B, _>(&device, 0, |d| {
            MlpHeadConfig::simclr(8, 16, 4).init::<B>(d).unwrap()
        });
        let out = head.forward(Tensor::zeros([3, 8], &device));
        assert_eq!(out.dims(), [3, 4]);
        assert_eq!(head.output_dim(), 4);
        assert_eq!(head.hidden_dims(), vec![16]);
        assert!(head.has_hidden_batch_norm());
        let err = MlpHeadConfig::new(8, 0, 4).init::<B>(&device).unwrap_err();
        assert_eq!(err.field, "hidden_dim");
    }

    /// The GELU head's input gradient against central differences in f64: the exact GELU's
    /// derivative on every backend. (burn 0.21's `activation::gelu` on `NdArray` pairs the exact
    /// forward with the tanh approximation's derivative, 2.7e-5 off here: this failed with it.)
    #[test]
    fn gelu_head_gradient_matches_finite_differences() {
        let device = Default::default();
        let head = crate::base::seed::init_module::<Ad, _>(&device, 0, |d| {
            MlpHeadConfig::moco_v2(5, 7, 3).init::<Ad>(d).unwrap()
        });
        let x: Vec<f64> = (0..10).map(|i| (i as f64 * 0.73).sin() * 2.0).collect();
        let w: Vec<f64> = (0..6).map(|i| (i as f64 * 0.41).cos()).collect();
        let tensor = |v: &[f64], shape: [usize; 2]| {
            Tensor::<Ad, 2>::from_data(TensorData::new(v.to_vec(), shape), &device)
        };
        let loss = |x: Tensor<Ad, 2>| {
            (head.forward_with(x, HeadActivation::Gelu) * tensor(&w, [2, 3])).sum()
        };
        let input = tensor(&x, [2, 5]).require_grad();
        let grads = loss(input.clone()).backward();
        let analytic: Vec<f64> = input.grad(&grads).unwrap().into_data().to_vec().unwrap();
        let h = 1e-5;
        for i in 0..x.len() {
            let at = |d: f64| {
                let mut y = x.clone();
                y[i] += d;
                loss(tensor(&y, [2, 5])).into_scalar()
            };
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            // Central differences in f64: truncation about h² = 1e-10 times the third
            // derivative, rounding about 1e-16 / h = 1e-11.
            assert!(
                (analytic[i] - numeric).abs() < 1e-8,
                "input {i}: autodiff {} against finite differences {numeric}",
                analytic[i]
            );
        }
    }
}
