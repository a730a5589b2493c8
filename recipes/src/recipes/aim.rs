//! `aim`: AIM (El-Nouby et al. 2024, <https://arxiv.org/abs/2401.08541>; see docs/methods.md#aim)
//! on a Vision Transformer, ViT-Tiny by default (`--backbone vit-tiny|vit-small|vit-base`;
//! patches of 4 pixels under 96-pixel images).
//!
//! lightly 1.6's example
//! (<https://github.com/lightly-ai/lightly/blob/master/examples/pytorch/aim.py>) where it runs
//! on the CPU, with the paper's target: one view cropped to 40–100 % of the image and flipped (lightly's `AIMTransform`),
//! prefix lengths drawn per image, the next patch predicted on the non-prefix patches against
//! targets normalised per patch (`method.target=SamePatch` is the example's own loss, each
//! position against its own patch), AdamW at lr 1.5e-4 × B/256 (the example's 1.5e-4 at its
//! batch of 256) with PyTorch's default weight decay 0.01, as the example leaves it.
//!
//! What is scaled, and why: the example's ViT-B/32 at 224 pixels becomes the recipe's ViT-Tiny
//! (as every ViT recipe's CPU default); its head of one block 2048 wide becomes one block 512
//! wide (a 2048-wide block costs about six times ViT-Tiny's trunk per token;
//! `method.head_dim=2048` restores it, `method.head_blocks=12` the paper's depth); its batch of
//! 256 becomes 128 with the learning rate scaled linearly; its 10 epochs 20 with a warm-up of
//! one (the MAE recipe's CPU budget; the example has no warm-up, the paper warms up).
//!
//! The backbone's features (what the kNN monitor scores, `recipe eval` and `export` read) are
//! the mean of its patch tokens encoded without the class token (`VitPool::PatchMean`,
//! recorded in the run), as lightly's benchmark reads them: AIM never trains the class token.
//!
//! ```text
//! for each batch x:
//!     v = aug(x);  S = a prefix length per image, uniform in 1..=K−1
//!     z = trunk(patches(v) + pos), patches 0..S attending to each other, the rest causally
//!     p = head(z + pos)                                       (pixels per position)
//!     loss = mean over images of mean over k ≥ S of ‖p_{k−1} − norm(patch_k)‖² / p²C
//!     AdamW step on trunk and head
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::method::AimConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl_models::VitPool;

use super::common::{self, BackboneChoice, Defaults};
use super::mae::{crop_and_flip, lr};

/// One view, cropped to 40–100 % of the image and flipped, without colour distortion (lightly's
/// `AIMTransform`: MAE's with a larger smallest crop).
fn preset(side: usize, channels: usize) -> PipelineConfig {
    crop_and_flip(side, channels, 0.4)
}

/// Runs `aim`.
pub fn run(args: &[String]) -> Result<()> {
    let defaults = Defaults::new("aim", 20, 128, lr(128), preset)
        .lr_rule(lr)
        .warmup(1)
        .backbone(BackboneChoice::VitTiny)
        .vit_pool(VitPool::PatchMean);
    let recipe = common::prepare(args, defaults)?;
    // The prefix lengths are drawn from `--seed` (a study's seeds draw different prefixes).
    let config = AimConfig::new()
        .with_head_dim(512)
        .with_head_blocks(1)
        .with_seed(recipe.settings.seed);
    let config = recipe.section("method", config)?;
    let optimizer = recipe.section("optimizer", AdamWConfig::new().with_weight_decay(0.01))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "aim",
    summary: "AIM (El-Nouby et al. 2024): each patch's pixels predicted from the patches before it under prefix-causal attention; ViT-Tiny by default",
    run,
}];
