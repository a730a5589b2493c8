//! `simclr`: SimCLR (Chen et al. 2020) — `[2048, 128]` BN projector, NT-Xent with τ = 0.2 (the
//! common small-image setting), SGD lr 0.3 for batch 128 with weight decay 5e-4 (LARS is the
//! large-batch choice: `curriculum_ssl::optim::LarsConfig`), the SimCLR augmentations.
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug(x))), g(f(aug(x)))
//!     loss = NT-Xent(z1, z2)
//!     SGD step on f, g
//! ```

use anyhow::Result;
use curriculum_ssl::augment::PipelineConfig;
use curriculum_ssl::loss::NtXentLossConfig;
use curriculum_ssl::method::{PairLossConfig, SimClrConfig};
use curriculum_ssl::optim::SgdConfig;

use super::common::{self, Defaults, Prepared, Train};

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults {
        recipe: "simclr",
        epochs: 20,
        batch_size: 128,
        lr: 0.3,
        warmup_epochs: 0,
        preset: PipelineConfig::simclr,
        mixup: None,
    }
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// Builds the method for a prepared recipe and trains it (shared with the MICO variants).
pub fn train(recipe: Prepared) -> Result<()> {
    let config = SimClrConfig::new().with_loss(PairLossConfig::NtXent(
        NtXentLossConfig::new().with_temperature(0.2),
    ));
    let method = recipe.init(|d| config.init(recipe.backbone_config().init(d), d))?;
    let optimizer = SgdConfig::new().init::<Train, _>()?;
    recipe.train(method, &config, optimizer)
}
