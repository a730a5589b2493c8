//! `eval`: kNN and linear evaluation of a saved checkpoint, on its own.
//!
//! ```text
//! recipe eval --run-dir runs/light_moco [--checkpoint runs/light_moco/checkpoints/epoch-0010]
//!             [--data-dir DIR] [--protocol sgd|light-moco] [--probe-epochs N] [--probe-lr LR]
//! ```
//!
//! The backbone and the data are read from the run's `config.json`; the backbone's weights come
//! from the checkpoint (the latest by default). Features of the train and test splits are
//! computed once with the frozen backbone (inference mode); the kNN monitor scores them at
//! `k = 20, T = 0.07` and `k = 200, T = 0.1`, and a linear classifier is trained on them
//! (cosine schedule) and scored top-1 / top-5, under one of two protocols:
//!
//! - `sgd` (default): SGD with momentum 0.9, lr 0.1, batch 256, 100 epochs.
//! - `light-moco`: Light-MoCo's linear evaluation (Lin et al. 2022, §4.1): LARS, lr 0.1 at
//!   batch 4096, 90 epochs. On a dataset smaller than 4096 images the batch is the dataset and
//!   the learning rate is scaled linearly with it (lr = 0.1 · batch / 4096).
//!
//! Each evaluation appends a row to the run directory's `evals.csv` ([`EVALS`]): the checkpoint,
//! the protocol, each kNN's top-1 / top-5 and the probe's, so that evaluations of a run (other
//! checkpoints, protocols, probe lengths) are kept beside its training logs.

use std::path::PathBuf;

use super::RecipeEntry;
use anyhow::Result;
use clap::{Parser, ValueEnum};
use curriculum_ssl::eval::linear_probe::ProbeOptimizer;
use curriculum_ssl::eval::{extract_features, KnnMonitor, LinearProbeConfig};
use curriculum_ssl::optim::LarsConfig;

use super::common::{self, Train};
use crate::usage::usage;

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
    /// The labelled train/ + val/ tree to evaluate on, instead of the run's --knn-data (a run
    /// on a folder without labels needs one of the two).
    #[arg(long)]
    knn_data: Option<PathBuf>,
    /// The linear-evaluation protocol.
    #[arg(long, value_enum, default_value = "sgd")]
    protocol: Protocol,
    /// Epochs of the linear probe, 0 skips it (default: the protocol's, 100 or 90).
    #[arg(long)]
    probe_epochs: Option<usize>,
    /// Learning rate of the linear probe (default: the protocol's).
    #[arg(long)]
    probe_lr: Option<f64>,
    /// The device to evaluate on (as the training recipes' --device).
    #[arg(long)]
    device: Option<usize>,
}

/// How the linear classifier is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Protocol {
    /// SGD, momentum 0.9, lr 0.1, batch 256, 100 epochs.
    Sgd,
    /// Light-MoCo §4.1: LARS, lr 0.1 at batch 4096 (scaled to smaller data), 90 epochs.
    LightMoco,
}

impl Protocol {
    /// The probe for a training split of `n` images, with the command line's overrides.
    fn probe(self, n: usize, epochs: Option<usize>, lr: Option<f64>) -> LinearProbeConfig {
        match self {
            Self::Sgd => LinearProbeConfig::new()
                .with_epochs(epochs.unwrap_or(100))
                .with_lr(lr.unwrap_or(0.1)),
            Self::LightMoco => {
                let batch = n.clamp(1, 4096);
                LinearProbeConfig::new()
                    .with_epochs(epochs.unwrap_or(90))
                    .with_batch_size(batch)
                    .with_lr(lr.unwrap_or(0.1 * batch as f64 / 4096.0))
                    .with_optimizer(ProbeOptimizer::Lars(LarsConfig::new()))
            }
        }
    }
}

/// Runs the evaluation. Every option is checked (the run's record, the checkpoint and its
/// checksums, the data directory, the probe's settings) before anything is computed.
pub fn run(args: &[String]) -> Result<()> {
    let args = EvalArgs::try_parse_from(args).map_err(crate::usage::help_or_error)?;
    if let Some(lr) = args.probe_lr.filter(|lr| !(lr.is_finite() && *lr > 0.0)) {
        return Err(usage(format!(
            "--probe-lr {}: must be a finite number > 0",
            lr
        )));
    }
    super::export::check_run_dir(&args.run_dir)?;
    let source = {
        let record = super::export::read_recipe_record(&args.run_dir)?;
        common::DataSource {
            dir: args.data.or(record.run.data.clone()),
            knn_data: args.knn_data.or(record.run.knn_data.clone()),
            ..common::DataSource::of_run(&record.run)
        }
    };
    source.validate()?;
    let data = source.load_splits(false)?;
    let probe = args.protocol.probe(
        curriculum_ssl::data::Dataset::len(&data.train),
        args.probe_epochs.map(|e| e.max(1)),
        args.probe_lr,
    );
    probe.validate()?;
    let probe_epochs = probe.epochs * usize::from(args.probe_epochs != Some(0));
    let device = crate::backend::device(args.device)?;
    let super::export::RunBackbone {
        model,
        record,
        checkpoint,
        ..
    } = super::export::load_run_backbone(&args.run_dir, args.checkpoint.as_deref(), &device)?;
    println!("checkpoint {}", checkpoint.display());
    let normalize = record.task.augmentation.view1.normalize;
    let (train, test) = data.labelled("recipe eval")?;
    let (train, test) = (train.clone(), test.clone());
    let monitor = KnnMonitor::new(train.clone(), test.clone(), normalize.clone())?;
    let protocol = common::value_name(args.protocol);
    let mut row: Vec<(String, String)> = vec![
        ("checkpoint".into(), checkpoint.display().to_string()),
        ("protocol".into(), protocol),
    ];
    let percent = |x: f64| format!("{:.2}", 100.0 * x);
    for r in monitor.evaluate(&model, &device)? {
        println!(
            "kNN (k = {}, T = {}): top-1 {:.2}%, top-5 {:.2}%",
            r.k,
            r.temperature,
            100.0 * r.accuracy.top1,
            100.0 * r.accuracy.top5
        );
        row.push((format!("knn_k{}_top1", r.k), percent(r.accuracy.top1)));
        row.push((format!("knn_k{}_top5", r.k), percent(r.accuracy.top5)));
    }
    let mut probe_result = None;
    if probe_epochs > 0 {
        let train = extract_features(&model, &train, 512, normalize.as_ref(), &device)?;
        let test = extract_features(&model, &test, 512, normalize.as_ref(), &device)?;
        let probe_config = probe.clone();
        let probe = probe.fit::<Train>(&train, &test, &device)?;
        probe_result = Some(probe);
        println!(
            "linear probe ({:?}, {} epochs, batch {}, lr {}): test top-1 {:.2}%, top-5 {:.2}% \
             (train top-1 {:.2}%)",
            args.protocol,
            probe_epochs,
            probe_config.batch_size,
            probe_config.lr,
            100.0 * probe.test.top1,
            100.0 * probe.test.top5,
            100.0 * probe.train.top1
        );
    }
    let (probe_top1, probe_top5) = match &probe_result {
        Some(p) => (percent(p.test.top1), percent(p.test.top5)),
        None => (String::new(), String::new()),
    };
    row.push(("probe_epochs".into(), probe_epochs.to_string()));
    row.push(("probe_top1".into(), probe_top1));
    row.push(("probe_top5".into(), probe_top5));
    let path = args.run_dir.join(EVALS);
    append_row(&path, &row)
        .map_err(|e| anyhow::anyhow!("could not write {}: {e}", path.display()))?;
    println!("results appended to {}", path.display());
    Ok(())
}

/// The file of a run directory that `recipe eval` appends its results to.
pub const EVALS: &str = "evals.csv";

/// Appends `row` to the CSV file `path` (the `csv` crate quotes a checkpoint path that holds a
/// comma or a quote), writing the column names first when the file is new or empty.
fn append_row(path: &std::path::Path, row: &[(String, String)]) -> Result<()> {
    let new = std::fs::metadata(path).map(|m| m.len() == 0).unwrap_or(true);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut out = csv::Writer::from_writer(file);
    if new {
        out.write_record(row.iter().map(|(k, _)| k))?;
    }
    out.write_record(row.iter().map(|(_, v)| v))?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "eval",
        summary: "kNN and linear evaluation of a saved checkpoint (--run-dir DIR)",
        run,
    },
];
