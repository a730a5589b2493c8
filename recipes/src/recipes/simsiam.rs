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

use super::common::{self, RecipeArgs, Settings, Train};

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    let args = RecipeArgs::parse_from(args)?;
    let settings = Settings::new("simsiam", &args, 20, 128, 0.06);
    let device = Default::default();
    common::seed(settings.seed, &device);
    let data = common::load_data(&settings)?;
    let pipeline = common::pipeline(PipelineConfig::simclr, &data, settings.seed);
    let config = SimSiamConfig::new();
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
