//! `lejepa`: LeJEPA (Balestriero & LeCun 2025, <https://arxiv.org/abs/2511.08544>; see
//! docs/methods.md#lejepa) with lightly's example settings: the three-layer projector
//! `[2048, 2048]` → 64, SIGReg with `λ = 0.05` (17 knots on `[0, 3]`, 1,024 directions a step),
//! DINO's multi-crop operations with global crops of scale (0.3, 1) and 6 local crops
//! ((0.05, 0.3) at ImageNet size, (0.2, 0.5) under 96 pixels as the other multi-crop recipes),
//! AdamW at lr 5e-4 with weight decay 0.05 and a warm-up of one epoch.
//!
//! ```text
//! for each batch x:
//!     g1, g2, l1 .. lV = multi_crop(x)
//!     z = h(f(·)) of every crop (the global views one batch, the local crops another)
//!     loss = λ · SIGReg(every z, K fresh directions) + (1 − λ) · mean ‖mean(z_g1, z_g2) − z_v‖²
//!     AdamW step on f, h
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::method::LeJepaConfig;
use curriculum_ssl::pipeline::{PipelineConfig, Preset};

use super::common::{self, Defaults};
use super::multi_crop::multi_crop;

/// LeJEPA's views: DINO's operations (BYOL's), global (0.3, 1), local (0.05, 0.3).
fn views(side: usize, channels: usize) -> PipelineConfig {
    multi_crop(Preset::Byol, side, channels, (0.3, 1.0), (0.05, 0.3))
}

fn defaults() -> Defaults {
    Defaults::new("lejepa", 20, 128, 5e-4, views).warmup(1)
}

/// Runs `lejepa`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = LeJepaConfig::new().with_seed(recipe.settings.seed);
    let config = recipe.section("method", config)?;
    let optimizer = recipe.section("optimizer", AdamWConfig::new().with_weight_decay(0.05))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "lejepa",
    summary: "LeJEPA (Balestriero and LeCun 2025): SIGReg + invariance to the global views' mean, multi-crop 2+6, AdamW",
    run,
}];
