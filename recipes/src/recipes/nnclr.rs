//! `nnclr`: NNCLR (Dwibedi et al., ICCV 2021, <https://arxiv.org/abs/2104.14548>; see
//! docs/methods.md#nnclr) with solo-learn's CIFAR-size settings (`scripts/pretrain/cifar/
//! nnclr.yaml`) scaled to this batch: projector `[2048, 2048, 256]` with BatchNorm after every
//! layer, predictor `[4096, 256]`, temperature 0.2, LARS (η = 0.02, biases and norms excluded,
//! weight decay 1e-5) at lr 0.4 × B/256, warm-up then cosine, SimCLR's augmentations.
//!
//! The support set holds [`SUPPORT_SET`] projections: the paper's 98,304 is 7.7 % of ImageNet;
//! 16,384 is a quarter of Fashion-MNIST and keeps the neighbour search (a `[B, S]` product per
//! view and step) below the backbone's cost on the CPU.
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug1(x))), g(f(aug2(x)));  p1, p2 = h(z1), h(z2)
//!     nn1, nn2 = nearest neighbours of z1, z2 in the support set Q (cosine)
//!     loss = (CE(nn1·p2ᵀ/τ, diag) + CE(nn2·p1ᵀ/τ, diag)) / 2
//!     LARS step on f, g, h;  Q ← Q + normalise(z1)  (FIFO)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::loss::NnClrLossConfig;
use curriculum_ssl::method::NnClrConfig;
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults};

/// Projections in the recipe's support set.
pub const SUPPORT_SET: usize = 16_384;

fn defaults() -> Defaults {
    // solo-learn's 0.4 at batch 256, scaled linearly to 128.
    Defaults::new("nnclr", 20, 128, 0.2, PipelineConfig::simclr)
        .warmup(2)
}

/// The recipe's method.
pub fn config() -> NnClrConfig {
    NnClrConfig::new()
        .with_support_set_size(SUPPORT_SET)
        .with_loss(NnClrLossConfig::new().with_temperature(0.2))
}

/// Runs `nnclr`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", config())?;
    let lars = recipe.section(
        "optimizer",
        LarsConfig::new().with_weight_decay(1e-5).with_eta(0.02),
    )?;
    let batch = recipe.settings.schedule.batch_size;
    recipe.train_method(&config, &lars, |b, d| config.init(b, batch, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "nnclr",
    summary: "NNCLR (Dwibedi et al. 2021): nearest neighbour from a support set of 16,384 as the positive, LARS",
    run,
}];
