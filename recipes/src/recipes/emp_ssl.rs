//! `emp_ssl`: EMP-SSL (Tong et al. 2023, <https://arxiv.org/abs/2304.03977>; see
//! docs/methods.md#emp-ssl) with the authors' CIFAR settings: 20 patches of every image, each a
//! fixed square crop of a quarter of the image resized to full size ([`patches`]), the projector
//! `[4096, 4096] → 1024` L2-normalised, `ε = 0.2`, `λ = 200`, LARS over SGD with Nesterov
//! momentum (lr 0.3 at batch 100, weight decay 1e-4, η = 0.005, biases and norms excluded), a
//! cosine to 0 over the steps without warm-up, and 2 epochs (the authors' command for their
//! one-epoch results). Each patch is a pass through the network: `--local-crops` sets how many
//! besides the two global ones (18 here).
//!
//! ```text
//! for each batch x:
//!     z_v = normalize(g(f(patch_v(x))))                     (v < 20)
//!     loss = −mean_v R(z_v) − 200 · mean_{v,i} cos(z_{v,i}, mean_v z_{v,i})
//!     LARS step on f, g
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::augment::blur::RandomGaussianBlur;
use curriculum_ssl::augment::colour::ColorJitter;
use curriculum_ssl::augment::solarize::RandomSolarize;
use curriculum_ssl::method::EmpSslConfig;
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::{LocalCrops, PipelineConfig};

use super::common::{self, Defaults};

/// Patches besides the two global views (the authors' 20 in all).
pub const EXTRA_PATCHES: usize = 18;

/// The authors' patch (`dataset/aug.py`): a square crop of a quarter of the image resized to
/// full size, flip, colour jitter (0.4, 0.4, 0.4, 0.2) at p 0.8, grayscale at p 0.2, Gaussian
/// blur (σ 0.1–2) at p 0.1, solarisation at p 0.1; every patch alike, the ones after the first
/// two as the pipeline's local crops.
pub fn patches(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::byol(side, channels);
    let view = &mut p.view1;
    if let Some(crop) = &mut view.crop {
        crop.scale = (0.25, 0.25);
        crop.ratio = (1.0, 1.0);
    }
    view.jitter = Some(ColorJitter {
        brightness: 0.4,
        contrast: 0.4,
        saturation: 0.4,
        hue: 0.2,
        p: 0.8,
    });
    view.blur = Some(RandomGaussianBlur {
        kernel_size: RandomGaussianBlur::kernel_for(side),
        sigma: (0.1, 2.0),
        p: 0.1,
    });
    view.solarize = Some(RandomSolarize {
        threshold: 0.5,
        p: 0.1,
    });
    p.view2 = p.view1.clone();
    p.local_crops = Some(LocalCrops {
        count: EXTRA_PATCHES,
        view: p.view1.clone(),
    });
    p
}

fn defaults() -> Defaults {
    Defaults::new("emp_ssl", 2, 100, 0.3, patches)
}

/// Runs `emp_ssl`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", EmpSslConfig::new())?;
    let lars = recipe.section(
        "optimizer",
        LarsConfig::new()
            .with_nesterov(true)
            .with_weight_decay(1e-4)
            .with_eta(0.005),
    )?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "emp_ssl",
    summary: "EMP-SSL (Tong et al. 2023): total coding rate of 20 patches per image plus invariance, LARS, 2 epochs",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// Twenty patches of one kind: a square quarter of the image at full size.
    #[test]
    fn every_patch_is_a_square_quarter_at_full_size() {
        let p = patches(28, 1);
        let locals = p.local_crops.as_ref().unwrap();
        assert_eq!(locals.count + 2, 20);
        for v in [&p.view1, &p.view2, &locals.view] {
            let crop = v.crop.as_ref().unwrap();
            assert_eq!((crop.size, crop.scale, crop.ratio), ((28, 28), (0.25, 0.25), (1.0, 1.0)));
            assert_eq!(v.jitter.as_ref().unwrap().hue, 0.2);
            assert_eq!(v.blur.as_ref().unwrap().p, 0.1);
            assert_eq!(v.solarize.as_ref().unwrap().p, 0.1);
            assert_eq!(v.grayscale.as_ref().unwrap().p, 0.2);
        }
    }
}
