//! MoCo v2 with a curriculum of your own: a mixup of the positive pair whose share λ follows a
//! function you write ([`Scheduler::custom`]), here a smooth step from 0.8 (nearly identical
//! views: easy) down to 0.2 (hard) across the middle of training. The scheduled λ of every step
//! is a column of `steps.csv`.
//!
//! ```text
//! cargo run --release --example moco_custom_curriculum
//! ```

use burn::backend::{Autodiff, Flex};
use curriculum_ssl::curriculum::{MixupCurriculum, MixupSchedule, Scheduler};
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::{Loader, LoaderConfig};
use curriculum_ssl::method::{init_method, MocoConfig, Progress};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::train::{TrainConfig, Trainer};
use curriculum_ssl_models::{BlockKind, ResNetConfig, Stem};

type Train = Autodiff<Flex>;

/// λ from 0.8 to 0.2 along a logistic curve centred at half of the run.
fn easy_to_hard(p: Progress) -> f64 {
    let x = p.step as f64 / p.total_steps.max(1) as f64;
    0.2 + 0.6 / (1.0 + (12.0 * (x - 0.5)).exp())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let train = load_or_embedded(None, Split::Train)?.select(&(0..1024).collect::<Vec<_>>())?;
    let backbone = ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_base_width(8)
        .with_in_channels(1)
        .with_stem(Stem::ImageNet);
    let config = MocoConfig::moco_v2().with_queue_size(1024);
    let batch_size = 128;
    let method = init_method::<Train, _, _>(&device, 0, |d| {
        config.init(|d| backbone.init(d), batch_size, d)
    })?;
    let schedule = MixupSchedule::with_scheduler(
        MixupCurriculum::Share,
        Scheduler::custom("logistic 0.8 -> 0.2", easy_to_hard),
    );
    let augmenter = PipelineConfig::moco_v2(28, 1)
        .init(1)?
        .with_mixup_schedule(schedule);
    let loader = Loader::new(
        train,
        "embedded subset",
        LoaderConfig {
            batch_size,
            ..LoaderConfig::default()
        },
    )?;
    let run_dir = std::env::temp_dir().join(format!("moco-curriculum-{}", std::process::id()));
    let mut trainer = Trainer::builder(
        method,
        SgdConfig::new()
            .with_weight_decay(1e-4)
            .init::<Train, _>()?,
        augmenter,
        loader,
    )
    .config(TrainConfig::new().with_epochs(2).with_lr(0.06))
    .run_dir(&run_dir)
    // On the CPU backend: augment the next batch while this one trains (off on a GPU).
    .augment_ahead(true)
    .build(&device)?;
    let summary = trainer.fit()?;
    for step in summary.steps.iter().step_by(4) {
        let lambda = step
            .stats
            .iter()
            .find(|(name, _)| name == "mixup_lambda")
            .map_or(f64::NAN, |(_, v)| *v);
        println!(
            "step {:>2}: loss {:.4}, lambda {lambda:.3}",
            step.step + 1,
            step.loss
        );
    }
    println!("per-step values: {}", run_dir.join("steps.csv").display());
    Ok(())
}
