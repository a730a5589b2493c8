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
use std::sync::Arc;

use super::common::raw_pixels_too_large;
use super::RecipeEntry;
use anyhow::Result;
use clap::{Parser, ValueEnum};
use super::common::Files;
use curriculum_ssl::data::ImageSet;
use curriculum_ssl::eval::{extract_features, KnnMonitor, LinearProbeConfig, ProbeOptimizer};
use curriculum_ssl::optim::LarsConfig;
use curriculum_ssl::train::DataFingerprint;

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
    /// Also train the probe on this fraction of the training labels (per class, at least one
    /// image of each; 0.01: SimCLR's 1 % protocol), scored on the whole test split.
    #[arg(long)]
    label_fraction: Option<f64>,
    /// The seed of the few-label subset (default: the run's seed).
    #[arg(long)]
    label_seed: Option<u64>,
    /// Evaluate the raw pixels instead of the checkpoint: the baseline a representation has
    /// to beat, measured the same way on the run's data (the row's checkpoint reads
    /// `raw-pixels`).
    #[arg(long)]
    raw_pixels: bool,
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
    let args: EvalArgs = super::common::parse_args(args)?;
    check_probe_options(&args)?;
    super::export::check_run_dir(&args.run_dir)?;
    let record = super::export::read_recipe_record(&args.run_dir)?;
    let trained_on = record.data.clone();
    let run_record = record.run;
    let data_given = args.data.clone();
    let source = common::DataSource {
        dir: args.data.or(run_record.data.clone()),
        knn_data: args.knn_data.or(run_record.knn_data.clone()),
        ..common::DataSource::of_run(&run_record)
    };
    check_evals_writable(&args.run_dir)?;
    source.validate()?;
    let (train, test, found) = labelled_sets(&source, &run_record)?;
    if let Some(found) = &found {
        check_same_data(trained_on.as_ref(), found, data_given.as_deref())?;
    }
    let probe = args.protocol.probe(
        train.len(),
        // `--probe-epochs 0` skips the full probe; the few-label one keeps the protocol's epochs.
        args.probe_epochs.filter(|&e| e > 0),
        args.probe_lr,
    );
    probe.validate()?;
    let probe_epochs = probe.epochs * usize::from(args.probe_epochs != Some(0));
    let device = crate::backend::device(args.device)?;
    let super::export::RunBackbone {
        model,
        record,
        checkpoint,
        input,
    } = super::export::load_run_backbone(&args.run_dir, args.checkpoint.as_deref(), &device)?;
    let normalize = record.task.augmentation.view1.normalize.clone();
    let few_labels = match args.label_fraction {
        Some(fraction) => {
            let seed = args.label_seed.unwrap_or(record.train.seed);
            Some((fraction, few_label_subset(&train, fraction, seed)?))
        }
        None => None,
    };
    let (train, test) = (train.set(), test);
    if let Some(gib) = raw_pixels_too_large(train.len(), input).filter(|_| args.raw_pixels) {
        return Err(usage(format!(
            "--raw-pixels: the bank of {} images would hold {gib:.1} GiB of pixels as features \
             (at most {} GiB)",
            train.len(),
            common::RAW_PIXELS_BYTES >> 30
        )));
    }
    let what = if args.raw_pixels {
        "raw-pixels".to_string()
    } else {
        checkpoint.display().to_string()
    };
    println!("checkpoint {what}");
    let split = Split {
        train,
        test,
        few_labels,
        normalize,
    };
    let mut row: Vec<(String, String)> = vec![
        ("checkpoint".into(), what),
        ("protocol".into(), common::value_name(args.protocol)),
    ];
    if args.raw_pixels {
        let pixels = curriculum_ssl::eval::RawPixels::new(input);
        row.extend(measure(
            &pixels,
            &split,
            &probe,
            probe_epochs,
            args.protocol,
            &device,
        )?);
    } else {
        row.extend(measure(
            &model,
            &split,
            &probe,
            probe_epochs,
            args.protocol,
            &device,
        )?);
    }
    let path = args.run_dir.join(EVALS);
    append_row(&path, &row)
        .map_err(|e| anyhow::anyhow!("could not write {}: {e}", path.display()))?;
    println!("results appended to {}", path.display());
    Ok(())
}

/// The probe's options that no other check reads: a learning rate that is a finite number > 0,
/// a label fraction in (0, 1].
fn check_probe_options(args: &EvalArgs) -> Result<()> {
    if let Some(lr) = args.probe_lr.filter(|lr| !(lr.is_finite() && *lr > 0.0)) {
        return Err(usage(format!(
            "--probe-lr {}: must be a finite number > 0",
            lr
        )));
    }
    if let Some(f) = args.label_fraction.filter(|f| !(*f > 0.0 && *f <= 1.0)) {
        return Err(usage(format!("--label-fraction {f}: must lie in (0, 1]")));
    }
    Ok(())
}

/// The few-label subset of `train`: `fraction` of its images, balanced over the classes, drawn
/// with `seed` (`curriculum_ssl::eval::few_label_indices`), as a set of its own.
fn few_label_subset(train: &LabelledSet, fraction: f64, seed: u64) -> Result<Arc<dyn ImageSet>> {
    let labels = train.labels().expect("labelled_sets checked the labels");
    let indices = curriculum_ssl::eval::few_label_indices(&labels, fraction, seed)?;
    Ok(match train {
        LabelledSet::Memory(array) => Arc::new(array.select(&indices)?),
        LabelledSet::Stream(stream, _) => {
            let (streamed, files) = &**stream;
            Arc::new(streamed.eval_set(&files.subset(&indices))?)
        }
    })
}

/// What an evaluation scores on: the run's labelled splits, the few-label subset when asked
/// for (with its fraction), and the views' normalisation.
struct Split {
    train: Arc<dyn ImageSet>,
    test: Arc<dyn ImageSet>,
    few_labels: Option<(f64, Arc<dyn ImageSet>)>,
    normalize: Option<curriculum_ssl::augment::normalize::Normalize>,
}

/// The labelled training split of an evaluation: decoded in memory, or (for a run that
/// streamed its files) the files, read centre-cut as the run's kNN monitor read them.
enum LabelledSet {
    Memory(curriculum_ssl::data::ImageArray),
    /// The stream's settings and its files, and the set that reads them.
    Stream(Box<(common::Streamed, Files)>, Arc<dyn ImageSet>),
}

impl LabelledSet {
    fn len(&self) -> usize {
        self.set().len()
    }

    fn labels(&self) -> Option<Vec<u16>> {
        self.set().labels().map(<[u16]>::to_vec)
    }

    fn set(&self) -> Arc<dyn ImageSet> {
        match self {
            Self::Memory(array) => Arc::new(array.clone()),
            Self::Stream(_, set) => Arc::clone(set),
        }
    }
}

/// The labelled train and test splits `recipe eval` scores on: as the run read them, streamed
/// from their files (centre-cut at the run's size) when it streamed, else decoded in memory.
fn labelled_sets(
    source: &common::DataSource,
    run: &common::RecipeRun,
) -> Result<(LabelledSet, Arc<dyn ImageSet>, Option<DataFingerprint>)> {
    if !run.stream {
        let data = source.load_splits(false)?;
        // What the run's fingerprint is of: the images it trained on. Not checked: STL-10's
        // unlabeled split, which an evaluation does not read (2.8 GB), and a run evaluated with
        // other `--knn-data` than it trained with (its images are then read without their
        // labels, which the run's fingerprint holds).
        let found = match source.dataset {
            common::DatasetChoice::Stl10 => None,
            _ if source.knn_data != run.knn_data => None,
            _ => Some(DataFingerprint::of_images(
                data.pretrain.as_ref().unwrap_or(&data.train),
            )),
        };
        let (train, test) = data.labelled("recipe eval")?;
        return Ok((
            LabelledSet::Memory(train.clone()),
            Arc::new(test.clone()),
            found,
        ));
    }
    let source = common::DataSource {
        image_size: source
            .image_size
            .or(run.input_shape.map(|[side, _, _]| side)),
        ..source.clone()
    };
    let common::TrainData::Stream(streamed) = source.load_for_training(Some(true))? else {
        unreachable!("asked to stream a folder of image files")
    };
    let Some((bank, queries)) = streamed.monitor.clone() else {
        return Err(usage(
            "recipe eval needs labelled images: this data has none (--dataset folder: give \
             --knn-data with a train/ and a val/ tree of class folders; image-folder: add val/; \
             shards: a val/ of labelled shards beside train/, as `recipe pack` writes)",
        ));
    };
    let test: Arc<dyn ImageSet> = Arc::new(streamed.eval_set(&queries)?);
    let train: Arc<dyn ImageSet> = Arc::new(streamed.eval_set(&bank)?);
    let side = streamed.side;
    let found = Some(DataFingerprint::of_files(
        &streamed.files,
        streamed.files.root(),
        [side, side, 3],
    ));
    Ok((
        LabelledSet::Stream(Box::new((streamed, bank)), train),
        test,
        found,
    ))
}

/// Refuses data that is not what the run trained on (its record's fingerprint, where it has
/// one): `--data-dir` is for the run's dataset at another path (a copy has the same
/// fingerprint), and a dataset changed in place since is not it either. (Another folder was
/// evaluated, exit 0, and its row in evals.csv did not say so.)
fn check_same_data(
    trained_on: Option<&DataFingerprint>,
    found: &DataFingerprint,
    data_given: Option<&std::path::Path>,
) -> Result<()> {
    match trained_on {
        Some(then) if then != found => Err(usage(match data_given {
            Some(dir) => format!(
                "--data-dir {}: not the data the run trained on ({then} then, {found} here); \
                 --data-dir is for the run's own data moved to another path",
                dir.display()
            ),
            None => format!(
                "the run's data changed since it trained ({then} then, {found} now); evaluate \
                 on the data it trained on"
            ),
        })),
        _ => Ok(()),
    }
}

/// The kNN monitor's accuracies, the linear probe's (unless `probe_epochs` is 0) and the
/// few-label probe's of the frozen `model`, printed and returned as the columns of a row of
/// [`EVALS`] (percent, two decimals; empty where not measured).
fn measure<M: curriculum_ssl_models::Backbone<crate::backend::Inner>>(
    model: &M,
    split: &Split,
    probe: &LinearProbeConfig,
    probe_epochs: usize,
    protocol: Protocol,
    device: &crate::backend::Device,
) -> Result<Vec<(String, String)>> {
    let percent = |x: f64| format!("{:.2}", 100.0 * x);
    let mut row: Vec<(String, String)> = Vec::new();
    let monitor = KnnMonitor::new(
        split.train.clone(),
        split.test.clone(),
        split.normalize.clone(),
    )?;
    for r in monitor.evaluate(model, device)? {
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
    let normalize = split.normalize.as_ref();
    let features = |data: &Arc<dyn ImageSet>| extract_features(model, &**data, 512, normalize, device);
    let test = (probe_epochs > 0 || split.few_labels.is_some())
        .then(|| features(&split.test))
        .transpose()?;
    let (mut top1, mut top5) = (String::new(), String::new());
    if let (true, Some(test)) = (probe_epochs > 0, &test) {
        let fitted = probe.fit::<Train>(&features(&split.train)?, test, device)?;
        println!(
            "linear probe ({:?}, {} epochs, batch {}, lr {}): test top-1 {:.2}%, top-5 {:.2}% \
             (train top-1 {:.2}%)",
            protocol,
            probe_epochs,
            probe.batch_size,
            probe.lr,
            100.0 * fitted.test.top1,
            100.0 * fitted.test.top5,
            100.0 * fitted.train.top1
        );
        (top1, top5) = (percent(fitted.test.top1), percent(fitted.test.top5));
    }
    row.push(("probe_epochs".into(), probe_epochs.to_string()));
    row.push(("probe_top1".into(), top1));
    row.push(("probe_top5".into(), top5));
    let (mut fraction, mut top1, mut top5) = (String::new(), String::new(), String::new());
    if let (Some((f, few)), Some(test)) = (&split.few_labels, &test) {
        // The protocol's probe, its epochs passes over the few labelled images.
        let fitted = probe.fit::<Train>(&features(few)?, test, device)?;
        println!(
            "few-label probe ({} labelled images, {:.4} of the training split): test top-1 \
             {:.2}%, top-5 {:.2}%",
            few.len(),
            f,
            100.0 * fitted.test.top1,
            100.0 * fitted.test.top5
        );
        (fraction, top1, top5) = (
            f.to_string(),
            percent(fitted.test.top1),
            percent(fitted.test.top5),
        );
    }
    row.push(("label_fraction".into(), fraction));
    row.push(("few_label_top1".into(), top1));
    row.push(("few_label_top5".into(), top5));
    Ok(row)
}

/// The file of a run directory that `recipe eval` appends its results to.
pub const EVALS: &str = "evals.csv";

/// Refuses a run directory where [`EVALS`] cannot be written (a read-only run, a read-only
/// `evals.csv`): said before anything is computed, not after the probe has trained.
fn check_evals_writable(run_dir: &std::path::Path) -> Result<()> {
    let label = format!("--run-dir {}", run_dir.display());
    crate::run_files::check_can_write_in(run_dir).map_err(|(dir, why)| {
        usage(format!(
            "{label}: cannot write in {}: {why} (eval appends its results to its {EVALS})",
            dir.display()
        ))
    })?;
    let path = run_dir.join(EVALS);
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| {
                usage(format!(
                    "{label}: cannot write {}: {}",
                    path.display(),
                    curriculum_ssl::train::describe_io(&e)
                ))
            })?;
        // Its columns, before anything is computed (they were checked after the evaluation).
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            let header = csv::Reader::from_path(&path)
                .and_then(|mut r| Ok(r.headers()?.iter().map(str::to_string).collect::<Vec<_>>()))
                .map_err(|e| usage(format!("{}: not a CSV file ({e})", path.display())))?;
            check_evals_header(&header).map_err(|e| usage(format!("{}: {e}", path.display())))?;
        }
    }
    Ok(())
}

/// Appends `row` to the CSV file `path` (the `csv` crate quotes a checkpoint path that holds a
/// comma or a quote), writing the column names first when the file is new or empty. Rows name
/// their columns: a row with columns the file lacks (the few-label ones of a later version, or
/// a kNN `k` capped at another bank's size: `--knn-data`, `--data-dir`) rewrites the file with
/// them added after its own, its earlier rows' new cells empty; a column the row lacks is
/// empty in it. (A row of other kNN columns was refused after the evaluation had run, exit 1.)
fn append_row(path: &std::path::Path, row: &[(String, String)]) -> Result<()> {
    let names: Vec<&str> = row.iter().map(|(k, _)| k.as_str()).collect();
    let new = std::fs::metadata(path)
        .map(|m| m.len() == 0)
        .unwrap_or(true);
    let mut header: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    if !new {
        let mut reader = csv::Reader::from_path(path)?;
        let held: Vec<String> = reader.headers()?.iter().map(str::to_string).collect();
        check_evals_header(&held)?;
        header = held.clone();
        for name in &names {
            if !header.iter().any(|h| h == name) {
                header.push(name.to_string());
            }
        }
        if header != held {
            let mut rows = Vec::new();
            for record in reader.records() {
                let mut record: Vec<String> = record?.iter().map(str::to_string).collect();
                record.resize(header.len(), String::new());
                rows.push(record);
            }
            let mut out = csv::Writer::from_writer(Vec::new());
            out.write_record(&header)?;
            for r in rows {
                out.write_record(r)?;
            }
            let bytes = out.into_inner().map_err(|e| e.into_error())?;
            curriculum_ssl::train::write_atomic(path, &bytes)?;
        }
    }
    let cells: Vec<&str> = header
        .iter()
        .map(|h| row.iter().find(|(k, _)| k == h).map_or("", |(_, v)| v))
        .collect();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut out = csv::Writer::from_writer(file);
    if new {
        out.write_record(&header)?;
    }
    out.write_record(&cells)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

/// Refuses an evaluations file whose first column is not `checkpoint`: another file written
/// over it, whose rows an evaluation's would be mixed with.
fn check_evals_header(header: &[String]) -> Result<()> {
    if header.first().map(String::as_str) == Some("checkpoint") {
        return Ok(());
    }
    Err(usage(format!(
        "its columns ({}) are not those of this version's evaluations (the first is \
         `checkpoint`); move it away to keep it, and evaluate again",
        header.join(", ")
    )))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "eval",
    summary: "kNN and linear evaluation of a saved checkpoint (--run-dir DIR)",
    run,
}];

#[cfg(test)]
mod tests {
    use super::append_row;

    fn row(values: &[(&str, &str)]) -> Vec<(String, String)> {
        values
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A file of an earlier version (without the few-label columns) gains them, its rows kept
    /// with empty cells; a row of other kNN columns (a bank of another size) adds its own, the
    /// cells it lacks empty; a file of other columns is refused, not appended to.
    #[test]
    fn an_older_evals_file_gains_the_new_columns_and_keeps_its_rows() {
        let dir = std::env::temp_dir().join(format!("evals-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("evals.csv");
        std::fs::write(&path, "checkpoint,probe_top1\nc1,80.00\n").unwrap();
        append_row(
            &path,
            &row(&[
                ("checkpoint", "c2"),
                ("probe_top1", "81.00"),
                ("few_label_top1", "60.00"),
            ]),
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "checkpoint,probe_top1,few_label_top1\nc1,80.00,\nc2,81.00,60.00\n"
        );
        append_row(
            &path,
            &row(&[
                ("checkpoint", "c3"),
                ("probe_top1", "82.00"),
                ("knn16_top1", "0.5"),
            ]),
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "checkpoint,probe_top1,few_label_top1,knn16_top1\nc1,80.00,,\nc2,81.00,60.00,\n\
             c3,82.00,,0.5\n"
        );
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        let e = append_row(&path, &row(&[("checkpoint", "c4")])).unwrap_err();
        assert!(
            e.to_string().contains("are not those of this version"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
