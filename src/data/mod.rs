//! Datasets read offline from the files a user has, and the loader that batches them.
//!
//! Every format is read into an [`ImageArray`]: all images of one split as `u8` pixels in
//! height × width × channel order, plus the labels when the split has them. An `ImageArray`
//! implements burn-dataset's [`Dataset`] trait with [`ImageItem`] items, is cheap to clone (the
//! pixels are shared) and can drop its labels ([`ImageArray::unlabeled`]) for pretraining.
//!
//! | format | reader |
//! |---|---|
//! | MNIST / Fashion-MNIST IDX (raw or `.gz`) | [`idx`] |
//! | CIFAR-10 / CIFAR-100 binary | [`cifar`] |
//! | STL-10 binary (train, test, unlabeled) | [`stl10`] |
//! | class sub-folders of PNG / JPEG | [`image_folder`] |
//! | the embedded Fashion-MNIST subset | [`embedded`] |
//!
//! Batches: [`HostBatch`] holds the bytes of a batch on the host (built on the loader's worker
//! threads, see [`loader`]); [`HostBatch::to_device`] uploads it as a `[N, C, H, W]` float tensor
//! in `[0, 1]` plus the labels.

pub mod cifar;
pub mod embedded;
pub mod error;
pub mod idx;
pub mod image_folder;
pub mod loader;
pub mod stl10;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::{backend::Backend, Int, Tensor, TensorData};
pub use burn_dataset::Dataset;

pub use error::DataError;
pub use loader::{Loader, LoaderConfig};

/// One image: `u8` pixels in height × width × channel order, its size and its label if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageItem {
    /// Pixels, `height * width * channels` bytes, row-major, channels last.
    pub pixels: Vec<u8>,
    /// Height in pixels.
    pub height: usize,
    /// Width in pixels.
    pub width: usize,
    /// Number of channels (1 or 3).
    pub channels: usize,
    /// Class index, or `None` for unlabeled data.
    pub label: Option<usize>,
}

/// All images of one split in memory, with their labels when the split has them.
///
/// Construction validates the input once (buffer size, labels in range), so [`Dataset::get`]
/// cannot fail for an index below [`Dataset::len`].
#[derive(Debug, Clone)]
pub struct ImageArray {
    source: PathBuf,
    height: usize,
    width: usize,
    channels: usize,
    len: usize,
    pixels: Arc<[u8]>,
    labels: Option<Arc<[u16]>>,
    num_classes: usize,
    class_names: Arc<[String]>,
}

impl ImageArray {
    /// Builds an array from `len` images of `height × width × channels` bytes each (HWC order),
    /// and optionally one label per image in `0..num_classes`.
    ///
    /// `source` is the file or directory the data came from; errors name it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        source: impl Into<PathBuf>,
        height: usize,
        width: usize,
        channels: usize,
        pixels: Vec<u8>,
        labels: Option<Vec<u16>>,
        num_classes: usize,
    ) -> Result<Self, DataError> {
        let source = source.into();
        let Some(per) = height
            .checked_mul(width)
            .and_then(|hw| hw.checked_mul(channels))
        else {
            return Err(DataError::BadHeader {
                path: source,
                reason: format!("image size {height}x{width}x{channels} overflows"),
            });
        };
        if per == 0 {
            return Err(DataError::BadHeader {
                path: source,
                reason: format!("image size {height}x{width}x{channels} has no pixels"),
            });
        }
        if !pixels.len().is_multiple_of(per) {
            return Err(DataError::UnexpectedLength {
                path: source,
                what: format!("a whole number of {height}x{width}x{channels} images"),
                expected: (pixels.len() / per * per) as u64,
                found: pixels.len() as u64,
            });
        }
        let len = pixels.len() / per;
        if let Some(labels) = &labels {
            if labels.len() != len {
                return Err(DataError::CountMismatch {
                    images_path: source.clone(),
                    labels_path: source,
                    images: len,
                    labels: labels.len(),
                });
            }
            if let Some((index, &label)) = labels
                .iter()
                .enumerate()
                .find(|(_, &l)| l as usize >= num_classes)
            {
                return Err(DataError::LabelOutOfRange {
                    path: source,
                    index,
                    label: label as u32,
                    classes: num_classes,
                });
            }
        }
        Ok(Self {
            source,
            height,
            width,
            channels,
            len,
            pixels: pixels.into(),
            labels: labels.map(Into::into),
            num_classes,
            class_names: Arc::from(Vec::new()),
        })
    }

    /// Attaches class names (index = label), e.g. the sub-folder names of an image folder.
    pub fn with_class_names(mut self, names: Vec<String>) -> Self {
        self.class_names = names.into();
        self
    }

    /// The same images without labels, for self-supervised pretraining.
    pub fn unlabeled(mut self) -> Self {
        self.labels = None;
        self
    }

    /// Whether the images carry labels.
    pub fn is_labeled(&self) -> bool {
        self.labels.is_some()
    }

    /// The file or directory the data was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// `(height, width, channels)` of every image.
    pub fn image_shape(&self) -> (usize, usize, usize) {
        (self.height, self.width, self.channels)
    }

    /// Number of classes (0 for a split that never had labels, such as STL-10's unlabeled one).
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// Class names when the format has them (image folders), else empty.
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The pixels of image `index` (HWC), or `None` past the end.
    pub fn pixels(&self, index: usize) -> Option<&[u8]> {
        let per = self.height * self.width * self.channels;
        (index < self.len).then(|| &self.pixels[index * per..(index + 1) * per])
    }

    /// The pixels of all images, `len × H × W × C` bytes.
    pub fn all_pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// Each channel's mean and standard deviation over every pixel of every image, on the
    /// `[0, 1]` scale the views are normalised on: the statistics a normalisation of this data
    /// would use (torchvision's `Normalize(mean, std)`).
    pub fn channel_stats(&self) -> (Vec<f64>, Vec<f64>) {
        let c = self.channels;
        let mut sum = vec![0u64; c];
        let mut squares = vec![0u64; c];
        for pixel in self.pixels.chunks_exact(c) {
            for (ch, &v) in pixel.iter().enumerate() {
                sum[ch] += u64::from(v);
                squares[ch] += u64::from(v) * u64::from(v);
            }
        }
        let n = (self.pixels.len() / c) as f64;
        let mean: Vec<f64> = sum.iter().map(|&s| s as f64 / n / 255.0).collect();
        let std = squares
            .iter()
            .zip(&mean)
            .map(|(&q, m)| (q as f64 / n / (255.0 * 255.0) - m * m).max(0.0).sqrt())
            .collect();
        (mean, std)
    }

    /// Concatenates arrays of the same image shape (e.g. STL-10's train and unlabeled splits).
    /// The result is labeled only if all parts are labeled with the same number of classes.
    pub fn concat(parts: &[ImageArray]) -> Result<Self, DataError> {
        let first = parts.first().ok_or_else(|| DataError::Request {
            path: PathBuf::from("<concat>"),
            reason: "nothing to concatenate".into(),
        })?;
        let mut pixels = Vec::new();
        let labeled = parts
            .iter()
            .all(|p| p.is_labeled() && p.num_classes == first.num_classes);
        let mut labels = Vec::new();
        for p in parts {
            if p.image_shape() != first.image_shape() {
                let (h, w, c) = first.image_shape();
                return Err(DataError::ImageShape {
                    path: p.source.clone(),
                    height: h,
                    width: w,
                    channels: c,
                    found_height: p.height,
                    found_width: p.width,
                    found_channels: p.channels,
                });
            }
            pixels.extend_from_slice(&p.pixels);
            if let (true, Some(l)) = (labeled, p.labels()) {
                labels.extend_from_slice(l);
            }
        }
        Self::new(
            first.source.clone(),
            first.height,
            first.width,
            first.channels,
            pixels,
            labeled.then_some(labels),
            if labeled { first.num_classes } else { 0 },
        )
    }

    /// The label of image `index`, or `None` when unlabeled or past the end.
    pub fn label(&self, index: usize) -> Option<usize> {
        self.labels
            .as_ref()
            .and_then(|l| l.get(index))
            .map(|&l| l as usize)
    }

    /// All labels, or `None` when unlabeled.
    pub fn labels(&self) -> Option<&[u16]> {
        self.labels.as_deref()
    }

    /// Number of images per class (`num_classes` entries), or `None` when unlabeled.
    pub fn class_histogram(&self) -> Option<Vec<usize>> {
        let labels = self.labels.as_ref()?;
        let mut hist = vec![0usize; self.num_classes];
        for &l in labels.iter() {
            hist[l as usize] += 1;
        }
        Some(hist)
    }

    /// A new array holding the images at `indices`, in that order (labels follow).
    pub fn select(&self, indices: &[usize]) -> Result<Self, DataError> {
        let per = self.height * self.width * self.channels;
        let mut pixels = Vec::with_capacity(indices.len() * per);
        let mut labels = self
            .labels
            .as_ref()
            .map(|_| Vec::with_capacity(indices.len()));
        for &i in indices {
            let p = self.pixels(i).ok_or_else(|| DataError::Request {
                path: self.source.clone(),
                reason: format!("index {i} is past the end ({} images)", self.len),
            })?;
            pixels.extend_from_slice(p);
            if let (Some(out), Some(src)) = (labels.as_mut(), self.labels.as_ref()) {
                out.push(src[i]);
            }
        }
        Ok(Self::new(
            self.source.clone(),
            self.height,
            self.width,
            self.channels,
            pixels,
            labels,
            self.num_classes,
        )?
        .with_class_names(self.class_names.to_vec()))
    }
}

impl Dataset<ImageItem> for ImageArray {
    fn get(&self, index: usize) -> Option<ImageItem> {
        Some(ImageItem {
            pixels: self.pixels(index)?.to_vec(),
            height: self.height,
            width: self.width,
            channels: self.channels,
            label: self.label(index),
        })
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// A batch of images on the host: the bytes of `len` images of one size, and their labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBatch {
    /// Pixels of all images, `N × H × W × C` bytes.
    pub pixels: Vec<u8>,
    /// Number of images.
    pub len: usize,
    /// Height of every image.
    pub height: usize,
    /// Width of every image.
    pub width: usize,
    /// Channels of every image.
    pub channels: usize,
    /// One label per image when all items are labeled, else `None`.
    pub labels: Option<Vec<i64>>,
    /// Dataset indices of the images (in batch order).
    pub indices: Vec<usize>,
}

/// A batch on a device: images `[N, C, H, W]` as floats in `[0, 1]`, labels `[N]`.
#[derive(Debug, Clone)]
pub struct ImageBatch<B: Backend> {
    /// Images, `[N, C, H, W]`, values in `[0, 1]`.
    pub images: Tensor<B, 4>,
    /// Class indices when the data is labeled.
    pub labels: Option<Tensor<B, 1, Int>>,
}

impl HostBatch {
    /// Concatenates items into one batch. All items must have the same size and channel count
    /// (datasets guarantee it); `source` is named in the error otherwise.
    pub fn from_items(
        source: &Path,
        items: &[ImageItem],
        indices: Vec<usize>,
    ) -> Result<Self, DataError> {
        let first = items.first().ok_or_else(|| DataError::Empty {
            path: source.to_path_buf(),
            what: "a batch needs at least one image".into(),
        })?;
        let (h, w, c) = (first.height, first.width, first.channels);
        let mut pixels = Vec::with_capacity(items.len() * h * w * c);
        let all_labeled = items.iter().all(|it| it.label.is_some());
        let mut labels = Vec::with_capacity(if all_labeled { items.len() } else { 0 });
        for it in items {
            if (it.height, it.width, it.channels) != (h, w, c) || it.pixels.len() != h * w * c {
                return Err(DataError::ImageShape {
                    path: source.to_path_buf(),
                    height: h,
                    width: w,
                    channels: c,
                    found_height: it.height,
                    found_width: it.width,
                    found_channels: it.channels,
                });
            }
            pixels.extend_from_slice(&it.pixels);
            if let (true, Some(l)) = (all_labeled, it.label) {
                labels.push(l as i64);
            }
        }
        Ok(Self {
            pixels,
            len: items.len(),
            height: h,
            width: w,
            channels: c,
            labels: all_labeled.then_some(labels),
            indices,
        })
    }

    /// Uploads the batch: the bytes go to the device as they are and are turned into
    /// `[N, C, H, W]` floats in `[0, 1]` there (`x / 255`, as torchvision's `to_tensor`).
    pub fn to_device<B: Backend>(&self, device: &B::Device) -> ImageBatch<B> {
        let data = TensorData::new(
            self.pixels.clone(),
            [self.len, self.height, self.width, self.channels],
        );
        let images = Tensor::<B, 4>::from_data(data, device)
            .permute([0, 3, 1, 2])
            .div_scalar(255.0);
        let labels = self
            .labels
            .as_ref()
            .map(|l| Tensor::<B, 1, Int>::from_data(TensorData::new(l.clone(), [l.len()]), device));
        ImageBatch { images, labels }
    }
}

/// Turns items into a device batch in one call ([`HostBatch::from_items`] then
/// [`HostBatch::to_device`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageBatcher;

impl ImageBatcher {
    /// Batches `items` on `device`.
    pub fn batch<B: Backend>(
        &self,
        items: &[ImageItem],
        device: &B::Device,
    ) -> Result<ImageBatch<B>, DataError> {
        let host = HostBatch::from_items(Path::new("<batch>"), items, (0..items.len()).collect())?;
        Ok(host.to_device(device))
    }
}
