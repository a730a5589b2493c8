//! The training loop: a seeded, resumable run of any [`SslMethod`] with any optimiser.
//!
//! [`Trainer::fit`] reads like the algorithm box of the papers:
//!
//! ```text
//! for epoch in epochs:
//!     for batch in loader.epoch(epoch):                       # order keyed by (seed, epoch)
//!         view1, view2 = augment(batch, key = step)           # draws keyed by (seed, step)
//!         method.set_object_boxes(boxes mapped into the views) # crop-and-rotate only
//!         out = method.forward(view1, view2, progress)        # stochastic layers seeded by step
//!         online = optimiser.step(lr(step), online, grad(out.loss))
//!         read loss and statistics (one transfer); stop naming the step if the loss is not finite
//!         method.after_step(progress)                         # EMA, queue
//!     kNN monitor every `knn_every` epochs; checkpoint every `checkpoint_every` epochs
//! ```
//!
//! A run is built with [`Trainer::builder`]. The run directory ([`run_dir`]) holds
//! `config.json` (the typed [`RunRecord`]), `steps.csv` and `epochs.csv` ([`run_log`], with the progress bar and the log lines) and
//! `checkpoints/` ([`checkpoint`]). Whether a run may start or resume in a directory is decided
//! before any work ([`run_dir::inspect`]); a resume names every setting that differs from the
//! run's. Because every random draw is keyed by counters, a resumed run repeats exactly what an
//! uninterrupted run does (on a deterministic backend such as the CPU's).
//!
//! Why not burn-train's `Learner`: its step is `forward → backward → optimiser step`, while a
//! momentum encoder and a key queue must be updated after the optimiser step
//! ([`SslMethod::after_step`]); exact resume needs the method's own states (queue, pointer, key
//! and target networks, loss states), the seeds and the counters in one checkpoint written
//! atomically and verified on load, which its checkpointer (one file per component, no
//! checksums) does not give; and its metrics are per-batch aggregates, not the per-step rows a
//! curriculum study reads back.
//!
//! **Object boxes** (MICO's crop-and-rotate). A method whose [`SslMethod::uses_object_boxes`] is
//! true gets one box per image around its object. The trainer computes them at the start of each
//! quarter of the run ([`box_update_epochs`]: epochs `0, ⌊E/4⌋, ⌊E/2⌋, ⌊3E/4⌋`, at most 4 times)
//! with the current backbone in inference mode, on every training image (dataset order,
//! unaugmented, normalised as `view1` is, in batches of the loader's size): the channel mean of
//! [`Backbone::forward_feature_map`] thresholded at [`DEFAULT_BOX_THRESHOLD`]
//! ([`object_boxes_of`]). Before every forward it maps the batch's boxes through the two views'
//! crops and flips ([`box_in_view`]) and hands them to [`SslMethod::set_object_boxes`]. The boxes
//! and the epoch they were computed at are part of the checkpoint (`curricula.json`), so a
//! resumed run uses the same boxes; the time each computation took is logged and is the
//! `box_seconds` column of `epochs.csv`.

mod ahead;
pub mod checkpoint;
pub mod run_dir;
pub mod run_log;
pub mod supervised;

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::optim::Optimizer;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use serde::Serialize;

use crate::base::error::{non_negative, positive, ConfigError};
use crate::base::seed::mix_seed;
use crate::curation::{
    frechet_distance_readback, CurationState, Decision, FrechetCuration, FrechetCurationConfig,
};
use crate::curriculum::rotation::{
    box_epoch_for, box_in_view, box_update_epochs, object_boxes_of, CropBox, ObjectBoxes,
    DEFAULT_BOX_THRESHOLD,
};
use crate::data::{DataError, Dataset, HostBatch, ImageItem, Loader};
use crate::eval::monitor::{KnnMonitor, KnnResult};
use crate::method::{Progress, SslMethod};
use crate::optim::{WarmupCosine, WarmupCosineConfig};
use crate::pipeline::Augmenter;
use crate::pipeline::{AugmenterState, TwoViews};
use ahead::{Batches, ReadyBatch, StepOf};
use checkpoint::{
    check_shapes, files, read_record, shapes, to_bytes, write_atomic, CheckpointDir, CheckpointMeta,
};
use curriculum_ssl_models::Backbone;
use run_dir::{differences, Difference, Extension, RESUMABLE_CHANGES, RUN_FORMAT};
use run_log::RunLog;

pub use checkpoint::{load_backbone, resolve_checkpoint};
pub use run_dir::RunRecord;
pub use run_log::{EpochRecord, StepRecord};

/// Settings of a run.
#[derive(Config, Debug)]
pub struct TrainConfig {
    /// Passes over the training data.
    #[config(default = 100)]
    pub epochs: usize,
    /// Peak learning rate (reached after the warm-up).
    #[config(default = 0.06)]
    pub lr: f64,
    /// Epochs of linear warm-up before the cosine decay.
    #[config(default = 0)]
    pub warmup_epochs: usize,
    /// Learning rate at the end of the cosine.
    #[config(default = 0.0)]
    pub final_lr: f64,
    /// A checkpoint every this many epochs, and always at the end; 0: only at the end.
    #[config(default = 10)]
    pub checkpoint_every: usize,
    /// The kNN monitor (if one is set) every this many epochs, and always at the end; 0: only
    /// at the end.
    #[config(default = 10)]
    pub knn_every: usize,
    /// Draw a progress bar on standard error (when it is a terminal).
    #[config(default = true)]
    pub progress_bar: bool,
    /// Seed of the stochastic layers (dropout, stochastic depth): step `s` draws from
    /// `(seed, s)`.
    #[config(default = 0)]
    pub seed: u64,
    /// Fréchet batch curation ("The Bad Batches"): after the warm-up, a batch whose two views'
    /// projections are farther apart than the threshold is not applied but re-augmented.
    #[config(default = "None")]
    pub curation: Option<FrechetCurationConfig>,
}

impl TrainConfig {
    /// The learning-rate plan of a run of `epochs` epochs of `batches` steps: warm-up, then
    /// cosine to `final_lr`.
    ///
    /// # Errors
    /// If the learning rates or the warm-up are impossible.
    pub fn schedule(&self, epochs: usize, batches: usize) -> Result<WarmupCosine, ConfigError> {
        WarmupCosineConfig::new(self.lr, epochs * batches)
            .with_warmup_steps(self.warmup_epochs * batches)
            .with_final_lr(self.final_lr)
            .init()
    }
}

/// What the adaptive pieces of a run learned from it, saved as `curricula.json` in every
/// checkpoint: the augmenter's adaptive curricula, the batch curation's threshold and
/// counters, and crop-and-rotate's object boxes.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CurriculumStates {
    /// The augmenter's state (the self-paced AutoAugment).
    pub augmenter: AugmenterState,
    /// Fréchet batch curation's state, when it is on.
    pub curation: Option<CurationState>,
    /// The object boxes in use and the epoch they were computed at, when the method uses them
    /// ([`SslMethod::uses_object_boxes`]); absent from checkpoints of layout 3, read as none.
    #[serde(default)]
    pub object_boxes: Option<ObjectBoxes>,
}

/// How a run starts in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartMode {
    /// A new run: the directory must be missing or empty.
    #[default]
    Fresh,
    /// Continue the run in the directory from its newest valid checkpoint with the same
    /// settings (a missing or empty directory starts afresh).
    Resume,
    /// As `Resume`, and the run may have more epochs than planned: the learning-rate schedule
    /// is re-planned from the current step ([`WarmupCosine::extend`]).
    Extend,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// An impossible setting, or a dataset that cannot be used.
    #[error(transparent)]
    Library(#[from] crate::Error),
    /// The loss became NaN or infinite.
    #[error(
        "the loss became {value} at step {step} (epoch {epoch}); the run stopped without \
         writing anything more. {}",
        match last_checkpoint {
            Some(p) => format!("The last good checkpoint is {}.", p.display()),
            None => "No checkpoint had been written yet.".to_string(),
        }
    )]
    NonFiniteLoss {
        /// The (0-based) step whose loss was not finite.
        step: usize,
        /// Its epoch (0-based).
        epoch: usize,
        /// The loss.
        value: f64,
        /// The newest checkpoint on disk, left untouched.
        last_checkpoint: Option<PathBuf>,
    },
    /// A checkpoint that cannot be read or used.
    #[error("checkpoint {}: {reason}", .path.display())]
    Checkpoint {
        /// The checkpoint file or directory.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A run directory that does not fit the run asked for (it holds another run, or files
    /// that are not a run).
    #[error("run directory {}: {reason}", .path.display())]
    Run {
        /// The run directory, or its file that tells.
        path: PathBuf,
        /// What does not fit.
        reason: String,
    },
    /// A resume with settings that differ from the run's.
    #[error(
        "{} was written by a run with other settings: {}; resume with the run's settings, \
         extend it on purpose (more epochs), or start a new run directory",
        .path.display(),
        .differences.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Mismatch {
        /// The record compared with (a checkpoint's `run.json` or the run's `config.json`).
        path: PathBuf,
        /// Every setting that differs.
        differences: Vec<Difference>,
    },
    /// A file of the run directory that cannot be written.
    #[error("{}: {reason}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The supervised trainer's example selection failed (e.g. its embedding network's loss
    /// became NaN).
    #[error("example selection: {reason}")]
    Selection {
        /// What went wrong.
        reason: String,
    },
    /// Batch curation could not measure or judge a batch (e.g. a non-finite distance).
    #[error("batch curation at step {step}: {reason}")]
    Curation {
        /// 0-based step.
        step: usize,
        /// What went wrong.
        reason: String,
    },
}

impl TrainError {
    /// Whether the error comes from what the caller gave (settings, data, the run directory and
    /// its checkpoints) rather than from something that failed during the run (a non-finite
    /// loss, a write that failed): a command line exits with 2 for the former.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Self::Library(_) | Self::Checkpoint { .. } | Self::Run { .. } | Self::Mismatch { .. }
        )
    }
}

impl From<ConfigError> for TrainError {
    fn from(e: ConfigError) -> Self {
        Self::Library(e.into())
    }
}

impl From<DataError> for TrainError {
    fn from(e: DataError) -> Self {
        Self::Library(e.into())
    }
}

/// What one call of [`Trainer::fit`] did.
#[derive(Debug, Clone, Default)]
pub struct TrainSummary {
    /// Every step of this call.
    pub steps: Vec<StepRecord>,
    /// Every epoch of this call.
    pub epochs: Vec<EpochRecord>,
}

/// Builds a [`Trainer`]: the parts of a run, then [`TrainerBuilder::build`] checks the settings
/// and the run directory before any work.
pub struct TrainerBuilder<B: AutodiffBackend, S, O, D> {
    method: S,
    optimizer: O,
    augmenter: Augmenter,
    loader: Loader<D>,
    config: TrainConfig,
    description: serde_json::Value,
    run_dir: PathBuf,
    monitor: Option<KnnMonitor>,
    mode: StartMode,
    augment_ahead: bool,
    view_threads: bool,
    _backend: std::marker::PhantomData<B>,
}

impl<B, S, O, D> TrainerBuilder<B, S, O, D>
where
    B: AutodiffBackend,
    S: SslMethod<B>,
    O: Optimizer<S::Online, B>,
    D: Dataset<ImageItem> + 'static,
{
    /// The trainer's settings (default: [`TrainConfig::new`]).
    pub fn config(mut self, config: TrainConfig) -> Self {
        self.config = config;
        self
    }

    /// The run directory (default: `runs/run`).
    pub fn run_dir(mut self, run_dir: impl AsRef<Path>) -> Self {
        self.run_dir = run_dir.as_ref().to_path_buf();
        self
    }

    /// The caller's description of the run (method, backbone, data...), saved in the run
    /// record and compared on resume.
    ///
    /// # Panics
    /// If `description` cannot be serialised to JSON (a map with non-string keys).
    pub fn describe(mut self, description: &impl Serialize) -> Self {
        self.description =
            serde_json::to_value(description).expect("a run description serialises to JSON");
        self
    }

    /// A kNN monitor, run every `knn_every` epochs and at the end.
    pub fn knn_monitor(mut self, monitor: KnnMonitor) -> Self {
        self.monitor = Some(monitor);
        self
    }

    /// How the run starts in its directory (default: [`StartMode::Fresh`]).
    pub fn start(mut self, mode: StartMode) -> Self {
        self.mode = mode;
        self
    }

    /// Upload and augment each batch on a thread of its own while the step before runs
    /// (default: `false`; turn it on for the CPU backend, where it pays). On the CPU the views
    /// are the same either way (each step's draws are keyed by the step), so this only changes
    /// the speed; it is not part of the run's settings. Leave it off on the cubecl backends
    /// (wgpu, CUDA): with burn 0.21 two threads working on one device at once changed results
    /// on wgpu (`docs/gpu.md`). An augmenter that learns from the losses
    /// ([`Augmenter::is_adaptive`]) always augments between steps; a user's own curriculum
    /// function (`Scheduler::custom`) is then called on that thread, up to two steps early, so
    /// it must depend on its `Progress` alone.
    pub fn augment_ahead(mut self, ahead: bool) -> Self {
        self.augment_ahead = ahead;
        self
    }

    /// Let the method back-propagate its two views' passes on two threads
    /// ([`SslMethod::set_view_threads`]; default: `false`). On the CPU the gradients are the
    /// same numbers either way, so this only changes the speed and is not part of the run's
    /// settings. It pays on the CPU backend, where a convolution's backward pass keeps one core
    /// busy; leave it off on the cubecl backends, as [`TrainerBuilder::augment_ahead`].
    pub fn view_threads(mut self, on: bool) -> Self {
        self.view_threads = on;
        self
    }

    /// Checks the settings and the run directory, resumes from the newest valid checkpoint when
    /// asked, and writes the run's `config.json`.
    ///
    /// # Errors
    /// If a setting is impossible, the loader yields no full batch, the directory cannot hold
    /// this run, or a resume finds other settings or only damaged checkpoints.
    pub fn build(self, device: &B::Device) -> Result<Trainer<B, S, O, D>, TrainError> {
        let config = self.config;
        if config.epochs == 0 {
            return Err(ConfigError::new("epochs", "must be at least 1").into());
        }
        positive("lr", config.lr)?;
        non_negative("final_lr", config.final_lr)?;
        let batch_size = self.loader.config().batch_size;
        if batch_size < 2 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "must be at least 2, got {batch_size} (batch norm needs two values per \
                     channel, and a contrastive loss needs negatives)"
                ),
            )
            .into());
        }
        let batches = self.loader.num_batches();
        if batches == 0 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "{} images give no full batch of {batch_size} (drop_last)",
                    self.loader.dataset().len(),
                ),
            )
            .into());
        }
        if config.warmup_epochs > config.epochs {
            return Err(ConfigError::new(
                "warmup_epochs",
                format!(
                    "{} warm-up epochs exceed the {} epochs of the run",
                    config.warmup_epochs, config.epochs
                ),
            )
            .into());
        }
        config
            .epochs
            .checked_mul(batches)
            .ok_or_else(|| ConfigError::new("epochs", "too many steps to count"))?;
        let mut record = RunRecord {
            format: RUN_FORMAT.to_string(),
            train: config.clone(),
            loader: self.loader.config().clone(),
            augmentation: self.augmenter.config().clone(),
            extensions: Vec::new(),
            run: self.description,
        };
        let knn_ks = self
            .monitor
            .as_ref()
            .map_or(Vec::new(), |m| m.settings().iter().map(|s| s.k).collect());
        let mut method = self.method;
        method.set_view_threads(self.view_threads);
        let mut trainer = Trainer {
            method,
            optimizer: Some(self.optimizer),
            schedule: config.schedule(config.epochs, batches)?,
            augmenter: self.augmenter,
            loader: self.loader,
            monitor: self.monitor,
            checkpoints: CheckpointDir::new(&self.run_dir),
            log: RunLog::new(&self.run_dir, knn_ks, config.progress_bar),
            record: record.clone(),
            run_dir: self.run_dir,
            device: device.clone(),
            epoch: 0,
            step: 0,
            resumed_from: None,
            last_checkpoint: None,
            curation: config.curation.as_ref().map(|c| c.init()).transpose()?,
            curation_seconds: 0.0,
            object_boxes: None,
            box_seconds: 0.0,
            augment_ahead: self.augment_ahead,
        };
        trainer.check_feature_map()?;
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

/// A run: method, optimiser, schedule, augmentation and data, with its run directory.
pub struct Trainer<B: AutodiffBackend, S: SslMethod<B>, O: Optimizer<S::Online, B>, D> {
    method: S,
    optimizer: Option<O>,
    schedule: WarmupCosine,
    augmenter: Augmenter,
    loader: Loader<D>,
    monitor: Option<KnnMonitor>,
    record: RunRecord,
    run_dir: PathBuf,
    checkpoints: CheckpointDir,
    log: RunLog,
    device: B::Device,
    epoch: usize,
    step: usize,
    resumed_from: Option<PathBuf>,
    last_checkpoint: Option<PathBuf>,
    curation: Option<FrechetCuration>,
    /// Wall time of the current epoch spent on batch curation: measuring every attempt's
    /// distance, and augmenting and forwarding the attempts it rejected (a first attempt's
    /// augmentation done ahead, on the augmentation thread, is not counted).
    curation_seconds: f64,
    /// The object boxes in use (methods that use them), one per training image.
    object_boxes: Option<ObjectBoxes>,
    /// Wall time of the current epoch spent computing object boxes.
    box_seconds: f64,
    /// Augment each batch on a thread of its own while the step before runs.
    augment_ahead: bool,
}

impl<B, S, O, D> Trainer<B, S, O, D>
where
    B: AutodiffBackend,
    S: SslMethod<B>,
    O: Optimizer<S::Online, B>,
    D: Dataset<ImageItem> + 'static,
{
    /// A run of `method` with `optimizer` on the batches of `loader`, augmented by `augmenter`;
    /// the rest is set on the builder.
    pub fn builder(
        method: S,
        optimizer: O,
        augmenter: Augmenter,
        loader: Loader<D>,
    ) -> TrainerBuilder<B, S, O, D> {
        TrainerBuilder {
            method,
            optimizer,
            augmenter,
            loader,
            config: TrainConfig::new(),
            description: serde_json::Value::Null,
            run_dir: PathBuf::from("runs/run"),
            monitor: None,
            mode: StartMode::Fresh,
            augment_ahead: false,
            view_threads: false,
            _backend: std::marker::PhantomData,
        }
    }

    /// The method (e.g. to read its networks after training).
    pub fn method(&self) -> &S {
        &self.method
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The run's record, as saved in `config.json`.
    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// Epochs completed.
    pub fn epoch(&self) -> usize {
        self.epoch
    }

    /// Steps completed.
    pub fn step(&self) -> usize {
        self.step
    }

    /// The learning rate of a step.
    pub fn lr_at(&self, step: usize) -> f64 {
        self.schedule.lr_at(step)
    }

    /// The object boxes in use, one per training image in dataset order, with the epoch they
    /// were computed at (methods that use them, once computed or loaded).
    pub fn object_boxes(&self) -> Option<&ObjectBoxes> {
        self.object_boxes.as_ref()
    }

    /// The checkpoint the run resumed from, if it did.
    pub fn resumed_from(&self) -> Option<&Path> {
        self.resumed_from.as_deref()
    }

    /// The newest checkpoint written or loaded.
    pub fn last_checkpoint(&self) -> Option<&Path> {
        self.last_checkpoint.as_deref()
    }

    /// Finds the run's newest valid checkpoint, compares its settings with `given` and loads
    /// it; returns the record the run continues under.
    fn resume(&mut self, mut given: RunRecord, extend: bool) -> Result<RunRecord, TrainError> {
        let found = self.checkpoints.newest_valid()?;
        let saved_path = match &found {
            Some((dir, _)) => dir.join(files::RUN),
            None => self.run_dir.join(files::CONFIG),
        };
        let saved: RunRecord = RunRecord::read_file(&saved_path)?;
        given.extensions = saved.extensions.clone();
        let batches = self.loader.num_batches();
        let (old_epochs, new_epochs) = (saved.train.epochs, given.train.epochs);
        let extending = extend && new_epochs > old_epochs;
        if extending {
            // The warm-up belongs to the original plan.
            given.train.warmup_epochs = saved.train.warmup_epochs;
        }
        if extend && !extending {
            return Err(TrainError::Run {
                path: self.run_dir.clone(),
                reason: format!(
                    "extending needs more epochs than the run's {old_epochs}, got {new_epochs}"
                ),
            });
        }
        let as_json = |r: &RunRecord| serde_json::to_value(r).expect("JSON value");
        let differences: Vec<Difference> = differences(&as_json(&saved), &as_json(&given))
            .into_iter()
            .filter(|d| !RESUMABLE_CHANGES.contains(&d.setting.as_str()))
            .filter(|d| !(extending && d.setting == "train.epochs"))
            .collect();
        if !differences.is_empty() {
            return Err(TrainError::Mismatch {
                path: saved_path,
                differences,
            });
        }
        // The schedule of the original plan, with its extensions.
        let t = &saved.train;
        let planned = saved.extensions.first().map_or(t.epochs, |e| e.from_epochs);
        self.schedule = t.schedule(planned, batches)?;
        for e in &given.extensions {
            self.schedule.extend(e.at_step, e.to_epochs * batches)?;
        }
        let Some((dir, meta)) = found else {
            log::info!(
                "{} holds no checkpoint yet: starting the run afresh",
                self.run_dir.display()
            );
            return Ok(given);
        };
        self.load_checkpoint(&dir, &meta)?;
        if extending {
            let extension = Extension {
                at_step: self.step,
                from_epochs: old_epochs,
                to_epochs: new_epochs,
            };
            let lr_before = self.schedule.lr_at(self.step);
            self.schedule
                .extend(extension.at_step, new_epochs * batches)?;
            log::info!(
                "extending the run from {old_epochs} to {new_epochs} epochs: from step {} on, \
                 the learning rate follows the plan of a {new_epochs}-epoch run ({:.4e} at \
                 that step, {:.4e} under the old plan)",
                self.step,
                self.schedule.lr_at(self.step),
                lr_before
            );
            given.extensions.push(extension);
        }
        Ok(given)
    }

    /// Loads a verified checkpoint into this run.
    fn load_checkpoint(&mut self, dir: &Path, meta: &CheckpointMeta) -> Result<(), TrainError> {
        let batches = self.loader.num_batches();
        let mismatch = |reason: String| TrainError::Checkpoint {
            path: dir.to_path_buf(),
            reason,
        };
        if meta.kind != checkpoint::CheckpointKind::SelfSupervised {
            return Err(mismatch(
                "written by the supervised trainer, not by a self-supervised run".into(),
            ));
        }
        if meta.loader_seed != self.loader.config().seed
            || meta.augment_seed != self.augmenter.config().seed
        {
            return Err(mismatch(format!(
                "written with loader seed {} and augmentation seed {}, this run has {} and {}",
                meta.loader_seed,
                meta.augment_seed,
                self.loader.config().seed,
                self.augmenter.config().seed
            )));
        }
        if meta.step != meta.epoch * batches || meta.epoch > self.schedule.total_steps() / batches {
            return Err(mismatch(format!(
                "{} steps after {} epochs do not fit this run's {batches} batches per epoch \
                 (another batch size or dataset?)",
                meta.step, meta.epoch
            )));
        }
        let online_file = dir.join(files::ONLINE);
        let expected = shapes(self.method.online());
        check_shapes(&online_file, &meta.online_shapes, &expected)?;
        let record =
            read_record::<B, <S::Online as Module<B>>::Record>(&online_file, &self.device)?;
        let online = self.method.online().clone().load_record(record);
        check_shapes(&online_file, &shapes(&online), &expected)?;
        self.method.set_online(online);
        let state = read_record::<B, S::State>(&dir.join(files::METHOD), &self.device)?;
        self.method
            .load_state(state)
            .map_err(|e| mismatch(e.to_string()))?;
        let record = read_record::<B, O::Record>(&dir.join(files::OPTIMIZER), &self.device)?;
        let optimizer = self
            .optimizer
            .take()
            .expect("the optimiser is always put back");
        self.optimizer = Some(optimizer.load_record(record));
        let curricula = dir.join(files::CURRICULA);
        let text = std::fs::read(&curricula).map_err(|e| checkpoint::io_error(&curricula, e))?;
        let states: CurriculumStates =
            serde_json::from_slice(&text).map_err(|e| TrainError::Checkpoint {
                path: curricula.clone(),
                reason: format!("not a curriculum state: {e}"),
            })?;
        self.augmenter
            .load_state(states.augmenter)
            .map_err(|e| mismatch(e.to_string()))?;
        match (&mut self.curation, states.curation) {
            (Some(c), Some(state)) => c.restore(state).map_err(|e| mismatch(e.to_string()))?,
            (None, None) => {}
            _ => {
                return Err(mismatch(
                    "the checkpoint and the run disagree on whether batch curation is on".into(),
                ))
            }
        }
        match (self.method.uses_object_boxes(), states.object_boxes) {
            (true, Some(boxes)) => {
                let size = self.training_image_size()?;
                boxes
                    .check(self.loader.dataset().len(), size)
                    .map_err(|e| TrainError::Checkpoint {
                        path: curricula.clone(),
                        reason: e,
                    })?;
                self.object_boxes = Some(boxes);
            }
            (false, None) => {}
            (true, None) => {
                return Err(mismatch(
                    "the method uses object boxes (crop-and-rotate) but the checkpoint holds none"
                        .into(),
                ))
            }
            (false, Some(_)) => {
                return Err(mismatch(
                    "the checkpoint holds object boxes (crop-and-rotate) but the method does not \
                     use them"
                        .into(),
                ))
            }
        }
        self.epoch = meta.epoch;
        self.step = meta.step;
        self.resumed_from = Some(dir.to_path_buf());
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
        let run = serde_json::to_vec_pretty(&self.record).expect("JSON value");
        let files = vec![
            (
                files::ONLINE,
                to_bytes::<B, _>(
                    self.method.online().clone().into_record(),
                    "online networks",
                )?,
            ),
            (
                files::BACKBONE,
                to_bytes::<B, _>(self.method.backbone().clone().into_record(), "backbone")?,
            ),
            (
                files::METHOD,
                to_bytes::<B, _>(self.method.state(), "method state")?,
            ),
            (
                files::OPTIMIZER,
                to_bytes::<B, _>(optimizer.to_record(), "optimiser state")?,
            ),
            (files::RUN, run),
            (
                files::CURRICULA,
                serde_json::to_vec_pretty(&CurriculumStates {
                    augmenter: self.augmenter.state(),
                    curation: self.curation.as_ref().map(|c| c.state().clone()),
                    object_boxes: self.object_boxes.clone(),
                })
                .expect("JSON value"),
            ),
        ];
        let meta = CheckpointMeta {
            format_version: checkpoint::FORMAT_VERSION,
            kind: checkpoint::CheckpointKind::SelfSupervised,
            epoch: self.epoch,
            step: self.step,
            loader_seed: self.loader.config().seed,
            augment_seed: self.augmenter.config().seed,
            checksums: Default::default(),
            online_shapes: shapes(self.method.online()),
            backbone_shapes: shapes(self.method.backbone()),
        };
        let dir = self
            .checkpoints
            .save(checkpoint::CheckpointFiles { meta, files })?;
        self.last_checkpoint = Some(dir.clone());
        Ok(dir)
    }

    /// Runs the kNN monitor on the current backbone (inference mode), if one is set.
    ///
    /// # Errors
    /// If a kNN setting does not fit the data.
    pub fn evaluate_knn(&self) -> Result<Option<Vec<KnnResult>>, TrainError> {
        match &self.monitor {
            None => Ok(None),
            Some(monitor) => {
                let backbone = self.method.backbone().valid();
                Ok(Some(monitor.evaluate(&backbone, &self.device)?))
            }
        }
    }

    /// Trains to the last epoch of the plan.
    ///
    /// # Errors
    /// On a non-finite loss (naming the step; the checkpoints on disk are kept), unreadable
    /// data, or I/O errors in the run directory.
    pub fn fit(&mut self) -> Result<TrainSummary, TrainError> {
        self.fit_epochs(usize::MAX)
    }

    /// One optimiser step on a batch: augmentation, forward (stochastic layers seeded by the
    /// step), backward, optimiser step, one read-back of the loss and statistics, and the
    /// method's after-step update. Returns the loss, then the method's statistics and the
    /// augmenter's scheduled knobs.
    fn train_step(
        &mut self,
        images: Tensor<B::InnerBackend, 4>,
        mut ahead: Option<TwoViews<B::InnerBackend>>,
        indices: &[usize],
        progress: Progress,
        lr: f64,
    ) -> Result<(f64, Vec<(String, f64)>), TrainError> {
        let seed = mix_seed(self.record.train.seed, progress.step as u64);
        let mut attempt = 0;
        let (out, policy, knobs, frd) = loop {
            let attempt_started = Instant::now();
            // The first draw may have been made ahead, on the augmentation thread.
            let views = match ahead.take() {
                Some(views) => views,
                None => self
                    .augmenter
                    .redrawn_views(images.clone(), progress, attempt),
            };
            if let Some(boxes) = &self.object_boxes {
                // Each image's box in view1's coordinates, then in view2's.
                let mapped = views
                    .geometry
                    .iter()
                    .flat_map(|geometry| {
                        indices
                            .iter()
                            .zip(geometry)
                            .map(|(&i, g)| box_in_view(&boxes.boxes[i], g))
                    })
                    .collect();
                self.method.set_object_boxes(mapped);
            }
            let method = &mut self.method;
            let out = crate::base::seed::with_seed::<B, _>(&self.device, seed, || {
                method.forward(
                    Tensor::from_inner(views.view1),
                    Tensor::from_inner(views.view2),
                    progress,
                )
            });
            let Some(curation) = self.curation.as_mut() else {
                break (out, views.policy, views.knobs, None);
            };
            // The views' distance before anything is applied: a rejected batch's graph is
            // dropped, so the weights never see it.
            let curation_error = |reason: String| TrainError::Curation {
                step: progress.step,
                reason,
            };
            let Some([z1, z2]) = out.embeddings.clone() else {
                return Err(curation_error(
                    "the method gives no two-view embeddings to measure".into(),
                ));
            };
            let measure_started = Instant::now();
            let frd = frechet_distance_readback(z1.inner(), z2.inner())
                .map_err(|e| curation_error(e.to_string()))?;
            match curation
                .observe(progress.epoch, frd)
                .map_err(|e| curation_error(e.to_string()))?
            {
                Decision::Redraw => {
                    // The whole rejected attempt is the curation's cost.
                    self.curation_seconds += attempt_started.elapsed().as_secs_f64();
                    attempt += 1;
                }
                Decision::Apply | Decision::AcceptAfterRetries => {
                    // Of the applied attempt, only the measurement is.
                    self.curation_seconds += measure_started.elapsed().as_secs_f64();
                    break (out, views.policy, views.knobs, Some(frd));
                }
            }
        };
        let grads = self.method.gradients(&out.loss);
        let optimizer = self.optimizer.as_mut().expect("put back after every step");
        let online = optimizer.step(lr, self.method.online().clone(), grads);
        self.method.set_online(online);
        // The loss and the statistics in one transfer: the only synchronisation of the step.
        let mut values = vec![out.loss.inner()];
        values.extend(out.stats.iter().map(|(_, v)| v.clone().inner()));
        let host: Vec<f64> = Tensor::cat(values, 0)
            .into_data()
            .convert::<f64>()
            .to_vec()
            .expect("a float tensor converts to f64");
        let loss = host[0];
        if !loss.is_finite() {
            return Err(TrainError::NonFiniteLoss {
                step: progress.step,
                epoch: progress.epoch,
                value: loss,
                last_checkpoint: self.last_checkpoint.clone(),
            });
        }
        self.method.after_step(progress);
        self.augmenter.observe(progress, policy, loss);
        let stats = out
            .stats
            .iter()
            .zip(&host[1..])
            .map(|((name, _), v)| (name.to_string(), *v))
            .chain(knobs.iter().map(|(name, v)| (name.to_string(), *v)))
            .chain(frd.map(|d| ("frd".to_string(), d)))
            .chain(frd.map(|_| ("redraws".to_string(), attempt as f64)))
            .collect();
        Ok((loss, stats))
    }

    /// Trains at most `max_epochs` more epochs (e.g. a time budget), then writes a checkpoint
    /// so that a resume can continue.
    ///
    /// # Errors
    /// As [`Trainer::fit`].
    pub fn fit_epochs(&mut self, max_epochs: usize) -> Result<TrainSummary, TrainError> {
        let total_steps = self.schedule.total_steps();
        self.log.start(total_steps, self.step);
        let result = self.run_epochs(max_epochs);
        // The bar ends and the rows reach the disk whether the epochs succeeded or not.
        let finished = self.log.finish();
        let summary = result?;
        finished?;
        Ok(summary)
    }

    /// The selection pieces' counts of an epoch, for epochs.csv: batch curation's rejections
    /// (each followed by a redraw), the batches accepted after the last redraw, and the wall
    /// time the curation took (measuring every attempt, and the rejected attempts' augmentation
    /// and forward pass); for a method that uses object boxes, the wall time spent computing
    /// them (`box_seconds`, 0 in the epochs that reuse the previous ones).
    fn epoch_stats(&self, epoch: usize) -> Vec<(String, f64)> {
        let mut stats = self.curation_stats(epoch);
        if self.method.uses_object_boxes() {
            // To the microsecond: a small training set's boxes take well under a millisecond.
            stats.push(("box_seconds".into(), (self.box_seconds * 1e6).round() / 1e6));
        }
        stats
    }

    /// Batch curation's columns of epochs.csv (none without curation).
    fn curation_stats(&self, epoch: usize) -> Vec<(String, f64)> {
        match &self.curation {
            None => Vec::new(),
            Some(c) => {
                let counters = if c.state().epoch == Some(epoch) {
                    c.epoch_counters()
                } else {
                    Default::default()
                };
                vec![
                    ("curation_rejections".into(), counters.rejections as f64),
                    (
                        "curation_accepted_after_retries".into(),
                        counters.accepted_after_retries as f64,
                    ),
                    (
                        "curation_seconds".into(),
                        (self.curation_seconds * 1e3).round() / 1e3,
                    ),
                ]
            }
        }
    }

    /// The batch curation's state, when it is on (threshold, counters).
    pub fn curation(&self) -> Option<&FrechetCuration> {
        self.curation.as_ref()
    }

    /// The error of a method that uses object boxes with a backbone that has no feature map.
    fn no_feature_map() -> TrainError {
        ConfigError::new(
            "backbone",
            "the method rotates inside object boxes (crop-and-rotate), which come from the \
             backbone's spatial feature map, and this backbone has none \
             (Backbone::forward_feature_map returns None): implement it, or use another \
             rotation mode",
        )
        .into()
    }

    /// The training images `start..end` (dataset order) as the network sees `view1`
    /// unaugmented: scaled to `[0, 1]` and normalised as `view1` is; on the inner backend.
    fn training_images(
        &self,
        start: usize,
        end: usize,
    ) -> Result<Tensor<B::InnerBackend, 4>, TrainError> {
        let dataset = self.loader.dataset();
        let source = Path::new("training images");
        let indices: Vec<usize> = (start..end).collect();
        let items = indices
            .iter()
            .map(|&i| {
                dataset.get(i).ok_or_else(|| DataError::Request {
                    path: source.to_path_buf(),
                    reason: format!(
                        "the dataset has no item {i} although its length is {}",
                        dataset.len()
                    ),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let batch = HostBatch::from_items(source, &items, indices)?;
        let mut images = batch.to_device::<B::InnerBackend>(&self.device).images;
        if let Some(normalize) = &self.augmenter.config().view1.normalize {
            images = normalize.apply(images);
        }
        Ok(images)
    }

    /// The `[height, width]` of the training images.
    fn training_image_size(&self) -> Result<[usize; 2], TrainError> {
        let [_, _, h, w] = self.training_images(0, 1)?.dims();
        Ok([h, w])
    }

    /// For a method that uses object boxes: checks, on one training image, that the backbone
    /// has a feature map to compute them from.
    fn check_feature_map(&self) -> Result<(), TrainError> {
        if !self.method.uses_object_boxes() {
            return Ok(());
        }
        let backbone = self.method.backbone().valid();
        match backbone.forward_feature_map(self.training_images(0, 1)?) {
            Some(_) => Ok(()),
            None => Err(Self::no_feature_map()),
        }
    }

    /// The object boxes of every training image from the current backbone (inference mode, no
    /// gradient), in dataset order, computed in batches of the loader's size.
    fn compute_object_boxes(&self, epoch: usize) -> Result<ObjectBoxes, TrainError> {
        let backbone = self.method.backbone().valid();
        let n = self.loader.dataset().len();
        let batch_size = self.loader.config().batch_size;
        let mut boxes = Vec::with_capacity(n);
        let mut image_size = [0, 0];
        for start in (0..n).step_by(batch_size) {
            let images = self.training_images(start, (start + batch_size).min(n))?;
            let [_, _, h, w] = images.dims();
            image_size = [h, w];
            let batch = object_boxes_of(&backbone, images, DEFAULT_BOX_THRESHOLD)
                .ok_or_else(Self::no_feature_map)?;
            boxes.extend(batch);
        }
        Ok(ObjectBoxes {
            epoch,
            image_size,
            boxes,
        })
    }

    /// At the start of `epoch` of a run of `epochs`: recomputes the object boxes when the boxes
    /// in use were computed before the start of the current quarter ([`box_epoch_for`]) or
    /// there are none yet; the boxes loaded from a checkpoint are kept until the next quarter.
    fn update_object_boxes(&mut self, epoch: usize, epochs: usize) -> Result<(), TrainError> {
        self.box_seconds = 0.0;
        if !self.method.uses_object_boxes() {
            return Ok(());
        }
        let due = box_epoch_for(epoch, epochs);
        if self.object_boxes.as_ref().is_some_and(|b| b.epoch >= due) {
            return Ok(());
        }
        let started = Instant::now();
        let boxes = self.compute_object_boxes(epoch)?;
        self.box_seconds = started.elapsed().as_secs_f64();
        log::info!(
            "object boxes of {} training images computed at epoch {} in {:.3} s (recomputed \
             at the start of epochs {:?})",
            boxes.boxes.len(),
            epoch + 1,
            self.box_seconds,
            box_update_epochs(epochs)
                .iter()
                .map(|e| e + 1)
                .collect::<Vec<_>>()
        );
        let whole = CropBox::whole(boxes.image_size);
        if boxes.boxes.iter().all(|b| *b == whole) {
            log::warn!(
                "every object box is the whole image (the backbone's last feature map is too \
                 coarse, or its heat maps flat): crop-and-rotate rotates whole images until the \
                 next computation; a backbone that keeps more resolution (e.g. a ResNet with the \
                 CIFAR stem on small images) gives boxes around the objects"
            );
        }
        self.object_boxes = Some(boxes);
        Ok(())
    }

    fn run_epochs(&mut self, max_epochs: usize) -> Result<TrainSummary, TrainError> {
        let batches = self.loader.num_batches();
        let total_steps = self.schedule.total_steps();
        let epochs = total_steps / batches;
        let end_epoch = epochs.min(self.epoch.saturating_add(max_epochs));
        let mut summary = TrainSummary::default();
        while self.epoch < end_epoch {
            let epoch = self.epoch;
            let started = Instant::now();
            self.curation_seconds = 0.0;
            self.update_object_boxes(epoch, epochs)?;
            let (mut loss_sum, mut images, mut lr) = (0.0, 0usize, 0.0);
            let first_step = self.step;
            let progress_of = move |b: usize| Progress {
                step: first_step + b,
                total_steps,
                epoch,
                total_epochs: epochs,
            };
            let ahead = (self.augment_ahead && !self.augmenter.is_adaptive()).then(|| {
                let progress: StepOf = Box::new(progress_of);
                (self.augmenter.clone(), progress)
            });
            let ready_batches = Batches::<B::InnerBackend>::new(
                self.loader.epoch(epoch as u64),
                &self.device,
                ahead,
            );
            // Each step's time runs from the end of the step before: waiting for its batch
            // included.
            let mut t0 = Instant::now();
            for ready in ready_batches {
                let ReadyBatch {
                    batch,
                    images: x,
                    views,
                } = ready?;
                let step = self.step;
                let progress = progress_of(step - first_step);
                lr = self.schedule.lr_at(step);
                let (loss, stats) = self.train_step(x, views, &batch.indices, progress, lr)?;
                self.step += 1;
                let record = StepRecord {
                    step,
                    epoch,
                    loss,
                    lr,
                    images_per_s: batch.len as f64 / t0.elapsed().as_secs_f64(),
                    stats,
                };
                self.log.step(&record, epochs)?;
                t0 = Instant::now();
                loss_sum += loss;
                images += batch.len;
                summary.steps.push(record);
            }
            let seconds = started.elapsed().as_secs_f64();
            self.epoch += 1;
            let last = self.epoch == epochs;
            let due = |every: usize| last || (every > 0 && self.epoch.is_multiple_of(every));
            let knn = if due(self.record.train.knn_every) {
                self.evaluate_knn()?.unwrap_or_default()
            } else {
                Vec::new()
            };
            let checkpoint = if due(self.record.train.checkpoint_every) || self.epoch == end_epoch {
                Some(self.save_checkpoint()?)
            } else {
                None
            };
            let record = EpochRecord {
                epoch,
                stats: self.epoch_stats(epoch),
                mean_loss: loss_sum / batches as f64,
                lr,
                images_per_s: images as f64 / seconds,
                seconds,
                knn,
                checkpoint,
            };
            self.log.epoch(&record, epochs)?;
            summary.epochs.push(record);
        }
        Ok(summary)
    }
}
