//! `rotnet`, `rotnet_curriculum`, `rotate_mix`, `crop_rotate`: rotation prediction (Gidaris,
//! Singh and Komodakis 2018, <https://arxiv.org/abs/1803.07728>) and MICO's rotation curricula
//! (Fang 2023, <https://arxiv.org/abs/2301.06916>, §3.2).
//!
//! ```text
//! for each batch x:
//!     angles = draw from the angles in play at this step (0°; then 0°, 90°; …; all four)
//!     logits = head(f(rotate(aug(x), angles)))        # both views: 2N examples
//!     loss = cross-entropy(logits, angles)
//!     SGD step on f, head
//! ```
//!
//! `crop_rotate` rotates only the square around each image's object box: at the start of each
//! quarter of the run the trainer computes one box per training image from the heat map of the
//! backbone's last feature map (ContrastiveCrop's channel mean, threshold 0.1), and maps it into
//! each view through the view's crop and flip.
//!
//! RotNet's settings: SGD lr 0.1 for batch 128 with momentum 0.9 and weight decay 5e-4; crops
//! and flips only (the task needs no colour distortion).

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::curriculum::rotation::RotationCurriculumConfig;
use curriculum_ssl::method::{RotNetConfig, RotationMode};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, Prepared};

/// SimCLR's crops and flips, without colour distortion.
fn preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::simclr(side, channels);
    for v in [&mut p.view1, &mut p.view2] {
        v.jitter = None;
        v.grayscale = None;
        v.blur = None;
        v.solarize = None;
    }
    p
}

/// The recipe's defaults.
pub fn defaults(recipe: &'static str) -> Defaults {
    Defaults::new(recipe, 20, 128, 0.1, preset)
}

/// `rotnet`: all four angles from the start.
pub fn rotnet(args: &[String]) -> Result<()> {
    let config = RotNetConfig::new().with_curriculum(RotationCurriculumConfig::all_angles());
    train(common::prepare(args, defaults("rotnet"))?, config)
}

/// `rotnet_curriculum`: MICO's angle curriculum, the angles in play growing on a 4-step
/// schedule per epoch (0°; 0°, 90°; 0°, 90°, 180°; all four).
pub fn rotnet_curriculum(args: &[String]) -> Result<()> {
    let config = RotNetConfig::new();
    train(
        common::prepare(args, defaults("rotnet_curriculum"))?,
        config,
    )
}

/// `rotate_mix`: MICO's rotate-and-mix, `0.5·rot(x) + 0.5·x`, under the same angle curriculum.
pub fn rotate_mix(args: &[String]) -> Result<()> {
    let config = RotNetConfig::new().with_mode(RotationMode::rotate_and_mix());
    train(common::prepare(args, defaults("rotate_mix"))?, config)
}

/// `crop_rotate`: MICO's crop-and-rotate under the same angle curriculum; the object boxes come
/// from heat maps of the backbone's last feature map, recomputed 4 times per run.
pub fn crop_rotate(args: &[String]) -> Result<()> {
    let config = RotNetConfig::new().with_mode(RotationMode::CropAndRotate);
    train(common::prepare(args, defaults("crop_rotate"))?, config)
}

/// Builds RotNet for a prepared recipe (the angle draws seeded by `--seed`) and trains it.
fn train(recipe: Prepared, config: RotNetConfig) -> Result<()> {
    let config = config.with_seed(recipe.settings.seed);
    let config = recipe.section("method", config)?;
    let optimizer = recipe.section(
        "optimizer",
        SgdConfig::new().with_momentum(0.9).with_weight_decay(5e-4),
    )?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "rotnet",
        summary: "RotNet (Gidaris et al. 2018): 4-way rotation prediction (0/90/180/270), linear head",
        run: rotnet,
    },
    RecipeEntry {
        name: "rotnet_curriculum",
        summary: "MICO 3.2: RotNet with the angles in play growing on a 4-step schedule",
        run: rotnet_curriculum,
    },
    RecipeEntry {
        name: "rotate_mix",
        summary: "MICO 3.2: rotate-and-mix (0.5 rot(x) + 0.5 x) under the angle curriculum",
        run: rotate_mix,
    },
    RecipeEntry {
        name: "crop_rotate",
        summary: "MICO 3.2 / Fig. 1: crop-and-rotate (only the object's box, from the backbone's heat map recomputed 4 times, is rotated) under the angle curriculum",
        run: crop_rotate,
    },
];
