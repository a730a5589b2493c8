//! Checkpoints: everything needed to resume a run exactly, written atomically.
//!
//! A checkpoint is a directory `checkpoints/epoch-NNNN/` of the run directory holding
//!
//! | file | content |
//! |---|---|
//! | `online.mpk` | the trainable networks (weights, batch-norm statistics, parameter ids) |
//! | `backbone.mpk` | the online backbone alone, for evaluation or export |
//! | `method.mpk` | the method's state: key / target networks, queue and pointer, loss states |
//! | `optimizer.mpk` | the optimiser's state (momentum buffers, keyed by parameter id) |
//! | `meta.json` | epochs done, the next step, and the seeds of the loader and the augmentation |
//!
//! The records are named MessagePack in full precision (burn's `NamedMpkBytesRecorder`). Every
//! random draw of training is keyed by `(seed, epoch)` (batch order) or `(seed, step)`
//! (augmentation), so the seeds with the epoch and step are the whole RNG state.
//!
//! A checkpoint is first written to a hidden temporary directory, each file flushed to disk, and
//! then renamed into place; `checkpoints/latest` (the name of the newest complete checkpoint) is
//! replaced the same way. A crash leaves either the old or the new checkpoint, never half of one.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::prelude::*;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use serde::{Deserialize, Serialize};

use super::TrainError;

/// Version of the checkpoint layout written by this crate.
pub const FORMAT_VERSION: u32 = 1;

/// Where a run stands when a checkpoint is written (`meta.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// Layout version ([`FORMAT_VERSION`]).
    pub format_version: u32,
    /// Epochs completed.
    pub epoch: usize,
    /// Optimiser steps completed (the index of the next step).
    pub step: usize,
    /// Seed of the loader's shuffling.
    pub loader_seed: u64,
    /// Seed of the augmentation.
    pub augment_seed: u64,
}

type Bytes = NamedMpkBytesRecorder<FullPrecisionSettings>;

/// Serialises a record to bytes.
pub(crate) fn to_bytes<B: Backend, R: Record<B>>(
    record: R,
    what: &str,
) -> Result<Vec<u8>, TrainError> {
    Recorder::<B>::record(&Bytes::default(), record, ()).map_err(|e| TrainError::Checkpoint {
        path: PathBuf::from(what),
        reason: format!("cannot serialise the {what}: {e}"),
    })
}

/// Reads a record written by [`to_bytes`].
pub(crate) fn read_record<B: Backend, R: Record<B>>(
    path: &Path,
    device: &B::Device,
) -> Result<R, TrainError> {
    let bytes = fs::read(path).map_err(|e| TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })?;
    Recorder::<B>::load(&Bytes::default(), bytes, device).map_err(|e| TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: format!("not a record of the expected kind (corrupt, or another model): {e}"),
    })
}

/// The files of one checkpoint, serialised and ready to write.
pub(crate) struct CheckpointFiles {
    pub(crate) meta: CheckpointMeta,
    pub(crate) files: Vec<(&'static str, Vec<u8>)>,
}

fn io_error(path: &Path, e: std::io::Error) -> TrainError {
    TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let mut f = File::create(path).map_err(|e| io_error(path, e))?;
    f.write_all(bytes).map_err(|e| io_error(path, e))?;
    f.sync_all().map_err(|e| io_error(path, e))
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed, then renamed.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    write_synced(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(|e| io_error(path, e))
}

/// The checkpoints of a run directory.
#[derive(Debug, Clone)]
pub struct CheckpointDir {
    root: PathBuf,
}

impl CheckpointDir {
    /// The `checkpoints/` folder of `run_dir` (created on the first save).
    pub fn new(run_dir: &Path) -> Self {
        Self {
            root: run_dir.join("checkpoints"),
        }
    }

    /// The folder holding the checkpoints.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes a checkpoint for `meta.epoch` and points `latest` at it; returns its directory.
    pub(crate) fn save(&self, files: CheckpointFiles) -> Result<PathBuf, TrainError> {
        fs::create_dir_all(&self.root).map_err(|e| io_error(&self.root, e))?;
        let name = format!("epoch-{:04}", files.meta.epoch);
        let target = self.root.join(&name);
        let tmp = self.root.join(format!(".{name}.tmp"));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| io_error(&tmp, e))?;
        }
        fs::create_dir(&tmp).map_err(|e| io_error(&tmp, e))?;
        for (file, bytes) in &files.files {
            write_synced(&tmp.join(file), bytes)?;
        }
        let meta = serde_json::to_vec_pretty(&files.meta).expect("plain struct");
        write_synced(&tmp.join("meta.json"), &meta)?;
        if target.exists() {
            let old = self.root.join(format!(".{name}.old"));
            if old.exists() {
                fs::remove_dir_all(&old).map_err(|e| io_error(&old, e))?;
            }
            fs::rename(&target, &old).map_err(|e| io_error(&target, e))?;
            fs::rename(&tmp, &target).map_err(|e| io_error(&target, e))?;
            fs::remove_dir_all(&old).map_err(|e| io_error(&old, e))?;
        } else {
            fs::rename(&tmp, &target).map_err(|e| io_error(&target, e))?;
        }
        write_atomic(&self.root.join("latest"), name.as_bytes())?;
        if let Ok(dir) = File::open(&self.root) {
            let _ = dir.sync_all();
        }
        Ok(target)
    }

    /// The newest complete checkpoint, if any.
    ///
    /// # Errors
    /// If `latest` names a checkpoint that is missing.
    pub fn latest(&self) -> Result<Option<PathBuf>, TrainError> {
        let pointer = self.root.join("latest");
        if !pointer.exists() {
            return Ok(None);
        }
        let name = fs::read_to_string(&pointer).map_err(|e| io_error(&pointer, e))?;
        let dir = self.root.join(name.trim());
        if !dir.join("meta.json").is_file() {
            return Err(TrainError::Checkpoint {
                path: dir,
                reason: format!("named by {} but missing or incomplete", pointer.display()),
            });
        }
        Ok(Some(dir))
    }
}

/// Reads `meta.json` of a checkpoint directory.
///
/// # Errors
/// If it is missing, unreadable, or of another layout version.
pub fn read_meta(checkpoint: &Path) -> Result<CheckpointMeta, TrainError> {
    let path = checkpoint.join("meta.json");
    let text = fs::read(&path).map_err(|e| io_error(&path, e))?;
    let meta: CheckpointMeta =
        serde_json::from_slice(&text).map_err(|e| TrainError::Checkpoint {
            path: path.clone(),
            reason: format!("not a checkpoint description: {e}"),
        })?;
    if meta.format_version != FORMAT_VERSION {
        return Err(TrainError::Checkpoint {
            path,
            reason: format!(
                "layout version {} but this build reads version {FORMAT_VERSION}",
                meta.format_version
            ),
        });
    }
    Ok(meta)
}

/// Resolves a path given by a user to a checkpoint directory: a checkpoint itself, a run
/// directory (its latest checkpoint), or a `checkpoints/` folder.
///
/// # Errors
/// If no checkpoint is found there.
pub fn resolve_checkpoint(path: &Path) -> Result<PathBuf, TrainError> {
    if path.join("meta.json").is_file() {
        return Ok(path.to_path_buf());
    }
    for root in [path.to_path_buf(), path.join("checkpoints")] {
        let dir = CheckpointDir { root };
        if let Some(found) = dir.latest()? {
            return Ok(found);
        }
    }
    Err(TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: "no checkpoint here (expected a checkpoint directory with meta.json, or a run \
                 directory with checkpoints/latest)"
            .into(),
    })
}

/// Loads the backbone saved in a checkpoint (or a run directory's latest one) into `backbone`,
/// a freshly built backbone of the same architecture — for kNN or linear evaluation, or export.
///
/// # Errors
/// If there is no checkpoint, or its backbone is of another architecture.
pub fn load_backbone<B: Backend, M: Module<B>>(
    path: &Path,
    backbone: M,
    device: &B::Device,
) -> Result<M, TrainError> {
    let dir = resolve_checkpoint(path)?;
    read_meta(&dir)?;
    let file = dir.join("backbone.mpk");
    let record = read_record::<B, M::Record>(&file, device)?;
    let expected = shapes(&backbone);
    let loaded = backbone.load_record(record);
    let found = shapes(&loaded);
    if found != expected {
        return Err(TrainError::Checkpoint {
            path: file,
            reason: format!(
                "parameter shapes differ from this backbone's ({} tensors saved, {} expected; \
                 first saved {:?}, expected {:?}): another architecture or width",
                found.len(),
                expected.len(),
                found.first(),
                expected.first()
            ),
        });
    }
    Ok(loaded)
}

/// Shapes of every float parameter of a module, in visiting order.
pub(crate) fn shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<usize>> {
    struct Shapes(Vec<Vec<usize>>);
    impl<B: Backend> burn::module::ModuleVisitor<B> for Shapes {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
            self.0.push(param.shape().dims::<D>().to_vec());
        }
    }
    let mut v = Shapes(Vec::new());
    module.visit(&mut v);
    v.0
}
