//! `vicregl`: VICRegL (Bardes, Ponce & LeCun, NeurIPS 2022, <https://arxiv.org/abs/2210.01571>;
//! see docs/methods.md#vicregl) as lightly's example builds it, on the `vicreg` recipe's
//! optimiser and schedule: the backbone's last feature map, its mean through the global
//! projector `[2048, 2048, 2048]` (BatchNorm, ReLU; lightly's `BarlowTwinsProjectionHead(512,
//! 2048, 2048)`) and each of its positions through the local projector `[128, 128, 128]`
//! (LayerNorm, ReLU; `VicRegLLocalProjectionHead(512, 128, 128)`); the VICRegL loss at lightly's
//! defaults (25 / 25 / 1, `α = 0.75`, `ε = 1e-4`, 20 and 4 matches); two global views and no
//! local crops (lightly's example: `VICRegLTransform(n_local_views=0)`) with the transform's
//! operations ([`vicregl_preset`]).
//!
//! The optimiser is the `vicreg` recipe's (LARS, η = 0.02, weight decay 1e-4, biases and norms
//! excluded, lr 0.3·B/256, 2 warm-up epochs, 20 epochs at batch 128: solo-learn's CIFAR setting
//! of VICReg) rather than lightly's example's SGD at lr 0.01 for 10 epochs, a demonstration
//! setting. The projectors take the feature map's channels (`method.map_dim`), read from the
//! backbone on the run's image size when not given: 128 on the CPU default `small-2x` (its map
//! 2 × 2 on 28-pixel images; `--stem cifar` makes it 4 × 4), 512 on ResNet-18.
//!
//! ```text
//! for each batch x:
//!     for each view v of (aug1(x), aug2(x)):
//!         m_v = f_map(v)                          (N, C, h, w)
//!         z_v = g(mean_{h,w} m_v),  y_v = g_local(m_v at each position),  grid_v from v's crop and flip
//!     loss = α·VICReg(z_1, z_2) + (1 − α)·local loss of (y_v, grid_v)   (matched by feature
//!            distance and by location)
//!     LARS step on f, g, g_local
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::prelude::*;
use curriculum_ssl::method::VicRegLConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl_models::Backbone;

use super::common::{self, Defaults, Prepared};
use super::redundancy::{lars, PROJECTOR};
use crate::backend;

/// The views of lightly's `VICRegLTransform` (its global views; both alike): random resized crop
/// (0.2, 1), flip at p 0.5, colour jitter (0.4, 0.4, 0.2, 0.1) always (its `cj_prob` 1 and
/// `cj_strength` 0.5 of (0.8, 0.8, 0.4, 0.2)), grayscale at p 0.2, Gaussian blur (σ 0.1–2) at
/// p 0.5, no solarisation.
pub fn vicregl_preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::byol(side, channels);
    let view = &mut p.view1;
    if let Some(crop) = &mut view.crop {
        crop.scale = (0.2, 1.0);
    }
    if let Some(jitter) = &mut view.jitter {
        jitter.p = 1.0;
    }
    if let Some(blur) = &mut view.blur {
        blur.p = 0.5;
    }
    if let Some(solarize) = &mut view.solarize {
        solarize.p = 0.0;
    }
    p.view2 = p.view1.clone();
    p
}

fn defaults() -> Defaults {
    // The `vicreg` recipe's: solo-learn's 0.3 at batch 256, scaled linearly to 128.
    Defaults::new("vicregl", 20, 128, 0.15, vicregl_preset).warmup(2)
}

/// The recipe's method: lightly's example's projectors and loss.
pub fn vicregl_config() -> VicRegLConfig {
    VicRegLConfig::new()
        .with_hidden_dim(PROJECTOR)
        .with_output_dim(PROJECTOR)
        .with_local_hidden_dim(128)
        .with_local_output_dim(128)
}

/// The channels of the recipe's backbone's feature map on its views: a throwaway backbone (no
/// weights; they do not change its shape) through one blank view.
fn map_channels(recipe: &Prepared) -> usize {
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
    backbone
        .forward_feature_map(blank)
        .expect("every backbone of the recipes has a feature map")
        .dims()[1]
}

/// Runs `vicregl`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", vicregl_config())?;
    let config = match config.map_dim {
        Some(_) => config,
        None => {
            let channels = map_channels(&recipe);
            config.with_map_dim(Some(channels))
        }
    };
    let lars = recipe.section("optimizer", lars())?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "vicregl",
    summary: "VICRegL (Bardes et al. 2022): VICReg on global projections and on local ones matched by feature distance and by location, LARS",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// Both views are lightly's `VICRegLTransform` global view.
    #[test]
    fn the_views_are_lightlys_global_views() {
        let p = vicregl_preset(28, 1);
        assert_eq!(p.view1, p.view2);
        assert!(p.local_crops.is_none());
        let v = &p.view1;
        assert_eq!(v.crop.as_ref().unwrap().scale, (0.2, 1.0));
        assert_eq!(v.hflip.as_ref().unwrap().p, 0.5);
        let jitter = v.jitter.as_ref().unwrap();
        assert_eq!(
            (jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue, jitter.p),
            (0.4, 0.4, 0.2, 0.1, 1.0)
        );
        assert_eq!(v.grayscale.as_ref().unwrap().p, 0.2);
        let blur = v.blur.as_ref().unwrap();
        assert_eq!((blur.sigma, blur.p), ((0.1, 2.0), 0.5));
        assert_eq!(v.solarize.as_ref().unwrap().p, 0.0);
    }
}
