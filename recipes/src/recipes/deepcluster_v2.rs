//! `deepcluster_v2`: DeepCluster v2 (Caron et al., NeurIPS 2020, <https://arxiv.org/abs/2006.09882>;
//! see docs/methods.md#deepcluster-v2) with solo-learn's CIFAR settings
//! (`scripts/pretrain/cifar/deepclusterv2.yaml`) scaled to this batch and data: projector
//! `[2048, 128]`, three heads of prototypes, τ = 0.1, 10 k-means rounds per epoch, LARS (η =
//! 0.02, `clip_lr`, biases and norms excluded, weight decay 1e-6) at lr 0.6 × B/256 (0.3 at the CPU
//! default's 128), warm-up then cosine, the `simclr` recipe's views (solo-learn's symmetric
//! pair has stronger colour jitter and blur at p 0.5).
//!
//! Each head has [`prototypes_for`] the trained images: solo-learn's 3000 on CIFAR's 50,000
//! images (one cluster per 16.7 images), as many per image on a smaller set (480 on the embedded
//! 8,000), 3000 from 50,000 images on (the full Fashion-MNIST, ImageNet). LARS's step is
//! clipped as solo-learn's (`clip_lr`: each layer steps `min(η·r, lr)`, plain momentum SGD
//! wherever `η·r > lr`). The first epoch's loss is 0 (no image has a
//! cluster yet; solo-learn's is NaN with zero gradients); its 1000 epochs are 20 here.
//!
//! ```text
//! at the first step of each epoch e > 0, for each head h:
//!     C_h, a_h = spherical k-means of view (h mod 2)'s bank rows (10 rounds, from K_h drawn rows)
//! for each batch x of dataset indexes i:
//!     z1, z2 = normalise(g(f(aug1(x)))), normalise(g(f(aug2(x))))
//!     loss = mean_h CE(z·C_hᵀ/τ, a_h[i]) over both views (images without a cluster left out)
//!     LARS step on f, g;  bank[v][i] ← z_v
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::data::stream::ImageSource;
use curriculum_ssl::method::DeepClusterV2Config;
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, TrainData};

fn defaults() -> Defaults {
    // solo-learn's 0.6 at batch 256, scaled linearly to 128; its 11 warm-up epochs of 1000
    // are 2 of 20 here.
    Defaults::new("deepcluster_v2", 20, 128, 0.3, PipelineConfig::simclr)
        .lr_rule(|batch| 0.6 * batch as f64 / 256.0)
        .warmup(2)
}

/// Prototypes per head for `images` trained images: solo-learn's 3000 per 50,000 images,
/// at most 3000, at least 1.
pub fn prototypes_for(images: usize) -> usize {
    (images * 3000 / 50_000).clamp(1, 3000)
}

/// The recipe's method for `images` trained images, its k-means seeded by `seed`.
pub fn config(images: usize, seed: u64) -> DeepClusterV2Config {
    DeepClusterV2Config::new()
        .with_prototypes(vec![prototypes_for(images); 3])
        .with_seed(seed)
}

/// Runs `deepcluster_v2`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let images = match &recipe.data {
        TrainData::Memory(data) => data.trained_on().len(),
        TrainData::Stream(streamed) => streamed.files.len(),
    };
    let config = recipe.section("method", config(images, recipe.settings.seed))?;
    let lars = recipe.section("optimizer", LarsConfig::new().with_weight_decay(1e-6).with_clip_lr(true),
    )?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "deepcluster_v2",
    summary: "DeepCluster v2 (Caron et al. 2020): each view classified into its image's k-means cluster of last epoch, three heads, LARS",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// One prototype per 16.7 images as solo-learn's CIFAR setting, capped at its 3000.
    #[test]
    fn the_prototypes_follow_the_data() {
        assert_eq!(prototypes_for(50_000), 3000);
        assert_eq!(prototypes_for(8_000), 480);
        assert_eq!(prototypes_for(60_000), 3000);
        assert_eq!(prototypes_for(10), 1);
        let c = config(8_000, 4);
        assert_eq!((c.prototypes, c.seed, c.output_dim), (vec![480; 3], 4, 128));
    }
}
