//! The one training loop: a seeded, resumable run of any [`Task`] (self-supervised:
//! [`SelfSupervised`], any [`SslMethod`](crate::method::SslMethod) on two views; supervised with
//! example selection: [`Supervised`]), steered by [`Hook`]s.
//!
//! [`Trainer::fit`] reads like the algorithm box of the papers:
//!
//! ```text
//! for epoch in epochs:
//!     hooks.epoch_start                          # e.g. crop-and-rotate's boxes, SPLD's selection
//!     for batch in step.epoch(epoch, pool):      # order keyed by (seed, epoch); a hook's pool
//!         for attempt in 0..:                    # hooks may ask for a redraw
//!             inputs = step.attempt(batch, key = (step, attempt))   # e.g. the two views
//!             hooks.before_forward(batch, inputs)
//!             out = step.forward(inputs, progress)                  # stochastic layers seeded by step
//!             if every hook says Apply: break
//!         loss, stats = step.apply(out, lr(step))  # optimiser step, one transfer back
//!         stop naming the step if the loss is not finite
//!         step.after_step(progress, loss)        # EMA, queue
//!         hooks.after_step                       # e.g. the self-paced AutoAugment learns; columns
//!         checkpoint every `checkpoint_every_steps` steps inside the epoch (the newest kept)
//!     hooks.epoch_end; step.epoch_end            # e.g. the kNN monitor; a classifier's test accuracy
//!     checkpoint every `checkpoint_every` epochs or when a hook asks: the step's files and state,
//!         every hook's state and files
//! ```
//!
//! A run is built with [`Trainer::builder`] (self-supervised) or [`Trainer::with_task`]. The run
//! directory holds `config.json` (the typed [`RunRecord`]), `steps.csv` and `epochs.csv` (the
//! run log, with the progress bar and the log lines) and `checkpoints/` (each section below).
//! Whether a run may start or resume in a directory is decided before any work ([`inspect`]); a
//! resume names every setting that differs from the run's. Because every random draw is keyed by
//! counters, a resumed run repeats exactly what an uninterrupted run does (on a deterministic
//! backend such as the CPU's).
//!
//! Everything that watches or steers training besides the step is a [`Hook`], the loop's one
//! extension point; the loop knows none of them by name. The crate's own are in `crate::hooks`
//! (Fréchet batch curation, crop-and-rotate's object boxes, the self-paced AutoAugment's
//! feedback, the kNN monitor) and `crate::spl_advise` (SPLD, SPL-ADVisE, random sampling).
//!
//! Why not burn-train's `Learner`: its step is `forward → backward → optimiser step`, while a
//! momentum encoder and a key queue must be updated after the optimiser step
//! ([`SslMethod::after_step`](crate::method::SslMethod::after_step)); exact resume needs the
//! method's own states (queue, pointer, key and target networks, loss states), the seeds and the
//! counters in one checkpoint written atomically and verified on load, which its checkpointer
//! (one file per component, no checksums) does not give; and its metrics are per-batch
//! aggregates, not the per-step rows a curriculum study reads back.
//!
//! # The run directory
//! What a directory holds, whether a run may start or resume there ([`inspect`], [`DirState`]),
//! and the run's configuration as one typed record ([`RunRecord`], saved as `config.json` and
//! inside every checkpoint).
//!
//! The rules, checked before any work is done:
//!
//! | the directory | a fresh start | `resume` |
//! |---|---|---|
//! | missing or empty | starts | starts afresh (nothing to resume) |
//! | a run: our `config.json`, or `checkpoints/` with `epoch-*` or `latest` | refused | continues from the newest valid checkpoint |
//! | anything else that is not empty | refused, naming what it holds | refused |
//!
//! A resume compares the saved configuration with the one given and names every setting that
//! differs with both values. Settings that do not change the training may differ
//! (`train.checkpoint_every`, `train.checkpoint_every_steps`, `train.progress_bar`, and a step's
//! own, [`Task::resumable_changes`]); more epochs are allowed on purpose with `extend`.
//!
//! # The run log
//! Everything a run reports — `steps.csv`, `epochs.csv`, the progress bar and the log lines — is
//! written in one place, the way burn-train sends its events to a log sink.
//!
//! Records are typed ([`StepRecord`], [`EpochRecord`]) and each names its columns together with
//! their values ([`Cell`]), so a header cannot disagree with its rows. The files are written and
//! read back with the `csv` crate. Numbers are plain decimals in Rust's shortest round-trip form
//! (`0.0123`, never `1.23e-2`): a value read back is bit-identical to the one logged. Steps and
//! epochs count from 1 in the files as on the progress line: the row `epoch = 3` is what the
//! screen calls "epoch 3/8", the row `step = 10` the tenth optimiser step. On resume the rows
//! written after the checkpoint are dropped, so the files always describe one consistent run.
//!
//! The progress bar is `indicatif`'s, drawn on standard error only when it is a terminal (logs and
//! CI get one `log` line per epoch instead); log lines written during a run suspend the bar so
//! that the two never tangle.
//!
//! # Checkpoints
//! Everything needed to resume a run exactly, written atomically and checksummed.
//!
//! A checkpoint is a directory `checkpoints/epoch-NNNN/` of the run directory (or, written in
//! the middle of an epoch, `checkpoints/epoch-NNNN-batch-NNNNNNN/`: NNNN epochs and that many
//! batches of the next; only the newest of these is kept) holding
//!
//! | file ([`files`]) | content |
//! |---|---|
//! | `online.mpk` | the trainable networks (weights, batch-norm statistics, parameter ids) |
//! | `backbone.mpk` | the online backbone alone, for evaluation or export |
//! | `method.mpk` | the method's state: key / target networks, queue and pointer, loss states |
//! | `optimizer.mpk` | the optimiser's state (momentum buffers, keyed by parameter id) |
//! | `run.json` | the run's configuration when the checkpoint was written ([`RunRecord`]) |
//! | `meta.json` | the kind of run, epochs done, the next step, the seeds, the SHA-256 of every other file and the parameter shapes of the networks ([`CheckpointMeta`]) |
//! | `meta.sha256` | the SHA-256 of `meta.json` itself (layout 7 on), so that a damaged description is caught like a damaged record |
//!
//! A supervised run ([`CheckpointKind::Supervised`]) writes `online.mpk` (the classifier),
//! `backbone.mpk`, `optimizer.mpk`, `run.json` and `curricula.json` (its example selection's
//! state under the selection hook's name). Hooks may add files of their own ([`Hook::files`]):
//! SPL-ADVisE's `embedding.mpk` and `embedding_optimizer.mpk`.
//!
//! The records are named MessagePack in full precision (burn's `NamedMpkBytesRecorder`;
//! [`to_bytes`], [`read_record`]). Every random draw of training is keyed by `(seed, epoch)`
//! (batch order) or `(seed, step)` (augmentation, stochastic layers), so the seeds with the epoch
//! and step are the whole RNG state.
//!
//! A checkpoint is first written to a hidden temporary directory (named by the writing process),
//! each file flushed to disk, and then renamed into place; `checkpoints/latest` (the name of the
//! newest complete checkpoint) is replaced the same way. A crash leaves either the old or the new
//! checkpoint, never half of one; a write that fails (a full disk) removes its temporary
//! directory, and a resume removes what a killed writer left. Reading verifies the checksums (of
//! `meta.json` too) before anything is deserialised and names a damaged file ([`read_meta`],
//! [`verify`]); a resume (and [`resolve_checkpoint`] given a run directory) takes the complete
//! checkpoint of the highest epoch and falls back to the previous one past damage, saying so.
//! The parameter shapes in `meta.json` are compared with the receiving networks before a record
//! is loaded, so a checkpoint of another architecture is an error, not a panic inside burn.

mod ahead;
mod checkpoint;
mod classifier;
mod config;
mod error;
mod hook;
#[cfg(feature = "burn-train")]
mod learner;
mod run_dir;
mod run_log;
mod self_supervised;
mod supervised;
mod task;
mod trainer;

pub(crate) use checkpoint::shapes;
pub use checkpoint::{
    describe_io, files, load_backbone, read_meta, read_record, resolve_checkpoint, sha256_hex,
    to_bytes, verify, write_atomic, CheckpointKind, CheckpointMeta, EpochSoFar, STEP_STATE,
};
pub use classifier::{ClassifierAugmentConfig, LinearClassifier};
pub use config::{StartMode, TrainConfig};
pub use error::{Difference, TrainError};
pub use hook::{BatchView, EpochReport, Hook, Hooks, RunView, Verdict};
#[cfg(feature = "burn-train")]
pub use learner::{FeaturesOutput, LearnerInference, LearnerMethod, StepOutput};
pub use run_dir::{inspect, DataFingerprint, DirState, Extension, RunLock, RunRecord};
pub use run_log::{format_duration, Cell, Column, EpochRecord, StepRecord};
pub use self_supervised::{SelfSupervised, SelfSupervisedSettings, SelfSupervisedTask, SslBatch};
pub use supervised::{
    Supervised, SupervisedConfig, SupervisedOutput, SupervisedSettings, SupervisedTask,
    TestAccuracy,
};
pub use task::{EpochBatches, LrPlan, ProgressOf, Task};
pub use trainer::{TrainSummary, Trainer, TrainerBuilder, MAX_ATTEMPTS};
