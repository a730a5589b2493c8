//! `byol`: BYOL (Grill et al., "Bootstrap Your Own Latent", 2020,
//! <https://arxiv.org/abs/2006.07733>; docs/methods.md#byol) — projector and predictor
//! `[4096, 256]` (§3.3), EMA target with the momentum rising from 0.99 to 1 along a cosine
//! (§3.3), the loss `2 − 2cos` on both orderings of the views **summed** (§3.1:
//! `L^BYOL = L + L̃`), SGD lr 0.1 for batch 128 with weight decay 5e-4 (LARS in the paper's
//! large-batch setting), the BYOL augmentations (asymmetric blur and solarisation, appendix B).
//!
//! ```text
//! for each batch x:
//!     p1, p2 = q(g(f(aug1(x)))), q(g(f(aug2(x))));  z1, z2 = g'(f'(·))  (target, no gradient)
//!     loss = (2 − 2cos(p1, z2)) + (2 − 2cos(p2, z1))
//!     SGD step on f, g, q;  (f', g') ← m·(f', g') + (1 − m)·(f, g)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::ByolConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, Prepared};

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults::new("byol", 20, 128, 0.1, PipelineConfig::byol)
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// Builds the method for a prepared recipe and trains it (shared with the MICO variants).
pub fn train(recipe: Prepared) -> Result<()> {
    let config = ByolConfig::new();
    let config = recipe.section("method", config)?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "byol",
        summary: "BYOL (Grill et al. 2020; MICO Table 1 baseline): predictor, EMA target 0.99 -> 1, summed loss",
        run,
    },
];
