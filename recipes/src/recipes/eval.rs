//! `eval`: kNN and linear evaluation of a saved checkpoint, on its own.
//!
//! ```text
//! recipe eval --run-dir runs/light_moco [--checkpoint runs/light_moco/checkpoints/epoch-0010]
//!             [--data DIR] [--probe-epochs 100] [--probe-lr 0.1]
//! ```
//!
//! The backbone and the data are read from the run's `config.json`; the backbone's weights come
//! from the checkpoint (the latest by default). Features of the train and test splits are
//! computed once with the frozen backbone (inference mode); the kNN monitor scores them at
//! `k = 20, T = 0.07` and `k = 200, T = 0.1`, and a linear classifier is trained on them (SGD,
//! cosine schedule) and scored top-1 / top-5.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use curriculum_ssl::eval::{extract_features, KnnMonitor, LinearProbeConfig};
use curriculum_ssl::train::{load_backbone, resolve_checkpoint, RunRecord};

use super::common::{self, Data, RecipeRun, Train};
use crate::backend::Inner;
use crate::usage;

/// Options of `recipe eval`.
#[derive(Parser, Debug)]
#[command(no_binary_name = true, name = "recipe", args_override_self = true)]
struct EvalArgs {
    /// The run directory (its config.json names the backbone and the data).
    #[arg(long)]
    run_dir: PathBuf,
    /// A checkpoint directory of the run (default: its newest valid one).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Data directory, instead of the run's (the same dataset).
    #[arg(long = "data-dir", alias = "data")]
    data: Option<PathBuf>,
    /// Epochs of the linear probe (0 skips it).
    #[arg(long, default_value_t = 100)]
    probe_epochs: usize,
    /// Learning rate of the linear probe.
    #[arg(long, default_value_t = 0.1)]
    probe_lr: f64,
}

/// Runs the evaluation. Every option is checked (the run's record, the checkpoint and its
/// checksums, the data directory, the probe's settings) before anything is computed.
pub fn run(args: &[String]) -> Result<()> {
    let args = EvalArgs::try_parse_from(args).map_err(crate::help_or_error)?;
    if args.probe_epochs > 0 && !(args.probe_lr.is_finite() && args.probe_lr > 0.0) {
        return Err(usage(format!(
            "--probe-lr {}: must be a finite number > 0",
            args.probe_lr
        )));
    }
    if !args.run_dir.is_dir() {
        return Err(usage(format!(
            "--run-dir {}: not a directory",
            args.run_dir.display()
        )));
    }
    let record = RunRecord::<RecipeRun>::read(&args.run_dir)?;
    let checkpoint = resolve_checkpoint(args.checkpoint.as_deref().unwrap_or(&args.run_dir))?;
    let source = common::DataSource {
        dataset: record.run.dataset,
        dir: args.data.or(record.run.data),
        image_size: record.run.image_size,
    };
    source.validate()?;
    let backbone = record.run.backbone;
    let probe = LinearProbeConfig::new()
        .with_epochs(args.probe_epochs.max(1))
        .with_lr(if args.probe_epochs > 0 {
            args.probe_lr
        } else {
            0.1
        });
    probe.validate()?;
    let data = source.load_splits(false)?;
    let device = Default::default();
    let channels = data.train.image_shape().2;
    let fresh = backbone
        .config(channels, record.run.stem)
        .init::<Inner>(&device);
    let model = load_backbone::<Inner, _>(&checkpoint, fresh, &device)?;
    println!("checkpoint {}", checkpoint.display());
    let normalize = record.augmentation.view1.normalize;
    let Data { train, test, .. } = data;
    let monitor = KnnMonitor::new(train.clone(), test.clone(), normalize.clone())?;
    for r in monitor.evaluate(&model, &device)? {
        println!(
            "kNN (k = {}, T = {}): top-1 {:.2}%, top-5 {:.2}%",
            r.k,
            r.temperature,
            100.0 * r.accuracy.top1,
            100.0 * r.accuracy.top5
        );
    }
    if args.probe_epochs > 0 {
        let train = extract_features(&model, &train, 512, normalize.as_ref(), &device)?;
        let test = extract_features(&model, &test, 512, normalize.as_ref(), &device)?;
        let probe = probe.fit::<Train>(&train, &test, &device)?;
        println!(
            "linear probe ({} epochs): test top-1 {:.2}%, top-5 {:.2}% (train top-1 {:.2}%)",
            args.probe_epochs,
            100.0 * probe.test.top1,
            100.0 * probe.test.top5,
            100.0 * probe.train.top1
        );
    }
    Ok(())
}
