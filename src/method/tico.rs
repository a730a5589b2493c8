//! TiCo (Zhu, Moraes, Karakulak, Sobol, Canziani & LeCun, "TiCo: Transformation Invariance and
//! Covariance Contrast for Self-Supervised Visual Representation Learning", 2022,
//! <https://arxiv.org/abs/2206.10698>): an online backbone + projector (`features → 4096 (BN, ReLU)
//! → 256`) and a momentum copy; the online embedding of the first view meets the momentum embedding
//! of the second in the [TiCo loss](crate::loss::tico), whose running covariance of the online
//! embeddings is an implicit memory bank. The momentum rises along a cosine from `base_momentum` to
//! 1, as in BYOL, the paper's base and lightly's example.
//!
//! On several replicas both embeddings are gathered (the running covariance is a statistic of
//! the global batch, the same on every replica).
//!
//! The math, the defaults and the worked values are in `docs/methods.md#tico`.

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::Backbone;

use super::encoder::Projected;
use super::momentum::MomentumEncoder;
use super::{MethodOutput, Progress, SslMethod};
use crate::base::error::ConfigError;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{TiCoLoss, TiCoLossConfig};

/// Configuration of [`TiCo`].
#[derive(Config, Debug)]
pub struct TiCoConfig {
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
    #[config(default = "TiCoLossConfig::new()")]
    pub loss: TiCoLossConfig,
}

impl TiCoConfig {
    /// Builds TiCo around a backbone made by `backbone` (called twice: online, and a fresh module
    /// into which the momentum encoder's copy is loaded).
    ///
    /// # Errors
    /// A zero width, an impossible momentum, `β` or `ρ`, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<TiCo<B, M>, ConfigError> {
        let online_backbone = backbone(device);
        let projector = MlpHeadConfig::new(
            online_backbone.feature_dim(),
            self.hidden_dim,
            self.output_dim,
        );
        let online = Projected {
            backbone: online_backbone,
            projector: projector.init(device)?,
        };
        let fresh = Projected {
            backbone: backbone(device),
            projector: projector.init(device)?,
        };
        let momentum =
            MomentumEncoder::new(&online, fresh, self.base_momentum, true, "base_momentum")?;
        Ok(TiCo {
            online,
            momentum,
            loss: self.loss.init()?,
            covariance: Tensor::zeros([self.output_dim, self.output_dim], device),
            pending: None,
            replica: None,
        })
    }
}

/// The checkpointed state of [`TiCo`]: the momentum encoder and the running covariance.
#[derive(Record)]
pub struct TiCoState<B: Backend, M: Backbone<B>> {
    /// The momentum encoder's record.
    pub momentum: <Projected<B, M> as Module<B>>::Record,
    /// The running covariance, `[D, D]`.
    pub covariance: Tensor<B, 2>,
}

/// TiCo. Build it with [`TiCoConfig::init`].
#[derive(Debug, Clone)]
pub struct TiCo<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    momentum: MomentumEncoder<Projected<B, M>>,
    loss: TiCoLoss,
    covariance: Tensor<B, 2>,
    /// The covariance after the step being computed.
    pending: Option<Tensor<B, 2>>,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> TiCo<B, M> {
    /// The momentum encoder.
    pub fn momentum_encoder(&self) -> &Projected<B, M> {
        self.momentum.network()
    }

    /// The running covariance, `[D, D]`.
    pub fn covariance(&self) -> Tensor<B, 2> {
        self.covariance.clone()
    }

    /// The momentum at `progress`.
    pub fn momentum_at(&self, progress: Progress) -> f64 {
        self.momentum.momentum_at(progress)
    }
}

impl<B: AutodiffBackend, M: Backbone<B> + AutodiffModule<B>> SslMethod<B> for TiCo<B, M>
where
    M::InnerModule: Backbone<B::InnerBackend>,
{
    type Online = Projected<B, M>;
    type Backbone = M;
    type State = TiCoState<B, M>;

    fn online(&self) -> &Self::Online {
        &self.online
    }

    fn backbone(&self) -> &M {
        &self.online.backbone
    }

    fn state(&self) -> TiCoState<B, M> {
        TiCoState {
            momentum: self.momentum.record(),
            covariance: self.covariance.clone(),
        }
    }

    fn load_state(&mut self, state: TiCoState<B, M>) -> Result<(), ConfigError> {
        if state.covariance.dims() != self.covariance.dims() {
            return Err(ConfigError::new(
                "output_dim",
                format!(
                    "the checkpoint's covariance has shape {:?}, this TiCo's {:?}",
                    state.covariance.dims(),
                    self.covariance.dims()
                ),
            ));
        }
        self.momentum.load_record(state.momentum);
        self.covariance = state.covariance.set_require_grad(false);
        self.pending = None;
        Ok(())
    }

    fn set_online(&mut self, online: Self::Online) {
        self.online = online;
    }

    fn forward(
        &mut self,
        view1: Tensor<B, 4>,
        view2: Tensor<B, 4>,
        progress: Progress,
    ) -> MethodOutput<B> {
        let z_a = self.online.forward(view1);
        let z_b = self.momentum.network().forward(view2).detach();
        let embeddings = Some([z_a.clone().detach(), z_b.clone()]);
        let (z_a, z_b) = match &self.replica {
            Some(r) => (r.gather(z_a), r.gather(z_b).detach()),
            None => (z_a, z_b),
        };
        let (loss, covariance) = self.loss.forward(z_a, z_b, self.covariance.clone());
        self.pending = Some(covariance.set_require_grad(false));
        let stats = vec![self.momentum.stat(progress, &loss.device())];
        MethodOutput {
            loss,
            stats,
            embeddings,
        }
    }

    /// Both embeddings are gathered: the loss and the running covariance are the global batch's,
    /// the same on every replica; the gather's backward with the average over replicas gives
    /// the one-device gradient.
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, progress: Progress) {
        if let Some(covariance) = self.pending.take() {
            self.covariance = covariance;
        }
        self.momentum.update(&self.online, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::TinyBackbone as Tiny;
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::LinearConfig;

    type Ad = Autodiff<NdArray<f64>>;

    fn tico() -> TiCo<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 9, |d| {
            let tiny = |d: &<Ad as burn::tensor::backend::BackendTypes>::Device| Tiny {
                fc: LinearConfig::new(16, 6).init(d),
            };
            TiCoConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(tiny, d)
        })
        .unwrap()
    }

    fn images(n: usize, shift: f64) -> Tensor<Ad, 4> {
        let values: Vec<f64> = (0..n * 16)
            .map(|i| (0.41 * i as f64 + shift).sin())
            .collect();
        Tensor::from_data(TensorData::new(values, [n, 1, 4, 4]), &Default::default())
    }

    fn host<const D: usize>(x: Tensor<Ad, D>) -> Vec<f64> {
        x.into_data().convert::<f64>().to_vec().unwrap()
    }

    fn at(step: usize) -> Progress {
        Progress {
            step,
            total_steps: 10,
            epoch: 0,
            total_epochs: 1,
        }
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
