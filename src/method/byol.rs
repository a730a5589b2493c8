//! BYOL (documented on `Byol`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::{predicted_with_copy, Predicted, PredictedWithCopy, Projected};
use super::momentum::MomentumEncoder;
use super::ssl_method::{momentum_state, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{NegativeCosineForm, NegativeCosineLoss, NegativeCosineLossConfig};

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
        let projector = |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim);
        let predictor = MlpHeadConfig::new(self.output_dim, self.hidden_dim, self.output_dim);
        let networks =
            PredictedWithCopy::new(backbone, projector, &predictor, self.base_momentum, device)?;
        let loss = NegativeCosineLossConfig::new().with_form(self.form);
        Ok(Byol {
            networks,
            loss: loss.init()?,
        })
    }
}

/// BYOL. Build it with [`ByolConfig::init`].
///
/// BYOL (Grill et al. 2020, <https://arxiv.org/abs/2006.07733>): online backbone + projector +
/// predictor; a target backbone + projector that is an EMA of the online ones, the momentum
/// rising along a cosine from `base_momentum` to 1; the normalised-MSE loss `2 − 2cos` with the
/// target detached, on both orderings of the views and **summed** (BYOL §3.1:
/// `L^BYOL = L + L̃`, `L̃` with the views swapped; an average would halve the gradient).
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#byol`.
#[derive(Debug, Clone)]
pub struct Byol<B: Backend, M: Backbone<B>> {
    /// The online network and the target (the momentum copy of its encoder).
    networks: PredictedWithCopy<B, M>,
    loss: NegativeCosineLoss,
}

impl<B: Backend, M: Backbone<B>> Byol<B, M> {
    /// The momentum copy (the EMA target): its network and its momentum schedule.
    pub fn target(&self) -> &MomentumEncoder<Projected<B, M>> {
        self.networks.copy()
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> Byol<B, M> {
    /// BYOL's step with the target's projections of the two views (`[N, D]` each, detached)
    /// replaced by `targets` before the loss: BYOL's own step passes them through; NNBYOL
    /// ([`crate::method::NnByol`]) puts their nearest neighbours in a support set in their place.
    /// The step's embeddings are the target's projections either way.
    pub(crate) fn forward_to(
        &mut self,
        views: Views<B>,
        progress: Progress,
        targets: impl FnOnce([Tensor<B, 2>; 2]) -> [Tensor<B, 2>; 2],
    ) -> MethodOutput<B> {
        self.networks
            .step(views.two(), progress, |[p1, p2], projections| {
                let [t1, t2] = targets(projections);
                self.loss.forward(p1, t2) + self.loss.forward(p2, t1)
            })
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for Byol<B, M> {
    type Online = Predicted<B, M>;
    type Backbone = M;

    predicted_with_copy!(networks);

    momentum_state!(target in networks.copy: Projected<B, M>);

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        // The views as one batch: both orderings in one call of the loss, each view's
        // predictions against the other view's projections, row for row (twice the mean over
        // the `2N` rows is the sum of the two means).
        let loss = &self.loss;
        let stacked = self
            .networks
            .step_stacked(views.two(), progress, |predictions, [t1, t2]| {
                loss.forward(predictions, Tensor::cat(vec![t2, t1], 0))
                    .mul_scalar(2.0)
            });
        match stacked {
            Ok(output) => output,
            Err([view1, view2]) => {
                self.forward_to(Views::pair(view1, view2), progress, |targets| targets)
            }
        }
    }

    /// The loss is a mean over images: each replica's is the mean over its shard, and the
    /// average of the replicas' gradients is the one-device gradient (with synchronised batch
    /// norms). Nothing is gathered.
    fn set_replica(&mut self, _: Replica<B>) -> Result<(), ConfigError> {
        self.networks.replicated();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{built, cosine, host, images, mean_over_rows, progress, Ad};
    use crate::optim::SgdConfig;
    use burn::optim::Optimizer;

    fn byol() -> Byol<Ad, Tiny<Ad>> {
        built(5, |d| {
            ByolConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(|d| Tiny::new(16, 6, d), d)
        })
    }

    /// The loss is `2 − 2·cos(p, t)` averaged over the images, summed over both orderings of
    /// the views (BYOL §3.1), recomputed here on the host from the online predictions and the
    /// target's projections.
    #[test]
    fn the_loss_sums_both_orderings_of_two_minus_two_cosine() {
        let mut m = byol();
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let predict = |x: &Tensor<Ad, 4>| m.online().forward(x.clone()).1;
        let target = |x: &Tensor<Ad, 4>| m.target().network().forward(x.clone());
        let term = |p, t| mean_over_rows(p, t, |p, t| 2.0 - 2.0 * cosine(p, t));
        let expected = term(predict(&v1), target(&v2)) + term(predict(&v2), target(&v1));
        let loss = host(m.forward(v1, v2, progress(0, 10, 0, 1)).loss)[0];
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
    }

    /// After an optimiser step the target is `m·θ_target + (1 − m)·θ_online`, `m` on the cosine
    /// from the base momentum to 1 (`1 − (1 − m₀)·(cos(π·t) + 1)/2` at fraction `t`), checked on
    /// the backbone's weights; the optimiser step itself leaves the target as it was.
    #[test]
    fn the_target_moves_by_the_scheduled_momentum() {
        let mut m = byol();
        let at = progress(3, 10, 0, 1);
        let target_before = host(m.target().network().backbone.fc.weight.val());
        let out = m.forward(images(4, 0.0), images(4, 1.0), at);
        let grads = m.gradients(&out.loss);
        let mut optim = SgdConfig::new()
            .init::<Ad, Predicted<Ad, Tiny<Ad>>>()
            .unwrap();
        m.set_online(optim.step(0.5, m.online().clone(), grads));
        let stepped = host(m.target().network().backbone.fc.weight.val());
        assert_eq!(
            stepped, target_before,
            "the optimiser does not move the target"
        );
        m.after_step(at);
        let online = host(m.online().backbone.fc.weight.val());
        let after = host(m.target().network().backbone.fc.weight.val());
        let tau = 1.0 - 0.01 * ((std::f64::consts::PI * 0.3).cos() + 1.0) / 2.0;
        assert!(online != target_before, "the online network moved");
        for ((a, t), o) in after.iter().zip(&target_before).zip(&online) {
            assert!((a - (tau * t + (1.0 - tau) * o)).abs() < 1e-12);
        }
    }
}
