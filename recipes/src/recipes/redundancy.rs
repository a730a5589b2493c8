//! `barlow_twins`, `vicreg` and `frossl`: the methods whose whole idea is a loss on the statistics
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
//! - FroSSL (Skean et al., ECCV 2024, <https://arxiv.org/abs/2310.02903>): each view's log
//!   Frobenius norm of its trace-normalised covariance plus the views' distance to their mean,
//!   weight 1; lightly's two-layer projector `[2048, 2048]`, and the same optimiser and
//!   augmentations as the other two (the paper's own schedule is not followed here).
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug1(x))), g(f(aug2(x)))
//!     loss = L(z1, z2)                      (both branches get gradients: no stop-gradient)
//!     LARS step on f, g
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::loss::{BarlowTwinsLossConfig, FroSslLossConfig, VicRegLossConfig};
use curriculum_ssl::method::{BarlowTwinsConfig, FroSslConfig, VicRegConfig};
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, Train};

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
    recipe.train(&config, |recipe, device| {
        let method = recipe.init(device, |d| config.init(recipe.backbone_config().init(d), d))?;
        Ok((method, lars.init::<Train, _>()?))
    })
}

/// Runs `vicreg`.
pub fn vicreg(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults("vicreg"))?;
    let config = recipe.section("method", vicreg_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train(&config, |recipe, device| {
        let method = recipe.init(device, |d| config.init(recipe.backbone_config().init(d), d))?;
        Ok((method, lars.init::<Train, _>()?))
    })
}

/// Runs `frossl`.
pub fn frossl(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults("frossl"))?;
    let config = recipe.section("method", frossl_config())?;
    let lars = recipe.section("optimizer", lars())?;
    recipe.train(&config, |recipe, device| {
        let method = recipe.init(device, |d| config.init(recipe.backbone_config().init(d), d))?;
        Ok((method, lars.init::<Train, _>()?))
    })
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
        name: "frossl",
        summary: "FroSSL (Skean et al. 2024): log Frobenius norm of the covariance plus invariance, LARS",
        run: frossl,
    },
];
