//! `light_moco`: Light-MoCo (Li et al., SoftNCE) — MoCo v2 with the `[2048, 128]` BN head,
//! symmetric SoftNCE (K = 20 nearest queue keys, linear-decay weights, α = 0.8, τ = 0.1), key
//! encoder momentum m = 0.99, SGD with lr 0.2, weight decay 1e-4 (ResNet-18), 5 warm-up epochs
//! (docs/methods.md#softnce). The queue is scaled down for small data (4,096 keys).
//!
//! ```text
//! for each batch x:
//!     x1, x2 = aug(x), aug(x)                         # MoCo v2 augmentations
//!     q1, q2 = f_q(x1), f_q(x2);  k1, k2 = f_k(x1), f_k(x2)   (no gradient)
//!     loss = SoftNCE(q1, k2, queue) + SoftNCE(q2, k1, queue)
//!     SGD step on f_q;  f_k ← m·f_k + (1 − m)·f_q;  enqueue(k1, k2)
//! ```

use anyhow::Result;
use curriculum_ssl::augment::PipelineConfig;
use curriculum_ssl::method::MoCoConfig;
use curriculum_ssl::optim::SgdConfig;

use super::common::{self, Defaults, Prepared, Train};

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults {
        recipe: "light_moco",
        epochs: 20,
        batch_size: 128,
        lr: 0.2,
        warmup_epochs: 5,
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
    let config = MoCoConfig::light_moco().with_queue_size(4096);
    let method = common::init_moco(&recipe, &config)?;
    let optimizer = SgdConfig::new()
        .with_weight_decay(1e-4)
        .init::<Train, _>()?;
    recipe.train(method, &config, optimizer)
}
