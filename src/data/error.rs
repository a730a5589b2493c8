//! Errors raised while reading datasets.

use std::path::{Path, PathBuf};

/// A dataset file or directory that cannot be used.
///
/// Every variant names the file (or directory) it is about and says what is wrong with it, so a
/// user can fix the input without reading the code. Readers never panic on bad input and never
/// skip a bad record silently: the first problem found is returned.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A directory that was expected to exist does not.
    #[error("{}: directory not found", .path.display())]
    MissingDirectory {
        /// The directory that was looked for.
        path: PathBuf,
    },
    /// A path that was expected to be a directory is a file.
    #[error("{}: not a directory", .path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// A file that was expected to exist does not (none of the accepted names was found).
    #[error("{}: file not found{}", .path.display(), also_tried(.tried))]
    MissingFile {
        /// The file that was looked for (the first accepted name).
        path: PathBuf,
        /// Other names that were tried, e.g. the `.gz` variant.
        tried: Vec<String>,
    },
    /// Reading the file failed at the operating-system level (permissions, I/O error, bad gzip
    /// stream).
    #[error("{}: cannot read: {source}", .path.display())]
    Io {
        /// The file being read.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the file failed (a full disk, permissions): a failure of the machine during the
    /// work, not of what was given (`recipe pack`'s shards and index).
    #[error("{}: cannot write: {source}", .path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is shorter than its header (or its format) says it must be.
    #[error("{}: truncated: {what}: expected {expected} bytes, found {found}", .path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Which part is short (e.g. "header", "image data").
        what: &'static str,
        /// Bytes required.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The file is longer than its header (or its format) says: it is probably not the file the
    /// reader was asked for.
    #[error("{}: {found} bytes, but the format needs exactly {expected} ({what})", .path.display())]
    UnexpectedLength {
        /// The file.
        path: PathBuf,
        /// What the length was derived from.
        what: String,
        /// Bytes required.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// A compressed file inflates to more than its header (or its format) allows: a foreign or
    /// corrupt file, or a decompression bomb. Decompression stops at the limit, so the rest of
    /// the stream is neither inflated nor counted.
    #[error("{}: decompresses to more than {limit} bytes, the most {what}", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Where the limit comes from, e.g. "its IDX header dimensions [2, 28, 28] allow".
        what: String,
        /// Bytes allowed.
        limit: u64,
    },
    /// An IDX file starts with another magic number than the one for its kind.
    #[error("{}: wrong IDX magic number 0x{found:08x}, expected 0x{expected:08x} ({what})", .path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic number found.
        found: u32,
        /// The magic number expected.
        expected: u32,
        /// What kind of IDX file was expected.
        what: &'static str,
    },
    /// A header field holds a value the reader cannot accept (zero or absurd dimensions).
    #[error("{}: bad header: {reason}", .path.display())]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A label is not a valid class index.
    #[error("{}: label {label} of record {index} is out of range (the dataset has {classes} classes: 0..={max})", .path.display(), max = .classes.saturating_sub(1))]
    LabelOutOfRange {
        /// The file holding the label.
        path: PathBuf,
        /// Index of the record (0-based).
        index: usize,
        /// The label found.
        label: u32,
        /// Number of classes of the dataset.
        classes: usize,
    },
    /// The number of images and of labels differ.
    #[error("{}: {images} images but {} has {labels} labels", .images_path.display(), .labels_path.display())]
    CountMismatch {
        /// The image file.
        images_path: PathBuf,
        /// The label file.
        labels_path: PathBuf,
        /// Number of images.
        images: usize,
        /// Number of labels.
        labels: usize,
    },
    /// An image has another size or channel count than the rest of the dataset.
    #[error("{}: image is {found_height}x{found_width} with {found_channels} channel(s), expected {height}x{width} with {channels} channel(s)", .path.display())]
    ImageShape {
        /// The image file.
        path: PathBuf,
        /// Expected height.
        height: usize,
        /// Expected width.
        width: usize,
        /// Expected channel count.
        channels: usize,
        /// Height found.
        found_height: usize,
        /// Width found.
        found_width: usize,
        /// Channel count found.
        found_channels: usize,
    },
    /// An image file cannot be decoded.
    #[error("{}: cannot decode image: {reason}", .path.display())]
    Decode {
        /// The image file.
        path: PathBuf,
        /// The decoder's message.
        reason: String,
    },
    /// A directory or file holds no records.
    #[error("{}: empty: {what}", .path.display())]
    Empty {
        /// The directory or file.
        path: PathBuf,
        /// What was expected in it.
        what: String,
    },
    /// A request that the dataset cannot satisfy (e.g. more images per class than it holds).
    #[error("{}: {reason}", .path.display())]
    Request {
        /// The dataset's source.
        path: PathBuf,
        /// What cannot be done.
        reason: String,
    },
}

fn also_tried(tried: &[String]) -> String {
    if tried.is_empty() {
        String::new()
    } else {
        format!(" (also tried: {})", tried.join(", "))
    }
}

impl DataError {
    /// Wraps an I/O error for `path`.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// An error writing `path` ([`DataError::Write`]).
    pub(crate) fn write(path: &Path, source: std::io::Error) -> Self {
        DataError::Write {
            path: path.to_path_buf(),
            source,
        }
    }

    /// An error opening or reading `path`: a missing file is `MissingFile`, anything else (a
    /// permission, an I/O failure) is `Io` with its cause.
    pub(crate) fn open(path: &Path, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            DataError::MissingFile {
                path: path.to_path_buf(),
                tried: Vec::new(),
            }
        } else {
            DataError::io(path, source)
        }
    }

    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            DataError::MissingDirectory { path }
            | DataError::NotADirectory { path }
            | DataError::MissingFile { path, .. }
            | DataError::Io { path, .. }
            | DataError::Write { path, .. }
            | DataError::Truncated { path, .. }
            | DataError::UnexpectedLength { path, .. }
            | DataError::TooLarge { path, .. }
            | DataError::BadMagic { path, .. }
            | DataError::BadHeader { path, .. }
            | DataError::LabelOutOfRange { path, .. }
            | DataError::ImageShape { path, .. }
            | DataError::Decode { path, .. }
            | DataError::Empty { path, .. }
            | DataError::Request { path, .. } => path,
            DataError::CountMismatch { images_path, .. } => images_path,
        }
    }
}

/// Checks that `dir` exists and is a directory.
pub(crate) fn require_dir(dir: &Path) -> Result<(), DataError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(DataError::NotADirectory {
            path: dir.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(DataError::MissingDirectory {
            path: dir.to_path_buf(),
        }),
        Err(source) => Err(DataError::Io {
            path: dir.to_path_buf(),
            source,
        }),
    }
}
