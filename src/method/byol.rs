//! BYOL (Grill et al. 2020, <https://arxiv.org/abs/2006.07733>): online backbone + projector +
//! predictor; a target backbone + projector that is an EMA of the online ones, the momentum
//! rising along a cosine from `base_momentum` to 1; the normalised-MSE loss `2 − 2cos` with the
//! target detached, on both orderings of the views and **summed** (BYOL §3.1:
//! `L^BYOL = L + L̃`, `L̃` with the views swapped; an average would halve the gradient).
//!
//! The math, the defaults, the paper followed and the worked values are in
//! `docs/methods.md#byol`.

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::Backbone;

use super::branches::ViewThreads;
use super::encoder::{Predicted, Projected};
use super::momentum::MomentumEncoder;
use super::{MethodOutput, Progress, SslMethod};
use crate::base::error::ConfigError;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::negative_cosine::NegativeCosineForm;
use crate::loss::{NegativeCosineLoss, NegativeCosineLossConfig};

/// Configuration of [`Byol`].
#[derive(Config, Debug)]
pub struct ByolConfig {
    /// Hidden width of projector and predictor.
    #[config(default = 4096)]
    pub hidden_dim: usize,
    /// Projection width.
    #[config(default = 256)]
    pub output_dim: usize,
    /// Momentum of the target at the start of training (rises to 1 along a cosine).
    #[config(default = 0.99)]
    pub base_momentum: f64,
    /// Reported form of the loss (BYOL's paper: `2 − 2cos`).
    #[config(default = "NegativeCosineForm::TwoMinusTwoCosine")]
    pub form: NegativeCosineForm,
}

impl ByolConfig {
    /// Builds BYOL around a backbone made by `backbone` (called twice: online, and a fresh
    /// module into which the target's copy is loaded).
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Byol<B, M>, ConfigError> {
        let online_backbone = backbone(device);
        let feature_dim = online_backbone.feature_dim();
        let projector = MlpHeadConfig::new(feature_dim, self.hidden_dim, self.output_dim);
        let predictor = MlpHeadConfig::new(self.output_dim, self.hidden_dim, self.output_dim);
        let online = Predicted {
            backbone: online_backbone,
            projector: projector.init(device)?,
            predictor: predictor.init(device)?,
        };
        crate::base::seed::materialise(&online);
        let fresh = Projected {
            backbone: backbone(device),
            projector: projector.init(device)?,
        };
        let target = MomentumEncoder::new(
            &online.encoder(),
            fresh,
            self.base_momentum,
            true,
            "base_momentum",
        )?;
        Ok(Byol {
            online,
            target,
            loss: NegativeCosineLossConfig::new()
                .with_form(self.form)
                .init()?,
            view_threads: ViewThreads::default(),
            replicated: false,
        })
    }
}

/// The checkpointed state of [`Byol`]: the EMA target (weights and batch-norm statistics).
#[derive(Record)]
pub struct ByolState<B: Backend, M: Backbone<B>> {
    /// The target's record.
    pub target: <Projected<B, M> as Module<B>>::Record,
}

/// BYOL. Build it with [`ByolConfig::init`].
#[derive(Debug, Clone)]
pub struct Byol<B: Backend, M: Backbone<B>> {
    online: Predicted<B, M>,
    target: MomentumEncoder<Projected<B, M>>,
    loss: NegativeCosineLoss,
    /// The two views' online passes back-propagated on two threads, when on.
    view_threads: ViewThreads<B, Predicted<B, M>>,
    /// Whether this is one replica of a data-parallel run (its passes stay on its thread).
    replicated: bool,
}

impl<B: Backend, M: Backbone<B>> Byol<B, M> {
    /// The EMA target.
    pub fn target(&self) -> &Projected<B, M> {
        self.target.network()
    }

    /// The target's momentum at `progress`.
    pub fn momentum_at(&self, progress: Progress) -> f64 {
        self.target.momentum_at(progress)
    }
}

impl<B: AutodiffBackend, M: Backbone<B> + AutodiffModule<B>> SslMethod<B> for Byol<B, M>
where
    M::InnerModule: Backbone<B::InnerBackend>,
{
    type Online = Predicted<B, M>;
    type Backbone = M;
    type State = ByolState<B, M>;

    fn online(&self) -> &Self::Online {
        &self.online
    }

    fn backbone(&self) -> &M {
        &self.online.backbone
    }

    fn state(&self) -> ByolState<B, M> {
        ByolState {
            target: self.target.record(),
        }
    }

    fn load_state(&mut self, state: ByolState<B, M>) -> Result<(), ConfigError> {
        self.target.load_record(state.target);
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
        let ([p1, p2], _) = self.view_threads.passes(
            &self.online,
            [view1.clone(), view2.clone()],
            true,
            |net, x| (net.forward(x).1, ()),
        );
        let target = |x: Tensor<B, 4>| self.target.network().forward(x).detach();
        let (t1, t2) = (target(view1), target(view2));
        let embeddings = Some([t1.clone(), t2.clone()]);
        // BYOL's symmetrised loss is the sum of the two orderings (§3.1: `L^BYOL = L + L̃`), not
        // their mean.
        let loss = self.loss.forward(p1, t2) + self.loss.forward(p2, t1);
        let stats = vec![self.target.stat(progress, &loss.device())];
        MethodOutput {
            loss,
            stats,
            embeddings,
        }
    }

    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        self.view_threads.gradients(loss, &self.online)
    }

    fn set_view_threads(&mut self, on: bool) {
        self.view_threads.set(on && !self.replicated);
    }

    /// The loss is a mean over images: each replica's is the mean over its shard, and the
    /// average of the replicas' gradients is the one-device gradient (with synchronised batch
    /// norms). Nothing is gathered.
    fn set_replica(&mut self, _: Replica<B>) -> Result<(), ConfigError> {
        self.view_threads.set(false);
        self.replicated = true;
        Ok(())
    }

    fn after_step(&mut self, progress: Progress) {
        self.target.update(&self.online, progress);
    }
}
