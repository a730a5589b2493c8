//! Weighted kNN classification of frozen features (documented on `KnnClassifier`).

use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;

use crate::base::error::{positive, ConfigError};
use crate::loss::{l2_normalize, top_k_indices};

/// Configuration of the kNN monitor.
#[derive(Config, Debug)]
pub struct KnnConfig {
    /// Number of neighbours `k` (20 or 200 are usual).
    #[config(default = 200)]
    pub k: usize,
    /// Temperature `T` of the vote weights `exp(sim / T)` (0.07 or 0.1 are usual).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Test features scored at once.
    #[config(default = 256)]
    pub chunk_size: usize,
}

/// Top-1 and top-5 accuracy of a classifier, in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Accuracy {
    /// Fraction of test samples whose best class is right.
    pub top1: f64,
    /// Fraction whose right class is among the five best (among all of them when there are
    /// fewer than five classes).
    pub top5: f64,
}

/// A kNN classifier over a bank of normalised training features: weighted k-nearest-neighbour
/// classification of frozen features, the kNN monitor of InstDisc, lightly and solo-learn.
///
/// Features are L2-normalised; for each test feature the `k` most cosine-similar training
/// features vote for their label with weight `exp(sim / T)`; the class with the largest total
/// wins. Test features are processed in chunks so that the `[chunk, N_train]` similarity matrix
/// stays small, and the `k` nearest are found with the chunked [`top_k_indices`] instead of
/// sorting every row.
#[derive(Debug, Clone)]
pub struct KnnClassifier<B: Backend> {
    bank: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
    num_classes: usize,
    k: usize,
    temperature: f64,
    chunk_size: usize,
}

impl KnnConfig {
    /// Builds the classifier from training features `[N, D]` and their labels `[N]` (in
    /// `0..num_classes`).
    ///
    /// # Errors
    /// If `k` is 0 or larger than `N`, the temperature is not positive, the chunk size is 0, the
    /// features and labels disagree in length, or a label lies outside `0..num_classes`.
    pub fn init<B: Backend>(
        &self,
        features: Tensor<B, 2>,
        labels: Tensor<B, 1, Int>,
        num_classes: usize,
    ) -> Result<KnnClassifier<B>, ConfigError> {
        positive("temperature", self.temperature)?;
        let n = features.dims()[0];
        if labels.dims()[0] != n {
            return Err(ConfigError::new(
                "labels",
                format!("{} labels for {n} training features", labels.dims()[0]),
            ));
        }
        if self.k == 0 || self.k > n {
            return Err(ConfigError::new(
                "k",
                format!(
                    "must lie in 1..={n} (the number of training features), got {}",
                    self.k
                ),
            ));
        }
        if self.chunk_size == 0 {
            return Err(ConfigError::new("chunk_size", "must be at least 1"));
        }
        if num_classes == 0 {
            return Err(ConfigError::new("num_classes", "must be at least 1"));
        }
        // A label outside `0..num_classes` would be scattered outside the vote table (a panic on
        // the CPU, a vote lost or misplaced on a GPU): read once here, before any vote.
        let (low, high) = labels
            .clone()
            .into_data()
            .iter::<i64>()
            .fold((i64::MAX, i64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
        if n > 0 && (low < 0 || high >= num_classes as i64) {
            return Err(ConfigError::new(
                "labels",
                format!(
                    "must lie in 0..{num_classes} (num_classes), got labels from {low} to {high}"
                ),
            ));
        }
        Ok(KnnClassifier {
            bank: l2_normalize(features),
            labels,
            num_classes,
            k: self.k,
            temperature: self.temperature,
            chunk_size: self.chunk_size,
        })
    }
}

impl<B: Backend> KnnClassifier<B> {
    /// Vote totals per class.
    ///
    /// # Shapes
    /// - `features`: `[M, D]` → `[M, num_classes]`
    pub fn scores(&self, features: Tensor<B, 2>) -> Tensor<B, 2> {
        let [m, d] = features.dims();
        assert_eq!(
            d,
            self.bank.dims()[1],
            "kNN: test features have shape {:?} but the training features {:?}",
            features.dims(),
            self.bank.dims()
        );
        let features = l2_normalize(features);
        let mut out = Vec::new();
        let mut start = 0;
        while start < m {
            let len = self.chunk_size.min(m - start);
            let chunk = features.clone().narrow(0, start, len);
            let sims = chunk.matmul(self.bank.clone().transpose());
            let nearest = top_k_indices(sims.clone(), self.k);
            let weights = (sims.gather(1, nearest.clone()) / self.temperature).exp();
            let n = self.k * len;
            let votes = self
                .labels
                .clone()
                .select(0, nearest.reshape([n]))
                .reshape([len, self.k]);
            let device = weights.device();
            out.push(
                Tensor::<B, 2>::zeros([len, self.num_classes], &device).scatter(
                    1,
                    votes,
                    weights,
                    IndexingUpdateOp::Add,
                ),
            );
            start += len;
        }
        Tensor::cat(out, 0)
    }

    /// Top-1 / top-5 accuracy on test features `[M, D]` with labels `[M]`.
    pub fn accuracy(&self, features: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Accuracy {
        accuracy(self.scores(features), labels)
    }
}

/// Top-1 / top-5 accuracy of class scores `[M, C]` against labels `[M]`.
pub(crate) fn accuracy<B: Backend>(scores: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Accuracy {
    let [m, c] = scores.dims();
    let k = c.min(5);
    let labels = labels.reshape([m, 1]);
    let best: Tensor<B, 2, Int> = scores.clone().argmax(1);
    let top1 = best
        .equal(labels.clone())
        .int()
        .sum()
        .into_scalar()
        .elem::<i64>();
    let top = scores.sort_descending_with_indices(1).1.narrow(1, 0, k);
    let top5 = top
        .equal(labels.expand([m, k]))
        .int()
        .sum()
        .into_scalar()
        .elem::<i64>();
    Accuracy {
        top1: top1 as f64 / m as f64,
        top5: top5 as f64 / m as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::rows;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn votes_by_hand() {
        // Train: u0, u10 (class 0), u90, u100 (class 1), u180 (class 2). Test u45, k = 3,
        // T = 0.1: neighbours u10 (cos 35°), u0 and u90 (cos 45°).
        let device = Default::default();
        let train = rows::<B>(&[0.0, 10.0, 90.0, 100.0, 180.0], &device);
        let labels = Tensor::<B, 1, Int>::from_data([0, 0, 1, 1, 2], &device);
        let knn = KnnConfig::new().with_k(3).init(train, labels, 3).unwrap();
        let scores: Vec<f64> = knn
            .scores(rows(&[45.0], &device))
            .into_data()
            .to_vec()
            .unwrap();
        let w = |deg: f64| (deg.to_radians().cos() / 0.1).exp();
        let expected = [w(35.0) + w(45.0), w(45.0), 0.0];
        for (s, e) in scores.iter().zip(expected) {
            assert!(
                (s - e).abs() < 1e-9 * e.max(1.0),
                "{scores:?} vs {expected:?}"
            );
        }
    }

    #[test]
    fn accuracy_by_hand() {
        let device = Default::default();
        let scores = Tensor::<B, 2>::from_data(
            [
                [0.9, 0.1, 0.0],
                [0.2, 0.3, 0.5],
                [0.1, 0.6, 0.3],
                [0.3, 0.3, 0.4],
            ],
            &device,
        );
        let labels = Tensor::<B, 1, Int>::from_data([0, 1, 1, 0], &device);
        let acc = accuracy(scores, labels);
        // Right: rows 0 and 2. Three classes only, so "top-5" is every class.
        assert_eq!(acc.top1, 0.5);
        assert_eq!(acc.top5, 1.0);
    }

    #[test]
    fn k_larger_than_the_bank_is_rejected() {
        let device = Default::default();
        let err = KnnConfig::new()
            .with_k(20)
            .init(
                Tensor::<B, 2>::zeros([10, 4], &device),
                Tensor::<B, 1, Int>::zeros([10], &device),
                2,
            )
            .unwrap_err();
        assert_eq!(err.field, "k");
    }

    /// A label outside `0..num_classes` is refused when the classifier is made (it was scattered
    /// outside the vote table: a panic on the CPU).
    #[test]
    fn labels_outside_the_classes_are_rejected() {
        let device = Default::default();
        let make = |labels: [i64; 4]| {
            KnnConfig::new().with_k(2).init(
                Tensor::<B, 2>::ones([4, 3], &device),
                Tensor::<B, 1, Int>::from_data(labels, &device),
                2,
            )
        };
        for labels in [[0, 1, 2, 0], [0, -1, 1, 1]] {
            let err = make(labels).err().unwrap();
            assert_eq!(err.field, "labels", "{labels:?}");
        }
        assert!(make([0, 1, 1, 0]).is_ok());
    }
}
