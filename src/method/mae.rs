//! MAE (documented on `Mae`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone};

use super::mae_decoder::MaeDecoder;
use super::masking::{check_token_transformer, check_visible_ratio, encode_kept, PatchMask};
use super::masking::{first_view, patchify, require_vit, vit, MaskRatio, StepMasks};
use super::ssl_method::{
    online_in, replica_in, stateless, HasBackbone, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::schedule::SchedulerConfig;
use crate::base::Progress;

/// Configuration of [`Mae`].
#[derive(Config, Debug)]
pub struct MaeConfig {
    /// Fraction of each image's patches hidden from the encoder (the paper's 0.75).
    #[config(default = 0.75)]
    pub mask_ratio: f64,
    /// The fraction along a schedule instead (a masking curriculum,
    /// [`crate::curriculum::mask_schedule`]; values in `[0, 0.99]`); `None`: `mask_ratio`
    /// throughout.
    #[config(default = "None")]
    pub mask_ratio_schedule: Option<SchedulerConfig>,
    /// Decoder width (the paper's 512); a multiple of 4 (its sine-cosine embeddings).
    #[config(default = 512)]
    pub decoder_dim: usize,
    /// Decoder blocks (the paper's 8).
    #[config(default = 8)]
    pub decoder_depth: usize,
    /// Decoder attention heads (the paper's 16); they divide the width.
    #[config(default = 16)]
    pub decoder_heads: usize,
    /// Targets normalised by each patch's mean and variance (the paper's `norm_pix_loss`).
    #[config(default = true)]
    pub normalize_targets: bool,
    /// Seed of the masks: a step's masks are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl MaeConfig {
    /// Builds MAE around the backbone `backbone` makes (called once), which must be a Vision
    /// Transformer.
    ///
    /// # Errors
    /// A backbone that is not a ViT, a mask ratio outside `[0, 1)` (or a scheduled one outside
    /// `[0, 0.99]`), a decoder width that is
    /// zero, not a multiple of 4 or of the heads, no decoder block.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Mae<B, M>, ConfigError> {
        Ok(Mae {
            online: self.network(backbone, device)?,
            ratio: MaskRatio::visible(self.mask_ratio, self.mask_ratio_schedule.as_ref())?,
            normalize_targets: self.normalize_targets,
            step_masks: StepMasks::new(0x4d41_455f_4d41_534b, self.seed),
        })
    }

    /// MAE's networks around the backbone `backbone` makes, the settings checked as
    /// [`MaeConfig::init`] checks them (for a method built on MAE's, as hard patches mining).
    ///
    /// # Errors
    /// As [`MaeConfig::init`].
    pub fn network<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<MaeNetwork<B, M>, ConfigError> {
        let backbone = backbone(device);
        check_visible_ratio(self.mask_ratio, self.mask_ratio_schedule.as_ref())?;
        if self.mask_ratio == 0.0 && self.mask_ratio_schedule.is_none() {
            return Err(ConfigError::new(
                "mask_ratio",
                "0 hides no patch: MAE's loss is taken on the hidden patches only, so it would \
                 be exactly 0 at every step; give a ratio in (0, 1) (the paper's 0.75)",
            ));
        }
        let (dim, heads) = (self.decoder_dim, self.decoder_heads);
        check_token_transformer(
            ["decoder_dim", "decoder_heads", "decoder_depth"],
            "decoder",
            (dim, heads, self.decoder_depth),
        )?;
        let vit = require_vit(&backbone, "MAE hides patch tokens from")?;
        let (width, patch, channels) = (vit.embed_dim(), vit.patch_size, vit.in_channels());
        let decoder = MaeDecoder::new(
            width,
            (dim, heads, self.decoder_depth),
            patch * patch * channels,
            device,
        );
        Ok(MaeNetwork { backbone, decoder })
    }
}

/// MAE's networks: the ViT backbone (the encoder) and the decoder.
#[derive(Module, Debug)]
pub struct MaeNetwork<B: Backend, M> {
    /// The encoder.
    pub backbone: M,
    /// The decoder.
    pub decoder: MaeDecoder<B>,
}

impl<B: Backend, M> HasBackbone<M> for MaeNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

/// Each patch normalised by its own mean and (unbiased) variance:
/// `(t − mean) / sqrt(var + 1e-6)`, as the authors' `norm_pix_loss`.
///
/// # Shapes
/// - `patches`: `[N, L, P]` → `[N, L, P]`
pub(crate) fn normalize_patches<B: Backend>(patches: Tensor<B, 3>) -> Tensor<B, 3> {
    let p = patches.dims()[2];
    let mean = patches.clone().mean_dim(2);
    let centred = patches - mean;
    let var = centred.clone().powi_scalar(2).sum_dim(2) / (p as f64 - 1.0).max(1.0);
    centred / (var + 1e-6).sqrt()
}

/// MAE. Build it with [`MaeConfig::init`].
///
/// MAE (He et al. 2022, <https://arxiv.org/abs/2111.06377>): a Vision Transformer encodes only
/// the visible patches of an image (75 % are hidden at random, per image), a light decoder puts
/// a learned mask token at every hidden patch and predicts the pixels of every patch, and the
/// loss is the mean squared error on the hidden patches, against targets normalised per patch
/// (the paper's `norm_pix_loss`, its best setting).
///
/// The method sees the first global view of the batch (MAE augments one view: a crop of 20–100 %
/// of the image and a flip). The decoder's positional embeddings are the fixed 2-D sine-cosine
/// ones of the authors' code; the encoder keeps the backbone's own. The math, the defaults and
/// what was chosen where paper and code differ are in `docs/methods.md#mae`.
#[derive(Debug, Clone)]
pub struct Mae<B: Backend, M: Backbone<B>> {
    online: MaeNetwork<B, M>,
    ratio: MaskRatio,
    normalize_targets: bool,
    step_masks: StepMasks<B>,
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> Mae<B, M> {
    /// The fraction of patches hidden at `progress` (the schedule's, or the constant).
    pub fn mask_ratio(&self, progress: Progress) -> f64 {
        self.ratio.at(progress)
    }

    /// The masks of the step at `progress` for this method's `n` images of `patches` patches:
    /// the global batch's drawn from `(seed, step)` at the step's ratio, this replica's rows.
    pub fn masks(&self, progress: Progress, n: usize, patches: usize) -> PatchMask {
        let mut rng = self.step_masks.rng(progress);
        let ratio = self.mask_ratio(progress);
        self.step_masks
            .patch_masks(&mut rng, (n, 1), patches, ratio)
    }

    /// The encoder on the visible patches: the class token and the visible patches' tokens,
    /// after the backbone's blocks and final norm.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, 1 + visible, D]`
    pub fn encode(&self, images: Tensor<B, 4>, mask: &PatchMask) -> Tensor<B, 3> {
        encode_kept(vit(&self.online.backbone), images, mask)
    }

    /// The loss on `images` with `mask`: the mean squared error of the predicted pixels against
    /// the (normalised) targets, averaged over each hidden patch's pixels and then over the
    /// hidden patches of the batch.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[1]`
    pub fn loss(&self, images: Tensor<B, 4>, mask: &PatchMask) -> Tensor<B, 1> {
        let (_, errors) = self
            .online
            .reconstruct(images, mask, self.normalize_targets);
        hidden_mean(errors, mask)
    }
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> MaeNetwork<B, M> {
    /// The encoder on the patches `mask` keeps (`[N, 1 + visible, D]`), and every patch's
    /// reconstruction error by the decoder: the squared error of its predicted pixels against
    /// the (normalised, `normalize_targets`) targets, averaged over its pixels (`[N, L]`).
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, 1 + visible, D]`, `[N, L]`
    pub fn reconstruct(
        &self,
        images: Tensor<B, 4>,
        mask: &PatchMask,
        normalize_targets: bool,
    ) -> (Tensor<B, 3>, Tensor<B, 2>) {
        let vit = vit(&self.backbone);
        let p = vit.patch_size;
        let [n, _, h, w] = images.dims();
        let encoded = encode_kept(vit, images.clone(), mask);
        let predicted = self.decoder.forward(encoded.clone(), mask, (h / p, w / p));
        let mut target = patchify(images.detach(), p);
        if normalize_targets {
            target = normalize_patches(target);
        }
        let errors = (predicted - target)
            .powi_scalar(2)
            .mean_dim(2)
            .reshape([n, mask.patches()]);
        (encoded, errors)
    }
}

/// The mean of the per-patch `errors` (`[N, L]`) over the patches `mask` hides (MAE's loss).
///
/// # Shapes
/// - `errors`: `[N, L]` → `[1]`
pub(crate) fn hidden_mean<B: Backend>(errors: Tensor<B, 2>, mask: &PatchMask) -> Tensor<B, 1> {
    let [n, l] = errors.dims();
    let hidden = mask.hidden_weights::<B>(&errors.device());
    let count = (n * (l - mask.visible())) as f64;
    // A product, not `div_scalar`: upstream burn-autodiff 0.21 takes a scalar division's
    // derivative in f32 (patched in this workspace, not in one that embeds the crate).
    (errors * hidden).sum().mul_scalar(1.0 / count.max(1.0))
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for Mae<B, M> {
    type Online = MaeNetwork<B, M>;
    type Backbone = M;
    stateless!();
    online_in!(online);

    /// MAE's loss on the first global view (the second is not used).
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (images, (rows, cols)) = first_view(views, vit(&self.online.backbone));
        let mask = self.masks(progress, images.dims()[0], rows * cols);
        MethodOutput::new(self.loss(images, &mask))
            .with_value("mask_ratio", self.mask_ratio(progress))
    }

    replica_in!(
        /// Every image hides the same number of patches: each replica's loss is the mean over its
        /// hidden patches, and the average over replicas is the one-device loss and gradient. The
        /// masks are the global batch's rows ([`Mae::masks`]).
        step_masks
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::host;
    use burn::backend::{Autodiff, NdArray};
    use curriculum_ssl_models::Vit;
    use curriculum_ssl_models::VitConfig;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    type Inner = NdArray<f64>;
    type Ad = Autodiff<Inner>;

    /// 8 × 8 one-channel images in four 4 × 4 patches, tokens 8 wide, one block of two heads.
    fn tiny_vit() -> VitConfig {
        crate::method::testing::vit_config(8, 4)
    }

    fn mae(normalize: bool) -> Mae<Ad, Vit<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 3, |d| {
            MaeConfig::new()
                .with_decoder_dim(8)
                .with_decoder_depth(1)
                .with_decoder_heads(2)
                .with_mask_ratio(0.5)
                .with_normalize_targets(normalize)
                .init(|d| tiny_vit().init(d), d)
        })
        .unwrap()
    }

    fn images(n: usize, shift: f64) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, 8, shift)
    }

    /// The encoder never sees a hidden patch: changing the pixels of the hidden patches leaves
    /// every encoded token as it was, changing a visible one does not.
    #[test]
    fn the_encoder_sees_only_the_visible_patches() {
        let m = mae(true);
        let mask = PatchMask::random(2, 4, 0.5, &mut StdRng::seed_from_u64(5));
        let x = images(2, 0.0);
        let mut changed = host(x.clone());
        let mut visible_changed = changed.clone();
        for i in 0..2 {
            for patch in 0..4 {
                let (r0, c0) = (patch / 2 * 4, patch % 2 * 4);
                for (r, c) in (0..4).flat_map(|r| (0..4).map(move |c| (r, c))) {
                    let at = i * 64 + (r0 + r) * 8 + c0 + c;
                    if mask.is_hidden(i, patch) {
                        changed[at] += 1.0;
                    } else {
                        visible_changed[at] += 1.0;
                    }
                }
            }
        }
        let tensor = |v: Vec<f64>| {
            Tensor::<Ad, 4>::from_data(TensorData::new(v, [2, 1, 8, 8]), &Default::default())
        };
        let before = host(m.encode(x, &mask));
        assert_eq!(host(m.encode(tensor(changed), &mask)), before);
        assert_ne!(host(m.encode(tensor(visible_changed), &mask)), before);
    }

    /// The targets: each patch's 16 pixels in row, column order, normalised by the patch's mean
    /// and unbiased variance, computed here by loops over the image.
    #[test]
    fn the_targets_are_the_patches_normalised_by_their_own_statistics() {
        let x = images(1, 0.3);
        let pixels = host(x.clone());
        let got = host(normalize_patches(patchify(x, 4)));
        for patch in 0..4 {
            let (r0, c0) = (patch / 2 * 4, patch % 2 * 4);
            let values: Vec<f64> = (0..16)
                .map(|k| pixels[(r0 + k / 4) * 8 + c0 + k % 4])
                .collect();
            let mean = values.iter().sum::<f64>() / 16.0;
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 15.0;
            for (k, v) in values.iter().enumerate() {
                let expected = (v - mean) / (var + 1e-6).sqrt();
                assert!((got[patch * 16 + k] - expected).abs() < 1e-12);
            }
        }
    }

    /// The loss is the mean over the hidden patches of each patch's mean squared error between
    /// the decoder's prediction and the normalised target, summed here on the host over the
    /// hidden patches only; its gradient with respect to the decoder's output bias matches
    /// central finite differences (f64: the truncation error of a step of 1e-6 is far below the
    /// tolerance).
    #[test]
    fn the_loss_is_the_hidden_patches_error_and_its_gradient_matches_finite_differences() {
        let m = mae(true);
        let x = images(2, 0.0);
        let mask = m.masks(crate::method::testing::progress(0, 10, 0, 1), 2, 4);
        let predicted = host(
            m.online
                .decoder
                .forward(m.encode(x.clone(), &mask), &mask, (2, 2)),
        );
        let target = host(normalize_patches(patchify(x.clone(), 4)));
        let mut sum = 0.0;
        for i in 0..2 {
            for patch in (0..4).filter(|&p| mask.is_hidden(i, p)) {
                let at = (i * 4 + patch) * 16;
                sum += (0..16)
                    .map(|k| (predicted[at + k] - target[at + k]).powi(2))
                    .sum::<f64>()
                    / 16.0;
            }
        }
        let expected = sum / 4.0;
        let loss = m.loss(x.clone(), &mask);
        assert!((host(loss.clone())[0] - expected).abs() < 1e-12);

        let bias = m.online.decoder.pred.bias.clone().unwrap();
        let grads = loss.backward();
        let analytic = host(bias.val().grad(&grads).unwrap());
        let eps = 1e-6;
        for k in [0, 5, 15] {
            let at = |delta: f64| {
                let mut shifted = m.clone();
                let b = host(bias.val());
                let mut b2 = b.clone();
                b2[k] += delta;
                let value =
                    Tensor::<Ad, 1>::from_data(TensorData::new(b2, [16]), &Default::default());
                shifted.online.decoder.pred.bias = Some(burn::module::Param::from_tensor(value));
                host(shifted.loss(x.clone(), &mask))[0]
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
            assert!(
                (numeric - analytic[k]).abs() < 1e-7,
                "{k}: {numeric} vs {}",
                analytic[k]
            );
        }
    }

    #[test]
    fn a_backbone_that_is_no_vit_and_impossible_settings_are_named() {
        let device = Default::default();
        let vit = || tiny_vit().init::<Inner>(&device);
        let err = MaeConfig::new()
            .with_mask_ratio(1.0)
            .init(|_| vit(), &device)
            .unwrap_err();
        assert_eq!(err.field, "mask_ratio");
        let err = MaeConfig::new()
            .with_decoder_dim(6)
            .init(|_| vit(), &device)
            .unwrap_err();
        assert_eq!(err.field, "decoder_dim");
        let err = MaeConfig::new()
            .with_decoder_dim(8)
            .with_decoder_heads(3)
            .init(|_| vit(), &device)
            .unwrap_err();
        assert_eq!(err.field, "decoder_heads");
        let err = MaeConfig::new()
            .init(
                |d| {
                    curriculum_ssl_models::AnyBackbone::LeNet(
                        curriculum_ssl_models::LeNetConfig::lenet5().init::<Inner>(d),
                    )
                },
                &device,
            )
            .unwrap_err();
        assert_eq!(err.field, "backbone");
    }

    /// A masking curriculum: with the ratio scheduled from 0.25 to 0.75 over ten steps, the
    /// masks of step 0 keep ⌊4 · 0.75⌋ = 3 of the 4 patches, step 5 two, step 10 one, and each
    /// step logs its ratio.
    #[test]
    fn a_scheduled_ratio_moves_the_masks_as_scheduled() {
        let device = Default::default();
        let mut m = crate::method::init_method::<Ad, _, ConfigError>(&device, 3, |d| {
            MaeConfig::new()
                .with_decoder_dim(8)
                .with_decoder_depth(1)
                .with_decoder_heads(2)
                .with_mask_ratio_schedule(Some(crate::curriculum::mask_schedule::easy_to_hard(
                    0.25, 0.75,
                )))
                .init(|d| tiny_vit().init(d), d)
        })
        .unwrap();
        let at = |step| crate::method::testing::progress(step, 10, 0, 1);
        for (step, visible, ratio) in [(0, 3, 0.25), (5, 2, 0.5), (10, 1, 0.75)] {
            assert_eq!(m.masks(at(step), 2, 4).visible(), visible, "step {step}");
            let out = m.forward(images(2, 0.0), images(2, 1.0), at(step));
            assert_eq!(host(out.stats[0].1.clone()), vec![ratio]);
        }
        let err = MaeConfig::new()
            .with_mask_ratio_schedule(Some(crate::curriculum::mask_schedule::easy_to_hard(
                0.5, 1.0,
            )))
            .init(|_| tiny_vit().init::<Ad>(&device), &device)
            .unwrap_err();
        assert_eq!(err.field, "mask_ratio_schedule");
    }
}
