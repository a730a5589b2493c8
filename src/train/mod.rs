//! The one training loop: a seeded, resumable run of any [`Task`] (self-supervised:
//! [`SelfSupervised`], any [`SslMethod`](crate::method::SslMethod) on two views; supervised with example selection:
//! [`supervised::Supervised`]), steered by [`Hook`](hook::Hook)s.
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
//! directory ([`run_dir`]) holds `config.json` (the typed [`RunRecord`]), `steps.csv` and
//! `epochs.csv` ([`run_log`], with the progress bar and the log lines) and `checkpoints/`
//! ([`checkpoint`]). Whether a run may start or resume in a directory is decided before any work
//! ([`run_dir::inspect`]); a resume names every setting that differs from the run's. Because
//! every random draw is keyed by counters, a resumed run repeats exactly what an uninterrupted
//! run does (on a deterministic backend such as the CPU's).
//!
//! Everything that watches or steers training besides the step is a [`Hook`](hook::Hook) ([`hook`]); the
//! loop knows none of them by name. The crate's own are in `crate::hooks` (Fréchet batch
//! curation, crop-and-rotate's object boxes, the self-paced AutoAugment's feedback, the kNN
//! monitor) and `crate::spl_advise`
//! (SPLD, SPL-ADVisE, random sampling).
//!
//! Why not burn-train's `Learner`: its step is `forward → backward → optimiser step`, while a
//! momentum encoder and a key queue must be updated after the optimiser step
//! ([`SslMethod::after_step`](crate::method::SslMethod::after_step)); exact resume needs the method's own states (queue, pointer, key
//! and target networks, loss states), the seeds and the counters in one checkpoint written
//! atomically and verified on load, which its checkpointer (one file per component, no
//! checksums) does not give; and its metrics are per-batch aggregates, not the per-step rows a
//! curriculum study reads back.

mod ahead;
pub mod checkpoint;
pub mod classifier;
pub mod config;
pub mod error;
pub mod hook;
#[cfg(feature = "burn-train")]
pub mod learner;
pub mod run_dir;
pub mod run_log;
pub mod self_supervised;
pub mod supervised;
pub mod task;
pub mod trainer;

pub use checkpoint::{describe_io, load_backbone, resolve_checkpoint, write_atomic, STEP_STATE};
pub use config::{StartMode, TrainConfig};
pub use error::{Difference, TrainError};
pub use hook::{EpochReport, Hooks};
#[cfg(feature = "burn-train")]
pub use learner::{FeaturesOutput, LearnerInference, LearnerMethod, StepOutput};
pub use run_dir::{DataFingerprint, RunLock, RunRecord};
pub use run_log::{Cell, Column, EpochRecord, StepRecord};
pub use self_supervised::{SelfSupervised, SelfSupervisedSettings, SelfSupervisedTask};
pub use task::Task;
pub use trainer::{TrainSummary, Trainer, TrainerBuilder};
