//! SupCon (documented on `SupCon`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewThreads;
use super::encoder::Projected;
use super::ssl_method::{online_in, replica_in, stateless, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{SupConLoss, SupConLossConfig};

/// Configuration of [`SupCon`].
#[derive(Config, Debug)]
pub struct SupConConfig {
    /// Hidden width of the projector (solo-learn's CIFAR and ImageNet-100 settings: 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width (solo-learn's CIFAR setting: 256; ImageNet-100: 512; the paper: 128).
    #[config(default = 256)]
    pub output_dim: usize,
    /// The loss (`τ = 0.2`, solo-learn's).
    #[config(default = "SupConLossConfig::new()")]
    pub loss: SupConLossConfig,
}

impl SupConConfig {
    /// Builds SupCon around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width in the projector, or a temperature that is not positive.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<SupCon<B, M>, ConfigError> {
        let backbone = backbone(device);
        // solo-learn's `nn.Sequential(Linear, ReLU, Linear)`: no batch norm.
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .with_batch_norm(false)
                .init(device)?;
        Ok(SupCon {
            online: Projected {
                backbone,
                projector,
            },
            loss: self.loss.init()?,
            labels: None,
            view_threads: ViewThreads::default(),
            replica: None,
        })
    }
}

/// SupCon. Build it with [`SupConConfig::init`].
///
/// SupCon (Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020,
/// <https://arxiv.org/abs/2004.11362>), as solo-learn trains it (`solo/methods/supcon.py`): a
/// backbone and a projector (`features → 2048 (ReLU) → 256`, no batch norm), every view of the
/// batch through both, and the [supervised contrastive loss](crate::loss::SupConLoss) over all
/// the views' projections, each with its image's label: an anchor's positives are every other
/// view of every image of its class.
///
/// The loss reads the batch's labels ([`SslMethod::uses_labels`]): the trainer hands them to
/// [`SslMethod::set_labels`] before each forward and refuses data without labels. The views are
/// the two global views and, when the pipeline cuts them, its local crops (solo-learn's
/// multi-crop SupCon), each through the networks on its own (its own batch statistics). On
/// several replicas each replica's rows are its anchors and every replica's rows and labels
/// (gathered) its candidates, as solo-learn's `gather`.
///
/// The math, the defaults and where paper and solo-learn differ are in
/// `docs/methods.md#supcon`.
#[derive(Debug, Clone)]
pub struct SupCon<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    loss: SupConLoss,
    /// The labels of the next forward's images ([`SslMethod::set_labels`]), taken by it.
    labels: Option<Tensor<B, 1, Int>>,
    /// The two global views' passes back-propagated on two threads, when on (not at a step with
    /// local crops: their pass reaches the networks too).
    view_threads: ViewThreads<B, Projected<B, M>>,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> SupCon<B, M> {
    /// The loss.
    pub fn loss(&self) -> &SupConLoss {
        &self.loss
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for SupCon<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    // The labels are the batch's; nothing else besides the networks.
    stateless!();

    online_in!(online, view_threads);

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn uses_labels(&self) -> bool {
        true
    }

    fn set_labels(&mut self, labels: Tensor<B, 1, Int>) {
        self.labels = Some(labels);
    }

    /// # Panics
    /// Without the batch's labels ([`SslMethod::set_labels`] before every forward; the
    /// trainer's loops call it), or with labels for another number of images.
    fn forward_views(&mut self, views: Views<B>, _: Progress) -> MethodOutput<B> {
        let labels = self.labels.take().expect(
            "SupCon's loss reads the batch's labels: SslMethod::set_labels before every forward",
        );
        let Views {
            global: [view1, view2],
            local,
        } = views;
        let [n, ..] = view1.dims();
        assert_eq!(
            labels.dims(),
            [n],
            "SupCon: {n} images and {:?} labels",
            labels.dims()
        );
        let ([z1, z2], _) = self.view_threads.passes(
            &self.online,
            [view1, view2],
            local.is_empty(),
            |net, x, groups| (net.forward_grouped(x, groups), ()),
        );
        let embeddings = [z1.clone(), z2.clone()];
        let mut rows = vec![z1, z2];
        let crops = local.len();
        if crops > 0 {
            rows.push(self.online.forward_grouped(Tensor::cat(local, 0), crops));
        }
        // Every view's rows, view after view, each with its image's label (solo-learn's
        // `targets.repeat(n_augs)`).
        let z = Tensor::cat(rows, 0);
        let labels = labels.repeat(&[2 + crops]);
        let loss = match &self.replica {
            None => self.loss.forward(z, labels),
            Some(replica) => {
                let offset = replica.rank() * z.dims()[0];
                let (candidates, candidate_labels) = (
                    replica.gather(z.clone()),
                    replica.gather_labels(labels.clone()),
                );
                self.loss
                    .forward_against(z, labels, candidates, candidate_labels, offset)
            }
        };
        MethodOutput::new(loss).with_embeddings(embeddings)
    }

    replica_in!(
        /// Each replica's anchors are its own rows, its candidates every replica's (gathered with
        /// their labels); its loss is the mean over its anchors, and the replicas' mean the
        /// one-device loss. The gather's backward sums every replica's gradient of a replica's
        /// rows, and the average over replicas gives the one-device gradient.
        replica,
        view_threads
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};

    fn supcon() -> SupCon<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 5, |d| {
            SupConConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap()
    }

    fn labels(values: &[i64]) -> Tensor<Ad, 1, Int> {
        Tensor::from_data(
            TensorData::new(values.to_vec(), [values.len()]),
            &Default::default(),
        )
    }

    /// The step's loss is SupCon's of every view's projections (the two global views and the
    /// local crops, view after view) with the labels repeated per view; the projector has no
    /// batch norm.
    #[test]
    fn the_loss_takes_every_view_with_its_images_labels() {
        let mut m = supcon();
        assert!(!m.online().projector.has_hidden_batch_norm());
        let classes = [0, 1, 0, 2, 1];
        let views: Vec<Tensor<Ad, 4>> = (0..3).map(|v| images(5, v as f64)).collect();
        for crops in [0, 1] {
            let z: Vec<_> = views[..2 + crops]
                .iter()
                .map(|x| m.online().forward(x.clone()))
                .collect();
            let expected = host(
                m.loss()
                    .forward(Tensor::cat(z, 0), labels(&classes.repeat(2 + crops))),
            )[0];
            m.set_labels(labels(&classes));
            let out = m.forward_views(
                Views {
                    global: [views[0].clone(), views[1].clone()],
                    local: views[2..2 + crops].to_vec(),
                },
                progress(0, 10, 0, 1),
            );
            assert!(
                (host(out.loss)[0] - expected).abs() < 1e-12,
                "{crops} crops"
            );
            assert!(out.embeddings.is_some());
        }
    }

    /// The labels are the next forward's alone: a forward without them is a bug of the loop.
    #[test]
    #[should_panic(expected = "set_labels before every forward")]
    fn a_forward_without_labels_names_the_call() {
        let mut m = supcon();
        m.set_labels(labels(&[0, 1, 0, 1]));
        let at = progress(0, 10, 0, 1);
        let _ = m.forward(images(4, 0.0), images(4, 1.0), at);
        let _ = m.forward(images(4, 0.0), images(4, 1.0), at);
    }
}
