//! `detcon_s` and `detcon_b`: DetCon (Hénaff et al., "Efficient Visual Pretraining with
//! Contrastive Detection", ICCV 2021, <https://arxiv.org/abs/2103.10957>; see
//! docs/methods.md#detcon) with the spatial-heuristic regions: each image cut into a regular grid,
//! the grid carried through each view's crop and flip, the backbone's last feature map averaged
//! over each region, projected (DetConB: and predicted), and the contrastive detection loss at
//! τ = 0.1 (the paper's and lightly's).
//!
//! `detcon_s` is SimCLR-style (lightly's example: `DetConSLoss` on one network's projections) on
//! the `simclr` recipe's views and optimiser (SGD, lr 0.3 at batch 128, 20 epochs) with its
//! projector `[2048, 128]`; `detcon_b` is BYOL-style (a predictor, a momentum target rising from
//! 0.99 to 1 along a cosine) on the `byol` recipe's views, heads `[4096, 256]` and optimiser (SGD,
//! lr 0.1 at batch 128). The paper trains both with its baselines' (SimCLR's and BYOL's)
//! architectures and large-batch ImageNet settings (LARS); here they are scaled to the CPU
//! default as the `simclr` and `byol` recipes are.
//!
//! The grid: the backbone's feature map's size capped at lightly's example's 5 × 5
//! (`DetConSTransform(grid_size=(5, 5))`, which it pools from a ResNet-18's 3 × 3 map of 96-pixel
//! views): 2 × 2 on the CPU default `small-2x` (its map 2 × 2 on 28-pixel images), 4 × 4 with
//! `--stem cifar`, 5 × 5 on a ResNet-18 at 224 pixels — a finer grid than the map would leave
//! most regions without a position. `method.grid` sets it. The projector takes the feature map's
//! channels (`method.map_dim`), read from the backbone on the run's image size when not given.
//!
//! ```text
//! for each batch x:
//!     for each view v of (aug1(x), aug2(x)):
//!         m_v = f_map(v)                              (N, C, h, w)
//!         ids_v = each position's grid region, through v's crop and flip
//!         z_v = g(mean of m_v over each region)        (N, M, D)
//!     DetConS: loss = ℓ(z_1, z_2, ids)     DetConB: loss = ℓ(q(z_1), q(z_2), z'_1, z'_2, ids)
//!     SGD step on f, g (q);  DetConB: (f', g') ← m·(f', g') + (1 − m)·(f, g)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::prelude::*;
use curriculum_ssl::method::{DetConConfig, DetConVariant};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl_models::Backbone;

use super::common::{self, Defaults, Prepared};
use crate::backend;

/// lightly's example's grid, the most the recipes cut an image into along each axis.
pub const MAX_GRID: usize = 5;

fn defaults_s() -> Defaults {
    // The `simclr` recipe's.
    Defaults::new("detcon_s", 20, 128, 0.3, PipelineConfig::simclr)
}

fn defaults_b() -> Defaults {
    // The `byol` recipe's.
    Defaults::new("detcon_b", 20, 128, 0.1, PipelineConfig::byol)
}

/// The recipe's method for a feature map of `channels` channels and `size = [h, w]`: `variant`
/// with its heads (DetConS: the `simclr` recipe's `[2048, 128]`; DetConB: the paper's and the
/// `byol` recipe's `[4096, 256]`, target momentum from 0.99) and the grid `min(h, 5) × min(w, 5)`.
pub fn detcon_config(variant: DetConVariant, channels: usize, size: [usize; 2]) -> DetConConfig {
    let config = DetConConfig::new()
        .with_variant(variant)
        .with_grid(size.map(|s| s.clamp(1, MAX_GRID)))
        .with_map_dim(Some(channels));
    match variant {
        DetConVariant::S => config.with_hidden_dim(2048).with_output_dim(128),
        DetConVariant::B => config
            .with_hidden_dim(4096)
            .with_output_dim(256)
            .with_base_momentum(0.99),
    }
}

/// The channels and size `[h, w]` of the recipe's backbone's feature map on its views: a
/// throwaway backbone (no weights; they do not change its shape) through one blank view.
fn map_shape(recipe: &Prepared) -> (usize, [usize; 2]) {
    let (height, width, channels) = recipe.data.shape();
    let (height, width) = recipe
        .pipeline
        .view1
        .crop
        .as_ref()
        .map_or((height, width), |c| c.size);
    let backbone = recipe
        .backbone_config()
        .config
        .init::<backend::Inner>(&recipe.device);
    let blank = Tensor::zeros([1, channels, height, width], &recipe.device);
    let [_, c, h, w] = backbone
        .forward_feature_map(blank)
        .expect("every backbone of the recipes has a feature map")
        .dims();
    (c, [h, w])
}

fn train(recipe: Prepared, variant: DetConVariant) -> Result<()> {
    let (channels, size) = map_shape(&recipe);
    let preset = detcon_config(variant, channels, size);
    let config = recipe.section("method", preset.clone())?;
    // DetConS has no target network: a momentum given to it was unused without a word (every
    // value trained alike, exit 0).
    if variant == DetConVariant::S && config.base_momentum != preset.base_momentum {
        return Err(crate::usage::usage(format!(
            "method.base_momentum={}: DetConS has no momentum target (detcon_b has); leave it \
             out",
            config.base_momentum
        )));
    }
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// Runs `detcon_s`.
pub fn run_s(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults_s())?, DetConVariant::S)
}

/// Runs `detcon_b`.
pub fn run_b(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults_b())?, DetConVariant::B)
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "detcon_s",
        summary: "DetConS (Henaff et al. 2021): contrastive detection over a grid of regions carried through the crops and flips, SimCLR-style",
        run: run_s,
    },
    RecipeEntry {
        name: "detcon_b",
        summary: "DetConB (Henaff et al. 2021): contrastive detection over a grid of regions, BYOL-style predictor and EMA target",
        run: run_b,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The grid follows the feature map up to 5 × 5; the heads are the simclr and byol
    /// recipes'.
    #[test]
    fn the_detcon_grid_follows_the_map_up_to_five() {
        let s = detcon_config(DetConVariant::S, 128, [2, 2]);
        assert_eq!(s.grid, [2, 2]);
        assert_eq!((s.hidden_dim, s.output_dim, s.map_dim), (2048, 128, Some(128)));
        let b = detcon_config(DetConVariant::B, 512, [7, 6]);
        assert_eq!(b.grid, [5, 5]);
        assert_eq!((b.hidden_dim, b.output_dim, b.base_momentum), (4096, 256, 0.99));
        assert_eq!(b.variant, DetConVariant::B);
    }
}
