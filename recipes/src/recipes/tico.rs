//! `tico`: TiCo (Zhu et al. 2022, <https://arxiv.org/abs/2206.10698>; see
//! docs/methods.md#tico) on the BYOL recipe's settings, which the paper builds on: projector
//! `[4096, 256]`, momentum encoder 0.99 → 1 along a cosine, `β = 0.9`, `ρ = 20`, SGD at lr 0.1,
//! BYOL's augmentations.
//!
//! ```text
//! for each batch x:
//!     z_a = g(f(aug1(x)));  z_b = g_m(f_m(aug2(x)))            (momentum encoder, no gradient)
//!     C = β·C + (1 − β)·z_aᵀz_a/N;  loss = 1 − ⟨z_a, z_b⟩ + ρ·z_a C z_aᵀ   (unit rows, means)
//!     SGD step on f, g;  f_m, g_m ← EMA(f, g)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::TicoConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults};

fn defaults() -> Defaults {
    Defaults::new("tico", 20, 128, 0.1, PipelineConfig::byol)
}

/// Runs `tico`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", TicoConfig::new())?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "tico",
    summary: "TiCo (Zhu et al. 2022): invariance + covariance contrast, momentum encoder 0.99 -> 1",
    run,
}];
