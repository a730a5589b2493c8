//! Loads the backbone of a checkpoint and writes one feature vector per image of a folder.
//!
//! ```text
//! cargo run --release --bin recipe -- simclr --epochs 1 --backbone small --run-dir runs/demo
//! cargo run --release --example extract_features -- runs/demo path/to/images features.csv
//! ```
//!
//! The folder holds class sub-folders of PNG or JPEG images (the class is written beside each
//! vector); images are converted to the backbone's channel count and resized to `SIZE` pixels.
//! The backbone must be built with the settings it was trained with: here the CPU default of
//! the recipes (`--backbone small`), for one-channel 28×28 Fashion-MNIST images.

use std::io::Write;

use burn::backend::Flex;
use curriculum_ssl::augment::normalize::{Normalize, FASHION_MNIST_MEAN, FASHION_MNIST_STD};
use curriculum_ssl::data::image_folder::{self, ImageFolderOptions};
use curriculum_ssl::eval::features::extract_features;
use curriculum_ssl::train::load_backbone;
use curriculum_ssl_models::{BlockKind, ResNetConfig, Stem};

const SIZE: usize = 28;
const CHANNELS: usize = 1;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [run, folder, out] = args.as_slice() else {
        eprintln!("usage: extract_features RUN_DIR_OR_CHECKPOINT IMAGE_FOLDER OUT.csv");
        std::process::exit(2);
    };
    let device = Default::default();
    let fresh = ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_base_width(8)
        .with_in_channels(CHANNELS)
        .with_stem(Stem::ImageNet)
        .init::<Flex>(&device);
    // Checksums and parameter shapes are verified before anything is loaded.
    let backbone = load_backbone::<Flex, _>(run.as_ref(), fresh, &device)?;
    let images = image_folder::load(
        folder,
        ImageFolderOptions {
            channels: Some(CHANNELS),
            size: Some((SIZE, SIZE)),
            resize: true,
            threads: 0,
        },
    )?;
    let normalize = Normalize::new(&FASHION_MNIST_MEAN, &FASHION_MNIST_STD);
    let features = extract_features(&backbone, &images, 256, Some(&normalize), &device)?;
    let [n, d] = features.features.dims();
    let values = features.features.into_data().to_vec::<f32>()?;
    let labels = images.labels().map(<[u16]>::to_vec).unwrap_or_default();
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    for (i, row) in values.chunks(d).enumerate() {
        let class = labels.get(i).map_or(String::new(), |l| l.to_string());
        let row: Vec<String> = row.iter().map(|v| v.to_string()).collect();
        writeln!(file, "{class},{}", row.join(","))?;
    }
    println!("{n} images, {d} features each: {out}");
    Ok(())
}
