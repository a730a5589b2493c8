//! RotNet with MICO's rotation curricula (documented on `RotNet`).

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::ssl_method::{online_in, stat, stateless, HasBackbone, MethodOutput, SslMethod, Views};
use crate::augment::rotate::rotate_k;
use crate::base::error::{in_range, ConfigError};
use crate::base::geometry::CropBox;
use crate::base::Progress;
use crate::curriculum::rotation::{
    mix_rotated, rotate_in_boxes, RotationCurriculum, RotationCurriculumConfig, NUM_ROTATIONS,
};

/// How the drawn rotation is applied to an image.
#[derive(Config, Debug, Copy, PartialEq)]
pub enum RotationMode {
    /// The whole image is rotated (RotNet).
    Rotate,
    /// MICO's rotate-and-mix: `λ·rot(x) + (1 − λ)·x`, λ the share of the rotated image (MICO
    /// gives no value; 0.5 gives rotated and unrotated content equal shares).
    RotateAndMix {
        /// Share of the rotated image, in `[0, 1]`.
        lambda: f64,
    },
    /// MICO's crop-and-rotate: only the square around each image's box is rotated (boxes given
    /// with [`RotNet::set_boxes`]).
    CropAndRotate,
}

impl RotationMode {
    /// Rotate-and-mix with λ = 0.5.
    pub fn rotate_and_mix() -> Self {
        Self::RotateAndMix { lambda: 0.5 }
    }
}

/// Configuration of [`RotNet`].
#[derive(Config, Debug)]
pub struct RotNetConfig {
    /// The angle curriculum (default: MICO's 4-step schedule per epoch, 1 → 4 angles in play;
    /// [`RotationCurriculumConfig::all_angles`] for plain RotNet).
    #[config(default = "RotationCurriculumConfig::new()")]
    pub curriculum: RotationCurriculumConfig,
    /// How the rotation is applied.
    #[config(default = "RotationMode::Rotate")]
    pub mode: RotationMode,
    /// Both views as `2N` examples (`true`), or `view1` only.
    #[config(default = true)]
    pub both_views: bool,
    /// Seed of the angle draws (mixed with the step).
    #[config(default = 0)]
    pub seed: u64,
}

impl RotNetConfig {
    /// Builds RotNet around the backbone `backbone` makes (called once): a linear 4-way head on its
    /// features.
    ///
    /// # Errors
    /// If the curriculum's schedule leaves `[1, 4]` angles or the rotate-and-mix λ leaves
    /// `[0, 1]`.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<RotNet<B, M>, ConfigError> {
        let backbone = backbone(device);
        let curriculum = self.curriculum.init()?;
        if let RotationMode::RotateAndMix { lambda } = self.mode {
            in_range("mode.lambda", lambda, 0.0, 1.0, false)?;
        }
        let head = LinearConfig::new(backbone.feature_dim(), NUM_ROTATIONS).init(device);
        Ok(RotNet {
            online: RotNetNetwork { backbone, head },
            curriculum,
            mode: self.mode,
            both_views: self.both_views,
            seed: self.seed,
            boxes: None,
        })
    }
}

/// Backbone and rotation head, the trainable part of [`RotNet`].
#[derive(Module, Debug)]
pub struct RotNetNetwork<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Linear classifier over the four rotations.
    pub head: Linear<B>,
}

impl<B: Backend, M> HasBackbone<M> for RotNetNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> RotNetNetwork<B, M> {
    /// Rotation logits of a batch.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, 4]`
    pub fn logits(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.head.forward(self.backbone.forward_features(images))
    }
}

/// The pretext batch of one step: the rotated images and their labels.
#[derive(Debug, Clone)]
pub struct RotationBatch<B: Backend> {
    /// Rotated (mixed, or box-rotated) images, `[N or 2N, C, H, W]`: `view1`'s, then `view2`'s.
    pub images: Tensor<B, 4>,
    /// Quarter turns of each image (the class labels, `0..4`).
    pub labels: Vec<usize>,
    /// How many angles were in play.
    pub num_angles: usize,
}

/// RotNet. Build it with [`RotNetConfig::init`].
///
/// RotNet (Gidaris, Singh & Komodakis 2018, "Unsupervised Representation Learning by Predicting
/// Image Rotations", <https://arxiv.org/abs/1803.07728>) as an [`SslMethod`], with MICO's rotation
/// curricula (H. Fang, "Curriculum SSL", <https://arxiv.org/abs/2301.06916>, §3.2).
///
/// Every image is rotated by a drawn number of quarter turns `k` and a linear head on the
/// backbone's features predicts `k` among the four rotations (cross-entropy on the 4-way label,
/// label `k` ↔ `90·k°` counter-clockwise). The angles are drawn per image, uniformly from the set
/// the angle curriculum has in play at the current progress
/// ([`RotationCurriculum`]: `{0°}` → … → all
/// four; all four from the start for plain RotNet). The draws come from a host generator keyed by
/// `(seed, progress.step)`, so a resumed run rotates every batch as the uninterrupted one did.
///
/// **Views.** The trainer hands every method two augmented views of each image. RotNet needs one
/// image per label; by default it uses both views as `2N` independent examples (each with its own
/// angle), which doubles the examples for the augmentation the trainer already paid for; with
/// `both_views = false` it uses `view1` only.
///
/// The embeddings a step reports ([`MethodOutput::embeddings`]) are the backbone features of the
/// rotated images, `view1`'s and `view2`'s; with `view1` only, none (there is no second view to
/// compare with).
///
/// **Modes** ([`RotationMode`]): plain rotation; rotate-and-mix (`λ·rot(x) + (1 − λ)·x`, default
/// λ = 0.5); crop-and-rotate (only the square around each image's object box is rotated). The
/// boxes of crop-and-rotate are given by the caller before each forward
/// ([`RotNet::set_boxes`], or [`SslMethod::set_object_boxes`], which the trainer calls because
/// [`SslMethod::uses_object_boxes`] says so in this mode), in the coordinates of the views: the
/// trainer computes them from heat maps of the backbone's last feature map
/// ([`object_boxes_of`](crate::curriculum::rotation::object_boxes_of)) 4 times per run over the
/// whole training set, maps them through the views' crops and flips
/// ([`box_in_view`](crate::curriculum::rotation::box_in_view)) and keeps them in the checkpoint.
#[derive(Debug, Clone)]
pub struct RotNet<B: Backend, M: Backbone<B>> {
    online: RotNetNetwork<B, M>,
    curriculum: RotationCurriculum,
    mode: RotationMode,
    both_views: bool,
    seed: u64,
    boxes: Option<Vec<CropBox>>,
}

impl<B: Backend, M: Backbone<B>> RotNet<B, M> {
    /// The angle curriculum.
    pub fn curriculum(&self) -> &RotationCurriculum {
        &self.curriculum
    }

    /// How the rotation is applied.
    pub fn mode(&self) -> RotationMode {
        self.mode
    }

    /// The boxes of the next forward's images in crop-and-rotate mode, in view coordinates: one
    /// per rotated image, `view1`'s then (with `both_views`) `view2`'s. They are used by the next
    /// forward only.
    pub fn set_boxes(&mut self, boxes: Vec<CropBox>) {
        self.boxes = Some(boxes);
    }

    /// The rotated batch and its labels at `progress` (what [`SslMethod::forward`] trains on):
    /// the angles are drawn from the curriculum's set with the generator keyed by
    /// `(seed, progress.step)`; `boxes` are needed in crop-and-rotate mode only.
    ///
    /// # Panics
    /// In crop-and-rotate mode without one box per rotated image; if the views differ in shape,
    /// or are not square while an odd angle is drawn.
    pub fn rotation_batch(
        &self,
        view1: Tensor<B, 4>,
        view2: Tensor<B, 4>,
        progress: Progress,
        boxes: Option<&[CropBox]>,
    ) -> RotationBatch<B> {
        let images = if self.both_views {
            assert_eq!(
                view1.dims(),
                view2.dims(),
                "RotNet: the two views differ in shape"
            );
            Tensor::cat(vec![view1, view2], 0)
        } else {
            view1
        };
        let n = images.dims()[0];
        let labels = self.curriculum.draw_at(progress, self.seed, n);
        let images = match self.mode {
            RotationMode::Rotate => rotate_k(images, &labels),
            RotationMode::RotateAndMix { lambda } => mix_rotated(images, &labels, lambda),
            RotationMode::CropAndRotate => {
                let boxes = boxes.unwrap_or_else(|| {
                    panic!("RotNet crop-and-rotate: no boxes given (call set_boxes before forward)")
                });
                assert_eq!(
                    boxes.len(),
                    n,
                    "RotNet crop-and-rotate: {} boxes for {n} rotated images",
                    boxes.len()
                );
                rotate_in_boxes(images, &labels, boxes)
            }
        };
        RotationBatch {
            images,
            labels,
            num_angles: self.curriculum.num_angles(progress),
        }
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for RotNet<B, M> {
    type Online = RotNetNetwork<B, M>;
    type Backbone = M;
    // RotNet keeps no state besides its networks: its angles are a function of the seed and the
    // step (crop-and-rotate's boxes are the training loop's).
    stateless!();

    online_in!(online);

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        let boxes = self.boxes.take();
        let batch = self.rotation_batch(view1, view2, progress, boxes.as_deref());
        let device = batch.images.device();
        let labels: Vec<i64> = batch.labels.iter().map(|&k| k as i64).collect();
        let n = labels.len();
        let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(labels, [n]), &device);
        let features = self.online.backbone.forward_features(batch.images);
        let logits = self.online.head.forward(features.clone());
        let loss = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(logits, targets);
        let features = features.detach();
        let embeddings = self.both_views.then(|| {
            let half = n / 2;
            [
                features.clone().narrow(0, 0, half),
                features.narrow(0, half, n - half),
            ]
        });
        MethodOutput {
            loss,
            stats: vec![("rotation_angles", stat(batch.num_angles as f64, &device))],
            embeddings,
        }
    }

    /// The loss is a mean over images (cross-entropy of each image's rotation): each replica's
    /// is the mean over its shard, and the average of the replicas' gradients is the
    /// one-device gradient (with synchronised batch norms). Nothing is gathered.
    fn set_replica(&mut self, _: crate::data_parallel::Replica<B>) -> Result<(), ConfigError> {
        Ok(())
    }

    /// In crop-and-rotate mode.
    fn uses_object_boxes(&self) -> bool {
        self.mode == RotationMode::CropAndRotate
    }

    /// [`RotNet::set_boxes`] with the boxes of the views RotNet rotates: all `2N` with
    /// `both_views`, else `view1`'s (the first `N`).
    fn set_object_boxes(&mut self, mut boxes: Vec<CropBox>) {
        if !self.both_views {
            boxes.truncate(boxes.len() / 2);
        }
        self.set_boxes(boxes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::rotate::rot90;
    use burn::backend::{Autodiff, NdArray};
    use burn::module::AutodiffModule;

    type Inner = NdArray<f64>;
    type Ad = Autodiff<Inner>;

    use crate::method::testing::TinyBackbone as Tiny;

    fn rotnet(config: RotNetConfig) -> RotNet<Ad, Tiny<Ad>> {
        let device = Default::default();
        // Built and materialised under the seed lock (`with_seed` alone would leave the lazily
        // initialised parameters to be drawn at their first use, unlocked).
        crate::method::init_method::<Ad, _, ConfigError>(&device, 3, |d| {
            config.init(|d| Tiny::new(2 * 4 * 4, 5, d), d)
        })
        .unwrap()
    }

    fn views(n: usize) -> (Tensor<Ad, 4>, Tensor<Ad, 4>) {
        let device = Default::default();
        let a: Vec<f64> = (0..n * 32).map(|i| ((i * 37) % 29) as f64 / 29.0).collect();
        let b: Vec<f64> = (0..n * 32).map(|i| ((i * 11) % 31) as f64 / 31.0).collect();
        (
            Tensor::from_data(TensorData::new(a, [n, 2, 4, 4]), &device),
            Tensor::from_data(TensorData::new(b, [n, 2, 4, 4]), &device),
        )
    }

    fn at_epoch(epoch: usize) -> Progress {
        Progress {
            step: epoch * 3 + 1,
            total_steps: 24,
            epoch,
            total_epochs: 8,
        }
    }

    fn host(x: Tensor<Inner, 2>) -> Vec<f64> {
        x.into_data().iter::<f64>().collect()
    }

    #[test]
    fn labels_match_the_angles_and_the_set_in_play() {
        let m = rotnet(RotNetConfig::new());
        let (v1, v2) = views(6);
        // Epoch 2 of 8: angles {0, 1}.
        let batch = m.rotation_batch(v1.clone(), v2.clone(), at_epoch(2), None);
        assert_eq!(batch.labels.len(), 12);
        assert_eq!(batch.num_angles, 2);
        assert!(batch.labels.iter().all(|&k| k < 2));
        let both = Tensor::cat(vec![v1.clone(), v2.clone()], 0);
        for (n, &k) in batch.labels.iter().enumerate() {
            let want = rot90(both.clone().narrow(0, n, 1), k);
            let got = batch.images.clone().narrow(0, n, 1);
            let d: f64 = (got - want).abs().max().into_scalar();
            assert_eq!(d, 0.0, "image {n} rotated by {k}");
        }
        // Last quarter: all four angles; the draw repeats for the same step.
        let late = m.rotation_batch(v1.clone(), v2.clone(), at_epoch(7), None);
        assert_eq!(late.num_angles, 4);
        assert_eq!(
            late.labels,
            m.rotation_batch(v1.clone(), v2.clone(), at_epoch(7), None)
                .labels
        );
        // view1 only: N examples.
        let mut one = rotnet(RotNetConfig::new().with_both_views(false));
        let b = one.rotation_batch(v1.clone(), v2.clone(), at_epoch(7), None);
        assert_eq!(b.labels.len(), 6);
        assert!(one.forward(v1, v2, at_epoch(7)).embeddings.is_none());
    }

    #[test]
    fn rotate_and_mix_and_crop_and_rotate_batches() {
        let (v1, v2) = views(3);
        let mix = rotnet(
            RotNetConfig::new()
                .with_mode(RotationMode::RotateAndMix { lambda: 0.3 })
                .with_curriculum(RotationCurriculumConfig::all_angles()),
        );
        let batch = mix.rotation_batch(v1.clone(), v2.clone(), at_epoch(0), None);
        let both = Tensor::cat(vec![v1.clone(), v2.clone()], 0);
        for (n, &k) in batch.labels.iter().enumerate() {
            let x = both.clone().narrow(0, n, 1);
            let want = rot90(x.clone(), k).mul_scalar(0.3).add(x.mul_scalar(0.7));
            let d: f64 = (batch.images.clone().narrow(0, n, 1) - want)
                .abs()
                .max()
                .into_scalar();
            assert!(d < 1e-15, "image {n}");
        }
        let crop = rotnet(
            RotNetConfig::new()
                .with_mode(RotationMode::CropAndRotate)
                .with_both_views(false)
                .with_curriculum(RotationCurriculumConfig::all_angles()),
        );
        let boxes = vec![
            CropBox {
                top: 0,
                left: 0,
                height: 2,
                width: 2
            };
            3
        ];
        let batch = crop.rotation_batch(v1.clone(), v2, at_epoch(0), Some(&boxes));
        for (n, &k) in batch.labels.iter().enumerate() {
            let x = v1.clone().narrow(0, n, 1);
            let got = batch.images.clone().narrow(0, n, 1);
            let inside = rot90(x.clone().slice([0..1, 0..2, 0..2, 0..2]), k);
            let d: f64 = (got.clone().slice([0..1, 0..2, 0..2, 0..2]) - inside)
                .abs()
                .max()
                .into_scalar();
            assert_eq!(d, 0.0);
            let d: f64 = (got.slice([0..1, 0..2, 2..4, 0..4]) - x.slice([0..1, 0..2, 2..4, 0..4]))
                .abs()
                .max()
                .into_scalar();
            assert_eq!(d, 0.0, "rows below the box untouched");
        }
        assert!(RotNetConfig::new()
            .with_mode(RotationMode::RotateAndMix { lambda: 1.5 })
            .init::<Ad, _>(
                |_| Tiny {
                    fc: LinearConfig::new(32, 5).init(&Default::default())
                },
                &Default::default()
            )
            .is_err());
    }

    #[test]
    fn config_round_trips_through_json() {
        let c = RotNetConfig::new()
            .with_mode(RotationMode::rotate_and_mix())
            .with_seed(42);
        let back: RotNetConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back.mode, RotationMode::RotateAndMix { lambda: 0.5 });
        assert_eq!(back.curriculum, RotationCurriculumConfig::new());
        assert_eq!((back.seed, back.both_views), (42, true));
    }

    /// Only crop-and-rotate asks the trainer for boxes; of the `2N` boxes it is handed (view1's,
    /// then view2's) it keeps view1's when it rotates `view1` only.
    #[test]
    fn crop_and_rotate_asks_for_the_boxes_of_the_views_it_rotates() {
        let boxes: Vec<CropBox> = (0..6)
            .map(|i| CropBox {
                top: i % 3,
                left: i / 3,
                height: 1,
                width: 1,
            })
            .collect();
        for (mode, asks) in [
            (RotationMode::Rotate, false),
            (RotationMode::rotate_and_mix(), false),
            (RotationMode::CropAndRotate, true),
        ] {
            let m = rotnet(RotNetConfig::new().with_mode(mode));
            assert_eq!(m.uses_object_boxes(), asks, "{mode:?}");
        }
        let mut both = rotnet(RotNetConfig::new().with_mode(RotationMode::CropAndRotate));
        both.set_object_boxes(boxes.clone());
        assert_eq!(both.boxes.as_deref(), Some(&boxes[..]));
        let mut one = rotnet(
            RotNetConfig::new()
                .with_mode(RotationMode::CropAndRotate)
                .with_both_views(false),
        );
        one.set_object_boxes(boxes.clone());
        assert_eq!(one.boxes.as_deref(), Some(&boxes[..3]));
        // Used by the next forward (3 images, 3 boxes), then gone.
        let (v1, v2) = views(3);
        let out = one.forward(v1, v2, at_epoch(7));
        assert!(out.loss.into_scalar().is_finite());
        assert!(one.boxes.is_none());
    }

    #[test]
    #[should_panic(expected = "no boxes given")]
    fn crop_and_rotate_without_boxes_panics() {
        let mut m = rotnet(RotNetConfig::new().with_mode(RotationMode::CropAndRotate));
        let (v1, v2) = views(2);
        let _ = m.forward(v1, v2, at_epoch(7));
    }

    #[test]
    fn loss_is_the_cross_entropy_and_its_gradient_reaches_the_head() {
        let mut m = rotnet(RotNetConfig::new().with_seed(11));
        let (v1, v2) = views(4);
        let progress = at_epoch(7);
        let batch = m.rotation_batch(v1.clone(), v2.clone(), progress, None);
        let out = m.forward(v1, v2, progress);
        assert_eq!(out.stats[0].0, "rotation_angles");
        assert_eq!(out.stats[0].1.clone().into_scalar(), 4.0);
        // Independent cross-entropy on the host from the features and the head's weights.
        let net = m.online().valid();
        let images = batch.images.inner();
        let feats = host(net.backbone.forward_features(images));
        let weight: Vec<f64> = net.head.weight.val().into_data().iter::<f64>().collect();
        let bias: Vec<f64> = net
            .head
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .iter::<f64>()
            .collect();
        let n = batch.labels.len();
        let mut loss = 0.0;
        // dL/dW[d][c] = Σ_n f[n][d]·(softmax[n][c] − [c = label_n]) / N.
        let mut grad = [[0.0f64; 4]; 5];
        for i in 0..n {
            let logits: Vec<f64> = (0..4)
                .map(|c| {
                    bias[c]
                        + (0..5)
                            .map(|d| feats[i * 5 + d] * weight[d * 4 + c])
                            .sum::<f64>()
                })
                .collect();
            let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.iter().map(|l| (l - max).exp()).sum();
            let label = batch.labels[i];
            loss += -(logits[label] - max - z.ln());
            for c in 0..4 {
                let p = (logits[c] - max).exp() / z - if c == label { 1.0 } else { 0.0 };
                for (d, row) in grad.iter_mut().enumerate() {
                    row[c] += feats[i * 5 + d] * p / n as f64;
                }
            }
        }
        loss /= n as f64;
        // The embeddings are the rotated views' features, view1's then view2's.
        let [e1, e2] = out.embeddings.clone().expect("two views");
        let e: Vec<f64> = Tensor::cat(vec![e1, e2], 0)
            .into_data()
            .iter::<f64>()
            .collect();
        assert_eq!(e.len(), feats.len());
        assert!(e.iter().zip(&feats).all(|(a, b)| (a - b).abs() < 1e-14));
        let got = out.loss.clone().into_scalar();
        assert!(got.is_finite());
        assert!((got - loss).abs() < 1e-12, "{got} vs {loss}");
        let grads = out.loss.backward();
        let g: Vec<f64> = m
            .online()
            .head
            .weight
            .grad(&grads)
            .expect("the head gets a gradient")
            .into_data()
            .iter::<f64>()
            .collect();
        assert!(g.iter().any(|v| v.abs() > 1e-6));
        for d in 0..5 {
            for c in 0..4 {
                assert!((g[d * 4 + c] - grad[d][c]).abs() < 1e-12, "dW[{d}][{c}]");
            }
        }
        // The backbone is trained too.
        assert!(m.online().backbone.fc.weight.grad(&grads).is_some());
    }
}
