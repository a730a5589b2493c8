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

use anyhow::{Context, Result};
use clap::Parser;
use curriculum_ssl::eval::{extract_features, KnnMonitor, LinearProbeConfig};
use curriculum_ssl::train::{load_backbone, resolve_checkpoint};

use super::common::{self, BackboneChoice, Data, Settings, Train};
use crate::backend::Inner;

/// Options of `recipe eval`.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct EvalArgs {
    /// The run directory (its config.json names the backbone and the data).
    #[arg(long)]
    run_dir: PathBuf,
    /// A checkpoint directory of the run (default: its latest).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Data directory, instead of the run's.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Epochs of the linear probe (0 skips it).
    #[arg(long, default_value_t = 100)]
    probe_epochs: usize,
    /// Learning rate of the linear probe.
    #[arg(long, default_value_t = 0.1)]
    probe_lr: f64,
}

/// Runs the evaluation.
pub fn run(args: &[String]) -> Result<()> {
    let args = EvalArgs::try_parse_from(args).map_err(crate::help_or_error)?;
    let config_path = args.run_dir.join("config.json");
    let text = std::fs::read(&config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    let config: serde_json::Value = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not JSON", config_path.display()))?;
    let settings = &config["run"]["settings"];
    let backbone: BackboneChoice = serde_json::from_value(settings["backbone"].clone())
        .with_context(|| format!("{}: no run.settings.backbone", config_path.display()))?;
    let data_dir: Option<PathBuf> = match args.data {
        Some(d) => Some(d),
        None => serde_json::from_value(settings["data"].clone()).unwrap_or(None),
    };
    let data = common::load_data(&Settings {
        recipe: "eval",
        epochs: 0,
        batch_size: 0,
        lr: 0.0,
        warmup_epochs: 0,
        backbone,
        seed: 0,
        data: data_dir,
    })?;
    let checkpoint = resolve_checkpoint(args.checkpoint.as_deref().unwrap_or(&args.run_dir))?;
    let device = Default::default();
    let channels = data.train.image_shape().2;
    let fresh = backbone.config(channels).init::<Inner>(&device);
    let model = load_backbone::<Inner, _>(&checkpoint, fresh, &device)?;
    println!("checkpoint {}", checkpoint.display());
    let normalize =
        serde_json::from_value(config["run"]["augmentation"]["view1"]["normalize"].clone())
            .unwrap_or(None);
    let Data { train, test } = data;
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
        let probe = LinearProbeConfig::new()
            .with_epochs(args.probe_epochs)
            .with_lr(args.probe_lr)
            .fit::<Train>(&train, &test, &device)?;
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
