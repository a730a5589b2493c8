//! `directclr`: DirectCLR (Jing et al., ICLR 2022, <https://arxiv.org/abs/2110.09348>; see
//! docs/methods.md#directclr) on the `simclr` recipe's settings, which the paper builds on:
//! NT-Xent on the first `d₀` coordinates of the backbone's representation with no projector,
//! lightly's `d₀ = 64` and τ = 0.5 (the paper: 360 of ResNet-50's 2048 features), SGD at lr 0.3
//! for batch 128 with weight decay 5e-4, the SimCLR augmentations.
//!
//! ```text
//! for each batch x:
//!     r1, r2 = f(aug(x)), f(aug(x))
//!     loss = NT-Xent(r1[:, :d₀], r2[:, :d₀])
//!     SGD step on f
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::DirectClrConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults};

fn defaults() -> Defaults {
    Defaults::new("directclr", 20, 128, 0.3, PipelineConfig::simclr)
}

/// Runs `directclr`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", DirectClrConfig::new())?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "directclr",
    summary: "DirectCLR (Jing et al. 2022): NT-Xent on the representation's first 64 coordinates, no projector",
    run,
}];
