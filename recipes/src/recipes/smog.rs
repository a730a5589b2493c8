//! `smog`: SMoG (Pang et al., "Unsupervised Visual Representation Learning by Synchronous
//! Momentum Grouping", ECCV 2022, <https://arxiv.org/abs/2207.06167>; see docs/methods.md#smog)
//! as lightly 1.6's example trains it: an online backbone, projector `[2048, 128]` (its output
//! batch-normalised without scale and shift) and predictor `[2048, 128]`; a momentum copy of the
//! backbone and projector (constant momentum 0.99); 300 group features moved by the online
//! projections with β = 0.99; the cross-entropy of the online predictions against the moved
//! groups at τ = 0.1, the copy's projections' groups as the targets; the views swapped every
//! second step; every 300 steps the groups reset to the k-means centres of a memory bank of the
//! online projections since the last reset, and the copy to the online weights.
//!
//! The example's optimiser (SGD, lr 0.01, momentum 0.9, weight decay 1e-6) and its epochs (10);
//! its batch of 256 is the CPU default's 128 here (`--batch-size`), and the memory bank follows
//! the batch: `reset_interval × batch` rows, the projections of the steps between two resets, as
//! the example's `300 · 256`. The views are the `byol` recipe's (lightly's `SMoGTransform` is
//! BYOL's asymmetric pair; the example turns its blur off on 32-pixel CIFAR images).
//!
//! ```text
//! for step s, batch x:
//!     (x0, x1) = (aug1(x), aug2(x)), swapped when s is odd
//!     if s > 0 and s % 300 == 0: g ← normalise(kmeans(bank)); (f', h') ← (f, h)
//!     z, p = h(f(x0)), q(h(f(x0)));  z' = h'(f'(x1))
//!     a' = argmax cos(z', g);  g ← β·g + (1 − β)·mean of z per group (argmax cos(z, g))
//!     loss = CE(cos(p, g)/τ, a');  bank ← z
//!     SGD step on f, h, q;  (f', h') ← m·(f', h') + (1 − m)·(f, h)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::SmogConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, Prepared};

/// The recipe's defaults: lightly's example's 10 epochs and lr 0.01, at the CPU default's
/// batch of 128 (the example's 256).
pub fn defaults() -> Defaults {
    Defaults::new("smog", 10, 128, 0.01, PipelineConfig::byol)
}

/// The recipe's method for a global batch of `batch_size` images: lightly's example's (heads
/// `[2048, 128]`, 300 groups, β = 0.99, τ = 0.1, momentum 0.99, a reset every 300 steps) with a
/// memory bank of `300 · batch_size` rows, the k-means seeded by `seed`.
pub fn smog_config(batch_size: usize, seed: u64) -> SmogConfig {
    let config = SmogConfig::new().with_seed(seed);
    // Saturating: a batch so large is refused by the memory bank's size check, not a panic.
    let rows = config.reset_interval.saturating_mul(batch_size);
    config.with_memory_bank_size(rows)
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

fn train(recipe: Prepared) -> Result<()> {
    let settings = &recipe.settings;
    let config = smog_config(settings.schedule.batch_size, settings.seed);
    let config = recipe.section("method", config)?;
    // lightly's example: SGD(lr=0.01, momentum=0.9, weight_decay=1e-6).
    let optimizer = recipe.section("optimizer", SgdConfig::new().with_weight_decay(1e-6))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "smog",
    summary: "SMoG (Pang et al. 2022): predictions classified against momentum-grouped features, k-means resets of the groups",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory bank holds the projections of the steps between two resets.
    #[test]
    fn the_smog_memory_bank_follows_the_batch() {
        let config = smog_config(128, 3);
        assert_eq!(config.memory_bank_size, 300 * 128);
        assert_eq!((config.groups, config.output_dim, config.seed), (300, 128, 3));
    }
}
