//! `ibot`, `ibot_plus_plus` and `dinov2`: iBOT (Zhou et al. 2022,
//! <https://arxiv.org/abs/2111.07832>), iBOT++ (TIPSv2, 2026, <https://arxiv.org/abs/2604.12012>)
//! and DINOv2's training objective (Oquab et al. 2023, <https://arxiv.org/abs/2304.07193>) on a
//! Vision Transformer, ViT-Tiny by default (`--backbone vit-tiny|vit-small|vit-base`; patches of
//! 4 pixels under 96-pixel images); see docs/methods.md#ibot.
//!
//! All three: DINO's multi-crop views (two global views and [`multi_crop::LOCAL_CROPS`] local crops,
//! BYOL's operations; the papers' 2 + 10), half of the global views hiding 10–50 % of their
//! patches, one head shared by [CLS] and patch tokens with 4,096 outputs (the papers' 8,192, as
//! the `dino` recipe's CPU width), teacher temperature 0.04 → 0.07 over the first 30 % of the
//! epochs, student 0.1, centres 0.9, teacher momentum 0.996 → 1, AdamW with weight decay 0.04
//! (the papers' 0.04 → 0.4 / 0.2 schedule is not here) and a warm-up of 10 % of the epochs.
//! - `ibot`: the patch loss weighted 1, no KoLeo; lr 5e-4 × B/256 (the paper's).
//! - `ibot_plus_plus`: `ibot` with iBOT++'s patch loss: the visible tokens' outputs also learn
//!   the teacher's, each image's mean over them weighted 1 (the default `visible_loss_weight` of
//!   lightly 1.6's `IBOTPlusPlusPatchLoss.forward`; lightly has no iBOT++ example or benchmark to
//!   take other settings from, so the rest is `ibot`'s), and the patch centre moves by every
//!   patch token of the global views.
//! - `dinov2`: KoLeo at 0.1 on the student's [CLS] features, Sinkhorn–Knopp centring of the
//!   teacher's outputs (3 iterations) instead of the centres; lr 4e-3 × √(B/1024) (DINOv2's
//!   square-root rule). Not here: layer scale, stochastic depth, layer-wise lr decay, the
//!   register tokens of the later paper.
//!
//! ```text
//! for each batch x:
//!     g1, g2, l1 .. lV = multi_crop(x);  hide patches of half the global views
//!     teacher(g1, g2) → [CLS] and patch outputs (centred, sharpened)
//!     student(masked g1, g2; l1 .. lV) → outputs
//!     loss = DINO on [CLS] + iBOT on the hidden tokens (+ 0.1 · KoLeo for dinov2)
//!            (+ the same on the visible tokens for ibot_plus_plus)
//!     AdamW step on the student; teacher ← EMA(student)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::loss::{DinoLossConfig, IbotPatchLossConfig};
use curriculum_ssl::method::IbotConfig;

use super::common::{self, BackboneChoice, Defaults};
use super::multi_crop;

/// Epochs of the recipes.
const EPOCHS: usize = 20;

fn defaults(name: &'static str, lr: fn(usize) -> f64) -> Defaults {
    Defaults::new(name, EPOCHS, 128, lr(128), multi_crop::dino_views)
        .lr_rule(lr)
        .warmup(EPOCHS / 10)
        .backbone(BackboneChoice::VitTiny)
}

/// iBOT's learning rate for a batch of `batch`: 5e-4 × B / 256.
fn ibot_lr(batch: usize) -> f64 {
    5e-4 * batch as f64 / 256.0
}

/// DINOv2's learning rate for a batch of `batch`: 4e-3 × √(B / 1024).
fn dinov2_lr(batch: usize) -> f64 {
    4e-3 * (batch as f64 / 1024.0).sqrt()
}

/// The `ibot` recipe's method.
pub fn ibot_config() -> IbotConfig {
    IbotConfig::new().with_output_dim(4096).with_loss(
        DinoLossConfig::new()
            .with_warmup_teacher_temp(0.04)
            .with_teacher_temp(0.07)
            .with_warmup_teacher_temp_epochs(EPOCHS * 3 / 10),
    )
}

/// Runs `ibot`.
pub fn ibot(args: &[String]) -> Result<()> {
    train(args, defaults("ibot", ibot_lr), ibot_config())
}

/// The `ibot_plus_plus` recipe's method: [`ibot_config`] with the visible tokens weighted 1.
pub fn ibot_plus_plus_config() -> IbotConfig {
    ibot_config().with_patch_loss(IbotPatchLossConfig::new().with_visible_loss_weight(1.0))
}

/// Runs `ibot_plus_plus`.
pub fn ibot_plus_plus(args: &[String]) -> Result<()> {
    train(
        args,
        defaults("ibot_plus_plus", ibot_lr),
        ibot_plus_plus_config(),
    )
}

/// Runs `dinov2`.
pub fn dinov2(args: &[String]) -> Result<()> {
    let config = ibot_config()
        .with_koleo_weight(0.1)
        .with_sinkhorn_knopp(true);
    train(args, defaults("dinov2", dinov2_lr), config)
}

fn train(args: &[String], defaults: Defaults, config: IbotConfig) -> Result<()> {
    let recipe = common::prepare(args, defaults)?;
    // The masks are drawn from `--seed` (a study's seeds draw different masks).
    let config = recipe.section("method", config.with_seed(recipe.settings.seed))?;
    let optimizer = recipe.section("optimizer", AdamWConfig::new().with_weight_decay(0.04))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "ibot",
        summary: "iBOT (Zhou et al. 2022): DINO on [CLS] plus masked patch-token self-distillation, multi-crop 2+6; ViT-Tiny by default",
        run: ibot,
    },
    RecipeEntry {
        name: "ibot_plus_plus",
        summary: "iBOT++ (TIPSv2 2026, lightly's IBOTPlusPlusPatchLoss): iBOT whose patch loss also distils the visible tokens (weight 1); ViT-Tiny by default",
        run: ibot_plus_plus,
    },
    RecipeEntry {
        name: "dinov2",
        summary: "DINOv2's objective (Oquab et al. 2023): iBOT plus the KoLeo regulariser, lr by DINOv2's square-root rule; ViT-Tiny by default",
        run: dinov2,
    },
];
