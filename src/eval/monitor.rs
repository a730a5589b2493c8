//! The kNN monitor run during training (documented on `KnnMonitor`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;
use serde::{Deserialize, Serialize};

use super::features::{extract_features, require_labels};
use super::knn::{Accuracy, KnnConfig};
use crate::augment::normalize::Normalize;
use std::sync::Arc;

use crate::data::{DataError, ImageSet};

/// The accuracy of one kNN setting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KnnResult {
    /// Neighbours.
    pub k: usize,
    /// Vote temperature.
    pub temperature: f64,
    /// Top-1 / top-5 accuracy on the test set.
    pub accuracy: Accuracy,
}

/// Labeled train (the feature bank) and test sets and the kNN settings to score them with.
///
/// The kNN monitor run during training: features of a labeled train and test set by the frozen
/// backbone, scored by weighted kNN at several `(k, T)` (by default `k = 20, T = 0.07` and
/// `k = 200, T = 0.1`, the settings of InstDisc / solo-learn and lightly).
#[derive(Debug, Clone)]
pub struct KnnMonitor {
    train: Arc<dyn ImageSet>,
    test: Arc<dyn ImageSet>,
    settings: Vec<KnnConfig>,
    batch_size: usize,
    normalize: Option<Normalize>,
}

impl KnnMonitor {
    /// A monitor with the two usual settings (`k = 20, T = 0.07` and `k = 200, T = 0.1`), `k`
    /// capped at the size of the bank; on a bank of 20 images or fewer both would have its `k`,
    /// and the second is left out (a setting's columns are named by its `k`: `knn16_top1` was
    /// written twice). `normalize` should be the training pipeline's. The sets
    /// are held in memory ([`ImageArray`](crate::data::ImageArray)) or read from files at each
    /// evaluation ([`StreamedImages`](crate::data::stream::StreamedImages)).
    ///
    /// # Errors
    /// If a set has no labels, the image shapes differ, the class counts differ, or
    /// `normalize` does not hold one positive standard deviation and one mean per channel.
    pub fn new(
        train: impl ImageSet + 'static,
        test: impl ImageSet + 'static,
        normalize: Option<Normalize>,
    ) -> Result<Self, crate::Error> {
        require_labels(&train, "kNN bank (train)")?;
        require_labels(&test, "kNN test")?;
        if train.image_shape() != test.image_shape() {
            return Err(DataError::Request {
                path: test.source().to_path_buf(),
                reason: format!(
                    "test images are {:?} (h, w, c) but the bank's are {:?}",
                    test.image_shape(),
                    train.image_shape()
                ),
            }
            .into());
        }
        if train.num_classes() != test.num_classes() {
            return Err(DataError::Request {
                path: test.source().to_path_buf(),
                reason: format!(
                    "{} classes in the test set, {} in the bank",
                    test.num_classes(),
                    train.num_classes()
                ),
            }
            .into());
        }
        if let Some(normalize) = &normalize {
            // One mean and standard deviation per channel of the images: the features would
            // otherwise panic at the first evaluation, after an epoch of training.
            normalize.validate_for(train.image_shape().2)?;
        }
        let n = train.len();
        let mut settings: Vec<KnnConfig> = [(20, 0.07), (200, 0.1)]
            .into_iter()
            .map(|(k, t)| KnnConfig::new().with_k(k.min(n)).with_temperature(t))
            .collect();
        settings.dedup_by_key(|s| s.k);
        Ok(Self {
            train: Arc::new(train),
            test: Arc::new(test),
            settings,
            batch_size: 256,
            normalize,
        })
    }

    /// Images per forward pass when computing features (default 256).
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Images in the bank (the labelled training set).
    pub fn bank_len(&self) -> usize {
        self.train.len()
    }

    /// Images scored (the test set).
    pub fn test_len(&self) -> usize {
        self.test.len()
    }

    /// The kNN settings.
    pub fn settings(&self) -> &[KnnConfig] {
        &self.settings
    }

    /// Scores an inference backbone (e.g. `method.backbone().valid()`).
    ///
    /// # Errors
    /// If a kNN setting is impossible (e.g. `k` above the bank size).
    pub fn evaluate<B: Backend, M: Backbone<B>>(
        &self,
        backbone: &M,
        device: &B::Device,
    ) -> Result<Vec<KnnResult>, crate::Error> {
        let norm = self.normalize.as_ref();
        let bank = extract_features(backbone, &*self.train, self.batch_size, norm, device)?;
        let test = extract_features(backbone, &*self.test, self.batch_size, norm, device)?;
        let (bank_labels, test_labels) = match (bank.labels, test.labels) {
            (Some(a), Some(b)) => (a, b),
            _ => unreachable!("both sets were checked to be labeled"),
        };
        let mut results = Vec::with_capacity(self.settings.len());
        // A streamed bank leaves out the files it could not read: `k` at most the rows read
        // (the result keeps the setting's `k`, which names it in the logs and the files).
        let rows = bank.features.dims()[0];
        for setting in &self.settings {
            let knn = setting.clone().with_k(setting.k.min(rows)).init(
                bank.features.clone(),
                bank_labels.clone(),
                bank.num_classes,
            )?;
            results.push(KnnResult {
                k: setting.k,
                temperature: setting.temperature,
                accuracy: knn.accuracy(test.features.clone(), test_labels.clone()),
            });
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::ImageArray;

    /// `k` is capped at the bank's size; where both usual settings would have the same `k` (a
    /// bank of 20 or fewer), one is kept: a setting's columns are named by its `k`.
    #[test]
    fn settings_are_capped_at_the_bank_and_never_share_a_k() {
        let set = |n: usize| {
            let labels = (0..n).map(|i| (i % 2) as u16).collect();
            ImageArray::new("mem", 2, 2, 1, vec![7; n * 4], Some(labels), 2).unwrap()
        };
        let ks = |bank: usize| {
            KnnMonitor::new(set(bank), set(4), None)
                .unwrap()
                .settings()
                .iter()
                .map(|s| (s.k, s.temperature))
                .collect::<Vec<_>>()
        };
        assert_eq!(ks(1000), [(20, 0.07), (200, 0.1)]);
        assert_eq!(ks(21), [(20, 0.07), (21, 0.1)]);
        assert_eq!(ks(20), [(20, 0.07)]);
        assert_eq!(ks(16), [(16, 0.07)]);
    }

    /// ImageNet's three means and deviations for a bank of one-channel images are refused when
    /// the monitor is made (they panicked at the first evaluation, after an epoch of training).
    #[test]
    fn a_normalisation_of_other_channels_is_refused_when_made() {
        let set = || {
            let labels = (0..4).map(|i| (i % 2) as u16).collect();
            ImageArray::new("mem", 2, 2, 1, vec![7; 16], Some(labels), 2).unwrap()
        };
        let rgb = Normalize::new(
            &crate::augment::normalize::IMAGENET_MEAN,
            &crate::augment::normalize::IMAGENET_STD,
        );
        let err = KnnMonitor::new(set(), set(), Some(rgb)).err().unwrap();
        assert!(
            err.to_string().contains("normalize") && err.to_string().contains("needs 1 means"),
            "{err}"
        );
        let zero = Normalize::new(&[0.5], &[0.0]);
        assert!(KnnMonitor::new(set(), set(), Some(zero)).is_err());
        assert!(KnnMonitor::new(set(), set(), Some(Normalize::new(&[0.5], &[0.25]))).is_ok());
    }
}
