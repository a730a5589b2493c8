//! `all4one`: All4One (Estepa et al., ICCV 2023, <https://arxiv.org/abs/2303.09417>; see
//! docs/methods.md#all4one) with solo-learn's CIFAR settings (`scripts/pretrain/cifar/
//! all4one.yaml`) scaled to this batch: projector `[2048, 2048, 256]` with BatchNorm after every
//! layer, two predictors `[4096, 256]`, a 3-layer transformer (8 heads, feed-forward 512, dropout
//! 0.1) over 5 neighbours, temperature 0.2 (the centroid term's 0.1), momentum 0.99 → 1, LARS
//! (η = 0.02, `clip_lr`, biases and norms excluded, weight decay 1e-5) at lr 1.0 × B/256 (0.5 at
//! the CPU default of 128), warm-up then cosine, solo-learn's asymmetric augmentations (BYOL's
//! without blur: view 2 solarised with p 0.2).
//!
//! The support set holds [`SUPPORT_SET`] momentum projections (solo-learn's CIFAR 98,304 is
//! more than Fashion-MNIST's 60,000 images; the `nnclr` recipe's quarter of it). solo-learn
//! trains the transformer at a literal lr of 0.1 (its own parameter group, not batch-scaled):
//! here at `method.transformer_lr_factor` 0.2 × the base lr of 0.5, the same 0.1 at the
//! default batch (docs/methods.md#all4one).
//!
//! ```text
//! for each batch x:
//!     z_v = g(f(aug_v(x))), p_v = h(z_v), q_v = h2(z_v);  m_v = normalise(g'(f'(aug_v(x))))
//!     nn_v = the 5 nearest neighbours of m_v in the support set Q (cosine)
//!     rich_v = T(nn_v + PE)[0];  strange_v = T([q_v, nn_v[0..4]] + PE)[0]
//!     centroid  = (CE_0.1(rich1, strange2) + CE_0.1(rich2, strange1)) / 2
//!     neighbour = (CE_0.2(nn1[0], p2) + CE_0.2(nn2[0], p1)) / 2
//!     feature   = 10 (on + off) / 2   (cross-correlations of m and z, columns normalised)
//!     loss = ½ centroid + ½ neighbour + ½ feature
//!     LARS step on f, g, h, h2, T;  (f', g') ← EMA of (f, g);  Q ← Q + m_1  (FIFO)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::All4OneConfig;
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults};
use super::nnclr::SUPPORT_SET;

/// solo-learn's `asymmetric.yaml` for CIFAR: BYOL's views without the Gaussian blur (view 1 no
/// solarisation, view 2 solarised with p 0.2).
fn views(side: usize, channels: usize) -> PipelineConfig {
    let mut config = PipelineConfig::byol(side, channels);
    config.view1.blur = None;
    config.view2.blur = None;
    config
}

fn defaults() -> Defaults {
    // solo-learn's 1.0 at batch 256, scaled linearly to 128.
    Defaults::new("all4one", 20, 128, 0.5, views).warmup(2)
}

/// The recipe's method.
pub fn config() -> All4OneConfig {
    // solo-learn's literal transformer lr of 0.1 against this recipe's base lr of 0.5.
    All4OneConfig::new()
        .with_support_set_size(SUPPORT_SET)
        .with_transformer_lr_factor(0.2)
}

/// Runs `all4one`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", config())?;
    let lars = recipe.section(
        "optimizer",
        LarsConfig::new()
            .with_weight_decay(1e-5)
            .with_eta(0.02)
            .with_clip_lr(true),
    )?;
    let batch = recipe.settings.schedule.batch_size;
    recipe.train_method(&config, &lars, |b, d| config.init(b, batch, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "all4one",
    summary: "All4One (Estepa et al. 2023): NNCLR's neighbour term, a transformer's centroid of 5 neighbours and a feature-wise term, momentum encoder, LARS",
    run,
}];
