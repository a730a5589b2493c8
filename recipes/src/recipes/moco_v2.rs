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

use super::common::{self, Defaults, Prepared, Train};

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults {
        recipe: "moco_v2",
        epochs: 20,
        batch_size: 128,
        lr: 0.06,
        warmup_epochs: 0,
        preset: PipelineConfig::moco_v2,
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
    let config = MoCoConfig::moco_v2()
        .with_momentum(0.99)
        .with_queue_size(4096);
    let method = common::init_moco(&recipe, &config)?;
    let optimizer = SgdConfig::new().init::<Train, _>()?;
    recipe.train(method, &config, optimizer)
}
