//! `moco_v2`: MoCo v2 (Chen et al. 2020) — MLP head `[2048, 128]`, InfoNCE against a queue
//! (τ = 0.2), key encoder momentum 0.99 (0.999 on ImageNet; small data moves faster), SGD lr
//! 0.06 for batch 128 with weight decay 5e-4, the MoCo v2 augmentations.
//!
//! ```text
//! for each batch x:
//!     q = f_q(aug(x));  k = f_k(aug(x))   (no gradient)
//!     loss = InfoNCE(q, k, queue)
//!     SGD step on f_q;  f_k ← m·f_k + (1 − m)·f_q;  enqueue(k)
//! ```

use anyhow::Result;
use curriculum_ssl::augment::PipelineConfig;
use curriculum_ssl::method::MoCoConfig;
use curriculum_ssl::optim::SgdConfig;

use super::common::{self, RecipeArgs, Settings, Train};

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    let args = RecipeArgs::parse_from(args)?;
    let settings = Settings::new("moco_v2", &args, 20, 128, 0.06);
    let device = Default::default();
    common::seed(settings.seed, &device);
    let data = common::load_data(&settings)?;
    let pipeline = common::pipeline(PipelineConfig::moco_v2, &data, settings.seed);
    let config = MoCoConfig::moco_v2()
        .with_momentum(0.99)
        .with_queue_size(4096);
    let backbone_config = settings.backbone.config(data.train.image_shape().2);
    let method = config.init(
        |d| backbone_config.init::<Train>(d),
        settings.batch_size,
        &device,
    )?;
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
