//! A folder of class sub-folders of PNG / JPEG images (torchvision's `ImageFolder` layout).
//!
//! ```text
//! root/
//!   cat/ 001.png 002.jpg …
//!   dog/ a.jpeg …
//! ```
//!
//! Classes are the sub-folder names in byte order (label = position); files are read in name
//! order. All images must have the same size; the channel count is either that of the first image
//! (then every image must match) or a requested one (1 = luma, 3 = RGB) that every image is
//! converted to. Hidden entries (names starting with `.`) are ignored; any other file that is not
//! `.png`, `.jpg` or `.jpeg` is an error, as are empty class folders. This layout also covers
//! SVHN, Flowers102 or any user data once exported to folders (resized to one size).
//!
//! Decoding runs on all available cores when the folder is opened.
//!
//! [`scan_images`] and [`load_images`] read a folder of images without classes instead: flat or
//! nested to any depth (sub-folders are only places, not labels), files in path order, any other
//! file skipped, every image resized and centre-cropped to one size when one is given — the
//! input of self-supervised pre-training on one's own data.

use std::path::{Path, PathBuf};

use super::error::require_dir;
use super::error::DataError;
use super::image_array::ImageArray;

/// How to read an image folder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageFolderOptions {
    /// Convert every image to this many channels (1 or 3). `None`: keep the decoded channel count,
    /// which must then be the same (1 or 3) for all images.
    pub channels: Option<usize>,
    /// Required `(height, width)`. `None`: the size of the first image.
    pub size: Option<(usize, usize)>,
    /// Resize every image to cover `size` (its aspect ratio kept, bilinear: `image`'s triangle
    /// filter) and crop the centre to `size` — torchvision's `Resize` then `CenterCrop` —
    /// instead of requiring it; needs `size`.
    pub resize: bool,
    /// Decoding threads (`0` = all available cores).
    pub threads: usize,
}

pub(crate) fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        let e = e.map_err(|e| DataError::io(dir, e))?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        entries.push(e.path());
    }
    entries.sort();
    Ok(entries)
}

fn is_image(path: &Path) -> bool {
    path.extension()
        .map(|e| {
            let e = e.to_string_lossy().to_ascii_lowercase();
            e == "png" || e == "jpg" || e == "jpeg"
        })
        .unwrap_or(false)
}

/// The `(file, label)` pairs of an image folder and its class names.
pub type Listing = (Vec<(PathBuf, u16)>, Vec<String>);

/// Lists `(file, label)` pairs and the class names, checking the layout.
pub fn scan(root: &Path) -> Result<Listing, DataError> {
    require_dir(root)?;
    let entries = read_dir_sorted(root)?;
    let mut classes = Vec::new();
    let mut files = Vec::new();
    for e in &entries {
        if !e.is_dir() {
            return Err(DataError::Request {
                path: e.clone(),
                reason: "a file at the top of an image folder: images must be inside class \
                         sub-folders"
                    .into(),
            });
        }
    }
    if entries.is_empty() {
        return Err(DataError::Empty {
            path: root.to_path_buf(),
            what: "no class sub-folders".into(),
        });
    }
    if entries.len() > u16::MAX as usize {
        return Err(DataError::Request {
            path: root.to_path_buf(),
            reason: format!("{} classes, at most {} supported", entries.len(), u16::MAX),
        });
    }
    for (label, class_dir) in entries.iter().enumerate() {
        let name = class_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let class_files = read_dir_sorted(class_dir)?;
        if class_files.is_empty() {
            return Err(DataError::Empty {
                path: class_dir.clone(),
                what: "class folder without images".into(),
            });
        }
        for f in class_files {
            if f.is_dir() {
                // (A folder named `x.jpg` was called "not a .png, .jpg or .jpeg file".)
                return Err(DataError::Decode {
                    path: f,
                    reason: "a folder inside a class folder: the in-memory reader takes a \
                             class's images from its folder alone (`--stream true` reads them \
                             at any depth)"
                        .into(),
                });
            }
            if let (Err(e), Ok(_)) = (std::fs::metadata(&f), std::fs::symlink_metadata(&f)) {
                let reason = match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        "a link to a file that is not there (a dangling symbolic link)".to_string()
                    }
                    _ => format!("a link that cannot be followed ({e})"),
                };
                return Err(DataError::Decode { path: f, reason });
            }
            if !f.is_file() || !is_image(&f) {
                return Err(DataError::Decode {
                    path: f,
                    reason: "not a .png, .jpg or .jpeg file".into(),
                });
            }
            files.push((f, label as u16));
        }
        classes.push(name);
    }
    Ok((files, classes))
}

/// The most bytes a decoded image may have per byte of its file: 1032 × 32, deflate's largest
/// expansion (PNG) times the 32 bits of an RGBA pixel decoded from a 1-bit palette index. JPEG
/// stays far below (a few bits per 8 × 8 block at the very least). A header declaring a larger
/// image than its file can hold is rejected before the decoder allocates its pixels.
pub const MAX_DECODED_PER_FILE_BYTE: u64 = 1032 * 32;

/// The most bytes one decoded image may take, whatever its file's size: 512 MiB (the `image`
/// crate's own default allocation limit; a 16384 × 8192 RGBA image). A 10 MB PNG of zeros can
/// honestly declare 60000 × 60000 pixels (deflate compresses zeros a thousandfold), so the
/// per-byte bound alone does not stop such a decompression bomb.
pub const MAX_IMAGE_BYTES: u64 = 512 << 20;

/// The largest image file read: 256 MiB (the whole file is read before it is decoded).
pub const MAX_FILE_BYTES: u64 = 256 << 20;

/// Decodes one image file into `(height, width, channels, HWC bytes)`, converted to `channels`
/// when given.
///
/// Only a regular file is opened (a FIFO named `x.png` would block the reader forever). The
/// size the header declares is checked against the file's length (see
/// [`MAX_DECODED_PER_FILE_BYTE`]) and against [`MAX_IMAGE_BYTES`] before the decoder allocates
/// its pixels, and the decoder's own allocations are capped by the same amount, so neither a
/// small corrupt file nor a decompression bomb can make it allocate gigabytes.
pub fn decode(
    path: &Path,
    channels: Option<usize>,
) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    let bytes = read_image_file(path)?;
    decode_bytes(path, &bytes, channels)
}

/// Whether `bytes` start like a JPEG file (SOI marker then another marker).
pub(crate) fn is_jpeg(bytes: &[u8]) -> bool {
    bytes.len() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF
}

/// Whether a JPEG stream has an end-of-image marker (`FF D9`) after the start of its first
/// scan (`FF DA`), found by walking the marker segments from the start-of-image marker by
/// their lengths: an embedded thumbnail (inside an APP segment, skipped whole) and data
/// appended after the image (a Motion Photo's video, whose bytes may hold `FF DA` anywhere)
/// are not taken for the image's scans. Inside entropy-coded data a `FF` byte is always
/// followed by `00` or a restart marker, so `FF D9` cannot occur there by chance. A stream
/// whose segments cannot be walked to a scan is left to the decoder (true here).
pub(crate) fn ends_its_scan(bytes: &[u8]) -> bool {
    let mut at = 2; // past SOI
    while at + 1 < bytes.len() {
        if bytes[at] != 0xFF {
            return true; // not a marker where one belongs: the decoder's to judge
        }
        let marker = bytes[at + 1];
        match marker {
            // Fill bytes before a marker.
            0xFF => at += 1,
            0xDA => return bytes[at..].windows(2).any(|w| w == [0xFF, 0xD9]),
            // Markers without a length: TEM, RSTn, SOI, EOI.
            0x01 | 0xD0..=0xD9 => at += 2,
            _ => {
                let Some(len) = bytes.get(at + 2..at + 4) else {
                    return false; // cut inside the headers
                };
                at += 2 + usize::from(u16::from_be_bytes([len[0], len[1]]));
            }
        }
    }
    false // cut before its first scan
}

/// Reads the bytes of one image file: only a regular file (a FIFO named `x.png` would block the
/// reader forever), and at most [`MAX_FILE_BYTES`].
pub fn read_image_file(path: &Path) -> Result<Vec<u8>, DataError> {
    let bad = |reason: String| DataError::Decode {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?;
    if !meta.is_file() {
        return Err(bad(
            "not a regular file (a FIFO, socket or device): not read".into(),
        ));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(bad(format!(
            "{} bytes: larger than the {} MiB an image file may have",
            meta.len(),
            MAX_FILE_BYTES >> 20
        )));
    }
    std::fs::read(path).map_err(|e| DataError::io(path, e))
}

/// Decodes the bytes of one image file (`path` names it in errors) into `(height, width,
/// channels, HWC bytes)`, with the bounds of [`decode`] on the declared size. A truncated JPEG
/// (no end-of-image marker after its scans) is an error, as in Pillow.
pub fn decode_bytes(
    path: &Path,
    bytes: &[u8],
    channels: Option<usize>,
) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    use image::ImageDecoder;
    let bad = |reason: String| DataError::Decode {
        path: path.to_path_buf(),
        reason,
    };
    let by_file = (bytes.len() as u64).saturating_mul(MAX_DECODED_PER_FILE_BYTE);
    let most = by_file.min(MAX_IMAGE_BYTES);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(limits.max_alloc.map_or(most, |m| m.min(most)));
    let mut reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?;
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(|e| bad(e.to_string()))?;
    // The JPEG decoders fill a scan cut short with grey and carry on; Pillow refuses such a file
    // ("image file is truncated"), and so do the readers here (in memory and streamed).
    if is_jpeg(bytes) && !ends_its_scan(bytes) {
        return Err(bad(
            "a truncated JPEG: no end-of-image marker after its scans".into(),
        ));
    }
    let declared = decoder.total_bytes();
    if declared > most {
        let (w, h) = decoder.dimensions();
        let bound = if by_file <= MAX_IMAGE_BYTES {
            format!(
                "more than a file of {} bytes can hold (at most {MAX_DECODED_PER_FILE_BYTE} per \
                 byte)",
                bytes.len()
            )
        } else {
            format!(
                "more than the {} MiB one image may decode to",
                MAX_IMAGE_BYTES >> 20
            )
        };
        return Err(bad(format!(
            "the header declares {w}x{h} {:?} pixels ({declared} bytes), {bound}",
            decoder.color_type(),
        )));
    }
    let img = image::DynamicImage::from_decoder(decoder).map_err(|e| bad(e.to_string()))?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let native = img.color().channel_count() as usize;
    let want = match channels {
        Some(c) => c,
        None => native,
    };
    let data = match want {
        1 => img.into_luma8().into_raw(),
        3 => img.into_rgb8().into_raw(),
        _ => {
            return Err(DataError::ImageShape {
                path: path.to_path_buf(),
                height: h,
                width: w,
                channels: 3,
                found_height: h,
                found_width: w,
                found_channels: want,
            })
        }
    };
    Ok((h, w, want, data))
}

/// An image `(h, w, c, HWC bytes)` resized, its aspect ratio kept, to the smallest size that
/// covers `(height, width)` (triangle filter), then cropped to `(height, width)` around its
/// centre.
fn resized(
    (h, w, c, data): (usize, usize, usize, Vec<u8>),
    (height, width): (usize, usize),
) -> (usize, usize, usize, Vec<u8>) {
    use image::imageops::{resize, FilterType};
    if (h, w) == (height, width) {
        return (h, w, c, data);
    }
    // The scale that makes both sides at least the target's; the side it binds is exact.
    let scale = (height as f64 / h as f64).max(width as f64 / w as f64);
    let nh = ((h as f64 * scale).round() as usize).max(height);
    let nw = ((w as f64 * scale).round() as usize).max(width);
    let scaled = if (nh, nw) == (h, w) {
        data
    } else if c == 1 {
        let img = image::GrayImage::from_raw(w as u32, h as u32, data).expect("h·w bytes");
        resize(&img, nw as u32, nh as u32, FilterType::Triangle).into_raw()
    } else {
        let img = image::RgbImage::from_raw(w as u32, h as u32, data).expect("h·w·3 bytes");
        resize(&img, nw as u32, nh as u32, FilterType::Triangle).into_raw()
    };
    let (top, left) = ((nh - height) / 2, (nw - width) / 2);
    let mut out = Vec::with_capacity(height * width * c);
    for row in top..top + height {
        let start = (row * nw + left) * c;
        out.extend_from_slice(&scaled[start..start + width * c]);
    }
    (height, width, c, out)
}

/// Reads an image folder into a labeled array.
pub fn load(root: impl AsRef<Path>, options: ImageFolderOptions) -> Result<ImageArray, DataError> {
    let root = root.as_ref();
    check_options(root, options)?;
    let (files, classes) = scan(root)?;
    let paths: Vec<PathBuf> = files.iter().map(|(f, _)| f.clone()).collect();
    let (h, w, c, pixels) = decode_all(root, &paths, options)?;
    let labels = files.iter().map(|(_, l)| *l).collect();
    Ok(
        ImageArray::new(root, h, w, c, pixels, Some(labels), classes.len())?
            .with_class_names(classes),
    )
}

/// Checks the channel count and that resizing has a size.
fn check_options(root: &Path, options: ImageFolderOptions) -> Result<(), DataError> {
    if let Some(c) = options.channels {
        if c != 1 && c != 3 {
            return Err(DataError::Request {
                path: root.to_path_buf(),
                reason: format!("channels must be 1 or 3, got {c}"),
            });
        }
    }
    if options.resize && options.size.is_none() {
        return Err(DataError::Request {
            path: root.to_path_buf(),
            reason: "resizing needs a size".into(),
        });
    }
    Ok(())
}

/// Decodes `files` (at least one) on the option's threads into one HWC buffer of equal-size
/// images: `(height, width, channels, pixels)`.
/// Decodes `files` (of the folder `root`) with `options`: `(height, width, channels, pixels)`.
pub(crate) fn decode_listed(
    root: &Path,
    files: &[PathBuf],
    options: ImageFolderOptions,
) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    check_options(root, options)?;
    decode_all(root, files, options)
}

fn decode_all(
    root: &Path,
    files: &[PathBuf],
    options: ImageFolderOptions,
) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    let decode = |path: &Path, channels: Option<usize>| {
        let decoded = decode(path, channels)?;
        match options.size {
            Some(size) if options.resize => Ok(resized(decoded, size)),
            _ => Ok(decoded),
        }
    };
    let (h0, w0, c0, first) = decode(&files[0], options.channels)?;
    let (h, w) = options.size.unwrap_or((h0, w0));
    let c = options.channels.unwrap_or(c0);
    let check = |path: &Path, fh: usize, fw: usize, fc: usize| {
        if (fh, fw, fc) != (h, w, c) {
            Err(DataError::ImageShape {
                path: path.to_path_buf(),
                height: h,
                width: w,
                channels: c,
                found_height: fh,
                found_width: fw,
                found_channels: fc,
            })
        } else {
            Ok(())
        }
    };
    check(&files[0], h0, w0, c0)?;
    let threads = if options.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        options.threads
    };
    // Each thread's buffer grows with the images it has decoded, rather than the whole array
    // being sized up front as the first image times the number of files: a folder of garbage
    // files behind one large image must not allocate for images that never decode.
    let parts = in_parts(1..files.len(), threads, root, |part| {
        let mut out = Vec::new();
        for path in &files[part] {
            let (fh, fw, fc, data) = decode(path, options.channels)?;
            check(path, fh, fw, fc)?;
            out.extend_from_slice(&data);
        }
        Ok(out)
    })?;
    let mut pixels = first;
    pixels.reserve_exact(parts.iter().map(Vec::len).sum());
    for part in parts {
        pixels.extend_from_slice(&part);
    }
    Ok((h, w, c, pixels))
}

/// `work` on up to `threads` contiguous parts of `range`, each on a scoped thread, the results
/// in the range's order; the first error is that of the earliest part (so the first bad file's,
/// parts being in file order), and a thread that panicked is an error naming `what`.
pub(crate) fn in_parts<T: Send>(
    range: std::ops::Range<usize>,
    threads: usize,
    what: &Path,
    work: impl Fn(std::ops::Range<usize>) -> Result<T, DataError> + Sync,
) -> Result<Vec<T>, DataError> {
    if range.is_empty() {
        return Ok(Vec::new());
    }
    let per = range.len().div_ceil(threads.max(1));
    let parts: Vec<std::ops::Range<usize>> = (range.start..range.end)
        .step_by(per)
        .map(|s| s..(s + per).min(range.end))
        .collect();
    let work = &work;
    let results: Vec<Result<T, DataError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| scope.spawn(move || work(part)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DataError::Request {
                        path: what.to_path_buf(),
                        reason: "an image decoding thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

/// The image files (`.png`, `.jpg`, `.jpeg`) under `root`, at any depth, in path order, and
/// the number of files skipped for not being named as images. Hidden entries (names starting
/// with `.`) are not entered. Links are followed, but a folder is read once however many links
/// lead to it (a link to a folder above it would otherwise be read again at every depth the
/// system allows), with a warning; what is named like an image but is not a regular file (a
/// FIFO, a socket, a device) and an entry that cannot be looked at (a dangling link) are
/// skipped with a warning naming each, and not counted again among the files that are not
/// images.
///
/// # Errors
/// `root` is not a readable directory, or holds no image.
pub fn scan_images(root: &Path) -> Result<(Vec<PathBuf>, usize), DataError> {
    require_dir(root)?;
    let mut images = Vec::new();
    let mut skipped = 0;
    let mut seen = std::collections::HashSet::new();
    seen.insert(folder_identity(root)?);
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in read_dir_sorted(&dir)? {
            let meta = match std::fs::metadata(&entry) {
                Ok(meta) => meta,
                Err(e) => {
                    // Named here; not counted among the files that are not images.
                    log::warn!("{}: skipped ({e})", entry.display());
                    continue;
                }
            };
            if meta.is_dir() {
                if seen.insert(folder_identity(&entry)?) {
                    pending.push(entry);
                } else {
                    log::warn!(
                        "{}: a folder already read (a link back to a folder above it, or a \
                         second link to one): not read again",
                        entry.display()
                    );
                }
            } else if meta.is_file() && is_image(&entry) {
                images.push(entry);
            } else if is_image(&entry) {
                // Named here; not counted again among the files that are not images.
                log::warn!(
                    "{}: not a regular file (a FIFO, socket or device): skipped",
                    entry.display()
                );
            } else {
                skipped += 1;
            }
        }
    }
    if images.is_empty() {
        return Err(DataError::Empty {
            path: root.to_path_buf(),
            what: format!("no .png, .jpg or .jpeg image at any depth ({skipped} other files)"),
        });
    }
    images.sort();
    Ok((images, skipped))
}

/// What identifies a folder however it is reached: its device and inode on Unix, its canonical
/// path elsewhere.
fn folder_identity(dir: &Path) -> Result<(u64, u64, PathBuf), DataError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir).map_err(|e| DataError::io(dir, e))?;
        Ok((meta.dev(), meta.ino(), PathBuf::new()))
    }
    #[cfg(not(unix))]
    {
        let path = std::fs::canonicalize(dir).map_err(|e| DataError::io(dir, e))?;
        Ok((0, 0, path))
    }
}

/// Reads a folder of images without classes ([`scan_images`]) into an unlabeled array, images
/// in path order; returns the files too (row `i` of the array is `files[i]`).
///
/// Without `options.resize` every image must have the size of the first (or `options.size`).
pub fn load_images(
    root: impl AsRef<Path>,
    options: ImageFolderOptions,
) -> Result<(ImageArray, Vec<PathBuf>), DataError> {
    let root = root.as_ref();
    check_options(root, options)?;
    let (files, skipped) = scan_images(root)?;
    if skipped > 0 {
        log::warn!(
            "{}: {skipped} files that are not .png, .jpg or .jpeg skipped",
            root.display()
        );
    }
    let (h, w, c, pixels) = decode_all(root, &files, options)?;
    Ok((ImageArray::new(root, h, w, c, pixels, None, 0)?, files))
}

/// Reads an image folder without labels, for pretraining.
pub fn load_unlabeled(
    root: impl AsRef<Path>,
    options: ImageFolderOptions,
) -> Result<ImageArray, DataError> {
    Ok(load(root, options)?.unlabeled())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "curriculum-ssl-image-folder-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn gray(path: &Path, w: u32, h: u32, value: impl Fn(u32, u32) -> u8) {
        image::GrayImage::from_fn(w, h, |x, y| image::Luma([value(x, y)]))
            .save(path)
            .unwrap();
    }

    /// The paths of `files` below `root`, as text.
    fn relative_names(files: &[PathBuf], root: &Path) -> Vec<String> {
        files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect()
    }

    /// A JPEG cut short in its scan decodes, in the `image` crate as in libjpeg, to an image
    /// whose missing rows are grey; the in-memory reader refuses it naming the file, as the
    /// streamed one does (it was loaded silently). The whole file still decodes.
    #[test]
    fn a_truncated_jpeg_is_refused_naming_it() {
        let mut good = Vec::new();
        image::RgbImage::from_fn(96, 96, |x, y| {
            image::Rgb([(x * 2) as u8, (y * 2) as u8, 128])
        })
        .write_with_encoder(image::codecs::jpeg::JpegEncoder::new_with_quality(
            &mut good, 95,
        ))
        .unwrap();
        let path = Path::new("train/a/cut.jpg");
        let (h, w, c, _) = decode_bytes(path, &good, Some(3)).unwrap();
        assert_eq!((h, w, c), (96, 96, 3));
        // Past the headers (a few hundred bytes), inside the scan.
        let cut = &good[..good.len() * 3 / 4];
        assert!(
            image::load_from_memory(cut).is_ok(),
            "the decoder itself accepts the cut file: the check is what refuses it"
        );
        let e = decode_bytes(path, cut, Some(3)).unwrap_err().to_string();
        assert!(
            e.contains("train/a/cut.jpg") && e.contains("a truncated JPEG"),
            "{e}"
        );
        // A whole image with data appended after its end (a Motion Photo's video) whose bytes
        // hold a start-of-scan marker and no end-of-image: still whole.
        let mut trailer = good.clone();
        trailer.extend_from_slice(b"ftypmp42\xFF\xDA\x00\x0c video bytes \x12\x34");
        let (h, w, _, _) = decode_bytes(path, &trailer, Some(3)).unwrap();
        assert_eq!((h, w), (96, 96));
    }

    #[test]
    fn a_wide_image_is_cropped_around_its_centre_when_no_scaling_is_needed() {
        // 2 rows × 4 columns to 2 × 2: the height binds (scale 1), columns 1 and 2 remain.
        let data: Vec<u8> = vec![0, 10, 20, 30, 40, 50, 60, 70];
        let (h, w, c, out) = resized((2, 4, 1, data), (2, 2));
        assert_eq!((h, w, c), (2, 2, 1));
        assert_eq!(out, vec![10, 20, 50, 60]);
        // A tall RGB image: rows 1 and 2 of 4.
        let data: Vec<u8> = (0..4 * 2 * 3).map(|i| i as u8).collect();
        let (_, _, _, out) = resized((4, 2, 3, data.clone()), (2, 2));
        assert_eq!(out, data[6..18].to_vec());
    }

    #[test]
    fn resizing_keeps_the_aspect_ratio_and_a_flat_image_flat() {
        // 10 × 20 to 5 × 5: scaled to 5 × 10, then cropped; a constant image stays constant.
        let (h, w, _, out) = resized((10, 20, 1, vec![77; 200]), (5, 5));
        assert_eq!((h, w), (5, 5));
        assert_eq!(out, vec![77; 25]);
    }

    #[test]
    fn images_are_found_at_any_depth_in_path_order_and_other_files_skipped() {
        let root = scratch("scan");
        std::fs::create_dir_all(root.join("b/deeper")).unwrap();
        std::fs::create_dir_all(root.join(".hidden")).unwrap();
        gray(&root.join("z.png"), 6, 4, |_, _| 10);
        gray(&root.join("b/a.png"), 4, 4, |_, _| 20);
        gray(&root.join("b/deeper/c.png"), 3, 9, |_, _| 30);
        gray(&root.join(".hidden/x.png"), 4, 4, |_, _| 40);
        std::fs::write(root.join("notes.txt"), "not an image").unwrap();
        let (files, skipped) = scan_images(&root).unwrap();
        let names = relative_names(&files, &root);
        assert_eq!(names, ["b/a.png", "b/deeper/c.png", "z.png"]);
        assert_eq!(skipped, 1);

        // Three sizes: refused without resizing, one 4 × 4 array with it.
        let options = ImageFolderOptions {
            channels: Some(1),
            size: None,
            resize: false,
            threads: 2,
        };
        assert!(matches!(
            load_images(&root, options),
            Err(DataError::ImageShape { .. })
        ));
        let (images, order) = load_images(
            &root,
            ImageFolderOptions {
                size: Some((4, 4)),
                resize: true,
                ..options
            },
        )
        .unwrap();
        assert_eq!(order, files);
        assert_eq!(images.image_shape(), (4, 4, 1));
        assert!(!images.is_labeled());
        assert_eq!(images.pixels(0).unwrap(), &[20; 16]);
        assert_eq!(images.pixels(1).unwrap(), &[30; 16]);
        assert_eq!(images.pixels(2).unwrap(), &[10; 16]);

        let empty = scratch("empty");
        std::fs::write(empty.join("a.txt"), "x").unwrap();
        assert!(matches!(scan_images(&empty), Err(DataError::Empty { .. })));
        let _ = std::fs::remove_dir_all(root);
        let _ = std::fs::remove_dir_all(empty);
    }

    #[test]
    fn channel_statistics_are_on_the_unit_scale() {
        // Two RGB pixels: red channel 0 and 255 (mean ½, std ½), green 51 twice (0.2, 0),
        // blue 0 and 102 (0.2, 0.2).
        let images =
            ImageArray::new("mem", 1, 2, 3, vec![0, 51, 0, 255, 51, 102], None, 0).unwrap();
        let (mean, std) = images.channel_stats();
        for (got, want) in mean.iter().zip([0.5, 0.2, 0.2]) {
            assert!((got - want).abs() < 1e-12, "{mean:?}");
        }
        for (got, want) in std.iter().zip([0.5, 0.0, 0.2]) {
            assert!((got - want).abs() < 1e-7, "{std:?}");
        }
    }

    /// A link back to a folder above it is read once (the system would otherwise follow it
    /// to its depth limit: 41 copies of every image), and a FIFO named like an image is skipped
    /// by the scan and refused by the decoder without being opened (opening it blocks until
    /// something writes to it).
    #[cfg(unix)]
    #[test]
    fn links_back_and_fifos_are_neither_followed_again_nor_opened() {
        let root = scratch("links");
        std::fs::create_dir_all(root.join("b")).unwrap();
        gray(&root.join("a.png"), 4, 4, |_, _| 10);
        gray(&root.join("b/c.png"), 4, 4, |_, _| 20);
        std::os::unix::fs::symlink(&root, root.join("b/loop")).unwrap();
        std::os::unix::fs::symlink(root.join("b"), root.join("b2")).unwrap();
        std::fs::write(root.join("notes.txt"), "not an image").unwrap();
        let fifo = root.join("x.png");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // On a thread: a scan or decode that opened the FIFO would never return.
        let (sender, answer) = std::sync::mpsc::channel();
        let (scan_root, fifo_path) = (root.clone(), fifo.clone());
        std::thread::spawn(move || {
            let scanned = scan_images(&scan_root).unwrap();
            let decoded = decode(&fifo_path, Some(1))
                .map(|_| ())
                .map_err(|e| e.to_string());
            let _ = sender.send((scanned, decoded));
        });
        let ((files, skipped), decoded) = answer
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the scan or the decoder blocked on the FIFO");
        let names = relative_names(&files, &root);
        // `b` is read once, by its first name in path order (b/ before b2/).
        assert_eq!(names, ["a.png", "b/c.png"]);
        // The FIFO is warned about by its name, not counted again as a file that is not an
        // image: only notes.txt is (it was counted twice, "2 files that are not .png…").
        assert_eq!(skipped, 1, "notes.txt alone");
        let err = decoded.unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        let _ = std::fs::remove_dir_all(root);
    }
}
