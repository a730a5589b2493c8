//! `nnbyol`: NNBYOL (solo-learn's `solo/methods/nnbyol.py`: BYOL with NNCLR's nearest-neighbour
//! targets; docs/methods.md#nnbyol) on the `byol` recipe's settings (BYOL's 4096 → 256 heads,
//! momentum 0.99 → 1, SGD lr 0.1 for batch 128, BYOL's augmentation), so that `recipe compare`
//! between the two isolates the neighbours; the support set holds [`SUPPORT_SET`] target
//! projections, as the `nnclr` recipe's. solo-learn's CIFAR file (`nnbyol.yaml`) trains with LARS
//! (lr 1.0, η 0.02, weight decay 1e-5 at batch 256) and a support set of 65,536.
//!
//! ```text
//! for each batch x:
//!     p1, p2 = h(g(f(aug1(x)))), h(g(f(aug2(x))));  t1, t2 = g'(f'(aug1(x))), g'(f'(aug2(x)))
//!     nn1, nn2 = nearest neighbours of t1, t2 in the support set Q (cosine)
//!     loss = (2 − 2cos(p1, nn2)) + (2 − 2cos(p2, nn1))
//!     SGD step on f, g, h;  (f', g') ← EMA of (f, g);  Q ← Q + normalise(t1)  (FIFO)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::NnByolConfig;
use curriculum_ssl::optim::SgdConfig;

use super::byol;
use super::common::{self, Defaults};
use super::nnclr::SUPPORT_SET;

fn defaults() -> Defaults {
    byol::defaults().named("nnbyol")
}

/// The recipe's method.
pub fn config() -> NnByolConfig {
    NnByolConfig::new().with_support_set_size(SUPPORT_SET)
}

/// Runs `nnbyol`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", config())?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    let batch = recipe.settings.schedule.batch_size;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, batch, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "nnbyol",
    summary: "NNBYOL (solo-learn): BYOL with the nearest neighbour from a support set of 16,384 as the target",
    run,
}];
