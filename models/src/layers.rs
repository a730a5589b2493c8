//! Building blocks shared by the backbones: a PyTorch-exact batch norm, a layer norm with a
//! backward pass of its own on the CPU, activations, squeeze-excitation, conv–norm–activation
//! units and stochastic depth.

use burn::module::{Initializer, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::activation;
use burn::tensor::Distribution;

use crate::error::ModelError;
use crate::kernels::RunningAverages;
use crate::replica_stats::replica_mean;
use crate::running_stat::RunningStat;

/// Configuration of [`BatchNorm2d`].
#[derive(Config, Debug)]
pub struct BatchNorm2dConfig {
    /// Number of channels.
    pub num_features: usize,
    /// Added to the variance before the square root. PyTorch's default: 1e-5.
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// Weight of the new batch statistics in the running averages. PyTorch's default: 0.1.
    #[config(default = 0.1)]
    pub momentum: f64,
}

impl BatchNorm2dConfig {
    /// Builds the layer: weight 1, bias 0, running mean 0, running variance 1 (as PyTorch).
    pub fn init<B: Backend>(&self, device: &B::Device) -> BatchNorm2d<B> {
        BatchNorm2d {
            weight: Initializer::Ones.init([self.num_features], device),
            bias: Initializer::Zeros.init([self.num_features], device),
            running_mean: RunningStat::new(Tensor::zeros([self.num_features], device)),
            running_var: RunningStat::new(Tensor::ones([self.num_features], device)),
            momentum: self.momentum,
            epsilon: self.epsilon,
        }
    }
}

/// Configuration of [`LayerNorm`]: burn's `LayerNormConfig` with a bias always.
#[derive(Config, Debug)]
pub struct LayerNormConfig {
    /// Size of the normalised (last) axis.
    pub d_model: usize,
    /// Added to the variance before the square root. PyTorch's and burn's default: 1e-5.
    #[config(default = 1e-5)]
    pub epsilon: f64,
}

impl LayerNormConfig {
    /// Builds the layer: `γ` 1, `β` 0.
    pub fn init<B: Backend>(&self, device: &B::Device) -> LayerNorm<B> {
        LayerNorm {
            gamma: Initializer::Ones.init([self.d_model], device),
            beta: Some(Initializer::Zeros.init([self.d_model], device)),
            epsilon: self.epsilon,
        }
    }
}

/// Layer normalisation over the last axis, `γ·(x − μ)/√(σ² + ε) + β` (biased `σ²`): burn's
/// `LayerNorm` — the same fields, so the same records and checkpoints — whose forward goes
/// through [`kernels::layer_norm`](crate::kernels::layer_norm()): under autodiff on the CPU one
/// fused pass each way rather than burn's composed form.
#[derive(Module, Debug)]
pub struct LayerNorm<B: Backend> {
    /// Scale (γ), `[d_model]`.
    pub gamma: Param<Tensor<B, 1>>,
    /// Shift (β), `[d_model]`; always present when built by [`LayerNormConfig::init`].
    pub beta: Option<Param<Tensor<B, 1>>>,
    /// Numerical-stability constant.
    pub epsilon: f64,
}

impl<B: Backend> LayerNorm<B> {
    /// # Shapes
    /// - `x`: `[..., d_model]` → the same
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let gamma = self.gamma.val();
        let beta = match &self.beta {
            Some(beta) => beta.val(),
            None => gamma.zeros_like(),
        };
        crate::kernels::layer_norm(x, gamma, beta, self.epsilon)
    }

    /// The residual add this norm follows, and the norm: `(x + branch, norm(x + branch))`
    /// through [`kernels::add_layer_norm`](crate::kernels::add_layer_norm) (on the CPU one
    /// pass writes both).
    ///
    /// # Shapes
    /// - `x`, `branch`: `[..., d_model]` → both outputs the same
    pub fn forward_after_add<const D: usize>(
        &self,
        x: Tensor<B, D>,
        branch: Tensor<B, D>,
    ) -> (Tensor<B, D>, Tensor<B, D>) {
        let gamma = self.gamma.val();
        let beta = match &self.beta {
            Some(beta) => beta.val(),
            None => gamma.zeros_like(),
        };
        crate::kernels::add_layer_norm(x, branch, gamma, beta, self.epsilon)
    }
}

/// Batch normalisation over `[batch, channels, height, width]` with PyTorch's exact semantics.
///
/// In training (an autodiff backend) it normalises with the batch mean and the *biased* batch
/// variance and updates the running averages with the *unbiased* variance (`n / (n − 1)`), as
/// `torch.nn.BatchNorm2d` does; burn's own `BatchNorm` uses the biased variance for the running
/// update. In inference (a non-autodiff backend, e.g. after `valid()`) it uses the running
/// statistics. Parameter names (`weight`, `bias`, `running_mean`, `running_var`) are PyTorch's,
/// so state_dicts load without renaming.
///
/// Under a data-parallel trainer, the batch moments are averaged over the replicas
/// ([`crate::replica_stats`]): synchronised batch norm.
///
/// Note: like burn's `RunningState` ([`RunningStat`]), a `clone()` of this module shares its
/// running statistics with the original (loading a record into either, or mapping it, writes
/// into both); build EMA targets from a record instead (a fresh module loaded with it).
#[derive(Module, Debug)]
pub struct BatchNorm2d<B: Backend> {
    /// Scale (γ).
    pub weight: Param<Tensor<B, 1>>,
    /// Shift (β).
    pub bias: Param<Tensor<B, 1>>,
    /// Running mean, used in inference.
    pub running_mean: RunningStat<Tensor<B, 1>>,
    /// Running (unbiased) variance, used in inference.
    pub running_var: RunningStat<Tensor<B, 1>>,
    /// Momentum of the running averages.
    pub momentum: f64,
    /// Numerical-stability constant.
    pub epsilon: f64,
}

impl<B: Backend> BatchNorm2d<B> {
    /// Normalises the input.
    ///
    /// # Shapes
    /// - input: `[batch, channels, height, width]`
    /// - output: same as the input
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let [n, c, h, w] = x.dims();
        let [features] = self.weight.dims();
        assert_eq!(
            c,
            features,
            "BatchNorm2d built for {features} channels got an input of shape {:?}",
            [n, c, h, w]
        );
        if B::ad_enabled(&x.device()) {
            self.forward_train(x, 1)
        } else {
            let device = x.device();
            let mean = self
                .running_mean
                .value()
                .to_device(&device)
                .reshape([1, c, 1]);
            let var = self.running_var.value().reshape([1, c, 1]);
            let centered = x.reshape([n, c, h * w]).sub(per_image(mean, n));
            self.scale_and_shift(centered, var).reshape([n, c, h, w])
        }
    }

    /// Normalises `groups` equal batches stacked along the first axis (e.g. a method's two
    /// views passed through the network as one batch), each with its own batch moments in
    /// training, the running averages moved by each group in turn: the numbers of
    /// [`BatchNorm2d::forward`] on each group, concatenated. On wgpu and CUDA it is one
    /// operation for all the groups (`kernels::batch_norm_train`); elsewhere one call per group.
    /// In inference (the running statistics) the groups make no difference.
    ///
    /// # Shapes
    /// - input: `[groups · batch, channels, height, width]`
    /// - output: same as the input
    ///
    /// # Panics
    /// If `groups` is 0 or does not divide the batch.
    pub fn forward_grouped(&self, x: Tensor<B, 4>, groups: usize) -> Tensor<B, 4> {
        let n = x.dims()[0];
        assert!(
            groups > 0 && n.is_multiple_of(groups),
            "BatchNorm2d: a batch of {n} is not {groups} equal groups"
        );
        if groups == 1 || !B::ad_enabled(&x.device()) {
            return self.forward(x);
        }
        self.forward_train(x, groups)
    }

    /// `max(forward_grouped(x) + residual, 0)` (no residual: the ReLU alone): a batch norm a ReLU
    /// follows, and a ResNet block's last one with its shortcut. In training on wgpu and CUDA
    /// one operation for the three (`kernels::batch_norm_relu_train`: the residual and the ReLU
    /// ride in the batch norm's last pass forward and in its passes backward); elsewhere, and
    /// in inference, [`BatchNorm2d::forward_grouped`], `add` and `kernels::relu`, with the
    /// same values and gradients.
    ///
    /// # Shapes
    /// - input, `residual`: `[groups · batch, channels, height, width]`
    /// - output: same as the input
    ///
    /// # Panics
    /// As [`BatchNorm2d::forward_grouped`], and if the residual's shape is not the input's.
    pub fn forward_grouped_relu(
        &self,
        x: Tensor<B, 4>,
        groups: usize,
        residual: Option<Tensor<B, 4>>,
    ) -> Tensor<B, 4> {
        let [n, c, _, _] = x.dims();
        let [features] = self.weight.dims();
        assert!(
            groups > 0 && n.is_multiple_of(groups),
            "BatchNorm2d: a batch of {n} is not {groups} equal groups"
        );
        assert_eq!(
            c,
            features,
            "BatchNorm2d built for {features} channels got an input of shape {:?}",
            x.dims()
        );
        if let Some(r) = &residual {
            assert_eq!(
                r.dims(),
                x.dims(),
                "BatchNorm2d: the residual's shape is not the input's"
            );
        }
        let (x, residual) = if B::ad_enabled(&x.device()) {
            let fused = self.step_running_averages(|running| {
                match crate::kernels::batch_norm_relu_train(
                    x,
                    self.weight.val(),
                    self.bias.val(),
                    running,
                    self.epsilon,
                    groups,
                    residual,
                ) {
                    Ok(fused) => Ok((fused.running, fused.output)),
                    Err((x, residual, running)) => Err((running, (x, residual))),
                }
            });
            match fused {
                Ok(output) => return output,
                Err(unfused) => unfused,
            }
        } else {
            (x, residual)
        };
        let y = self.forward_grouped(x, groups);
        crate::kernels::relu(match residual {
            Some(residual) => y.add(residual),
            None => y,
        })
    }

    /// Training: normalises each of the `groups` stacked batches with its moments and updates
    /// the running averages. Under autodiff on the CPU backend (one group), wgpu and CUDA one
    /// operation with its own backward step computes it (`kernels::batch_norm_train`: the CPU's
    /// slice kernels, the GPU backends' fused tensor operations); elsewhere, and under
    /// synchronised batch norm, the composed form below. Groups the operation does not take
    /// (the CPU's kernels, the composed form) go one call per group.
    fn forward_train(&self, x: Tensor<B, 4>, groups: usize) -> Tensor<B, 4> {
        let [n, c, h, w] = x.dims();
        let count = n / groups * h * w;
        assert!(
            count > 1,
            "BatchNorm2d in training needs more than one value per channel, got input {:?}",
            [n / groups, c, h, w]
        );
        let fused = self.step_running_averages(|running| {
            match crate::kernels::batch_norm_train(
                x,
                self.weight.val(),
                self.bias.val(),
                running,
                self.epsilon,
                groups,
            ) {
                Ok(fused) => Ok((fused.running, fused.output)),
                Err((x, running)) => Err((running, x)),
            }
        });
        let x = match fused {
            Ok(output) => return output,
            Err(x) => x,
        };
        if groups == 1 {
            return self.forward_train_composed(x);
        }
        Tensor::cat(
            x.chunk(groups, 0)
                .into_iter()
                .map(|group| self.forward_train(group, 1))
                .collect(),
            0,
        )
    }

    /// The batch statistics, without copying the activation into a channel-major layout: each
    /// image's channel is a contiguous run of `h·w` values, so the sums run over that last
    /// dimension first (a contiguous reduction), then over the `n·c` partial means of the batch.
    fn forward_train_composed(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let [n, c, h, w] = x.dims();
        let x = x.reshape([n, c, h * w]);
        // Over data-parallel replicas (sync-BN), the moments are those of every replica's shard.
        let (mean, _) = replica_mean(x.clone().mean_dim(2).mean_dim(0)); // [1, c, 1]
        let centered = x.sub(per_image(mean.clone(), n));
        // Biased, [1, c, 1].
        let (var, replicas) = replica_mean(centered.clone().square().mean_dim(2).mean_dim(0));
        let moved: Result<(), std::convert::Infallible> = self.step_running_averages(|running| {
            let moved = crate::kernels::batch_norm_op::update_running_averages(
                running,
                mean.detach().reshape([1, c]),
                var.clone().detach().reshape([1, c]),
                n * h * w * replicas,
            );
            Ok((moved, ()))
        });
        let Ok(()) = moved;
        self.scale_and_shift(centered, var).reshape([n, c, h, w])
    }

    /// A training step's operation `op` given the running averages by move (with the layer's
    /// momentum, the variance unbiased: [`step_running_averages`]).
    fn step_running_averages<T, E>(
        &self,
        op: impl FnOnce(RunningAverages<B>) -> Result<(RunningAverages<B>, T), (RunningAverages<B>, E)>,
    ) -> Result<T, E> {
        let stats = [&self.running_mean, &self.running_var];
        step_running_averages(stats, self.momentum, true, op)
    }

    /// `centered · γ/√(var + ε) + β` for `centered` of shape `[n, c, h·w]` and `var` of shape
    /// `[1, c, 1]`: one per-channel multiply and one per-channel add over the activation.
    fn scale_and_shift(&self, centered: Tensor<B, 3>, var: Tensor<B, 3>) -> Tensor<B, 3> {
        let [n, c, _] = centered.dims();
        let device = centered.device();
        let inv_std = var
            .to_device(&device)
            .add_scalar(self.epsilon)
            .sqrt()
            .recip();
        let scale = self.weight.val().reshape([1, c, 1]).mul(inv_std);
        let shift = self.bias.val().reshape([1, c, 1]);
        centered.mul(per_image(scale, n)).add(per_image(shift, n))
    }
}

/// A training step's batch-norm operation `op` given a layer's running mean and variance
/// (`[running_mean, running_var]`) by move, as [`RunningAverages`] with `momentum` and
/// `unbiased` ([`RunningStat::step`] on each: the operation frees them on a fusion backend, no
/// release of their own): `Ok((moved, output))` keeps the moved averages and gives
/// `Ok(output)`; `Err((running, rest))`, the averages handed back as they were, leaves them and
/// gives `Err(rest)` (the caller's composed form then moves them).
pub fn step_running_averages<B: Backend, T, E>(
    [running_mean, running_var]: [&RunningStat<Tensor<B, 1>>; 2],
    momentum: f64,
    unbiased: bool,
    op: impl FnOnce(RunningAverages<B>) -> Result<(RunningAverages<B>, T), (RunningAverages<B>, E)>,
) -> Result<T, E> {
    running_mean.step(|mean| {
        // The variance's step gives back the mean, moved (`Ok`) or as it was (`Err`).
        let stepped = running_var.step(|var| {
            let running = RunningAverages {
                mean,
                var,
                momentum,
                unbiased,
            };
            match op(running) {
                Ok((moved, out)) => Ok((moved.var, Ok((moved.mean, out)))),
                Err((given, rest)) => Err((given.var, Err((given.mean, rest)))),
            }
        });
        match stepped {
            Ok((mean, out)) => Ok((mean, Ok(out))),
            Err((mean, rest)) => Err((mean, Err(rest))),
        }
    })
}

/// A per-channel value `[1, c, 1]` repeated for each of `n` images, `[n, c, 1]`.
///
/// Why: burn's CPU backend (`Flex`) broadcasts a contiguous `[n, c, 1]` operand over
/// `[n, c, h·w]` with a vectorised one-scalar-per-row loop, but walks a `[1, c, 1]` operand
/// (broadcast over two dimensions) element by element through its generic strided iterator,
/// an order of magnitude slower. The repeat costs `n·c` values; its gradient is a sum over the
/// batch.
fn per_image<B: Backend>(v: Tensor<B, 3>, n: usize) -> Tensor<B, 3> {
    if n == 1 {
        v
    } else {
        v.repeat_dim(0, n)
    }
}

/// Non-linearities used by the backbones (no parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// `x · sigmoid(x)` (swish).
    Silu,
    /// `x · relu6(x + 3) / 6`.
    HardSwish,
    /// `relu6(x + 3) / 6`.
    HardSigmoid,
    /// `1 / (1 + e^{−x})`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// The identity.
    Identity,
}

impl Activation {
    /// Applies the activation elementwise.
    pub fn apply<B: Backend, const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Activation::Relu => activation::relu(x),
            Activation::Silu => crate::kernels::silu(x),
            Activation::HardSwish => hard_swish(x),
            Activation::HardSigmoid => hard_sigmoid(x),
            Activation::Sigmoid => activation::sigmoid(x),
            Activation::Tanh => activation::tanh(x),
            Activation::Identity => x,
        }
    }
}

/// The exact GELU, `x·Φ(x) = x·(1 + erf(x/√2))/2` (PyTorch's default, timm's): on burn's CPU
/// backend one fused pass each way ([`crate::kernels::gelu`](mod@crate::kernels::gelu)), elsewhere
/// [`crate::kernels::gelu_composed`].
pub fn gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    crate::kernels::gelu(x)
}

/// `linear` applied to the last dimension of tokens `[N, T, D_in]`, computed as one 2-D product
/// of `[N·T, D_in]`: the same values and gradients as `linear.forward(x)`, but burn 0.21's
/// weight gradient of a linear layer on a 3-D input is a batched product `[N, D_in, D_out]`
/// summed over `N` afterwards — for a ViT's MLP at batch 128 a 75 MB tensor written and read
/// per layer (half of an MAE step's memory traffic on the CPU) — where on 2-D rows it is one
/// `[D_in, D_out]` product.
///
/// # Shapes
/// - `x`: `[N, T, D_in]` → `[N, T, D_out]`
pub fn linear_tokens<B: Backend>(linear: &burn::nn::Linear<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    crate::kernels::linear(
        x,
        linear.weight.val(),
        linear.bias.as_ref().map(|b| b.val()),
    )
}

/// PyTorch's `Hardsigmoid`: `clamp(x / 6 + 1/2, 0, 1)`.
pub fn hard_sigmoid<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    x.mul_scalar(1.0 / 6.0).add_scalar(0.5).clamp(0.0, 1.0)
}

/// PyTorch's `Hardswish`: `x · hard_sigmoid(x)`.
pub fn hard_swish<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    x.clone().mul(hard_sigmoid(x))
}

/// The weight initialisation torchvision uses for convolutions: Kaiming normal, fan-out, ReLU gain.
pub fn conv_init() -> Initializer {
    Initializer::KaimingNormal {
        gain: core::f64::consts::SQRT_2,
        fan_out_only: true,
    }
}

/// A linear layer `from → to` whose weight `initializer` draws and whose bias starts at zero.
///
/// This is the convention of timm's ViT, of the MAE, I-JEPA and DINO authors' code and of
/// lightly's heads wherever they choose an initialiser (`trunc_normal_` or `xavier_uniform_` on
/// the weight, then `constant_(bias, 0)`). burn's `LinearConfig::with_initializer` draws the bias
/// with the weight's initialiser instead (`N(0, 0.02²)` or Xavier-uniform biases), so layers
/// that follow those codes are built here. Without a chosen initialiser, keep `LinearConfig`'s
/// default: it is PyTorch's `nn.Linear` default, bias included.
pub fn linear_zero_bias<B: Backend>(
    from: usize,
    to: usize,
    initializer: Initializer,
    device: &B::Device,
) -> Linear<B> {
    let mut linear = LinearConfig::new(from, to)
        .with_initializer(initializer)
        .init(device);
    // Lazily initialised as burn's own parameters are: nothing is drawn before first use, so a
    // module built to load a record into draws nothing, and a seeded build draws in order.
    linear.bias = Some(Initializer::Zeros.init([to], device));
    linear
}

/// [`conv_init`] for a convolution of `groups` groups, with PyTorch's fan-out (`out · k²`, where
/// burn's is `out / groups · k²`).
fn grouped_conv_init(groups: usize) -> Initializer {
    Initializer::KaimingNormal {
        gain: core::f64::consts::SQRT_2 / (groups as f64).sqrt(),
        fan_out_only: true,
    }
}

/// A 2-D convolution with torchvision's conventions: symmetric padding, weights Kaiming-normal
/// fan-out, the bias (if any) zero (torchvision's init loops `zeros_` it; burn's
/// `Conv2dConfig::with_initializer` would draw it with the weight's initialiser).
///
/// PyTorch's fan-out is `out_channels · k²` whatever the groups; burn's divides it by `groups`,
/// which would draw a depthwise convolution's weights `√groups` times too large (34× for
/// EfficientNet's 1,152-channel 5 × 5 depthwise layer): the gain is divided by `√groups`.
#[allow(clippy::too_many_arguments)]
pub fn conv2d<B: Backend>(
    in_channels: usize,
    out_channels: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    groups: usize,
    bias: bool,
    device: &B::Device,
) -> Conv2d<B> {
    let mut conv = Conv2dConfig::new([in_channels, out_channels], [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(
            padding, padding, padding, padding,
        ))
        .with_groups(groups)
        .with_bias(bias)
        .with_initializer(grouped_conv_init(groups))
        .init(device);
    if bias {
        conv.bias = Some(Initializer::Zeros.init([out_channels], device));
    }
    conv
}

/// Convolution → batch norm → activation, torchvision's `Conv2dNormActivation`
/// (its state_dict names are `N.0.*` for the convolution and `N.1.*` for the norm; ours are
/// `conv.*` and `bn.*`).
#[derive(Module, Debug)]
pub struct ConvBnAct<B: Backend> {
    /// Convolution without bias, padding `(kernel − 1) / 2`.
    pub conv: Conv2d<B>,
    /// Batch norm.
    pub bn: BatchNorm2d<B>,
    /// Activation applied after the norm.
    #[module(skip)]
    pub act: Activation,
}

/// Arguments of [`ConvBnAct::new`].
#[derive(Debug, Clone, Copy)]
pub struct ConvBnActSpec {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Square kernel side.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
    /// Convolution groups (`in_channels` for a depthwise convolution).
    pub groups: usize,
    /// Activation after the norm.
    pub act: Activation,
    /// Batch-norm epsilon.
    pub bn_eps: f64,
    /// Batch-norm momentum.
    pub bn_momentum: f64,
}

impl<B: Backend> ConvBnAct<B> {
    /// Builds the unit.
    pub fn new(spec: ConvBnActSpec, device: &B::Device) -> Self {
        Self {
            conv: conv2d(
                spec.in_channels,
                spec.out_channels,
                spec.kernel,
                spec.stride,
                (spec.kernel - 1) / 2,
                spec.groups,
                false,
                device,
            ),
            bn: BatchNorm2dConfig::new(spec.out_channels)
                .with_epsilon(spec.bn_eps)
                .with_momentum(spec.bn_momentum)
                .init(device),
            act: spec.act,
        }
    }

    /// # Shapes
    /// - input: `[batch, in_channels, h, w]`
    /// - output: `[batch, out_channels, h / stride, w / stride]` (rounded up)
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.forward_grouped(x, 1)
    }

    /// [`ConvBnAct::forward`] on `groups` equal batches stacked along the first axis, each
    /// batch-normalised with its own moments ([`BatchNorm2d::forward_grouped`]).
    ///
    /// # Shapes
    /// - input: `[groups · batch, in_channels, h, w]`
    /// - output: `[groups · batch, out_channels, h / stride, w / stride]` (rounded up)
    pub fn forward_grouped(&self, x: Tensor<B, 4>, groups: usize) -> Tensor<B, 4> {
        let y = crate::kernels::conv2d(&self.conv, x);
        self.act.apply(self.bn.forward_grouped(y, groups))
    }
}

/// Squeeze-and-excitation: global average pool → 1×1 conv → activation → 1×1 conv → gate,
/// torchvision's `SqueezeExcitation` (field names `fc1`, `fc2` are torchvision's).
#[derive(Module, Debug)]
pub struct SqueezeExcitation<B: Backend> {
    /// Reduction convolution (with bias).
    pub fc1: Conv2d<B>,
    /// Expansion convolution (with bias).
    pub fc2: Conv2d<B>,
    /// Activation between the two convolutions.
    #[module(skip)]
    pub act: Activation,
    /// Gate activation (sigmoid or hard-sigmoid).
    #[module(skip)]
    pub gate: Activation,
}

impl<B: Backend> SqueezeExcitation<B> {
    /// Builds the block.
    pub fn new(
        channels: usize,
        squeeze: usize,
        act: Activation,
        gate: Activation,
        device: &B::Device,
    ) -> Self {
        Self {
            fc1: conv2d(channels, squeeze, 1, 1, 0, 1, true, device),
            fc2: conv2d(squeeze, channels, 1, 1, 0, 1, true, device),
            act,
            gate,
        }
    }

    /// # Shapes
    /// - input and output: `[batch, channels, h, w]`
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let s = x.clone().mean_dim(3).mean_dim(2);
        let s = self.act.apply(crate::kernels::conv2d(&self.fc1, s));
        let s = self.gate.apply(crate::kernels::conv2d(&self.fc2, s));
        x.mul(s)
    }
}

/// Stochastic depth in "row" mode (torchvision's `StochasticDepth(p, "row")`): in training each
/// sample's residual branch is dropped with probability `p` and kept ones are scaled by
/// `1 / (1 − p)`; in inference it is the identity.
pub fn stochastic_depth<B: Backend>(x: Tensor<B, 4>, p: f64) -> Tensor<B, 4> {
    if p <= 0.0 || !B::ad_enabled(&x.device()) {
        return x;
    }
    let survival = 1.0 - p;
    let [n, ..] = x.dims();
    let mask = Tensor::<B, 4>::random([n, 1, 1, 1], Distribution::Bernoulli(survival), &x.device());
    // A quotient kept (the mask carries no gradient, so upstream burn-autodiff's f32
    // derivative of `div_scalar` does not apply): not differentiated.
    x.mul(mask.div_scalar(survival))
}

/// Global average pooling: `[batch, c, h, w]` → `[batch, c]`.
///
/// On wgpu and CUDA under autodiff one operation ([`kernels::global_avg_pool`]); elsewhere two
/// means and a reshape.
///
/// [`kernels::global_avg_pool`]: crate::kernels::global_avg_pool
pub fn global_avg_pool<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 2> {
    match crate::kernels::global_avg_pool(x) {
        Ok(pooled) => pooled,
        Err(x) => {
            let [n, c, _, _] = x.dims();
            x.mean_dim(3).mean_dim(2).reshape([n, c])
        }
    }
}

/// Average pooling of a feature map to a `grid × grid` grid (PyTorch's `AdaptiveAvgPool2d`
/// cells), flattened channel by channel as `torch.flatten(x, 1)` does: `grid` 1 is
/// [`global_avg_pool`]; a larger grid keeps where in the image each channel fired.
///
/// # Shapes
/// - input: `[batch, channels, h, w]`
/// - output: `[batch, channels · grid · grid]`
pub fn grid_avg_pool<B: Backend>(x: Tensor<B, 4>, grid: usize) -> Tensor<B, 2> {
    if grid == 1 {
        return global_avg_pool(x);
    }
    let [n, c, _, _] = x.dims();
    burn::tensor::module::adaptive_avg_pool2d(x, [grid, grid]).reshape([n, c * grid * grid])
}

/// torchvision's `_make_divisible`: rounds `v` to the nearest multiple of `divisor`, never going
/// below `min_value` (default `divisor`) nor more than 10 % under `v`.
pub fn make_divisible(v: f64, divisor: usize, min_value: Option<usize>) -> usize {
    let min_value = min_value.unwrap_or(divisor);
    let d = divisor as f64;
    let mut new_v = min_value.max(((v + d / 2.0) / d).floor() as usize * divisor);
    if (new_v as f64) < 0.9 * v {
        new_v += divisor;
    }
    new_v
}

/// Output side of a convolution or pooling window.
pub(crate) fn out_size(size: usize, kernel: usize, stride: usize, padding: usize) -> usize {
    if size + 2 * padding < kernel {
        0
    } else {
        (size + 2 * padding - kernel) / stride + 1
    }
}

/// Shared input check: channel count and a minimum side.
pub(crate) fn check_channels_and_size(
    model: &'static str,
    in_channels: usize,
    min: usize,
    shape: [usize; 4],
) -> Result<(), ModelError> {
    if shape[1] != in_channels {
        return Err(ModelError::ChannelMismatch {
            model,
            expected: in_channels,
            got: shape[1],
            shape,
        });
    }
    if shape[2] < min || shape[3] < min {
        return Err(ModelError::ImageTooSmall {
            model,
            height: shape[2],
            width: shape[3],
            min,
        });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f32>;

    /// The sample standard deviation of a layer's weights, their number, and whether its bias is
    /// all zero.
    pub(crate) fn weight_std_and_zero_bias<const D: usize>(
        weight: Tensor<B, D>,
        bias: Option<Tensor<B, 1>>,
    ) -> (f64, usize, bool) {
        let w: Vec<f32> = weight.into_data().to_vec().unwrap();
        let n = w.len() as f64;
        let mean = w.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = w.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        let zero = bias.is_some_and(|b| {
            let b: Vec<f32> = b.into_data().to_vec().unwrap();
            b.iter().all(|&x| x == 0.0)
        });
        (var.sqrt(), w.len(), zero)
    }

    // The sample standard deviation of n >= 4,096 normal draws is off by about 1/sqrt(2n) <
    // 1.2 %; 5 % is more than four of those. A uniform draw's is closer still.

    #[test]
    fn convolutions_start_as_torchvisions() {
        // torchvision: kaiming_normal_(mode "fan_out", ReLU gain): std sqrt(2 / (out · k²)); bias 0.
        let conv = conv2d::<B>(32, 64, 3, 1, 1, 1, true, &Default::default());
        let (std, n, zero) =
            weight_std_and_zero_bias(conv.weight.val(), conv.bias.map(|b| b.val()));
        let expected = (2.0_f64 / (64.0 * 9.0)).sqrt();
        assert!(
            n >= 4096 && (std / expected - 1.0).abs() < 0.05,
            "std {std} vs {expected}"
        );
        assert!(zero, "bias not zero");
    }

    #[test]
    fn depthwise_convolutions_start_as_torchvisions() {
        // PyTorch's fan-out ignores the groups: std sqrt(2 / (out · k²)) for a depthwise
        // convolution too (burn's own fan-out would give sqrt(2 / k²), 22.6 times larger here).
        let conv = conv2d::<B>(512, 512, 3, 1, 1, 512, false, &Default::default());
        let (std, n, _) = weight_std_and_zero_bias(conv.weight.val(), None);
        let expected = (2.0_f64 / (512.0 * 9.0)).sqrt();
        assert!(
            n >= 4096 && (std / expected - 1.0).abs() < 0.05,
            "std {std} vs {expected}"
        );
    }

    #[test]
    fn zeroed_and_grouped_parameters_stay_trainable() {
        // d(sum of y)/d(bias) is the number of rows, d/d(weight) of a depthwise 1 × 1
        // convolution of ones is the number of pixels: both reach the zeroed and rescaled leaves.
        type Ad = burn::backend::Autodiff<B>;
        let device = Default::default();
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let grad = |param: &Param<Tensor<Ad, 1>>, grads| -> Vec<f32> {
            let grad = param.val().grad(grads).expect("a gradient");
            grad.into_data().to_vec().unwrap()
        };
        let layer = linear_zero_bias::<Ad>(3, 2, normal, &device);
        let ones = Tensor::<Ad, 2>::ones([5, 3], &device);
        let grads = layer.forward(ones).sum().backward();
        assert_eq!(grad(layer.bias.as_ref().unwrap(), &grads), vec![5.0, 5.0]);
        let conv = conv2d::<Ad>(4, 4, 1, 1, 0, 4, true, &device);
        let ones = Tensor::<Ad, 4>::ones([2, 4, 3, 3], &device);
        let grads = conv.forward(ones).sum().backward();
        let weight: Vec<f32> = conv
            .weight
            .val()
            .grad(&grads)
            .unwrap()
            .into_data()
            .to_vec()
            .unwrap();
        assert_eq!(weight, vec![18.0; 4]);
        assert_eq!(grad(conv.bias.as_ref().unwrap(), &grads), vec![18.0; 4]);
    }

    #[test]
    fn linear_layers_with_a_chosen_initialiser_have_zero_biases() {
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let layer = linear_zero_bias::<B>(64, 128, normal, &Default::default());
        let (std, n, zero) =
            weight_std_and_zero_bias(layer.weight.val(), layer.bias.map(|b| b.val()));
        assert!(n >= 4096 && (std / 0.02 - 1.0).abs() < 0.05, "std {std}");
        assert!(zero, "bias not zero");
    }
}
