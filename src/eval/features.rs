//! Frozen features of a whole dataset, batch by batch, for the kNN monitor and the linear probe.

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use crate::augment::normalize::Normalize;
use crate::base::error::ConfigError;
use crate::data::{DataError, ImageSet};

/// Features `[N, D]` of a dataset and its labels `[N]` when it has them.
#[derive(Debug, Clone)]
pub struct Features<B: Backend> {
    /// One feature row per image, in dataset order.
    pub features: Tensor<B, 2>,
    /// Class index per image, when the dataset is labeled.
    pub labels: Option<Tensor<B, 1, Int>>,
    /// Number of classes of the dataset.
    pub num_classes: usize,
    /// The set's index of every row: `0..N`, but for the files a streamed set left out.
    pub indices: Vec<usize>,
}

/// Runs `backbone` over every image of `data` in dataset order, `batch_size` images at a time,
/// after scaling pixels to `[0, 1]` and applying `normalize` (the training pipeline's last step).
/// The rows are the images the set gave: all of them, except the files a streamed set could
/// not read (left out with their labels).
///
/// Call it with an inference backbone (`backbone.valid()` of a trained one): batch norm then
/// uses its running statistics, and no autodiff graph is built.
///
/// # Errors
/// If `batch_size` is 0 or the data is empty.
pub fn extract_features<B: Backend, M: Backbone<B>>(
    backbone: &M,
    data: &(impl ImageSet + ?Sized),
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
    let mut chunks = Vec::with_capacity(n.div_ceil(batch_size));
    // The labels of the images read (a streamed set leaves out a file it cannot read).
    let mut labels = data.labels().map(|_| Vec::with_capacity(n));
    let mut indices = Vec::with_capacity(n);
    let mut start = 0;
    while start < n {
        let len = batch_size.min(n - start);
        let batch = data.read_range(start..start + len)?;
        start += len;
        if batch.len == 0 {
            continue;
        }
        indices.extend_from_slice(&batch.indices);
        if let Some(labels) = labels.as_mut() {
            let read = batch.labels.as_deref().ok_or_else(|| DataError::Request {
                path: data.source().to_path_buf(),
                reason: "a labelled set gave a batch without labels".into(),
            })?;
            labels.extend_from_slice(read);
        }
        let mut images = batch.to_device::<B>(device).images;
        if let Some(normalize) = normalize {
            images = normalize.apply(images);
        }
        chunks.push(backbone.forward_features(images));
    }
    if chunks.is_empty() {
        return Err(DataError::Empty {
            path: data.source().to_path_buf(),
            what: "no image could be read to compute features of".into(),
        }
        .into());
    }
    let labels = labels.map(|labels| {
        let m = labels.len();
        Tensor::from_data(TensorData::new(labels, [m]), device)
    });
    Ok(Features {
        features: Tensor::cat(chunks, 0),
        labels,
        num_classes: data.num_classes(),
        indices,
    })
}

/// Checks that `data` is labeled, for evaluations that need labels.
pub(crate) fn require_labels(data: &(impl ImageSet + ?Sized), role: &str) -> Result<(), DataError> {
    if data.labels().is_some() {
        Ok(())
    } else {
        Err(DataError::Empty {
            path: data.source().to_path_buf(),
            what: format!("the {role} set has no labels, which evaluation needs"),
        })
    }
}
