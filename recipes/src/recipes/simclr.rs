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

use super::common::{self, RecipeArgs, Settings, Train};

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    let args = RecipeArgs::parse_from(args)?;
    let settings = Settings::new("simclr", &args, 20, 128, 0.3);
    let device = Default::default();
    common::seed(settings.seed, &device);
    let data = common::load_data(&settings)?;
    let pipeline = common::pipeline(PipelineConfig::simclr, &data, settings.seed);
    let config = SimClrConfig::new().with_loss(PairLossConfig::NtXent(
        NtXentLossConfig::new().with_temperature(0.2),
    ));
    let method = config.init(common::backbone(&settings, &data, &device), &device)?;
    let optimizer = SgdConfig::new().init::<Train, _>()?;
    common::run(
        &args,
        &settings,
        data,
        pipeline,
        method,
        serde_json::to_value(&config)?,
        optimizer,
        &device,
    )
}
