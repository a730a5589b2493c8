//! The training loop: a seeded, resumable run of any [`SslMethod`] with any optimiser.
//!
//! [`Trainer::fit`] reads like the algorithm box of the papers:
//!
//! ```text
//! for epoch in epochs:
//!     for batch in loader.epoch(epoch):                       # order keyed by (seed, epoch)
//!         view1, view2 = augment(batch, key = step)           # draws keyed by (seed, step)
//!         out = method.forward(view1, view2, progress)
//!         stop with an error naming the step if out.loss is not finite
//!         online = optimiser.step(lr(step), online, grad(out.loss))
//!         method.after_step(progress)                         # EMA, queue
//!     kNN monitor every `knn_every` epochs; checkpoint every `checkpoint_every` epochs
//! ```
//!
//! The run directory holds `config.json` (the resolved configuration given by the caller),
//! `steps.csv` and `epochs.csv` ([`metrics`]) and `checkpoints/` ([`checkpoint`]). Because every
//! random draw is keyed by counters, [`Trainer::resume`] followed by [`Trainer::fit`] repeats
//! exactly what an uninterrupted run does (on a deterministic backend such as the CPU's).

pub mod checkpoint;
pub mod metrics;
pub mod progress;

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use crate::augment::Augmenter;
use crate::data::{DataError, Dataset, ImageItem, Loader};
use crate::error::{non_negative, positive, ConfigError};
use crate::eval::monitor::{KnnMonitor, KnnResult};
use crate::method::{Progress, SslMethod};
use crate::optim::{WarmupCosine, WarmupCosineConfig};
use checkpoint::{read_meta, read_record, shapes, to_bytes, CheckpointDir, CheckpointMeta};
use metrics::CsvLog;
use progress::ProgressBar;

pub use checkpoint::{load_backbone, resolve_checkpoint};

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
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// An impossible setting, or a dataset that cannot be used.
    #[error(transparent)]
    Library(#[from] crate::Error),
    /// The loss became NaN or infinite.
    #[error(
        "the loss became {value} at step {step} (epoch {epoch}); the run stopped before the \
         optimiser step. {}",
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
    /// A checkpoint that cannot be written or used.
    #[error("checkpoint {}: {reason}", .path.display())]
    Checkpoint {
        /// The checkpoint file or directory.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A run directory that does not fit the run asked for (it holds another run, or one with
    /// other settings).
    #[error("run directory {}: {reason}", .path.display())]
    Run {
        /// The run directory's file that tells.
        path: PathBuf,
        /// What does not fit.
        reason: String,
    },
    /// A file of the run directory that cannot be written.
    #[error("{}: {reason}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
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

/// One optimiser step, as written to `steps.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 0-based step.
    pub step: usize,
    /// 0-based epoch.
    pub epoch: usize,
    /// The loss.
    pub loss: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Source images per second of this step (data, augmentation, forward, backward, update).
    pub images_per_s: f64,
    /// The method's statistics (e.g. momentum, curricular `t`).
    pub stats: Vec<(String, f64)>,
}

/// One epoch, as written to `epochs.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// 0-based epoch.
    pub epoch: usize,
    /// Mean loss over its steps.
    pub mean_loss: f64,
    /// Learning rate of its last step.
    pub lr: f64,
    /// Source images per second over the epoch.
    pub images_per_s: f64,
    /// Wall time of the epoch, in seconds (kNN and checkpoint excluded).
    pub seconds: f64,
    /// kNN accuracies, when the monitor ran after this epoch.
    pub knn: Vec<KnnResult>,
    /// The checkpoint written after this epoch.
    pub checkpoint: Option<PathBuf>,
}

/// What one call of [`Trainer::fit`] did.
#[derive(Debug, Clone, Default)]
pub struct TrainSummary {
    /// Every step of this call.
    pub steps: Vec<StepRecord>,
    /// Every epoch of this call.
    pub epochs: Vec<EpochRecord>,
}

/// A run: method, optimiser, schedule, augmentation and data, with its run directory.
pub struct Trainer<B: AutodiffBackend, S: SslMethod<B>, O: Optimizer<S::Online, B>, D> {
    method: S,
    optimizer: Option<O>,
    schedule: WarmupCosine,
    augmenter: Augmenter,
    loader: Loader<D>,
    monitor: Option<KnnMonitor>,
    config: TrainConfig,
    resolved_config: serde_json::Value,
    run_dir: PathBuf,
    checkpoints: CheckpointDir,
    steps_log: CsvLog,
    epochs_log: CsvLog,
    device: B::Device,
    epoch: usize,
    step: usize,
    resumed: bool,
    started: bool,
    last_checkpoint: Option<PathBuf>,
}

impl<B, S, O, D> Trainer<B, S, O, D>
where
    B: AutodiffBackend,
    S: SslMethod<B>,
    O: Optimizer<S::Online, B>,
    D: Dataset<ImageItem> + 'static,
{
    /// A run of `method` in `run_dir`. `resolved_config` is written to `config.json`: pass
    /// everything that defines the run (method, augmentation, loader and training settings).
    ///
    /// # Errors
    /// If a setting is impossible, or the loader yields no batch.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        method: S,
        optimizer: O,
        augmenter: Augmenter,
        loader: Loader<D>,
        config: TrainConfig,
        resolved_config: serde_json::Value,
        run_dir: impl AsRef<Path>,
        device: &B::Device,
    ) -> Result<Self, TrainError> {
        if config.epochs == 0 {
            return Err(ConfigError::new("epochs", "must be at least 1").into());
        }
        positive("lr", config.lr)?;
        non_negative("final_lr", config.final_lr)?;
        let batches = loader.num_batches();
        if batches == 0 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "{} images give no full batch of {} (drop_last)",
                    loader.dataset().len(),
                    loader.config().batch_size
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
        let schedule = WarmupCosineConfig::new(config.lr, config.epochs * batches)
            .with_warmup_steps(config.warmup_epochs * batches)
            .with_final_lr(config.final_lr)
            .init()?;
        let run_dir = run_dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&run_dir).map_err(|e| TrainError::Io {
            path: run_dir.clone(),
            reason: format!("cannot create the run directory: {e}"),
        })?;
        Ok(Self {
            method,
            optimizer: Some(optimizer),
            schedule,
            augmenter,
            loader,
            monitor: None,
            config,
            resolved_config,
            checkpoints: CheckpointDir::new(&run_dir),
            steps_log: CsvLog::new(run_dir.join("steps.csv")),
            epochs_log: CsvLog::new(run_dir.join("epochs.csv")),
            run_dir,
            device: device.clone(),
            epoch: 0,
            step: 0,
            resumed: false,
            started: false,
            last_checkpoint: None,
        })
    }

    /// Adds a kNN monitor, run every `knn_every` epochs and at the end.
    pub fn with_knn_monitor(mut self, monitor: KnnMonitor) -> Self {
        self.monitor = Some(monitor);
        self
    }

    /// The method (e.g. to read its networks after training).
    pub fn method(&self) -> &S {
        &self.method
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
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

    /// The newest checkpoint written or loaded.
    pub fn last_checkpoint(&self) -> Option<&Path> {
        self.last_checkpoint.as_deref()
    }

    /// Continues from the run directory's latest checkpoint, if it has one; returns it.
    ///
    /// # Errors
    /// If the checkpoint is unreadable, or was written by a run with other seeds, another
    /// batch count per epoch, or another method or model.
    pub fn resume(&mut self) -> Result<Option<PathBuf>, TrainError> {
        let Some(dir) = self.checkpoints.latest()? else {
            return Ok(None);
        };
        self.load_checkpoint(&dir)?;
        Ok(Some(dir))
    }

    /// Loads a checkpoint directory into this run.
    ///
    /// # Errors
    /// As [`Trainer::resume`].
    pub fn load_checkpoint(&mut self, dir: &Path) -> Result<(), TrainError> {
        let meta = read_meta(dir)?;
        let batches = self.loader.num_batches();
        let mismatch = |reason: String| TrainError::Checkpoint {
            path: dir.to_path_buf(),
            reason,
        };
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
        if meta.step != meta.epoch * batches || meta.epoch > self.config.epochs {
            return Err(mismatch(format!(
                "{} steps after {} epochs do not fit this run's {batches} batches per epoch \
                 and {} epochs (another batch size or dataset?)",
                meta.step, meta.epoch, self.config.epochs
            )));
        }
        let online_file = dir.join("online.mpk");
        let record =
            read_record::<B, <S::Online as Module<B>>::Record>(&online_file, &self.device)?;
        let expected = shapes(self.method.online());
        let online = self.method.online().clone().load_record(record);
        if shapes(&online) != expected {
            return Err(mismatch(
                "its networks have other parameter shapes (another model or width)".into(),
            ));
        }
        self.method.set_online(online);
        let state = read_record::<B, S::State>(&dir.join("method.mpk"), &self.device)?;
        self.method
            .load_state(state)
            .map_err(|e| mismatch(e.to_string()))?;
        let record = read_record::<B, O::Record>(&dir.join("optimizer.mpk"), &self.device)?;
        let optimizer = self
            .optimizer
            .take()
            .expect("the optimiser is always put back");
        self.optimizer = Some(optimizer.load_record(record));
        self.epoch = meta.epoch;
        self.step = meta.step;
        self.resumed = true;
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
        let files = vec![
            (
                "online.mpk",
                to_bytes::<B, _>(
                    self.method.online().clone().into_record(),
                    "online networks",
                )?,
            ),
            (
                "backbone.mpk",
                to_bytes::<B, _>(self.method.backbone().clone().into_record(), "backbone")?,
            ),
            (
                "method.mpk",
                to_bytes::<B, _>(self.method.state(), "method state")?,
            ),
            (
                "optimizer.mpk",
                to_bytes::<B, _>(optimizer.to_record(), "optimiser state")?,
            ),
        ];
        let meta = CheckpointMeta {
            format_version: checkpoint::FORMAT_VERSION,
            epoch: self.epoch,
            step: self.step,
            loader_seed: self.loader.config().seed,
            augment_seed: self.augmenter.config().seed,
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

    fn start(&mut self) -> Result<(), TrainError> {
        if self.started {
            return Ok(());
        }
        let config_path = self.run_dir.join("config.json");
        let resolved = serde_json::json!({
            "train": serde_json::to_value(&self.config).expect("plain config"),
            "run": self.resolved_config,
        });
        if self.resumed {
            if let Ok(text) = std::fs::read(&config_path) {
                let old: serde_json::Value =
                    serde_json::from_slice(&text).map_err(|e| TrainError::Io {
                        path: config_path.clone(),
                        reason: format!("not JSON: {e}"),
                    })?;
                if old != resolved {
                    return Err(TrainError::Run {
                        path: config_path,
                        reason: "its run was started with another configuration; resume with \
                                 the same settings, or start a new run directory"
                            .into(),
                    });
                }
            }
        } else if self.checkpoints.latest()?.is_some() {
            return Err(TrainError::Run {
                path: self.run_dir.clone(),
                reason: "already holds a run (checkpoints/latest): resume it, or choose another \
                         run directory"
                    .into(),
            });
        }
        let text = serde_json::to_vec_pretty(&resolved).expect("JSON value");
        checkpoint::write_atomic(&config_path, &text)?;
        self.steps_log.truncate_to(self.step)?;
        self.epochs_log.truncate_to(self.epoch)?;
        self.started = true;
        Ok(())
    }

    /// Trains to the last epoch of the configuration.
    ///
    /// # Errors
    /// On a non-finite loss (naming the step; the checkpoints on disk are kept), unreadable
    /// data, or I/O errors in the run directory.
    pub fn fit(&mut self) -> Result<TrainSummary, TrainError> {
        self.fit_epochs(usize::MAX)
    }

    /// Trains at most `max_epochs` more epochs (e.g. a time budget), then writes a checkpoint
    /// so that [`Trainer::resume`] can continue.
    ///
    /// # Errors
    /// As [`Trainer::fit`].
    pub fn fit_epochs(&mut self, max_epochs: usize) -> Result<TrainSummary, TrainError> {
        self.start()?;
        let batches = self.loader.num_batches();
        let epochs = self.config.epochs;
        let total_steps = epochs * batches;
        let end_epoch = epochs.min(self.epoch.saturating_add(max_epochs));
        let mut bar = ProgressBar::new(self.config.progress_bar, total_steps, self.step);
        let mut summary = TrainSummary::default();
        while self.epoch < end_epoch {
            let epoch = self.epoch;
            let started = Instant::now();
            let (mut loss_sum, mut images, mut lr) = (0.0, 0usize, 0.0);
            for batch in self.loader.epoch(epoch as u64) {
                let batch = batch?;
                let step = self.step;
                let t0 = Instant::now();
                let progress = Progress { step, total_steps };
                let x = batch.to_device::<B::InnerBackend>(&self.device).images;
                let views = self.augmenter.two_views(x, step as u64);
                let out = self.method.forward(
                    Tensor::from_inner(views.view1),
                    Tensor::from_inner(views.view2),
                    progress,
                );
                let loss = out.loss.clone().into_scalar().elem::<f64>();
                if !loss.is_finite() {
                    bar.finish_line();
                    let _ = self.steps_log.flush();
                    return Err(TrainError::NonFiniteLoss {
                        step,
                        epoch,
                        value: loss,
                        last_checkpoint: self.last_checkpoint.clone(),
                    });
                }
                lr = self.schedule.lr_at(step);
                let grads = GradientsParams::from_grads(out.loss.backward(), self.method.online());
                let optimizer = self.optimizer.as_mut().expect("put back after every step");
                let online = optimizer.step(lr, self.method.online().clone(), grads);
                self.method.set_online(online);
                self.method.after_step(progress);
                self.step += 1;
                let stats: Vec<(String, f64)> = out
                    .stats
                    .into_iter()
                    .map(|(name, v)| (name.to_string(), v.into_scalar().elem::<f64>()))
                    .collect();
                let images_per_s = batch.len as f64 / t0.elapsed().as_secs_f64();
                let mut header = vec!["step", "epoch", "loss", "lr", "images_per_s"];
                header.extend(stats.iter().map(|(n, _)| n.as_str()));
                let mut row = vec![
                    step.to_string(),
                    epoch.to_string(),
                    format!("{loss:e}"),
                    format!("{lr:e}"),
                    format!("{images_per_s:.3}"),
                ];
                row.extend(stats.iter().map(|(_, v)| format!("{v:e}")));
                self.steps_log.append(&header, &row)?;
                bar.update(epoch, epochs, step, loss, lr, images_per_s);
                loss_sum += loss;
                images += batch.len;
                summary.steps.push(StepRecord {
                    step,
                    epoch,
                    loss,
                    lr,
                    images_per_s,
                    stats,
                });
            }
            let seconds = started.elapsed().as_secs_f64();
            self.epoch += 1;
            bar.finish_line();
            let last = self.epoch == epochs;
            let due = |every: usize| last || (every > 0 && self.epoch.is_multiple_of(every));
            let knn = if due(self.config.knn_every) {
                self.evaluate_knn()?.unwrap_or_default()
            } else {
                Vec::new()
            };
            let checkpoint = if due(self.config.checkpoint_every) || self.epoch == end_epoch {
                Some(self.save_checkpoint()?)
            } else {
                None
            };
            let record = EpochRecord {
                epoch,
                mean_loss: loss_sum / batches as f64,
                lr,
                images_per_s: images as f64 / seconds,
                seconds,
                knn,
                checkpoint,
            };
            self.log_epoch(&record)?;
            summary.epochs.push(record);
        }
        self.steps_log.flush()?;
        self.epochs_log.flush()?;
        Ok(summary)
    }

    fn log_epoch(&mut self, record: &EpochRecord) -> Result<(), TrainError> {
        let mut header = vec![
            "epoch".to_string(),
            "mean_loss".into(),
            "lr".into(),
            "images_per_s".into(),
            "seconds".into(),
        ];
        let mut row = vec![
            record.epoch.to_string(),
            format!("{:e}", record.mean_loss),
            format!("{:e}", record.lr),
            format!("{:.3}", record.images_per_s),
            format!("{:.3}", record.seconds),
        ];
        let mut knn_text = String::new();
        if let Some(monitor) = &self.monitor {
            for (i, s) in monitor.settings().iter().enumerate() {
                header.push(format!("knn{}_top1", s.k));
                header.push(format!("knn{}_top5", s.k));
                match record.knn.get(i) {
                    Some(r) => {
                        row.push(format!("{:.4}", r.accuracy.top1));
                        row.push(format!("{:.4}", r.accuracy.top5));
                        knn_text.push_str(&format!(
                            ", kNN(k={}, T={}) top-1 {:.2}%",
                            r.k,
                            r.temperature,
                            100.0 * r.accuracy.top1
                        ));
                    }
                    None => row.extend([String::new(), String::new()]),
                }
            }
        }
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        self.epochs_log.append(&header, &row)?;
        self.epochs_log.flush()?;
        self.steps_log.flush()?;
        log::info!(
            "epoch {}/{}: loss {:.4}, lr {:.3e}, {:.1} images/s, {}{}{}",
            record.epoch + 1,
            self.config.epochs,
            record.mean_loss,
            record.lr,
            record.images_per_s,
            progress::format_duration(std::time::Duration::from_secs_f64(record.seconds)),
            knn_text,
            match &record.checkpoint {
                Some(p) => format!(", checkpoint {}", p.display()),
                None => String::new(),
            }
        );
        Ok(())
    }
}
