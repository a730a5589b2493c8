//! The loop: [`Trainer`] (built by [`TrainerBuilder`]) runs the epochs, attempts and steps of
//! any [`Task`], calls the hooks, writes the logs and checkpoints, and resumes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use burn::optim::Optimizer;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use serde::Serialize;

use super::checkpoint::{
    self, files, write_atomic, CheckpointDir, CheckpointMeta, EpochSoFar, STEP_STATE,
};
use super::config::{StartMode, TrainConfig};
use super::error::{describe_tensors, Difference, TrainError};
use super::hook::{BatchView, Hook, Hooks, RunView, Verdict};
use super::run_dir::{
    self, differences, DataFingerprint, Extension, RunLock, RunRecord, RESUMABLE_CHANGES,
    RUN_FORMAT,
};
use super::run_log::{EpochRecord, RunLog, StepRecord};
use super::self_supervised::{SelfSupervised, SelfSupervisedTask};
use super::task::{LrPlan, Task};
use crate::base::error::{non_negative, positive, ConfigError};
use crate::base::seed::mix_seed;
use crate::data::{Dataset, ImageItem, Loader};
use crate::data_parallel::Replica;
use crate::method::{Progress, SslMethod, ViewPasses};
use crate::pipeline::Augmenter;

/// The record as the loop keeps it: the caller's description and the step's settings as JSON.
type LoopRecord = RunRecord<serde_json::Value, serde_json::Value>;

/// Attempts of one step the hooks may ask to redraw, in a row, before the run stops with
/// [`TrainError::Hook`], unless [`TrainerBuilder::max_attempts`] says otherwise: a hook that
/// never applies one would hold the run at its step forever.
pub const MAX_ATTEMPTS: usize = 1000;

/// What one call of [`Trainer::fit`] did.
#[derive(Debug, Clone, Default)]
pub struct TrainSummary {
    /// Every step of this call.
    pub steps: Vec<StepRecord>,
    /// Every epoch of this call.
    pub epochs: Vec<EpochRecord>,
}

/// Builds a [`Trainer`]: the step, then the loop's settings, the run directory and the hooks;
/// [`TrainerBuilder::build`] checks them all and the run directory before any work.
pub struct TrainerBuilder<B: AutodiffBackend, K> {
    task: K,
    config: TrainConfig,
    description: serde_json::Value,
    data: Option<DataFingerprint>,
    machine_specific: Vec<String>,
    recorded_since: Vec<String>,
    stop: Option<Arc<AtomicBool>>,
    run_dir: PathBuf,
    hooks: Hooks<B, K>,
    mode: StartMode,
    replica: Option<Replica<B>>,
    max_attempts: usize,
    /// A description that could not be serialised ([`TrainerBuilder::describe`]), refused by
    /// [`TrainerBuilder::build`].
    description_error: Option<String>,
}

impl<B: AutodiffBackend, K: Task<B>> TrainerBuilder<B, K> {
    /// The attempts of one step the hooks may ask to redraw in a row before the run stops with
    /// [`TrainError::Hook`] (default [`MAX_ATTEMPTS`]; at least 1).
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Makes this run replica `replica.rank()` of a data-parallel run
    /// ([`crate::data_parallel`]; build it inside [`crate::data_parallel::run`], one
    /// trainer per replica, all with the same settings and the global batch size): the step
    /// trains on its shard of every batch with averaged gradients; replica 0 alone writes the
    /// run directory (`config.json`, the logs, the checkpoints), which the others read to
    /// resume. A checkpoint resumes on any number of replicas.
    pub fn replica(mut self, replica: Replica<B>) -> Self {
        self.replica = Some(replica);
        self
    }

    /// The loop's settings (default: [`TrainConfig::new`]).
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
    /// record and compared on resume. One that cannot be written as JSON (a map with keys that
    /// are not strings) is refused by [`TrainerBuilder::build`].
    pub fn describe(mut self, description: &impl Serialize) -> Self {
        match serde_json::to_value(description) {
            Ok(value) => {
                self.description = value;
                self.description_error = None;
            }
            Err(e) => self.description_error = Some(e.to_string()),
        }
        self
    }

    /// What the run trains on ([`DataFingerprint::of_images`]), saved in the run record: a
    /// resume on other data is refused, saying so (the images of a folder changed, another
    /// subset), and so is a replica on another machine that reads other data.
    pub fn data(mut self, fingerprint: DataFingerprint) -> Self {
        self.data = Some(fingerprint);
        self
    }

    /// Settings of the run record (dotted paths, e.g. `run.data`, a data directory's path) that
    /// may differ between the machines of a data-parallel run: every replica compares its run
    /// record with replica 0's before the run starts, and refuses the run naming any other
    /// setting that differs (another `--seed` or `--epochs` on one machine).
    pub fn machine_specific(mut self, settings: &[&str]) -> Self {
        self.machine_specific = settings.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Settings of the run record (dotted paths, e.g. `run.optimizer`) that runs recorded
    /// before them lack: a resume of such a run takes the given value for the missing one
    /// (there is nothing to compare it with) and compares it from then on, as every other
    /// setting. A setting the record holds is compared as ever.
    pub fn recorded_since(mut self, settings: &[&str]) -> Self {
        self.recorded_since = settings.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Stops the run at the end of the step during which `flag` became true (on several
    /// replicas: at the end of that epoch, which every replica agrees on), with
    /// [`TrainError::Interrupted`]; the checkpoints on disk are kept. A command line sets it
    /// on Ctrl-C (SIGINT) or SIGTERM.
    pub fn stop_when(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Adds a hook (see [`Hook`]): called after the ones added before it, its columns after
    /// theirs.
    pub fn hook(mut self, hook: impl Hook<B, K>) -> Self {
        self.hooks.push(Box::new(hook));
        self
    }

    /// Adds a boxed hook (e.g. one chosen at run time).
    pub fn boxed_hook(mut self, hook: Box<dyn Hook<B, K>>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// How the run starts in its directory (default: [`StartMode::Fresh`]).
    pub fn start(mut self, mode: StartMode) -> Self {
        self.mode = mode;
        self
    }

    /// Checks the settings and the run directory, resumes from the newest valid checkpoint when
    /// asked, and writes the run's `config.json`.
    ///
    /// # Errors
    /// If a setting is impossible, the step yields no full batch, the directory cannot hold
    /// this run, or a resume finds other settings or only damaged checkpoints.
    pub fn build(self, device: &B::Device) -> Result<Trainer<B, K>, TrainError> {
        let config = self.config;
        if let Some(e) = self.description_error {
            return Err(ConfigError::new(
                "describe",
                format!("the run's description cannot be written as JSON: {e}"),
            )
            .into());
        }
        if config.epochs == 0 {
            return Err(ConfigError::new("epochs", "must be at least 1").into());
        }
        positive("lr", config.lr)?;
        non_negative("final_lr", config.final_lr)?;
        let mut task = self.task;
        if let Some(replica) = &self.replica {
            let gather_for_hooks = self.hooks.iter().any(|h| h.reads_embeddings());
            task.set_replica(replica.clone(), gather_for_hooks)?;
            if let Some(hook) = self.hooks.iter().find(|h| !h.runs_on_replicas()) {
                return Err(ConfigError::new(
                    "devices",
                    format!(
                        "the hook `{}` decides from each batch's contents and does not run \
                         data-parallel; train with it on one device",
                        hook.name()
                    ),
                )
                .into());
            }
        }
        task.prepare(device)?;
        let batches = task.batches_per_epoch();
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
        let mut hook_settings = std::collections::BTreeMap::new();
        for (i, hook) in self.hooks.iter().enumerate() {
            if self.hooks[..i].iter().any(|h| h.name() == hook.name()) {
                return Err(ConfigError::new(
                    "hooks",
                    format!("two hooks are named `{}`", hook.name()),
                )
                .into());
            }
            if hook.name() == STEP_STATE {
                return Err(ConfigError::new(
                    "hooks",
                    format!("`{STEP_STATE}` is the step's key; name the hook otherwise"),
                )
                .into());
            }
            let settings = hook.describe();
            if !settings.is_null() {
                hook_settings.insert(hook.name().to_string(), settings);
            }
        }
        let mut record = RunRecord {
            format: RUN_FORMAT.to_string(),
            train: config.clone(),
            task: serde_json::to_value(task.settings()).expect("JSON value"),
            hooks: hook_settings,
            extensions: Vec::new(),
            data: self.data,
            run: self.description,
        };
        if let Some(replica) = &self.replica {
            let mut local: Vec<&str> = RESUMABLE_CHANGES.to_vec();
            local.extend(task.resumable_changes());
            local.extend(self.machine_specific.iter().map(String::as_str));
            same_settings_everywhere(replica, &record, &local, device)?;
        }
        let mut trainer = Trainer {
            schedule: task.lr_plan(&config, config.epochs)?,
            task,
            hooks: self.hooks,
            checkpoints: CheckpointDir::new(&self.run_dir),
            log: RunLog::new(&self.run_dir, config.progress_bar),
            record: record.clone(),
            recorded_since: self.recorded_since,
            run_dir: self.run_dir,
            device: device.clone(),
            epoch: 0,
            step_count: 0,
            pool: None,
            resumed_from: None,
            last_checkpoint: None,
            resume_at: None,
            so_far: EpochSoFar::default(),
            pool_warned: false,
            replicas: self.replica.as_ref().map_or(1, |r| r.replicas()),
            lead: self.replica.as_ref().is_none_or(|r| r.is_lead()),
            replica: self.replica.clone(),
            stop: self.stop,
            max_attempts: self.max_attempts,
            _lock: None,
        };
        for (capability, refusal) in trainer.task.needs() {
            if !trainer
                .hooks
                .iter()
                .any(|h| h.provides().contains(&capability))
            {
                return Err(ConfigError::new("hooks", refusal).into());
            }
        }
        trainer.with_hooks(|hook, run| hook.check(run))?;
        if config.checkpoint_every_steps > 0 {
            if let Some(hook) = trainer.hooks.iter().find(|h| !h.resumes_mid_epoch()) {
                return Err(ConfigError::new(
                    "checkpoint_every_steps",
                    format!(
                        "hook `{}` cannot be resumed in the middle of an epoch; checkpoint at \
                         epoch ends only (0)",
                        hook.name()
                    ),
                )
                .into());
            }
        }
        if trainer.lead {
            // Checked before the lock is taken (which creates the directory), so that a
            // foreign directory gets nothing written into it, and again under the lock: another
            // process may have started a run there in between.
            run_dir::holds_a_run_to_resume(&trainer.run_dir, self.mode)?;
            trainer._lock = Some(RunLock::acquire(&trainer.run_dir)?);
            if run_dir::holds_a_run_to_resume(&trainer.run_dir, self.mode)? {
                trainer.checkpoints.clear_leftovers()?;
                record = trainer.resume(record, self.mode == StartMode::Extend)?;
            }
            // Everything is checked before the run directory is rewritten.
            trainer.log.check()?;
            let text = serde_json::to_vec_pretty(&record).expect("JSON value");
            write_atomic(&trainer.run_dir.join(files::CONFIG), &text)?;
            trainer.log.resume_at(trainer.step_count, trainer.epoch)?;
        }
        if let Some(replica) = &self.replica {
            // The other replicas follow replica 0's decision once it has made it: the step it
            // resumes at (0: a fresh start) comes with the barrier, and they load the same
            // checkpoint. (The slot per replica keeps the tensor as long as the replicas, which
            // burn-collective's ring all-reduce needs.)
            let mut slots = vec![0.0f32; replica.replicas()];
            if trainer.lead {
                slots[0] = trainer.step_count as f32;
            }
            let summed = replica.sum(Tensor::<B, 1>::from_floats(slots.as_slice(), device));
            if let Some(reason) = replica.failure() {
                return Err(TrainError::Replica {
                    rank: replica.rank(),
                    reason: format!("replica 0 did not prepare the run directory: {reason}"),
                });
            }
            let lead_step = summed.into_data().convert::<f64>().to_vec::<f64>().unwrap()[0];
            let lead_step = lead_step.round() as usize;
            if !trainer.lead && lead_step > 0 {
                record = trainer.resume(record, self.mode == StartMode::Extend)?;
                if trainer.step_count != lead_step {
                    return Err(TrainError::Replica {
                        rank: replica.rank(),
                        reason: format!(
                            "replica 0 resumed at step {lead_step} but this replica found its \
                             newest checkpoint at step {} in {}: across machines every machine \
                             needs the run directory (a shared file system, or a copy)",
                            trainer.step_count,
                            trainer.run_dir.display()
                        ),
                    });
                }
            }
        }
        trainer.record = record;
        Ok(trainer)
    }
}

impl<B, S, O, D> TrainerBuilder<B, SelfSupervised<B, S, O, D>>
where
    B: AutodiffBackend,
    S: SslMethod<B> + 'static,
    O: Optimizer<S::Online, B> + 'static,
    D: Dataset<ImageItem> + 'static,
{
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
        self.task.set_augment_ahead(ahead);
        self
    }

    /// How the method passes its two views through its networks
    /// ([`SslMethod::set_view_passes`]; default: [`ViewPasses::Separate`]). The gradients are the
    /// same numbers up to rounding either way (bit for bit with [`ViewPasses::Threads`]), so
    /// this only changes the speed and is not part of the run's settings. Threads pay on the
    /// CPU backend, where a convolution's backward pass keeps one core busy; one joint batch
    /// ([`ViewPasses::Joint`]) on the cubecl backends, where a step is bound by its kernel
    /// launches (docs/gpu.md).
    pub fn view_passes(mut self, passes: ViewPasses) -> Self {
        self.task.method_mut().set_view_passes(passes);
        self
    }
}

/// A run: a [`Task`] (what is trained, on what), its hooks, its learning-rate plan and its run
/// directory, driven epoch by epoch by [`Trainer::fit`].
pub struct Trainer<B: AutodiffBackend, K> {
    task: K,
    schedule: Box<dyn LrPlan>,
    hooks: Hooks<B, K>,
    record: LoopRecord,
    /// Settings a run recorded before them lacks ([`TrainerBuilder::recorded_since`]).
    recorded_since: Vec<String>,
    run_dir: PathBuf,
    checkpoints: CheckpointDir,
    log: RunLog,
    device: B::Device,
    epoch: usize,
    step_count: usize,
    /// The examples this epoch draws from, and the hook that selected them.
    pool: Option<(&'static str, Vec<usize>)>,
    resumed_from: Option<PathBuf>,
    last_checkpoint: Option<PathBuf>,
    /// Where a resume from the middle of an epoch continues: the batches of the epoch already
    /// trained and its totals so far (taken by the first epoch the run trains).
    resume_at: Option<(usize, EpochSoFar)>,
    /// The epoch being trained: its totals so far, for a checkpoint in its middle.
    so_far: EpochSoFar,
    /// Whether a mid-epoch checkpoint was left out because a hook selected the epoch's
    /// examples (said once).
    pool_warned: bool,
    /// Replicas of a data-parallel run (1 on one device).
    replicas: usize,
    /// Whether this trainer writes the run directory (one device, or replica 0).
    lead: bool,
    /// This trainer's replica, in a data-parallel run.
    replica: Option<Replica<B>>,
    /// Stops the run when set ([`TrainerBuilder::stop_when`]).
    stop: Option<Arc<AtomicBool>>,
    /// [`TrainerBuilder::max_attempts`].
    max_attempts: usize,
    /// The run directory's lock, held by the lead while the trainer lives.
    _lock: Option<RunLock>,
}

impl<B, S, O, D> Trainer<B, SelfSupervised<B, S, O, D>>
where
    B: AutodiffBackend,
    S: SslMethod<B> + 'static,
    O: Optimizer<S::Online, B> + 'static,
    D: Dataset<ImageItem> + 'static,
{
    /// A self-supervised run of `method` with `optimizer` on the batches of `loader`, augmented
    /// by `augmenter`; the rest is set on the builder.
    pub fn builder(
        method: S,
        optimizer: O,
        augmenter: Augmenter,
        loader: Loader<D>,
    ) -> TrainerBuilder<B, SelfSupervised<B, S, O, D>> {
        Trainer::with_task(SelfSupervised::new(method, optimizer, augmenter, loader))
    }

    /// The method (e.g. to read its networks after training).
    pub fn method(&self) -> &S {
        self.task.method()
    }
}

impl<B: AutodiffBackend, K: Task<B>> Trainer<B, K> {
    /// A run of `step`; the rest is set on the builder (e.g. a supervised run:
    /// `Trainer::with_task(Supervised::new(..))`).
    pub fn with_task(task: K) -> TrainerBuilder<B, K> {
        TrainerBuilder {
            task,
            config: TrainConfig::new(),
            description: serde_json::Value::Null,
            data: None,
            machine_specific: Vec::new(),
            recorded_since: Vec::new(),
            stop: None,
            run_dir: PathBuf::from("runs/run"),
            hooks: Vec::new(),
            mode: StartMode::Fresh,
            replica: None,
            max_attempts: MAX_ATTEMPTS,
            description_error: None,
        }
    }

    /// The step (its networks, data and augmentation).
    pub fn task(&self) -> &K {
        &self.task
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The run's record, as saved in `config.json` (the step's settings as JSON).
    pub fn record(&self) -> &RunRecord<serde_json::Value, serde_json::Value> {
        &self.record
    }

    /// Epochs completed.
    pub fn epoch(&self) -> usize {
        self.epoch
    }

    /// Steps completed.
    pub fn step(&self) -> usize {
        self.step_count
    }

    /// Optimiser steps per epoch.
    pub fn steps_per_epoch(&self) -> usize {
        self.task.batches_per_epoch()
    }

    /// The learning rate of a step.
    pub fn lr_at(&self, step: usize) -> f64 {
        self.schedule.lr_at(step)
    }

    /// The hook of type `H`, if the run has one (e.g. to read what it measured).
    pub fn hook<H: Hook<B, K>>(&self) -> Option<&H> {
        self.hooks.iter().find_map(|hook| {
            let any: &dyn std::any::Any = hook.as_ref();
            any.downcast_ref::<H>()
        })
    }

    /// The checkpoint the run resumed from, if it did.
    pub fn resumed_from(&self) -> Option<&Path> {
        self.resumed_from.as_deref()
    }

    /// The newest checkpoint written or loaded.
    pub fn last_checkpoint(&self) -> Option<&Path> {
        self.last_checkpoint.as_deref()
    }

    /// Calls `f` on every hook in order, with the run as hooks see it.
    fn with_hooks(
        &mut self,
        mut f: impl FnMut(&mut Box<dyn Hook<B, K>>, &mut RunView<'_, B, K>) -> Result<(), TrainError>,
    ) -> Result<(), TrainError> {
        let epochs = self.schedule.total_steps() / self.task.batches_per_epoch();
        let batch_size = self.task.batch_size();
        for hook in self.hooks.iter_mut() {
            let mut run = RunView {
                task: &mut self.task,
                device: &self.device,
                epochs,
                batch_size,
                pool: &mut self.pool,
                hook: hook.name(),
                at_step: self.step_count,
            };
            f(hook, &mut run)?;
        }
        Ok(())
    }

    /// Finds the run's newest valid checkpoint, compares its settings with `given` and loads
    /// it; returns the record the run continues under.
    fn resume(&mut self, mut given: LoopRecord, extend: bool) -> Result<LoopRecord, TrainError> {
        let found = self.checkpoints.newest_valid()?;
        let saved_path = match &found {
            Some((dir, _)) => dir.join(files::RUN),
            None => self.run_dir.join(files::CONFIG),
        };
        let saved: LoopRecord = RunRecord::read_file(&saved_path)?;
        given.extensions = saved.extensions.clone();
        let batches = self.task.batches_per_epoch();
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
        match (&saved.data, &given.data) {
            (Some(then), Some(now)) if then != now => {
                return Err(TrainError::Run {
                    path: saved_path,
                    reason: format!(
                        "the training data changed since the run was written ({then} then, \
                         {now} now): resume on the same data, or start a new run directory"
                    ),
                })
            }
            // A run recorded before the fingerprint takes the one given.
            _ => {}
        }
        let as_json = |r: &LoopRecord| serde_json::to_value(r).expect("JSON value");
        let resumable = self.task.resumable_changes();
        let (mut saved_json, given_json) = (as_json(&saved), as_json(&given));
        for setting in &self.recorded_since {
            adopt_if_absent(&mut saved_json, &given_json, setting);
        }
        let differences: Vec<Difference> = differences(&saved_json, &given_json)
            .into_iter()
            .filter(|d| {
                let setting = d.setting.as_str();
                !RESUMABLE_CHANGES.contains(&setting)
                    && !resumable.contains(&setting)
                    && setting != "data"
                    && !setting.starts_with("data.")
            })
            .filter(|d| !(extending && d.setting == "train.epochs"))
            .collect();
        if !differences.is_empty() {
            return Err(TrainError::Mismatch {
                path: saved_path,
                differences,
            });
        }
        // The schedule of the original plan, with its extensions.
        let planned = saved
            .extensions
            .first()
            .map_or(saved.train.epochs, |e| e.from_epochs);
        self.schedule = self.task.lr_plan(&saved.train, planned)?;
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
                at_step: self.step_count,
                from_epochs: old_epochs,
                to_epochs: new_epochs,
            };
            let lr_before = self.schedule.lr_at(self.step_count);
            self.schedule
                .extend(extension.at_step, new_epochs * batches)?;
            log::info!(
                "extending the run from {old_epochs} to {new_epochs} epochs: from step {} on, \
                 the learning rate follows the plan of a {new_epochs}-epoch run ({:.4e} at \
                 that step, {:.4e} under the old plan)",
                self.step_count,
                self.schedule.lr_at(self.step_count),
                lr_before
            );
            given.extensions.push(extension);
        }
        Ok(given)
    }

    /// Loads a verified checkpoint into this run.
    fn load_checkpoint(&mut self, dir: &Path, meta: &CheckpointMeta) -> Result<(), TrainError> {
        let batches = self.task.batches_per_epoch();
        let mismatch = |reason: String| TrainError::Checkpoint {
            path: dir.to_path_buf(),
            reason,
        };
        if meta.kind != K::KIND {
            return Err(mismatch(format!(
                "written by a {} run, this run is {}",
                meta.kind.describe(),
                K::KIND.describe()
            )));
        }
        let (order_seed, augment_seed) = self.task.seeds();
        if meta.loader_seed != order_seed || meta.augment_seed != augment_seed {
            return Err(mismatch(format!(
                "written with loader seed {} and augmentation seed {}, this run has {} and {}",
                meta.loader_seed, meta.augment_seed, order_seed, augment_seed
            )));
        }
        if meta.batch >= batches
            || meta.step != meta.epoch * batches + meta.batch
            || meta.epoch > self.schedule.total_steps() / batches
        {
            return Err(mismatch(format!(
                "{} steps after {} epochs and {} batches do not fit this run's {batches} \
                 batches per epoch (another batch size or dataset?)",
                meta.step, meta.epoch, meta.batch
            )));
        }
        self.task.load(dir, meta)?;
        let bad = self.task.non_finite();
        if !bad.is_empty() {
            return Err(mismatch(format!(
                "its networks hold values that are not finite (NaN or infinite) in {} (written \
                 before checkpoints were checked); resume from an earlier checkpoint (move this \
                 one away) or start a new run",
                describe_tensors(&bad)
            )));
        }
        let curricula = dir.join(files::CURRICULA);
        let text = std::fs::read(&curricula).map_err(|e| checkpoint::io_error(&curricula, e))?;
        let not_states = |reason: String| TrainError::Checkpoint {
            path: curricula.clone(),
            reason,
        };
        let mut states: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&text)
            .map_err(|e| not_states(format!("not a curriculum state: {e}")))?;
        // Layouts up to 5 wrote `null` for the pieces a run did not use.
        states.retain(|_, v| !v.is_null());
        self.task
            .load_state(states.remove(STEP_STATE))
            .map_err(|e| not_states(format!("`{STEP_STATE}`: {e}")))?;
        self.with_hooks(|hook, run| {
            let name = hook.name();
            hook.load_files(run, dir)?;
            hook.load_state(run, states.remove(name))
                .map_err(|e| not_states(format!("hook `{name}`: {e}")))
        })?;
        if let Some(name) = states.keys().next() {
            return Err(not_states(format!(
                "holds the state of `{name}`, which this run has no hook for"
            )));
        }
        self.epoch = meta.epoch;
        self.step_count = meta.step;
        self.so_far = meta.epoch_so_far.unwrap_or_default();
        self.resume_at = (meta.batch > 0).then_some((meta.batch, self.so_far));
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
    /// On I/O errors, or a hook file named like one of the loop's.
    pub fn save_checkpoint(&mut self) -> Result<PathBuf, TrainError> {
        // Called after a stop in the middle of an epoch, it writes that position (a checkpoint
        // named as the epoch's end would replace it with one no resume accepts).
        let batch = self
            .step_count
            .saturating_sub(self.epoch * self.task.batches_per_epoch());
        match batch {
            0 => self.save_checkpoint_at(0, None),
            b => {
                let so_far = self.so_far;
                self.save_checkpoint_at(b, Some(so_far))
            }
        }
    }

    /// Writes the checkpoint `batch` batches into the epoch after `self.epoch` (0: at its
    /// end) with the epoch's totals so far, then removes the older mid-epoch checkpoints.
    fn save_checkpoint_at(
        &mut self,
        batch: usize,
        epoch_so_far: Option<EpochSoFar>,
    ) -> Result<PathBuf, TrainError> {
        let run = serde_json::to_vec_pretty(&self.record).expect("JSON value");
        let mut written = self.task.files()?;
        // After the records are made (which brings the running statistics up to date).
        let bad = self.task.non_finite();
        if !bad.is_empty() {
            return Err(TrainError::NonFiniteState {
                epoch: self.epoch,
                step: self.step_count,
                tensors: bad,
                last_checkpoint: self.last_checkpoint.clone(),
            });
        }
        written.push((files::RUN, run));
        written.push((files::CURRICULA, self.curricula_bytes()));
        for hook in &self.hooks {
            for (name, bytes) in hook.files()? {
                if written.iter().any(|(n, _)| *n == name) || name == files::META {
                    return Err(TrainError::Hook {
                        hook: hook.name(),
                        step: self.step_count,
                        reason: format!("its checkpoint file `{name}` is taken"),
                    });
                }
                written.push((name, bytes));
            }
        }
        let (online_shapes, backbone_shapes) = self.task.shapes();
        let (loader_seed, augment_seed) = self.task.seeds();
        let meta = CheckpointMeta {
            format_version: checkpoint::FORMAT_VERSION,
            kind: K::KIND,
            epoch: self.epoch,
            step: self.step_count,
            batch,
            epoch_so_far,
            loader_seed,
            augment_seed,
            checksums: Default::default(),
            online_shapes,
            backbone_shapes,
        };
        let dir = self.checkpoints.save(checkpoint::CheckpointFiles {
            meta,
            files: written,
        })?;
        self.last_checkpoint = Some(dir.clone());
        // The new checkpoint is committed: an older one that cannot be removed now is a
        // leftover for the next resume, not a reason to stop.
        if let Err(e) = self.checkpoints.remove_older_mid_epoch(self.epoch, batch) {
            log::warn!("an older mid-epoch checkpoint could not be removed: {e}");
        }
        Ok(dir)
    }

    /// `curricula.json`: the step's state, and the state of every hook that keeps one, under
    /// the hook's name.
    fn curricula_bytes(&self) -> Vec<u8> {
        let mut states = serde_json::Map::new();
        if let Some(state) = self.task.state() {
            states.insert(STEP_STATE.to_string(), state);
        }
        for hook in &self.hooks {
            if let Some(state) = hook.state() {
                states.insert(hook.name().to_string(), state);
            }
        }
        serde_json::to_vec_pretty(&states).expect("JSON value")
    }

    /// Trains to the last epoch of the plan.
    ///
    /// # Errors
    /// On a non-finite loss (naming the step; the checkpoints on disk are kept), unreadable
    /// data, a hook's failure, or I/O errors in the run directory.
    pub fn fit(&mut self) -> Result<TrainSummary, TrainError> {
        self.fit_epochs(usize::MAX)
    }

    /// One optimiser step on a batch: attempts (the step's inputs, the hooks' look at them,
    /// forward with stochastic layers seeded by the step) until every hook applies one, then the
    /// step's backward, optimiser step and one read-back, its after-step update and the hooks'.
    /// Returns the loss, then the step's statistics and the hooks' columns.
    fn train_step(
        &mut self,
        batch: &mut K::Batch,
        progress: Progress,
        lr: f64,
    ) -> Result<(f64, Vec<(String, f64)>), TrainError> {
        let seed = mix_seed(self.record.train.seed, progress.step as u64);
        let mut attempt = 0;
        let out = loop {
            for hook in &mut self.hooks {
                hook.attempt_start();
            }
            let inputs = self.task.attempt(batch, progress, attempt);
            let mut inputs = inputs;
            let mut view = BatchView {
                progress,
                indices: K::indices(batch),
                inputs: &mut inputs,
            };
            self.with_hooks(|hook, run| {
                hook.before_forward(run, &mut view);
                Ok(())
            })?;
            let task = &mut self.task;
            let out = if self.replicas == 1 {
                crate::base::seed::with_seed::<B, _>(&self.device, seed, || {
                    task.forward(inputs, progress)
                })
            } else {
                // A replica's forward waits for the others' (gathers, synchronised batch
                // norms), so it cannot hold the process's generator lock, which they need too:
                // stochastic layers (dropout, stochastic depth) then draw unseeded.
                task.forward(inputs, progress)
            };
            // Every hook judges the attempt before anything is applied: a rejected attempt's
            // graph is dropped, so the weights never see it.
            let mut redraw = None;
            for hook in &mut self.hooks {
                if hook.after_forward(&out, progress)? == Verdict::Redraw {
                    redraw = redraw.or(Some(hook.name()));
                }
            }
            match redraw {
                None => break out,
                // A hook that never applies an attempt would hold the run at this step forever
                // (the library's batch curation applies one after its `max_retries`).
                Some(hook) if attempt + 1 >= self.max_attempts => {
                    return Err(TrainError::Hook {
                        hook,
                        step: progress.step,
                        reason: format!(
                            "asked for another draw of the batch {} times in a row; \
                             a hook that redraws must apply some attempt (e.g. after a number \
                             of retries, as batch curation's max_retries)",
                            self.max_attempts
                        ),
                    });
                }
                Some(_) => attempt += 1,
            }
        };
        let (loss, mut stats) = self.task.apply(out, lr)?;
        if !loss.is_finite() {
            return Err(TrainError::NonFiniteLoss {
                step: progress.step,
                epoch: progress.epoch,
                value: loss,
                last_checkpoint: self.last_checkpoint.clone(),
            });
        }
        self.task.after_step(progress, loss);
        let mut columns = Vec::new();
        self.with_hooks(|hook, run| {
            columns.extend(hook.after_step(run, progress, loss)?);
            Ok(())
        })?;
        stats.extend(columns);
        Ok((loss, stats))
    }

    /// Trains at most `max_epochs` more epochs (e.g. a time budget), then writes a checkpoint
    /// so that a resume can continue.
    ///
    /// # Errors
    /// As [`Trainer::fit`].
    pub fn fit_epochs(&mut self, max_epochs: usize) -> Result<TrainSummary, TrainError> {
        let total_steps = self.schedule.total_steps();
        if self.lead {
            self.log.start(total_steps, self.step_count);
        }
        let result = self.run_epochs(max_epochs);
        // The bar ends and the rows reach the disk whether the epochs succeeded or not.
        let finished = if self.lead { self.log.finish() } else { Ok(()) };
        let summary = result?;
        finished?;
        Ok(summary)
    }

    fn run_epochs(&mut self, max_epochs: usize) -> Result<TrainSummary, TrainError> {
        let batches = self.task.batches_per_epoch();
        let total_steps = self.schedule.total_steps();
        let epochs = total_steps / batches;
        let end_epoch = epochs.min(self.epoch.saturating_add(max_epochs));
        let mut summary = TrainSummary::default();
        while self.epoch < end_epoch {
            let epoch = self.epoch;
            let started = Instant::now();
            // A resume from the middle of the epoch continues it: the hooks' states are those
            // of the checkpoint, their epoch start is not repeated.
            let (first_batch, so_far) = self.resume_at.take().unwrap_or_default();
            self.so_far = so_far;
            if first_batch == 0 {
                self.pool = None;
                self.with_hooks(|hook, run| hook.epoch_start(run, epoch))?;
            }
            let (mut loss_sum, mut images, mut lr) = (so_far.loss_sum, so_far.images, 0.0);
            let first_step = self.step_count;
            let progress_of = move |b: usize| Progress {
                step: first_step + b,
                total_steps,
                epoch,
                total_epochs: epochs,
            };
            let pool = self.pool.take();
            let epoch_batches = self.task.epoch(
                epoch,
                pool.as_ref().map(|(_, p)| p.as_slice()),
                first_batch,
                Box::new(progress_of),
            )?;
            self.pool = pool;
            // Each step's time runs from the end of the step before: waiting for its batch
            // included.
            let mut t0 = Instant::now();
            for batch in epoch_batches {
                let mut batch = batch?;
                let step = self.step_count;
                let progress = progress_of(step - first_step);
                lr = self.schedule.lr_at(step);
                let (loss, stats) = self.train_step(&mut batch, progress, lr)?;
                // Every replica's images (each holds an equal shard).
                let len = K::indices(&batch).len() * self.replicas;
                self.step_count += 1;
                let record = StepRecord {
                    step,
                    epoch,
                    loss,
                    lr,
                    images_per_s: len as f64 / t0.elapsed().as_secs_f64(),
                    stats,
                };
                if self.lead {
                    self.log.step(&record, epochs)?;
                }
                loss_sum += loss;
                images += len;
                summary.steps.push(record);
                let in_epoch = first_batch + (self.step_count - first_step);
                self.so_far = EpochSoFar {
                    loss_sum,
                    images,
                    seconds: so_far.seconds + started.elapsed().as_secs_f64(),
                };
                let every = self.record.train.checkpoint_every_steps;
                let mut due =
                    every > 0 && self.step_count.is_multiple_of(every) && in_epoch < batches;
                if due && self.pool.is_some() {
                    // A hook chose this epoch's examples: a resume could not restore its choice.
                    if !self.pool_warned {
                        log::warn!(
                            "no checkpoint in the middle of an epoch whose examples a hook \
                             selected (its Hook::resumes_mid_epoch should say false)"
                        );
                        self.pool_warned = true;
                    }
                    due = false;
                }
                if due {
                    if self.lead {
                        // Never ahead of the logs: the step rows reach the disk first.
                        self.log.sync_steps()?;
                        let so_far = self.so_far;
                        self.save_checkpoint_at(in_epoch, Some(so_far))?;
                    } else {
                        self.last_checkpoint = Some(
                            self.checkpoints
                                .root()
                                .join(files::checkpoint_name_at(self.epoch, in_epoch)),
                        );
                    }
                }
                t0 = Instant::now();
                if self.replica.is_none() && self.stop_asked() {
                    return Err(self.interrupted(epoch));
                }
            }
            let seconds = so_far.seconds + started.elapsed().as_secs_f64();
            self.epoch += 1;
            let last = self.epoch == epochs;
            let mut reports = Vec::with_capacity(self.hooks.len());
            self.with_hooks(|hook, run| {
                reports.push(hook.epoch_end(run, epoch, last)?);
                Ok(())
            })?;
            let stats = self.task.epoch_end(epoch)?;
            // Replicas stop together, at the end of the epoch in which any of them was asked.
            let stop = match &self.replica {
                Some(replica) => {
                    let mut slots = vec![0.0f32; replica.replicas()];
                    slots[replica.rank()] = f32::from(u8::from(self.stop_asked()));
                    let asked = replica
                        .sum(Tensor::<B, 1>::from_floats(slots.as_slice(), &self.device))
                        .into_data()
                        .convert::<f64>()
                        .to_vec::<f64>()
                        .unwrap_or_default();
                    if let Some(reason) = replica.failure() {
                        return Err(TrainError::Replica {
                            rank: replica.rank(),
                            reason,
                        });
                    }
                    asked.iter().any(|&a| a > 0.0)
                }
                None => false,
            };
            let every = self.record.train.checkpoint_every;
            let asked = reports.iter().any(|r| r.checkpoint);
            let due = last || asked || stop || (every > 0 && self.epoch.is_multiple_of(every));
            let mut record = EpochRecord {
                epoch,
                stats,
                mean_loss: loss_sum / batches as f64,
                lr,
                images_per_s: images as f64 / seconds,
                seconds,
                columns: reports.iter().flat_map(|r| r.columns.clone()).collect(),
                notes: reports.into_iter().filter_map(|r| r.note).collect(),
                checkpoint: None,
            };
            // The epoch's rows reach the disk before its checkpoint is committed: a checkpoint
            // is never ahead of the logs (a kill in between leaves rows past the last
            // checkpoint, which a resume drops; the other order lost the epoch's last steps).
            if self.lead {
                self.log.epoch_row(&record)?;
            }
            if self.lead && (due || self.epoch == end_epoch) {
                record.checkpoint = Some(self.save_checkpoint()?);
            } else if due || self.epoch == end_epoch {
                // The lead writes it (every replica agrees on `due`): what a resume of this
                // replica's run continues from.
                self.last_checkpoint = Some(
                    self.checkpoints
                        .root()
                        .join(files::checkpoint_name(self.epoch)),
                );
            }
            if self.lead {
                self.log.epoch_line(&record, epochs);
            }
            summary.epochs.push(record);
            if stop && !last {
                return Err(self.interrupted(epoch));
            }
        }
        Ok(summary)
    }

    /// Whether the run was asked to stop ([`TrainerBuilder::stop_when`]).
    fn stop_asked(&self) -> bool {
        self.stop.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// The error of a run that stopped because it was asked to, during (0-based) `epoch`.
    fn interrupted(&self, epoch: usize) -> TrainError {
        TrainError::Interrupted {
            run_dir: self.run_dir.clone(),
            step: self.step_count,
            epoch: epoch + 1,
            last_checkpoint: self.last_checkpoint.clone(),
        }
    }
}

/// Compares this replica's run record with every other replica's (the settings in `local`
/// left out), before anything is written: a machine started with another `--seed`, `--epochs`
/// or data would train another run. Every replica reaches the same verdict from the same
/// records, so all stop together.
fn same_settings_everywhere<B: AutodiffBackend>(
    replica: &Replica<B>,
    record: &LoopRecord,
    local: &[&str],
    device: &B::Device,
) -> Result<(), TrainError> {
    let mut value = serde_json::to_value(record).expect("JSON value");
    for path in local {
        run_dir::remove_setting(&mut value, path);
    }
    let text = serde_json::to_vec(&value).expect("JSON value");
    let all = replica.gather_bytes(&text, device);
    if let Some(reason) = replica.failure() {
        return Err(TrainError::Replica {
            rank: replica.rank(),
            reason: format!("the replicas could not compare their settings: {reason}"),
        });
    }
    let parse = |bytes: &[u8]| serde_json::from_slice::<serde_json::Value>(bytes).ok();
    let first = parse(&all[0]);
    for (rank, bytes) in all.iter().enumerate().skip(1) {
        let found = parse(bytes);
        let differ = match (&first, &found) {
            (Some(a), Some(b)) => differences(a, b),
            _ => vec![Difference {
                setting: "the run record".into(),
                run: "(unreadable)".into(),
                given: "(unreadable)".into(),
            }],
        };
        if !differ.is_empty() {
            return Err(TrainError::ReplicaSettings {
                rank,
                differences: differ,
            });
        }
    }
    Ok(())
}

/// Copies the setting at `path` (dotted) from `given` into `saved` where `saved` lacks it and
/// holds the object it would sit in ([`TrainerBuilder::recorded_since`]).
fn adopt_if_absent(saved: &mut serde_json::Value, given: &serde_json::Value, path: &str) {
    let keys: Vec<&str> = path.split('.').collect();
    let Some((last, parents)) = keys.split_last() else {
        return;
    };
    let mut at_saved = saved;
    let mut at_given = given;
    for key in parents {
        match (at_saved.get_mut(*key), at_given.get(*key)) {
            (Some(s), Some(g)) => (at_saved, at_given) = (s, g),
            _ => return,
        }
    }
    if let (serde_json::Value::Object(map), Some(value)) = (at_saved, at_given.get(*last)) {
        map.entry(last.to_string()).or_insert_with(|| value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::adopt_if_absent;
    use serde_json::json;

    /// Batch curation's most retries stay below the attempts after which the trainer stops a
    /// step: a run with any retries it takes is never stopped by its own curation.
    #[test]
    fn curations_retries_fit_the_trainers_attempts() {
        const { assert!(crate::curation::MAX_RETRIES < super::MAX_ATTEMPTS) };
    }

    /// A setting a saved record lacks takes the given value; one it holds keeps its own (so
    /// that the comparison still sees a change), and a path whose parent the saved record
    /// lacks is left alone (the comparison names the whole parent).
    #[test]
    fn a_setting_recorded_since_is_adopted_only_where_absent() {
        let given = json!({"run": {"method": {"t": 0.2}, "optimizer": {"wd": 0.5}}});
        let mut old = json!({"run": {"method": {"t": 0.2}}});
        adopt_if_absent(&mut old, &given, "run.optimizer");
        assert_eq!(old, given);
        let mut recorded = json!({"run": {"method": {"t": 0.2}, "optimizer": {"wd": 0.1}}});
        let before = recorded.clone();
        adopt_if_absent(&mut recorded, &given, "run.optimizer");
        assert_eq!(recorded, before);
        let mut no_parent = json!({"train": {}});
        adopt_if_absent(&mut no_parent, &given, "run.optimizer");
        assert_eq!(no_parent, json!({"train": {}}));
        let mut empty = json!({"run": {}});
        adopt_if_absent(&mut empty, &json!({"run": {}}), "run.optimizer");
        assert_eq!(empty, json!({"run": {}}));
    }
}
