//! The supervised step (documented on `Supervised`).

use std::path::Path;

use burn::config::Config;
use burn::module::{AutodiffModule, Module};
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::TrainableBackbone;
use rand::seq::SliceRandom;
use rand::{rngs::StdRng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::checkpoint::{
    check_shapes, files, read_record, shapes, to_bytes, CheckpointKind, CheckpointMeta,
};
use super::classifier::{cross_entropy_per_example, ClassifierAugmentConfig, LinearClassifier};
use super::config::TrainConfig;
use super::error::TrainError;
use super::task::{EpochBatches, LrPlan, ProgressOf, Task};
use crate::base::error::{positive, ConfigError};
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::data::{DataError, ImageArray};
use crate::optim::StepDecay;

/// Settings of the supervised step (the loop's own, epochs and the peak learning rate, are in
/// [`TrainConfig`]).
#[derive(Config, Debug)]
pub struct SupervisedConfig {
    /// Examples per step.
    #[config(default = 128)]
    pub batch_size: usize,
    /// Epochs at which the learning rate is multiplied by `lr_gamma` (a step schedule).
    #[config(default = "Vec::new()")]
    pub lr_milestones: Vec<usize>,
    /// Factor of the learning rate at each milestone.
    #[config(default = 0.1)]
    pub lr_gamma: f64,
    /// Images per forward pass when evaluating or measuring losses.
    #[config(default = 500)]
    pub eval_batch_size: usize,
    /// Seed of the batch order: epoch `e` shuffles its pool with `(seed, e)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl SupervisedConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.batch_size < 2 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "must be at least 2 (batch norm needs two values per channel), got {}",
                    self.batch_size
                ),
            ));
        }
        if self.eval_batch_size == 0 {
            return Err(ConfigError::new("eval_batch_size", "must be at least 1"));
        }
        positive("lr_gamma", self.lr_gamma)?;
        Ok(())
    }
}

/// The supervised step's settings in the run record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SupervisedSettings {
    /// Batch size, step schedule, batch order.
    pub supervised: SupervisedConfig,
    /// The augmentation.
    pub augmentation: ClassifierAugmentConfig,
}

/// An attempt's forward pass on a batch: the mean cross-entropy and each example's.
pub struct SupervisedOutput<B: AutodiffBackend> {
    /// Mean cross-entropy of the batch (the loss trained on).
    pub loss: Tensor<B, 1>,
    /// Each example's cross-entropy, `[N]`.
    pub per_example: Tensor<B, 1>,
}

/// Top-1 and top-5 accuracy on the test split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestAccuracy {
    /// Fraction of test images whose highest logit is their class.
    pub top1: f64,
    /// Fraction whose class is among the five highest logits (all of them with fewer classes).
    pub top5: f64,
}

/// What a hook of supervised training may use of the step: the classifier's per-example losses
/// and the labelled training set. Selection hooks are written for every type with this trait.
pub trait SupervisedTask<B: AutodiffBackend>:
    Task<B, Batch = Vec<usize>, Output = SupervisedOutput<B>>
{
    /// The labelled training images.
    fn train_data(&self) -> &ImageArray;

    /// The student's cross-entropy on every training image (inference mode, no augmentation).
    ///
    /// # Errors
    /// If a loss is not finite.
    fn example_losses(&self) -> Result<Vec<f32>, TrainError>;

    /// Top-1 and top-5 accuracy of the classifier on the test split (inference mode).
    fn evaluate(&self) -> TestAccuracy;
}

/// The supervised step: a classifier, its optimiser, the labelled training and test splits and
/// the augmentation.
///
/// The classifier is trained with cross-entropy on mini-batches of labelled images, in the one
/// training loop ([`Trainer`](super::Trainer)), so it shares the self-supervised runs' builder,
/// run directory, log, checkpoints and resume. Which examples an epoch draws from is a hook's
/// choice ([`RunView::select`](super::RunView::select)): all of them
/// ([`RandomSampling`](crate::spl_advise::RandomSampling)), or a self-paced selection (SPLD,
/// SPL-ADVisE: [`crate::spl_advise`]).
///
/// # One epoch
/// ```text
/// hooks.epoch_start: losses = student's per-example cross-entropy (if the selection needs them)
///                    pool = selection(epoch, losses)                  (every example: random)
/// for each of the N / B steps:
///     batch = the next B examples of the pool, shuffled by (seed, epoch), reshuffled when used up
///     SGD / Adam step on cross-entropy(student(augment(batch)), labels)
///     hooks.after_step                                                (SPL-ADVisE: a magnet step)
/// hooks.epoch_end                                                     (SPLD: λ ← μλ, γ ← μγ)
/// test top-1 / top-5 (the step's columns), checkpoint
/// ```
/// Every selection takes the same number of steps per epoch (`N / B`), so runs of equal epochs
/// cost the same optimiser steps whatever the selection.
pub struct Supervised<B: AutodiffBackend, M, O> {
    model: LinearClassifier<B, M>,
    optimizer: Option<O>,
    train: ImageArray,
    labels: Vec<i64>,
    test: ImageArray,
    augment: ClassifierAugmentConfig,
    config: SupervisedConfig,
    device: Option<B::Device>,
}

impl<B, M, O> Supervised<B, M, O>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    O: Optimizer<LinearClassifier<B, M>, B> + 'static,
{
    /// `model` trained with `optimizer` on the labelled `train` split, tested on `test`.
    pub fn new(
        model: LinearClassifier<B, M>,
        optimizer: O,
        train: ImageArray,
        test: ImageArray,
        config: SupervisedConfig,
        augment: ClassifierAugmentConfig,
    ) -> Self {
        Self {
            model,
            optimizer: Some(optimizer),
            labels: Vec::new(),
            train,
            test,
            augment,
            config,
            device: None,
        }
    }

    /// The classifier.
    pub fn model(&self) -> &LinearClassifier<B, M> {
        &self.model
    }

    fn device(&self) -> &B::Device {
        self.device
            .as_ref()
            .expect("the trainer's build gives the step its device")
    }

    fn labels_of(&self, indices: &[usize]) -> TensorData {
        TensorData::new(
            indices.iter().map(|&i| self.labels[i]).collect::<Vec<_>>(),
            [indices.len()],
        )
    }
}

impl<B, M, O> SupervisedTask<B> for Supervised<B, M, O>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    O: Optimizer<LinearClassifier<B, M>, B> + 'static,
{
    fn train_data(&self) -> &ImageArray {
        &self.train
    }

    fn example_losses(&self) -> Result<Vec<f32>, TrainError> {
        let model = self.model.valid();
        let n = self.train.len();
        let mut out = Vec::with_capacity(n);
        let indices: Vec<usize> = (0..n).collect();
        for chunk in indices.chunks(self.config.eval_batch_size) {
            let images =
                self.augment
                    .images::<B::InnerBackend>(&self.train, chunk, None, self.device());
            let labels =
                Tensor::<B::InnerBackend, 1, Int>::from_data(self.labels_of(chunk), self.device());
            let losses = cross_entropy_per_example(model.forward(images), labels);
            out.extend(
                losses
                    .into_data()
                    .convert::<f32>()
                    .into_vec::<f32>()
                    .expect("f32 data"),
            );
        }
        if let Some(i) = out.iter().position(|l| !l.is_finite()) {
            return Err(TrainError::Selection {
                reason: format!(
                    "the student's cross-entropy on training example {i} is {}",
                    out[i]
                ),
            });
        }
        Ok(out)
    }

    fn evaluate(&self) -> TestAccuracy {
        let model = self.model.valid();
        let n = self.test.len();
        let (mut top1, mut top5) = (0usize, 0usize);
        let indices: Vec<usize> = (0..n).collect();
        for chunk in indices.chunks(self.config.eval_batch_size) {
            let images =
                self.augment
                    .images::<B::InnerBackend>(&self.test, chunk, None, self.device());
            let logits = model.forward(images);
            let classes = logits.dims()[1];
            let values = logits
                .into_data()
                .convert::<f32>()
                .into_vec::<f32>()
                .expect("f32 data");
            for (row, &i) in chunk.iter().enumerate() {
                let label = self.test.label(i).expect("labeled");
                let logits = &values[row * classes..(row + 1) * classes];
                // Rank of the true class: how many logits beat it (ties count against it).
                let own = logits[label];
                let above = logits
                    .iter()
                    .enumerate()
                    .filter(|&(j, &v)| j != label && (v > own || v.is_nan()))
                    .count();
                top1 += usize::from(above == 0);
                top5 += usize::from(above < 5);
            }
        }
        TestAccuracy {
            top1: top1 as f64 / n as f64,
            top5: top5 as f64 / n as f64,
        }
    }
}

impl<B, M, O> Task<B> for Supervised<B, M, O>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    O: Optimizer<LinearClassifier<B, M>, B> + 'static,
{
    type Settings = SupervisedSettings;
    type Batch = Vec<usize>;
    type Inputs = (Tensor<B, 4>, Tensor<B, 1, Int>);
    type Output = SupervisedOutput<B>;

    const KIND: CheckpointKind = CheckpointKind::Supervised;

    fn settings(&self) -> SupervisedSettings {
        SupervisedSettings {
            supervised: self.config.clone(),
            augmentation: self.augment.clone(),
        }
    }

    fn resumable_changes(&self) -> &'static [&'static str] {
        &["supervised.eval_batch_size"]
    }

    fn prepare(&mut self, device: &B::Device) -> Result<(), TrainError> {
        self.device = Some(device.clone());
        self.config.validate()?;
        let (h, w, c) = self.train.image_shape();
        self.augment.validate(c)?;
        for (split, data) in [("training", &self.train), ("test", &self.test)] {
            if !data.is_labeled() || data.is_empty() {
                return Err(DataError::Empty {
                    path: data.source().to_path_buf(),
                    what: format!("the {split} split needs labeled images"),
                }
                .into());
            }
        }
        if self.test.image_shape() != (h, w, c) {
            return Err(ConfigError::new(
                "test",
                format!(
                    "images are {:?} (h, w, c) but the training images are {:?}",
                    self.test.image_shape(),
                    (h, w, c)
                ),
            )
            .into());
        }
        let classes = self.model.head.weight.dims()[1];
        if self.train.num_classes() > classes || self.test.num_classes() > classes {
            return Err(ConfigError::new(
                "classes",
                format!(
                    "the classifier has {classes} outputs but the data have {} classes",
                    self.train.num_classes().max(self.test.num_classes())
                ),
            )
            .into());
        }
        if self.batches_per_epoch() == 0 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "{} training images give no full batch of {}",
                    self.train.len(),
                    self.config.batch_size
                ),
            )
            .into());
        }
        self.labels = (0..self.train.len())
            .map(|i| self.train.label(i).expect("labeled") as i64)
            .collect();
        Ok(())
    }

    fn batches_per_epoch(&self) -> usize {
        self.train.len() / self.config.batch_size
    }

    fn batch_size(&self) -> usize {
        self.config.batch_size
    }

    fn num_examples(&self) -> usize {
        self.train.len()
    }

    fn seeds(&self) -> (u64, u64) {
        (self.config.seed, self.augment.seed)
    }

    fn lr_plan(&self, config: &TrainConfig, epochs: usize) -> Result<Box<dyn LrPlan>, ConfigError> {
        if config.warmup_epochs > 0 || config.final_lr != 0.0 {
            return Err(ConfigError::new(
                "warmup_epochs",
                "the supervised step follows a step schedule (lr_milestones, lr_gamma): \
                 warmup_epochs and final_lr, the cosine's, must be 0",
            ));
        }
        Ok(Box::new(StepDecay::new(
            config.lr,
            self.config.lr_gamma,
            self.config.lr_milestones.clone(),
            epochs,
            self.batches_per_epoch(),
        )))
    }

    /// The pool (every example without a selection) shuffled with `(seed, epoch, round)`, in
    /// order, one round after another until the epoch's batches are drawn.
    fn epoch(
        &mut self,
        epoch: usize,
        pool: Option<&[usize]>,
        first_batch: usize,
        _: ProgressOf,
    ) -> Result<EpochBatches<Vec<usize>>, TrainError> {
        let every: Vec<usize>;
        let pool = match pool {
            Some(pool) => pool,
            None => {
                every = (0..self.train.len()).collect();
                &every
            }
        };
        let b = self.config.batch_size;
        let steps = self.batches_per_epoch();
        let mut flat = Vec::with_capacity(steps * b);
        let mut round = 0u64;
        while flat.len() < steps * b {
            let mut order = pool.to_vec();
            let key = mix_seed(mix_seed(self.config.seed, epoch as u64), round);
            order.shuffle(&mut StdRng::seed_from_u64(key));
            flat.extend(order);
            round += 1;
        }
        flat.truncate(steps * b);
        let batches: Vec<Vec<usize>> = flat
            .chunks(b)
            .skip(first_batch)
            .map(<[usize]>::to_vec)
            .collect();
        Ok(Box::new(batches.into_iter().map(Ok)))
    }

    fn indices(batch: &Vec<usize>) -> &[usize] {
        batch
    }

    /// The batch augmented with the draws of the step (a redrawn attempt: of `(step, attempt)`).
    fn attempt(
        &mut self,
        batch: &mut Vec<usize>,
        progress: Progress,
        attempt: usize,
    ) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
        let key = match attempt {
            0 => progress.step as u64,
            a => mix_seed(progress.step as u64, a as u64),
        };
        let images = self
            .augment
            .images::<B>(&self.train, batch, Some(key), self.device());
        let labels = Tensor::<B, 1, Int>::from_data(self.labels_of(batch), self.device());
        (images, labels)
    }

    fn forward(
        &mut self,
        (images, labels): (Tensor<B, 4>, Tensor<B, 1, Int>),
        _: Progress,
    ) -> SupervisedOutput<B> {
        let per_example = cross_entropy_per_example(self.model.forward(images), labels);
        SupervisedOutput {
            loss: per_example.clone().mean(),
            per_example,
        }
    }

    fn apply(
        &mut self,
        out: SupervisedOutput<B>,
        lr: f64,
    ) -> Result<(f64, Vec<(String, f64)>), TrainError> {
        let value = out.loss.clone().into_scalar().elem::<f64>();
        if !value.is_finite() {
            // The loop names the step; the weights are left as they are.
            return Ok((value, Vec::new()));
        }
        let grads = GradientsParams::from_grads(out.loss.backward(), &self.model);
        let optimizer = self.optimizer.as_mut().expect("put back after every step");
        self.model = optimizer.step(lr, self.model.clone(), grads);
        Ok((value, Vec::new()))
    }

    fn epoch_end(&mut self, _: usize) -> Result<Vec<(String, f64)>, TrainError> {
        let accuracy = self.evaluate();
        Ok(vec![
            ("test_top1".to_string(), accuracy.top1),
            ("test_top5".to_string(), accuracy.top5),
        ])
    }

    fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError> {
        let optimizer = self.optimizer.as_ref().expect("put back after every step");
        Ok(vec![
            (
                files::ONLINE,
                to_bytes::<B, _>(self.model.clone().into_record(), "classifier")?,
            ),
            (
                files::BACKBONE,
                to_bytes::<B, _>(self.model.backbone.clone().into_record(), "backbone")?,
            ),
            (
                files::OPTIMIZER,
                to_bytes::<B, _>(optimizer.to_record(), "optimiser state")?,
            ),
        ])
    }

    fn shapes(&self) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
        (shapes(&self.model), shapes(&self.model.backbone))
    }

    fn non_finite(&self) -> Vec<String> {
        super::checkpoint::non_finite_tensors(&self.model)
    }

    fn load(&mut self, dir: &Path, meta: &CheckpointMeta) -> Result<(), TrainError> {
        let file = dir.join(files::ONLINE);
        let expected = shapes(&self.model);
        check_shapes(&file, &meta.online_shapes, &expected)?;
        let record =
            read_record::<B, <LinearClassifier<B, M> as Module<B>>::Record>(&file, self.device())?;
        let model = self.model.clone().load_record(record);
        check_shapes(&file, &shapes(&model), &expected)?;
        self.model = model;
        let record = read_record::<B, O::Record>(&dir.join(files::OPTIMIZER), self.device())?;
        let optimizer = self.optimizer.take().expect("put back after every step");
        self.optimizer = Some(optimizer.load_record(record));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::method::testing::TinyBackbone;
    use crate::optim::SgdConfig;
    use crate::spl_advise::RandomSampling;
    use crate::spl_advise::{
        EmbeddingNetConfig, KMeansConfig, MagnetSamplerConfig, PaceConfig, SplAdvise,
        SplAdviseConfig, SpldConfig,
    };
    use crate::train::checkpoint;
    use crate::train::{StartMode, Trainer};
    use burn::backend::{Autodiff, Flex, NdArray};
    use burn::optim::AdamConfig;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "curriculum-ssl-supervised-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// `n` images of 2×2×1 pixels with labels `i % classes`, their pixels from a fixed formula.
    fn images(n: usize, classes: usize, salt: usize) -> ImageArray {
        let pixels: Vec<u8> = (0..n * 4)
            .map(|p| ((p * 37 + salt * 11 + (p / 4 % classes) * 60) % 251) as u8)
            .collect();
        let labels = (0..n).map(|i| (i % classes) as u16).collect();
        ImageArray::new("mem", 2, 2, 1, pixels, Some(labels), classes).unwrap()
    }

    fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
        t.into_data().convert::<f64>().into_vec::<f64>().unwrap()
    }

    /// One step of plain SGD on a two-layer network (linear, ReLU, linear head) equals the update
    /// computed here by hand: softmax minus one-hot, back through the head, the ReLU and the
    /// first layer, `W ← W − η ∂L/∂W` (burn's `Linear` computes `x·W + b`, `W` is `in × out`).
    #[test]
    fn one_step_is_the_hand_computed_update() {
        type B = Autodiff<NdArray<f64>>;
        let device = Default::default();
        let (n, classes, lr) = (4, 3, 0.5);
        let data = images(n, classes, 0);
        let model = crate::base::seed::init_module::<B, _>(&device, 0, |d| {
            LinearClassifier::new(TinyBackbone::<B>::new(4, 3, d), classes, d)
        });
        let w1 = values(model.backbone.fc.weight.val());
        let b1 = values(model.backbone.fc.bias.as_ref().unwrap().val());
        let w2 = values(model.head.weight.val());
        let b2 = values(model.head.bias.as_ref().unwrap().val());
        let x: Vec<f64> = (0..n)
            // The images are scaled in f32 (`x / 255`), as the trainer's host preparation does.
            .flat_map(|i| {
                data.pixels(i)
                    .unwrap()
                    .iter()
                    .map(|&p| f64::from(f32::from(p) / 255.0))
            })
            .collect();
        // Forward.
        let mut pre = vec![0.0; n * 3];
        let mut h = vec![0.0; n * 3];
        let mut z = vec![0.0; n * classes];
        for i in 0..n {
            for j in 0..3 {
                pre[i * 3 + j] = b1[j] + (0..4).map(|k| x[i * 4 + k] * w1[k * 3 + j]).sum::<f64>();
                h[i * 3 + j] = pre[i * 3 + j].max(0.0);
            }
            for c in 0..classes {
                z[i * classes + c] = b2[c]
                    + (0..3)
                        .map(|j| h[i * 3 + j] * w2[j * classes + c])
                        .sum::<f64>();
            }
        }
        // Backward of the mean cross-entropy.
        let mut dz = vec![0.0; n * classes];
        for i in 0..n {
            let row = &z[i * classes..(i + 1) * classes];
            let max = row.iter().cloned().fold(f64::MIN, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            for c in 0..classes {
                let p = (row[c] - max).exp() / sum;
                let target = f64::from(u8::from(c == data.label(i).unwrap()));
                dz[i * classes + c] = (p - target) / n as f64;
            }
        }
        let mut w2_new = w2.clone();
        let mut b2_new = b2.clone();
        let mut w1_new = w1.clone();
        let mut b1_new = b1.clone();
        for c in 0..classes {
            b2_new[c] -= lr * (0..n).map(|i| dz[i * classes + c]).sum::<f64>();
            for j in 0..3 {
                w2_new[j * classes + c] -= lr
                    * (0..n)
                        .map(|i| h[i * 3 + j] * dz[i * classes + c])
                        .sum::<f64>();
            }
        }
        let mut dpre = vec![0.0; n * 3];
        for i in 0..n {
            for j in 0..3 {
                let dh: f64 = (0..classes)
                    .map(|c| dz[i * classes + c] * w2[j * classes + c])
                    .sum();
                dpre[i * 3 + j] = if pre[i * 3 + j] > 0.0 { dh } else { 0.0 };
            }
        }
        for j in 0..3 {
            b1_new[j] -= lr * (0..n).map(|i| dpre[i * 3 + j]).sum::<f64>();
            for k in 0..4 {
                w1_new[k * 3 + j] -=
                    lr * (0..n).map(|i| x[i * 4 + k] * dpre[i * 3 + j]).sum::<f64>();
            }
        }
        assert!(
            dpre.iter().any(|&d| d != 0.0),
            "the first layer takes a gradient"
        );

        let dir = scratch("one-step");
        let mut trainer = Trainer::with_task(Supervised::new(
            model,
            SgdConfig::new()
                .with_momentum(0.0)
                .with_weight_decay(0.0)
                .init::<B, LinearClassifier<B, TinyBackbone<B>>>()
                .unwrap(),
            data.clone(),
            data,
            SupervisedConfig::new().with_batch_size(n),
            ClassifierAugmentConfig::new(),
        ))
        .config(
            TrainConfig::new()
                .with_epochs(1)
                .with_lr(lr)
                .with_progress_bar(false),
        )
        .hook(RandomSampling::new())
        .run_dir(&dir)
        .build(&device)
        .unwrap();
        let summary = trainer.fit().unwrap();
        assert_eq!(summary.steps.len(), 1);
        let model = trainer.task().model();
        for (got, want, what) in [
            (values(model.backbone.fc.weight.val()), w1_new, "W1"),
            (
                values(model.backbone.fc.bias.as_ref().unwrap().val()),
                b1_new,
                "b1",
            ),
            (values(model.head.weight.val()), w2_new, "W2"),
            (
                values(model.head.bias.as_ref().unwrap().val()),
                b2_new,
                "b2",
            ),
        ] {
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-12, "{what}: {g} vs {w}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    type Ad = Autodiff<Flex>;
    type Student = LinearClassifier<Ad, TinyBackbone<Ad>>;

    type SplAdviseRun = Trainer<Ad, Supervised<Ad, TinyBackbone<Ad>, Adam>>;
    type Adam = burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Student, Ad>;

    fn spl_advise_trainer(dir: &Path, mode: StartMode) -> SplAdviseRun {
        let device = Default::default();
        let train = images(48, 2, 1);
        let test = images(10, 2, 2);
        let model = crate::base::seed::init_module::<Ad, _>(&device, 1, |d| {
            LinearClassifier::new(TinyBackbone::<Ad>::new(4, 6, d), 2, d)
        });
        let net = crate::base::seed::init_module::<Ad, _>(&device, 2, |d| {
            EmbeddingNetConfig::new()
                .with_dim(3)
                .init(TinyBackbone::<Ad>::new(4, 6, d), d)
        });
        let pace = PaceConfig::new(SpldConfig::new()).with_calibrate_gamma_ratio(0.2);
        let config = SplAdviseConfig::new(pace)
            .with_kmeans(KMeansConfig::new().with_clusters(2))
            .with_sampler(
                MagnetSamplerConfig::new()
                    .with_clusters_per_batch(2)
                    .with_examples_per_cluster(3),
            )
            .with_lr(1e-2)
            .with_seed(5);
        let selector = SplAdvise::new(
            config,
            net,
            AdamConfig::new().init(),
            train.clone(),
            ClassifierAugmentConfig::new(),
            &device,
        )
        .unwrap();
        Trainer::with_task(Supervised::new(
            model,
            AdamConfig::new().init(),
            train,
            test,
            SupervisedConfig::new().with_batch_size(8).with_seed(3),
            ClassifierAugmentConfig::new()
                .with_hflip(0.5)
                .with_translate(1)
                .with_rotate_degrees(10.0)
                .with_seed(4),
        ))
        .config(
            TrainConfig::new()
                .with_epochs(3)
                .with_lr(1e-2)
                .with_checkpoint_every(1)
                .with_progress_bar(false),
        )
        .hook(selector)
        .run_dir(dir)
        .start(mode)
        .build(&device)
        .unwrap()
    }

    fn rows_without_timing(dir: &Path, file: &str) -> Vec<String> {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let timed: Vec<usize> = header
            .iter()
            .enumerate()
            .filter(|(_, h)| matches!(**h, "images_per_s" | "seconds" | "refresh_seconds"))
            .map(|(i, _)| i)
            .collect();
        lines
            .map(|l| {
                l.split(',')
                    .enumerate()
                    .filter(|(i, _)| !timed.contains(i))
                    .map(|(_, v)| v)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect()
    }

    /// SPL-ADVisE stopped after one epoch and resumed from its checkpoint ends bit for bit where
    /// the run without a stop ends: the student, its Adam state, the embedding network, its Adam
    /// state, the clusters, the magnet sampler's losses and SPLD's pace all travel; every logged
    /// number but the timings is the same. The selection does change the pool after the
    /// warm-up epoch.
    #[test]
    fn spl_advise_resumes_exactly() {
        let straight = scratch("straight");
        let mut a = spl_advise_trainer(&straight, StartMode::Fresh);
        let summary = a.fit().unwrap();
        let selected: Vec<f64> = summary
            .epochs
            .iter()
            .map(|e| {
                let (_, cell) = e.columns.iter().find(|(n, _)| n == "selected").unwrap();
                match cell {
                    crate::train::Cell::Value(v) => *v,
                    other => panic!("selected: {other:?}"),
                }
            })
            .collect();
        assert_eq!(selected[0], 48.0, "the warm-up epoch trains on everything");
        assert!(selected[1] < 48.0, "SPLD leaves examples out: {selected:?}");

        let stopped = scratch("stopped");
        let mut b = spl_advise_trainer(&stopped, StartMode::Fresh);
        b.fit_epochs(1).unwrap();
        drop(b);
        let mut b = spl_advise_trainer(&stopped, StartMode::Resume);
        assert_eq!((b.epoch(), b.step()), (1, 6));
        b.fit().unwrap();
        let weights = |t: &SplAdviseRun| {
            let mut v = values(t.task().model().backbone.fc.weight.val());
            v.extend(values(t.task().model().head.weight.val()));
            v
        };
        assert_eq!(weights(&a), weights(&b));
        for file in ["steps.csv", "epochs.csv"] {
            assert_eq!(
                rows_without_timing(&straight, file),
                rows_without_timing(&stopped, file),
                "{file}"
            );
        }
        let last = |d: &Path| d.join("checkpoints/epoch-0003");
        let read = |d: &Path| std::fs::read(last(d).join(files::CURRICULA)).unwrap();
        assert_eq!(
            read(&straight),
            read(&stopped),
            "clusters, sampler and pace"
        );
        // The records name parameters by random ids: compare the embedding networks' values.
        let embedding = |d: &Path| {
            let device = Default::default();
            let net = crate::base::seed::init_module::<Ad, _>(&device, 0, |d| {
                EmbeddingNetConfig::new()
                    .with_dim(3)
                    .init(TinyBackbone::<Ad>::new(4, 6, d), d)
            });
            let record = read_record::<Ad, _>(&last(d).join(files::EMBEDDING), &device).unwrap();
            let net = net.load_record(record);
            let mut v = values(net.backbone.fc.weight.val());
            v.extend(values(net.embed.weight.val()));
            v
        };
        assert_eq!(embedding(&straight), embedding(&stopped));
        // A supervised checkpoint holds the selection's state and files, all checksummed.
        let meta = checkpoint::read_meta(&straight.join("checkpoints/epoch-0003")).unwrap();
        assert_eq!(meta.kind, CheckpointKind::Supervised);
        for name in [
            files::CURRICULA,
            files::EMBEDDING,
            files::EMBEDDING_OPTIMIZER,
        ] {
            assert!(meta.checksums.contains_key(name), "{name}");
        }
        std::fs::remove_dir_all(&straight).unwrap();
        std::fs::remove_dir_all(&stopped).unwrap();
    }

    /// The augmentation with every operation off is the identity; a rotation by 0 with a shift
    /// moves the image by whole pixels; a flip mirrors it.
    #[test]
    fn augmentation_moves_pixels_as_drawn() {
        type B = NdArray<f64>;
        let device = Default::default();
        let pixels: Vec<u8> = (0..9).map(|v| v * 10 + 5).collect();
        let data = ImageArray::new("mem", 3, 3, 1, pixels.clone(), Some(vec![0]), 1).unwrap();
        let plain = ClassifierAugmentConfig::new();
        let same = values(plain.images::<B>(&data, &[0], Some(7), &device));
        let want: Vec<f64> = pixels.iter().map(|&p| f64::from(p)).collect();
        assert_eq!(
            same.iter()
                .map(|v| v * 255.0)
                .map(f64::round)
                .collect::<Vec<_>>(),
            want
        );
        let flip = ClassifierAugmentConfig::new()
            .with_hflip(1.0)
            .with_vflip(1.0);
        let flipped = values(flip.images::<B>(&data, &[0], Some(7), &device));
        let rotated_180: Vec<f64> = want.iter().rev().cloned().collect();
        assert_eq!(
            flipped
                .iter()
                .map(|v| (v * 255.0).round())
                .collect::<Vec<_>>(),
            rotated_180
        );
        // Shifts of at most one pixel: each output is an input pixel or zero, for many draws.
        let shift = ClassifierAugmentConfig::new().with_translate(1);
        for key in 0..20 {
            let out = values(shift.images::<B>(&data, &[0], Some(key), &device));
            for v in out {
                let v = (v * 255.0).round();
                assert!(v == 0.0 || want.contains(&v), "{v}");
            }
        }
        // A rotation keeps the centre pixel (the rotation is about it).
        let rotate = ClassifierAugmentConfig::new().with_rotate_degrees(30.0);
        for key in 0..5 {
            let out = values(rotate.images::<B>(&data, &[0], Some(key), &device));
            assert!((out[4] * 255.0 - 45.0).abs() < 1e-4, "{}", out[4] * 255.0);
        }
    }
}
