//! `moco_v3`: MoCo v3 (Chen, Xie & He, ICCV 2021, <https://arxiv.org/abs/2104.02057>; see
//! docs/methods.md#moco-v3) on any backbone, the ViTs included (`--backbone vit-tiny|vit-small|
//! vit-base`, patches of 4 pixels under 96-pixel images).
//!
//! - On a ViT, the paper's ViT setting: three-layer projector, `τ = 0.2`, AdamW (β 0.9/0.999,
//!   ε 1e-8, weight decay 0.1) at lr 1.5e-4 × B/256 unless `--lr` says otherwise.
//! - On a ResNet (or another CNN), solo-learn's CIFAR setting (`scripts/pretrain/cifar/
//!   mocov3.yaml`): two-layer projector, `τ = 0.2`, LARS (η = 0.02, weight decay 1e-6) at
//!   lr 0.3 × B/256, batch 128 for 20 epochs on a GPU and 64 for 18 on the CPU
//!   ([`default_batch_size`], [`default_epochs`]).
//!
//! Both: heads 4096 wide, 256-d projections (512 and 128 on the CPU-sized backbones),
//! momentum 0.99 → 1 along a cosine, BYOL's augmentations (the paper's), warm-up then cosine.
//!
//! ```text
//! for each batch x:
//!     q1, q2 = h(g(f(aug1(x)))), h(g(f(aug2(x))))          (query encoder + predictor)
//!     k1, k2 = g_m(f_m(aug1(x))), g_m(f_m(aug2(x)))        (momentum encoder, no gradient)
//!     loss = ctr(q1, k2) + ctr(q2, k1),  ctr = 2τ · CE(q·kᵀ/τ, diag)
//!     optimiser step on f, g, h;  f_m, g_m ← EMA(f, g)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::AdamWConfig;
use curriculum_ssl::loss::MocoV3LossConfig;
use curriculum_ssl::method::MocoV3Config;
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, BackboneChoice, Defaults};

/// Images per step: 128 on a GPU; 64 on the CPU, whose runs cover small datasets in few epochs
/// and gain from twice the steps (the embedded Fashion-MNIST subset, 20 epochs, seed 2: kNN
/// top-1 84.10 % at batch 64 and lr 0.075 against 82.25 % at 128 and 0.15).
pub fn default_batch_size() -> usize {
    if crate::backend::on_cpu() {
        64
    } else {
        128
    }
}

/// Epochs: 20 on a GPU; 18 on the CPU, where batches of 64 ran at about 520 images/s on two
/// cores on 2026-11-27, so that the embedded subset's run stayed under 5 minutes (4 min 36 s to
/// 4 min 39 s of training, seeds 0–2; 20 epochs took 5 min 07 s). On a 2-core AMD EPYC on
/// 2026-11-29 the same 18 epochs took 5 min 43 s to 6 min 14 s (`studies/moco_v3_cpu`).
pub fn default_epochs() -> usize {
    if crate::backend::on_cpu() {
        18
    } else {
        20
    }
}

/// The CNN learning rate for `batch_size` images per step: solo-learn's 0.3 at batch 256,
/// scaled linearly (a ViT's: [`vit_lr_for_batch`]).
pub fn lr_for_batch(batch_size: usize) -> f64 {
    0.3 * batch_size as f64 / 256.0
}

/// The ViT learning rate for `batch_size` images per step: the paper's 1.5e-4 × B / 256 (with
/// AdamW).
pub fn vit_lr_for_batch(batch_size: usize) -> f64 {
    1.5e-4 * batch_size as f64 / 256.0
}

fn defaults() -> Defaults {
    Defaults::new(
        "moco_v3",
        default_epochs(),
        default_batch_size(),
        lr_for_batch(default_batch_size()),
        PipelineConfig::byol,
    )
    .lr_rule(lr_for_batch)
    .vit_lr_rule(vit_lr_for_batch)
    .warmup(2)
}

/// The recipe's method on `backbone`: the paper's three-layer projector on a ViT, two layers
/// otherwise; `τ = 0.2` on both; on the CPU-sized backbones heads 512 wide with 128-d
/// projections (the 4096-wide heads would cost more than `small-2x` itself; the
/// studies/cpu_setting runs).
pub fn config(backbone: BackboneChoice) -> MocoV3Config {
    let layers = if backbone.is_vit() { 3 } else { 2 };
    let config = MocoV3Config::new()
        .with_projector_layers(layers)
        .with_loss(MocoV3LossConfig::new().with_temperature(0.2));
    if backbone.is_cpu_sized() {
        config.with_hidden_dim(512).with_output_dim(128)
    } else {
        config
    }
}

/// Runs `moco_v3`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let vit = recipe.settings.backbone.is_vit();
    let config = config(recipe.settings.backbone);
    let config = recipe.section("method", config)?;
    if vit {
        let adamw = recipe.section(
            "optimizer",
            AdamWConfig::new().with_weight_decay(0.1).with_epsilon(1e-8),
        )?;
        recipe.train_method(&config, &adamw, |b, d| config.init(b, d))
    } else {
        let lars = recipe.section(
            "optimizer",
            LarsConfig::new().with_weight_decay(1e-6).with_eta(0.02),
        )?;
        recipe.train_method(&config, &lars, |b, d| config.init(b, d))
    }
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "moco_v3",
    summary: "MoCo v3 (Chen et al. 2021): in-batch keys, predictor, momentum encoder; ViT (--backbone vit-small) or CNN",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learning_rate_follows_solo_learns_rule_and_the_cpu_takes_batches_of_64() {
        assert_eq!(lr_for_batch(256), 0.3);
        assert_eq!(lr_for_batch(128), 0.15);
        assert_eq!(lr_for_batch(64), 0.075);
        // The test binaries are built for the CPU backend.
        assert_eq!(default_batch_size(), 64);
        assert_eq!(default_epochs(), 18);
        assert_eq!(defaults().lr, 0.075);
        assert_eq!(defaults().warmup_epochs, 2);
    }

    #[test]
    fn the_cpu_sized_backbones_get_narrow_heads() {
        for backbone in [
            BackboneChoice::Small,
            BackboneChoice::Small2x,
            BackboneChoice::Lenet5,
            BackboneChoice::VitMicro,
        ] {
            let c = config(backbone);
            assert_eq!((c.hidden_dim, c.output_dim), (512, 128), "{backbone:?}");
        }
        assert_eq!(config(BackboneChoice::VitMicro).projector_layers, 3);
        let c = config(BackboneChoice::Resnet18);
        assert_eq!(
            (c.hidden_dim, c.output_dim, c.projector_layers),
            (4096, 256, 2)
        );
        assert_eq!(config(BackboneChoice::VitTiny).projector_layers, 3);
    }
}
