//! `ijepa`: I-JEPA (Assran et al. 2023, <https://arxiv.org/abs/2301.08243>; see
//! docs/methods.md#i-jepa) on a Vision Transformer, ViT-Tiny by default (`--backbone
//! vit-tiny|vit-small|vit-base`; patches of 4 pixels under 96-pixel images).
//!
//! The paper's setting where it runs on the CPU: four target blocks of 15–20 % of the patches
//! (aspect 0.75–1.5), one context block of 85–100 % without them, the target encoder an EMA of
//! the encoder (0.996 → 1), AdamW (weight decay 0.04; the paper's 0.04 → 0.4 schedule is not here)
//! at lr 1e-3 × B/2048 with a warm-up of 10 % of the run, one view cropped to 30–100 % of the
//! image and nothing else (the paper's only augmentation). The predictor is narrowed from the
//! paper's 12 blocks of 384 (ViT-H) to 2 blocks of 96 (4 heads) for ViT-Tiny;
//! `method.predictor_dim=384 method.predictor_depth=12 method.predictor_heads=12` restores it.
//!
//! ```text
//! for each batch x:
//!     v = crop(x);  four target blocks B_i and a context block C without them
//!     s = encoder(patches of v in C)
//!     h = layer_norm(target_encoder(v))                 (no gradient)
//!     loss = smooth_l1(predictor(s, mask tokens at B_i), h[B_i]) over the four blocks
//!     AdamW step on encoder and predictor; target_encoder ← EMA(encoder)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::curriculum::mask_schedule;
use curriculum_ssl::method::IjepaConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, BackboneChoice, Defaults};

/// One view, cropped to 30–100 % of the image, nothing else (I-JEPA's).
fn preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::simclr(side, channels);
    for v in [&mut p.view1, &mut p.view2] {
        if let Some(crop) = &mut v.crop {
            crop.scale = (0.3, 1.0);
        }
        v.hflip = None;
        v.jitter = None;
        v.grayscale = None;
        v.blur = None;
        v.solarize = None;
    }
    p
}

/// The paper's learning rate for a batch of `batch` images: 1e-3 × B / 2048.
fn lr(batch: usize) -> f64 {
    1e-3 * batch as f64 / 2048.0
}

/// The recipe's I-JEPA: the predictor scaled to ViT-Tiny.
fn config() -> IjepaConfig {
    IjepaConfig::new()
        .with_predictor_dim(96)
        .with_predictor_depth(2)
        .with_predictor_heads(4)
}

/// Runs `ijepa`.
pub fn run(args: &[String]) -> Result<()> {
    train(args, "ijepa", config())
}

/// Runs `ijepa_scale_curriculum`: the target blocks' scale range multiplied by 0.5 → 1 in a
/// straight line over the run's steps (7.5–10 % of the patches first, the paper's 15–20 % at the
/// end; docs/methods.md#masking-curricula).
pub fn scale_curriculum(args: &[String]) -> Result<()> {
    let config = config().with_target_scale_schedule(Some(mask_schedule::easy_to_hard(0.5, 1.0)));
    train(args, "ijepa_scale_curriculum", config)
}

fn train(args: &[String], name: &'static str, config: IjepaConfig) -> Result<()> {
    let defaults = Defaults::new(name, 20, 128, lr(128), preset)
        .lr_rule(lr)
        .warmup(2)
        .backbone(BackboneChoice::VitTiny);
    let recipe = common::prepare(args, defaults)?;
    // The masks are drawn from `--seed` (a study's seeds draw different masks).
    let config = recipe.section("method", config.with_seed(recipe.settings.seed))?;
    let optimizer = recipe.section("optimizer", AdamWConfig::new().with_weight_decay(0.04))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "ijepa",
        summary: "I-JEPA (Assran et al. 2023): a context block's encoding predicts the EMA encoder's tokens of four target blocks, in latent space; ViT-Tiny by default",
        run,
    },
    RecipeEntry {
        name: "ijepa_scale_curriculum",
        summary: "I-JEPA under a masking curriculum: the target blocks' scale from half the paper's to the paper's along the run",
        run: scale_curriculum,
    },
];
