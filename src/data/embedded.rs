//! A balanced subset of real Fashion-MNIST compiled into the crate, so that training runs on a
//! fresh machine with no download. It is the default dataset when no data directory is given.
//!
//! Contents: the first [`TRAIN_PER_CLASS`] images of each of the 10 classes of the official
//! training set (8,000 images) and the first [`TEST_PER_CLASS`] of each class of the test set
//! (2,000 images), in their original order, stored as gzip-compressed IDX files under
//! `src/data/embedded/` (about 4.4 MB in all). Fashion-MNIST is © 2017 Zalando SE, MIT licence;
//! the notice is in `src/data/embedded/LICENSE`.
//!
//! Size: 10,000 training + 2,000 test images would need 5.2 MB as gzipped IDX, over the 5 MB
//! budget for the repository, hence 800 + 200 per class. The subset is remade, byte for byte,
//! by `cargo run -p curriculum-ssl-recipes --bin make_embedded_subset` from the files of the
//! Debian package `dataset-fashion-mnist` (`/usr/share/datasets/fashion-mnist/`), using
//! [`make_subset`].

use std::path::{Path, PathBuf};

use super::error::DataError;
use super::idx::{self, NUM_CLASSES};
use super::image_array::ImageArray;

/// Training images per class in the embedded subset.
pub const TRAIN_PER_CLASS: usize = 800;
/// Test images per class in the embedded subset.
pub const TEST_PER_CLASS: usize = 200;

/// The Fashion-MNIST class names, by label.
pub const CLASS_NAMES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// File names of the subset (as written by [`Subset::write`]).
pub const FILES: [&str; 4] = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
];

static TRAIN_IMAGES: &[u8] = include_bytes!("embedded/train-images-idx3-ubyte.gz");
static TRAIN_LABELS: &[u8] = include_bytes!("embedded/train-labels-idx1-ubyte.gz");
static TEST_IMAGES: &[u8] = include_bytes!("embedded/t10k-images-idx3-ubyte.gz");
static TEST_LABELS: &[u8] = include_bytes!("embedded/t10k-labels-idx1-ubyte.gz");

fn gunzip(name: &str, bytes: &[u8]) -> Result<Vec<u8>, DataError> {
    use std::io::Read;
    let path = embedded_path(name);
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| DataError::io(&path, e))?;
    Ok(out)
}

fn embedded_path(name: &str) -> PathBuf {
    Path::new("<embedded fashion-mnist>").join(name)
}

fn load(images: (&str, &[u8]), labels: (&str, &[u8])) -> Result<ImageArray, DataError> {
    let ip = embedded_path(images.0);
    let lp = embedded_path(labels.0);
    let (n, rows, cols, pixels) = idx::parse_images(&ip, &gunzip(images.0, images.1)?)?;
    let labels = idx::parse_labels(&lp, &gunzip(labels.0, labels.1)?, NUM_CLASSES)?;
    if labels.len() != n {
        return Err(DataError::CountMismatch {
            images_path: ip,
            labels_path: lp,
            images: n,
            labels: labels.len(),
        });
    }
    Ok(
        ImageArray::new(ip, rows, cols, 1, pixels, Some(labels), NUM_CLASSES)?
            .with_class_names(CLASS_NAMES.iter().map(|s| s.to_string()).collect()),
    )
}

/// The embedded training subset (8,000 labeled 28×28 grayscale images, 800 per class).
pub fn train() -> Result<ImageArray, DataError> {
    load((FILES[0], TRAIN_IMAGES), (FILES[1], TRAIN_LABELS))
}

/// The embedded test subset (2,000 labeled images, 200 per class).
pub fn test() -> Result<ImageArray, DataError> {
    load((FILES[2], TEST_IMAGES), (FILES[3], TEST_LABELS))
}

/// The embedded training subset without labels, for pretraining.
pub fn train_unlabeled() -> Result<ImageArray, DataError> {
    Ok(train()?.unlabeled())
}

/// Compressed size in bytes of the embedded files (all four together).
pub fn compressed_bytes() -> usize {
    TRAIN_IMAGES.len() + TRAIN_LABELS.len() + TEST_IMAGES.len() + TEST_LABELS.len()
}

/// The four gzip-compressed IDX files of a subset, in the order of [`FILES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subset {
    /// Compressed file contents, in the order of [`FILES`].
    pub files: [Vec<u8>; 4],
}

impl Subset {
    /// Writes the four files into `dir` (created if needed).
    pub fn write(&self, dir: impl AsRef<Path>) -> Result<(), DataError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
        for (name, bytes) in FILES.iter().zip(&self.files) {
            let p = dir.join(name);
            std::fs::write(&p, bytes).map_err(|e| DataError::io(&p, e))?;
        }
        Ok(())
    }
}

/// Indices of the first `per_class` images of each class, in dataset order.
pub fn first_per_class(array: &ImageArray, per_class: usize) -> Result<Vec<usize>, DataError> {
    let labels = array.labels().ok_or_else(|| DataError::Request {
        path: array.source().to_path_buf(),
        reason: "a balanced subset needs labels".into(),
    })?;
    let mut taken = vec![0usize; array.num_classes()];
    let mut out = Vec::with_capacity(per_class * taken.len());
    for (i, &l) in labels.iter().enumerate() {
        if taken[l as usize] < per_class {
            taken[l as usize] += 1;
            out.push(i);
        }
    }
    if let Some((class, &have)) = taken.iter().enumerate().find(|(_, &t)| t < per_class) {
        return Err(DataError::Request {
            path: array.source().to_path_buf(),
            reason: format!("class {class} has {have} images, {per_class} requested"),
        });
    }
    Ok(out)
}

/// Makes a balanced subset of an MNIST-style directory: the first `train_per_class` training
/// images of each class and the first `test_per_class` test images of each class, in dataset
/// order, as gzip-compressed IDX files (compression level 9, no time stamp: the output is the same
/// on every run).
pub fn make_subset(
    dir: impl AsRef<Path>,
    train_per_class: usize,
    test_per_class: usize,
) -> Result<Subset, DataError> {
    let dir = dir.as_ref();
    let mut files: Vec<Vec<u8>> = Vec::with_capacity(4);
    for (split, per) in [
        (idx::Split::Train, train_per_class),
        (idx::Split::Test, test_per_class),
    ] {
        let full = idx::load(dir, split)?;
        let sub = full.select(&first_per_class(&full, per)?)?;
        let (h, w, _) = sub.image_shape();
        let pixels = sub.all_pixels();
        let labels: Vec<u8> = sub
            .labels()
            .unwrap_or_default()
            .iter()
            .map(|&l| l as u8)
            .collect();
        files.push(idx::gzip(&idx::encode_images(h, w, pixels)));
        files.push(idx::gzip(&idx::encode_labels(&labels)));
    }
    let files: [Vec<u8>; 4] = files.try_into().map_err(|_| DataError::Request {
        path: dir.to_path_buf(),
        reason: "internal: expected four files".into(),
    })?;
    Ok(Subset { files })
}

/// The default dataset: Fashion-MNIST (or MNIST) IDX files from `dir` when a directory is given,
/// else the embedded subset. This is what the training binaries use when no data directory is
/// passed.
pub fn load_or_embedded(dir: Option<&Path>, split: idx::Split) -> Result<ImageArray, DataError> {
    match (dir, split) {
        (Some(d), s) => idx::load(d, s),
        (None, idx::Split::Train) => train(),
        (None, idx::Split::Test) => test(),
    }
}
