//! `mae`: MAE (He et al. 2022, <https://arxiv.org/abs/2111.06377>; see docs/methods.md#mae) on a
//! Vision Transformer, ViT-Tiny by default (`--backbone vit-tiny|vit-small|vit-base`; patches of
//! 4 pixels under 96-pixel images).
//!
//! The paper's setting where it runs on the CPU: 75 % of the patches hidden, targets normalised
//! per patch, AdamW (β 0.9/0.95, weight decay 0.05) at lr 1.5e-4 × B/256 with a warm-up, one
//! view cropped to 20–100 % of the image and flipped. The decoder is scaled down from the
//! paper's 8 blocks of 512 (16 heads) to 2 blocks of 128 (4 heads) for ViT-Tiny on small images;
//! `method.decoder_dim=512 method.decoder_depth=8 method.decoder_heads=16` restores it.
//!
//! ```text
//! for each batch x:
//!     v = aug(x);  keep = a random 25 % of each image's patches
//!     z = encoder(patches(v)[keep])                           (the visible tokens only)
//!     p = decoder(z with a mask token at every hidden patch)   (pixels of every patch)
//!     loss = mean over hidden patches of ‖p − norm(patch)‖² / p²C
//!     AdamW step on encoder and decoder
//! ```
//!
//! `mae_hpm`: hard patches mining (Wang et al. 2023, <https://arxiv.org/abs/2304.05919>; see
//! docs/methods.md#hard-patches-mining) on the same MAE: a loss predictor (one block of the
//! decoder's width) ranks the patches by predicted reconstruction error, and the share of the
//! hidden patches chosen as its hardest rises from 0 to 0.5 over the epochs, the rest random.

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::curriculum::mask_schedule;
use curriculum_ssl::method::{HpmConfig, MaeConfig};
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, BackboneChoice, Defaults};

/// One view, cropped to 20–100 % of the image and flipped, without colour distortion (MAE's).
fn preset(side: usize, channels: usize) -> PipelineConfig {
    crop_and_flip(side, channels, 0.2)
}

/// Views cropped to `smallest`–100 % of the image and flipped, without colour distortion (MAE's
/// at 0.2, AIM's at 0.4).
pub fn crop_and_flip(side: usize, channels: usize, smallest: f64) -> PipelineConfig {
    let mut p = PipelineConfig::simclr(side, channels);
    for v in [&mut p.view1, &mut p.view2] {
        if let Some(crop) = &mut v.crop {
            crop.scale = (smallest, 1.0);
        }
        v.jitter = None;
        v.grayscale = None;
        v.blur = None;
        v.solarize = None;
    }
    p
}

/// The paper's learning rate for a batch of `batch` images: 1.5e-4 × B / 256 (AIM's example's
/// too).
pub fn lr(batch: usize) -> f64 {
    1.5e-4 * batch as f64 / 256.0
}

fn defaults(name: &'static str) -> Defaults {
    // The paper's 1.5e-4 × B / 256; a warm-up of 5 % of the run (40 of 800).
    Defaults::new(name, 20, 128, lr(128), preset)
        .lr_rule(lr)
        .warmup(1)
        .backbone(BackboneChoice::VitTiny)
}

/// The recipe's MAE: the decoder scaled to ViT-Tiny.
fn config() -> MaeConfig {
    MaeConfig::new()
        .with_decoder_dim(128)
        .with_decoder_depth(2)
        .with_decoder_heads(4)
}

/// Runs `mae`.
pub fn run(args: &[String]) -> Result<()> {
    train(args, defaults("mae"), config())
}

/// Runs `mae_ratio_curriculum`: the hidden fraction from 0.5 to the paper's 0.75 in a straight
/// line over the run's steps (docs/methods.md#masking-curricula).
pub fn ratio_curriculum(args: &[String]) -> Result<()> {
    let config = config().with_mask_ratio_schedule(Some(mask_schedule::easy_to_hard(0.5, 0.75)));
    train(args, defaults("mae_ratio_curriculum"), config)
}

/// Runs `mae_hpm`: hard patches mining on the recipe's MAE.
pub fn hard_patches(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults("mae_hpm"))?;
    let mae = config().with_seed(recipe.settings.seed);
    let config = recipe.section("method", HpmConfig::new().with_mae(mae))?;
    let optimizer = recipe.section("optimizer", adamw())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// MAE's AdamW: β₂ 0.95, weight decay 0.05.
fn adamw() -> AdamWConfig {
    AdamWConfig::new().with_beta_2(0.95).with_weight_decay(0.05)
}

fn train(args: &[String], defaults: Defaults, config: MaeConfig) -> Result<()> {
    let recipe = common::prepare(args, defaults)?;
    // The masks are drawn from `--seed` (a study's seeds draw different masks).
    let config = recipe.section("method", config.with_seed(recipe.settings.seed))?;
    let optimizer = recipe.section("optimizer", adamw())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "mae",
        summary: "MAE (He et al. 2022): 75 % of the patches hidden, pixels reconstructed; ViT-Tiny by default",
        run,
    },
    RecipeEntry {
        name: "mae_ratio_curriculum",
        summary: "MAE under a masking curriculum: the hidden fraction from 0.5 to 0.75 along the run",
        run: ratio_curriculum,
    },
    RecipeEntry {
        name: "mae_hpm",
        summary: "MAE with hard patches mining (Wang et al. 2023): a loss predictor picks the hardest patches to hide, from none to half of the hidden ones along the run",
        run: hard_patches,
    },
];
