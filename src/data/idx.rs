//! MNIST / Fashion-MNIST in the IDX format, raw or gzip-compressed.
//!
//! An IDX file is a big-endian header — magic `0x0000_08DD` (`08` = unsigned bytes, `DD` = number
//! of dimensions), then one `u32` per dimension — followed by the data. Images are
//! `0x0000_0803` (count × rows × columns), labels `0x0000_0801` (count).
//!
//! The header is checked against the file before the data is read: a raw file must be exactly as
//! long as its dimensions say, a gzip stream must be long enough to hold them (deflate expands at
//! most [`MAX_DEFLATE_RATIO`]:1) and is never inflated past them, so a corrupt header or a
//! decompression bomb fails with a [`DataError`] naming the file instead of exhausting memory.
//!
//! File names accepted in a directory (each also with `.gz`): `train-images-idx3-ubyte`,
//! `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, and the same
//! with a dot before `idx` (`train-images.idx3-ubyte`), as some mirrors spell them.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::require_dir;
use super::error::DataError;
use super::image_array::ImageArray;

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

/// Deflate expands at most 1032:1 (a 258-byte match coded in 2 bits), so a gzip stream of `n`
/// bytes cannot decompress to more than `1032 * n` bytes.
pub const MAX_DEFLATE_RATIO: u64 = 1032;

const IMAGES_WHAT: &str = "images: unsigned bytes, 3 dimensions";
const LABELS_WHAT: &str = "labels: unsigned bytes, 1 dimension";

/// A dataset file opened for reading: its content is gunzipped on the fly when the file starts
/// with the gzip magic bytes.
struct Opened {
    path: PathBuf,
    /// Bytes of the file on disk.
    len: u64,
    /// Whether the file is a gzip stream.
    gz: bool,
    reader: Box<dyn Read>,
}

impl Opened {
    fn open(path: &Path) -> Result<Self, DataError> {
        use std::io::{Seek, SeekFrom};
        let mut file = std::fs::File::open(path).map_err(|e| DataError::open(path, e))?;
        let len = file.metadata().map_err(|e| DataError::io(path, e))?.len();
        let mut magic = Vec::with_capacity(2);
        (&mut file)
            .take(2)
            .read_to_end(&mut magic)
            .map_err(|e| DataError::io(path, e))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| DataError::io(path, e))?;
        let gz = magic == [0x1f, 0x8b];
        let file = std::io::BufReader::new(file);
        let reader: Box<dyn Read> = if gz {
            Box::new(flate2::read::GzDecoder::new(file))
        } else {
            Box::new(file)
        };
        Ok(Self {
            path: path.to_path_buf(),
            len,
            gz,
            reader,
        })
    }

    /// Appends at most `limit` more bytes of the content to `out` (fewer when it ends first).
    /// The vector grows with the bytes actually read, never by `limit` up front.
    fn read_up_to(&mut self, limit: u64, out: &mut Vec<u8>) -> Result<(), DataError> {
        (&mut self.reader)
            .take(limit)
            .read_to_end(out)
            .map(|_| ())
            .map_err(|e| {
                if self.gz && e.kind() == std::io::ErrorKind::UnexpectedEof {
                    DataError::Truncated {
                        path: self.path.clone(),
                        what: "gzip stream ends early",
                        expected: self.len + 1,
                        found: self.len,
                    }
                } else {
                    DataError::io(&self.path, e)
                }
            })
    }

    /// The most bytes the content can hold: the file's length, or what deflate can expand a
    /// stream of that length to.
    fn max_content(&self) -> u64 {
        if self.gz {
            self.len.saturating_mul(MAX_DEFLATE_RATIO)
        } else {
            self.len
        }
    }
}

/// Reads a whole file, gunzipping it when it starts with the gzip magic bytes. A gzip stream is
/// inflated up to `gz_limit` bytes, the most the format can need (`limit_what` says which, for
/// the error); a longer one is a [`DataError::TooLarge`]. A raw file is read as it is.
pub(crate) fn read_maybe_gz(
    path: &Path,
    gz_limit: u64,
    limit_what: impl FnOnce() -> String,
) -> Result<Vec<u8>, DataError> {
    let mut f = Opened::open(path)?;
    let mut out = Vec::new();
    if f.gz {
        f.read_up_to(gz_limit.saturating_add(1), &mut out)?;
        if out.len() as u64 > gz_limit {
            return Err(DataError::TooLarge {
                path: path.to_path_buf(),
                what: limit_what(),
                limit: gz_limit,
            });
        }
    } else {
        // The file's own length justifies reading all of it.
        out.reserve_exact(usize::try_from(f.len).unwrap_or(0));
        f.read_up_to(u64::MAX, &mut out)?;
    }
    Ok(out)
}

/// Reads an IDX file (raw or `.gz`) of the kind `magic`. The header is read first and checked
/// against what the file can hold — its length, or for a gzip stream what deflate can expand it
/// to — so a header that claims billions of items fails before anything of that size is
/// allocated; a gzip stream is never inflated past one byte more than the header declares.
fn read_idx(path: &Path, magic: u32, what: &'static str) -> Result<Vec<u8>, DataError> {
    let mut f = Opened::open(path)?;
    let head = header_len(magic);
    let mut bytes = Vec::with_capacity(head);
    f.read_up_to(head as u64, &mut bytes)?;
    // Fewer bytes than a header: the whole content is in `bytes`, and this reports it.
    let (dims, expected) = parse_header(path, &bytes, magic, what)?;
    if expected > f.max_content() {
        return Err(if f.gz {
            DataError::BadHeader {
                path: path.to_path_buf(),
                reason: format!(
                    "dimensions {dims:?} need {expected} bytes, more than a gzip stream of {} \
                     bytes can hold (deflate expands at most {MAX_DEFLATE_RATIO}:1)",
                    f.len
                ),
            }
        } else {
            length_error(path, &dims, expected, f.len)
        });
    }
    if !f.gz && f.len != expected {
        return Err(length_error(path, &dims, expected, f.len));
    }
    if !f.gz {
        // The file is as long as the header says: its length justifies the buffer.
        bytes.reserve_exact(usize::try_from(expected - head as u64).unwrap_or(0));
    }
    f.read_up_to(expected - head as u64 + 1, &mut bytes)?;
    let found = bytes.len() as u64;
    if found > expected && f.gz {
        return Err(DataError::TooLarge {
            path: path.to_path_buf(),
            what: format!("its IDX header dimensions {dims:?} allow"),
            limit: expected,
        });
    }
    if found != expected {
        // A raw file that changed size while it was read, or a gzip stream that ends early.
        return Err(length_error(path, &dims, expected, found));
    }
    Ok(bytes)
}

/// Bytes of the header of an IDX file of kind `magic` (magic number, one `u32` per dimension).
fn header_len(magic: u32) -> usize {
    4 + 4 * (magic & 0xff) as usize
}

/// Parses the header at the start of `bytes` (`bytes` may hold only the header, or be the whole
/// content when it is shorter than a header); returns the dimensions and the length of the whole
/// file they describe.
fn parse_header(
    path: &Path,
    bytes: &[u8],
    magic: u32,
    what: &'static str,
) -> Result<(Vec<usize>, u64), DataError> {
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
    let head = header_len(magic);
    if bytes.len() < head {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "IDX header",
            expected: head as u64,
            found: bytes.len() as u64,
        });
    }
    let dims: Vec<usize> = (0..(magic & 0xff) as usize)
        .map(|d| {
            let o = 4 + 4 * d;
            u32::from_be_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]) as usize
        })
        .collect();
    // Three `u32` dimensions can multiply past `u64`.
    let body = if dims.contains(&0) {
        Some(0)
    } else {
        dims.iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
    };
    let expected = body
        .and_then(|b| b.checked_add(head as u64))
        .ok_or_else(|| DataError::BadHeader {
            path: path.to_path_buf(),
            reason: format!("dimensions {dims:?} describe more than {} bytes", u64::MAX),
        })?;
    Ok((dims, expected))
}

/// The error for content of `found` bytes where the header dimensions need `expected`.
fn length_error(path: &Path, dims: &[usize], expected: u64, found: u64) -> DataError {
    if found < expected {
        DataError::Truncated {
            path: path.to_path_buf(),
            what: "IDX data (header dimensions need more bytes)",
            expected,
            found,
        }
    } else {
        DataError::UnexpectedLength {
            path: path.to_path_buf(),
            what: format!("header dimensions {dims:?}"),
            expected,
            found,
        }
    }
}

/// Checks the header of a whole (decompressed) IDX file and its length; returns the dimensions.
fn header(
    path: &Path,
    bytes: &[u8],
    magic: u32,
    what: &'static str,
) -> Result<Vec<usize>, DataError> {
    let (dims, expected) = parse_header(path, bytes, magic, what)?;
    if bytes.len() as u64 != expected {
        return Err(length_error(path, &dims, expected, bytes.len() as u64));
    }
    Ok(dims)
}

/// Parses an IDX image file (already decompressed): returns `(count, rows, cols, pixels)`.
pub fn parse_images(
    path: &Path,
    bytes: &[u8],
) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    let dims = header(path, bytes, IMAGES_MAGIC, IMAGES_WHAT)?;
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
    header(path, bytes, LABELS_MAGIC, LABELS_WHAT)?;
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
    let (n, rows, cols, pixels) = read_images(images)?;
    let labels_v = parse_labels(
        labels,
        &read_idx(labels, LABELS_MAGIC, LABELS_WHAT)?,
        classes,
    )?;
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
    let (_, rows, cols, pixels) = read_images(images)?;
    ImageArray::new(images, rows, cols, 1, pixels, None, 0)
}

/// Reads and parses an image file (raw or `.gz`), refusing one that declares no image: returns
/// `(count, rows, cols, pixels)`.
fn read_images(images: &Path) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    let (n, rows, cols, pixels) =
        parse_images(images, &read_idx(images, IMAGES_MAGIC, IMAGES_WHAT)?)?;
    if n == 0 {
        return Err(DataError::Empty {
            path: images.to_path_buf(),
            what: "the IDX header declares 0 images".into(),
        });
    }
    Ok((n, rows, cols, pixels))
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
