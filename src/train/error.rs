//! Why a run stopped: [`TrainError`].

use std::path::{Path, PathBuf};

use crate::base::error::ConfigError;
use crate::data::DataError;

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// An impossible setting, or a dataset that cannot be used.
    #[error(transparent)]
    Library(#[from] crate::Error),
    /// The loss became NaN or infinite.
    #[error(
        "the loss became {value} at step {} (epoch {}); the run stopped without writing \
         anything more. {}",
        .step + 1,
        .epoch + 1,
        last_good(.last_checkpoint.as_deref())
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
    /// The networks hold values that are not finite (NaN, ±inf; e.g. a batch norm's running
    /// variance after a diverging step) when a checkpoint is due: it is not written, so that
    /// every checkpoint on disk holds finite values.
    #[error(
        "after epoch {epoch} (step {step}) the networks hold values that are not finite (NaN or \
         infinite) in {}: the training diverged (a learning rate too large?); no checkpoint \
         was written. {}",
        describe_tensors(.tensors),
        last_good(.last_checkpoint.as_deref())
    )]
    NonFiniteState {
        /// Epochs completed (1-based: the epoch that ended).
        epoch: usize,
        /// Steps completed.
        step: usize,
        /// The tensors holding such values, by module path.
        tensors: Vec<String>,
        /// The newest checkpoint on disk, left untouched.
        last_checkpoint: Option<PathBuf>,
    },
    /// The run was asked to stop ([`TrainerBuilder::stop_when`](super::TrainerBuilder::stop_when), e.g. on Ctrl-C).
    #[error(
        "interrupted at step {step} (epoch {epoch}); {}",
        match last_checkpoint {
            Some(p) => format!(
                "the run continues from its last checkpoint, {}, when resumed",
                p.display()
            ),
            None => "no checkpoint had been written yet: a resume starts afresh".to_string(),
        }
    )]
    Interrupted {
        /// The run directory.
        run_dir: PathBuf,
        /// Steps completed.
        step: usize,
        /// The epoch it was in (1-based).
        epoch: usize,
        /// The newest checkpoint on disk.
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
    /// A supervised run's example selection failed (e.g. its embedding network's loss
    /// became NaN).
    #[error("example selection: {reason}")]
    Selection {
        /// What went wrong.
        reason: String,
    },
    /// A replica of a data-parallel run could not complete a collective operation with the
    /// others (one of them failed, or a connection dropped).
    #[error("replica {rank}: {reason}")]
    Replica {
        /// The rank of the replica that noticed.
        rank: usize,
        /// What went wrong.
        reason: String,
    },
    /// The replicas of a data-parallel run were started with other settings (another `--seed`
    /// or `--epochs` on one machine, other data): refused before anything is written.
    #[error(
        "replica {rank} was started with other settings than replica 0: {}; start every machine \
         with the same settings",
        .differences
            .iter()
            .map(|d| format!("{}: replica 0 {}, replica {rank} {}", d.setting, d.run, d.given))
            .collect::<Vec<_>>()
            .join("; ")
    )]
    ReplicaSettings {
        /// The first replica whose settings differ from replica 0's.
        rank: usize,
        /// What differs (`run`: replica 0's value, `given`: this replica's).
        differences: Vec<Difference>,
    },
    /// A hook could not do its work (e.g. batch curation met a non-finite distance).
    #[error("{hook} at step {}: {reason}", .step + 1)]
    Hook {
        /// The hook's name.
        hook: &'static str,
        /// 0-based step.
        step: usize,
        /// What went wrong.
        reason: String,
    },
}

/// "The last good checkpoint is …", or that there is none.
fn last_good(checkpoint: Option<&Path>) -> String {
    match checkpoint {
        Some(p) => format!("The last good checkpoint is {}.", p.display()),
        None => "No checkpoint had been written yet.".to_string(),
    }
}

/// The first tensors of a list, and how many more.
pub(crate) fn describe_tensors(tensors: &[String]) -> String {
    let mut text = tensors
        .iter()
        .take(3)
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if tensors.len() > 3 {
        text.push_str(&format!(" and {} more tensors", tensors.len() - 3));
    }
    text
}

impl TrainError {
    /// Whether the error comes from what the caller gave (settings, data, the run directory and
    /// its checkpoints) rather than from something that failed during the run (a non-finite
    /// loss, a write that failed): a command line exits with 2 for the former.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Self::Library(_)
                | Self::Checkpoint { .. }
                | Self::Run { .. }
                | Self::Mismatch { .. }
                | Self::ReplicaSettings { .. }
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

/// A setting that differs between a run's saved configuration and the one given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Its path in the run record, e.g. `train.lr` or `run.settings.backbone`.
    pub setting: String,
    /// The run's value (JSON), `absent` if it had none.
    pub run: String,
    /// The given value (JSON), `absent` if none.
    pub given: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: run {}, given {}",
            self.setting, self.run, self.given
        )
    }
}
