//! NNSiam (documented on `NnSiam`).

use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewPasses;
use super::encoder::Predicted;
use super::queue::{KeyQueue, KeyQueueConfig, SupportSetState};
use super::simsiam::{SimSiam, SimSiamConfig};
use super::ssl_method::{MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;

/// Configuration of [`NnSiam`].
#[derive(Config, Debug)]
pub struct NnSiamConfig {
    /// SimSiam's networks (projection width 2048; solo-learn's NNSiam widens the predictor's
    /// bottleneck to 4096, SimSiam's paper has 512).
    #[config(default = "SimSiamConfig::new()")]
    pub simsiam: SimSiamConfig,
    /// Projections in the support set (solo-learn's 65,536).
    #[config(default = 65536)]
    pub support_set_size: usize,
}

impl NnSiamConfig {
    /// Builds NNSiam around the backbone `backbone` makes (called once) for global batches of
    /// `batch_size` images (the support set takes that many projections per step).
    ///
    /// # Errors
    /// A zero width, or a support set that is not a multiple of the batch size.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        batch_size: usize,
        device: &B::Device,
    ) -> Result<NnSiam<B, M>, ConfigError> {
        let simsiam = self.simsiam.init(backbone, device)?;
        let support = KeyQueueConfig::new(self.support_set_size, self.simsiam.dim)
            .init(batch_size, device)
            .map_err(|e| ConfigError::new("support_set_size", e.reason))?;
        Ok(NnSiam {
            simsiam,
            support,
            replica: None,
        })
    }
}

/// The checkpointed state of [`NnSiam`]: the support set and its pointer.
pub type NnSiamState<B> = SupportSetState<B>;

/// NNSiam. Build it with [`NnSiamConfig::init`].
///
/// NNSiam (solo-learn's `solo/methods/nnsiam.py`: SimSiam, Chen & He 2021,
/// <https://arxiv.org/abs/2011.10566>, with the nearest-neighbour positives of NNCLR, Dwibedi et
/// al. 2021, <https://arxiv.org/abs/2104.14548>): SimSiam's networks and loss, with each view's
/// stop-gradient projection replaced by its nearest neighbour (cosine, top-1) in a support set of
/// earlier projections:
///
/// ```text
/// L = D(p1, NN(z2))/2 + D(p2, NN(z1))/2,   D(p, z) = −cos(p, z)
/// ```
///
/// The support set is a FIFO queue ([`KeyQueue`]) of the first view's L2-normalised projections
/// (solo-learn's 65,536; random unit vectors at the start), filled after the step, so the batch
/// never finds itself; the neighbours carry no gradient. There is no momentum encoder.
///
/// On several replicas the support set takes every replica's projections (the same set on every
/// replica, as solo-learn's gathered enqueue); the loss is a mean over images, so the replicas'
/// averaged gradients are the one-device gradient with nothing else gathered.
///
/// The math, the defaults and the worked values are in `docs/methods.md#nnsiam`.
#[derive(Debug, Clone)]
pub struct NnSiam<B: Backend, M: Backbone<B>> {
    simsiam: SimSiam<B, M>,
    support: KeyQueue<B>,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> NnSiam<B, M> {
    /// The support set.
    pub fn support_set(&self) -> &KeyQueue<B> {
        &self.support
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for NnSiam<B, M> {
    type Online = Predicted<B, M>;
    type Backbone = M;
    type State = NnSiamState<B>;

    fn online(&self) -> &Self::Online {
        self.simsiam.online()
    }

    fn check_batch_size(&self, batch_size: usize) -> Result<(), ConfigError> {
        self.support.check_steps(batch_size, batch_size)
    }

    fn state(&self) -> NnSiamState<B> {
        NnSiamState {
            support: self.support.keys(),
            pointer: self.support.pointer(),
        }
    }

    fn load_state(&mut self, state: NnSiamState<B>) -> Result<(), ConfigError> {
        self.support.restore(
            state.support,
            state.pointer,
            "support_set_size",
            "NNSiam's support set",
        )
    }

    fn set_online(&mut self, online: Self::Online) {
        self.simsiam.set_online(online);
    }

    fn forward_views(&mut self, views: Views<B>, _: Progress) -> MethodOutput<B> {
        let (support, replica) = (&mut self.support, self.replica.as_ref());
        self.simsiam
            .forward_to(views, |z| support.neighbours_of_pair(replica, z))
    }

    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        self.simsiam.gradients(loss)
    }

    fn set_view_passes(&mut self, passes: ViewPasses) {
        self.simsiam.set_view_passes(passes);
    }

    /// The support set takes every replica's projections; the loss is a mean over images, so
    /// the average of the replicas' gradients is the one-device gradient (with synchronised
    /// batch norms).
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        self.simsiam.set_replica(replica.clone())?;
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, _: Progress) {
        self.support.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::l2_normalize;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{cosine, host, images, mean_over_rows, progress, Ad};

    fn nnsiam() -> NnSiam<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 7, |d| {
            NnSiamConfig::new()
                .with_simsiam(SimSiamConfig::new().with_dim(4).with_predictor_dim(3))
                .with_support_set_size(12)
                .init(|d| Tiny::new(16, 6, d), 4, d)
        })
        .unwrap()
    }

    /// The row of `bank` (`[K, D]`, unit rows) of largest cosine with `z`, by a search over
    /// every row.
    fn nearest_by_search(bank: &[f64], z: &[f64]) -> Vec<f64> {
        let d = z.len();
        let cos = |k: usize| -> f64 { cosine(&bank[k * d..(k + 1) * d], z) };
        let best = (0..bank.len() / d)
            .max_by(|&a, &b| cos(a).total_cmp(&cos(b)))
            .unwrap();
        bank[best * d..(best + 1) * d].to_vec()
    }

    /// The loss is `−cos(p₁, NN(z₂))/2 − cos(p₂, NN(z₁))/2` averaged over the images
    /// (solo-learn's `simsiam_loss_func(p1, nn2) / 2 + simsiam_loss_func(p2, nn1) / 2`), the
    /// neighbours found here by a search over every row of the support set.
    #[test]
    fn the_loss_is_simsiams_against_the_other_views_neighbours() {
        let mut m = nnsiam();
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let bank = host(m.support_set().keys());
        let (z1, p1) = m.online().forward(v1.clone());
        let (z2, p2) = m.online().forward(v2.clone());
        let neighbours = |z: Tensor<Ad, 2>| -> Tensor<Ad, 2> {
            let z = host(z);
            let rows: Vec<f64> = z
                .chunks(4)
                .flat_map(|r| nearest_by_search(&bank, r))
                .collect();
            Tensor::from_data(TensorData::new(rows, [4, 4]), &Default::default())
        };
        let term = |p, nn| mean_over_rows(p, nn, |p, nn| -cosine(p, nn));
        let expected = (term(p1, neighbours(z2)) + term(p2, neighbours(z1))) / 2.0;
        let loss = host(m.forward(v1, v2, progress(0, 10, 0, 1)).loss)[0];
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
    }

    /// After the step the support set holds the first view's unit projections at the old
    /// pointer; a redrawn attempt (batch curation) leaves no trace.
    #[test]
    fn the_support_set_takes_the_applied_attempts_first_view() {
        let mut m = nnsiam();
        m.forward(images(4, 3.0), images(4, 4.0), progress(0, 10, 0, 1));
        let out = m.forward(images(4, 0.0), images(4, 1.0), progress(0, 10, 0, 1));
        let z = host(l2_normalize(out.embeddings.unwrap()[0].clone()));
        m.after_step(progress(0, 10, 0, 1));
        let keys = host(m.support_set().keys());
        for (a, b) in keys[..16].iter().zip(&z) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(m.support_set().pointer(), 4);
    }
}
