//! I-JEPA (documented on `Ijepa`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone};

use super::ijepa_masks::{BlockSettings, IjepaMasks};
use super::ijepa_predictor::IjepaPredictor;
use super::masking::{check_token_transformer, encode_kept, first_view, patch_grid};
use super::masking::{require_vit, vit};
use super::masking::{PatchMask, StepMasks};
use super::momentum::MomentumEncoder;
use super::ssl_method::{momentum_state, online_in, replica_in, HasBackbone, MethodOutput};
use super::ssl_method::{SslMethod, Views};
use crate::base::error::{in_range, ConfigError};
use crate::base::schedule::SchedulerConfig;
use crate::base::Progress;
use crate::curriculum::mask_schedule;

/// Configuration of [`Ijepa`].
#[derive(Config, Debug)]
pub struct IjepaConfig {
    /// The predictor's width (the paper's 384 for ViT-H).
    #[config(default = 384)]
    pub predictor_dim: usize,
    /// The predictor's blocks (the paper's 12).
    #[config(default = 12)]
    pub predictor_depth: usize,
    /// The predictor's attention heads (12).
    #[config(default = 12)]
    pub predictor_heads: usize,
    /// Target blocks per image (the paper's 4).
    #[config(default = 4)]
    pub targets: usize,
    /// Least and largest share of the patches a target block covers (0.15, 0.2).
    #[config(default = "(0.15, 0.2)")]
    pub target_scale: (f64, f64),
    /// The target blocks' scale range multiplied by a factor along a schedule (a masking
    /// curriculum, [`crate::curriculum::mask_schedule`]: e.g. 0.5 → 1, small and local targets
    /// first, the paper's semantic ones at the end); `None`: `target_scale` throughout. Its values
    /// must keep the range inside `(0, 1]`.
    #[config(default = "None")]
    pub target_scale_schedule: Option<SchedulerConfig>,
    /// Least and largest aspect ratio (height / width) of a target block (0.75, 1.5).
    #[config(default = "(0.75, 1.5)")]
    pub target_aspect: (f64, f64),
    /// Least and largest share of the patches the context block covers before the targets are
    /// taken out (0.85, 1.0).
    #[config(default = "(0.85, 1.0)")]
    pub context_scale: (f64, f64),
    /// Fewest patches a block keeps (the authors' `min_keep`; lightly's 4).
    #[config(default = 4)]
    pub min_keep: usize,
    /// The target encoder's momentum at the start (0.996), rising to 1 along a cosine.
    #[config(default = 0.996)]
    pub base_momentum: f64,
    /// Seed of the blocks: a step's blocks are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl IjepaConfig {
    /// Builds I-JEPA around backbones made by `backbone` (called twice: the encoder, and a fresh
    /// module into which the target encoder's copy is loaded), which must be Vision Transformers.
    ///
    /// # Errors
    /// A backbone that is not a ViT; a predictor width that is zero, not a multiple of 4 (its
    /// sine-cosine positions) or of the heads; no predictor block or target; a scale outside
    /// `(0, 1]` or an aspect ratio that is not positive, or a range in the wrong order; each
    /// named.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Ijepa<B, M>, ConfigError> {
        let (dim, heads) = (self.predictor_dim, self.predictor_heads);
        check_token_transformer(
            ["predictor_dim", "predictor_heads", "predictor_depth"],
            "predictor",
            (dim, heads, self.predictor_depth),
        )?;
        if self.targets == 0 {
            return Err(ConfigError::new("targets", "at least one target block"));
        }
        for (field, (low, high), top) in [
            ("target_scale", self.target_scale, 1.0),
            ("context_scale", self.context_scale, 1.0),
            ("target_aspect", self.target_aspect, f64::MAX),
        ] {
            in_range(field, low, 0.0, top, true)?;
            in_range(field, high, 0.0, top, true)?;
            if low > high {
                return Err(ConfigError::new(
                    field,
                    format!("its range runs backwards: ({low}, {high})"),
                ));
            }
        }
        mask_schedule::validate(
            "target_scale_schedule",
            self.target_scale_schedule.as_ref(),
            1e-3,
            1.0 / self.target_scale.1,
        )?;
        let encoder = backbone(device);
        let vit = require_vit(&encoder, "I-JEPA predicts the patch tokens of")?;
        let width = vit.embed_dim();
        // The patches of the configured grid (the positions past the class token), read from
        // the shape without drawing the lazily initialised embedding.
        // A block spans at most `side - 1` rows and columns ([`block_size`]).
        let patches = vit.grid_tokens();
        let side = patches.isqrt();
        let largest = (side.max(2) - 1).pow(2);
        if self.min_keep > largest {
            return Err(ConfigError::new(
                "min_keep",
                format!(
                    "{} is more than the {largest} patches the largest context block holds on \
                     the image's {side}x{side} grid: no context could keep that many (the \
                     authors' and lightly's 4)",
                    self.min_keep
                ),
            ));
        }
        let predictor = IjepaPredictor::new(width, (dim, heads, self.predictor_depth), device);
        let target = MomentumEncoder::new(
            &encoder,
            backbone(device),
            self.base_momentum,
            true,
            "base_momentum",
        )?;
        Ok(Ijepa {
            online: IjepaNetwork {
                backbone: encoder,
                predictor,
            },
            target,
            config: self.clone(),
            step_masks: StepMasks::new(0x494a_4550_4142_4c4b, self.seed),
        })
    }
}

/// I-JEPA's trainable networks: the ViT encoder (the backbone) and the predictor.
#[derive(Module, Debug)]
pub struct IjepaNetwork<B: Backend, M> {
    /// The context encoder.
    pub backbone: M,
    /// The predictor.
    pub predictor: IjepaPredictor<B>,
}

impl<B: Backend, M> HasBackbone<M> for IjepaNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl IjepaConfig {
    /// The blocks of `images` images on a `grid` of patches, drawn from `rng` (the sampler is
    /// described on [`Ijepa`]).
    pub fn masks(
        &self,
        images: usize,
        grid: (usize, usize),
        rng: &mut impl rand::Rng,
    ) -> IjepaMasks {
        BlockSettings {
            targets: self.targets,
            target_scale: self.target_scale,
            target_aspect: self.target_aspect,
            context_scale: self.context_scale,
            min_keep: self.min_keep,
        }
        .draw(images, grid, rng)
    }
}

/// I-JEPA. Build it with [`IjepaConfig::init`].
///
/// I-JEPA (Assran et al., "Self-Supervised Learning from Images with a Joint-Embedding Predictive
/// Architecture", CVPR 2023, <https://arxiv.org/abs/2301.08243>): from a large context block of
/// an image, a narrow transformer (the predictor) predicts the target encoder's representations of
/// a few target blocks of the same image — in latent space, no pixels reconstructed, no second
/// view, no hand-made augmentation.
///
/// ```text
/// for each batch x:
///     targets B_1 .. B_M (M = 4 blocks), context C (one large block minus every B_i)
///     s_C = encoder(patches of x in C)                       (the online ViT on C only)
///     h   = layer_norm(target_encoder(x))                    (every patch, no gradient)
///     ŝ_i = predictor(s_C, positions of C, mask tokens at the positions of B_i)
///     loss = mean over i, images, tokens, features of smooth_l1(ŝ_i − h[B_i])
///     target_encoder ← EMA(encoder)
/// ```
///
/// The blocks (the authors' `MaskCollator`, lightly's `IJEPAMaskCollator`): per step one target
/// block size is drawn — a scale `s` in `[0.15, 0.2]` of the `L` patches and an aspect ratio `a`
/// in `[0.75, 1.5]` from one uniform draw, `h = round(√(⌊L·s⌋·a))`, `w = round(√(⌊L·s⌋/a))`,
/// each below the grid's side — and one context block size (scale `[0.85, 1]`, square); each
/// image places its `M` target blocks and then its context block at random, the context keeping
/// only patches outside every target block (if fewer than `min_keep` remain, the constraint
/// drops the target blocks one by one, as the authors' retries do). Every image's lists are cut
/// to the batch's shortest, in row-major order, so the batch's tensors are rectangular. Drawn on
/// the host from `(seed, step)`. `target_scale_schedule` multiplies the target scale range along a
/// schedule (a masking curriculum: small, local targets first).
///
/// What differs from the authors' code, and why: the ViT here has a class token, which the
/// encoder carries along with the context patches and the predictor does not see (the authors'
/// ViT has none); the target encoder's momentum rises to 1 along a cosine (theirs along a line);
/// the smooth-L1 loss (β = 1) is their code's, where the paper writes L2. On several replicas
/// each replica draws the global batch's blocks (its lists cut to the global batch's shortest)
/// and keeps its rows. The math and the defaults are in `docs/methods.md#i-jepa`.
#[derive(Debug, Clone)]
pub struct Ijepa<B: Backend, M: Backbone<B>> {
    online: IjepaNetwork<B, M>,
    target: MomentumEncoder<M>,
    config: IjepaConfig,
    step_masks: StepMasks<B>,
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> Ijepa<B, M> {
    /// The target encoder (the EMA copy of the encoder).
    pub fn target(&self) -> &MomentumEncoder<M> {
        &self.target
    }

    /// The factor on the target blocks' scale range at `progress` (the schedule's, or 1).
    pub fn target_scale_factor(&self, progress: Progress) -> f64 {
        mask_schedule::mask_ratio_at(1.0, self.config.target_scale_schedule.as_ref(), progress)
    }

    /// The blocks of the step at `progress` for `images` images on `grid`, from `(seed, step)`,
    /// the target scale range at the step's factor.
    pub fn masks(&self, progress: Progress, images: usize, grid: (usize, usize)) -> IjepaMasks {
        let mut rng = self.step_masks.rng(progress);
        let f = self.target_scale_factor(progress);
        let (low, high) = self.config.target_scale;
        let config = self.config.clone().with_target_scale((low * f, high * f));
        config.masks(images, grid, &mut rng)
    }

    /// The encoder on the context patches: their tokens after the blocks and the final norm
    /// (the class token, carried along, dropped).
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, K_c, D]`
    pub fn encode_context(&self, images: Tensor<B, 4>, context: &PatchMask) -> Tensor<B, 3> {
        let x = encode_kept(vit(&self.online.backbone), images, context);
        let [n, t, d] = x.dims();
        x.slice([0..n, 1..t, 0..d])
    }

    /// The target encoder's patch tokens, layer-normalised over the features without scale or
    /// shift (the authors' `F.layer_norm`, ε = 1e-5), at every target block (block-major), with
    /// no gradient.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[M·N, K_t, D]`
    pub fn targets(&self, images: Tensor<B, 4>, masks: &IjepaMasks) -> Tensor<B, 3> {
        let tokens = vit(self.target.network())
            .forward_tokens(images.detach())
            .detach();
        let [n, t, d] = tokens.dims();
        let patches = tokens.slice([0..n, 1..t, 0..d]);
        let mean = patches.clone().mean_dim(2);
        let centred = patches - mean;
        let variance = centred.clone().powi_scalar(2).mean_dim(2);
        let normed = centred / (variance + 1e-5).sqrt();
        Tensor::cat(
            masks
                .targets
                .iter()
                .map(|m| m.gather(normed.clone()))
                .collect(),
            0,
        )
        .detach()
    }

    /// The loss on `images` with `masks`: smooth L1 (β = 1) between the predictions and the
    /// targets, the mean over every block, image, token and feature.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[1]`
    pub fn loss(&self, images: Tensor<B, 4>, masks: &IjepaMasks) -> Tensor<B, 1> {
        let grid = patch_grid(vit(&self.online.backbone), &images);
        let targets = self.targets(images.clone(), masks);
        let context = self.encode_context(images, &masks.context);
        let predicted =
            self.online
                .predictor
                .forward(context, &masks.context, &masks.targets, grid);
        smooth_l1(predicted - targets)
    }
}

/// The mean of smooth L1 (β = 1) over every element of `difference`: `½x²` where `|x| < 1`,
/// `|x| − ½` elsewhere (PyTorch's `smooth_l1_loss`).
fn smooth_l1<B: Backend, const D: usize>(difference: Tensor<B, D>) -> Tensor<B, 1> {
    let absolute = difference.clone().abs();
    let inside = absolute.clone().lower_elem(1.0).float();
    let quadratic = difference.powi_scalar(2).mul_scalar(0.5);
    let linear = absolute.sub_scalar(0.5);
    (quadratic * inside.clone() + linear * (inside.neg() + 1.0)).mean()
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for Ijepa<B, M> {
    type Online = IjepaNetwork<B, M>;
    type Backbone = M;
    momentum_state!(record of target);
    online_in!(online);

    /// The loss on the first global view (I-JEPA reads one view of each image).
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (images, grid) = first_view(views, vit(&self.online.backbone));
        let n = images.dims()[0];
        // The global batch's blocks (cut to its shortest lists), this replica's rows.
        let (total, first) = self.step_masks.global_rows(n);
        let global = self.masks(progress, total, grid);
        let masks = IjepaMasks {
            context: global.context.rows(first, n),
            targets: global.targets.iter().map(|t| t.rows(first, n)).collect(),
        };
        let loss = self.loss(images, &masks);
        let l = (grid.0 * grid.1).max(1) as f64;
        MethodOutput::new(loss)
            .with_value("target_scale_factor", self.target_scale_factor(progress))
            .with_value("context_fraction", masks.context.visible() as f64 / l)
            .with_value("target_fraction", masks.targets[0].visible() as f64 / l)
            .with_momentum(self.target.momentum_at(progress))
    }

    replica_in!(
        /// Each replica draws the global batch's blocks and keeps its rows: every replica's loss is
        /// a mean over as many elements, so their average is the one-device loss.
        step_masks
    );

    fn after_step(&mut self, progress: Progress) {
        self.target.update(&self.online, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, progress, Ad, Dev};
    use curriculum_ssl_models::Vit;

    /// A ViT of 12 × 12 one-channel images in 2 × 2 patches (a 6 × 6 grid), tokens 8 wide, one
    /// block of two heads.
    fn tiny_vit(d: &Dev) -> Vit<Ad> {
        crate::method::testing::tiny_vit(12, d)
    }

    fn config() -> IjepaConfig {
        IjepaConfig::new()
            .with_predictor_dim(8)
            .with_predictor_depth(1)
            .with_predictor_heads(2)
    }

    fn ijepa() -> Ijepa<Ad, Vit<Ad>> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 5, |d| {
            config().init(tiny_vit, d)
        })
        .unwrap()
    }

    fn images(n: usize, phase: f64) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, 12, phase)
    }

    /// On a 14 × 14 grid (the authors' 224 px at patch 16) over many draws: every target block
    /// is a rectangle of the step's size inside the grid, every image's lists are as long as the
    /// batch's shortest, and the context never holds a target patch of its image (with room to
    /// spare, the relaxation is not needed at this size).
    #[test]
    fn blocks_are_rectangles_and_the_context_avoids_the_targets() {
        let grid = (14, 14);
        let config = IjepaConfig::new();
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
        for _ in 0..20 {
            let masks = config.masks(6, grid, &mut rng);
            assert_eq!(masks.targets.len(), 4);
            let kt = masks.targets[0].visible();
            // ⌊196 · [0.15, 0.2]⌋ = 29..39 patches, sides rounded: (√(k·a) ± ½)(√(k/a) ± ½)
            // keeps it within 23..45.
            assert!((23..=45).contains(&kt), "{kt}");
            for t in &masks.targets {
                assert_eq!(t.visible(), kt, "every block as long");
                for i in 0..6 {
                    // A whole rectangle: as many patches as its bounding box.
                    let kept: Vec<usize> = (0..196).filter(|&p| !t.is_hidden(i, p)).collect();
                    let rows = kept.iter().map(|p| p / 14);
                    let cols = kept.iter().map(|p| p % 14);
                    let height = rows.clone().max().unwrap() - rows.min().unwrap() + 1;
                    let width = cols.clone().max().unwrap() - cols.min().unwrap() + 1;
                    assert_eq!(height * width, kt, "image {i}: {kept:?}");
                }
            }
            assert!(masks.context.visible() >= config.min_keep);
            for i in 0..6 {
                for p in 0..196 {
                    let in_context = !masks.context.is_hidden(i, p);
                    let in_a_target = masks.targets.iter().any(|t| !t.is_hidden(i, p));
                    assert!(!(in_context && in_a_target), "image {i}, patch {p}");
                }
            }
        }
    }

    /// The context encoder never sees a patch outside its context: changing those pixels
    /// changes nothing it outputs.
    #[test]
    fn the_encoder_sees_only_the_context() {
        let m = ijepa();
        let masks = m.masks(progress(3, 100, 0, 10), 2, (6, 6));
        let a = images(2, 0.0);
        let mut values = host(a.clone());
        for i in 0..2 {
            for p in (0..36).filter(|&p| masks.context.is_hidden(i, p)) {
                let (r, c) = (p / 6 * 2, p % 6 * 2);
                values[i * 144 + r * 12 + c] += 4.0;
            }
        }
        let b = Tensor::<Ad, 4>::from_data(
            TensorData::new(values, [2, 1, 12, 12]),
            &Default::default(),
        );
        assert_eq!(
            host(m.encode_context(a, &masks.context)),
            host(m.encode_context(b, &masks.context))
        );
    }

    /// The loss against smooth L1 computed here from the predictions and the targets, which
    /// are the target encoder's patch tokens normalised per token and gathered per block; no
    /// gradient reaches the target encoder.
    #[test]
    fn the_loss_is_smooth_l1_against_normalised_target_tokens() {
        let m = ijepa();
        let x = images(3, 0.5);
        let masks = m.masks(progress(1, 100, 0, 10), 3, (6, 6));
        let tokens = host(vit(m.target().network()).forward_tokens(x.clone()));
        let targets = host(m.targets(x.clone(), &masks));
        let (kt, d) = (masks.targets[0].visible(), 8);
        for (b, block) in masks.targets.iter().enumerate() {
            for i in 0..3 {
                let kept: Vec<usize> = (0..36).filter(|&p| !block.is_hidden(i, p)).collect();
                for (k, p) in kept.iter().enumerate() {
                    let row = &tokens[(i * 37 + 1 + p) * d..(i * 37 + 2 + p) * d];
                    let mean = row.iter().sum::<f64>() / d as f64;
                    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
                    for f in 0..d {
                        let want = (row[f] - mean) / (var + 1e-5).sqrt();
                        let got = targets[((b * 3 + i) * kt + k) * d + f];
                        assert!((got - want).abs() < 1e-12, "block {b} image {i} token {k}");
                    }
                }
            }
        }
        let context = m.encode_context(x.clone(), &masks.context);
        let predicted = host(m.online.predictor.forward(
            context,
            &masks.context,
            &masks.targets,
            (6, 6),
        ));
        let expected = predicted
            .iter()
            .zip(&targets)
            .map(|(p, t)| {
                let a = (p - t).abs();
                if a < 1.0 {
                    0.5 * a * a
                } else {
                    a - 0.5
                }
            })
            .sum::<f64>()
            / predicted.len() as f64;
        let loss = m.loss(x, &masks);
        let value: f64 = loss.clone().into_scalar();
        assert!((value - expected).abs() < 1e-12, "{value} vs {expected}");
        let grads = loss.backward();
        let target_vit = vit(m.target().network());
        assert!(target_vit.patch_embed.weight.val().grad(&grads).is_none());
        assert!(m.online.predictor.mask_token.val().grad(&grads).is_some());
    }

    /// The predictor's mask token and the encoder's class token are trained: their gradients
    /// equal central finite differences of the loss.
    #[test]
    fn gradients_match_finite_differences() {
        let m = ijepa();
        let x = images(2, 1.1);
        let masks = m.masks(progress(2, 100, 0, 10), 2, (6, 6));
        let grads = m.loss(x.clone(), &masks).backward();
        let token = host(m.online.predictor.mask_token.val().grad(&grads).unwrap());
        let class = host(
            vit(&m.online.backbone)
                .cls_token
                .val()
                .grad(&grads)
                .unwrap(),
        );
        let h = 1e-6;
        let shifted = |which: usize, i: usize, delta: f64| -> f64 {
            let mut net = m.online.clone();
            let param = match which {
                0 => &mut net.predictor.mask_token,
                _ => &mut net.backbone.cls_token,
            };
            let mut v = host(param.val());
            v[i] += delta;
            *param = burn::module::Param::from_tensor(Tensor::from_data(
                TensorData::new(v, [1, 1, 8]),
                &Default::default(),
            ));
            let mut shifted = m.clone();
            shifted.online = net;
            shifted.loss(x.clone(), &masks).into_scalar()
        };
        for (which, analytic) in [(0, &token), (1, &class)] {
            for i in [0, 5] {
                let numeric = (shifted(which, i, h) - shifted(which, i, -h)) / (2.0 * h);
                assert!(
                    (numeric - analytic[i]).abs() < 1e-6 * numeric.abs().max(1.0),
                    "parameter {which}[{i}]: {numeric} vs {}",
                    analytic[i]
                );
                assert!(
                    analytic[i].abs() > 1e-9,
                    "parameter {which}[{i}] is trained"
                );
            }
        }
    }

    /// Under a block-scale curriculum (0.5 → 1 along the run) the target blocks grow as
    /// scheduled: on a 14 × 14 grid at step 0 of 10 a block holds about ⌊196 · [0.075, 0.1]⌋
    /// = 14..19 patches (sides rounded: 10..25), at the end the paper's 29..39 (23..45).
    #[test]
    fn a_scheduled_block_scale_grows_the_targets() {
        let m = crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 5, |d| {
            config()
                .with_target_scale_schedule(Some(mask_schedule::easy_to_hard(0.5, 1.0)))
                .init(tiny_vit, d)
        })
        .unwrap();
        let at = |step| progress(step, 10, 0, 1);
        assert_eq!(m.target_scale_factor(at(0)), 0.5);
        assert_eq!(m.target_scale_factor(at(5)), 0.75);
        assert_eq!(m.target_scale_factor(at(10)), 1.0);
        for (step, range) in [(0, 10..=25), (10, 23..=45)] {
            let kt = m.masks(at(step), 4, (14, 14)).targets[0].visible();
            assert!(range.contains(&kt), "step {step}: {kt}");
        }
        let e = config()
            .with_target_scale_schedule(Some(mask_schedule::easy_to_hard(0.5, 6.0)))
            .init(tiny_vit, &Default::default())
            .unwrap_err();
        assert_eq!(e.field, "target_scale_schedule");
    }

    #[test]
    fn impossible_settings_are_named() {
        let device = Default::default();
        let e = config()
            .with_predictor_dim(6)
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "predictor_dim");
        let e = config()
            .with_target_scale((0.3, 0.2))
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "target_scale");
        let e = config()
            .with_targets(0)
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "targets");
    }
}
