//! The supervised trainer: a classifier trained with cross-entropy on mini-batches whose
//! examples an [`ExampleSelector`] chooses each epoch — all of them ([`RandomSampling`]), or a
//! self-paced selection (SPLD, SPL-ADVisE: [`crate::spl_advise`]).
//!
//! It shares the self-supervised trainer's run directory, log and checkpoints: `config.json`
//! ([`SupervisedRecord`]), `steps.csv` and `epochs.csv` ([`RunLog`]), and atomic, checksummed
//! checkpoints ([`CheckpointDir`], kind [`CheckpointKind::Supervised`]) holding the classifier
//! (`online.mpk`), its backbone alone (`backbone.mpk`, which `recipe eval` and
//! [`load_backbone`](super::load_backbone) read), the optimiser, and the selector's state
//! (`selection.json`, and SPL-ADVisE's embedding network). A resume continues bit for bit.
//!
//! # One epoch
//! ```text
//! losses = student's per-example cross-entropy on the training set   (if the selector needs it)
//! pool   = selector.select(epoch, losses)                             (every example: random)
//! for each of the N / B steps:
//!     batch = the next B examples of the pool, shuffled by (seed, epoch), reshuffled when used up
//!     SGD / Adam step on cross-entropy(student(augment(batch)), labels)
//!     selector.after_step(step)                                       (SPL-ADVisE: a magnet step)
//! selector.end_epoch()                                                (SPLD: λ ← μλ, γ ← μγ)
//! test top-1 / top-5, checkpoint
//! ```
//! Every method takes the same number of steps per epoch (`N / B`), so runs of equal epochs
//! cost the same optimiser steps whatever the selection.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::config::Config;
use burn::module::{AutodiffModule, Module};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::Backbone;
use rand::seq::SliceRandom;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::checkpoint::{
    self, check_shapes, files, read_record, shapes, to_bytes, write_atomic, CheckpointDir,
    CheckpointKind, CheckpointMeta,
};
use super::run_dir::{self, differences, Difference, SUPERVISED_RUN_FORMAT};
use super::run_log::{EpochRecord, RunLog, StepRecord};
use super::{StartMode, TrainError, TrainSummary};
use crate::augment::normalize::Normalize;
use crate::base::error::{non_negative, positive, ConfigError};
use crate::data::{loader::mix_seed, DataError, Dataset, ImageArray};

/// A classifier: a backbone and a linear layer from its features to the class logits.
#[derive(Module, Debug)]
pub struct Classifier<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Features to logits.
    pub head: Linear<B>,
}

impl<B: Backend, M: Backbone<B>> Classifier<B, M> {
    /// `backbone` followed by a linear layer to `classes` logits (PyTorch's initialisation).
    pub fn new(backbone: M, classes: usize, device: &B::Device) -> Self {
        let head = LinearConfig::new(backbone.feature_dim(), classes).init(device);
        Self { backbone, head }
    }

    /// Class logits.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, classes]`
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.head.forward(self.backbone.forward_features(images))
    }
}

/// Per-example cross-entropy `−log softmax(logits)[label]`.
///
/// # Shapes
/// - `logits`: `[N, classes]`, `labels`: `[N]` → `[N]`
pub fn cross_entropy_per_example<B: Backend>(
    logits: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let [n, _] = logits.dims();
    burn::tensor::activation::log_softmax(logits, 1)
        .gather(1, labels.reshape([n, 1]))
        .reshape([n])
        .neg()
}

/// The classifier's augmentation, on the host, image by image: random rotation, translation
/// and flips, then `x / 255` and the normalisation. SPL-ADVisE's Fashion-MNIST setting uses all
/// of them (random crop and random translation are one operation at a fixed output size).
///
/// Hand-written: ~60 lines of inverse mapping on our own pixel layout, with every draw keyed by
/// our seeds; an image crate's warp would add a large dependency for this alone.
#[derive(Config, Debug, PartialEq)]
pub struct ClassifierAugmentConfig {
    /// Probability of a horizontal flip.
    #[config(default = 0.0)]
    pub hflip: f64,
    /// Probability of a vertical flip.
    #[config(default = 0.0)]
    pub vflip: f64,
    /// Largest shift in pixels along each axis (uniform integer; uncovered pixels are 0).
    #[config(default = 0)]
    pub translate: usize,
    /// Largest rotation in degrees (uniform in `[−r, r]`, bilinear, about the centre).
    #[config(default = 0.0)]
    pub rotate_degrees: f64,
    /// Normalisation after `x / 255`.
    #[config(default = "None")]
    pub normalize: Option<Normalize>,
    /// Seed of the draws: the batch of step `s` draws from `(seed, s)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl ClassifierAugmentConfig {
    /// Checks the probabilities, the angle and the normalisation's channels.
    ///
    /// # Errors
    /// Naming the field that is out of range.
    pub fn validate(&self, channels: usize) -> Result<(), ConfigError> {
        for (field, p) in [("hflip", self.hflip), ("vflip", self.vflip)] {
            crate::base::error::in_range(field, p, 0.0, 1.0, false)?;
        }
        non_negative("rotate_degrees", self.rotate_degrees)?;
        if self.rotate_degrees > 180.0 {
            return Err(ConfigError::new(
                "rotate_degrees",
                format!("must be at most 180, got {}", self.rotate_degrees),
            ));
        }
        if let Some(n) = &self.normalize {
            if n.mean.len() != channels || n.std.len() != channels {
                return Err(ConfigError::new(
                    "normalize",
                    format!(
                        "has {} means and {} deviations for images of {channels} channels",
                        n.mean.len(),
                        n.std.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Images `indices` of `data` as a `[N, C, H, W]` tensor: augmented with the draws of
    /// `key` when `augment`, else as they are; then scaled and normalised.
    pub fn images<B: Backend>(
        &self,
        data: &ImageArray,
        indices: &[usize],
        key: Option<u64>,
        device: &B::Device,
    ) -> Tensor<B, 4> {
        let (h, w, c) = data.image_shape();
        let mut out = vec![0f32; indices.len() * c * h * w];
        let mut rng = key.map(|k| StdRng::seed_from_u64(mix_seed(self.seed, k)));
        for (slot, &i) in indices.iter().enumerate() {
            let pixels = data.pixels(i).expect("indices come from the data");
            let image = &mut out[slot * c * h * w..(slot + 1) * c * h * w];
            match rng.as_mut() {
                None => copy_planar(pixels, image, h, w, c),
                Some(rng) => self.augment_one(pixels, image, [h, w, c], rng),
            }
            for ch in 0..c {
                let (mean, std) = match &self.normalize {
                    Some(n) => (n.mean[ch] as f32, n.std[ch] as f32),
                    None => (0.0, 1.0),
                };
                for v in &mut image[ch * h * w..(ch + 1) * h * w] {
                    *v = (*v / 255.0 - mean) / std;
                }
            }
        }
        Tensor::from_data(TensorData::new(out, [indices.len(), c, h, w]), device)
    }

    /// One image: HWC bytes in, CHW values in `[0, 255]` out. The draws, in order: angle,
    /// shift y, shift x, horizontal flip, vertical flip (each drawn only when its operation is
    /// on).
    fn augment_one(&self, pixels: &[u8], out: &mut [f32], [h, w, c]: [usize; 3], rng: &mut StdRng) {
        let angle = if self.rotate_degrees > 0.0 {
            rng.random_range(-self.rotate_degrees..=self.rotate_degrees)
                .to_radians()
        } else {
            0.0
        };
        let t = self.translate as i64;
        let (dy, dx) = if t > 0 {
            (rng.random_range(-t..=t), rng.random_range(-t..=t))
        } else {
            (0, 0)
        };
        let hflip = self.hflip > 0.0 && rng.random::<f64>() < self.hflip;
        let vflip = self.vflip > 0.0 && rng.random::<f64>() < self.vflip;
        let (cy, cx) = ((h as f64 - 1.0) / 2.0, (w as f64 - 1.0) / 2.0);
        let (sin, cos) = angle.sin_cos();
        let at = |y: i64, x: i64, ch: usize| -> f64 {
            if y < 0 || x < 0 || y >= h as i64 || x >= w as i64 {
                0.0
            } else {
                f64::from(pixels[(y as usize * w + x as usize) * c + ch])
            }
        };
        for y in 0..h {
            for x in 0..w {
                // Output pixel (y, x) comes from: undo the flips, the shift, then the rotation.
                let fy = if vflip { h - 1 - y } else { y } as f64 - dy as f64;
                let fx = if hflip { w - 1 - x } else { x } as f64 - dx as f64;
                let (ry, rx) = (fy - cy, fx - cx);
                let sy = cos * ry - sin * rx + cy;
                let sx = sin * ry + cos * rx + cx;
                let (y0, x0) = (sy.floor(), sx.floor());
                let (wy, wx) = (sy - y0, sx - x0);
                let (y0, x0) = (y0 as i64, x0 as i64);
                for ch in 0..c {
                    let v = at(y0, x0, ch) * (1.0 - wy) * (1.0 - wx)
                        + at(y0, x0 + 1, ch) * (1.0 - wy) * wx
                        + at(y0 + 1, x0, ch) * wy * (1.0 - wx)
                        + at(y0 + 1, x0 + 1, ch) * wy * wx;
                    out[ch * h * w + y * w + x] = v as f32;
                }
            }
        }
    }
}

fn copy_planar(pixels: &[u8], out: &mut [f32], h: usize, w: usize, c: usize) {
    for p in 0..h * w {
        for ch in 0..c {
            out[ch * h * w + p] = f32::from(pixels[p * c + ch]);
        }
    }
}

/// Settings of a supervised run.
#[derive(Config, Debug)]
pub struct SupervisedConfig {
    /// Passes over the training data (each of `N / batch_size` steps).
    #[config(default = 30)]
    pub epochs: usize,
    /// Examples per step.
    #[config(default = 128)]
    pub batch_size: usize,
    /// Learning rate before the first milestone.
    #[config(default = 1e-3)]
    pub lr: f64,
    /// Epochs at which the learning rate is multiplied by `lr_gamma` (a step schedule).
    #[config(default = "Vec::new()")]
    pub lr_milestones: Vec<usize>,
    /// Factor of the learning rate at each milestone.
    #[config(default = 0.1)]
    pub lr_gamma: f64,
    /// A checkpoint every this many epochs, and always at the end; 0: only at the end.
    #[config(default = 10)]
    pub checkpoint_every: usize,
    /// Images per forward pass when evaluating or measuring losses.
    #[config(default = 500)]
    pub eval_batch_size: usize,
    /// Draw a progress bar on standard error (when it is a terminal).
    #[config(default = true)]
    pub progress_bar: bool,
    /// Seed of the batch order: epoch `e` shuffles its pool with `(seed, e)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl SupervisedConfig {
    /// The learning rate of epoch `epoch` (0-based): `lr · γ^{milestones <= epoch}`.
    pub fn lr_at(&self, epoch: usize) -> f64 {
        let passed = self.lr_milestones.iter().filter(|&&m| m <= epoch).count();
        self.lr * self.lr_gamma.powi(passed as i32)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.epochs == 0 {
            return Err(ConfigError::new("epochs", "must be at least 1"));
        }
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
        positive("lr", self.lr)?;
        positive("lr_gamma", self.lr_gamma)?;
        Ok(())
    }
}

/// Everything that defines a supervised run, as saved in `config.json` and each checkpoint's
/// `run.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SupervisedRecord {
    /// Always [`SUPERVISED_RUN_FORMAT`].
    pub format: String,
    /// The trainer's settings.
    pub train: SupervisedConfig,
    /// The augmentation.
    pub augmentation: ClassifierAugmentConfig,
    /// The selector's own description ([`ExampleSelector::describe`]).
    pub selection: serde_json::Value,
    /// The caller's description of the run (recipe, backbone, data).
    pub run: serde_json::Value,
}

/// Settings that may differ on resume: they do not change what is trained.
pub const SUPERVISED_RESUMABLE_CHANGES: [&str; 3] = [
    "train.checkpoint_every",
    "train.progress_bar",
    "train.eval_batch_size",
];

/// Chooses the examples a supervised run trains on, epoch by epoch, and keeps whatever it learns
/// on the side (SPL-ADVisE's embedding network) in the run's checkpoints.
pub trait ExampleSelector<B: AutodiffBackend> {
    /// What defines the selection (its settings), saved in `config.json` and compared on
    /// resume.
    fn describe(&self) -> serde_json::Value;

    /// Whether [`ExampleSelector::select`] needs the student's per-example losses in epoch
    /// `epoch` (their pass over the training set is skipped otherwise).
    fn needs_losses(&self, epoch: usize) -> bool;

    /// The examples epoch `epoch` draws its batches from (indices into the training set; at
    /// least one). `losses[i]` is the student's cross-entropy on example `i` before the epoch,
    /// when [`ExampleSelector::needs_losses`] for that epoch.
    ///
    /// # Errors
    /// If the losses cannot be used, or the selector's own work fails.
    fn select(&mut self, epoch: usize, losses: Option<&[f32]>) -> Result<Vec<usize>, TrainError>;

    /// Called after every student step (0-based `step`); returns statistics for `steps.csv`.
    ///
    /// # Errors
    /// If the selector's own training fails (a non-finite loss).
    fn after_step(&mut self, step: usize) -> Result<Vec<(String, f64)>, TrainError> {
        let _ = step;
        Ok(Vec::new())
    }

    /// Called at the end of every epoch (SPLD grows its pace here).
    fn end_epoch(&mut self) {}

    /// Statistics of the epoch for `epochs.csv`.
    fn epoch_stats(&self) -> Vec<(String, f64)> {
        Vec::new()
    }

    /// The selector's state as files of a checkpoint; one of them must be
    /// [`files::SELECTION`].
    ///
    /// # Errors
    /// If a record cannot be serialised.
    fn save(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError>;

    /// Restores the state [`ExampleSelector::save`] wrote into the verified checkpoint
    /// `checkpoint`.
    ///
    /// # Errors
    /// If a file is missing or of another selector or model.
    fn load(&mut self, checkpoint: &Path) -> Result<(), TrainError>;
}

/// Random sampling: every example, every epoch (the baseline of SPL-ADVisE's Table 1).
#[derive(Debug, Clone)]
pub struct RandomSampling {
    examples: usize,
}

impl RandomSampling {
    /// Random sampling over a training set of `examples` examples.
    pub fn new(examples: usize) -> Self {
        Self { examples }
    }
}

impl<B: AutodiffBackend> ExampleSelector<B> for RandomSampling {
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "method": "random" })
    }

    fn needs_losses(&self, _: usize) -> bool {
        false
    }

    fn select(&mut self, _: usize, _: Option<&[f32]>) -> Result<Vec<usize>, TrainError> {
        Ok((0..self.examples).collect())
    }

    fn save(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError> {
        Ok(vec![(files::SELECTION, b"{}".to_vec())])
    }

    fn load(&mut self, _: &Path) -> Result<(), TrainError> {
        Ok(())
    }
}

/// Reads a JSON file of a checkpoint (`selection.json`).
///
/// # Errors
/// If it cannot be read or is not a `T`.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, TrainError> {
    let text = std::fs::read(path).map_err(|e| checkpoint::io_error(path, e))?;
    serde_json::from_slice(&text).map_err(|e| TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: format!("not the state of this selection: {e}"),
    })
}

/// Serialises a module's record for a checkpoint file (for selectors holding networks).
///
/// # Errors
/// If the record cannot be serialised.
pub fn record_bytes<B: Backend, R: burn::record::Record<B>>(
    record: R,
    what: &str,
) -> Result<Vec<u8>, TrainError> {
    to_bytes::<B, R>(record, what)
}

/// Reads a record written by [`record_bytes`] from a verified checkpoint file.
///
/// # Errors
/// If the file cannot be read or holds another kind of record.
pub fn read_record_file<B: Backend, R: burn::record::Record<B>>(
    path: &Path,
    device: &B::Device,
) -> Result<R, TrainError> {
    read_record::<B, R>(path, device)
}

/// Builds a [`SupervisedTrainer`].
pub struct SupervisedTrainerBuilder<B: AutodiffBackend, M, O> {
    model: Classifier<B, M>,
    optimizer: O,
    selector: Box<dyn ExampleSelector<B>>,
    train: ImageArray,
    test: ImageArray,
    config: SupervisedConfig,
    augment: ClassifierAugmentConfig,
    description: serde_json::Value,
    run_dir: PathBuf,
    mode: StartMode,
}

impl<B, M, O> SupervisedTrainerBuilder<B, M, O>
where
    B: AutodiffBackend,
    M: Backbone<B> + AutodiffModule<B>,
    M::InnerModule: Backbone<B::InnerBackend>,
    O: Optimizer<Classifier<B, M>, B>,
{
    /// The trainer's settings (default: [`SupervisedConfig::new`]).
    pub fn config(mut self, config: SupervisedConfig) -> Self {
        self.config = config;
        self
    }

    /// The augmentation (default: none, no normalisation).
    pub fn augmentation(mut self, augment: ClassifierAugmentConfig) -> Self {
        self.augment = augment;
        self
    }

    /// The run directory (default: `runs/supervised`).
    pub fn run_dir(mut self, run_dir: impl AsRef<Path>) -> Self {
        self.run_dir = run_dir.as_ref().to_path_buf();
        self
    }

    /// The caller's description of the run, saved and compared on resume.
    ///
    /// # Panics
    /// If `description` cannot be serialised to JSON.
    pub fn describe(mut self, description: &impl Serialize) -> Self {
        self.description =
            serde_json::to_value(description).expect("a run description serialises to JSON");
        self
    }

    /// How the run starts in its directory ([`StartMode::Extend`] lets a resumed run have more
    /// epochs: the step schedule does not depend on the length).
    pub fn start(mut self, mode: StartMode) -> Self {
        self.mode = mode;
        self
    }

    /// Checks the settings, the data and the run directory, resumes when asked, and writes
    /// `config.json`.
    ///
    /// # Errors
    /// If a setting is impossible, the data are unlabeled or give no full batch, the directory
    /// cannot hold this run, or a resume finds other settings or only damaged checkpoints.
    pub fn build(self, device: &B::Device) -> Result<SupervisedTrainer<B, M, O>, TrainError> {
        let config = self.config;
        config.validate()?;
        let (h, w, c) = self.train.image_shape();
        self.augment.validate(c)?;
        for (split, data) in [("training", &self.train), ("test", &self.test)] {
            if !data.is_labeled() || data.len() == 0 {
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
        let steps_per_epoch = self.train.len() / config.batch_size;
        if steps_per_epoch == 0 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "{} training images give no full batch of {}",
                    self.train.len(),
                    config.batch_size
                ),
            )
            .into());
        }
        let mut record = SupervisedRecord {
            format: SUPERVISED_RUN_FORMAT.to_string(),
            train: config.clone(),
            augmentation: self.augment.clone(),
            selection: self.selector.describe(),
            run: self.description,
        };
        let labels: Vec<i64> = (0..self.train.len())
            .map(|i| self.train.label(i).expect("labeled") as i64)
            .collect();
        let mut trainer = SupervisedTrainer {
            model: self.model,
            optimizer: Some(self.optimizer),
            selector: self.selector,
            train: self.train,
            labels,
            test: self.test,
            augment: self.augment,
            config,
            record: record.clone(),
            checkpoints: CheckpointDir::new(&self.run_dir),
            log: RunLog::new(&self.run_dir, record.train.progress_bar),
            run_dir: self.run_dir,
            device: device.clone(),
            epoch: 0,
            step: 0,
            steps_per_epoch,
            last_checkpoint: None,
        };
        if run_dir::holds_a_run_to_resume(&trainer.run_dir, self.mode)? {
            record = trainer.resume(record, self.mode == StartMode::Extend)?;
        }
        std::fs::create_dir_all(&trainer.run_dir)
            .map_err(|e| checkpoint::write_error(&trainer.run_dir, e))?;
        let text = serde_json::to_vec_pretty(&record).expect("JSON value");
        write_atomic(&trainer.run_dir.join(files::CONFIG), &text)?;
        trainer.log.resume_at(trainer.step, trainer.epoch)?;
        trainer.record = record;
        Ok(trainer)
    }
}

/// A supervised run: classifier, optimiser, example selector, data, run directory.
pub struct SupervisedTrainer<B: AutodiffBackend, M, O> {
    model: Classifier<B, M>,
    optimizer: Option<O>,
    selector: Box<dyn ExampleSelector<B>>,
    train: ImageArray,
    labels: Vec<i64>,
    test: ImageArray,
    augment: ClassifierAugmentConfig,
    config: SupervisedConfig,
    record: SupervisedRecord,
    run_dir: PathBuf,
    checkpoints: CheckpointDir,
    log: RunLog,
    device: B::Device,
    epoch: usize,
    step: usize,
    steps_per_epoch: usize,
    last_checkpoint: Option<PathBuf>,
}

/// Top-1 and top-5 accuracy on the test split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestAccuracy {
    /// Fraction of test images whose highest logit is their class.
    pub top1: f64,
    /// Fraction whose class is among the five highest logits (all of them with fewer classes).
    pub top5: f64,
}

impl<B, M, O> SupervisedTrainer<B, M, O>
where
    B: AutodiffBackend,
    M: Backbone<B> + AutodiffModule<B>,
    M::InnerModule: Backbone<B::InnerBackend>,
    O: Optimizer<Classifier<B, M>, B>,
{
    /// A run of `model` with `optimizer`, choosing its examples with `selector`, on the labeled
    /// `train` and `test` splits; the rest is set on the builder.
    pub fn builder(
        model: Classifier<B, M>,
        optimizer: O,
        selector: Box<dyn ExampleSelector<B>>,
        train: ImageArray,
        test: ImageArray,
    ) -> SupervisedTrainerBuilder<B, M, O> {
        SupervisedTrainerBuilder {
            model,
            optimizer,
            selector,
            train,
            test,
            config: SupervisedConfig::new(),
            augment: ClassifierAugmentConfig::new(),
            description: serde_json::Value::Null,
            run_dir: PathBuf::from("runs/supervised"),
            mode: StartMode::Fresh,
        }
    }

    /// The classifier.
    pub fn model(&self) -> &Classifier<B, M> {
        &self.model
    }

    /// Epochs completed.
    pub fn epoch(&self) -> usize {
        self.epoch
    }

    /// Steps completed.
    pub fn step(&self) -> usize {
        self.step
    }

    /// Steps of every epoch (`N / batch_size`).
    pub fn steps_per_epoch(&self) -> usize {
        self.steps_per_epoch
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The newest checkpoint written or resumed from.
    pub fn last_checkpoint(&self) -> Option<&Path> {
        self.last_checkpoint.as_deref()
    }

    fn resume(
        &mut self,
        given: SupervisedRecord,
        extend: bool,
    ) -> Result<SupervisedRecord, TrainError> {
        let found = self.checkpoints.newest_valid()?;
        let saved_path = match &found {
            Some((dir, _)) => dir.join(files::RUN),
            None => self.run_dir.join(files::CONFIG),
        };
        let saved: SupervisedRecord = read_json(&saved_path).map_err(|_| TrainError::Run {
            path: saved_path.clone(),
            reason: "not the record of a supervised run (a self-supervised run's directory?)"
                .into(),
        })?;
        let as_json = |r: &SupervisedRecord| serde_json::to_value(r).expect("JSON value");
        let diffs: Vec<Difference> = differences(&as_json(&saved), &as_json(&given))
            .into_iter()
            .filter(|d| !SUPERVISED_RESUMABLE_CHANGES.contains(&d.setting.as_str()))
            .filter(|d| !(extend && d.setting == "train.epochs"))
            .collect();
        if !diffs.is_empty() {
            return Err(TrainError::Mismatch {
                path: saved_path,
                differences: diffs,
            });
        }
        let Some((dir, meta)) = found else {
            log::info!(
                "{} holds no checkpoint yet: starting the run afresh",
                self.run_dir.display()
            );
            return Ok(given);
        };
        self.load_checkpoint(&dir, &meta)?;
        Ok(given)
    }

    fn load_checkpoint(&mut self, dir: &Path, meta: &CheckpointMeta) -> Result<(), TrainError> {
        let mismatch = |reason: String| TrainError::Checkpoint {
            path: dir.to_path_buf(),
            reason,
        };
        if meta.kind != CheckpointKind::Supervised {
            return Err(mismatch(
                "written by a self-supervised run, not by the supervised trainer".into(),
            ));
        }
        if meta.loader_seed != self.config.seed || meta.augment_seed != self.augment.seed {
            return Err(mismatch(format!(
                "written with batch-order seed {} and augmentation seed {}, this run has {} and {}",
                meta.loader_seed, meta.augment_seed, self.config.seed, self.augment.seed
            )));
        }
        if meta.step != meta.epoch * self.steps_per_epoch {
            return Err(mismatch(format!(
                "{} steps after {} epochs do not fit this run's {} steps per epoch (another \
                 batch size or dataset?)",
                meta.step, meta.epoch, self.steps_per_epoch
            )));
        }
        let file = dir.join(files::ONLINE);
        let expected = shapes(&self.model);
        check_shapes(&file, &meta.online_shapes, &expected)?;
        let record =
            read_record::<B, <Classifier<B, M> as Module<B>>::Record>(&file, &self.device)?;
        let model = self.model.clone().load_record(record);
        check_shapes(&file, &shapes(&model), &expected)?;
        self.model = model;
        let record = read_record::<B, O::Record>(&dir.join(files::OPTIMIZER), &self.device)?;
        let optimizer = self.optimizer.take().expect("put back after every step");
        self.optimizer = Some(optimizer.load_record(record));
        self.selector.load(dir)?;
        self.epoch = meta.epoch;
        self.step = meta.step;
        self.last_checkpoint = Some(dir.to_path_buf());
        log::info!(
            "resumed from {} (epoch {}, step {})",
            dir.display(),
            meta.epoch,
            meta.step
        );
        Ok(())
    }

    /// Writes a checkpoint of the current state now; returns its directory.
    ///
    /// # Errors
    /// On I/O errors.
    pub fn save_checkpoint(&mut self) -> Result<PathBuf, TrainError> {
        let optimizer = self.optimizer.as_ref().expect("put back after every step");
        let mut written = vec![
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
            (
                files::RUN,
                serde_json::to_vec_pretty(&self.record).expect("JSON value"),
            ),
        ];
        written.extend(self.selector.save()?);
        let meta = CheckpointMeta {
            format_version: checkpoint::FORMAT_VERSION,
            kind: CheckpointKind::Supervised,
            epoch: self.epoch,
            step: self.step,
            loader_seed: self.config.seed,
            augment_seed: self.augment.seed,
            checksums: Default::default(),
            online_shapes: shapes(&self.model),
            backbone_shapes: shapes(&self.model.backbone),
        };
        let dir = self.checkpoints.save(checkpoint::CheckpointFiles {
            meta,
            files: written,
        })?;
        self.last_checkpoint = Some(dir.clone());
        Ok(dir)
    }

    /// The student's cross-entropy on every training image (inference mode, no augmentation).
    ///
    /// # Errors
    /// If a loss is not finite.
    pub fn example_losses(&self) -> Result<Vec<f32>, TrainError> {
        let model = self.model.valid();
        let n = self.train.len();
        let mut out = Vec::with_capacity(n);
        let indices: Vec<usize> = (0..n).collect();
        for chunk in indices.chunks(self.config.eval_batch_size) {
            let images =
                self.augment
                    .images::<B::InnerBackend>(&self.train, chunk, None, &self.device);
            let labels = Tensor::<B::InnerBackend, 1, Int>::from_data(
                TensorData::new(
                    chunk.iter().map(|&i| self.labels[i]).collect::<Vec<_>>(),
                    [chunk.len()],
                ),
                &self.device,
            );
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
            return Err(TrainError::NonFiniteLoss {
                step: self.step,
                epoch: self.epoch,
                value: f64::from(out[i]),
                last_checkpoint: self.last_checkpoint.clone(),
            });
        }
        Ok(out)
    }

    /// Top-1 and top-5 accuracy of the classifier on the test split (inference mode).
    pub fn evaluate(&self) -> TestAccuracy {
        let model = self.model.valid();
        let n = self.test.len();
        let (mut top1, mut top5) = (0usize, 0usize);
        let indices: Vec<usize> = (0..n).collect();
        for chunk in indices.chunks(self.config.eval_batch_size) {
            let images =
                self.augment
                    .images::<B::InnerBackend>(&self.test, chunk, None, &self.device);
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

    /// The batches of an epoch: its pool shuffled with `(seed, epoch, round)`, in order, one
    /// round after another until `steps_per_epoch` batches are drawn.
    fn epoch_batches(&self, epoch: usize, pool: &[usize]) -> Vec<Vec<usize>> {
        let b = self.config.batch_size;
        let mut flat = Vec::with_capacity(self.steps_per_epoch * b);
        let mut round = 0u64;
        while flat.len() < self.steps_per_epoch * b {
            let mut order = pool.to_vec();
            let key = mix_seed(mix_seed(self.config.seed, epoch as u64), round);
            order.shuffle(&mut StdRng::seed_from_u64(key));
            flat.extend(order);
            round += 1;
        }
        flat.truncate(self.steps_per_epoch * b);
        flat.chunks(b).map(<[usize]>::to_vec).collect()
    }

    /// One optimiser step on the examples `indices`; returns the mean loss.
    fn train_step(&mut self, indices: &[usize], lr: f64) -> Result<f64, TrainError> {
        let images =
            self.augment
                .images::<B>(&self.train, indices, Some(self.step as u64), &self.device);
        let labels = Tensor::<B, 1, Int>::from_data(
            TensorData::new(
                indices.iter().map(|&i| self.labels[i]).collect::<Vec<_>>(),
                [indices.len()],
            ),
            &self.device,
        );
        let loss = cross_entropy_per_example(self.model.forward(images), labels).mean();
        let value = loss.clone().into_scalar().elem::<f64>();
        if !value.is_finite() {
            return Err(TrainError::NonFiniteLoss {
                step: self.step,
                epoch: self.epoch,
                value,
                last_checkpoint: self.last_checkpoint.clone(),
            });
        }
        let grads = GradientsParams::from_grads(loss.backward(), &self.model);
        let optimizer = self.optimizer.as_mut().expect("put back after every step");
        self.model = optimizer.step(lr, self.model.clone(), grads);
        Ok(value)
    }

    /// Trains to the last epoch of the plan.
    ///
    /// # Errors
    /// On a non-finite loss (the checkpoints on disk are kept), a selector failure, or I/O
    /// errors in the run directory.
    pub fn fit(&mut self) -> Result<TrainSummary, TrainError> {
        self.fit_epochs(usize::MAX)
    }

    /// Trains at most `max_epochs` more epochs (stopping at the plan's end).
    ///
    /// # Errors
    /// As [`SupervisedTrainer::fit`].
    pub fn fit_epochs(&mut self, max_epochs: usize) -> Result<TrainSummary, TrainError> {
        let mut summary = TrainSummary::default();
        let last = self
            .config
            .epochs
            .min(self.epoch.saturating_add(max_epochs));
        let total_steps = self.config.epochs * self.steps_per_epoch;
        self.log.start(total_steps, self.step);
        while self.epoch < last {
            let epoch = self.epoch;
            let started = Instant::now();
            let losses = if self.selector.needs_losses(epoch) {
                Some(self.example_losses()?)
            } else {
                None
            };
            let pool = self.selector.select(epoch, losses.as_deref())?;
            if pool.is_empty() || pool.iter().any(|&i| i >= self.train.len()) {
                return Err(TrainError::Run {
                    path: self.run_dir.clone(),
                    reason: format!(
                        "the example selection of epoch {} chose {} examples, some outside the \
                         {} training images",
                        epoch + 1,
                        pool.len(),
                        self.train.len()
                    ),
                });
            }
            let lr = self.config.lr_at(epoch);
            let mut loss_sum = 0.0;
            for batch in self.epoch_batches(epoch, &pool) {
                let step_started = Instant::now();
                let loss = self.train_step(&batch, lr)?;
                let mut stats = vec![("selected".to_string(), pool.len() as f64)];
                stats.extend(self.selector.after_step(self.step)?);
                loss_sum += loss;
                let record = StepRecord {
                    step: self.step,
                    epoch,
                    loss,
                    lr,
                    images_per_s: batch.len() as f64 / step_started.elapsed().as_secs_f64(),
                    stats,
                };
                self.log.step(&record, self.config.epochs)?;
                summary.steps.push(record);
                self.step += 1;
            }
            self.selector.end_epoch();
            let seconds = started.elapsed().as_secs_f64();
            let accuracy = self.evaluate();
            self.epoch += 1;
            let due = self.config.checkpoint_every > 0
                && self.epoch.is_multiple_of(self.config.checkpoint_every);
            let checkpoint = if due || self.epoch == self.config.epochs {
                Some(self.save_checkpoint()?)
            } else {
                None
            };
            let mut stats = vec![
                ("test_top1".to_string(), accuracy.top1),
                ("test_top5".to_string(), accuracy.top5),
                ("selected".to_string(), pool.len() as f64),
                (
                    "selected_fraction".to_string(),
                    pool.len() as f64 / self.train.len() as f64,
                ),
            ];
            stats.extend(self.selector.epoch_stats());
            let record = EpochRecord {
                epoch,
                mean_loss: loss_sum / self.steps_per_epoch as f64,
                lr,
                images_per_s: (self.steps_per_epoch * self.config.batch_size) as f64 / seconds,
                seconds,
                stats,
                columns: Vec::new(),
                notes: Vec::new(),
                checkpoint,
            };
            self.log.epoch(&record, self.config.epochs)?;
            summary.epochs.push(record);
        }
        self.log.finish()?;
        Ok(summary)
    }
}

/// A random draw helper for selectors: the generator of step `step` under `seed`.
pub fn step_rng(seed: u64, step: usize) -> StdRng {
    StdRng::seed_from_u64(mix_seed(seed, step as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::TinyBackbone;
    use crate::optim::SgdConfig;
    use crate::spl_advise::{
        EmbeddingNetConfig, KMeansConfig, MagnetSamplerConfig, PaceConfig, SplAdvise,
        SplAdviseConfig, SpldConfig,
    };
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
        let backbone = TinyBackbone::<B> {
            fc: LinearConfig::new(4, 3).init(&device),
        };
        let model = Classifier::new(backbone, classes, &device);
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
        let mut trainer = SupervisedTrainer::builder(
            model,
            SgdConfig::new()
                .with_momentum(0.0)
                .with_weight_decay(0.0)
                .init::<B, Classifier<B, TinyBackbone<B>>>()
                .unwrap(),
            Box::new(RandomSampling::new(n)),
            data.clone(),
            data,
        )
        .config(
            SupervisedConfig::new()
                .with_epochs(1)
                .with_batch_size(n)
                .with_lr(lr)
                .with_progress_bar(false),
        )
        .run_dir(&dir)
        .build(&device)
        .unwrap();
        let summary = trainer.fit().unwrap();
        assert_eq!(summary.steps.len(), 1);
        let model = trainer.model();
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
    type Student = Classifier<Ad, TinyBackbone<Ad>>;

    fn spl_advise_trainer(
        dir: &Path,
        mode: StartMode,
    ) -> SupervisedTrainer<Ad, TinyBackbone<Ad>, impl Optimizer<Student, Ad>> {
        let device = Default::default();
        let train = images(48, 2, 1);
        let test = images(10, 2, 2);
        let seeded = |seed: u64| {
            <Ad as Backend>::seed(&device, seed);
            TinyBackbone::<Ad> {
                fc: LinearConfig::new(4, 6).init(&device),
            }
        };
        let model = Classifier::new(seeded(1), 2, &device);
        let net = EmbeddingNetConfig::new()
            .with_dim(3)
            .init(seeded(2), &device);
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
        SupervisedTrainer::builder(
            model,
            AdamConfig::new().init(),
            Box::new(selector),
            train,
            test,
        )
        .config(
            SupervisedConfig::new()
                .with_epochs(3)
                .with_batch_size(8)
                .with_lr(1e-2)
                .with_checkpoint_every(1)
                .with_progress_bar(false)
                .with_seed(3),
        )
        .augmentation(
            ClassifierAugmentConfig::new()
                .with_hflip(0.5)
                .with_translate(1)
                .with_rotate_degrees(10.0)
                .with_seed(4),
        )
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
            .map(|e| e.stats.iter().find(|(n, _)| n == "selected").unwrap().1)
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
        let weights = |t: &SupervisedTrainer<Ad, TinyBackbone<Ad>, _>| {
            let mut v = values(t.model().backbone.fc.weight.val());
            v.extend(values(t.model().head.weight.val()));
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
        let read = |d: &Path| std::fs::read(last(d).join(files::SELECTION)).unwrap();
        assert_eq!(
            read(&straight),
            read(&stopped),
            "clusters, sampler and pace"
        );
        // The records name parameters by random ids: compare the embedding networks' values.
        let embedding = |d: &Path| {
            let device = Default::default();
            let net = EmbeddingNetConfig::new().with_dim(3).init(
                TinyBackbone::<Ad> {
                    fc: LinearConfig::new(4, 6).init(&device),
                },
                &device,
            );
            let record = read_record::<Ad, _>(&last(d).join(files::EMBEDDING), &device).unwrap();
            let net = net.load_record(record);
            let mut v = values(net.backbone.fc.weight.val());
            v.extend(values(net.embed.weight.val()));
            v
        };
        assert_eq!(embedding(&straight), embedding(&stopped));
        // A supervised checkpoint holds the selection's files, all checksummed.
        let meta = checkpoint::read_meta(&straight.join("checkpoints/epoch-0003")).unwrap();
        assert_eq!(meta.kind, CheckpointKind::Supervised);
        for name in [
            files::SELECTION,
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
