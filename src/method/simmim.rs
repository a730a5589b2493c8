//! SimMIM (documented on `SimMim`).

use burn::module::Param;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::layers::linear_tokens;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone, Vit};

use super::masking::{first_view, patchify, require_vit, vit, MaskRatio, StepMasks, UnitMask};
use super::ssl_method::{
    online_in, replica_in, stateless, HasBackbone, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::schedule::SchedulerConfig;
use crate::base::Progress;

/// Configuration of [`SimMim`].
#[derive(Config, Debug)]
pub struct SimMimConfig {
    /// Fraction of each image's mask units hidden, rounded up (the paper's 0.6).
    #[config(default = 0.6)]
    pub mask_ratio: f64,
    /// The fraction along a schedule instead (a masking curriculum,
    /// [`crate::curriculum::mask_schedule`]; values in `[0.01, 1]`); `None`: `mask_ratio`
    /// throughout.
    #[config(default = "None")]
    pub mask_ratio_schedule: Option<SchedulerConfig>,
    /// Side of a mask unit, in patches (the paper's 32-pixel units on 16-pixel patches: 2; 1
    /// hides single patches, as lightly's example).
    #[config(default = 2)]
    pub mask_unit: usize,
    /// Seed of the masks: a step's masks are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl SimMimConfig {
    /// Builds SimMIM around the backbone `backbone` makes (called once), which must be a Vision
    /// Transformer.
    ///
    /// # Errors
    /// A backbone that is not a ViT, a mask ratio outside `(0, 1]` (or a scheduled one outside
    /// `[0.01, 1]`), a unit of zero patches.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<SimMim<B, M>, ConfigError> {
        let backbone = backbone(device);
        let ratio = MaskRatio::hidden(self.mask_ratio, self.mask_ratio_schedule.as_ref())?;
        if self.mask_unit == 0 {
            return Err(ConfigError::new("mask_unit", "must be at least one patch"));
        }
        let vit = require_vit(&backbone, "SimMIM masks patch tokens of")?;
        let (width, patch, channels) = (vit.embed_dim(), vit.patch_size, vit.in_channels());
        let online = SimMimNetwork {
            mask_token: Initializer::Normal {
                mean: 0.0,
                std: 0.02,
            }
            .init([1, 1, width], device),
            head: LinearConfig::new(width, patch * patch * channels).init(device),
            backbone,
        };
        Ok(SimMim {
            online,
            ratio,
            mask_unit: self.mask_unit,
            step_masks: StepMasks::new(0x5349_4d4d_494d_4d4b, self.seed),
        })
    }
}

/// SimMIM's networks: the ViT backbone (the encoder), its mask token and the linear head.
#[derive(Module, Debug)]
pub struct SimMimNetwork<B: Backend, M> {
    /// The encoder.
    pub backbone: M,
    /// The token that replaces every hidden patch's, `[1, 1, D]`.
    pub mask_token: Param<Tensor<B, 3>>,
    /// Token width → a patch's pixels (`p²·C`, in row, column, channel order).
    pub head: Linear<B>,
}

impl<B: Backend, M> HasBackbone<M> for SimMimNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

/// SimMIM. Build it with [`SimMimConfig::init`].
///
/// SimMIM (Xie et al., CVPR 2022, <https://arxiv.org/abs/2111.09886>): a Vision Transformer
/// sees every patch, the hidden ones replaced by a learned mask token before the positional
/// embeddings; a linear head predicts each hidden patch's raw pixels from its encoded token, and
/// the loss is the L1 distance over the hidden patches' pixels. No decoder, no target
/// normalisation, no second view.
///
/// The masks hide square units of `mask_unit × mask_unit` patches (the paper's 32-pixel mask
/// patches: 2 × 2 of ViT-B/16's patches), 60 % of them per image, drawn from `(seed, step)` on
/// the host ([`UnitMask`]); a grid that is not a multiple of the unit gets smaller units at its
/// right and bottom edges, so images may hide different numbers of patches, and the loss divides
/// by the batch's hidden pixels (the authors' `(loss · mask).sum() / mask.sum()`). The math, the
/// defaults and what was chosen where paper and code differ are in `docs/methods.md#simmim`.
#[derive(Debug, Clone)]
pub struct SimMim<B: Backend, M: Backbone<B>> {
    online: SimMimNetwork<B, M>,
    ratio: MaskRatio,
    mask_unit: usize,
    step_masks: StepMasks<B>,
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> SimMim<B, M> {
    fn vit(&self) -> &Vit<B> {
        vit(&self.online.backbone)
    }

    /// The fraction of mask units hidden at `progress` (the schedule's, or the constant).
    pub fn mask_ratio(&self, progress: Progress) -> f64 {
        self.ratio.at(progress)
    }

    /// The masks of the step at `progress` for the global batch of `images` images on a
    /// `grid.0 × grid.1` patch grid, drawn from `(seed, step)` at the step's ratio.
    pub fn global_masks(
        &self,
        progress: Progress,
        images: usize,
        grid: (usize, usize),
    ) -> UnitMask {
        let mut rng = self.step_masks.rng(progress);
        UnitMask::random(
            images,
            grid,
            self.mask_unit,
            self.mask_ratio(progress),
            &mut rng,
        )
        .expect("the ratio and the unit are checked at init")
    }

    /// Every token after the final norm, the hidden patches' tokens replaced by the mask token
    /// before the positional embeddings (lightly's `mask_at_index`:
    /// `(1 − m)·token + m·mask_token`).
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, 1 + L, D]`
    pub fn encode(&self, images: Tensor<B, 4>, mask: &UnitMask) -> Tensor<B, 3> {
        let vit = self.vit();
        let (patches, grid) = vit.patch_tokens(images);
        let [n, l, d] = patches.dims();
        let hidden = mask
            .weights::<B>(&patches.device())
            .reshape([n, l, 1])
            .expand([n, l, d]);
        let token = self.online.mask_token.val().expand([n, l, d]);
        let patches = patches * (hidden.clone().neg() + 1.0) + token * hidden;
        vit.encode_patch_tokens(patches, grid)
    }

    /// The sum over hidden patches of the L1 distance between the predicted and the true pixels,
    /// and the number of hidden pixels it sums over.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[1]`
    pub fn hidden_error(&self, images: Tensor<B, 4>, mask: &UnitMask) -> (Tensor<B, 1>, usize) {
        let p = self.vit().patch_size;
        let [n, _, _, _] = images.dims();
        let encoded = self.encode(images.clone(), mask);
        let [_, tokens, d] = encoded.dims();
        let predicted = linear_tokens(&self.online.head, encoded.slice([0..n, 1..tokens, 0..d]));
        let target = patchify(images.detach(), p);
        let pixels = target.dims()[2];
        let l = tokens - 1;
        let hidden = mask.weights::<B>(&target.device()).reshape([n, l, 1]);
        let error = ((predicted - target).abs() * hidden).sum();
        (error, mask.hidden_count() * pixels)
    }

    /// The loss on `images` with `mask`: the mean L1 distance over the hidden pixels.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[1]`
    pub fn loss(&self, images: Tensor<B, 4>, mask: &UnitMask) -> Tensor<B, 1> {
        let (error, count) = self.hidden_error(images, mask);
        // A product, not `div_scalar`: upstream burn-autodiff 0.21 takes a scalar division's
        // derivative in f32 (patched in this workspace, not in one that embeds the crate).
        error.mul_scalar(1.0 / count.max(1) as f64)
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for SimMim<B, M> {
    type Online = SimMimNetwork<B, M>;
    type Backbone = M;
    stateless!();
    online_in!(online);

    /// SimMIM's loss on the first global view (the second is not used). On a replica, its
    /// error over its rows divided by the global batch's hidden pixels, times the replicas: the
    /// replicas' mean is the one-device loss even when images hide different numbers of patches.
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (images, grid) = first_view(views, self.vit());
        let n = images.dims()[0];
        let (total, first) = self.step_masks.global_rows(n);
        let replicas = self.step_masks.replicas();
        let global = self.global_masks(progress, total, grid);
        let mask = global.rows(first, n);
        let (error, _) = self.hidden_error(images, &mask);
        // The global batch's hidden pixels: a patch has as many as the head predicts.
        let count = global.hidden_count() * self.online.head.weight.dims()[1];
        let loss = error.mul_scalar(replicas as f64 / count.max(1) as f64);
        let hidden = mask.hidden_count() as f64 / (n * grid.0 * grid.1).max(1) as f64;
        MethodOutput::new(loss)
            .with_value("mask_ratio", self.mask_ratio(progress))
            .with_value("hidden_fraction", hidden)
    }

    replica_in!(
        /// Each replica draws the global batch's masks and keeps its rows; its loss is scaled so
        /// that the replicas' mean is the one-device loss ([`SimMim::forward_views`]).
        step_masks
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, progress, Ad};
    use curriculum_ssl_models::VitConfig;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// SimMIM on a ViT of 8 × 8 one-channel images in four 4 × 4 patches, tokens 8 wide, one
    /// block of two heads; single-patch units.
    fn simmim(ratio: f64) -> SimMim<Ad, Vit<Ad>> {
        build(SimMimConfig::new().with_mask_ratio(ratio).with_mask_unit(1))
    }

    fn build(config: SimMimConfig) -> SimMim<Ad, Vit<Ad>> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 3, |d| {
            config.init(|d| crate::method::testing::vit_config(8, 4).init(d), d)
        })
        .unwrap()
    }

    fn images(n: usize, shift: f64) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, 8, shift)
    }

    /// Adds 1 to the pixels of the hidden (or the visible) patches.
    fn shift_patches(x: &Tensor<Ad, 4>, mask: &UnitMask, hidden: bool) -> Tensor<Ad, 4> {
        let mut v = host(x.clone());
        let n = x.dims()[0];
        for i in 0..n {
            for patch in (0..4).filter(|&p| mask.is_hidden(i, p) == hidden) {
                let (r0, c0) = (patch / 2 * 4, patch % 2 * 4);
                for (r, c) in (0..4).flat_map(|r| (0..4).map(move |c| (r, c))) {
                    v[i * 64 + (r0 + r) * 8 + c0 + c] += 1.0;
                }
            }
        }
        Tensor::from_data(TensorData::new(v, [n, 1, 8, 8]), &Default::default())
    }

    /// A hidden patch's pixels never reach the encoder (its token is the mask token before the
    /// positional embeddings); a visible patch's do.
    #[test]
    fn the_encoder_never_sees_a_hidden_patch() {
        let m = simmim(0.5);
        let mask = UnitMask::random(2, (2, 2), 1, 0.5, &mut StdRng::seed_from_u64(5)).unwrap();
        let x = images(2, 0.0);
        let before = host(m.encode(x.clone(), &mask));
        assert_eq!(
            host(m.encode(shift_patches(&x, &mask, true), &mask)),
            before
        );
        assert_ne!(
            host(m.encode(shift_patches(&x, &mask, false), &mask)),
            before
        );
    }

    /// The loss is the mean over the hidden patches' pixels of |head(token) − pixel|, summed
    /// here on the host over the hidden patches only; its gradient with respect to the mask
    /// token matches central finite differences (f64, step 1e-6: truncation and rounding far
    /// below the tolerance; no pixel sits at the kink of |·| for these values).
    #[test]
    fn the_loss_is_the_hidden_pixels_l1_and_its_gradient_matches_finite_differences() {
        let m = simmim(0.5);
        let x = images(2, 0.2);
        let mask = UnitMask::from_hidden(4, &[vec![0, 3], vec![1]]).unwrap();
        let encoded = m.encode(x.clone(), &mask);
        let predicted = host(m.online.head.forward(encoded.slice([0..2, 1..5, 0..8])));
        let target = host(patchify(x.clone(), 4));
        let sum: f64 = [(0, 0), (0, 3), (1, 1)]
            .iter()
            .flat_map(|&(i, p)| (0..16).map(move |k| (i * 4 + p) * 16 + k))
            .map(|at| (predicted[at] - target[at]).abs())
            .sum();
        let loss = m.loss(x.clone(), &mask);
        assert!((host(loss.clone())[0] - sum / 48.0).abs() < 1e-12);
        let grads = loss.backward();
        let token = m.online.mask_token.val();
        let analytic = host(token.grad(&grads).unwrap());
        let base = host(token);
        for k in [0, 3, 7] {
            let at = |delta: f64| {
                let mut shifted = m.clone();
                let mut t = base.clone();
                t[k] += delta;
                shifted.online.mask_token = Param::from_tensor(Tensor::from_data(
                    TensorData::new(t, [1, 1, 8]),
                    &Default::default(),
                ));
                host(shifted.loss(x.clone(), &mask))[0]
            };
            let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
            assert!(
                (numeric - analytic[k]).abs() < 1e-7,
                "{k}: {numeric} vs {}",
                analytic[k]
            );
        }
    }

    /// A step's loss is the loss with the masks drawn from `(seed, step)`: the same step draws
    /// the same masks, another step others.
    #[test]
    fn a_step_uses_the_masks_of_its_seed_and_step() {
        let mut m = simmim(0.5);
        let x = images(3, 0.1);
        let at = |step| progress(step, 10, 0, 1);
        let out = m.forward(x.clone(), x.clone(), at(4));
        let mask = m.global_masks(at(4), 3, (2, 2));
        assert_eq!(host(out.loss), host(m.loss(x.clone(), &mask)));
        assert_eq!(mask, m.global_masks(at(4), 3, (2, 2)));
        assert_ne!(mask, m.global_masks(at(5), 3, (2, 2)));
        assert_eq!(mask.hidden_count(), 3 * 2);
    }

    /// (A backbone that is not a ViT is refused by the CLI test of the MIM recipes.)
    #[test]
    fn bad_settings_are_refused() {
        let device = Default::default();
        let vit = || {
            VitConfig::new(8)
                .with_patch_size(4)
                .with_embed_dim(8)
                .with_depth(1)
                .with_num_heads(2)
                .init::<Ad>(&device)
        };
        for (config, field) in [
            (SimMimConfig::new().with_mask_ratio(0.0), "mask_ratio"),
            (SimMimConfig::new().with_mask_ratio(1.5), "mask_ratio"),
            (SimMimConfig::new().with_mask_unit(0), "mask_unit"),
        ] {
            assert_eq!(config.init(|_| vit(), &device).unwrap_err().field, field);
        }
    }

    /// A masking curriculum: the ratio scheduled from 0.25 to 1 over ten steps hides ⌈4 · r⌉ of
    /// the 4 single-patch units: one at step 0, all four at step 10; each step logs its ratio.
    #[test]
    fn a_scheduled_ratio_moves_the_masks_as_scheduled() {
        let ramp = crate::curriculum::mask_schedule::easy_to_hard(0.25, 1.0);
        let mut m = build(
            SimMimConfig::new()
                .with_mask_unit(1)
                .with_mask_ratio_schedule(Some(ramp)),
        );
        let at = |step| progress(step, 10, 0, 1);
        for (step, hidden, ratio) in [(0, 1, 0.25), (5, 3, 0.625), (10, 4, 1.0)] {
            assert_eq!(
                m.global_masks(at(step), 2, (2, 2)).hidden_count(),
                2 * hidden
            );
            let out = m.forward(images(2, 0.0), images(2, 1.0), at(step));
            assert_eq!(host(out.stats[0].1.clone()), vec![ratio], "step {step}");
        }
    }
}
