//! A batch of images: [`HostBatch`] on the host, built by the loader's worker threads, uploaded
//! by [`HostBatch::to_device`] as an [`ImageBatch`].

use std::path::Path;

use burn::tensor::{backend::Backend, Int, Tensor, TensorData};

use super::error::DataError;
use super::image_array::ImageItem;

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
        let images = images_on_device::<B>(
            self.pixels.clone(),
            [self.len, self.height, self.width, self.channels],
            device,
        );
        let labels = self
            .labels
            .as_ref()
            .map(|l| Tensor::<B, 1, Int>::from_data(TensorData::new(l.clone(), [l.len()]), device));
        ImageBatch { images, labels }
    }
}

/// Uploads `N × H × W × C` bytes (`shape`) as they are and turns them into `[N, C, H, W]`
/// floats in `[0, 1]` on the device (`x / 255`, as torchvision's `to_tensor`).
pub(crate) fn images_on_device<B: Backend>(
    pixels: Vec<u8>,
    shape: [usize; 4],
    device: &B::Device,
) -> Tensor<B, 4> {
    Tensor::<B, 4>::from_data(TensorData::new(pixels, shape), device)
        .permute([0, 3, 1, 2])
        .div_scalar(255.0)
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
