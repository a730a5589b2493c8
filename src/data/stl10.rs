//! STL-10, binary version (`stl10_binary/`).
//!
//! `train_X.bin` (5,000 images), `test_X.bin` (8,000) and `unlabeled_X.bin` (100,000) hold
//! 96×96 RGB images of 27,648 bytes each: the red plane, then green, then blue, each plane
//! **column-major** (the 96 pixels of column 0 top to bottom, then column 1, …).
//! `train_y.bin` / `test_y.bin` hold one label byte per image, 1 to 10 (stored here as 0 to 9).
//! `class_names.txt`, when present, names the classes.
//!
//! The directory given may be `stl10_binary` itself or its parent.

use std::path::{Path, PathBuf};

use super::error::require_dir;
use super::error::DataError;
use super::image_array::ImageArray;

/// Side of an STL-10 image.
pub const SIDE: usize = 96;
/// Bytes of one image.
pub const IMAGE_BYTES: usize = SIDE * SIDE * 3;
/// Number of classes.
pub const NUM_CLASSES: usize = 10;

/// Which split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// 5,000 labeled training images.
    Train,
    /// 8,000 labeled test images.
    Test,
    /// 100,000 unlabeled images (only for pretraining).
    Unlabeled,
}

fn resolve(dir: &Path) -> Result<PathBuf, DataError> {
    require_dir(dir)?;
    let sub = dir.join("stl10_binary");
    Ok(if sub.is_dir() { sub } else { dir.to_path_buf() })
}

fn read(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|e| DataError::open(path, e))
}

/// Converts STL-10 images (planar, column-major) into HWC row-major bytes.
pub fn parse_images(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, DataError> {
    if bytes.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
            what: format!("no images (each is {IMAGE_BYTES} bytes)"),
        });
    }
    if !bytes.len().is_multiple_of(IMAGE_BYTES) {
        let whole = bytes.len() / IMAGE_BYTES;
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "last image incomplete",
            expected: ((whole + 1) * IMAGE_BYTES) as u64,
            found: bytes.len() as u64,
        });
    }
    let plane = SIDE * SIDE;
    let mut out = vec![0u8; bytes.len()];
    for (img, dst) in bytes
        .chunks_exact(IMAGE_BYTES)
        .zip(out.chunks_exact_mut(IMAGE_BYTES))
    {
        for c in 0..3 {
            for x in 0..SIDE {
                for y in 0..SIDE {
                    dst[(y * SIDE + x) * 3 + c] = img[c * plane + x * SIDE + y];
                }
            }
        }
    }
    Ok(out)
}

/// Parses a label file (bytes 1..=10) into class indices 0..=9.
pub fn parse_labels(path: &Path, bytes: &[u8]) -> Result<Vec<u16>, DataError> {
    bytes
        .iter()
        .enumerate()
        .map(|(index, &b)| {
            if (1..=NUM_CLASSES as u8).contains(&b) {
                Ok((b - 1) as u16)
            } else {
                Err(DataError::LabelOutOfRange {
                    path: path.to_path_buf(),
                    index,
                    label: b as u32,
                    classes: NUM_CLASSES,
                })
            }
        })
        .collect()
}

/// Loads a split. `Train` and `Test` are labeled; `Unlabeled` is not.
pub fn load(dir: impl AsRef<Path>, split: Split) -> Result<ImageArray, DataError> {
    let dir = resolve(dir.as_ref())?;
    let (x, y) = match split {
        Split::Train => ("train_X.bin", Some("train_y.bin")),
        Split::Test => ("test_X.bin", Some("test_y.bin")),
        Split::Unlabeled => ("unlabeled_X.bin", None),
    };
    let xp = dir.join(x);
    let pixels = parse_images(&xp, &read(&xp)?)?;
    let n = pixels.len() / IMAGE_BYTES;
    let labels = match y {
        Some(y) => {
            let yp = dir.join(y);
            let labels = parse_labels(&yp, &read(&yp)?)?;
            if labels.len() != n {
                return Err(DataError::CountMismatch {
                    images_path: xp,
                    labels_path: yp,
                    images: n,
                    labels: labels.len(),
                });
            }
            Some(labels)
        }
        None => None,
    };
    let classes = if labels.is_some() { NUM_CLASSES } else { 0 };
    let arr = ImageArray::new(xp, SIDE, SIDE, 3, pixels, labels, classes)?;
    let names_path = dir.join("class_names.txt");
    Ok(match std::fs::read_to_string(&names_path) {
        Ok(s) if classes > 0 => {
            arr.with_class_names(s.lines().map(|l| l.trim().to_string()).collect())
        }
        _ => arr,
    })
}

/// Loads a split without labels, for pretraining (`Train` and `Test` labels are still checked).
/// Pretraining on STL-10 usually uses `Unlabeled` and `Train` together: load both and join them
/// with [`ImageArray::concat`].
pub fn load_unlabeled(dir: impl AsRef<Path>, split: Split) -> Result<ImageArray, DataError> {
    Ok(load(dir, split)?.unlabeled())
}
