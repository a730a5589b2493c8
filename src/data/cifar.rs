//! CIFAR-10 and CIFAR-100, binary versions.
//!
//! CIFAR-10 (`cifar-10-batches-bin/`): `data_batch_1.bin` … `data_batch_5.bin` (train) and
//! `test_batch.bin`; each record is 1 label byte then 3072 pixel bytes (1024 red, 1024 green,
//! 1024 blue, each 32×32 row-major). CIFAR-100 (`cifar-100-binary/`): `train.bin`, `test.bin`;
//! each record is 1 coarse label byte (20 classes), 1 fine label byte (100 classes), then the
//! same 3072 pixel bytes.
//!
//! The directory given may be the one holding the `.bin` files or its parent (then the standard
//! sub-directory name is used).

use std::path::{Path, PathBuf};

use super::error::require_dir;
use super::error::DataError;
use super::idx::read_maybe_gz;
use super::image_array::ImageArray;

/// Side of a CIFAR image.
pub const SIDE: usize = 32;
const PIXELS: usize = SIDE * SIDE * 3;
/// Records of the largest CIFAR file (CIFAR-100's `train.bin`). A gzipped file is inflated up to
/// this many records and no further, so a decompression bomb fails instead of filling memory;
/// an uncompressed file is read whole (its length is what it holds).
pub const MAX_GZ_RECORDS: usize = 50_000;

/// Reads a CIFAR file, raw or gzipped, with `record`-byte records.
fn read(path: &Path, record: usize) -> Result<Vec<u8>, DataError> {
    read_maybe_gz(path, (MAX_GZ_RECORDS * record) as u64, || {
        format!("a CIFAR file holds ({MAX_GZ_RECORDS} records of {record} bytes)")
    })
}

/// Which split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The 50,000 training images.
    Train,
    /// The 10,000 test images.
    Test,
}

/// Which labels of CIFAR-100 to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cifar100Labels {
    /// The 100 fine classes.
    Fine,
    /// The 20 coarse super-classes.
    Coarse,
}

/// Converts one record's planar (CHW) pixels into HWC order.
fn planar_to_hwc(planar: &[u8], out: &mut Vec<u8>) {
    let plane = SIDE * SIDE;
    for p in 0..plane {
        out.push(planar[p]);
        out.push(planar[plane + p]);
        out.push(planar[2 * plane + p]);
    }
}

/// Parses one CIFAR binary file. `label_bytes` is 1 (CIFAR-10) or 2 (CIFAR-100); `label_at` picks
/// which of them is the label; labels must be `< classes`.
fn parse(
    path: &Path,
    bytes: &[u8],
    label_bytes: usize,
    label_at: usize,
    classes: usize,
    pixels: &mut Vec<u8>,
    labels: &mut Vec<u16>,
) -> Result<(), DataError> {
    let record = label_bytes + PIXELS;
    if bytes.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
            what: format!("no records (each is {record} bytes)"),
        });
    }
    if !bytes.len().is_multiple_of(record) {
        let whole = bytes.len() / record;
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "last record incomplete",
            expected: ((whole + 1) * record) as u64,
            found: bytes.len() as u64,
        });
    }
    for (i, rec) in bytes.chunks_exact(record).enumerate() {
        let label = rec[label_at];
        if label as usize >= classes {
            return Err(DataError::LabelOutOfRange {
                path: path.to_path_buf(),
                index: i,
                label: label as u32,
                classes,
            });
        }
        labels.push(label as u16);
        planar_to_hwc(&rec[label_bytes..], pixels);
    }
    Ok(())
}

fn resolve(dir: &Path, sub: &str, probe: &str) -> Result<PathBuf, DataError> {
    require_dir(dir)?;
    if dir.join(probe).is_file() || !dir.join(sub).is_dir() {
        Ok(dir.to_path_buf())
    } else {
        Ok(dir.join(sub))
    }
}

fn require_file(path: PathBuf) -> Result<PathBuf, DataError> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(DataError::MissingFile {
            path,
            tried: Vec::new(),
        })
    }
}

/// Loads a labeled CIFAR-10 split from `dir` (`cifar-10-batches-bin` or its parent).
pub fn load_cifar10(dir: impl AsRef<Path>, split: Split) -> Result<ImageArray, DataError> {
    let dir = resolve(dir.as_ref(), "cifar-10-batches-bin", "test_batch.bin")?;
    let files: Vec<PathBuf> = match split {
        Split::Train => (1..=5)
            .map(|k| dir.join(format!("data_batch_{k}.bin")))
            .collect(),
        Split::Test => vec![dir.join("test_batch.bin")],
    };
    let mut pixels = Vec::new();
    let mut labels = Vec::new();
    for f in files {
        let f = require_file(f)?;
        parse(
            &f,
            &read(&f, 1 + PIXELS)?,
            1,
            0,
            10,
            &mut pixels,
            &mut labels,
        )?;
    }
    ImageArray::new(dir, SIDE, SIDE, 3, pixels, Some(labels), 10)
}

/// Loads a labeled CIFAR-100 split from `dir` (`cifar-100-binary` or its parent), with fine
/// (100) or coarse (20) labels.
pub fn load_cifar100(
    dir: impl AsRef<Path>,
    split: Split,
    which: Cifar100Labels,
) -> Result<ImageArray, DataError> {
    let dir = resolve(dir.as_ref(), "cifar-100-binary", "test.bin")?;
    let f = require_file(dir.join(match split {
        Split::Train => "train.bin",
        Split::Test => "test.bin",
    }))?;
    let (at, classes) = match which {
        Cifar100Labels::Coarse => (0, 20),
        Cifar100Labels::Fine => (1, 100),
    };
    let mut pixels = Vec::new();
    let mut labels = Vec::new();
    parse(
        &f,
        &read(&f, 2 + PIXELS)?,
        2,
        at,
        classes,
        &mut pixels,
        &mut labels,
    )?;
    ImageArray::new(f, SIDE, SIDE, 3, pixels, Some(labels), classes)
}

/// CIFAR-10 images without labels, for pretraining (labels are still validated).
pub fn load_cifar10_unlabeled(
    dir: impl AsRef<Path>,
    split: Split,
) -> Result<ImageArray, DataError> {
    Ok(load_cifar10(dir, split)?.unlabeled())
}
