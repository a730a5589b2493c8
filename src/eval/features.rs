//! Frozen features of a whole dataset, batch by batch, for the kNN monitor and the linear probe.

use std::path::PathBuf;

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use crate::augment::normalize::Normalize;
use crate::base::error::ConfigError;
use crate::data::{DataError, Dataset, HostBatch, ImageArray};

/// Features `[N, D]` of a dataset and its labels `[N]` when it has them.
#[derive(Debug, Clone)]
pub struct Features<B: Backend> {
    /// One feature row per image, in dataset order.
    pub features: Tensor<B, 2>,
    /// Class index per image, when the dataset is labeled.
    pub labels: Option<Tensor<B, 1, Int>>,
    /// Number of classes of the dataset.
    pub num_classes: usize,
}

/// Runs `backbone` over every image of `data` in dataset order, `batch_size` images at a time,
/// after scaling pixels to `[0, 1]` and applying `normalize` (the training pipeline's last step).
///
/// Call it with an inference backbone (`backbone.valid()` of a trained one): batch norm then
/// uses its running statistics, and no autodiff graph is built.
///
/// # Errors
/// If `batch_size` is 0 or the data is empty.
pub fn extract_features<B: Backend, M: Backbone<B>>(
    backbone: &M,
    data: &ImageArray,
    batch_size: usize,
    normalize: Option<&Normalize>,
    device: &B::Device,
) -> Result<Features<B>, crate::Error> {
    if batch_size == 0 {
        return Err(ConfigError::new("batch_size", "must be at least 1").into());
    }
    let n = data.len();
    if n == 0 {
        return Err(DataError::Empty {
            path: data.source().to_path_buf(),
            what: "no images to compute features of".into(),
        }
        .into());
    }
    let (h, w, c) = data.image_shape();
    let image_bytes = h * w * c;
    let mut chunks = Vec::with_capacity(n.div_ceil(batch_size));
    let mut start = 0;
    while start < n {
        let len = batch_size.min(n - start);
        let batch = HostBatch {
            pixels: data.all_pixels()[start * image_bytes..(start + len) * image_bytes].to_vec(),
            len,
            height: h,
            width: w,
            channels: c,
            labels: None,
            indices: (start..start + len).collect(),
        };
        let mut images = batch.to_device::<B>(device).images;
        if let Some(normalize) = normalize {
            images = normalize.apply(images);
        }
        chunks.push(backbone.forward_features(images));
        start += len;
    }
    let labels = data.labels().map(|labels| {
        let labels: Vec<i64> = labels.iter().map(|&l| l as i64).collect();
        Tensor::from_data(TensorData::new(labels, [n]), device)
    });
    Ok(Features {
        features: Tensor::cat(chunks, 0),
        labels,
        num_classes: data.num_classes(),
    })
}

/// Checks that `data` is labeled, for evaluations that need labels.
pub(crate) fn require_labels(data: &ImageArray, role: &str) -> Result<(), DataError> {
    if data.is_labeled() {
        Ok(())
    } else {
        Err(DataError::Empty {
            path: PathBuf::from(data.source()),
            what: format!("the {role} set has no labels, which evaluation needs"),
        })
    }
}
