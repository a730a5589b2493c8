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
use std::sync::Arc;

use super::error::require_dir;
use super::error::DataError;
use super::image_array::ImageArray;
use super::stream::ImageSource;
use super::stream::{luma_601, DecodedImage};

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

/// An image file of `len` bytes holds a whole number of images, at least one.
fn check_length(path: &Path, len: usize) -> Result<(), DataError> {
    if len == 0 {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
            what: format!("no images (each is {IMAGE_BYTES} bytes)"),
        });
    }
    if !len.is_multiple_of(IMAGE_BYTES) {
        let whole = len / IMAGE_BYTES;
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "last image incomplete",
            expected: ((whole + 1) * IMAGE_BYTES) as u64,
            found: len as u64,
        });
    }
    Ok(())
}

/// The image and label files of a split.
fn split_files(split: Split) -> (&'static str, Option<&'static str>) {
    match split {
        Split::Train => ("train_X.bin", Some("train_y.bin")),
        Split::Test => ("test_X.bin", Some("test_y.bin")),
        Split::Unlabeled => ("unlabeled_X.bin", None),
    }
}

/// Converts STL-10 images (planar, column-major) into HWC row-major bytes.
pub fn parse_images(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, DataError> {
    check_length(path, bytes.len())?;
    let mut out = vec![0u8; bytes.len()];
    for (img, dst) in bytes
        .chunks_exact(IMAGE_BYTES)
        .zip(out.chunks_exact_mut(IMAGE_BYTES))
    {
        planar_to_hwc(img, dst);
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
    let (x, y) = split_files(split);
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

/// Lays one STL-10 image (planar, column-major) out as height × width × channel bytes in `dst`.
fn planar_to_hwc(img: &[u8], dst: &mut [u8]) {
    let plane = SIDE * SIDE;
    for c in 0..3 {
        for x in 0..SIDE {
            for y in 0..SIDE {
                dst[(y * SIDE + x) * 3 + c] = img[c * plane + x * SIDE + y];
            }
        }
    }
}

/// A split of STL-10 read image by image from its binary file, for streaming
/// ([`StreamLoader`](super::stream::StreamLoader)): the 100,000 unlabeled images are 2.6 GiB
/// decoded, and a streamed run holds only the batches being built. Each item is its 27,648
/// bytes, read where it lies and laid out as 96 × 96 × 3 when decoded
/// ([`ImageSource::decode`]).
#[derive(Debug, Clone)]
pub struct Stl10Images {
    root: PathBuf,
    path: PathBuf,
    /// The images of the file this set holds, in order (all of them when `None`).
    indices: Option<Arc<[u32]>>,
    count: usize,
    labels: Option<Arc<[u16]>>,
    class_names: Vec<String>,
}

impl Stl10Images {
    /// The images of `split` in `dir` (`stl10_binary` or its parent), with the labels of the
    /// labelled splits; no image is read.
    ///
    /// # Errors
    /// A missing file, an image file whose length is not a whole number of images, or labels
    /// out of range or not one per image.
    pub fn open(dir: impl AsRef<Path>, split: Split) -> Result<Self, DataError> {
        let root = resolve(dir.as_ref())?;
        let (x, y) = split_files(split);
        let path = root.join(x);
        let len = std::fs::metadata(&path)
            .map_err(|e| DataError::open(&path, e))?
            .len() as usize;
        check_length(&path, len)?;
        let count = len / IMAGE_BYTES;
        let labels = match y {
            Some(y) => {
                let yp = root.join(y);
                let labels = parse_labels(&yp, &read(&yp)?)?;
                if labels.len() != count {
                    return Err(DataError::CountMismatch {
                        images_path: path,
                        labels_path: yp,
                        images: count,
                        labels: labels.len(),
                    });
                }
                Some(labels.into())
            }
            None => None,
        };
        let class_names = match std::fs::read_to_string(root.join("class_names.txt")) {
            Ok(s) if labels.is_some() => s.lines().map(|l| l.trim().to_string()).collect(),
            _ if labels.is_some() => (0..NUM_CLASSES).map(|c| c.to_string()).collect(),
            _ => Vec::new(),
        };
        Ok(Self {
            root,
            path,
            indices: None,
            count,
            labels,
            class_names,
        })
    }

    /// The folder of the binaries.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The class names (empty for the unlabeled split).
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The images `indices` of this set, in that order.
    pub fn subset(&self, indices: &[usize]) -> Self {
        let of_file: Vec<u32> = indices.iter().map(|&i| self.in_file(i) as u32).collect();
        Self {
            indices: Some(of_file.into()),
            count: indices.len(),
            ..self.clone()
        }
    }

    /// Item `index`'s place in the file.
    fn in_file(&self, index: usize) -> usize {
        self.indices.as_ref().map_or(index, |i| i[index] as usize)
    }
}

impl ImageSource for Stl10Images {
    fn len(&self) -> usize {
        self.count
    }

    fn read(&self, index: usize) -> Result<Vec<u8>, DataError> {
        use std::io::{Read, Seek, SeekFrom};
        let at = self.in_file(index) * IMAGE_BYTES;
        let mut file =
            std::fs::File::open(&self.path).map_err(|e| DataError::open(&self.path, e))?;
        file.seek(SeekFrom::Start(at as u64))
            .map_err(|e| DataError::io(&self.path, e))?;
        let mut bytes = vec![0; IMAGE_BYTES];
        file.read_exact(&mut bytes)
            .map_err(|e| DataError::io(&self.path, e))?;
        Ok(bytes)
    }

    fn label(&self, index: usize) -> Option<u16> {
        self.labels.as_ref().map(|l| l[self.in_file(index)])
    }

    fn name(&self, index: usize) -> PathBuf {
        self.path.join(self.in_file(index).to_string())
    }

    fn decode(
        &self,
        index: usize,
        bytes: &[u8],
        channels: usize,
    ) -> Result<DecodedImage, DataError> {
        if bytes.len() != IMAGE_BYTES {
            return Err(DataError::Truncated {
                path: self.name(index),
                what: "STL-10 image",
                expected: IMAGE_BYTES as u64,
                found: bytes.len() as u64,
            });
        }
        let mut rgb = vec![0; IMAGE_BYTES];
        planar_to_hwc(bytes, &mut rgb);
        let pixels = if channels == 1 { luma_601(&rgb) } else { rgb };
        Ok(DecodedImage {
            height: SIDE,
            width: SIDE,
            channels,
            pixels,
        })
    }

    fn byte_size(&self, _index: usize) -> Option<u64> {
        Some(IMAGE_BYTES as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder of STL-10 binaries: `train` labelled images and `unlabeled` ones, each byte a
    /// function of (image, plane, position) so that a wrong layout shows.
    fn binaries(name: &str, train: usize, unlabeled: usize) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "curriculum-ssl-stl10-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let images = |n: usize, salt: usize| -> Vec<u8> {
            (0..n * IMAGE_BYTES)
                .map(|b| ((b / IMAGE_BYTES) * 31 + b * 7 + salt + b / (SIDE * SIDE) * 50) as u8)
                .collect()
        };
        std::fs::write(dir.join("train_X.bin"), images(train, 0)).unwrap();
        std::fs::write(
            dir.join("train_y.bin"),
            (0..train).map(|i| (i % 10 + 1) as u8).collect::<Vec<u8>>(),
        )
        .unwrap();
        std::fs::write(dir.join("unlabeled_X.bin"), images(unlabeled, 3)).unwrap();
        dir
    }

    /// Each streamed image is the in-memory reader's, byte for byte (RGB, and luma as the
    /// stream's decoder converts), with its label; a subset reads its images; a file cut in an
    /// image is refused when opened, as when read whole.
    #[test]
    fn streamed_images_are_the_in_memory_ones() {
        let dir = binaries("stream", 4, 5);
        let memory = load(&dir, Split::Train).unwrap();
        let streamed = Stl10Images::open(&dir, Split::Train).unwrap();
        assert_eq!(streamed.len(), 4);
        assert_eq!(streamed.class_names().len(), NUM_CLASSES);
        for i in 0..4 {
            let bytes = streamed.read(i).unwrap();
            let image = streamed.decode(i, &bytes, 3).unwrap();
            assert_eq!((image.height, image.width), (SIDE, SIDE));
            assert_eq!(image.pixels, memory.pixels(i).unwrap());
            assert_eq!(streamed.label(i), memory.labels().map(|l| l[i]));
            let grey = streamed.decode(i, &bytes, 1).unwrap();
            assert_eq!(grey.pixels, luma_601(&image.pixels));
        }
        let some = streamed.subset(&[3, 1]);
        assert_eq!(some.len(), 2);
        assert_eq!(some.read(0).unwrap(), streamed.read(3).unwrap());
        assert_eq!(some.label(1), streamed.label(1));
        let unlabeled = Stl10Images::open(&dir, Split::Unlabeled).unwrap();
        assert_eq!((unlabeled.len(), unlabeled.label(0)), (5, None));
        assert!(unlabeled.class_names().is_empty());

        let mut cut = std::fs::read(dir.join("unlabeled_X.bin")).unwrap();
        cut.truncate(cut.len() - 10);
        std::fs::write(dir.join("unlabeled_X.bin"), cut).unwrap();
        let e = Stl10Images::open(&dir, Split::Unlabeled).unwrap_err();
        assert!(e.to_string().contains("last image incomplete"), "{e}");
        let e = streamed.decode(0, &[0; 10], 3).unwrap_err();
        assert!(e.to_string().contains("STL-10 image"), "{e}");
    }
}
