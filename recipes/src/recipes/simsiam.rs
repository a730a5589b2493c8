//! `simsiam`: SimSiam (Chen & He 2021) — three-layer BN projector, `[512]` bottleneck
//! predictor, symmetric negative cosine with stop-gradient, SGD lr 0.06 for batch 128 with
//! weight decay 5e-4, the SimCLR augmentations.
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug(x))), g(f(aug(x)));  p1, p2 = h(z1), h(z2)
//!     loss = −cos(p1, stopgrad(z2)) / 2 − cos(p2, stopgrad(z1)) / 2
//!     SGD step on f, g, h
//! ```

use anyhow::Result;
use curriculum_ssl::augment::PipelineConfig;
use curriculum_ssl::method::SimSiamConfig;
use curriculum_ssl::optim::SgdConfig;

use super::common::{self, Defaults, Prepared, Train};

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults {
        recipe: "simsiam",
        epochs: 20,
        batch_size: 128,
        lr: 0.06,
        warmup_epochs: 0,
        preset: PipelineConfig::simclr,
        mixup: None,
        strength: None,
        pair_loss: None,
    }
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// Builds the method for a prepared recipe and trains it (shared with the MICO variants).
pub fn train(recipe: Prepared) -> Result<()> {
    let config = SimSiamConfig::new();
    let method = recipe.init(|d| config.init(recipe.backbone_config().init(d), d))?;
    let optimizer = SgdConfig::new().init::<Train, _>()?;
    recipe.train(method, &config, optimizer)
}
