//! NNBYOL (documented on `NnByol`).

use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewPasses;
use super::byol::{Byol, ByolConfig};
use super::encoder::{Predicted, Projected};
use super::momentum::MomentumEncoder;
use super::queue::{KeyQueue, KeyQueueConfig};
use super::ssl_method::{MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;

/// Configuration of [`NnByol`].
#[derive(Config, Debug)]
pub struct NnByolConfig {
    /// BYOL's networks, momentum and loss form (solo-learn's NNBYOL: BYOL's 4096 → 256 heads,
    /// momentum 0.99 → 1).
    #[config(default = "ByolConfig::new()")]
    pub byol: ByolConfig,
    /// Target projections in the support set (solo-learn's 65,536).
    #[config(default = 65536)]
    pub support_set_size: usize,
}

impl NnByolConfig {
    /// Builds NNBYOL around a backbone made by `backbone` (called twice, as
    /// [`ByolConfig::init`]) for global batches of `batch_size` images (the support set takes
    /// that many projections per step).
    ///
    /// # Errors
    /// A zero width, a momentum outside `[0, 1]`, or a support set that is not a multiple of the
    /// batch size.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        batch_size: usize,
        device: &B::Device,
    ) -> Result<NnByol<B, M>, ConfigError> {
        let byol = self.byol.init(backbone, device)?;
        let support = KeyQueueConfig::new(self.support_set_size, self.byol.output_dim)
            .init(batch_size, device)
            .map_err(|e| ConfigError::new("support_set_size", e.reason))?;
        Ok(NnByol {
            byol,
            support,
            replica: None,
        })
    }
}

/// The checkpointed state of [`NnByol`]: the EMA target and the support set.
#[derive(Record)]
pub struct NnByolState<B: Backend, M: Backbone<B>> {
    /// The target's record.
    pub target: <Projected<B, M> as Module<B>>::Record,
    /// The support set, `[size, dim]`.
    pub support: Tensor<B, 2>,
    /// The slot the next projections are written to.
    pub pointer: usize,
}

/// NNBYOL. Build it with [`NnByolConfig::init`].
///
/// NNBYOL (solo-learn's `solo/methods/nnbyol.py`: BYOL, Grill et al. 2020,
/// <https://arxiv.org/abs/2006.07733>, with the nearest-neighbour targets of NNCLR, Dwibedi et
/// al. 2021, <https://arxiv.org/abs/2104.14548>): BYOL's online and EMA target networks and
/// loss, with each view's target projection replaced by its nearest neighbour (cosine, top-1) in
/// a support set of earlier target projections:
///
/// ```text
/// L = (2 − 2cos(p1, NN(t2))) + (2 − 2cos(p2, NN(t1)))      (summed, as BYOL's)
/// ```
///
/// The support set is a FIFO queue ([`KeyQueue`]) of the first view's L2-normalised target
/// projections (solo-learn's 65,536; random unit vectors at the start), filled after the step;
/// the neighbours carry no gradient.
///
/// On several replicas the support set takes every replica's projections (the same set on every
/// replica, as solo-learn's gathered enqueue); the loss is a mean over images, so the replicas'
/// averaged gradients are the one-device gradient with nothing else gathered.
///
/// The math, the defaults and the worked values are in `docs/methods.md#nnbyol`.
#[derive(Debug, Clone)]
pub struct NnByol<B: Backend, M: Backbone<B>> {
    byol: Byol<B, M>,
    support: KeyQueue<B>,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> NnByol<B, M> {
    /// The support set.
    pub fn support_set(&self) -> &KeyQueue<B> {
        &self.support
    }

    /// The momentum copy (the EMA target): its network and its momentum schedule.
    pub fn target(&self) -> &MomentumEncoder<Projected<B, M>> {
        self.byol.target()
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for NnByol<B, M> {
    type Online = Predicted<B, M>;
    type Backbone = M;
    type State = NnByolState<B, M>;

    fn online(&self) -> &Self::Online {
        self.byol.online()
    }

    fn check_batch_size(&self, batch_size: usize) -> Result<(), ConfigError> {
        self.support.check_steps(batch_size, batch_size)
    }

    fn state(&self) -> NnByolState<B, M> {
        NnByolState {
            target: self.byol.state().target,
            support: self.support.keys(),
            pointer: self.support.pointer(),
        }
    }

    fn load_state(&mut self, state: NnByolState<B, M>) -> Result<(), ConfigError> {
        self.support.restore(
            state.support,
            state.pointer,
            "support_set_size",
            "NNBYOL's support set",
        )?;
        self.byol.load_state(super::ssl_method::TargetState {
            target: state.target,
        })
    }

    fn set_online(&mut self, online: Self::Online) {
        self.byol.set_online(online);
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (support, replica) = (&mut self.support, self.replica.as_ref());
        self.byol
            .forward_to(views, progress, |t| support.neighbours_of_pair(replica, t))
    }

    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        self.byol.gradients(loss)
    }

    fn set_view_passes(&mut self, passes: ViewPasses) {
        self.byol.set_view_passes(passes);
    }

    /// The support set takes every replica's target projections; the loss is a mean over
    /// images, so the average of the replicas' gradients is the one-device gradient (with
    /// synchronised batch norms).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.byol.set_replica(replica.clone())?;
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, progress: Progress) {
        self.byol.after_step(progress);
        self.support.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::l2_normalize;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{cosine, host, images, mean_over_rows, progress, Ad};

    fn nnbyol() -> NnByol<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 9, |d| {
            NnByolConfig::new()
                .with_byol(ByolConfig::new().with_hidden_dim(8).with_output_dim(4))
                .with_support_set_size(12)
                .init(|d| Tiny::new(16, 6, d), 4, d)
        })
        .unwrap()
    }

    /// The support-set row of largest cosine with each row of `z`, by a search over every row.
    fn nearest_by_search(bank: &[f64], z: Tensor<Ad, 2>) -> Tensor<Ad, 2> {
        let rows: Vec<f64> = host(z)
            .chunks(4)
            .flat_map(|z| {
                let cos = |k: usize| cosine(&bank[k * 4..(k + 1) * 4], z);
                let best = (0..bank.len() / 4)
                    .max_by(|&a, &b| cos(a).total_cmp(&cos(b)))
                    .unwrap();
                bank[best * 4..(best + 1) * 4].to_vec()
            })
            .collect();
        Tensor::from_data(TensorData::new(rows, [4, 4]), &Default::default())
    }

    /// The loss is `2 − 2·cos(p₁, NN(t₂)) + 2 − 2·cos(p₂, NN(t₁))` averaged over the images
    /// (solo-learn's `byol_loss_func(p1, nn2) + byol_loss_func(p2, nn1)`), the target's
    /// projections' neighbours found here by a search over every row of the support set.
    #[test]
    fn the_loss_sums_byols_against_the_targets_neighbours() {
        let mut m = nnbyol();
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let bank = host(m.support_set().keys());
        let predict = |x: &Tensor<Ad, 4>| m.online().forward(x.clone()).1;
        let target = |x: &Tensor<Ad, 4>| m.target().network().forward(x.clone());
        let term = |p, t| mean_over_rows(p, t, |p, t| 2.0 - 2.0 * cosine(p, t));
        let expected = term(predict(&v1), nearest_by_search(&bank, target(&v2)))
            + term(predict(&v2), nearest_by_search(&bank, target(&v1)));
        let loss = host(m.forward(v1, v2, progress(0, 10, 0, 1)).loss)[0];
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
    }

    /// After the step the support set holds the first view's unit target projections (taken
    /// before the target's EMA update) at the old pointer.
    #[test]
    fn the_support_set_takes_the_first_views_target_projections() {
        let mut m = nnbyol();
        let at = progress(3, 10, 0, 1);
        let v1 = images::<Ad>(4, 0.0);
        let t1 = host(l2_normalize(m.target().network().forward(v1.clone())));
        m.forward(v1, images(4, 1.0), at);
        m.after_step(at);
        let keys = host(m.support_set().keys());
        for (a, b) in keys[..16].iter().zip(&t1) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(m.support_set().pointer(), 4);
    }
}
