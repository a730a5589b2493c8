//! `simmim`: SimMIM (Xie et al. 2022, <https://arxiv.org/abs/2111.09886>; see
//! docs/methods.md#simmim) on a Vision Transformer, ViT-Tiny by default (`--backbone
//! vit-tiny|vit-small|vit-base`; patches of 4 pixels under 96-pixel images).
//!
//! The paper's setting where it runs on the CPU: 60 % of the mask units hidden, units of 2 × 2
//! patches (the paper's 32-pixel units on 16-pixel patches; on Fashion-MNIST's 7 × 7 grid the last
//! row and column of units are one patch wide), a linear head on the encoded tokens, L1 on the
//! hidden pixels, AdamW (β 0.9/0.999, weight decay 0.05) at lr 8e-4 × B/512 with a warm-up, one
//! view cropped to 67–100 % of the image and flipped.
//!
//! ```text
//! for each batch x:
//!     v = aug(x);  hide = 60 % of each image's 2 × 2-patch units
//!     z = encoder(patch tokens of v, a mask token at every hidden patch)
//!     loss = mean over hidden pixels of |linear(z) − v|
//!     AdamW step on encoder, mask token and head
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::curriculum::mask_schedule;
use curriculum_ssl::method::SimMimConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, BackboneChoice, Defaults};

/// One view, cropped to 67–100 % of the image and flipped, without colour distortion (SimMIM's).
fn preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::simclr(side, channels);
    for v in [&mut p.view1, &mut p.view2] {
        if let Some(crop) = &mut v.crop {
            crop.scale = (0.67, 1.0);
        }
        v.jitter = None;
        v.grayscale = None;
        v.blur = None;
        v.solarize = None;
    }
    p
}

/// The paper's learning rate for a batch of `batch` images: 8e-4 × B / 512.
fn lr(batch: usize) -> f64 {
    8e-4 * batch as f64 / 512.0
}

fn defaults(name: &'static str) -> Defaults {
    // A warm-up of 10 % of the run (the paper's 10 of 100 epochs).
    Defaults::new(name, 20, 128, lr(128), preset)
        .lr_rule(lr)
        .warmup(2)
        .backbone(BackboneChoice::VitTiny)
}

/// Runs `simmim`.
pub fn run(args: &[String]) -> Result<()> {
    train(args, defaults("simmim"), SimMimConfig::new())
}

/// Runs `simmim_ratio_curriculum`: the hidden fraction of the units from 0.3 to the paper's 0.6
/// in a straight line over the run's steps (docs/methods.md#masking-curricula).
pub fn ratio_curriculum(args: &[String]) -> Result<()> {
    let config = SimMimConfig::new().with_mask_ratio_schedule(Some(mask_schedule::easy_to_hard(0.3, 0.6)));
    train(args, defaults("simmim_ratio_curriculum"), config)
}

fn train(args: &[String], defaults: Defaults, config: SimMimConfig) -> Result<()> {
    let recipe = common::prepare(args, defaults)?;
    // The masks are drawn from `--seed` (a study's seeds draw different masks).
    let config = recipe.section("method", config.with_seed(recipe.settings.seed))?;
    let optimizer = recipe.section("optimizer", AdamWConfig::new().with_weight_decay(0.05))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "simmim",
        summary: "SimMIM (Xie et al. 2022): 60 % of 2 × 2-patch units hidden, pixels predicted by a linear head; ViT-Tiny by default",
        run,
    },
    RecipeEntry {
        name: "simmim_ratio_curriculum",
        summary: "SimMIM under a masking curriculum: the hidden fraction of the units from 0.3 to 0.6 along the run",
        run: ratio_curriculum,
    },
];
