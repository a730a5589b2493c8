//! `simsiam`: SimSiam (Chen & He, "Exploring Simple Siamese Representation Learning", CVPR 2021,
//! <https://arxiv.org/abs/2011.10566>; docs/methods.md#simsiam) — three-layer BN projector whose
//! last BatchNorm has no affine parameters (§3, and the authors' code), `[512]` bottleneck
//! predictor, symmetric negative cosine averaged over the two orderings (eq. 2) with
//! stop-gradient, SGD lr 0.06 for batch 128 with weight decay 5e-4, and SimSiam's augmentation
//! ([`preset`]).
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug(x))), g(f(aug(x)));  p1, p2 = h(z1), h(z2)
//!     loss = −cos(p1, stopgrad(z2)) / 2 − cos(p2, stopgrad(z1)) / 2
//!     SGD step on f, g, h
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::SimSiamConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, Prepared};

/// SimSiam's augmentation (its code's `main_simsiam.py`, which is MoCo v2's): random resized crop
/// of scale (0.2, 1), horizontal flip, colour jitter (0.4, 0.4, 0.4, 0.1) with p 0.8, grayscale
/// with p 0.2, and Gaussian blur (σ in [0.1, 2], p 0.5) on ImageNet-size images only: the
/// paper's CIFAR setting has no blur, so it is dropped below 96 pixels (the presets' boundary
/// between small and ImageNet-size images).
pub fn preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::moco_v2(side, channels);
    if side < 96 {
        p.view1.blur = None;
        p.view2.blur = None;
    }
    p
}

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults::new("simsiam", 20, 128, 0.06, preset)
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// Builds the method for a prepared recipe and trains it (shared with the MICO variants).
pub fn train(recipe: Prepared) -> Result<()> {
    let config = SimSiamConfig::new();
    let config = recipe.section("method", config)?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}


/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "simsiam",
        summary: "SimSiam (Chen and He 2021; MICO Table 1 baseline): predictor, stop-gradient",
        run,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use curriculum_ssl::augment::colour::ColorJitter;

    #[test]
    fn augmentation_is_simsiams() {
        for side in [32, 224] {
            let p = preset(side, 3);
            for v in [&p.view1, &p.view2] {
                assert_eq!(v.crop.as_ref().unwrap().scale, (0.2, 1.0));
                assert_eq!(v.hflip.as_ref().unwrap().p, 0.5);
                assert_eq!(
                    v.jitter,
                    Some(ColorJitter {
                        brightness: 0.4,
                        contrast: 0.4,
                        saturation: 0.4,
                        hue: 0.1,
                        p: 0.8
                    })
                );
                assert_eq!(v.grayscale.as_ref().unwrap().p, 0.2);
                assert!(v.solarize.is_none());
                match side {
                    32 => assert!(v.blur.is_none(), "no blur on CIFAR-size images"),
                    _ => {
                        let blur = v.blur.as_ref().unwrap();
                        assert_eq!((blur.sigma, blur.p), ((0.1, 2.0), 0.5));
                    }
                }
            }
        }
        assert_eq!(defaults().recipe, "simsiam");
    }
}
