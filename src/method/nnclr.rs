//! NNCLR (documented on `NnClr`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Predicted;
use super::queue::{KeyQueue, KeyQueueConfig, SupportSetState};
use super::ssl_method::{online_in, replica_in, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{l2_normalize, NnClrLoss, NnClrLossConfig};

/// Configuration of [`NnClr`].
#[derive(Config, Debug)]
pub struct NnClrConfig {
    /// Hidden width of the projector (the paper's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width (the paper's 256).
    #[config(default = 256)]
    pub output_dim: usize,
    /// Hidden width of the predictor (the paper's 4096).
    #[config(default = 4096)]
    pub predictor_hidden_dim: usize,
    /// Projections in the support set (the paper's 98,304).
    #[config(default = 98304)]
    pub support_set_size: usize,
    /// The loss (temperature 0.1).
    #[config(default = "NnClrLossConfig::new()")]
    pub loss: NnClrLossConfig,
}

impl NnClrConfig {
    /// Builds NNCLR around the backbone `backbone` makes (called once) for global batches of
    /// `batch_size` images (the support set takes that many projections per step).
    ///
    /// # Errors
    /// A zero width, or a support set that is not a multiple of the batch size.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        batch_size: usize,
        device: &B::Device,
    ) -> Result<NnClr<B, M>, ConfigError> {
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .with_num_layers(3)
                .with_output_batch_norm(true)
                .init(device)?;
        let predictor =
            MlpHeadConfig::new(self.output_dim, self.predictor_hidden_dim, self.output_dim)
                .init(device)?;
        let support = KeyQueueConfig::new(self.support_set_size, self.output_dim)
            .init(batch_size, device)
            .map_err(|e| ConfigError::new("support_set_size", e.reason))?;
        Ok(NnClr {
            online: Predicted {
                backbone,
                projector,
                predictor,
            },
            support,
            loss: self.loss.init()?,
            replica: None,
        })
    }
}

/// The checkpointed state of [`NnClr`]: the support set and its pointer.
pub type NnClrState<B> = SupportSetState<B>;

/// NNCLR. Build it with [`NnClrConfig::init`].
///
/// NNCLR (Dwibedi et al., "With a Little Help from My Friends: Nearest-Neighbor Contrastive
/// Learning of Visual Representations", ICCV 2021, <https://arxiv.org/abs/2104.14548>): backbone,
/// three-layer projector (`features → 2048 → 2048 → 256`, BatchNorm after every layer, the output's
/// included) and predictor (`256 → 4096 (BN, ReLU) → 256`); each view's projection is replaced by
/// its nearest neighbour (cosine, top-1) in a support set of earlier projections, which must pick
/// out the other view's prediction among the batch's ([`NnClrLoss`](crate::loss::NnClrLoss)).
///
/// The support set is a FIFO queue ([`KeyQueue`]) of L2-normalised first-view projections, 98,304
/// of them in the paper, filled after each step with the batch's (random unit vectors at the
/// start, as lightly's memory bank); the neighbours carry no gradient. The loss is symmetrised:
/// `(L(NN(z1), p2) + L(NN(z2), p1)) / 2`.
///
/// On several replicas the support set takes every replica's projections (the same set on every
/// replica), and the loss, whose negatives are the batch's predictions, is computed on the
/// gathered neighbours and predictions, as SimCLR's.
///
/// The math, the defaults and the worked values are in `docs/methods.md#nnclr`.
#[derive(Debug, Clone)]
pub struct NnClr<B: Backend, M: Backbone<B>> {
    online: Predicted<B, M>,
    support: KeyQueue<B>,
    loss: NnClrLoss,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> NnClr<B, M> {
    /// The support set.
    pub fn support_set(&self) -> &KeyQueue<B> {
        &self.support
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for NnClr<B, M> {
    type Online = Predicted<B, M>;
    type Backbone = M;
    type State = NnClrState<B>;

    online_in!(online);

    fn check_batch_size(&self, batch_size: usize) -> Result<(), ConfigError> {
        self.support.check_steps(batch_size, batch_size)
    }

    fn state(&self) -> NnClrState<B> {
        NnClrState {
            support: self.support.keys(),
            pointer: self.support.pointer(),
        }
    }

    fn load_state(&mut self, state: NnClrState<B>) -> Result<(), ConfigError> {
        self.support.restore(
            state.support,
            state.pointer,
            "support_set_size",
            "NNCLR's support set",
        )
    }

    fn forward_views(&mut self, views: Views<B>, _: Progress) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        let pass = |x: Tensor<B, 4>| self.online.forward(x);
        let ((z1, p1), (z2, p2)) = (pass(view1), pass(view2));
        let (nn1, nn2) = (
            self.support.nearest(z1.clone()),
            self.support.nearest(z2.clone()),
        );
        let mine = l2_normalize(z1.clone().detach());
        let (nn1, nn2, p1, p2, everyone) = match &self.replica {
            Some(r) => (
                r.gather(nn1).detach(),
                r.gather(nn2).detach(),
                r.gather(p1),
                r.gather(p2),
                r.gather(mine).detach(),
            ),
            None => (nn1, nn2, p1, p2, mine),
        };
        let loss = (self.loss.forward(nn1, p2) + self.loss.forward(nn2, p1)).mul_scalar(0.5);
        self.support.stage(everyone);
        MethodOutput::new(loss).with_embeddings([z1, z2])
    }

    replica_in!(
        /// The support set takes every replica's projections; the loss is computed on the gathered
        /// neighbours and predictions (the same everywhere), and the gather's backward with the
        /// average over replicas gives the one-device gradient.
        replica
    );

    fn after_step(&mut self, _: Progress) {
        self.support.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};

    fn nnclr() -> NnClr<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 8, |d| {
            NnClrConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_predictor_hidden_dim(8)
                .with_support_set_size(12)
                .init(|d| Tiny::new(16, 6, d), 4, d)
        })
        .unwrap()
    }

    fn at(step: usize) -> Progress {
        progress(step, 10, 0, 1)
    }

    /// The neighbour of each projection is the support-set row of largest cosine, found here by
    /// a search over every row.
    #[test]
    fn the_nearest_neighbour_is_the_most_similar_row() {
        let m = nnclr();
        let z: Tensor<Ad, 2> = Tensor::from_data(
            TensorData::new(
                (0..12)
                    .map(|i| (1.3 * i as f64).cos())
                    .collect::<Vec<f64>>(),
                [3, 4],
            ),
            &Default::default(),
        );
        let bank = host(m.support_set().keys());
        let found = host(m.support_set().nearest(z.clone()));
        let z = host(z);
        for n in 0..3 {
            let row = &z[n * 4..(n + 1) * 4];
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            let best = (0..12)
                .max_by(|&a, &b| {
                    let cos = |k: usize| -> f64 {
                        (0..4).map(|j| row[j] * bank[k * 4 + j]).sum::<f64>() / norm
                    };
                    cos(a).total_cmp(&cos(b))
                })
                .unwrap();
            assert_eq!(&found[n * 4..(n + 1) * 4], &bank[best * 4..(best + 1) * 4]);
        }
    }

    /// After the step the support set holds the first view's unit projections at the old pointer;
    /// a redrawn attempt (batch curation) leaves no trace.
    #[test]
    fn the_support_set_takes_the_applied_attempts_projections() {
        let mut m = nnclr();
        m.forward(images(4, 3.0), images(4, 4.0), at(0));
        let out = m.forward(images(4, 0.0), images(4, 1.0), at(0));
        let z = out.embeddings.unwrap()[0].clone();
        let z = host(crate::loss::l2_normalize(z));
        m.after_step(at(0));
        let keys = host(m.support_set().keys());
        for (a, b) in keys[..16].iter().zip(&z) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(m.support_set().pointer(), 4);
    }
}
