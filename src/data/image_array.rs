//! [`ImageArray`]: all images of one split as `u8` pixels in memory, and its [`ImageItem`]s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn_dataset::Dataset;

use super::error::DataError;

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

    /// Number of images (inherent, so that `len` is not ambiguous where both
    /// [`Dataset`] and [`ImageSet`](super::ImageSet) are in scope).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array holds no image.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        let mut sums = ChannelSums::new(self.channels);
        sums.add(&self.pixels);
        sums.stats()
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

/// Each channel's sum and sum of squares over pixels added in any number of parts (integers:
/// the same whatever the parts), and the mean and standard deviation on the `[0, 1]` scale.
pub(crate) struct ChannelSums {
    sum: Vec<u64>,
    squares: Vec<u64>,
    pixels: u64,
}

impl ChannelSums {
    pub(crate) fn new(channels: usize) -> Self {
        Self {
            sum: vec![0; channels],
            squares: vec![0; channels],
            pixels: 0,
        }
    }

    /// Adds pixels, channels last.
    pub(crate) fn add(&mut self, bytes: &[u8]) {
        let c = self.sum.len();
        for pixel in bytes.chunks_exact(c) {
            for (ch, &v) in pixel.iter().enumerate() {
                self.sum[ch] += u64::from(v);
                self.squares[ch] += u64::from(v) * u64::from(v);
            }
        }
        self.pixels += (bytes.len() / c) as u64;
    }

    /// Pixels added.
    pub(crate) fn pixels(&self) -> u64 {
        self.pixels
    }

    /// Each channel's mean and standard deviation.
    pub(crate) fn stats(&self) -> (Vec<f64>, Vec<f64>) {
        let n = self.pixels as f64;
        let mean: Vec<f64> = self.sum.iter().map(|&s| s as f64 / n / 255.0).collect();
        let std = self
            .squares
            .iter()
            .zip(&mean)
            .map(|(&q, m)| (q as f64 / n / (255.0 * 255.0) - m * m).max(0.0).sqrt())
            .collect();
        (mean, std)
    }
}
