//! MNIST / Fashion-MNIST in the IDX format, raw or gzip-compressed.
//!
//! An IDX file is a big-endian header — magic `0x0000_08DD` (`08` = unsigned bytes, `DD` = number
//! of dimensions), then one `u32` per dimension — followed by the data. Images are
//! `0x0000_0803` (count × rows × columns), labels `0x0000_0801` (count).
//!
//! File names accepted in a directory (each also with `.gz`): `train-images-idx3-ubyte`,
//! `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, and the same
//! with a dot before `idx` (`train-images.idx3-ubyte`), as some mirrors spell them.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::require_dir;
use super::{DataError, ImageArray};

/// Magic number of an IDX file of unsigned bytes with three dimensions (images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with one dimension (labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;
/// Number of classes of MNIST and Fashion-MNIST.
pub const NUM_CLASSES: usize = 10;

/// Which split of an MNIST-style dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The training split (`train-*`).
    Train,
    /// The test split (`t10k-*`).
    Test,
}

impl Split {
    fn prefix(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "t10k",
        }
    }
}

/// Reads a whole file, gunzipping it when it starts with the gzip magic bytes.
pub(crate) fn read_maybe_gz(path: &Path) -> Result<Vec<u8>, DataError> {
    let raw = std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            DataError::MissingFile {
                path: path.to_path_buf(),
                tried: Vec::new(),
            }
        } else {
            DataError::io(path, e)
        }
    })?;
    if raw.len() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
        let mut out = Vec::with_capacity(raw.len() * 2);
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    DataError::Truncated {
                        path: path.to_path_buf(),
                        what: "gzip stream ends early",
                        expected: raw.len() as u64 + 1,
                        found: raw.len() as u64,
                    }
                } else {
                    DataError::io(path, e)
                }
            })?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

fn header(
    path: &Path,
    bytes: &[u8],
    magic: u32,
    what: &'static str,
) -> Result<Vec<usize>, DataError> {
    if bytes.len() < 4 {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "IDX magic number",
            expected: 4,
            found: bytes.len() as u64,
        });
    }
    let found = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if found != magic {
        return Err(DataError::BadMagic {
            path: path.to_path_buf(),
            found,
            expected: magic,
            what,
        });
    }
    let ndim = (magic & 0xff) as usize;
    let head = 4 + 4 * ndim;
    if bytes.len() < head {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "IDX header",
            expected: head as u64,
            found: bytes.len() as u64,
        });
    }
    let dims: Vec<usize> = (0..ndim)
        .map(|d| {
            let o = 4 + 4 * d;
            u32::from_be_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]) as usize
        })
        .collect();
    let body: u64 = dims.iter().map(|&d| d as u64).product();
    let expected = head as u64 + body;
    let found = bytes.len() as u64;
    if found < expected {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "IDX data (header dimensions need more bytes)",
            expected,
            found,
        });
    }
    if found > expected {
        return Err(DataError::UnexpectedLength {
            path: path.to_path_buf(),
            what: format!("header dimensions {dims:?}"),
            expected,
            found,
        });
    }
    Ok(dims)
}

/// Parses an IDX image file (already decompressed): returns `(count, rows, cols, pixels)`.
pub fn parse_images(
    path: &Path,
    bytes: &[u8],
) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    let dims = header(
        path,
        bytes,
        IMAGES_MAGIC,
        "images: unsigned bytes, 3 dimensions",
    )?;
    let (n, rows, cols) = (dims[0], dims[1], dims[2]);
    if rows == 0 || cols == 0 {
        return Err(DataError::BadHeader {
            path: path.to_path_buf(),
            reason: format!("image size {rows}x{cols} has no pixels"),
        });
    }
    Ok((n, rows, cols, bytes[16..].to_vec()))
}

/// Parses an IDX label file (already decompressed); every label must be `< classes`.
pub fn parse_labels(path: &Path, bytes: &[u8], classes: usize) -> Result<Vec<u16>, DataError> {
    header(
        path,
        bytes,
        LABELS_MAGIC,
        "labels: unsigned bytes, 1 dimension",
    )?;
    let labels = &bytes[8..];
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|(_, &l)| l as usize >= classes)
    {
        return Err(DataError::LabelOutOfRange {
            path: path.to_path_buf(),
            index,
            label: label as u32,
            classes,
        });
    }
    Ok(labels.iter().map(|&l| l as u16).collect())
}

/// Reads an image file and a label file (each raw or `.gz`) into a labeled array.
pub fn load_files(images: &Path, labels: &Path, classes: usize) -> Result<ImageArray, DataError> {
    let (n, rows, cols, pixels) = parse_images(images, &read_maybe_gz(images)?)?;
    if n == 0 {
        return Err(DataError::Empty {
            path: images.to_path_buf(),
            what: "the IDX header declares 0 images".into(),
        });
    }
    let labels_v = parse_labels(labels, &read_maybe_gz(labels)?, classes)?;
    if labels_v.len() != n {
        return Err(DataError::CountMismatch {
            images_path: images.to_path_buf(),
            labels_path: labels.to_path_buf(),
            images: n,
            labels: labels_v.len(),
        });
    }
    ImageArray::new(images, rows, cols, 1, pixels, Some(labels_v), classes)
}

/// Reads only an image file (raw or `.gz`) into an unlabeled array.
pub fn load_images_only(images: &Path) -> Result<ImageArray, DataError> {
    let (n, rows, cols, pixels) = parse_images(images, &read_maybe_gz(images)?)?;
    if n == 0 {
        return Err(DataError::Empty {
            path: images.to_path_buf(),
            what: "the IDX header declares 0 images".into(),
        });
    }
    ImageArray::new(images, rows, cols, 1, pixels, None, 0)
}

/// Finds `stem` in `dir` under the accepted spellings (`-idxN` / `.idxN`, with or without `.gz`).
pub(crate) fn find_file(dir: &Path, stems: &[String]) -> Result<PathBuf, DataError> {
    let mut tried = Vec::new();
    for stem in stems {
        for name in [stem.clone(), format!("{stem}.gz")] {
            let p = dir.join(&name);
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => return Ok(p),
                // A file that is there but cannot be looked at is not "not found".
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return Err(DataError::Io { path: p, source: e })
                }
                _ => {}
            }
            tried.push(name);
        }
    }
    let first = dir.join(&tried[0]);
    Err(DataError::MissingFile {
        path: first,
        tried: tried[1..].to_vec(),
    })
}

fn stems(split: Split, kind: &str, nd: u8) -> Vec<String> {
    let p = split.prefix();
    vec![
        format!("{p}-{kind}-idx{nd}-ubyte"),
        format!("{p}-{kind}.idx{nd}-ubyte"),
    ]
}

/// Loads a labeled split of MNIST or Fashion-MNIST from `dir` (e.g.
/// `/usr/share/datasets/fashion-mnist`).
pub fn load(dir: impl AsRef<Path>, split: Split) -> Result<ImageArray, DataError> {
    let dir = dir.as_ref();
    require_dir(dir)?;
    let images = find_file(dir, &stems(split, "images", 3))?;
    let labels = find_file(dir, &stems(split, "labels", 1))?;
    load_files(&images, &labels, NUM_CLASSES)
}

/// Loads a split without its labels, for pretraining (the label file is not read).
pub fn load_unlabeled(dir: impl AsRef<Path>, split: Split) -> Result<ImageArray, DataError> {
    let dir = dir.as_ref();
    require_dir(dir)?;
    let images = find_file(dir, &stems(split, "images", 3))?;
    load_images_only(&images)
}

/// Encodes `count` images of `rows × cols` bytes as an IDX image file (uncompressed).
pub fn encode_images(rows: usize, cols: usize, pixels: &[u8]) -> Vec<u8> {
    let n = pixels.len() / (rows * cols).max(1);
    let mut out = Vec::with_capacity(16 + pixels.len());
    out.extend_from_slice(&IMAGES_MAGIC.to_be_bytes());
    for d in [n, rows, cols] {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    out.extend_from_slice(pixels);
    out
}

/// Encodes labels as an IDX label file (uncompressed).
pub fn encode_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + labels.len());
    out.extend_from_slice(&LABELS_MAGIC.to_be_bytes());
    out.extend_from_slice(&(labels.len() as u32).to_be_bytes());
    out.extend_from_slice(labels);
    out
}

/// Gzip-compresses `bytes` at the highest level (deterministic output: no file name, mtime 0).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes)
        .and_then(|_| enc.finish())
        .expect("writing to a Vec cannot fail")
}
