//! MMCR (documented on `Mmcr`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::encoder::Projected;
use super::momentum::MomentumEncoder;
use super::ssl_method::{momentum_state, online_in, replica_in, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{l2_normalize, MmcrLoss, MmcrLossConfig};

/// Configuration of [`Mmcr`].
#[derive(Config, Debug)]
pub struct MmcrConfig {
    /// Width of the projector's two hidden layers (lightly's example: 512).
    #[config(default = 512)]
    pub hidden_dim: usize,
    /// Projection width (lightly's example: 128).
    #[config(default = 128)]
    pub output_dim: usize,
    /// Momentum of the momentum network at the start (rises to 1 along a cosine; lightly's
    /// example: 0.996).
    #[config(default = 0.996)]
    pub base_momentum: f64,
    /// The loss (`λ = 5e-3`).
    #[config(default = "MmcrLossConfig::new()")]
    pub loss: MmcrLossConfig,
    /// Every output projected onto the unit sphere before the loss (the paper's: a centroid's
    /// norm is then at most 1 and the loss bounded below). `false`: the outputs as they are, as
    /// lightly's example has them; unbounded, that loss fell to −1.1e26 within 100 steps of one
    /// epoch of the full Fashion-MNIST, ours and lightly's alike (benches/README.md).
    #[config(default = true)]
    pub normalize: bool,
}

impl MmcrConfig {
    /// Builds MMCR around a backbone made by `backbone` (called twice: online, and a fresh
    /// module into which the momentum copy is loaded).
    ///
    /// # Errors
    /// A zero width, an impossible momentum or `λ`, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Mmcr<B, M>, ConfigError> {
        let projector = |width| {
            MlpHeadConfig::new(width, self.hidden_dim, self.output_dim)
                .with_num_layers(3)
                .with_output_bias(false)
        };
        let (online, momentum) =
            Projected::with_momentum_copy(backbone, projector, self.base_momentum, device)?;
        Ok(Mmcr {
            online,
            momentum,
            loss: self.loss.init()?,
            normalize: self.normalize,
            replica: None,
        })
    }
}

/// The checkpointed state of [`Mmcr`]: the momentum network.
#[derive(Record)]
pub struct MmcrState<B: Backend, M: Backbone<B>> {
    /// The momentum network's record.
    pub momentum: <Projected<B, M> as Module<B>>::Record,
}

/// MMCR. Build it with [`MmcrConfig::init`].
///
/// MMCR (Yerxa, Kuang, Simoncelli & Chung, "Learning Efficient Coding of Natural Images with
/// Maximum Manifold Capacity Representations", NeurIPS 2023, <https://arxiv.org/abs/2303.03307>;
/// lightly's MMCR example): an online backbone + projector (`features → 512 (BN,
/// ReLU) → 512 (BN, ReLU) → 128`, no biases: lightly's `MMCRProjectionHead`) and a momentum copy
/// (`0.996 → 1` along a cosine); `k` views of every image through both, and the
/// [MMCR loss](crate::loss::MmcrLoss) on the outputs projected onto the unit sphere (the
/// paper's; [`MmcrConfig::normalize`]): the centroids' nuclear norm up, each image's views'
/// nuclear norm down.
///
/// The `k` views are the pipeline's two global views and its local crops (multi-crop), each
/// through the networks on its own; the `mmcr` recipe's local crops are full-size views, so
/// `k = 2 + local crops` of one kind (lightly's example: `k = 8`).
///
/// On several replicas every view's outputs are gathered: the centroids' nuclear norm is the
/// global batch's, the same on every replica.
///
/// The math, the defaults and the worked values are in `docs/methods.md#mmcr`.
#[derive(Debug, Clone)]
pub struct Mmcr<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    momentum: MomentumEncoder<Projected<B, M>>,
    loss: MmcrLoss,
    /// Whether the outputs are projected onto the unit sphere ([`MmcrConfig::normalize`]).
    normalize: bool,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> Mmcr<B, M> {
    /// The momentum copy: its network and its momentum schedule.
    pub fn momentum_encoder(&self) -> &MomentumEncoder<Projected<B, M>> {
        &self.momentum
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for Mmcr<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;

    online_in!(online);

    momentum_state!(MmcrState { momentum: momentum });

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let Views { global, local } = views;
        let all: Vec<Tensor<B, 4>> = global.into_iter().chain(local).collect();
        let sphere = |z: Tensor<B, 2>| if self.normalize { l2_normalize(z) } else { z };
        let online: Vec<_> = all
            .iter()
            .map(|x| sphere(self.online.forward(x.clone())))
            .collect();
        let momentum: Vec<_> = all
            .into_iter()
            .map(|x| sphere(self.momentum.network().forward(x).detach()))
            .collect();
        let embeddings = [online[0].clone(), online[1].clone()];
        // Data-parallel: the centroids' nuclear norm is the global batch's.
        let replica = self.replica.as_ref();
        let online = Replica::gather_each_on(replica, online);
        let momentum = Replica::gather_each_on(replica, momentum)
            .into_iter()
            .map(|z| z.detach())
            .collect();
        let loss = self.loss.forward(online, momentum);
        self.momentum.output(loss, progress, embeddings)
    }

    replica_in!(
        /// Every view's outputs are gathered: the loss is the global batch's, the same on every
        /// replica, and the gather's backward with the average over replicas gives the one-device
        /// gradient.
        replica
    );

    fn after_step(&mut self, progress: Progress) {
        self.momentum.update(&self.online, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{built, host, images, progress, Ad, TinyBackbone as Tiny};

    fn mmcr(normalize: bool) -> Mmcr<Ad, Tiny<Ad>> {
        built(17, |d| {
            MmcrConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_normalize(normalize)
                .init(|d| Tiny::new(16, 6, d), d)
        })
    }

    /// `z`'s rows divided by their norms, computed on the host.
    fn on_the_sphere(z: Tensor<Ad, 2>) -> Tensor<Ad, 2> {
        let [n, d] = z.dims();
        let values = host(z);
        let rows: Vec<f64> = values
            .chunks(d)
            .flat_map(|row| {
                let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
                row.iter().map(move |v| v / norm).collect::<Vec<_>>()
            })
            .collect();
        Tensor::from_data(TensorData::new(rows, [n, d]), &Default::default())
    }

    /// The step's loss is MMCR's of every view (the two global views and the local crops)
    /// through the online and the momentum networks: of the outputs on the unit sphere by
    /// default (the paper's), of the outputs as they are with `normalize` off (lightly's
    /// example).
    #[test]
    fn the_loss_takes_every_view_through_both_networks() {
        for normalize in [true, false] {
            let mut m = mmcr(normalize);
            let views: Vec<Tensor<Ad, 4>> = (0..3).map(|v| images(5, v as f64)).collect();
            let sphere = |z| if normalize { on_the_sphere(z) } else { z };
            let online: Vec<_> = views
                .iter()
                .map(|x| sphere(m.online().forward(x.clone())))
                .collect();
            let momentum: Vec<_> = views
                .iter()
                .map(|x| sphere(m.momentum_encoder().network().forward(x.clone())))
                .collect();
            let expected = host(
                MmcrLossConfig::new()
                    .init()
                    .unwrap()
                    .forward(online, momentum),
            )[0];
            let out = m.forward_views(
                Views {
                    global: [views[0].clone(), views[1].clone()],
                    local: vec![views[2].clone()],
                },
                progress(0, 10, 0, 1),
            );
            // f64 throughout; the two sides differ only in the order of a few sums.
            assert!(
                (host(out.loss)[0] - expected).abs() < 1e-12,
                "normalize {normalize}"
            );
        }
    }
}
