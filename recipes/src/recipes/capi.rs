//! `capi`: CAPI (Darcet et al. 2025, <https://arxiv.org/abs/2502.08769>; see
//! docs/methods.md#capi) as lightly 1.6 writes it, on a Vision Transformer, ViT-Tiny by default
//! (`--backbone vit-tiny|vit-small|vit-base`; patches of 4 pixels under 96-pixel images).
//!
//! lightly's example (<https://github.com/lightly-ai/lightly/blob/master/examples/pytorch/capi.py>)
//! where it runs on the CPU: one view cropped to 60–100 % of the image and flipped (lightly's
//! `CAPITransform`), one visible block of `L − ⌊0.65·L⌋` patches (aspect 0.5–2, rolled), every
//! hidden patch predicted, 1 024 clusters, a predictor of 2 blocks of 6 heads, the teacher's
//! encoder an EMA of the student's (0.996 → 1 along a cosine), the teacher's clustering head
//! trained by the clustering loss, AdamW with lightly's benchmark's β₂ 0.95 and weight decay 0.05
//! at lr 1.5e-4 × B/256 (the example's 1.5e-4, the benchmark's scaling) with a warm-up of a tenth
//! of the run (the benchmark's 40 epochs of 400).
//!
//! What is scaled, and why: the example's ViT-S/16 at 256 pixels with 7 register tokens becomes
//! ViT-Tiny without registers (every ViT recipe's CPU default; the repo's ViT has no registers);
//! its batch of 32 becomes 128 (the learning rate scaled linearly); the teacher head steps at
//! half the rate, as in the benchmark (`method.clustering_lr_factor`). The benchmark's
//! subsampling of the predicted patches is `method.prediction_subsampling=0.05`, its clusters
//! `method.num_clusters=16384`, its predictor `method.predictor_depth=6`.
//!
//! ```text
//! for each batch x:
//!     v = crop_and_flip(x);  V = one visible block per image, the rest hidden
//!     s = student_head(predictor(student(patches of v in V), mask tokens at the hidden patches))
//!     t = teacher_head(teacher(v))                      (every patch; encoder no gradient)
//!     A = positionwise Sinkhorn-Knopp(t / 0.06)         (no gradient)
//!     loss = CE(A[hidden], s / 0.12) + CE(A, t / 0.12)
//!     AdamW step on student, predictor and both heads; teacher <- EMA(student)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::method::CapiConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, BackboneChoice, Defaults};
use super::mae::{crop_and_flip, lr};

/// One view, cropped to 60–100 % of the image and flipped, without colour distortion (lightly's
/// `CAPITransform`).
fn preset(side: usize, channels: usize) -> PipelineConfig {
    crop_and_flip(side, channels, 0.6)
}

/// The recipe's CAPI: lightly's example's clusters and predictor.
fn config() -> CapiConfig {
    CapiConfig::new()
        .with_num_clusters(1024)
        .with_predictor_depth(2)
        .with_predictor_heads(6)
}

/// Runs `capi`.
pub fn run(args: &[String]) -> Result<()> {
    let defaults = Defaults::new("capi", 20, 128, lr(128), preset)
        .lr_rule(lr)
        .warmup(2)
        .backbone(BackboneChoice::VitTiny);
    let recipe = common::prepare(args, defaults)?;
    // The masks are drawn from `--seed` (a study's seeds draw different masks).
    let config = recipe.section("method", config().with_seed(recipe.settings.seed))?;
    let optimizer = recipe.section(
        "optimizer",
        AdamWConfig::new().with_beta_2(0.95).with_weight_decay(0.05),
    )?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "capi",
    summary: "CAPI (Darcet et al. 2025, lightly's): one visible block's encoding predicts the clusters an online-clustering EMA teacher assigns the hidden patches; ViT-Tiny by default",
    run,
}];
