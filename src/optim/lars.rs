//! LARS, layer-wise adaptive rate scaling (documented on `Lars`).

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{LearningRate, SimpleOptimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use super::sgd::{momentum_in_range, momentum_update, SgdState};
use crate::base::error::{non_negative, positive, ConfigError};

/// Configuration of [`Lars`].
#[derive(Config, Debug)]
pub struct LarsConfig {
    /// Momentum `μ` in `[0, 1)`.
    #[config(default = 0.9)]
    pub momentum: f64,
    /// Nesterov momentum.
    #[config(default = false)]
    pub nesterov: bool,
    /// Weight decay `wd >= 0` (applied to non-excluded parameters only).
    #[config(default = 1e-6)]
    pub weight_decay: f64,
    /// Trust coefficient `η > 0`.
    #[config(default = 0.02)]
    pub eta: f64,
    /// `ε` in the trust ratio's denominator.
    #[config(default = 1e-8)]
    pub epsilon: f64,
    /// Leave 1-D parameters (biases, BatchNorm scale and shift) out of the trust ratio and the
    /// weight decay.
    #[config(default = true)]
    pub exclude_bias_and_norm: bool,
    /// Clip each layer's rate at the learning rate (solo-learn's `clip_lr`, the setting of all
    /// its LARS recipes): the trust ratio becomes `min(η·r / lr, 1)`, so a layer steps
    /// `min(η·r, lr)` — plain momentum SGD wherever `η·r > lr`. Off by default, as in lightly's
    /// and PyTorch Lightning Bolts' LARS.
    #[config(default = false)]
    pub clip_lr: bool,
}

impl LarsConfig {
    /// Validates the hyperparameters and builds the optimiser state-free core.
    pub fn build(&self) -> Result<Lars, ConfigError> {
        momentum_in_range(self.momentum)?;
        non_negative("weight_decay", self.weight_decay)?;
        positive("eta", self.eta)?;
        non_negative("epsilon", self.epsilon)?;
        Ok(Lars {
            momentum: self.momentum,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
            eta: self.eta,
            epsilon: self.epsilon,
            exclude_bias_and_norm: self.exclude_bias_and_norm,
            clip_lr: self.clip_lr,
        })
    }

    /// An [`Optimizer`](burn::optim::Optimizer) for module `M` trained on backend `B`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
    ) -> Result<OptimizerAdaptor<Lars, M, B>, ConfigError> {
        Ok(OptimizerAdaptor::from(self.build()?))
    }
}

/// The LARS update rule. Build it with [`LarsConfig::build`] or [`LarsConfig::init`].
///
/// LARS, layer-wise adaptive rate scaling (You et al. 2017), as SimCLR, BYOL and solo-learn use
/// it. burn has no LARS; this one plugs into burn's optimiser machinery through
/// [`SimpleOptimizer`], so `LarsConfig::init()` gives an `Optimizer` for any module.
///
/// For a parameter `θ` with gradient `g` (PyTorch-style, dampening 0):
/// ```text
/// r = η‖θ‖ / (‖g‖ + wd‖θ‖ + ε)        (clip_lr: r ← min(r / lr, 1))
/// if θ is not excluded and ‖θ‖ > 0 and ‖g‖ > 0:  d = (g + wd·θ) · r
/// else:                                          d = g
/// v ← μ·v + d            (v = d at the first step)
/// θ ← θ − lr · (Nesterov ? d + μ·v : v)
/// ```
/// Biases and normalisation parameters — every 1-D tensor — are excluded when
/// `exclude_bias_and_norm` is set (the usual choice). As in lightly's and solo-learn's LARS, a
/// parameter whose gradient is zero (or whose norm is zero) gets no weight decay either.
#[derive(Debug, Clone)]
pub struct Lars {
    momentum: f64,
    nesterov: bool,
    weight_decay: f64,
    eta: f64,
    epsilon: f64,
    exclude_bias_and_norm: bool,
    clip_lr: bool,
}

/// Per-parameter state of [`Lars`]: the momentum buffer, as SGD's (the same record).
pub type LarsState<B, const D: usize> = SgdState<B, D>;

impl<B: Backend> SimpleOptimizer<B> for Lars {
    type State<const D: usize> = LarsState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let excluded = self.exclude_bias_and_norm && D == 1;
        let update = if excluded {
            grad
        } else {
            let param_norm = tensor.clone().powi_scalar(2).sum().sqrt();
            let grad_norm = grad.clone().powi_scalar(2).sum().sqrt();
            let denominator =
                grad_norm.clone() + param_norm.clone() * self.weight_decay + self.epsilon;
            let ratio = (param_norm.clone() * self.eta) / denominator;
            let ratio = match self.clip_lr {
                // solo-learn's min(r / lr, 1); at lr = 0 that is 1 (r / 0 = ∞).
                true if lr > 0.0 => ratio.mul_scalar(1.0 / lr).clamp_max(1.0),
                true => ratio.ones_like(),
                false => ratio,
            };
            // Where either norm is zero the gradient goes through as it is: no trust ratio and
            // no weight decay (as in solo-learn and lightly).
            let active = param_norm
                .greater_elem(0.0)
                .bool_and(grad_norm.greater_elem(0.0))
                .reshape([1; D])
                .expand(grad.shape());
            let scaled =
                (grad.clone() + tensor.clone() * self.weight_decay) * ratio.reshape([1; D]);
            grad.mask_where(active, scaled)
        };
        momentum_update(tensor, update, state, lr, self.momentum, self.nesterov)
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

    fn values<const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
        t.into_data().to_vec().unwrap()
    }

    #[test]
    fn two_steps_by_hand() {
        // θ = [[3, 4]], g = [[0.6, 0.8]]: ‖θ‖ = 5, ‖g‖ = 1, wd = 0.1, η = 0.02, ε = 0:
        // ratio = 0.02·5 / (1 + 0.5) = 1/15; d = (g + 0.1θ)/15 = [0.06, 0.08];
        // lr = 0.5: θ1 = [2.97, 3.96].
        let lars = LarsConfig::new()
            .with_weight_decay(0.1)
            .with_epsilon(0.0)
            .build()
            .unwrap();
        let device = Default::default();
        let theta = Tensor::<B, 2>::from_data([[3.0, 4.0]], &device);
        let grad = Tensor::<B, 2>::from_data([[0.6, 0.8]], &device);
        let (theta1, state) = SimpleOptimizer::<B>::step(&lars, 0.5, theta, grad.clone(), None);
        let t1 = values(theta1.clone());
        assert!(
            (t1[0] - 2.97).abs() < 1e-12 && (t1[1] - 3.96).abs() < 1e-12,
            "{t1:?}"
        );
        // Second step, same gradient: ‖θ1‖ = 4.95, ratio = 0.099 / (1 + 0.495),
        // d = (g + 0.1θ1)·ratio, v = 0.9·[0.06, 0.08] + d.
        let (theta2, _) = SimpleOptimizer::<B>::step(&lars, 0.5, theta1, grad, state);
        let ratio = 0.02 * 4.95 / (1.0 + 0.1 * 4.95);
        let d = [(0.6 + 0.297) * ratio, (0.8 + 0.396) * ratio];
        let v = [0.9 * 0.06 + d[0], 0.9 * 0.08 + d[1]];
        let expected = [2.97 - 0.5 * v[0], 3.96 - 0.5 * v[1]];
        let t2 = values(theta2);
        assert!((t2[0] - expected[0]).abs() < 1e-12 && (t2[1] - expected[1]).abs() < 1e-12);
    }

    #[test]
    fn biases_are_plain_sgd_with_momentum() {
        let lars = LarsConfig::new().with_weight_decay(0.1).build().unwrap();
        let device = Default::default();
        let bias = Tensor::<B, 1>::from_data([1.0, 2.0], &device);
        let grad = Tensor::<B, 1>::from_data([0.5, 0.5], &device);
        let (b1, state) = SimpleOptimizer::<B>::step(&lars, 0.5, bias, grad.clone(), None);
        assert_eq!(values(b1.clone()), vec![0.75, 1.75]);
        // v = 0.9·0.5 + 0.5 = 0.95; b2 = b1 − 0.5·0.95.
        let (b2, _) = SimpleOptimizer::<B>::step(&lars, 0.5, b1, grad, state);
        assert_eq!(values(b2), vec![0.75 - 0.475, 1.75 - 0.475]);
    }
}
