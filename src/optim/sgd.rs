//! SGD with momentum, Nesterov and weight decay, exactly as PyTorch's (documented on `Sgd`).

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{LearningRate, SimpleOptimizer};
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;

use crate::base::error::{in_range, non_negative, ConfigError};
use curriculum_ssl_models::kernels::{sgd_momentum_step, SgdSettings};

/// Configuration of [`Sgd`].
#[derive(Config, Debug)]
pub struct SgdConfig {
    /// Momentum factor `μ` in `[0, 1)` (0 disables momentum).
    #[config(default = 0.9)]
    pub momentum: f64,
    /// Nesterov momentum (needs `μ > 0`).
    #[config(default = false)]
    pub nesterov: bool,
    /// L2 penalty `wd >= 0` added to the gradient.
    #[config(default = 5e-4)]
    pub weight_decay: f64,
}

impl SgdConfig {
    /// Validates the hyperparameters and builds the update rule.
    pub fn build(&self) -> Result<Sgd, ConfigError> {
        momentum_in_range(self.momentum)?;
        non_negative("weight_decay", self.weight_decay)?;
        if self.nesterov && self.momentum == 0.0 {
            return Err(ConfigError::new(
                "nesterov",
                "Nesterov momentum needs a momentum > 0",
            ));
        }
        Ok(Sgd {
            momentum: self.momentum,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
        })
    }

    /// An [`Optimizer`](burn::optim::Optimizer) for module `M` trained on backend `B`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
    ) -> Result<OptimizerAdaptor<Sgd, M, B>, ConfigError> {
        Ok(OptimizerAdaptor::from(self.build()?))
    }
}

/// The SGD update rule. Build it with [`SgdConfig::build`] or [`SgdConfig::init`].
///
/// SGD with momentum, Nesterov and weight decay, exactly as PyTorch's `torch.optim.SGD`.
///
/// burn has an SGD, but its `MomentumConfig` defaults to `dampening = 0.1` (PyTorch: 0, so burn's
/// velocity would be `m·v + 0.9·g` instead of `m·v + g`) and its weight decay is stored as an
/// `f32`. This one keeps every hyperparameter in `f64` and follows PyTorch:
/// ```text
/// g ← g + wd·θ
/// v ← μ·v + g        (v = g at the first step)
/// θ ← θ − lr · (Nesterov ? g + μ·v : v)
/// ```
#[derive(Debug, Clone)]
pub struct Sgd {
    momentum: f64,
    nesterov: bool,
    weight_decay: f64,
}

/// Checks that the momentum `μ` lies in `[0, 1)` (SGD's and LARS's).
pub(crate) fn momentum_in_range(momentum: f64) -> Result<(), ConfigError> {
    in_range("momentum", momentum, 0.0, 1.0, false)?;
    if momentum >= 1.0 {
        return Err(ConfigError::new("momentum", "must be < 1"));
    }
    Ok(())
}

/// PyTorch's momentum on an update `d`: `v ← μ·v + d` (`v = d` at the first step), and the step
/// `d + μ·v` with Nesterov, else `v`. Returns `(step, v)`.
pub(crate) fn momentum_step<B: Backend, const D: usize>(
    update: Tensor<B, D>,
    velocity: Option<Tensor<B, D>>,
    momentum: f64,
    nesterov: bool,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let velocity = match velocity {
        Some(v) => v * momentum + update.clone(),
        None => update.clone(),
    };
    let step = if nesterov {
        update + velocity.clone() * momentum
    } else {
        velocity.clone()
    };
    (step, velocity)
}

/// `θ − lr·s` for the step `s` of PyTorch's momentum on `update` ([`momentum_step`]), and the
/// state that keeps its buffer: the last move of SGD and of LARS.
pub(crate) fn momentum_update<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    update: Tensor<B, D>,
    state: Option<SgdState<B, D>>,
    lr: LearningRate,
    momentum: f64,
    nesterov: bool,
) -> (Tensor<B, D>, Option<SgdState<B, D>>) {
    let (step, velocity) = momentum_step(update, state.map(|s| s.velocity), momentum, nesterov);
    (tensor - step * lr, Some(SgdState { velocity }))
}

/// Per-parameter state of [`Sgd`] and of [`Lars`](super::Lars): the momentum buffer.
#[derive(Record, Clone)]
pub struct SgdState<B: Backend, const D: usize> {
    /// Momentum buffer `v`.
    pub velocity: Tensor<B, D>,
}

impl<B: Backend, const D: usize> SgdState<B, D> {
    /// The same state on `device`.
    pub fn to_device(self, device: &B::Device) -> Self {
        Self {
            velocity: self.velocity.to_device(device),
        }
    }
}

impl<B: Backend> SimpleOptimizer<B> for Sgd {
    type State<const D: usize> = SgdState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        // On wgpu and CUDA one operation and one kernel of the models crate's; elsewhere (and
        // without momentum) burn's tensor operations below, the same arithmetic.
        let (tensor, grad, state) = if self.momentum > 0.0 {
            let settings = SgdSettings {
                lr,
                momentum: self.momentum,
                weight_decay: self.weight_decay,
                nesterov: self.nesterov,
            };
            match sgd_momentum_step(tensor, grad, state.map(|s| s.velocity), settings) {
                Ok((tensor, velocity)) => return (tensor, Some(SgdState { velocity })),
                Err((tensor, grad, velocity)) => {
                    (tensor, grad, velocity.map(|velocity| SgdState { velocity }))
                }
            }
        } else {
            (tensor, grad, state)
        };
        let grad = if self.weight_decay > 0.0 {
            grad + tensor.clone() * self.weight_decay
        } else {
            grad
        };
        if self.momentum == 0.0 {
            return (tensor - grad * lr, None);
        }
        momentum_update(tensor, grad, state, lr, self.momentum, self.nesterov)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        state.to_device(device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn nesterov_by_hand() {
        // θ = 1, g = 0.5 twice, μ = 0.9, no decay, lr = 0.1, Nesterov:
        // v0 = 0.5, step = 0.5 + 0.45 = 0.95, θ1 = 0.905;
        // v1 = 0.45 + 0.5 = 0.95, step = 0.5 + 0.855 = 1.355, θ2 = 0.905 − 0.1355 = 0.7695.
        let sgd = SgdConfig::new()
            .with_nesterov(true)
            .with_weight_decay(0.0)
            .build()
            .unwrap();
        let device = Default::default();
        let grad = Tensor::<B, 1>::from_data([0.5], &device);
        let (t1, s) = SimpleOptimizer::<B>::step(
            &sgd,
            0.1,
            Tensor::from_data([1.0], &device),
            grad.clone(),
            None,
        );
        let (t2, _) = SimpleOptimizer::<B>::step(&sgd, 0.1, t1.clone(), grad, s);
        assert!((t1.into_scalar() - 0.905).abs() < 1e-12);
        assert!((t2.into_scalar() - 0.7695).abs() < 1e-12);
    }

    #[test]
    fn impossible_settings_are_rejected() {
        assert_eq!(
            SgdConfig::new()
                .with_momentum(1.0)
                .build()
                .unwrap_err()
                .field,
            "momentum"
        );
        assert_eq!(
            SgdConfig::new()
                .with_momentum(0.0)
                .with_nesterov(true)
                .build()
                .unwrap_err()
                .field,
            "nesterov"
        );
        assert_eq!(
            SgdConfig::new()
                .with_weight_decay(-1.0)
                .build()
                .unwrap_err()
                .field,
            "weight_decay"
        );
    }
}
