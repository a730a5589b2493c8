//! `moco_v3`: MoCo v3 (Chen, Xie & He, ICCV 2021, <https://arxiv.org/abs/2104.02057>; see
//! docs/methods.md#moco-v3) on any backbone, the ViTs included (`--backbone vit-tiny|vit-small|
//! vit-base`, patches of 4 pixels under 96-pixel images).
//!
//! - On a ViT, the paper's ViT setting: three-layer projector, `τ = 0.2`, AdamW (β 0.9/0.999,
//!   ε 1e-8, weight decay 0.1) at lr 1.5e-4 × B/256 unless `--lr` says otherwise.
//! - On a ResNet (or another CNN), solo-learn's CIFAR setting (`scripts/pretrain/cifar/
//!   mocov3.yaml`): two-layer projector, `τ = 0.2`, LARS (η = 0.02, weight decay 1e-6) at
//!   lr 0.3 × B/256.
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

use super::common::{self, BackboneChoice, Defaults, Train};

fn defaults() -> Defaults {
    // solo-learn's 0.3 at batch 256, scaled linearly to 128 (a ViT's default is set below).
    Defaults::new("moco_v3", 20, 128, 0.15, PipelineConfig::byol)
        .warmup(2)
}

/// Whether `backbone` is a Vision Transformer.
pub fn is_vit(backbone: BackboneChoice) -> bool {
    matches!(
        backbone,
        BackboneChoice::VitTiny | BackboneChoice::VitSmall | BackboneChoice::VitBase
    )
}

/// The recipe's method on `backbone`: the paper's three-layer projector on a ViT, two layers
/// otherwise; `τ = 0.2` on both; on the CPU-sized backbones heads 512 wide with 128-d
/// projections (the 4096-wide heads would cost more than `small-2x` itself; the
/// studies/cpu_setting runs).
pub fn config(backbone: BackboneChoice) -> MocoV3Config {
    let layers = if is_vit(backbone) { 3 } else { 2 };
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
    let mut recipe = common::prepare(args, defaults())?;
    let vit = is_vit(recipe.settings.backbone);
    if vit && recipe.args.lr.is_none() {
        // The paper's ViT learning rate: 1.5e-4 × B / 256.
        recipe.settings.lr = 1.5e-4 * recipe.settings.batch_size as f64 / 256.0;
    }
    let config = config(recipe.settings.backbone);
    let backbone = recipe.backbone_config();
    let config = recipe.section("method", config)?;
    if vit {
        let adamw = recipe.section(
            "optimizer",
            AdamWConfig::new()
                .with_weight_decay(0.1)
                .with_epsilon(1e-8),
        )?;
        recipe.train(&config, |recipe, device| {
            let method = recipe.init(device, |d| config.init(|d| backbone.init::<Train>(d), d))?;
            Ok((method, adamw.init::<Train, _>()))
        })
    } else {
        let lars = recipe.section(
            "optimizer",
            LarsConfig::new().with_weight_decay(1e-6).with_eta(0.02),
        )?;
        recipe.train(&config, |recipe, device| {
            let method = recipe.init(device, |d| config.init(|d| backbone.init::<Train>(d), d))?;
            Ok((method, lars.init::<Train, _>()?))
        })
    }
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "moco_v3",
    summary: "MoCo v3 (Chen et al. 2021): in-batch keys, predictor, momentum encoder; ViT (--backbone vit-small) or CNN",
    run,
}];
