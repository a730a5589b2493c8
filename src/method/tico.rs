//! TiCo (documented on `Tico`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Projected;
use super::momentum::MomentumEncoder;
use super::running::Running;
use super::ssl_method::{online_in, replica_in, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{TicoLoss, TicoLossConfig};

/// Configuration of [`Tico`].
#[derive(Config, Debug)]
pub struct TicoConfig {
    /// Hidden width of the projector (the paper's 4096).
    #[config(default = 4096)]
    pub hidden_dim: usize,
    /// Embedding width (the paper's 256).
    #[config(default = 256)]
    pub output_dim: usize,
    /// Momentum of the momentum encoder at the start (rises to 1 along a cosine).
    #[config(default = 0.99)]
    pub base_momentum: f64,
    /// The loss (`β = 0.9`, `ρ = 20`).
    #[config(default = "TicoLossConfig::new()")]
    pub loss: TicoLossConfig,
}

impl TicoConfig {
    /// Builds TiCo around a backbone made by `backbone` (called twice: online, and a fresh module
    /// into which the momentum encoder's copy is loaded).
    ///
    /// # Errors
    /// A zero width, an impossible momentum, `β` or `ρ`, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Tico<B, M>, ConfigError> {
        let projector = |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim);
        let (online, momentum) =
            Projected::with_momentum_copy(backbone, projector, self.base_momentum, device)?;
        Ok(Tico {
            online,
            momentum,
            loss: self.loss.init()?,
            covariance: Running::new(Tensor::zeros([self.output_dim, self.output_dim], device)),
            replica: None,
        })
    }
}

/// The checkpointed state of [`Tico`]: the momentum encoder and the running covariance.
#[derive(Record)]
pub struct TicoState<B: Backend, M: Backbone<B>> {
    /// The momentum encoder's record.
    pub momentum: <Projected<B, M> as Module<B>>::Record,
    /// The running covariance, `[D, D]`.
    pub covariance: Tensor<B, 2>,
}

/// TiCo. Build it with [`TicoConfig::init`].
///
/// TiCo (Zhu, Moraes, Karakulak, Sobol, Canziani & LeCun, "TiCo: Transformation Invariance and
/// Covariance Contrast for Self-Supervised Visual Representation Learning", 2022,
/// <https://arxiv.org/abs/2206.10698>): an online backbone + projector (`features → 4096 (BN, ReLU)
/// → 256`) and a momentum copy; the online embedding of the first view meets the momentum embedding
/// of the second in the [TiCo loss](crate::loss::TicoLoss), whose running covariance of the online
/// embeddings is an implicit memory bank. The momentum rises along a cosine from `base_momentum` to
/// 1, as in BYOL, the paper's base and lightly's example.
///
/// On several replicas both embeddings are gathered (the running covariance is a statistic of
/// the global batch, the same on every replica).
///
/// The math, the defaults and the worked values are in `docs/methods.md#tico`.
#[derive(Debug, Clone)]
pub struct Tico<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    momentum: MomentumEncoder<Projected<B, M>>,
    loss: TicoLoss,
    covariance: Running<B, 2>,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> Tico<B, M> {
    /// The momentum copy (the momentum encoder): its network and its momentum schedule.
    pub fn momentum_encoder(&self) -> &MomentumEncoder<Projected<B, M>> {
        &self.momentum
    }

    /// The running covariance, `[D, D]`.
    pub fn covariance(&self) -> Tensor<B, 2> {
        self.covariance.value()
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for Tico<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    type State = TicoState<B, M>;

    online_in!(online);

    fn state(&self) -> TicoState<B, M> {
        TicoState {
            momentum: self.momentum.record(),
            covariance: self.covariance.value(),
        }
    }

    fn load_state(&mut self, state: TicoState<B, M>) -> Result<(), ConfigError> {
        self.covariance
            .restore(state.covariance, "output_dim", "TiCo's covariance")?;
        self.momentum.load_record(state.momentum);
        Ok(())
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        let z_a = self.online.forward(view1);
        let z_b = self.momentum.network().forward(view2).detach();
        let embeddings = [z_a.clone(), z_b.clone()];
        let replica = self.replica.as_ref();
        let z_a = Replica::gather_on(replica, z_a);
        let z_b = Replica::gather_on(replica, z_b).detach();
        let (loss, covariance) = self.loss.forward(z_a, z_b, self.covariance.value());
        self.covariance.propose(covariance);
        self.momentum.output(loss, progress, embeddings)
    }

    replica_in!(
        /// Both embeddings are gathered: the loss and the running covariance are the global
        /// batch's, the same on every replica; the gather's backward with the average over replicas
        /// gives the one-device gradient.
        replica
    );

    fn after_step(&mut self, progress: Progress) {
        self.covariance.commit();
        self.momentum.update(&self.online, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{built, host, images, progress, Ad, TinyBackbone as Tiny};

    fn tico() -> Tico<Ad, Tiny<Ad>> {
        built(9, |d| {
            let tiny =
                |d: &<Ad as burn::tensor::backend::BackendTypes>::Device| Tiny::new(16, 6, d);
            TicoConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(tiny, d)
        })
    }

    fn at(step: usize) -> Progress {
        progress(step, 10, 0, 1)
    }

    /// After the step the covariance is `(1 − β)·z_aᵀz_a/N` of the online unit embeddings of the
    /// applied attempt (from zero), computed here by hand; a redrawn attempt leaves no trace.
    #[test]
    fn the_covariance_moves_by_the_applied_attempts_embeddings() {
        let mut m = tico();
        m.forward(images(4, 3.0), images(4, 4.0), at(0));
        assert_eq!(host(m.covariance()), vec![0.0; 16], "not before the step");
        let out = m.forward(images(4, 0.0), images(4, 1.0), at(0));
        let z = host(crate::loss::l2_normalize(
            out.embeddings.unwrap()[0].clone(),
        ));
        m.after_step(at(0));
        let c = host(m.covariance());
        for i in 0..4 {
            for j in 0..4 {
                let b: f64 = (0..4).map(|n| z[n * 4 + i] * z[n * 4 + j]).sum::<f64>() / 4.0;
                assert!((c[i * 4 + j] - 0.1 * b).abs() < 1e-12);
            }
        }
    }
}
