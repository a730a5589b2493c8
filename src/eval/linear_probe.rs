//! The linear probe (documented on `LinearProbeConfig`).

use burn::module::AutodiffModule;
use burn::module::Param;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::Linear;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::features::Features;
use super::knn::{accuracy, Accuracy};
use crate::base::error::{positive, ConfigError};
use crate::optim::{LarsConfig, SgdConfig, WarmupCosineConfig};

/// The probe's optimiser.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ProbeOptimizer {
    /// SGD with momentum (PyTorch semantics).
    Sgd(SgdConfig),
    /// LARS (solo-learn's choice for large batches).
    Lars(LarsConfig),
}

/// Configuration of the linear probe.
///
/// Linear evaluation ("linear probe"): a linear classifier trained on frozen, cached features,
/// the standard measure of a self-supervised representation (SimCLR, MoCo, solo-learn).
///
/// Features are computed once ([`extract_features`](super::extract_features) with the
/// inference backbone); the classifier is trained with SGD or LARS, a cosine learning rate
/// per step and cross-entropy, on shuffled mini-batches drawn from a seeded generator, and
/// scored top-1 / top-5 on the test features.
#[derive(Config, Debug)]
pub struct LinearProbeConfig {
    /// Passes over the training features.
    #[config(default = 100)]
    pub epochs: usize,
    /// Features per step.
    #[config(default = 256)]
    pub batch_size: usize,
    /// Peak learning rate (cosine to 0 over the run).
    #[config(default = 0.1)]
    pub lr: f64,
    /// The optimiser (SGD with momentum 0.9 and no weight decay by default).
    #[config(default = "ProbeOptimizer::Sgd(SgdConfig::new().with_weight_decay(0.0))")]
    pub optimizer: ProbeOptimizer,
    /// Seed of the classifier's initialisation order and of the mini-batch shuffling.
    #[config(default = 0)]
    pub seed: u64,
}

/// What the probe measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Accuracy on the training features at the end.
    pub train: Accuracy,
    /// Accuracy on the test features.
    pub test: Accuracy,
    /// Mean cross-entropy of the last epoch.
    pub final_loss: f64,
}

impl LinearProbeConfig {
    /// Checks the hyperparameters (before any feature is computed).
    ///
    /// # Errors
    /// Naming the impossible one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive("lr", self.lr)?;
        if self.epochs == 0 {
            return Err(ConfigError::new("epochs", "must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(ConfigError::new("batch_size", "must be at least 1"));
        }
        Ok(())
    }

    /// Trains a linear classifier on `train` features and scores it on `test`.
    ///
    /// # Errors
    /// If a hyperparameter is impossible, a set has no labels, or the feature widths differ.
    pub fn fit<B: AutodiffBackend>(
        &self,
        train: &Features<B::InnerBackend>,
        test: &Features<B::InnerBackend>,
        device: &B::Device,
    ) -> Result<ProbeResult, ConfigError> {
        self.validate()?;
        if train.labels.is_none() || test.labels.is_none() {
            return Err(ConfigError::new(
                "features",
                "the linear probe needs labeled train and test features",
            ));
        }
        let [n, d] = train.features.dims();
        if test.features.dims()[1] != d {
            return Err(ConfigError::new(
                "features",
                format!(
                    "train features are {d} wide, test features {}",
                    test.features.dims()[1]
                ),
            ));
        }
        if n == 0 {
            return Err(ConfigError::new("features", "no training features"));
        }
        let classes = train.num_classes.max(test.num_classes);
        let classifier = initial_classifier::<B>(d, classes, self.seed, device);
        match &self.optimizer {
            ProbeOptimizer::Sgd(c) => self.train(classifier, c.init()?, train, test, device),
            ProbeOptimizer::Lars(c) => self.train(classifier, c.init()?, train, test, device),
        }
        .map(|(train_acc, test_acc, loss)| ProbeResult {
            train: train_acc,
            test: test_acc,
            final_loss: loss,
        })
    }

    fn train<B: AutodiffBackend, O: Optimizer<Linear<B>, B>>(
        &self,
        mut classifier: Linear<B>,
        mut optimizer: O,
        train: &Features<B::InnerBackend>,
        test: &Features<B::InnerBackend>,
        device: &B::Device,
    ) -> Result<(Accuracy, Accuracy, f64), ConfigError> {
        let n = train.features.dims()[0];
        let steps_per_epoch = n.div_ceil(self.batch_size);
        let schedule = WarmupCosineConfig::new(self.lr, self.epochs * steps_per_epoch).init()?;
        let features = Tensor::<B, 2>::from_inner(train.features.clone());
        let labels =
            Tensor::<B, 1, Int>::from_inner(train.labels.clone().expect("checked by the caller"));
        let loss_fn = CrossEntropyLossConfig::new().init(device);
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut order: Vec<i64> = (0..n as i64).collect();
        let mut step = 0;
        let mut last_epoch_loss = 0.0;
        for _ in 0..self.epochs {
            for i in (1..n).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            let mut epoch_loss = Tensor::<B::InnerBackend, 1>::zeros([1], device);
            for chunk in order.chunks(self.batch_size) {
                let index = Tensor::<B, 1, Int>::from_data(
                    TensorData::new(chunk.to_vec(), [chunk.len()]),
                    device,
                );
                let x = features.clone().select(0, index.clone());
                let y = labels.clone().select(0, index);
                let loss = loss_fn.forward(classifier.forward(x), y);
                epoch_loss = epoch_loss + loss.clone().inner() * chunk.len() as f64;
                let grads = GradientsParams::from_grads(loss.backward(), &classifier);
                classifier = optimizer.step(schedule.lr_at(step), classifier, grads);
                step += 1;
            }
            last_epoch_loss = epoch_loss.into_scalar().elem::<f64>() / n as f64;
        }
        let classifier = classifier.valid();
        let score = |f: &Features<B::InnerBackend>| {
            let labels = f.labels.clone().expect("checked by the caller");
            accuracy(classifier.forward(f.features.clone()), labels)
        };
        Ok((score(train), score(test), last_epoch_loss))
    }
}

/// The probe's classifier before training: `d → classes`, initialised as burn's and PyTorch's
/// `Linear` are (weights and bias uniform in `±1/√d`), but drawn from a host generator seeded
/// with `seed` rather than from the backend's: the probe starts from the same weights on every
/// backend, so a checkpoint evaluated on the CPU and on a GPU gives the same result (to the
/// float precision), and no draw touches the backend's shared generator.
fn initial_classifier<B: Backend>(
    d: usize,
    classes: usize,
    seed: u64,
    device: &B::Device,
) -> Linear<B> {
    let mut rng = StdRng::seed_from_u64(crate::base::seed::mix_seed(seed, 0x9e0b));
    let bound = 1.0 / (d as f64).sqrt();
    let mut uniform = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| rng.random_range(-bound..bound) as f32)
            .collect()
    };
    let weight = uniform(d * classes);
    let bias = uniform(classes);
    Linear {
        weight: Param::from_tensor(Tensor::from_data(
            TensorData::new(weight, [d, classes]),
            device,
        )),
        bias: Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(bias, [classes]),
            device,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};

    type B = Autodiff<NdArray<f64>>;
    type I = NdArray<f64>;

    /// Three classes, each a point along its own axis plus a small per-sample offset: linearly
    /// separable, so the probe must classify every train and test sample right.
    fn separable(n: usize, shift: f64) -> Features<I> {
        let device = Default::default();
        let mut values = Vec::new();
        let mut labels = Vec::new();
        for i in 0..n {
            let c = i % 3;
            for d in 0..3 {
                values.push(if d == c { 1.0 } else { 0.0 } + shift * (i as f64 / n as f64));
            }
            labels.push(c as i64);
        }
        Features {
            features: Tensor::from_data(TensorData::new(values, [n, 3]), &device),
            labels: Some(Tensor::from_data(TensorData::new(labels, [n]), &device)),
            num_classes: 3,
            indices: (0..n).collect(),
        }
    }

    #[test]
    fn separable_features_are_classified_perfectly() {
        let result = LinearProbeConfig::new()
            .with_epochs(30)
            .with_batch_size(8)
            .with_lr(0.5)
            .fit::<B>(
                &separable(30, 0.1),
                &separable(12, -0.1),
                &Default::default(),
            )
            .unwrap();
        assert_eq!(result.train.top1, 1.0, "{result:?}");
        assert_eq!(result.test.top1, 1.0, "{result:?}");
        assert_eq!(result.test.top5, 1.0, "{result:?}");
        assert!(result.final_loss < 0.5 * 3f64.ln(), "{result:?}");
    }

    #[test]
    fn impossible_settings_are_named() {
        let f = separable(6, 0.0);
        let d = Default::default();
        let err = |c: LinearProbeConfig| c.fit::<B>(&f, &f, &d).unwrap_err().field;
        assert_eq!(err(LinearProbeConfig::new().with_lr(0.0)), "lr");
        assert_eq!(err(LinearProbeConfig::new().with_epochs(0)), "epochs");
        assert_eq!(
            err(LinearProbeConfig::new().with_batch_size(0)),
            "batch_size"
        );
        let unlabeled = Features {
            labels: None,
            ..separable(6, 0.0)
        };
        let e = LinearProbeConfig::new()
            .fit::<B>(&unlabeled, &f, &d)
            .unwrap_err();
        assert_eq!(e.field, "features");
    }
}
