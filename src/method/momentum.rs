//! The momentum copy of an online network (documented on `MomentumEncoder`).

use burn::prelude::*;

use super::ema::{cosine_momentum, detached_copy, ema_update, validate_momentum};
use super::ssl_method::{stat, MethodOutput};
use crate::base::error::ConfigError;
use crate::base::Progress;

/// A momentum copy of (a part of) an online network. Build it with [`MomentumEncoder::new`].
///
/// The momentum copy of an online network: MoCo's key encoder, BYOL's target, TiCo's and MoCo
/// v3's momentum encoders, DINO's teacher (solo-learn's `MomentumUpdater` / `momentum_pairs`,
/// here one type). Its invariants, stated once:
/// - it starts as a copy that shares nothing with the online network
///   ([`detached_copy`]: its own batch-norm statistics, no gradient);
/// - after every optimiser step it moves to `m·θ_copy + (1 − m)·θ_online` for the trainable
///   parameters, matched by parameter id ([`ema_update`]); its running
///   statistics follow its own forward passes;
/// - `m` is constant, or rises along a cosine from its base to 1 over training
///   ([`cosine_momentum`]).
///
/// The math and the worked values are in `docs/methods.md#momentum-ema-update`.
#[derive(Debug, Clone)]
pub struct MomentumEncoder<N> {
    /// The copy; `None` only inside an update (taken out, so that the update holds its
    /// parameters' last handles: on a fusion backend a value still held elsewhere when the
    /// operation that replaces it is registered costs an operation of its own to release later).
    network: Option<N>,
    base: f64,
    cosine: bool,
}

impl<N> MomentumEncoder<N> {
    /// A copy of `online` in `fresh` (a newly built module of the same architecture), with
    /// momentum `base` (constant, or rising to 1 along a cosine when `cosine`). `field` names the
    /// setting of `base` in an error. Call it under the seed lock, as every method's `init` is by
    /// [`super::init_method`] (loading into `fresh` draws its optional parameters' lazy values).
    ///
    /// # Errors
    /// A momentum outside `[0, 1]`, named by `field`; `online` larger than the limit of an
    /// enclosing [`crate::base::seed::with_size_limit`] (checked before it is drawn).
    pub fn new<B: Backend>(
        online: &N,
        fresh: N,
        base: f64,
        cosine: bool,
        field: &'static str,
    ) -> Result<Self, ConfigError>
    where
        N: Module<B>,
    {
        validate_momentum(field, base)?;
        // Before the online network is drawn and copied.
        crate::base::seed::check_size(online, "the network a momentum encoder copies")?;
        Ok(Self {
            network: Some(detached_copy(online, fresh)),
            base,
            cosine,
        })
    }

    /// The copy.
    pub fn network(&self) -> &N {
        self.network
            .as_ref()
            .expect("a momentum encoder whose update panicked")
    }

    /// `f` on the copy, taken out and put back.
    fn replace(&mut self, f: impl FnOnce(N) -> N) {
        let network = self
            .network
            .take()
            .expect("a momentum encoder whose update panicked");
        self.network = Some(f(network));
    }

    /// The momentum at `progress`.
    pub fn momentum_at(&self, progress: Progress) -> f64 {
        if self.cosine {
            cosine_momentum(self.base, progress.fraction())
        } else {
            self.base
        }
    }

    /// After an optimiser step: `θ ← m·θ + (1 − m)·θ_online` for every trainable parameter of
    /// the copy, `online` being the network it was copied from or one holding it (BYOL's online
    /// network holds its target's backbone and projector).
    pub fn update<B: Backend, O: Module<B>>(&mut self, online: &O, progress: Progress)
    where
        N: Module<B>,
    {
        let m = self.momentum_at(progress);
        self.replace(|network| ema_update(network, online, m));
    }

    /// Makes the copy the online network again: `θ ← θ_online` for every trainable parameter
    /// (an [`ema_update`] of momentum 0; its batch-norm statistics stay its own). SMoG resets its
    /// momentum encoder so every few hundred steps.
    pub fn reset_to<B: Backend, O: Module<B>>(&mut self, online: &O)
    where
        N: Module<B>,
    {
        self.replace(|network| ema_update(network, online, 0.0));
    }

    /// The copy's record, for a checkpoint.
    pub fn record<B: Backend>(&self) -> N::Record
    where
        N: Module<B>,
    {
        self.network().clone().into_record()
    }

    /// Takes back a checkpoint's record.
    pub fn load_record<B: Backend>(&mut self, record: N::Record)
    where
        N: Module<B>,
    {
        self.replace(|network| network.load_record(record));
    }

    /// A step's output: `loss`, the momentum at `progress` (the `momentum` column) and the
    /// step's `embeddings` ([`MethodOutput::with_embeddings`]).
    pub fn output<B: Backend>(
        &self,
        loss: Tensor<B, 1>,
        progress: Progress,
        embeddings: [Tensor<B, 2>; 2],
    ) -> MethodOutput<B> {
        MethodOutput::new(loss)
            .with_momentum(self.momentum_at(progress))
            .with_embeddings(embeddings)
    }

    /// The momentum at `progress` as a statistic of the step (`momentum` in steps.csv).
    pub fn stat<B: Backend>(
        &self,
        progress: Progress,
        device: &B::Device,
    ) -> (&'static str, Tensor<B, 1>) {
        ("momentum", stat(self.momentum_at(progress), device))
    }
}
