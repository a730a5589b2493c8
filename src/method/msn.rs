//! MSN and PMSN (documented on `Msn`).

use burn::module::{Initializer, Param};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone};

use super::masking::{class_token, encode_kept, patch_count, require_vit, vit};
use super::masking::{MaskRatio, PatchMask, StepMasks};
use super::momentum::MomentumEncoder;
use super::ssl_method::{
    momentum_state, online_in, replica_in, HasBackbone, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::schedule::SchedulerConfig;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::{HeadActivation, MlpHead, MlpHeadConfig};
use crate::loss::{MsnLoss, MsnLossConfig};

/// Configuration of [`Msn`].
#[derive(Config, Debug)]
pub struct MsnConfig {
    /// Hidden width of the projector (2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Output width of the projector and of the prototypes (256).
    #[config(default = 256)]
    pub output_dim: usize,
    /// Number of prototypes `K` (1024).
    #[config(default = 1024)]
    pub num_prototypes: usize,
    /// Share of each anchor view's patch tokens dropped (0.15, the authors' ViT-S/16 and
    /// lightly's example).
    #[config(default = 0.15)]
    pub mask_ratio: f64,
    /// The share along a schedule instead (a masking curriculum, values in `[0, 0.99]`);
    /// `None`: `mask_ratio` throughout.
    #[config(default = "None")]
    pub mask_ratio_schedule: Option<SchedulerConfig>,
    /// The target network's momentum at the start (0.996), rising to 1 along a cosine.
    #[config(default = 0.996)]
    pub base_momentum: f64,
    /// The loss (temperatures, Sinkhorn–Knopp, the regulariser and its prior).
    #[config(default = "MsnLossConfig::new()")]
    pub loss: MsnLossConfig,
    /// Seed of the masks: a step's masks are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl MsnConfig {
    /// Builds MSN around backbones made by `backbone` (called twice: the student, and a fresh
    /// module into which the target's copy is loaded), which must be Vision Transformers.
    ///
    /// # Errors
    /// A backbone that is not a ViT, a mask ratio outside `[0, 1)` (a scheduled one outside
    /// `[0, 0.99]`), a zero width or prototype count, an impossible momentum or loss setting;
    /// each named.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Msn<B, M>, ConfigError> {
        let ratio = MaskRatio::visible(self.mask_ratio, self.mask_ratio_schedule.as_ref())?;
        if self.num_prototypes == 0 {
            return Err(ConfigError::new("num_prototypes", "must be at least 1"));
        }
        let loss = self.loss.init()?;
        let student_backbone = backbone(device);
        let width = require_vit(&student_backbone, "MSN drops patch tokens of")?.embed_dim();
        let head = MlpHeadConfig::msn(width, self.hidden_dim, self.output_dim);
        let network = |backbone: M| -> Result<MsnNetwork<B, M>, ConfigError> {
            Ok(MsnNetwork {
                backbone,
                projection: head.init(device)?,
            })
        };
        let (student, fresh) = (network(student_backbone)?, network(backbone(device))?);
        let target =
            MomentumEncoder::new(&student, fresh, self.base_momentum, true, "base_momentum")?;
        let max = 1.0 / (self.output_dim as f64).sqrt();
        let shape = [self.num_prototypes, self.output_dim];
        let prototypes = Initializer::Uniform { min: -max, max }.init(shape, device);
        Ok(Msn {
            student: MsnStudent {
                network: student,
                prototypes,
            },
            target,
            loss,
            ratio,
            step_masks: StepMasks::new(0x4d53_4e5f_4d41_534b, self.seed),
        })
    }
}

/// The anchor (or target) network: the ViT backbone and the projector.
#[derive(Module, Debug)]
pub struct MsnNetwork<B: Backend, M> {
    /// The encoder.
    pub backbone: M,
    /// The projector ([`MlpHeadConfig::msn`], applied with GELU).
    pub projection: MlpHead<B>,
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> MsnNetwork<B, M> {
    /// The projections of `images`, seen whole or on the patches `mask` keeps (the \[CLS\]
    /// token after the encoder sees the kept tokens only).
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, output_dim]`
    pub fn forward(&self, images: Tensor<B, 4>, mask: Option<&PatchMask>) -> Tensor<B, 2> {
        let x = match mask {
            Some(mask) => class_token(encode_kept(vit(&self.backbone), images, mask)),
            None => self.backbone.forward_features(images),
        };
        self.projection.forward_with(x, HeadActivation::Gelu)
    }
}

/// The trainable part of [`Msn`]: the anchor network and the prototypes.
#[derive(Module, Debug)]
pub struct MsnStudent<B: Backend, M> {
    /// The anchor network.
    pub network: MsnNetwork<B, M>,
    /// The prototypes, `[K, output_dim]`.
    pub prototypes: Param<Tensor<B, 2>>,
}

impl<B: Backend, M> HasBackbone<M> for MsnStudent<B, M> {
    fn backbone(&self) -> &M {
        &self.network.backbone
    }
}

/// MSN (and PMSN with a power-law prior). Build it with [`MsnConfig::init`].
///
/// MSN (Assran et al., "Masked Siamese Networks for Label-Efficient Learning", ECCV 2022,
/// <https://arxiv.org/abs/2204.07141>) and PMSN (Assran et al., "The Hidden Uniform Cluster Prior
/// in Self-Supervised Learning", ICLR 2023, <https://arxiv.org/abs/2210.07277>): a Vision
/// Transformer sees masked views of an image (the anchors: the second global view and the focal
/// views, a share of each view's patch tokens dropped before the encoder), its EMA copy sees the
/// first global view whole (the target), and the anchors' soft assignments to learned prototypes
/// learn the target's sharpened, balanced assignment ([`MsnLoss`](crate::loss::MsnLoss)).
///
/// ```text
/// for each batch x:
///     target, anchor, f1 .. fV = multi_crop(x)            (the target view, 1 + V anchors)
///     drop L − ⌊L·(1 − r)⌋ random patch tokens of every anchor (r = mask_ratio, per image)
///     z_t = target_net(target)                            (EMA network, no gradient)
///     z_a = student(anchor, f1 .. fV on their kept tokens)  → [(1 + V)·N, 256]
///     loss = MSN(z_a, z_t, prototypes)                    (cross-entropy + λ·regulariser)
///     AdamW step on the student and the prototypes; target_net ← EMA(student)
/// ```
///
/// The network is the backbone's \[CLS\] token through [`MlpHeadConfig::msn`]'s projector; the
/// prototypes (`K × 256`, `U(±1/√256)`) learn from the anchors' assignments only. The masks come
/// from `(seed, step)`; the drop ratio can follow a schedule (a masking curriculum). Replicas, the
/// math, the defaults, the choices where paper, code and lightly differ: `docs/methods.md#msn`.
#[derive(Debug, Clone)]
pub struct Msn<B: Backend, M: Backbone<B>> {
    student: MsnStudent<B, M>,
    target: MomentumEncoder<MsnNetwork<B, M>>,
    loss: MsnLoss,
    ratio: MaskRatio,
    step_masks: StepMasks<B>,
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> Msn<B, M> {
    /// The target network (the EMA copy).
    pub fn target(&self) -> &MomentumEncoder<MsnNetwork<B, M>> {
        &self.target
    }

    /// The masks of the step at `progress` of `views`' anchor view (the second global view) and
    /// of its focal views (the local crops, view-major): the global batch's, drawn from
    /// `(seed, step)` at the step's ratio, this replica's rows kept.
    pub fn masks(&self, progress: Progress, views: &Views<B>) -> [PatchMask; 2] {
        let patches = |x: &Tensor<B, 4>| patch_count(vit(&self.student.network.backbone), x);
        let (anchor, focal) = (&views.global[1], &views.local);
        let (n, focal_patches) = (anchor.dims()[0], focal.first().map_or(0, patches));
        let (masks, mut rng) = (&self.step_masks, self.step_masks.rng(progress));
        let ratio = self.ratio.at(progress);
        let mut draw = |v, p: usize| masks.patch_masks(&mut rng, (n, v), p.max(1), ratio);
        [draw(1, patches(anchor)), draw(focal.len(), focal_patches)]
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for Msn<B, M> {
    type Online = MsnStudent<B, M>;
    type Backbone = M;

    online_in!(student);

    momentum_state!(target in target: MsnNetwork<B, M>);

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [anchor_mask, focal_mask] = self.masks(progress, &views);
        let ([target_view, anchor_view], focal) = (views.global, views.local);
        let (net, target) = (&self.student.network, self.target.network());
        let targets = target.forward(target_view.detach(), None).detach();
        let anchor = net.forward(anchor_view, Some(&anchor_mask));
        let mut anchors = vec![anchor.clone()];
        if !focal.is_empty() {
            anchors.push(net.forward(Tensor::cat(focal, 0), Some(&focal_mask)));
        }
        let (loss, prototypes) = (&self.loss, self.student.prototypes.val());
        // The targets balanced over the global batch; the mean assignment over all its anchors.
        let replica = self.step_masks.replica();
        let sharpened = loss.sharpened(targets.clone(), prototypes.clone());
        let balanced = Replica::through_gathered_on(replica, sharpened, |t| loss.balance(t));
        let log_anchors = loss.log_assignments(Tensor::cat(anchors, 0), prototypes);
        let mean = Replica::mean_rows_on(replica, log_anchors.clone().exp());
        let cross_entropy = loss.cross_entropy(log_anchors, balanced);
        let terms = loss.combine(cross_entropy, loss.regularization(mean));
        MethodOutput::new(terms.loss)
            .with_stat("cross_entropy", terms.cross_entropy)
            .with_stat("regularization", terms.regularization)
            .with_value("mask_ratio", self.ratio.at(progress))
            .with_momentum(self.target.momentum_at(progress))
            .with_embeddings([targets, anchor])
    }

    replica_in!(
        /// The global batch's masks, targets balanced and mean assignment (`docs/methods.md#msn`).
        step_masks
    );

    fn after_step(&mut self, progress: Progress) {
        self.target.update(&self.student.network, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curriculum::mask_schedule;
    use crate::method::testing::{host, progress, Ad, Dev};
    use curriculum_ssl_models::Vit;

    /// A ViT of 8 × 8 one-channel images in sixteen 2 × 2 patches, tokens 8 wide, one block of
    /// two heads.
    fn tiny_vit(d: &Dev) -> Vit<Ad> {
        crate::method::testing::tiny_vit(8, d)
    }

    fn msn(config: MsnConfig) -> Msn<Ad, Vit<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 5, |d| {
            config
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_num_prototypes(6)
                .init(tiny_vit, d)
        })
        .unwrap()
    }

    fn images(n: usize, side: usize, phase: f64) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, side, phase)
    }

    /// The dropped patches never reach the anchors (changing their pixels changes nothing),
    /// while a kept patch does.
    #[test]
    fn dropped_patches_do_not_reach_the_anchors() {
        let m = msn(MsnConfig::new().with_mask_ratio(0.5));
        let views = Views::pair(images(2, 8, 0.0), images(2, 8, 0.0));
        let [mask, _] = m.masks(progress(3, 100, 0, 10), &views);
        let hidden = (0..16).find(|&p| mask.is_hidden(0, p)).unwrap();
        let kept = (0..16).find(|&p| !mask.is_hidden(0, p)).unwrap();
        // Patch p of image 0 covers rows 2·(p / 4) .. +2 and columns 2·(p % 4) .. +2.
        let poke = |patch: usize| {
            let mut values = host(images(2, 8, 0.0));
            values[(2 * (patch / 4)) * 8 + 2 * (patch % 4)] += 4.0;
            Tensor::<Ad, 4>::from_data(TensorData::new(values, [2, 1, 8, 8]), &Default::default())
        };
        let net = &m.online().network;
        let base = host(net.forward(images(2, 8, 0.0), Some(&mask)));
        assert_eq!(host(net.forward(poke(hidden), Some(&mask))), base);
        assert_ne!(host(net.forward(poke(kept), Some(&mask))), base);
    }

    /// The step's loss is the loss recomputed from the networks and the step's masks: the
    /// anchors (the second view and the focal views, masked) against the first view through
    /// the target network; the prototypes receive a gradient.
    #[test]
    fn the_loss_is_msns_on_the_masked_anchors() {
        let mut m = msn(MsnConfig::new().with_mask_ratio(0.3));
        let (v1, v2) = (images(3, 8, 0.0), images(3, 8, 1.0));
        let focal = vec![images(3, 4, 2.0), images(3, 4, 3.0)];
        let at = progress(4, 100, 0, 10);
        let views = Views {
            global: [v1.clone(), v2.clone()],
            local: focal.clone(),
        };
        let [anchor_mask, focal_mask] = m.masks(at, &views);
        assert_eq!(anchor_mask.visible(), 11);
        assert_eq!((focal_mask.images(), focal_mask.visible()), (6, 2));
        let net = &m.online().network;
        let anchors = Tensor::cat(
            vec![
                net.forward(v2, Some(&anchor_mask)),
                net.forward(Tensor::cat(focal, 0), Some(&focal_mask)),
            ],
            0,
        );
        let targets = m.target().network().forward(v1, None);
        let expected: f64 = m
            .loss
            .forward(anchors, targets, m.online().prototypes.val())
            .loss
            .into_scalar();
        let out = m.forward_views(views, at);
        let loss: f64 = out.loss.into_scalar();
        assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
        // NdArray has no backward for the focal views' interpolated positions: the gradient
        // is checked on the two global views.
        let out = m.forward_views(Views::pair(images(3, 8, 0.5), images(3, 8, 1.5)), at);
        let grads = out.loss.backward();
        let prototypes = m.online().prototypes.val().grad(&grads).unwrap();
        assert!(host(prototypes).iter().any(|g| g.abs() > 1e-9));
    }

    /// A masking curriculum: the drop ratio scheduled from 0 to 0.5 over 100 steps keeps all
    /// 16 patches at step 0, ⌊16 · 0.75⌋ = 12 at step 50 and 8 at step 100, in the anchor and
    /// the focal views (4 patches: 4, 3, 2), and each step logs its ratio.
    #[test]
    fn a_scheduled_ratio_moves_the_masks_as_scheduled() {
        let ramp = mask_schedule::easy_to_hard(0.0, 0.5);
        let mut m = msn(MsnConfig::new().with_mask_ratio_schedule(Some(ramp)));
        for (step, anchor, focal, ratio) in [(0, 16, 4, 0.0), (50, 12, 3, 0.25), (100, 8, 2, 0.5)] {
            let at = progress(step, 100, 0, 10);
            let views = Views {
                global: [images(2, 8, 0.0), images(2, 8, 1.0)],
                local: vec![images(2, 4, 2.0)],
            };
            let [a, f] = m.masks(at, &views);
            assert_eq!((a.visible(), f.visible()), (anchor, focal), "step {step}");
            let out = m.forward_views(views, at);
            let (_, logged) = out.stats.iter().find(|(n, _)| *n == "mask_ratio").unwrap();
            assert_eq!(host(logged.clone()), vec![ratio]);
        }
    }

    #[test]
    fn a_backbone_that_is_no_vit_and_impossible_settings_are_named() {
        let device = Default::default();
        let e = MsnConfig::new()
            .with_mask_ratio(1.0)
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "mask_ratio");
        let e = MsnConfig::new()
            .with_num_prototypes(0)
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "num_prototypes");
        let e = MsnConfig::new()
            .with_loss(MsnLossConfig::new().with_temperature(-1.0))
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "temperature");
        let lenet = |d: &Dev| {
            curriculum_ssl_models::AnyBackbone::LeNet(
                curriculum_ssl_models::LeNetConfig::lenet5().init::<Ad>(d),
            )
        };
        let e = MsnConfig::new().init(lenet, &device).unwrap_err();
        assert_eq!(e.field, "backbone");
    }
}
