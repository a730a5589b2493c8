//! `pack`: a folder of images written as WebDataset shards, for `--dataset shards`.
//!
//! ```text
//! recipe pack --data-dir ~/imagenet --out ~/imagenet-shards [--samples-per-shard 1000]
//!             [--classes imagenet100.txt] [--val-labels LOC_val_solution.csv] [--seed 0]
//! ```
//!
//! An image folder (`--dataset image-folder`, the default: `train/` of class folders and an
//! optional `val/`, read as the recipes read them, `--classes` and `--val-labels` included)
//! becomes `--out/train/` and `--out/val/`; any folder of images (`--dataset folder`, no labels)
//! becomes `--out/` itself. Each split is a run of `shard-NNNNNN.tar` files of `KEY.jpg` (or
//! `.png`) + `KEY.cls` in a shuffled order, and an `index.json` of the shards, their sample
//! counts, the class names and the files left out (`curriculum_ssl::data::stream::pack`).
//! Every image is decoded once on every core first: a file that cannot be read is left out,
//! warned about and counted. Then `recipe light_moco --dataset shards --data-dir --out-folder`
//! trains on them, streamed, with the kNN monitor on `val/`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;
use curriculum_ssl::data::stream::{pack as pack_shards, ImageFiles, ImageSource, PackConfig};

use super::common::{DataSource, DatasetChoice};
use super::RecipeEntry;
use crate::usage::usage;

/// Options of `recipe pack`.
#[derive(Parser, Debug)]
#[command(no_binary_name = true, name = "recipe pack", args_override_self = true)]
struct PackArgs {
    /// The folder of images.
    #[arg(long = "data-dir", value_name = "DIR")]
    data: PathBuf,
    /// Where the shards go: a new or empty folder.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// image-folder (train/ + val/ of class folders) or folder (any images, no labels).
    #[arg(long, value_enum, default_value = "image-folder")]
    dataset: DatasetChoice,
    /// Samples per shard (about 110 MB of ImageNet's JPEGs at 1,000).
    #[arg(long, default_value_t = curriculum_ssl::data::stream::DEFAULT_SAMPLES_PER_SHARD)]
    samples_per_shard: usize,
    /// image-folder: a class list file; only those class folders are packed (ImageNet-100).
    #[arg(long, value_name = "FILE")]
    classes: Option<PathBuf>,
    /// image-folder: a labels file for a `val/` that holds its images without class folders.
    #[arg(long, value_name = "FILE")]
    val_labels: Option<PathBuf>,
    /// Seeds the order the samples are written in.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Runs `recipe pack`.
pub fn run(args: &[String]) -> Result<()> {
    let args: PackArgs = super::common::parse_args(args)?;
    if args.samples_per_shard == 0 {
        return Err(usage(
            "--samples-per-shard 0: a shard holds at least one sample",
        ));
    }
    if !matches!(
        args.dataset,
        DatasetChoice::ImageFolder | DatasetChoice::Folder
    ) {
        return Err(usage(format!(
            "--dataset {}: pack reads image-folder or folder (the other datasets are read from \
             their own files)",
            args.dataset
        )));
    }
    let source = DataSource {
        dataset: args.dataset,
        dir: Some(args.data.clone()),
        classes: args.classes.clone(),
        val_labels: args.val_labels.clone(),
        ..DataSource::default()
    };
    source.validate()?;
    if crate::recipes::common::is_inside(&args.out, &args.data) {
        return Err(usage(format!(
            "--out {}: inside --data-dir (the shards would be read as images of the folder the \
             next time)",
            args.out.display()
        )));
    }
    let splits: &[&str] = match args.dataset {
        DatasetChoice::ImageFolder => &["train", "val"],
        _ => &[],
    };
    check_out(&args.out, splits)?;
    let config = PackConfig {
        samples_per_shard: args.samples_per_shard,
        seed: args.seed,
        threads: 0,
    };
    match args.dataset {
        DatasetChoice::ImageFolder => {
            let (train, val) = source.folder_splits(&args.data)?;
            let classes = train.class_names().to_vec();
            write(&train, &classes, &args.out.join("train"), &config)?;
            if let Some(val) = val {
                write(&val, &classes, &args.out.join("val"), &config)?;
            }
        }
        _ => {
            let files = ImageFiles::unlabeled(&args.data).context("listing the images")?;
            write(&files, &[], &args.out, &config)?;
        }
    }
    Ok(())
}

/// Refuses an `--out` that is not a new or empty folder, before anything is written: an image
/// folder's shards go into its `train/` and `val/` (`splits`), which must be new or empty too.
/// (A folder of other files took the shards beside them, exit 0: an image folder then read its
/// index.json as a stray file; and a val/ already packed was refused only after train/ was.)
fn check_out(out: &Path, splits: &[&str]) -> Result<()> {
    let held = |dir: &Path| -> Result<Vec<String>> {
        if !dir.exists() {
            return Ok(Vec::new());
        }
        if !dir.is_dir() {
            return Err(usage(format!("--out {}: not a folder", dir.display())));
        }
        // (Hidden files, such as a desktop's `.DS_Store`, and a new disk's `lost+found` do not
        // count: the shards' names cannot meet them.)
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
            .filter(|n| !n.starts_with('.') && n != "lost+found")
            .collect();
        names.sort();
        Ok(names)
    };
    let shown = |names: &[String]| crate::usage::some_of(names, 4);
    let others: Vec<String> = held(out)?
        .into_iter()
        .filter(|n| !splits.contains(&n.as_str()))
        .collect();
    if !others.is_empty() {
        return Err(usage(format!(
            "--out {}: holds {}; pack into a new or empty folder",
            out.display(),
            shown(&others)
        )));
    }
    for split in splits {
        let dir = out.join(split);
        let names = held(&dir)?;
        // A pack that stopped (a full disk, a kill) left its mark: the library removes its
        // files and packs the split again.
        let packing = curriculum_ssl::data::stream::PACKING_FILE;
        let unfinished = names.iter().any(|n| n == packing)
            && names.iter().all(|n| {
                n == packing
                    || n.starts_with(curriculum_ssl::data::stream::INDEX_FILE)
                    || n.ends_with(".tar")
                    || n.ends_with(".partial")
            });
        if !names.is_empty() && !unfinished {
            return Err(usage(format!(
                "--out {}: {} holds shards or other files already ({}); pack into a new or \
                 empty folder",
                out.display(),
                dir.display(),
                shown(&names)
            )));
        }
    }
    Ok(())
}

/// Packs one split, saying what was written.
fn write(files: &ImageFiles, classes: &[String], out: &Path, config: &PackConfig) -> Result<()> {
    log::info!(
        "packing {} images of {} into {}",
        files.len(),
        files.root().display(),
        out.display()
    );
    let summary = pack_shards(files, classes, out, config)
        .with_context(|| format!("packing {} into {}", files.root().display(), out.display()))?;
    let skipped = summary.index.skipped.len() + files.not_images();
    println!(
        "{}: {} samples in {} shard{} ({:.1} MiB){}",
        out.display(),
        summary.samples,
        summary.index.shards.len(),
        if summary.index.shards.len() == 1 {
            ""
        } else {
            "s"
        },
        summary.bytes as f64 / f64::from(1u32 << 20),
        match skipped {
            0 => String::new(),
            n => format!(
                "; {n} files left out ({} unreadable, listed in index.json; {} not named as \
                 images)",
                summary.index.skipped.len(),
                files.not_images()
            ),
        }
    );
    Ok(())
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "pack",
    summary:
        "a folder of images as WebDataset shards for --dataset shards (--data-dir DIR --out DIR)",
    run,
}];
