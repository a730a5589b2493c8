//! `visreg`: VISReg (Wu, Balestriero & Levine 2026, <https://arxiv.org/abs/2606.02572>; see
//! docs/methods.md#visreg) with the authors' ImageNet configuration (`configs/default.yaml` and
//! `configs/loss/visreg.yaml` of HaiyuWu/visreg; lightly has the loss but no example) as far as
//! this project's views go: the three-layer projector `[2048, 2048]` → 256 with GELU, `λ = 0.9`
//! with unit weights on centre, scale and shape (4,096 directions a step), DINO's multi-crop
//! operations with global crops of scale (0.3, 1) and 6 local crops ((0.05, 0.3) at ImageNet
//! size, (0.2, 0.5) under 96 pixels as the other multi-crop recipes), AdamW at lr 9e-4 (the
//! authors' rate at 16 images per GPU on the 8 GPUs of their README's launch: 128 a step, this
//! recipe's batch) with weight decay 0.05. Scaled to the CPU default: two global views (the
//! authors' 4; a step here has two), 20 epochs with one of warm-up (the authors' 100 with 5).
//!
//! ```text
//! for each batch x:
//!     g1, g2, l1 .. lV = multi_crop(x)
//!     z = h(f(·)) of every crop (the global views one batch, the local crops another)
//!     reg  = scale(z) + shape(z, K fresh directions) + center(z)
//!     loss = λ · reg + (1 − λ) · mean ‖mean(z_g1, z_g2) − z_v‖²
//!     AdamW step on f, h
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::method::VisRegConfig;
use curriculum_ssl::pipeline::{PipelineConfig, Preset};

use super::common::{self, Defaults};
use super::multi_crop::multi_crop;

/// VISReg's views: DINO's operations (BYOL's), global (0.3, 1), local (0.05, 0.3) (the authors'
/// `DinoMultiCrop` scales, LeJEPA's).
fn views(side: usize, channels: usize) -> PipelineConfig {
    multi_crop(Preset::Byol, side, channels, (0.3, 1.0), (0.05, 0.3))
}

fn defaults() -> Defaults {
    Defaults::new("visreg", 20, 128, 9e-4, views).warmup(1)
}

/// Runs `visreg`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = VisRegConfig::new().with_seed(recipe.settings.seed);
    let config = recipe.section("method", config)?;
    let optimizer = recipe.section("optimizer", AdamWConfig::new().with_weight_decay(0.05))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "visreg",
    summary: "VISReg (Wu et al. 2026): centre + scale + sliced-Wasserstein shape + invariance to the global views' mean, multi-crop 2+6, AdamW",
    run,
}];
