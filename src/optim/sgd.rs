//! SGD with momentum, Nesterov and weight decay, exactly as PyTorch's (documented on `Sgd`).

use burn::module::{AutodiffModule, ModuleMapper, Param, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::record::AdaptorRecord;
use burn::optim::{
    GradientsParams, LearningRate, MultiGradientsParams, Optimizer, SimpleOptimizer,
};
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;
use std::collections::HashMap;

use super::stand_in::StandIns;
use crate::base::error::{in_range, non_negative, ConfigError};
use curriculum_ssl_models::kernels::{
    sgd_momentum_step, sgd_momentum_step_all, SgdList, SgdSettings,
};

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

    /// An [`Optimizer`] for module `M` trained on backend `B`: [`SgdOptimizer`].
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
    ) -> Result<SgdOptimizer<M, B>, ConfigError> {
        Ok(SgdOptimizer::new(self.build()?))
    }
}

/// The per-parameter states of an [`SgdOptimizer`]: those of burn's [`OptimizerAdaptor`] of
/// [`Sgd`], so that a checkpoint written by either loads in the other.
pub type SgdRecords<M, B> = <OptimizerAdaptor<Sgd, M, B> as Optimizer<M, B>>::Record;

/// [`Sgd`] as an [`Optimizer`]: burn's [`OptimizerAdaptor`] of it step for step (the same
/// arithmetic, states and record), except that a step's parameters are stepped together. On the
/// wgpu and CUDA backends that is one operation of burn's fusion stream and one kernel launch for
/// up to 64 parameters ([`sgd_momentum_step_all`]) where the adaptor records, matches and launches
/// one a parameter (62 for a ResNet-18); elsewhere each parameter is stepped by [`Sgd`]'s
/// [`SimpleOptimizer::step`], as the adaptor does.
///
/// Why not the adaptor: it hands [`SimpleOptimizer::step`] one parameter at a time, so a step
/// of the whole module cannot be one operation. A step takes the parameters out of the module
/// (a one-entry tensor of each rank stands in while the step runs: a clone of the parameter
/// would make burn's fusion record a release of each old value), steps the list and puts the
/// new values in. `step_multi` (gradients spread over devices) is the adaptor's.
pub struct SgdOptimizer<M: AutodiffModule<B>, B: AutodiffBackend> {
    sgd: Sgd,
    records: SgdRecords<M, B>,
    /// The stand-ins, kept from step to step: made anew each step, each was one more operation
    /// of burn's fusion stream to make and one to release, a rank and step.
    stand_ins: StandIns<B>,
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> Clone for SgdOptimizer<M, B> {
    fn clone(&self) -> Self {
        Self {
            sgd: self.sgd.clone(),
            records: self.records.clone(),
            stand_ins: StandIns::default(),
        }
    }
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> SgdOptimizer<M, B> {
    /// An optimiser with the update rule `sgd` and no state yet.
    pub fn new(sgd: Sgd) -> Self {
        Self {
            sgd,
            records: Default::default(),
            stand_ins: StandIns::default(),
        }
    }

    /// The update rule.
    pub fn sgd(&self) -> &Sgd {
        &self.sgd
    }

    /// `f` on burn's adaptor holding this optimiser's states, which are taken back after.
    fn with_adaptor(&mut self, f: impl FnOnce(&mut OptimizerAdaptor<Sgd, M, B>) -> M) -> M {
        let records = std::mem::take(&mut self.records);
        let mut adaptor = OptimizerAdaptor::from(self.sgd.clone()).load_record(records);
        let module = f(&mut adaptor);
        self.records = adaptor.to_record();
        module
    }
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> Optimizer<M, B> for SgdOptimizer<M, B> {
    type Record = SgdRecords<M, B>;

    fn step(&mut self, lr: LearningRate, module: M, mut grads: GradientsParams) -> M {
        if self.sgd.momentum == 0.0 {
            return self.with_adaptor(|adaptor| adaptor.step(lr, module, grads));
        }
        let mut take = TakeParams::<M, B> {
            grads: &mut grads,
            records: &mut self.records,
            ids: Vec::new(),
            list: Vec::new(),
            stand_ins: &mut self.stand_ins,
        };
        let module = module.map(&mut take);
        let TakeParams {
            ids: taken, list, ..
        } = take;
        let settings = SgdSettings {
            lr,
            momentum: self.sgd.momentum,
            weight_decay: self.sgd.weight_decay,
            nesterov: self.sgd.nesterov,
        };
        let stepped: Vec<Stepped<B::InnerBackend>> =
            match sgd_momentum_step_all::<B::InnerBackend>(list, settings) {
                Ok(stepped) => stepped
                    .into_iter()
                    .map(|(param, velocity)| Stepped::Done(param, velocity))
                    .collect(),
                Err(list) => list
                    .into_iter()
                    .map(|(param, grad, velocity)| Stepped::Pending(param, grad, velocity))
                    .collect(),
            };
        let mut put = PutParams::<M, B> {
            sgd: &self.sgd,
            lr,
            records: &mut self.records,
            stepped: taken
                .into_iter()
                .zip(stepped)
                .map(|(taken, stepped)| (taken.id, (taken.require_grad, stepped)))
                .collect(),
        };
        module.map(&mut put)
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        self.with_adaptor(|adaptor| adaptor.step_multi(lr, module, grads))
    }

    fn to_record(&self) -> Self::Record {
        self.records.clone()
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        self.records = record;
        self
    }
}

/// A parameter taken out of the module by [`TakeParams`].
struct Taken {
    id: ParamId,
    require_grad: bool,
}

/// The first pass of [`SgdOptimizer::step`]: takes out every parameter that has a gradient,
/// with its gradient and momentum buffer (moved to the gradient's device, as burn's adaptor
/// does); a one-entry tensor of the parameter's rank stands in.
struct TakeParams<'a, M: AutodiffModule<B>, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    records: &'a mut SgdRecords<M, B>,
    ids: Vec<Taken>,
    list: SgdList<B::InnerBackend>,
    stand_ins: &'a mut StandIns<B>,
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> ModuleMapper<B> for TakeParams<'_, M, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(id) else {
            // As burn's adaptor: taken and put back (a lazy parameter is initialised here).
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let device = grad.device();
        let require_grad = tensor.is_require_grad();
        let tensor = if tensor.device() != device {
            tensor.to_device(&device)
        } else {
            tensor
        };
        let velocity = self.records.remove(&id).map(|record| {
            let state: SgdState<B::InnerBackend, D> = record.into_state();
            state.to_device(&device).velocity
        });
        let primitive = |t: Tensor<B::InnerBackend, D>| t.into_primitive().tensor();
        self.list.push((
            primitive(tensor.inner()),
            primitive(grad),
            velocity.map(primitive),
        ));
        self.ids.push(Taken { id, require_grad });
        Param::from_mapped_value(id, self.stand_ins.get(&device), mapper)
    }
}

/// A parameter's step: done by [`sgd_momentum_step_all`] (new `θ` and `v`), or its `(θ, g, v)`
/// still to step.
enum Stepped<I: Backend> {
    Done(FloatTensor<I>, FloatTensor<I>),
    Pending(FloatTensor<I>, FloatTensor<I>, Option<FloatTensor<I>>),
}

/// The second pass of [`SgdOptimizer::step`]: puts the new parameters in and keeps their
/// buffers (stepping each pending one with [`Sgd`]'s [`SimpleOptimizer::step`]).
struct PutParams<'a, M: AutodiffModule<B>, B: AutodiffBackend> {
    sgd: &'a Sgd,
    lr: LearningRate,
    records: &'a mut SgdRecords<M, B>,
    stepped: HashMap<ParamId, (bool, Stepped<B::InnerBackend>)>,
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> ModuleMapper<B> for PutParams<'_, M, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some((require_grad, stepped)) = self.stepped.remove(&param.id) else {
            return param;
        };
        let (id, _stand_in, mapper) = param.consume();
        fn tensor<I: Backend, const D: usize>(t: FloatTensor<I>) -> Tensor<I, D> {
            Tensor::from_primitive(TensorPrimitive::Float(t))
        }
        let (value, state) = match stepped {
            Stepped::Done(param, velocity) => (
                tensor::<B::InnerBackend, D>(param),
                Some(SgdState {
                    velocity: tensor(velocity),
                }),
            ),
            Stepped::Pending(param, grad, velocity) => SimpleOptimizer::step(
                self.sgd,
                self.lr,
                tensor(param),
                tensor(grad),
                velocity.map(|velocity| SgdState {
                    velocity: tensor(velocity),
                }),
            ),
        };
        if let Some(state) = state {
            self.records.insert(id, AdaptorRecord::from_state(state));
        }
        let mut value = Tensor::<B, D>::from_inner(value);
        if require_grad {
            value = value.require_grad();
        }
        Param::from_mapped_value(id, value, mapper)
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

    type Ad = burn::backend::Autodiff<B>;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        a: burn::nn::Linear<B>,
        b: burn::nn::Linear<B>,
    }

    fn net(device: &<Ad as burn::tensor::backend::BackendTypes>::Device) -> Net<Ad> {
        crate::base::seed::init_module::<Ad, _>(device, 11, |d| Net {
            a: burn::nn::LinearConfig::new(3, 4).init(d),
            b: burn::nn::LinearConfig::new(4, 2).init(d),
        })
    }

    /// The gradients of a fixed loss at `m`, less `b`'s bias's when `skip_bias`.
    fn grads(m: &Net<Ad>, skip_bias: bool) -> GradientsParams {
        let x = Tensor::<Ad, 2>::from_data(
            TensorData::new(vec![0.3, -1.2, 0.8, 1.5, 0.1, -0.4], [2, 3]),
            &m.a.weight.device(),
        );
        let loss = m.b.forward(m.a.forward(x).tanh()).powi_scalar(2).sum();
        let mut grads = GradientsParams::from_grads(loss.backward(), m);
        if skip_bias {
            grads.remove::<B, 1>(m.b.bias.as_ref().unwrap().id);
        }
        grads
    }

    fn values(m: &Net<Ad>) -> Vec<Vec<f64>> {
        let t = |p: &Param<Tensor<Ad, 2>>| p.val().into_data().to_vec::<f64>().unwrap();
        let v = |p: &Param<Tensor<Ad, 1>>| p.val().into_data().to_vec::<f64>().unwrap();
        vec![
            t(&m.a.weight),
            v(m.a.bias.as_ref().unwrap()),
            t(&m.b.weight),
            v(m.b.bias.as_ref().unwrap()),
        ]
    }

    /// `SgdOptimizer` (which takes a step's parameters out of the module, steps them as a list and
    /// puts them back) equals burn's adaptor of the same `Sgd` to the last bit over three steps
    /// with Nesterov and weight decay, one of them without a bias's gradient (that bias and its
    /// buffer left as they are); its first step is `θ − lr·(1 + μ)·(g + wd·θ)`, computed here from
    /// the gradients; and its record is the adaptor's (either continues from the other's).
    #[test]
    fn the_optimizer_steps_as_burns_adaptor_and_shares_its_record() {
        let config = SgdConfig::new().with_nesterov(true).with_weight_decay(5e-4);
        let device = Default::default();
        let start = net(&device);
        let mut ours = config.init::<Ad, Net<Ad>>().unwrap();
        let mut burns = OptimizerAdaptor::<Sgd, Net<Ad>, Ad>::from(config.build().unwrap());
        // Leaves of their own: the two runs start from the same values, not the same graph.
        let (mut m1, mut m2) = (
            Net::<Ad>::from_inner(start.valid()),
            Net::<Ad>::from_inner(start.valid()),
        );
        let g0 = grads(&m1, false);
        let by_hand: Vec<Vec<f64>> = {
            let id = [
                m1.a.weight.id,
                m1.a.bias.as_ref().unwrap().id,
                m1.b.weight.id,
                m1.b.bias.as_ref().unwrap().id,
            ];
            let g = |i: usize| -> Vec<f64> {
                if i.is_multiple_of(2) {
                    g0.get::<B, 2>(id[i]).unwrap().into_data()
                } else {
                    g0.get::<B, 1>(id[i]).unwrap().into_data()
                }
                .to_vec::<f64>()
                .unwrap()
            };
            values(&m1)
                .iter()
                .enumerate()
                .map(|(i, theta)| {
                    theta
                        .iter()
                        .zip(g(i))
                        .map(|(t, g)| t - 0.1 * 1.9 * (g + 5e-4 * t))
                        .collect()
                })
                .collect()
        };
        m1 = ours.step(0.1, m1, g0);
        for (i, (hand, got)) in by_hand.iter().zip(values(&m1)).enumerate() {
            for (h, v) in hand.iter().zip(&got) {
                assert!(
                    (h - v).abs() < 1e-14,
                    "tensor {i}: {h} by hand, {v} stepped"
                );
            }
        }
        let g = grads(&m2, false);
        m2 = burns.step(0.1, m2, g);
        for (lr, skip_bias) in [(0.05, true), (0.2, false)] {
            let before = values(&m1)[3].clone();
            let (g1, g2) = (grads(&m1, skip_bias), grads(&m2, skip_bias));
            m1 = ours.step(lr, m1, g1);
            m2 = burns.step(lr, m2, g2);
            assert_eq!(values(&m1), values(&m2));
            assert_eq!(before == values(&m1)[3], skip_bias);
        }
        // Each continues from the other's record.
        let mut burns_from_ours =
            OptimizerAdaptor::<Sgd, Net<Ad>, Ad>::from(config.build().unwrap())
                .load_record(ours.to_record());
        let mut ours_from_burns = config
            .init::<Ad, Net<Ad>>()
            .unwrap()
            .load_record(burns.to_record());
        let (a, b) = (
            Net::<Ad>::from_inner(m1.valid()),
            Net::<Ad>::from_inner(m1.valid()),
        );
        let a = burns_from_ours.step(0.1, a, grads(&m1, false));
        let b = ours_from_burns.step(0.1, b, grads(&m1, false));
        let c = ours.step(0.1, m1.clone(), grads(&m1, false));
        assert_eq!(values(&a), values(&b));
        assert_eq!(values(&a), values(&c));
    }
}
