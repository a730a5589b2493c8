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
use curriculum_ssl::curriculum::{Pace, SchedulerConfig};
use curriculum_ssl::loss::{HclLossConfig, NtXentLossConfig};
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
        strength: None,
        hcl: None,
    }
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// Builds the method for a prepared recipe and trains it (shared with the MICO variants).
pub fn train(recipe: Prepared) -> Result<()> {
    train_with_loss(
        recipe,
        PairLossConfig::NtXent(NtXentLossConfig::new().with_temperature(0.2)),
    )
}

/// SimCLR with another two-view loss (the HCL recipes).
pub fn train_with_loss(recipe: Prepared, loss: PairLossConfig) -> Result<()> {
    let config = SimClrConfig::new().with_loss(loss);
    let method = recipe.init(|d| config.init(recipe.backbone_config().init(d), d))?;
    let optimizer = SgdConfig::new().init::<Train, _>()?;
    recipe.train(method, &config, optimizer)
}

/// `hcl`: SimCLR with hard negative sampling (Robinson et al. 2021,
/// <https://arxiv.org/abs/2010.04592>): HCL with `β = 1`, `τ⁺ = 0.1`, `τ = 0.5` (its CIFAR-10
/// settings).
pub fn hcl(args: &[String]) -> Result<()> {
    let defaults = Defaults {
        recipe: "hcl",
        hcl: Some(HclLossConfig::new()),
        ..defaults()
    };
    train_hcl(common::prepare(args, defaults)?)
}

/// Trains SimCLR with the recipe's HCL loss (after the command line's changes).
fn train_hcl(recipe: Prepared) -> Result<()> {
    let loss = recipe
        .hcl
        .clone()
        .expect("an HCL recipe's defaults carry its loss");
    train_with_loss(recipe, PairLossConfig::Hcl(loss))
}

/// `hcl_curriculum`: as `hcl`, with MICO's hardness curriculum (§3.3): `β` rises linearly from
/// 0 (uniform weights: the debiased loss) to 1 over the epochs, so the negatives get harder as
/// training goes. `--hard-positive-k K` adds eq. 3's hard-positive weighting on the same `β`.
pub fn hcl_curriculum(args: &[String]) -> Result<()> {
    let schedule = SchedulerConfig::Linear {
        start: 0.0,
        end: 1.0,
        pace: Pace::Epoch,
    };
    let defaults = Defaults {
        recipe: "hcl_curriculum",
        hcl: Some(HclLossConfig::new().with_beta_schedule(Some(schedule))),
        ..defaults()
    };
    train_hcl(common::prepare(args, defaults)?)
}
