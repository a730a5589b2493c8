//! The exponential-moving-average update of the momentum copies (documented on `ema_update`).

use std::collections::HashMap;

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;
use curriculum_ssl_models::kernels::{moving_average, moving_average_all};

use crate::base::error::{in_range, ConfigError};

/// A copy of `online` that shares nothing with it: `fresh` (a newly initialised module of the
/// same architecture) with the online weights, running statistics and parameter ids loaded, and
/// no gradient required.
///
/// burn initialises parameters lazily, and a clone of a parameter that was never read draws its
/// own random values: the online parameters are therefore materialised first, so that the copy
/// and the online network hold the same values. Loading the record into `fresh` reads its
/// optional parameters (burn 0.21 counts them), which draws their lazy initial values from the
/// backend's generator: call it under [`crate::base::seed::with_seed`], as every method's `init`
/// is by [`crate::method::init_method`].
pub fn detached_copy<B: Backend, M: Module<B>>(online: &M, fresh: M) -> M {
    crate::base::seed::materialise(online);
    fresh.load_record(online.clone().into_record()).no_grad()
}

/// `target ← m·target + (1 − m)·online` for every trainable parameter of `online` (matched by
/// parameter id, so `target` must come from [`detached_copy`] of `online`, or of a part of it:
/// `online`'s other parameters are ignored). Other tensors of `target` (running statistics,
/// frozen parameters) are left as they are.
///
/// The exponential-moving-average update of every momentum copy
/// ([`MomentumEncoder`](super::MomentumEncoder): MoCo's key encoder, BYOL's target, TiCo's and MoCo
/// v3's momentum encoders, DINO's teacher): `θ_target ← m·θ_target + (1 − m)·θ_online`, plus the
/// cosine momentum schedule.
///
/// Two burn details matter here. Cloning a module SHARES its BatchNorm running statistics (they
/// sit behind an `Arc<Mutex>` in `RunningStat`), so a target made by `online.clone()` would
/// silently average its running statistics with the online network's and every `map` over it
/// would write into the online network too. [`detached_copy`] therefore loads the online weights
/// into a freshly initialised module, whose running statistics are its own. And only trainable
/// parameters are averaged: running statistics (buffers in PyTorch) are left to the target's
/// own forward passes, as in MoCo, BYOL and DINO.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#momentum-ema-update`.
///
/// # Panics
/// If `momentum` is outside `[0, 1]`.
pub fn ema_update<B: Backend, M: Module<B>, O: Module<B>>(
    target: M,
    online: &O,
    momentum: f64,
) -> M {
    assert!(
        (0.0..=1.0).contains(&momentum),
        "ema_update: momentum must lie in [0, 1], got {momentum}"
    );
    let mut collector = TrainableParams::default();
    online.visit(&mut collector);
    // Two passes over the target: the first takes out the values to average (the online value
    // stands in meanwhile: a clone, which records nothing when dropped), so that all of them are
    // updated by one call, one operation of burn's fusion stream on wgpu and CUDA rather than one
    // a parameter; the second puts the averages in.
    let mut take = TakeTargets {
        online: &collector.tensors,
        ids: Vec::new(),
        pairs: Vec::new(),
    };
    let target = target.map(&mut take);
    let TakeTargets { ids, pairs, .. } = take;
    let averaged = match moving_average_all::<B>(pairs, momentum) {
        Ok(averages) => averages.into_iter().map(Averaged::Done).collect::<Vec<_>>(),
        Err(pairs) => pairs
            .into_iter()
            .map(|(target, online)| Averaged::Pending(target, online))
            .collect(),
    };
    let mut put = PutAverages {
        averaged: ids.into_iter().zip(averaged).collect(),
        momentum,
    };
    target.map(&mut put)
}

/// The momentum at training progress `progress ∈ [0, 1]` when it rises along a cosine from
/// `base` to 1 (BYOL; optional in MoCo / Light-MoCo):
/// `m(p) = 1 − (1 − base)·(1 + cos πp)/2`.
pub fn cosine_momentum(base: f64, progress: f64) -> f64 {
    let p = progress.clamp(0.0, 1.0);
    1.0 - (1.0 - base) * (1.0 + (std::f64::consts::PI * p).cos()) / 2.0
}

/// Checks that a momentum lies in `[0, 1]`.
pub(crate) fn validate_momentum(field: &'static str, momentum: f64) -> Result<(), ConfigError> {
    in_range(field, momentum, 0.0, 1.0, false)
}

/// Collects the online network's trainable tensors by parameter id, as burn's primitives of any
/// rank (no reshape: on a GPU backend each would be an operation of burn's fusion stream).
#[derive(Default)]
struct TrainableParams<B: Backend> {
    tensors: HashMap<ParamId, FloatTensor<B>>,
}

impl<B: Backend> ModuleVisitor<B> for TrainableParams<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if param.is_require_grad() {
            let value = param.val().detach().into_primitive().tensor();
            self.tensors.insert(param.id, value);
        }
    }
}

/// The first pass of [`ema_update`]: takes out the target's values that have an online
/// counterpart, in the order visited, with that counterpart; the online value stands in.
struct TakeTargets<'a, B: Backend> {
    online: &'a HashMap<ParamId, FloatTensor<B>>,
    ids: Vec<ParamId>,
    pairs: Vec<(FloatTensor<B>, FloatTensor<B>)>,
}

impl<B: Backend> ModuleMapper<B> for TakeTargets<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        // A parameter met twice (one shared by two places of the target) is averaged once and
        // put in at both.
        let Some(online) = self.online.get(&param.id) else {
            return param;
        };
        if self.ids.contains(&param.id) {
            return param;
        }
        let (id, value, mapper) = param.consume();
        self.ids.push(id);
        self.pairs
            .push((value.into_primitive().tensor(), online.clone()));
        let stand_in = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(online.clone()));
        Param::from_mapped_value(id, stand_in, mapper)
    }
}

/// A parameter's average (computed by [`moving_average_all`], or put in already and kept for
/// another place of the same parameter), or its pair still to average.
enum Averaged<B: Backend> {
    Done(FloatTensor<B>),
    Pending(FloatTensor<B>, FloatTensor<B>),
}

/// The second pass of [`ema_update`]: puts the averages in (computing each pending one with
/// [`moving_average`]: one kernel of the models crate's a parameter on wgpu and CUDA, burn's
/// operations elsewhere).
struct PutAverages<B: Backend> {
    averaged: HashMap<ParamId, Averaged<B>>,
    momentum: f64,
}

impl<B: Backend> ModuleMapper<B> for PutAverages<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(averaged) = self.averaged.remove(&param.id) else {
            return param;
        };
        let (id, _stand_in, mapper) = param.consume();
        let tensor = |t| Tensor::<B, D>::from_primitive(TensorPrimitive::Float(t));
        let average = match averaged {
            Averaged::Done(average) => tensor(average),
            Averaged::Pending(target, online) => {
                moving_average(tensor(target), tensor(online), self.momentum)
            }
        };
        // Kept for a second place of the same parameter (a clone: nothing is recorded).
        let kept = average.clone().into_primitive().tensor();
        self.averaged.insert(id, Averaged::Done(kept));
        Param::from_mapped_value(id, average, mapper)
    }
}
