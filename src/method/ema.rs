//! The exponential-moving-average update of the momentum copies (documented on `ema_update`).

use std::collections::HashMap;

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;
use curriculum_ssl_models::kernels::moving_average;

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
/// sit behind an `Arc<Mutex>` in `RunningState`), so a target made by `online.clone()` would
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
    let mut mapper = Average {
        online: collector.tensors,
        momentum,
    };
    target.map(&mut mapper)
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

struct Average<B: Backend> {
    online: HashMap<ParamId, FloatTensor<B>>,
    momentum: f64,
}

impl<B: Backend> ModuleMapper<B> for Average<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(online) = self.online.get(&param.id) else {
            return param;
        };
        let (id, value, mapper) = param.consume();
        let online = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(online.clone()));
        // One kernel of the models crate's on wgpu and CUDA; burn's operations elsewhere.
        let averaged = moving_average(value, online, self.momentum);
        Param::from_mapped_value(id, averaged, mapper)
    }
}
