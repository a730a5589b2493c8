//! `barlow_twins`, `vicreg`, `vibcreg`, `frossl` and `wmse`: the methods whose whole idea is a loss on the statistics
//! of the batch's projections (docs/methods.md#barlow-twins-and-vicreg), with solo-learn's CIFAR-size
//! settings (`scripts/pretrain/cifar/barlow.yaml`, `vicreg.yaml`) scaled to this batch:
//! three-layer projector `[2048, 2048]` (the papers' 8192 at ImageNet size), LARS
//! (η = 0.02, biases and norms excluded, weight decay 1e-4) at lr 0.3 × B/256, warm-up then
//! cosine, and BYOL's augmentations, which both papers use.
//!
//! - Barlow Twins (Zbontar et al., ICML 2021, <https://arxiv.org/abs/2103.03230>):
//!   `L = Σ_i (1 − C_ii)² + λ Σ_{i≠j} C_ij²`, λ = 5e-3 (solo-learn's 0.0051), the loss scaled
//!   by 0.1 as solo-learn's CIFAR setting (the paper: 1, at batch 2048 on ImageNet).
//! - VICReg (Bardes et al., ICLR 2022, <https://arxiv.org/abs/2105.04906>):
//!   `L = 25·s + 25·v + 1·c`, ε = 1e-4.
//! - VIbCReg (Lee & Aune 2021, <https://arxiv.org/abs/2109.00783>; solo-learn's `vibcreg.yaml`):
//!   the projector `[2048, 2048]` with GELU ending in IterNorm (64 groups, 5 iterations),
//!   `L = 25·s + 25·v + 200·c` with the covariance on the normalised correlation, and its own
//!   augmentation ([`vibcreg_preset`]); the same LARS.
//! - FroSSL (Skean et al., ECCV 2024, <https://arxiv.org/abs/2310.02903>): each view's log
//!   Frobenius norm of its trace-normalised covariance plus the views' distance to their mean,
//!   weight 1; lightly's two-layer projector `[2048, 2048]`, and the same optimiser and
//!   augmentations as the other two (the paper's own schedule is not followed here).
//! - W-MSE (Ermolov et al., ICML 2021, <https://arxiv.org/abs/2007.06346>; solo-learn's
//!   `wmse.yaml`): the projector `[1024] → 64`, each view's projections whitened in sub-batches
//!   of 128 images (at the default batch of 128, one: solo-learn's ImageNet-100 setting per
//!   device), `2 − 2 cos` between the whitened views; Adam at 2e-3 (weight decay 1e-6) and
//!   solo-learn's augmentation ([`wmse_preset`]), not LARS.
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug1(x))), g(f(aug2(x)))
//!     loss = L(z1, z2)                      (both branches get gradients: no stop-gradient)
//!     LARS step on f, g
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::AdamConfig;
use curriculum_ssl::augment::colour::ColorJitter;
use curriculum_ssl::loss::{
    BarlowTwinsLossConfig, FroSslLossConfig, VicRegLossConfig, WmseLossConfig,
};
use curriculum_ssl::method::{
    BarlowTwinsConfig, FroSslConfig, VibcRegConfig, VicRegConfig, WmseConfig,
};
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults};

/// The projector's widths at this scale (solo-learn's CIFAR setting).
pub const PROJECTOR: usize = 2048;

/// LARS as solo-learn's CIFAR settings of both methods.
pub fn lars() -> LarsConfig {
    LarsConfig::new().with_weight_decay(1e-4).with_eta(0.02)
}

fn defaults(recipe: &'static str) -> Defaults {
    // solo-learn's 0.3 at batch 256, scaled linearly to 128.
    Defaults::new(recipe, 20, 128, 0.15, PipelineConfig::byol)
        .warmup(2)
}

/// VIbCReg's augmentation (solo-learn's `vibcreg.yaml`, both views alike): random resized crop
/// (0.2, 1), flip, colour jitter (0.4, 0.4, 0.2, 0.1) at p 0.8, grayscale at p 0.2, solarisation
/// at p 0.1, no blur.
pub fn vibcreg_preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::byol(side, channels);
    for view in [&mut p.view1, &mut p.view2] {
        if let Some(crop) = &mut view.crop {
            crop.scale = (0.2, 1.0);
        }
        view.blur = None;
        if let Some(solarize) = &mut view.solarize {
            solarize.p = 0.1;
        }
    }
    p
}

/// W-MSE's augmentation (solo-learn's `wmse.yaml`, both views alike): random resized crop
/// (0.2, 1), flip, colour jitter (0.8, 0.8, 0.8, 0.2) at p 0.8, grayscale at p 0.2, no blur, no
/// solarisation.
pub fn wmse_preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::simclr(side, channels);
    for view in [&mut p.view1, &mut p.view2] {
        if let Some(crop) = &mut view.crop {
            crop.scale = (0.2, 1.0);
        }
        view.jitter = Some(ColorJitter::simclr(1.0));
        view.blur = None;
        view.solarize = None;
    }
    p
}

/// The W-MSE recipe's method: solo-learn's CIFAR setting (projector `[1024] → 64`, sub-batches
/// of 128, one order per step, no shrinkage).
pub fn wmse_config() -> WmseConfig {
    WmseConfig::new()
        .with_hidden_dim(1024)
        .with_output_dim(64)
        .with_loss(WmseLossConfig::new().with_w_size(128))
}

/// The Barlow Twins recipe's method.
pub fn barlow_twins_config() -> BarlowTwinsConfig {
    BarlowTwinsConfig::new()
        .with_hidden_dim(PROJECTOR)
        .with_output_dim(PROJECTOR)
        .with_loss(BarlowTwinsLossConfig::new().with_scale(0.1))
}

/// The VICReg recipe's method.
pub fn vicreg_config() -> VicRegConfig {
    VicRegConfig::new()
        .with_hidden_dim(PROJECTOR)
        .with_output_dim(PROJECTOR)
        .with_loss(VicRegLossConfig::new())
}

/// The VIbCReg recipe's method.
pub fn vibcreg_config() -> VibcRegConfig {
    VibcRegConfig::new()
        .with_hidden_dim(PROJECTOR)
        .with_output_dim(PROJECTOR)
}

/// The FroSSL recipe's method.
pub fn frossl_config() -> FroSslConfig {
    FroSslConfig::new()
        .with_hidden_dim(PROJECTOR)
        .with_output_dim(PROJECTOR)
        .with_loss(FroSslLossConfig::new())
}

/// Runs `barlow_twins`.
pub fn barlow_twins(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults("barlow_twins"))?;
    let config = recipe.section("method", barlow_twins_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// Runs `vicreg`.
pub fn vicreg(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults("vicreg"))?;
    let config = recipe.section("method", vicreg_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// Runs `vibcreg`.
pub fn vibcreg(args: &[String]) -> Result<()> {
    let defaults = Defaults {
        preset: vibcreg_preset,
        ..defaults("vibcreg")
    };
    let recipe = common::prepare(args, defaults)?;
    let config = recipe.section("method", vibcreg_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// Runs `frossl`.
pub fn frossl(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults("frossl"))?;
    let config = recipe.section("method", frossl_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train_method(&config, &lars, |b, d| config.init(b, d))
}

/// Runs `wmse`: Adam at solo-learn's 2e-3 (not scaled with the batch: Adam's step does not
/// grow with it), weight decay 1e-6 as L2.
pub fn wmse(args: &[String]) -> Result<()> {
    let defaults = Defaults::new("wmse", 20, 128, 2e-3, wmse_preset).warmup(2);
    let recipe = common::prepare(args, defaults)?;
    // The sub-batches' orders are drawn from `--seed`.
    let config = wmse_config();
    let config = config.clone().with_loss(config.loss.with_seed(recipe.settings.seed));
    let config = recipe.section("method", config)?;
    if recipe.settings.schedule.batch_size < config.loss.w_size {
        return Err(curriculum_ssl::ConfigError::new(
            "method.loss.w_size",
            format!(
                "W-MSE whitens sub-batches of {} images, more than the batch of {}: raise \
                 --batch-size or lower it (to at least 2 × method.output_dim = {})",
                config.loss.w_size,
                recipe.settings.schedule.batch_size,
                2 * config.output_dim
            ),
        )
        .into());
    }
    let adam = recipe.section(
        "optimizer",
        AdamConfig::new().with_weight_decay(Some(WeightDecayConfig::new(1e-6))),
    )?;
    recipe.train_method(&config, &adam, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "barlow_twins",
        summary: "Barlow Twins (Zbontar et al. 2021): cross-correlation to the identity, LARS",
        run: barlow_twins,
    },
    RecipeEntry {
        name: "vicreg",
        summary: "VICReg (Bardes et al. 2022): variance, invariance, covariance 25/25/1, LARS",
        run: vicreg,
    },
    RecipeEntry {
        name: "vibcreg",
        summary: "VIbCReg (Lee and Aune 2021): VICReg with an IterNorm-whitened projector and a normalised covariance 25/25/200, LARS",
        run: vibcreg,
    },
    RecipeEntry {
        name: "frossl",
        summary: "FroSSL (Skean et al. 2024): log Frobenius norm of the covariance plus invariance, LARS",
        run: frossl,
    },
    RecipeEntry {
        name: "wmse",
        summary: "W-MSE (Ermolov et al. 2021): views whitened in sub-batches by a Cholesky factor, cosine distance, Adam",
        run: wmse,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// VIbCReg's views: crop (0.2, 1), flip, its jitter and grayscale, solarisation at p 0.1,
    /// no blur, both alike.
    #[test]
    fn vibcregs_augmentation_is_solo_learns() {
        let p = vibcreg_preset(28, 1);
        assert_eq!(p.view1, p.view2);
        let v = &p.view1;
        assert_eq!(v.crop.as_ref().unwrap().scale, (0.2, 1.0));
        assert_eq!(v.hflip.as_ref().unwrap().p, 0.5);
        let jitter = v.jitter.as_ref().unwrap();
        assert_eq!(
            (jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue, jitter.p),
            (0.4, 0.4, 0.2, 0.1, 0.8)
        );
        assert_eq!(v.grayscale.as_ref().unwrap().p, 0.2);
        assert!(v.blur.is_none());
        assert_eq!(v.solarize.as_ref().unwrap().p, 0.1);
    }
}
