//! `export` and `embed`: a trained backbone out of a run directory.
//!
//! ```text
//! recipe export --run-dir runs/simclr [--checkpoint DIR] [--out backbone.safetensors]
//! recipe embed  --run-dir runs/simclr [--checkpoint DIR] [--images DIR | --split train|test]
//!               [--out features.npy]
//! ```
//!
//! `export` writes the backbone as safetensors in PyTorch's layout: under torchvision's (and
//! timm's) `resnet*` key names for the ResNets, torchvision's for the EfficientNets and
//! MobileNet-V3s, and timm's `VisionTransformer` names for the ViTs, so that `model.load_state_dict(load_file(path), strict=False)` fills all but the
//! classifier; the other backbones keep their burn module paths. The header's metadata says what
//! the tensors are (recipe, backbone, stem, input size and channels, the normalisation the
//! features expect, the key names). ONNX: burn 0.21 cannot write ONNX
//! (<https://github.com/tracel-ai/burn/issues/918>); `scripts/safetensors_to_onnx.py` makes one
//! from the export through torchvision / timm.
//!
//! `embed` writes one feature vector per image as a float32 NumPy array `[N, D]` (`.npy`, read by
//! `numpy.load`), and beside it a CSV of the rows (`index,file,label`): the files of an
//! `--images` folder (flat or nested, resized and centre-cropped to the run's input size), or the
//! images of the run's own data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::RecipeEntry;
use anyhow::{Context, Result};
use burn::module::Module;
use clap::{Parser, ValueEnum};
use curriculum_ssl::data::image_folder::{self, ImageFolderOptions};
use curriculum_ssl::data::stream::ImageSource;
use curriculum_ssl::data::ImageSet;
use curriculum_ssl::eval::extract_features;
use curriculum_ssl::train::{load_backbone, resolve_checkpoint, RunRecord};
use curriculum_ssl_models::{AnyBackbone, AsVit, Backbone, ExportNames};

use super::common::{self, value_name, Device, RecipeRun};
use crate::backend::Inner;
use crate::run_files;
use crate::usage::usage;

/// The trained backbone of a run, with what it was trained on.
pub struct RunBackbone {
    /// The backbone, with the checkpoint's weights.
    pub model: AnyBackbone<Inner>,
    /// The run's record (config.json).
    pub record: RunRecord<RecipeRun>,
    /// The checkpoint it was read from.
    pub checkpoint: PathBuf,
    /// `(height, width, channels)` of the images it was trained on.
    pub input: (usize, usize, usize),
}

/// Reads the backbone of the run in `run_dir` from `checkpoint` (default: the run's newest
/// valid one), built as the run's record says.
///
/// # Errors
/// A directory that holds no run, a missing or damaged checkpoint, data that can no longer be
/// read (runs recorded before the input shape was, whose shape is read off the data).
pub fn load_run_backbone(
    run_dir: &Path,
    checkpoint: Option<&Path>,
    device: &Device,
) -> Result<RunBackbone> {
    check_run_dir(run_dir)?;
    let record = read_recipe_record(run_dir)?;
    let checkpoint = resolve_checkpoint(checkpoint.unwrap_or(run_dir))?;
    let input = match record.run.input_shape {
        Some([h, w, c]) => (h, w, c),
        None => common::DataSource::of_run(&record.run)
            .load_splits(false)
            .context("reading the run's data for its image size (recorded by newer runs)")?
            .shape(),
    };
    let config = record
        .run
        .backbone
        .config(input.2, input.0, record.run.stem, record.run.grid());
    let fresh = common::with_vit_pool(config, record.run.vit_pool).init::<Inner>(device);
    let model = load_backbone::<Inner, _>(&checkpoint, fresh, device)?;
    Ok(RunBackbone {
        model,
        record,
        checkpoint,
        input,
    })
}

/// The record of a self-supervised recipe's run; a supervised run (`spl_advise`, `spld`,
/// `random_sampling`) is named as such.
///
/// # Errors
/// No run record, or the record of a supervised run.
pub(crate) fn read_recipe_record(run_dir: &Path) -> Result<RunRecord<RecipeRun>> {
    let raw: RunRecord<serde_json::Value, serde_json::Value> = RunRecord::read(run_dir)?;
    if raw.task.get("supervised").is_some() || raw.run.get("selection").is_some() {
        return Err(usage(format!(
            "{}: a supervised run ({}): eval, export and embed read the backbones of \
             self-supervised runs; its test accuracy is in its epochs.csv",
            run_dir.display(),
            raw.run
                .get("recipe")
                .and_then(|r| r.as_str())
                .unwrap_or("spl_advise")
        )));
    }
    Ok(RunRecord::<RecipeRun>::read(run_dir)?)
}

/// Refuses a --run-dir that is not a directory.
pub(crate) fn check_run_dir(run_dir: &Path) -> Result<()> {
    if !run_dir.is_dir() {
        return Err(usage(format!(
            "--run-dir {}: not a directory",
            run_dir.display()
        )));
    }
    Ok(())
}

/// Options of `recipe export`.
#[derive(Parser, Debug)]
#[command(
    no_binary_name = true,
    name = "recipe export",
    args_override_self = true
)]
struct ExportArgs {
    /// The run directory.
    #[arg(long)]
    run_dir: PathBuf,
    /// A checkpoint directory of the run (default: its newest valid one).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// The file to write (default: RUN_DIR/backbone.safetensors).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs `recipe export`.
pub fn export(args: &[String]) -> Result<()> {
    let args: ExportArgs = super::common::parse_args(args)?;
    check_run_dir(&args.run_dir)?;
    let out = args
        .out
        .unwrap_or_else(|| args.run_dir.join("backbone.safetensors"));
    check_out(&out, "safetensors", &args.run_dir)?;
    let device = crate::backend::device(None)?;
    let run = load_run_backbone(&args.run_dir, args.checkpoint.as_deref(), &device)?;
    let normalize = run.record.task.augmentation.view1.normalize.clone();
    let (h, w, c) = run.input;
    let mut metadata = vec![
        ("format".to_string(), "curriculum-ssl backbone".to_string()),
        ("recipe".to_string(), run.record.run.recipe.clone()),
        ("backbone".to_string(), run.record.run.backbone.to_string()),
        ("input_size".to_string(), format!("{h}x{w}")),
        ("in_chans".to_string(), c.to_string()),
        (
            "feature_dim".to_string(),
            run.model.feature_dim().to_string(),
        ),
        (
            "checkpoint".to_string(),
            run.checkpoint.display().to_string(),
        ),
    ];
    if let Some(stem) = run.record.run.stem.or_else(|| {
        run.record
            .run
            .backbone
            .is_resnet()
            .then_some(run.record.run.backbone.default_stem())
    }) {
        metadata.push(("stem".to_string(), value_name(stem)));
        metadata.push(("pooled_grid".to_string(), run.record.run.grid().to_string()));
    }
    if let Some(vit) = run.model.as_vit() {
        // The heads cannot be read from the weights' shapes (ViT-Micro: 3 heads of 32).
        let heads = vit.blocks.first().map_or(1, |b| b.attn.num_heads);
        metadata.push(("num_heads".to_string(), heads.to_string()));
    }
    if !run.record.run.vit_pool.is_token() {
        // The features are the patch tokens' mean without the class token (AIM's runs):
        // scripts/safetensors_to_torch.py builds timm's ViT to match.
        let pool = format!("{:?}", run.record.run.vit_pool);
        metadata.push(("vit_pool".to_string(), pool));
    }
    if let Some(n) = &normalize {
        metadata.push(("mean".to_string(), serde_json::to_string(&n.mean)?));
        metadata.push(("std".to_string(), serde_json::to_string(&n.std)?));
    }
    let model = run.model;
    metadata.push((
        "key_names".to_string(),
        key_names(model.export_names()).to_string(),
    ));
    // Written beside the target and renamed over it: an export that fails (a full disk) leaves
    // the previous file whole, and a link at the target is replaced, not written through.
    let mut saved = None;
    run_files::write_replacing(&out, |tmp| {
        saved = Some(
            model
                .save_safetensors(&metadata, tmp)
                .map_err(|e| match e {
                    curriculum_ssl_models::ModelError::WeightWrite { message, .. } => {
                        anyhow::anyhow!("cannot write weights to {}: {message}", out.display())
                    }
                    e => e.into(),
                })?,
        );
        Ok(())
    })?;
    let (names, keys) = saved.expect("written");
    println!(
        "{} tensors ({} parameters) under {} key names: {}",
        keys.len(),
        model.num_params(),
        key_names(names),
        out.display()
    );
    Ok(())
}

/// How the header names the key convention.
fn key_names(names: ExportNames) -> &'static str {
    match names {
        ExportNames::TorchvisionResNet => "torchvision-resnet",
        ExportNames::TorchvisionEfficientNet => "torchvision-efficientnet",
        ExportNames::TorchvisionMobileNetV3 => "torchvision-mobilenet-v3",
        ExportNames::TimmVit => "timm-vit",
        ExportNames::Burn => "burn",
    }
}

/// Refuses an output path without the expected extension, onto a folder, in a missing or
/// unwritable directory, or onto the files of a run (`run_dir`'s or any run directory's,
/// through a link too): said before anything is computed.
fn check_out(out: &Path, extension: &str, run_dir: &Path) -> Result<()> {
    if out.extension().and_then(|e| e.to_str()) != Some(extension) {
        return Err(usage(format!(
            "--out {}: must end in .{extension}",
            out.display()
        )));
    }
    let label = format!("--out {}", out.display());
    check_file_target(out, &label, run_dir)?;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(usage(format!("{label}: no directory {}", parent.display())));
    }
    // Can a file be written there? (Said now, not after the features are computed.)
    run_files::check_can_write_in(parent)
        .map_err(|(dir, why)| usage(format!("{label}: cannot write in {}: {why}", dir.display())))
}

/// Refuses a file to write (`label` names it) that is a folder or one of a run's own files.
fn check_file_target(path: &Path, label: &str, run_dir: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(usage(format!(
            "{label}: is a directory; give the file to write"
        )));
    }
    run_files::check_not_a_runs_file(path, label, &[run_dir])
}

/// The split of the run's data `embed` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Split {
    /// The images the method trained on.
    Train,
    /// The test (validation) images.
    Test,
}

/// Options of `recipe embed`.
#[derive(Parser, Debug)]
#[command(
    no_binary_name = true,
    name = "recipe embed",
    args_override_self = true
)]
struct EmbedArgs {
    /// The run directory.
    #[arg(long)]
    run_dir: PathBuf,
    /// A checkpoint directory of the run (default: its newest valid one).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// A folder of images (PNG / JPEG, flat or nested) to embed, resized and centre-cropped to
    /// the run's input size; without it, the run's own data (--split).
    #[arg(long, conflicts_with = "split")]
    images: Option<PathBuf>,
    /// The split of the run's data to embed.
    #[arg(long, value_enum)]
    split: Option<Split>,
    /// The NumPy file to write; the rows' files and labels go to the same name with .csv.
    #[arg(long, default_value = "features.npy")]
    out: PathBuf,
    /// Images per forward pass.
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
}

/// Runs `recipe embed`.
pub fn embed(args: &[String]) -> Result<()> {
    let args: EmbedArgs = super::common::parse_args(args)?;
    check_run_dir(&args.run_dir)?;
    check_out(&args.out, "npy", &args.run_dir)?;
    // The rows' table goes beside it, with .csv.
    let table = args.out.with_extension("csv");
    check_file_target(
        &table,
        &format!(
            "--out {}: its table {}",
            args.out.display(),
            table.display()
        ),
        &args.run_dir,
    )?;
    if args.batch_size == 0 {
        return Err(usage("--batch-size 0: must be at least 1"));
    }
    if let Some(dir) = &args.images {
        if !dir.is_dir() {
            return Err(usage(format!(
                "--images {}: not a directory",
                dir.display()
            )));
        }
    }
    let device = crate::backend::device(None)?;
    let run = load_run_backbone(&args.run_dir, args.checkpoint.as_deref(), &device)?;
    let (h, w, c) = run.input;
    let (images, names): (Arc<dyn ImageSet>, Vec<String>) = match &args.images {
        Some(dir) => {
            let options = ImageFolderOptions {
                channels: Some(c),
                size: Some((h, w)),
                resize: true,
                threads: 0,
            };
            let (images, files) = image_folder::load_images(dir, options)?;
            let names = files
                .iter()
                .map(|f| f.strip_prefix(dir).unwrap_or(f).display().to_string())
                .collect();
            (Arc::new(images), names)
        }
        None if run.record.run.stream => streamed_split(&run.record.run, args.split)?,
        None => {
            let source = common::DataSource::of_run(&run.record.run);
            let data = source.load()?;
            let split = args.split.unwrap_or(Split::Train);
            let images = match split {
                Split::Train => data.trained_on().clone(),
                Split::Test => data.test.clone().ok_or_else(|| {
                    usage("--split test: the run's data has no test split (no labels)")
                })?,
            };
            let prefix = value_name(split);
            let names = folder_names(&source, split, images.len())
                .unwrap_or_else(|| (0..images.len()).map(|i| format!("{prefix}/{i}")).collect());
            (Arc::new(images), names)
        }
    };
    let normalize = run.record.task.augmentation.view1.normalize.clone();
    let features = extract_features(
        &run.model,
        &*images,
        args.batch_size,
        normalize.as_ref(),
        &device,
    )?;
    let [n, d] = features.features.dims();
    let values = features
        .features
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("reading the features: {e:?}"))?;
    // Each written beside its target and renamed over it (never through a link).
    run_files::write_replacing(&args.out, |tmp| write_npy(tmp, &args.out, &values, n, d))?;
    run_files::write_replacing(&table, |tmp| {
        let mut csv =
            csv::Writer::from_path(tmp).with_context(|| format!("writing {}", table.display()))?;
        let writing = || format!("writing {}", table.display());
        csv.write_record(["index", "file", "label"])
            .with_context(writing)?;
        // A row per feature row: a streamed file that could not be read has neither.
        let labels = images.labels();
        for &i in &features.indices {
            let label = labels.map_or(String::new(), |l| l[i].to_string());
            csv.write_record([i.to_string(), names[i].clone(), label])
                .with_context(writing)?;
        }
        csv.flush()
            .with_context(|| format!("writing {}", table.display()))
    })?;
    println!(
        "{n} images, {d} features each (checkpoint {}): {} and {}",
        run.checkpoint.display(),
        args.out.display(),
        table.display()
    );
    Ok(())
}

/// The file names (relative to the split's folder: `cat/00.jpg`) of a split of an image-folder
/// tree decoded into memory, in the order it was decoded (its listing's), where the listing has
/// `count` files: a row is named by its file as a streamed run's is (they were `train/0`,
/// `train/1`…). `None` for the other datasets (their images have no files of their own) and for
/// listings chosen by a class list or a labels file.
fn folder_names(source: &common::DataSource, split: Split, count: usize) -> Option<Vec<String>> {
    let dir = source.dir.as_ref()?;
    let plain = matches!(source.dataset, common::DatasetChoice::ImageFolder)
        && source.classes.is_none()
        && source.val_labels.is_none()
        && source.knn_data.is_none();
    if !plain {
        return None;
    }
    let split_dir = dir.join(match split {
        Split::Train => "train",
        Split::Test => "val",
    });
    let (files, _) = image_folder::scan(&split_dir).ok()?;
    (files.len() == count).then(|| {
        files
            .iter()
            .map(|(f, _)| f.strip_prefix(&split_dir).unwrap_or(f).display().to_string())
            .collect()
    })
}

/// The split of a run that streamed its files, as the run's kNN monitor read it (centre-cut at
/// the run's size), with the files' names relative to their folder: the training files, or
/// (`--split test`) the held-out ones.
fn streamed_split(
    run: &common::RecipeRun,
    split: Option<Split>,
) -> Result<(Arc<dyn ImageSet>, Vec<String>)> {
    let source = common::DataSource {
        image_size: run.image_size.or(run.input_shape.map(|[side, _, _]| side)),
        ..common::DataSource::of_run(run)
    };
    let common::TrainData::Stream(streamed) = source.load_for_training(Some(true))? else {
        unreachable!("asked to stream a folder of image files")
    };
    let files = match split.unwrap_or(Split::Train) {
        Split::Train => streamed.files.clone(),
        Split::Test => match &streamed.monitor {
            Some((_, queries)) => queries.clone(),
            None => {
                return Err(usage(
                    "--split test: the run's data has no test split (no labels)",
                ))
            }
        },
    };
    let names = (0..files.len())
        .map(|i| {
            let name = files.name(i);
            name.strip_prefix(files.root())
                .unwrap_or(&name)
                .display()
                .to_string()
        })
        .collect();
    Ok((Arc::new(streamed.eval_set(&files)?), names))
}

/// Writes `values` as a C-order float32 `.npy` array of shape `[n, d]` into `path`, the file
/// that becomes `name` (said in an error).
fn write_npy(path: &Path, name: &Path, values: &[f32], n: usize, d: usize) -> Result<()> {
    use npyz::WriterBuilder;
    use std::io::Write;
    let file =
        std::fs::File::create(path).with_context(|| format!("writing {}", name.display()))?;
    let mut out = std::io::BufWriter::new(file);
    // Every step names the file (a full disk said only `No space left on device`).
    let writing = || format!("writing {}", name.display());
    let mut writer = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(&[n as u64, d as u64])
        .writer(&mut out)
        .begin_nd()
        .with_context(writing)?;
    writer
        .extend(values.iter().copied())
        .with_context(writing)?;
    writer.finish().with_context(writing)?;
    out.flush().with_context(writing)
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "export",
        summary: "a run's backbone as safetensors, under torchvision / timm key names (--run-dir DIR)",
        run: export,
    },
    RecipeEntry {
        name: "embed",
        summary: "features of a folder of images or the run's data, as .npy + .csv of files (--run-dir DIR)",
        run: embed,
    },
];

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every self-supervised run committed with the studies — written by the builds of many
    /// sittings, before settings that were added since — reads as `recipe eval`, `export`,
    /// `embed` and `--resume` read it; a supervised run is refused by name.
    #[test]
    fn every_committed_recipe_record_reads() {
        fn runs(dir: &Path, found: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    if path.join("config.json").is_file() {
                        found.push(path.clone());
                    }
                    runs(&path, found);
                }
            }
        }
        let mut found = Vec::new();
        runs(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../studies"),
            &mut found,
        );
        let mut read = 0;
        for dir in &found {
            match super::read_recipe_record(dir) {
                Ok(_) => read += 1,
                Err(e) => assert!(
                    e.to_string().contains("a supervised run"),
                    "{}: {e:#}",
                    dir.display()
                ),
            }
        }
        assert!(read >= 80, "{read} of {} runs read", found.len());
    }
}
