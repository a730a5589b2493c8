//! `swav` and `dino`: the methods trained on multi-crop views, two global views and
//! [`LOCAL_CROPS`] smaller local crops of every image (`--local-crops` changes the number; 0
//! trains on the two views alone), with solo-learn's CIFAR-size settings
//! (`scripts/pretrain/cifar/swav.yaml`, `dino.yaml`) scaled to this batch: LARS (η = 0.02,
//! biases and norms excluded, weight decay 1e-6), warm-up then cosine.
//!
//! - SwAV (Caron et al., NeurIPS 2020, <https://arxiv.org/abs/2006.09882>): projector
//!   `[2048, 128]`, 3000 prototypes frozen for the first epoch, temperature 0.1, Sinkhorn–Knopp
//!   3 iterations at ε = 0.05, lr 0.6 × B/256; SimCLR's augmentations (the paper's), no queue
//!   (the paper's queue is for runs of hundreds of epochs).
//! - DINO (Caron et al., ICCV 2021, <https://arxiv.org/abs/2104.14294>): head
//!   `[2048, 2048, 256]` → 4096 outputs (solo-learn's CIFAR width), last layer frozen for the
//!   first epoch, teacher temperature 0.04 → 0.07 over the first 6 epochs (30 %, as the paper's 30 of 100), student
//!   0.1, centre momentum 0.9, teacher momentum 0.996 → 1, lr 0.3 × B/256; BYOL's augmentations
//!   (the paper's).
//!
//! Crop scales: the papers' on images of 96 pixels and more (SwAV global (0.14, 1), local
//! (0.05, 0.14); DINO global (0.4, 1), local (0.05, 0.4)); on small images (CIFAR, Fashion-MNIST)
//! global (0.5, 1), as every recipe here, and local [`SMALL_LOCAL_SCALE`] at
//! [`PipelineConfig::local_side`] pixels (12 for 28): a crop of 5 % of a 28-pixel garment is a
//! few pixels of texture.
//!
//! ```text
//! for each batch x:
//!     g1, g2, l1 .. lV = multi_crop(x)
//!     SwAV: scores of every crop against the prototypes; Sinkhorn codes of g1, g2;
//!           loss = each global view's codes predicted by every other crop
//!     DINO: teacher(g1, g2) centred and sharpened; loss = cross-entropy of the student on
//!           every other crop; teacher ← EMA(student); centre ← EMA(mean teacher output)
//!     LARS step on the online networks
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::loss::DinoLossConfig;
use curriculum_ssl::method::{DinoConfig, SwavConfig};
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::{PipelineConfig, Preset};

use super::common::{self, Defaults};

/// Local crops per image by default (the papers' 6).
pub const LOCAL_CROPS: usize = 6;

/// The local crops' scale range on images under 96 pixels.
pub const SMALL_LOCAL_SCALE: (f64, f64) = (0.2, 0.5);

/// Epochs of the recipes (both).
const EPOCHS: usize = 20;

/// Epochs of DINO's teacher-temperature warm-up.
const TEACHER_WARMUP_EPOCHS: usize = 6;

/// `preset`'s multi-crop ([`LOCAL_CROPS`] local crops) for images of `side` pixels with the
/// papers' scales at ImageNet size ([`SMALL_LOCAL_SCALE`] for the local crops under 96 pixels).
pub fn multi_crop(
    preset: Preset,
    side: usize,
    channels: usize,
    global: (f64, f64),
    local: (f64, f64),
) -> PipelineConfig {
    let local = if side < 96 { SMALL_LOCAL_SCALE } else { local };
    PipelineConfig::multi_crop(preset, side, channels, LOCAL_CROPS, global, local)
}

/// SwAV's views: SimCLR's operations, global (0.14, 1), local (0.05, 0.14).
pub fn swav_views(side: usize, channels: usize) -> PipelineConfig {
    multi_crop(Preset::SimClr, side, channels, (0.14, 1.0), (0.05, 0.14))
}

/// DINO's views: BYOL's operations, global (0.4, 1), local (0.05, 0.4).
pub fn dino_views(side: usize, channels: usize) -> PipelineConfig {
    multi_crop(Preset::Byol, side, channels, (0.4, 1.0), (0.05, 0.4))
}

/// MSN's views: SimCLR's operations, random views (0.3, 1), focal views (0.05, 0.3)
/// (lightly's `MSNTransform`, the authors' scales).
pub fn msn_views(side: usize, channels: usize) -> PipelineConfig {
    multi_crop(Preset::SimClr, side, channels, (0.3, 1.0), (0.05, 0.3))
}

/// LARS as solo-learn's CIFAR settings of both methods.
pub fn lars() -> LarsConfig {
    LarsConfig::new().with_weight_decay(1e-6).with_eta(0.02)
}

fn defaults(recipe: &'static str, lr: f64, preset: fn(usize, usize) -> PipelineConfig) -> Defaults {
    Defaults::new(recipe, EPOCHS, 128, lr, preset)
        .warmup(2)
}

/// The SwAV recipe's method.
pub fn swav_config() -> SwavConfig {
    SwavConfig::new()
}

/// The DINO recipe's method (the teacher temperature warms up over the first 6 epochs, 30 % of
/// the recipe's 20, as the paper's 30 of 100).
pub fn dino_config() -> DinoConfig {
    DinoConfig::new().with_output_dim(4096).with_loss(
        DinoLossConfig::new()
            .with_warmup_teacher_temp(0.04)
            .with_teacher_temp(0.07)
            .with_warmup_teacher_temp_epochs(TEACHER_WARMUP_EPOCHS),
    )
}

/// Runs `swav`.
pub fn swav(args: &[String]) -> Result<()> {
    // solo-learn's 0.6 at batch 256, scaled linearly to 128.
    let recipe = common::prepare(args, defaults("swav", 0.3, swav_views))?;
    let config = recipe.section("method", swav_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// Runs `dino`.
pub fn dino(args: &[String]) -> Result<()> {
    // solo-learn's 0.3 at batch 256, scaled linearly to 128.
    let recipe = common::prepare(args, defaults("dino", 0.15, dino_views))?;
    let config = recipe.section("method", dino_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "swav",
        summary: "SwAV (Caron et al. 2020): Sinkhorn codes swapped between views, multi-crop 2+6, LARS",
        run: swav,
    },
    RecipeEntry {
        name: "dino",
        summary: "DINO (Caron et al. 2021): self-distillation, centring, EMA teacher, multi-crop 2+6, LARS",
        run: dino,
    },
];
