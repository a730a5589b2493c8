//! AIM (documented on `Aim`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::vit::prefix_causal_bias;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone};
use rand::Rng;

use super::aim_head::AimHead;
use super::mae::normalize_patches;
use super::masking::{first_view, patchify, require_vit, vit, StepMasks};
use super::ssl_method::{
    online_in, replica_in, stateless, HasBackbone, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::loss::{AimLoss, AimLossConfig, AimTarget};

/// Configuration of [`Aim`].
#[derive(Config, Debug)]
pub struct AimConfig {
    /// The paper's next patch on the non-prefix patches, or lightly's example's same patch at
    /// every position ([`AimTarget`]).
    #[config(default = "AimTarget::NextPatch")]
    pub target: AimTarget,
    /// Width of the prediction head (the paper's and lightly's 2048).
    #[config(default = 2048)]
    pub head_dim: usize,
    /// Residual MLP blocks of the head (the paper's 12, lightly's default; its example 1).
    #[config(default = 12)]
    pub head_blocks: usize,
    /// Hidden width of a head block's MLP as a multiple of `head_dim` (4).
    #[config(default = 4.0)]
    pub head_mlp_ratio: f64,
    /// Targets normalised by each patch's mean and unbiased variance (the paper's; lightly's
    /// `normalize_mean_var`).
    #[config(default = true)]
    pub normalize_targets: bool,
    /// Seed of the prefix lengths: a step's are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl AimConfig {
    /// Builds AIM around the backbone `backbone` makes (called once), which must be a Vision
    /// Transformer of at least two patches.
    ///
    /// # Errors
    /// A backbone that is not a ViT or has one patch, a head without width, or an MLP ratio
    /// that is not positive.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Aim<B, M>, ConfigError> {
        let backbone = backbone(device);
        let vit = require_vit(&backbone, "AIM predicts the patches of")?;
        if vit.grid_tokens() < 2 {
            return Err(ConfigError::new(
                "backbone",
                "AIM predicts patches from the patches before them: the ViT's images must be at \
                 least two patches",
            ));
        }
        if self.head_dim == 0 {
            return Err(ConfigError::new("head_dim", "must be at least 1"));
        }
        if !(self.head_mlp_ratio.is_finite() && self.head_mlp_ratio > 0.0) {
            return Err(ConfigError::new(
                "head_mlp_ratio",
                format!("must be positive, got {}", self.head_mlp_ratio),
            ));
        }
        if ((self.head_dim as f64 * self.head_mlp_ratio) as usize) == 0 {
            return Err(ConfigError::new(
                "head_mlp_ratio",
                format!(
                    "leaves the head's MLPs no width ({} × {})",
                    self.head_dim, self.head_mlp_ratio
                ),
            ));
        }
        crate::base::seed::check_count(
            crate::base::seed::transformer_values(
                self.head_blocks,
                self.head_dim,
                self.head_mlp_ratio,
            ),
            "the head's blocks",
        )?;
        let patch = vit.patch_size;
        let pixels = patch * patch * vit.in_channels();
        let head = AimHead::new(
            vit.embed_dim(),
            (self.head_dim, self.head_blocks),
            self.head_mlp_ratio,
            pixels,
            device,
        );
        Ok(Aim {
            online: AimNetwork { backbone, head },
            loss: AimLossConfig::new().with_target(self.target).init(),
            normalize_targets: self.normalize_targets,
            step_masks: StepMasks::new(0x4149_4d5f_5052_4546, self.seed),
        })
    }
}

/// AIM's networks: the ViT backbone (the trunk) and the prediction head.
#[derive(Module, Debug)]
pub struct AimNetwork<B: Backend, M> {
    /// The trunk.
    pub backbone: M,
    /// The prediction head.
    pub head: AimHead<B>,
}

impl<B: Backend, M> HasBackbone<M> for AimNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> AimNetwork<B, M> {
    /// The head's prediction at every patch of `images` whose prefixes are `prefixes` patches
    /// long: the patch tokens with their positions (no class token) through the trunk's blocks
    /// under prefix-causal attention and its final norm, the positions added again (lightly's
    /// example), the head.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]`, `prefixes`: `N` lengths → `[N, (H/p)(W/p), p²·C]`
    pub fn predict(&self, images: Tensor<B, 4>, prefixes: &[usize]) -> Tensor<B, 3> {
        let vit = vit(&self.backbone);
        let (patches, (h, w)) = vit.patch_tokens(images);
        let [_, k, d] = patches.dims();
        let bias = prefix_causal_bias::<B>(prefixes, k, &patches.device());
        let features = vit.encode_patches_alone(patches, (h, w), Some(&bias));
        let positions = vit.pos_embed_for(h, w).slice([0..1, 1..1 + k, 0..d]);
        self.head.forward(features + positions)
    }
}

/// AIM. Build it with [`AimConfig::init`].
///
/// AIM (El-Nouby et al. 2024, "Scalable Pre-training of Large Autoregressive Image Models",
/// <https://arxiv.org/abs/2401.08541>): a Vision Transformer reads an image's patches in raster
/// order, the first `S` of them (the prefix, `S` drawn per image) with bidirectional attention
/// and the rest causally, and an MLP head predicts from each position the pixels of the next
/// patch, normalised per patch; the loss ([`AimLoss`]) is their mean squared error on the
/// non-prefix patches. lightly 1.6's example compares each position with its own patch at every
/// position instead: [`AimTarget::SamePatch`].
///
/// The method sees the first global view of the batch (one view, cropped to 40–100 % and
/// flipped). The trunk is the backbone's ViT without its class token (the paper's and lightly's
/// have none), which stays untrained. The math, the defaults and what was chosen where paper and
/// lightly differ are in `docs/methods.md#aim`.
#[derive(Debug, Clone)]
pub struct Aim<B: Backend, M: Backbone<B>> {
    online: AimNetwork<B, M>,
    loss: AimLoss,
    normalize_targets: bool,
    step_masks: StepMasks<B>,
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> Aim<B, M> {
    /// The prefix lengths of the step at `progress` for this method's `n` images of `patches`
    /// patches: the global batch's drawn from `(seed, step)`, uniformly in the target's range
    /// ([`AimTarget::prefix_range`]), this replica's rows.
    ///
    /// # Panics
    /// With fewer than two patches (nothing to predict from).
    pub fn prefixes(&self, progress: Progress, n: usize, patches: usize) -> Vec<usize> {
        assert!(
            patches >= 2,
            "AIM: {patches} patch per image: nothing to predict"
        );
        let mut rng = self.step_masks.rng(progress);
        let (total, first) = self.step_masks.global_rows(n);
        let range = self.loss.target().prefix_range(patches);
        let all: Vec<usize> = (0..total)
            .map(|_| rng.random_range(range.clone()))
            .collect();
        all[first..first + n].to_vec()
    }

    /// The loss on `images` with prefixes `prefixes` patches long: the head's predictions
    /// against the (normalised) patches.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]`, `prefixes`: `N` lengths → `[1]`
    pub fn loss(&self, images: Tensor<B, 4>, prefixes: &[usize]) -> Tensor<B, 1> {
        let p = vit(&self.online.backbone).patch_size;
        let predictions = self.online.predict(images.clone(), prefixes);
        let mut targets = patchify(images.detach(), p);
        if self.normalize_targets {
            targets = normalize_patches(targets);
        }
        self.loss.forward(predictions, targets, prefixes)
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for Aim<B, M> {
    type Online = AimNetwork<B, M>;
    type Backbone = M;
    stateless!();
    online_in!(online);

    /// AIM's loss on the first global view (the second is not used).
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (images, (rows, cols)) = first_view(views, vit(&self.online.backbone));
        let prefixes = self.prefixes(progress, images.dims()[0], rows * cols);
        MethodOutput::new(self.loss(images, &prefixes))
    }

    replica_in!(
        /// Each image's loss is its own mean: each replica's loss is the mean over its images, and
        /// the average over replicas is the one-device loss and gradient. The prefixes are the
        /// global batch's rows ([`Aim::prefixes`]).
        step_masks
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, progress, Ad, Dev};

    /// 8 × 8 one-channel images in four 4 × 4 patches, tokens 8 wide, one block of two heads;
    /// a head 8 wide, one block.
    fn aim(target: AimTarget) -> Aim<Ad, curriculum_ssl_models::Vit<Ad>> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 3, |d| {
            AimConfig::new()
                .with_target(target)
                .with_head_dim(8)
                .with_head_blocks(1)
                .init(|d| crate::method::testing::vit_config(8, 4).init(d), d)
        })
        .unwrap()
    }

    fn images(n: usize) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, 8, 0.0)
    }

    /// The prefixes are the step's: the same for the same step, in the target's range, and of
    /// a replica's rows the global batch's (checked against the two-replica run in
    /// tests/data_parallel.rs).
    #[test]
    fn the_prefixes_are_drawn_from_the_step_in_the_targets_range() {
        let m = aim(AimTarget::NextPatch);
        let at = |step| progress(step, 10, 0, 1);
        let draw = m.prefixes(at(3), 64, 4);
        assert_eq!(draw, m.prefixes(at(3), 64, 4));
        assert_ne!(draw, m.prefixes(at(4), 64, 4));
        assert!(draw.iter().all(|s| (1..=3).contains(s)), "{draw:?}");
        assert!((1..=3).all(|s| draw.contains(&s)), "{draw:?}");
        let same = aim(AimTarget::SamePatch).prefixes(at(3), 64, 4);
        assert!(same.iter().all(|s| (0..=2).contains(s)), "{same:?}");
    }

    /// A prediction sees the prefix and the patches before it only: with prefixes of 2 of the
    /// 4 patches, changing the pixels of patch 3 moves the prediction at position 3 alone, and
    /// changing patch 0 (in the prefix) moves every position's.
    #[test]
    fn a_prediction_sees_the_prefix_and_the_patches_before_it() {
        let m = aim(AimTarget::NextPatch);
        let x = host(images(1));
        let with = |patch: usize| {
            let mut v = x.clone();
            let (r0, c0) = (patch / 2 * 4, patch % 2 * 4);
            for (r, c) in (0..4).flat_map(|r| (0..4).map(move |c| (r, c))) {
                v[(r0 + r) * 8 + c0 + c] += 0.5;
            }
            let t =
                Tensor::<Ad, 4>::from_data(TensorData::new(v, [1, 1, 8, 8]), &Default::default());
            host(m.online.predict(t, &[2]))
        };
        let base = host(m.online.predict(images(1), &[2]));
        let moved = |after: Vec<f64>| -> Vec<bool> {
            (0..4)
                .map(|k| (0..16).any(|j| (after[k * 16 + j] - base[k * 16 + j]).abs() > 1e-12))
                .collect()
        };
        assert_eq!(moved(with(3)), [false, false, false, true]);
        assert_eq!(moved(with(0)), [true; 4]);
    }

    #[test]
    fn a_backbone_that_is_no_vit_and_impossible_settings_are_named() {
        let device = Default::default();
        fn vit(side: usize) -> impl Fn(&Dev) -> curriculum_ssl_models::Vit<Ad> {
            move |d| crate::method::testing::vit_config(side, 4).init(d)
        }
        let err = AimConfig::new().init(vit(4), &device).unwrap_err();
        assert_eq!(err.field, "backbone");
        let err = AimConfig::new()
            .with_head_dim(0)
            .init(vit(8), &device)
            .unwrap_err();
        assert_eq!(err.field, "head_dim");
        let err = AimConfig::new()
            .with_head_mlp_ratio(0.0)
            .init(vit(8), &device)
            .unwrap_err();
        assert_eq!(err.field, "head_mlp_ratio");
        let err = AimConfig::new()
            .init(
                |d| {
                    curriculum_ssl_models::AnyBackbone::LeNet(
                        curriculum_ssl_models::LeNetConfig::lenet5().init::<Ad>(d),
                    )
                },
                &device,
            )
            .unwrap_err();
        assert_eq!(err.field, "backbone");
        assert!(err.to_string().contains("ViT backbone"), "{err}");
    }
}
