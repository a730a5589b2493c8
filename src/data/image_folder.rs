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

use std::path::{Path, PathBuf};

use super::error::require_dir;
use super::{DataError, ImageArray};

/// How to read an image folder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageFolderOptions {
    /// Convert every image to this many channels (1 or 3). `None`: keep the decoded channel count,
    /// which must then be the same (1 or 3) for all images.
    pub channels: Option<usize>,
    /// Required `(height, width)`. `None`: the size of the first image.
    pub size: Option<(usize, usize)>,
    /// Resize every image to `size` (bilinear, `image`'s triangle filter) instead of requiring
    /// it; needs `size`.
    pub resize: bool,
    /// Decoding threads (`0` = all available cores).
    pub threads: usize,
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
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

/// Decodes one image file into `(height, width, channels, HWC bytes)`, converted to `channels`
/// when given.
///
/// The size the header declares is checked against the file's length first (see
/// [`MAX_DECODED_PER_FILE_BYTE`]), and the decoder's own allocations are capped by the same
/// amount, so a small corrupt file cannot make it allocate gigabytes.
pub fn decode(
    path: &Path,
    channels: Option<usize>,
) -> Result<(usize, usize, usize, Vec<u8>), DataError> {
    use image::ImageDecoder;
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let bad = |reason: String| DataError::Decode {
        path: path.to_path_buf(),
        reason,
    };
    let most = (bytes.len() as u64).saturating_mul(MAX_DECODED_PER_FILE_BYTE);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(limits.max_alloc.map_or(most, |m| m.min(most)));
    let mut reader = image::ImageReader::new(std::io::Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?;
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(|e| bad(e.to_string()))?;
    let declared = decoder.total_bytes();
    if declared > most {
        let (w, h) = decoder.dimensions();
        return Err(bad(format!(
            "the header declares {w}x{h} {:?} pixels ({declared} bytes), more than a file of {} \
             bytes can hold (at most {MAX_DECODED_PER_FILE_BYTE} per byte)",
            decoder.color_type(),
            bytes.len()
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

/// An image `(h, w, c, HWC bytes)` resized to `(height, width)` with the triangle filter.
fn resized(
    (h, w, c, data): (usize, usize, usize, Vec<u8>),
    (height, width): (usize, usize),
) -> (usize, usize, usize, Vec<u8>) {
    use image::imageops::{resize, FilterType};
    if (h, w) == (height, width) {
        return (h, w, c, data);
    }
    let (nw, nh) = (width as u32, height as u32);
    let out = if c == 1 {
        let img = image::GrayImage::from_raw(w as u32, h as u32, data).expect("h·w bytes");
        resize(&img, nw, nh, FilterType::Triangle).into_raw()
    } else {
        let img = image::RgbImage::from_raw(w as u32, h as u32, data).expect("h·w·3 bytes");
        resize(&img, nw, nh, FilterType::Triangle).into_raw()
    };
    (height, width, c, out)
}

/// Reads an image folder into a labeled array.
pub fn load(root: impl AsRef<Path>, options: ImageFolderOptions) -> Result<ImageArray, DataError> {
    let root = root.as_ref();
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
    let decode = |path: &Path, channels: Option<usize>| {
        let decoded = decode(path, channels)?;
        match options.size {
            Some(size) if options.resize => Ok(resized(decoded, size)),
            _ => Ok(decoded),
        }
    };
    let (files, classes) = scan(root)?;
    let (h0, w0, c0, first) = decode(&files[0].0, options.channels)?;
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
    check(&files[0].0, h0, w0, c0)?;
    let threads = if options.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        options.threads
    };
    let rest = &files[1..];
    let chunk = rest.len().div_ceil(threads).max(1);
    // Each thread's buffer grows with the images it has decoded, rather than the whole array
    // being sized up front as the first image times the number of files: a folder of garbage
    // files behind one large image must not allocate for images that never decode.
    let results: Vec<Result<Vec<u8>, DataError>> = std::thread::scope(|s| {
        let handles: Vec<_> = rest
            .chunks(chunk)
            .map(|fs| {
                s.spawn(move || -> Result<Vec<u8>, DataError> {
                    let mut out = Vec::new();
                    for (path, _) in fs {
                        let (fh, fw, fc, data) = decode(path, options.channels)?;
                        check(path, fh, fw, fc)?;
                        out.extend_from_slice(&data);
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DataError::Request {
                        path: root.to_path_buf(),
                        reason: "an image decoding thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    // Chunks are in file order, so the first error reported is the first bad file's.
    let parts = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut pixels = first;
    pixels.reserve_exact(parts.iter().map(Vec::len).sum());
    for part in parts {
        pixels.extend_from_slice(&part);
    }
    let labels = files.iter().map(|(_, l)| *l).collect();
    Ok(
        ImageArray::new(root, h, w, c, pixels, Some(labels), classes.len())?
            .with_class_names(classes),
    )
}

/// Reads an image folder without labels, for pretraining.
pub fn load_unlabeled(
    root: impl AsRef<Path>,
    options: ImageFolderOptions,
) -> Result<ImageArray, DataError> {
    Ok(load(root, options)?.unlabeled())
}
