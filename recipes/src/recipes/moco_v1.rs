//! `moco_v1`: MoCo v1 (He et al. 2020, <https://arxiv.org/abs/1911.05722>) — a linear
//! projection to 128, InfoNCE against a queue (τ = 0.07), key encoder momentum 0.99 (0.999 on
//! ImageNet; small data moves faster), SGD lr 0.03 for batch 128 with weight decay 1e-4, the
//! MoCo v1 augmentations (MoCo v2's without blur). MICO's curriculum ablation (its Tables 2 and
//! 3) trains this framework.
//!
//! ```text
//! for each batch x:
//!     q = f_q(aug(x));  k = f_k(aug(x))   (no gradient)
//!     loss = InfoNCE(q, k, queue)
//!     SGD step on f_q;  f_k ← m·f_k + (1 − m)·f_q;  enqueue(k)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::curriculum::{
    SchedulerConfig, SelfPacedAutoAugmentConfig, StrengthCurriculumConfig,
};
use curriculum_ssl::method::{Moco, MocoConfig, QueueFit};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, Device, Prepared, Train};
use crate::usage::usage;
use curriculum_ssl_models::AnyBackbone;

/// MoCo v2's augmentation without the blur (MoCo v1 had none).
fn preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::moco_v2(side, channels);
    p.view1.blur = None;
    p.view2.blur = None;
    p
}

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults::new("moco_v1", 20, 128, 0.03, preset).shuffle_bn()
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// `moco_strength_curriculum`: MoCo v1 with MICO's augmentation-strength curriculum (its Tables
/// 2–3): by default double strength reached on the 4-step schedule, the best row of its
/// 800-epoch table (90.54 on CIFAR-10); `--strength 1|1.5|2|3` and `--schedule
/// none|two-step|four-step|linear|reverse-cosine` select the other rows.
pub fn strength_curriculum(args: &[String]) -> Result<()> {
    let defaults =
        defaults()
            .named("moco_strength_curriculum")
            .strength(StrengthCurriculumConfig {
                target: 2.0,
                schedule: Some(SchedulerConfig::four_step()),
            });
    train(common::prepare(args, defaults)?)
}

/// `auto_augment_self_paced`: MoCo v1 with MICO's normalised AutoAugment (§3.4, eq. 5,
/// Figure 3): 5 sub-policies of 2 operations, one drawn per batch in proportion to its
/// self-paced importance, whose magnitudes a controller learns from the losses, each moving at
/// most 0.02 per batch under a ceiling rising linearly from 0.2 to 1 (the library's
/// `SelfPacedAutoAugmentConfig` defaults; the paper publishes no values). The sub-policy and
/// its magnitude are columns of steps.csv (`aa_policy`, `aa_magnitude`).
pub fn auto_augment_self_paced(args: &[String]) -> Result<()> {
    let defaults = defaults().named("auto_augment_self_paced");
    let mut recipe = common::prepare(args, defaults)?;
    recipe.pipeline.auto_augment = Some(SelfPacedAutoAugmentConfig::new());
    train(recipe)
}

/// Builds the method for a prepared recipe and trains it.
pub fn train(recipe: Prepared) -> Result<()> {
    let config = recipe.moco(
        MocoConfig::moco_v1()
            .with_momentum(0.99)
            .with_queue_size(4096),
    )?;
    let optimizer = recipe.section("optimizer", SgdConfig::new().with_weight_decay(1e-4))?;
    recipe.train(&config, |recipe, device| {
        let method = init_moco(recipe, &config, device)?;
        Ok((method, optimizer.init::<Train, _>()?))
    })
}

/// MoCo (v1, v2 or Light-MoCo, as `config` says) around the recipe's backbone, seeded by
/// `--seed`; a queue that cannot take the steps' keys is said in terms of `--batch-size` and
/// `method.queue_size`, before anything is built.
pub fn init_moco(
    recipe: &Prepared,
    config: &MocoConfig,
    device: &Device,
) -> Result<Moco<Train, AnyBackbone<Train>>> {
    let batch_size = recipe.settings.schedule.batch_size;
    let per_step = if config.symmetric { " × 2" } else { "" };
    match config.check_batch(batch_size) {
        Ok(()) => {}
        Err(QueueFit::TooSmall {
            size,
            keys_per_step,
        }) => {
            return Err(usage(format!(
                "the queue of {size} keys (method.queue_size) must hold at least one step's \
                 keys ({keys_per_step} = --batch-size {batch_size}{per_step}): a larger \
                 method.queue_size or a smaller --batch-size"
            )))
        }
        Err(QueueFit::NotAMultiple {
            size,
            keys_per_step,
        }) => {
            return Err(usage(format!(
                "--batch-size {batch_size}: the queue of {size} keys must be a multiple of the \
                 keys enqueued per step ({keys_per_step} = the batch size{}); choose a batch \
                 size that divides {}",
                if config.symmetric {
                    " × 2, for the symmetric loss"
                } else {
                    ""
                },
                size / (keys_per_step / batch_size)
            )))
        }
    }
    let backbone = recipe.backbone_config();
    recipe.init(device, |d| {
        config.init(|d| backbone.init::<Train>(d), batch_size, d)
    })
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "moco_v1",
        summary: "MoCo v1 (He et al. 2020; MICO Tables 2-3 baseline): linear head, InfoNCE (tau 0.07), queue",
        run,
    },
    RecipeEntry {
        name: "moco_strength_curriculum",
        summary: "MICO Tables 2-3: MoCo v1 with colour strength x2 reached on 4 steps (--strength, --schedule)",
        run: strength_curriculum,
    },
    RecipeEntry {
        name: "auto_augment_self_paced",
        summary: "MICO 3.4: MoCo v1 with normalised AutoAugment (5x2 sub-policies, self-paced magnitudes)",
        run: auto_augment_self_paced,
    },
];
