//! Loads the backbone of a `recipe` run and writes one feature vector per image of a folder:
//! the whole path from a run directory to features, in a page of library calls.
//!
//! ```text
//! cargo run --release --bin recipe -- simclr --epochs 1 --backbone small-2x --run-dir runs/demo
//! cargo run --release --example extract_features -- runs/demo path/to/images features.csv
//! ```
//!
//! The folder holds PNG or JPEG images at any depth (sub-folders are only places); each is
//! converted to the run's channel count, resized and centre-cropped to its image size, and
//! normalised as the run's views were (`config.json` records all three). Each CSV row is the
//! image's path within the folder, then its features.
//!
//! The recipes save their backbone as the [`AnyBackbone`] enum, so the backbone is built as one:
//! here the recipes' CPU default (`--backbone small-2x`: widths 16–128, the stride-2 stem banded
//! on the CPU, the last 2×2 map flattened into 512 features — pooled to the grid the run
//! recorded). For
//! any other backbone, `recipe embed --run-dir DIR --images FOLDER` builds it from the run's
//! record and writes the same features as a NumPy array.

use std::io::Write;

use burn::backend::Flex;
use curriculum_ssl::data::image_folder::{self, ImageFolderOptions};
use curriculum_ssl::eval::extract_features;
use curriculum_ssl::train::{load_backbone, RunRecord};
use curriculum_ssl_models::{AnyBackboneConfig, BlockKind, ResNetConfig, Stem};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [run, folder, out] = args.as_slice() else {
        eprintln!("usage: extract_features RUN_DIR IMAGE_FOLDER OUT.csv");
        std::process::exit(2);
    };
    // What the run trained on: the views' size and normalisation (config.json).
    let record = RunRecord::<serde_json::Value>::read(run.as_ref())?;
    let view = &record.task.augmentation.view1;
    let Some((height, width)) = view.crop.as_ref().map(|c| c.size) else {
        return Err("the run's views have no crop, so no fixed image size".into());
    };
    let normalize = view.normalize.clone();
    let channels = normalize.as_ref().map_or(1, |n| n.mean.len());
    // The grid its last map was pooled to: absent for global pooling (and in runs recorded
    // before the option, which all pooled globally).
    let grid = record.run["pooled_grid"].as_u64().unwrap_or(1) as usize;
    let device = Default::default();
    let fresh = AnyBackboneConfig::ResNet(
        ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
            .with_base_width(16)
            .with_in_channels(channels)
            .with_stem(Stem::Stride2)
            .with_banded_stem(true)
            .with_pooled_grid(grid),
    )
    .init::<Flex>(&device);
    // Checksums and parameter shapes are verified before anything is loaded.
    let backbone = load_backbone::<Flex, _>(run.as_ref(), fresh, &device)?;
    let options = ImageFolderOptions {
        channels: Some(channels),
        size: Some((height, width)),
        resize: true,
        threads: 0,
    };
    let (images, files) = image_folder::load_images(folder, options)?;
    let features = extract_features(&backbone, &images, 256, normalize.as_ref(), &device)?;
    let [n, d] = features.features.dims();
    let values = features.features.into_data().to_vec::<f32>()?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    for (path, row) in files.iter().zip(values.chunks(d)) {
        let name = path.strip_prefix(folder).unwrap_or(path).display();
        let row: Vec<String> = row.iter().map(|v| v.to_string()).collect();
        writeln!(file, "{name},{}", row.join(","))?;
    }
    file.flush()?;
    println!("{n} images, {d} features each: {out}");
    Ok(())
}
