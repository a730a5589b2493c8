//! What differs between kinds of training (documented on `Task`).

use std::path::Path;

use burn::tensor::backend::AutodiffBackend;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::checkpoint::{CheckpointKind, CheckpointMeta};
use super::config::TrainConfig;
use super::error::TrainError;
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::optim::{StepDecay, WarmupCosine};

/// The step of each batch of an epoch: `progress(b)` for batch `b`.
pub type ProgressOf = Box<dyn Fn(usize) -> Progress + Send>;

/// An epoch's batches, in order.
pub type EpochBatches<T> = Box<dyn Iterator<Item = Result<T, TrainError>>>;

/// The learning rate of every step of a run, and how it is re-planned when a run is made longer
/// on purpose.
pub trait LrPlan: Send {
    /// The learning rate of (0-based) step `step`.
    fn lr_at(&self, step: usize) -> f64;

    /// Steps of the whole (possibly extended) plan.
    fn total_steps(&self) -> usize;

    /// From `from_step` on, the plan is that of a run of `total_steps` steps.
    ///
    /// # Errors
    /// If the new plan is not longer than the current one.
    fn extend(&mut self, from_step: usize, total_steps: usize) -> Result<(), ConfigError>;
}

impl LrPlan for WarmupCosine {
    fn lr_at(&self, step: usize) -> f64 {
        WarmupCosine::lr_at(self, step)
    }

    fn total_steps(&self) -> usize {
        WarmupCosine::total_steps(self)
    }

    fn extend(&mut self, from_step: usize, total_steps: usize) -> Result<(), ConfigError> {
        WarmupCosine::extend(self, from_step, total_steps)
    }
}

impl LrPlan for StepDecay {
    fn lr_at(&self, step: usize) -> f64 {
        StepDecay::lr_at(self, step)
    }

    fn total_steps(&self) -> usize {
        StepDecay::total_steps(self)
    }

    fn extend(&mut self, from_step: usize, total_steps: usize) -> Result<(), ConfigError> {
        StepDecay::extend(self, from_step, total_steps)
    }
}

/// One kind of training, as the loop drives it: what differs between kinds of training
/// (self-supervised: [`SelfSupervised`](super::SelfSupervised); supervised with example
/// selection: [`Supervised`](super::Supervised)), and its learning-rate plan ([`LrPlan`]).
///
/// The loop ([`Trainer`](super::Trainer)) owns everything else: the epochs and their counters,
/// the hooks, the run directory, the log, the checkpoints and the resume. A step owns its
/// networks, optimiser, data and augmentation, and answers the loop at fixed points:
///
/// ```text
/// epoch(e, pool)                 → the epoch's batches (all examples, or a hook's pool)
/// each batch, each attempt:
///     attempt(batch, progress)   → the inputs of the forward pass (e.g. two augmented views)
///     forward(inputs, progress)  → the output the hooks judge (loss, embeddings, ...)
/// apply(output, lr)              → optimiser step; the loss and statistics, read in one transfer
/// after_step(progress, loss)     → EMA, queue, what learns from the loss
/// epoch_end(e)                   → its columns of epochs.csv (e.g. test accuracy)
/// files() / load(dir)            → its part of every checkpoint
/// ```
pub trait Task<B: AutodiffBackend>: Sized + 'static {
    /// The step's own settings, saved in the run record beside the loop's `train` (its fields
    /// at the record's top level) and compared on resume.
    type Settings: Serialize + DeserializeOwned + Clone + std::fmt::Debug;
    /// A batch as the epoch gives it.
    type Batch;
    /// The inputs of an attempt's forward pass, drawn from the batch (hooks see them before the
    /// forward pass).
    type Inputs;
    /// An attempt's forward pass, judged by the hooks before anything is applied.
    type Output;

    /// What kind of run the step's checkpoints belong to.
    const KIND: CheckpointKind;

    /// Its settings, for the run record.
    fn settings(&self) -> Self::Settings;

    /// Settings that may differ on resume because they do not change what is trained (dotted
    /// paths into the run record, e.g. `loader.workers`).
    fn resumable_changes(&self) -> &'static [&'static str] {
        &[]
    }

    /// Takes the device the run trains on and checks, before any work, that the step can run
    /// (batch size, data).
    ///
    /// # Errors
    /// Naming the setting or data that does not fit.
    fn prepare(&mut self, device: &B::Device) -> Result<(), TrainError>;

    /// What the step needs a hook to provide ([`Hook::provides`](super::Hook::provides)),
    /// each with the message that refuses a run without it (e.g. a method that rotates inside
    /// object boxes needs [`OBJECT_BOXES`](crate::method::OBJECT_BOXES)).
    fn needs(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }

    /// Optimiser steps per epoch.
    fn batches_per_epoch(&self) -> usize;

    /// Examples per batch.
    fn batch_size(&self) -> usize;

    /// Examples the epochs draw from (the indices a selection may choose among).
    fn num_examples(&self) -> usize;

    /// The seeds of the batch order and of the augmentation, kept in every checkpoint.
    fn seeds(&self) -> (u64, u64);

    /// The learning-rate plan of a run of `epochs` epochs under `config`.
    ///
    /// # Errors
    /// If the plan's settings are impossible.
    fn lr_plan(&self, config: &TrainConfig, epochs: usize) -> Result<Box<dyn LrPlan>, ConfigError>;

    /// The batches of epoch `epoch` from batch `first_batch` on (0 but in a resume from the
    /// middle of the epoch; the batches are those of the whole epoch, the first ones left
    /// out): of every example, or of `pool` (indices a hook selected). `progress_of(i)` is the
    /// progress of the `i`-th batch given.
    ///
    /// # Errors
    /// If the step cannot draw from a pool, or its data cannot be read.
    fn epoch(
        &mut self,
        epoch: usize,
        pool: Option<&[usize]>,
        first_batch: usize,
        progress_of: ProgressOf,
    ) -> Result<EpochBatches<Self::Batch>, TrainError>;

    /// The examples of a batch, by index.
    fn indices(batch: &Self::Batch) -> &[usize];

    /// The inputs of attempt `attempt` (0-based) at a batch.
    fn attempt(
        &mut self,
        batch: &mut Self::Batch,
        progress: Progress,
        attempt: usize,
    ) -> Self::Inputs;

    /// The forward pass (the loop seeds the backend's stochastic layers by the step).
    fn forward(&mut self, inputs: Self::Inputs, progress: Progress) -> Self::Output;

    /// Back-propagates the applied attempt, takes the optimiser step at `lr`, and reads the loss
    /// and the step's statistics back (the step's only synchronisation).
    ///
    /// # Errors
    /// If the step's own work fails.
    fn apply(
        &mut self,
        output: Self::Output,
        lr: f64,
    ) -> Result<(f64, Vec<(String, f64)>), TrainError>;

    /// Makes the step one replica of a data-parallel run ([`crate::data_parallel`]): its batches
    /// become its shard of every global batch, its gradients are averaged over the replicas
    /// before the optimiser steps, and the loss and statistics it reports are the replicas'
    /// means. With `gather_for_hooks` (a hook [reads the output's per-image
    /// values](super::Hook::reads_embeddings)), the output the hooks judge holds every
    /// replica's. Called once, before [`Task::prepare`]. Default: refused.
    ///
    /// # Errors
    /// If this step (or its method) cannot be trained data-parallel.
    fn set_replica(
        &mut self,
        replica: Replica<B>,
        gather_for_hooks: bool,
    ) -> Result<(), TrainError> {
        let _ = (replica, gather_for_hooks);
        Err(ConfigError::new("devices", "this kind of training runs on one device").into())
    }

    /// After a step with a finite loss: updates that follow the optimiser step (EMA, queue, an
    /// augmentation that learns from the loss).
    fn after_step(&mut self, progress: Progress, loss: f64) {
        let _ = (progress, loss);
    }

    /// At the end of every epoch, after the hooks': the step's columns of `epochs.csv`.
    ///
    /// # Errors
    /// If the step's own measurement fails.
    fn epoch_end(&mut self, epoch: usize) -> Result<Vec<(String, f64)>, TrainError> {
        let _ = epoch;
        Ok(Vec::new())
    }

    /// Its files of a checkpoint (the networks, the optimiser, the method's state).
    ///
    /// # Errors
    /// If a record cannot be serialised.
    fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError>;

    /// The parameter shapes of the trainable networks and of the backbone, kept in
    /// `meta.json` and compared before a record is loaded.
    fn shapes(&self) -> (Vec<Vec<usize>>, Vec<Vec<usize>>);

    /// The tensors of its networks holding a value that is not finite (NaN, ±inf), by module
    /// path: checked before every checkpoint is written and after one is loaded, so that no
    /// checkpoint called good holds them. Default: none checked.
    fn non_finite(&self) -> Vec<String> {
        Vec::new()
    }

    /// Loads its files from the verified checkpoint `dir`.
    ///
    /// # Errors
    /// If a file is missing or holds networks of other shapes.
    fn load(&mut self, dir: &Path, meta: &CheckpointMeta) -> Result<(), TrainError>;

    /// What the step learned that is not a network (the self-paced AutoAugment's state), kept in
    /// `curricula.json` under [`STEP_STATE`](super::STEP_STATE).
    fn state(&self) -> Option<serde_json::Value> {
        None
    }

    /// Takes back what [`Task::state`] gave.
    ///
    /// # Errors
    /// Saying why the state does not fit.
    fn load_state(&mut self, state: Option<serde_json::Value>) -> Result<(), String> {
        match state {
            None => Ok(()),
            Some(_) => Err("the checkpoint holds a step state this run does not keep".into()),
        }
    }
}
