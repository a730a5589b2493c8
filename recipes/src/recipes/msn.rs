//! `msn` and `pmsn`: Masked Siamese Networks (Assran et al. 2022,
//! <https://arxiv.org/abs/2204.07141>) and its power-law prior (PMSN, Assran et al. 2023,
//! <https://arxiv.org/abs/2210.07277>) on a Vision Transformer, ViT-Tiny by default
//! (`--backbone vit-tiny|vit-small|vit-base`; patches of 4 pixels under 96-pixel images); see
//! docs/methods.md#msn.
//!
//! Both: multi-crop views with SimCLR's operations, the first global view the target, the second
//! and [`multi_crop::LOCAL_CROPS`] focal views the anchors (the paper's 1 + 10), random views
//! (0.3, 1) and focal views (0.05, 0.3) of the image (on images under 96 pixels the focal views
//! are the other recipes' local crops, [`multi_crop::SMALL_LOCAL_SCALE`]); 15 % of every anchor's
//! patch tokens dropped; the projector `[2048, 2048, 256]` with GELU, 1,024 prototypes,
//! temperature 0.1, targets sharpened at 0.25 and balanced by 3 Sinkhorn–Knopp iterations, the
//! target network an EMA (0.996 → 1); AdamW (weight decay 0.04; the paper's 0.04 → 0.4 schedule
//! is not here) at lr 1.5e-4 × B/64 (lightly's example) with a warm-up of 10 % of the epochs.
//! - `msn`: the mean-entropy regulariser, weight 1.
//! - `pmsn`: the power-law prior instead (exponent 0.25, weight 1).
//!
//! ```text
//! for each batch x:
//!     t, a, f1 .. fV = multi_crop(x);  drop 15 % of the patch tokens of a, f1 .. fV
//!     z_t = target_net(t)  (no gradient);  z_a = student(a, f1 .. fV)
//!     loss = H(balanced sharpened p(z_t), p(z_a)) + λ·R(mean p(z_a))
//!     AdamW step on the student and the prototypes; target_net ← EMA(student)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::loss::MsnLossConfig;
use curriculum_ssl::method::MsnConfig;

use super::common::{self, BackboneChoice, Defaults};
use super::multi_crop;

/// Epochs of the recipes.
const EPOCHS: usize = 20;

/// The learning rate for a batch of `batch`: 1.5e-4 × B / 64 (lightly's example).
fn lr(batch: usize) -> f64 {
    1.5e-4 * batch as f64 / 64.0
}

/// Runs `msn`.
pub fn msn(args: &[String]) -> Result<()> {
    train(args, "msn", MsnConfig::new())
}

/// Runs `pmsn`.
pub fn pmsn(args: &[String]) -> Result<()> {
    let loss = MsnLossConfig::new().with_power_law_exponent(Some(0.25));
    train(args, "pmsn", MsnConfig::new().with_loss(loss))
}

fn train(args: &[String], name: &'static str, config: MsnConfig) -> Result<()> {
    let defaults = Defaults::new(name, EPOCHS, 128, lr(128), multi_crop::msn_views)
        .lr_rule(lr)
        .warmup(EPOCHS / 10)
        .backbone(BackboneChoice::VitTiny);
    let recipe = common::prepare(args, defaults)?;
    // The masks are drawn from `--seed` (a study's seeds draw different masks).
    let config = recipe.section("method", config.with_seed(recipe.settings.seed))?;
    let optimizer = recipe.section("optimizer", AdamWConfig::new().with_weight_decay(0.04))?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "msn",
        summary: "MSN (Assran et al. 2022): masked anchors match the unmasked target's prototype assignment, mean-entropy regulariser; ViT-Tiny by default",
        run: msn,
    },
    RecipeEntry {
        name: "pmsn",
        summary: "PMSN (Assran et al. 2023): MSN with a power-law prior on the prototypes' use instead of a uniform one; ViT-Tiny by default",
        run: pmsn,
    },
];
