//! `nnsiam`: NNSiam (solo-learn's `solo/methods/nnsiam.py`: SimSiam with NNCLR's
//! nearest-neighbour positives; docs/methods.md#nnsiam) on the `simsiam` recipe's settings
//! (SimSiam's networks, SGD lr 0.06 for batch 128 with weight decay 5e-4, SimSiam's
//! augmentation), so that `recipe compare` between the two isolates the neighbours; the support
//! set holds [`SUPPORT_SET`] projections, as the `nnclr` recipe's. solo-learn's CIFAR file
//! (`nnsiam.yaml`) differs: predictor bottleneck 4096, SGD lr 0.5 with weight decay 1e-5 at batch
//! 256, BYOL's asymmetric augmentation, a support set of 65,536.
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug(x))), g(f(aug(x)));  p1, p2 = h(z1), h(z2)
//!     nn1, nn2 = nearest neighbours of z1, z2 in the support set Q (cosine)
//!     loss = −cos(p1, nn2) / 2 − cos(p2, nn1) / 2
//!     SGD step on f, g, h;  Q ← Q + normalise(z1)  (FIFO)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::NnSiamConfig;
use curriculum_ssl::optim::SgdConfig;

use super::common::{self, Defaults};
use super::nnclr::SUPPORT_SET;
use super::simsiam;

fn defaults() -> Defaults {
    simsiam::defaults().named("nnsiam")
}

/// The recipe's method.
pub fn config() -> NnSiamConfig {
    NnSiamConfig::new().with_support_set_size(SUPPORT_SET)
}

/// Runs `nnsiam`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", config())?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    let batch = recipe.settings.schedule.batch_size;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, batch, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "nnsiam",
    summary: "NNSiam (solo-learn): SimSiam with the nearest neighbour from a support set of 16,384 as the target",
    run,
}];
