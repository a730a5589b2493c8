//! Remakes the Fashion-MNIST subset embedded in the library (`src/data/embedded/`).
//!
//! ```text
//! apt-get install -y dataset-fashion-mnist
//! cargo run -p curriculum-ssl-recipes --bin make_embedded_subset
//! ```
//!
//! Reads the official IDX files (default `/usr/share/datasets/fashion-mnist/`), keeps the first
//! 800 training and 200 test images of each class in dataset order, and writes them as gzipped
//! IDX files. The output is the same, byte for byte, on every run.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use curriculum_ssl::data::embedded::{make_subset, FILES, TEST_PER_CLASS, TRAIN_PER_CLASS};

/// Make the embedded Fashion-MNIST subset.
#[derive(Parser, Debug)]
struct Args {
    /// Directory with the official Fashion-MNIST IDX files (raw or .gz).
    #[arg(long, default_value = "/usr/share/datasets/fashion-mnist")]
    source: PathBuf,
    /// Output directory.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../src/data/embedded"))]
    out: PathBuf,
    /// Training images per class.
    #[arg(long, default_value_t = TRAIN_PER_CLASS)]
    train_per_class: usize,
    /// Test images per class.
    #[arg(long, default_value_t = TEST_PER_CLASS)]
    test_per_class: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let subset = make_subset(&args.source, args.train_per_class, args.test_per_class)
        .with_context(|| format!("reading {}", args.source.display()))?;
    subset.write(&args.out)?;
    let mut total = 0;
    for (name, bytes) in FILES.iter().zip(&subset.files) {
        println!("{}/{name}: {} bytes", args.out.display(), bytes.len());
        total += bytes.len();
    }
    println!("total: {total} bytes");
    Ok(())
}
