//! `moco_v2`: MoCo v2 (Chen, Fan, Girshick & He, "Improved Baselines with Momentum Contrastive
//! Learning", 2020, <https://arxiv.org/abs/2003.04297>; docs/methods.md#moco-v1-and-v2) — an MLP
//! head whose hidden layer is as wide as the backbone's features (§2: "a 2-layer MLP head
//! (hidden layer 2048-d, with ReLU)" on ResNet-50's 2048-d features; 512 on ResNet-18), not
//! Light-MoCo's wider 2048 (that is the "+MLP" step of Light-MoCo's Table 2), output 128, no
//! BatchNorm; InfoNCE against a queue (τ = 0.2, §2); key encoder momentum 0.99 (0.999 on
//! ImageNet; small data moves faster); SGD lr 0.06 for batch 128 with weight decay 5e-4 (the
//! common CIFAR setting); the MoCo v2 augmentations (blur added to MoCo v1's, §2).
//!
//! ```text
//! for each batch x:
//!     q = f_q(aug(x));  k = f_k(aug(x))   (no gradient)
//!     loss = InfoNCE(q, k, queue)
//!     SGD step on f_q;  f_k ← m·f_k + (1 − m)·f_q;  enqueue(k)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::MocoConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, Prepared, Train};

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults::new("moco_v2", 20, 128, 0.06, PipelineConfig::moco_v2).shuffle_bn()
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// Builds the method for a prepared recipe and trains it (shared with the MICO variants).
pub fn train(recipe: Prepared) -> Result<()> {
    // The preset's projector: hidden width = the backbone's feature width.
    let config = recipe.moco(
        MocoConfig::moco_v2()
            .with_momentum(0.99)
            .with_queue_size(4096),
    )?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    recipe.train(&config, |recipe, device| {
        let method = super::moco_v1::init_moco(recipe, &config, device)?;
        Ok((method, optimizer.init::<Train, _>()?))
    })
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "moco_v2",
        summary: "MoCo v2 (Chen et al. 2020; Light-MoCo Table 3 baseline): feature-width MLP head, InfoNCE (tau 0.2), queue",
        run,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projector_hidden_width_is_the_feature_width() {
        let config = MocoConfig::moco_v2();
        assert_eq!(config.hidden_dim, None);
        assert!(
            config.feature_width_mlp,
            "MoCo v2's MLP, not v1's linear map"
        );
        assert!(!config.head_batch_norm);
    }
}
