//! `supcon`: SupCon (Khosla et al., NeurIPS 2020, <https://arxiv.org/abs/2004.11362>; see
//! docs/methods.md#supcon) as solo-learn trains it, with its CIFAR settings
//! (`scripts/pretrain/cifar/supcon.yaml`) scaled to the CPU runs of the other recipes: projector
//! `features → 2048 (ReLU) → 256` without batch norm, τ = 0.2, SGD (momentum 0.9, weight decay
//! 1e-5) at lr 0.4 × B/256 (0.2 at this batch of 128; solo-learn: 256), two warm-up epochs then
//! a cosine over 20 epochs (solo-learn: 10 of 1000), and SimCLR's augmentations as the other
//! recipes use them on small images (colour strength 0.5, no blur; solo-learn's CIFAR file has
//! strength 1 and a blur at p 0.5). Two views, as solo-learn's CIFAR file; the method takes a
//! pipeline's local crops as well (solo-learn's multi-crop SupCon) where the augmentation cuts
//! them.
//!
//! The loss reads the labels, so the images trained on must have them: a data set without
//! labels (STL-10's unlabeled split, `--dataset folder`, a folder whose kNN monitor reads
//! `--knn-data`) is refused before anything is written. solo-learn also trains an online linear
//! classifier on the detached features beside the loss; here the kNN monitor measures them.
//!
//! ```text
//! for each batch x with labels y:
//!     z = [g(f(aug_v(x)))]_v          (every view's rows, each with its image's label)
//!     loss = −mean_i log( Σ_{p ≠ i, y_p = y_i} exp(z_i·z_p/τ) / Σ_{j ≠ i} exp(z_i·z_j/τ) )
//!     SGD step on f, g
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::SupConConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults};
use crate::usage::usage;

fn defaults() -> Defaults {
    // solo-learn's 0.4 at batch 256, scaled linearly to 128.
    Defaults::new("supcon", 20, 128, 0.2, PipelineConfig::simclr).warmup(2)
}

/// Runs `supcon`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    if !recipe.data.is_labelled() {
        return Err(usage(
            "supcon: the loss's positives are the images of the anchor's class, and the images \
             this run would train on have no labels (STL-10's unlabeled split, --dataset \
             folder, a folder whose kNN monitor reads --knn-data, unlabelled shards): train it \
             on a labelled data set (fashion-mnist, mnist, cifar10, cifar100, an image-folder \
             tree of class folders)",
        ));
    }
    let config = recipe.section("method", SupConConfig::new())?;
    let optimizer = recipe.section("optimizer", SgdConfig::new().with_weight_decay(1e-5))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "supcon",
    summary: "SupCon (Khosla et al. 2020): the labels choose the positives, solo-learn's loss (tau 0.2), SGD; labelled data only",
    run,
}];
