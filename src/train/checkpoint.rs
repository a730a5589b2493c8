//! Checkpoints: everything needed to resume a run exactly, written atomically and checksummed
//! (documented on the `train` module's page).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::prelude::*;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::TrainError;

/// The step's key in `curricula.json` (the self-supervised step keeps its augmenter's adaptive
/// state there); the hooks' states sit beside it, under their names.
pub const STEP_STATE: &str = "augmenter";

/// Version of the checkpoint layout written by this crate (what each version changed:
/// [`CheckpointMeta::format_version`]).
pub(crate) const FORMAT_VERSION: u32 = 7;

/// The layout versions this build reads (how each is read: [`read_meta`]).
pub(crate) const READABLE_VERSIONS: [u32; 5] = [3, 4, 5, 6, FORMAT_VERSION];

/// Which trainer wrote a checkpoint, and so which files it must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// The self-supervised [`Trainer`](super::Trainer) ([`files::CHECKSUMMED`]).
    #[default]
    SelfSupervised,
    /// A supervised run ([`Supervised`](super::Supervised), [`files::SUPERVISED`],
    /// plus its hooks' files).
    Supervised,
}

impl CheckpointKind {
    /// The files every checkpoint of this kind and layout `version` holds besides `meta.json`.
    pub fn required_files(self, version: u32) -> &'static [&'static str] {
        match self {
            Self::SelfSupervised => &files::CHECKSUMMED,
            Self::Supervised if version <= 5 => &files::SUPERVISED_V5,
            Self::Supervised => &files::SUPERVISED,
        }
    }

    /// The kind in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::SelfSupervised => "self-supervised",
            Self::Supervised => "supervised",
        }
    }
}

/// The names of the files and folders of a run directory and its checkpoints, in one place.
pub mod files {
    /// The trainable networks.
    pub const ONLINE: &str = "online.mpk";
    /// The online backbone alone.
    pub const BACKBONE: &str = "backbone.mpk";
    /// The method's state (key / target networks, queue, loss states).
    pub const METHOD: &str = "method.mpk";
    /// The optimiser's state.
    pub const OPTIMIZER: &str = "optimizer.mpk";
    /// The run's configuration, as saved with the checkpoint.
    pub const RUN: &str = "run.json";
    /// What the adaptive curricula learned (the augmenter's state), as JSON.
    pub const CURRICULA: &str = "curricula.json";
    /// Where the checkpoint stands, with checksums and shapes.
    pub const META: &str = "meta.json";
    /// The SHA-256 of `meta.json` (layout 7 on).
    pub const META_SUM: &str = "meta.sha256";
    /// The run directory's folder of checkpoints.
    pub const CHECKPOINTS: &str = "checkpoints";
    /// The file in [`CHECKPOINTS`] naming the newest complete checkpoint.
    pub const LATEST: &str = "latest";
    /// The run's configuration in the run directory.
    pub const CONFIG: &str = "config.json";
    /// The run directory's lock, held by the process that trains there
    /// ([`RunLock`](super::super::RunLock)).
    pub const LOCK: &str = ".lock";
    /// One row per optimiser step.
    pub const STEPS: &str = "steps.csv";
    /// One row per epoch.
    pub const EPOCHS: &str = "epochs.csv";
    /// Files every self-supervised checkpoint holds besides `meta.json`.
    pub const CHECKSUMMED: [&str; 6] = [ONLINE, BACKBONE, METHOD, OPTIMIZER, RUN, CURRICULA];
    /// A supervised checkpoint of layout 5: its example selection's pace, clusters and sampler,
    /// as JSON (layout 6 keeps them in `curricula.json`).
    pub const SELECTION: &str = "selection.json";
    /// SPL-ADVisE's embedding network (a file of its selection hook).
    pub const EMBEDDING: &str = "embedding.mpk";
    /// The embedding network's optimiser state.
    pub const EMBEDDING_OPTIMIZER: &str = "embedding_optimizer.mpk";
    /// Files every supervised checkpoint holds besides `meta.json` (`online.mpk` is the
    /// classifier, `backbone.mpk` its backbone; the selection's state is in `curricula.json`
    /// under its hook's name).
    pub const SUPERVISED: [&str; 5] = [ONLINE, BACKBONE, OPTIMIZER, RUN, CURRICULA];
    /// Files of a supervised checkpoint of layout 5 (its own trainer, the selection's state in
    /// `selection.json`): read for evaluation, not resumed.
    pub const SUPERVISED_V5: [&str; 5] = [ONLINE, BACKBONE, OPTIMIZER, RUN, SELECTION];

    /// The name of the checkpoint written after `epoch` epochs.
    pub fn checkpoint_name(epoch: usize) -> String {
        format!("epoch-{epoch:04}")
    }

    /// The name of the checkpoint written `batch` batches into the epoch that follows `epoch`
    /// complete epochs: `epoch-NNNN-batch-NNNNNNN`, or [`checkpoint_name`] at batch 0.
    pub fn checkpoint_name_at(epoch: usize, batch: usize) -> String {
        match batch {
            0 => checkpoint_name(epoch),
            b => format!("epoch-{epoch:04}-batch-{b:07}"),
        }
    }

    /// The `(epochs, batches)` position of a checkpoint name written by
    /// [`checkpoint_name_at`] (batches 0 for an epoch's end).
    pub fn checkpoint_position(name: &str) -> Option<(usize, usize)> {
        let digits = |text: &str| -> Option<usize> {
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            text.parse().ok()
        };
        let rest = name.strip_prefix("epoch-")?;
        match rest.split_once("-batch-") {
            None => Some((digits(rest)?, 0)),
            Some((epoch, batch)) => {
                let batch = digits(batch)?;
                (batch > 0).then_some((digits(epoch)?, batch))
            }
        }
    }

    /// The epochs completed at a checkpoint name written by [`checkpoint_name_at`].
    pub fn checkpoint_epoch(name: &str) -> Option<usize> {
        checkpoint_position(name).map(|(epoch, _)| epoch)
    }
}

/// Where a run stands when a checkpoint is written (`meta.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// Layout version: 7 in the checkpoints this build writes (2: checksums, shapes and
    /// `run.json`; 3: `curricula.json`; 4: crop-and-rotate's object boxes in `curricula.json`; 5:
    /// the `kind` of run in `meta.json`, and the supervised trainer's checkpoints; 6: one loop for
    /// both kinds, a supervised checkpoint keeps its selection in `curricula.json` and its hooks'
    /// files; 7: `meta.sha256`, the checksum of `meta.json`).
    pub format_version: u32,
    /// The trainer that wrote it (absent before layout 5: self-supervised).
    #[serde(default)]
    pub kind: CheckpointKind,
    /// Epochs completed.
    pub epoch: usize,
    /// Optimiser steps completed (the index of the next step).
    pub step: usize,
    /// Batches of the epoch after `epoch` already trained: 0 at an epoch's end, more in a
    /// checkpoint written in the middle of an epoch (absent when 0, as in every checkpoint
    /// before mid-epoch checkpoints existed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batch: usize,
    /// In a mid-epoch checkpoint, the epoch so far: its losses summed, its images and its
    /// seconds (so that the resumed epoch's row in `epochs.csv` is the whole epoch's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_so_far: Option<EpochSoFar>,
    /// Seed of the loader's shuffling.
    pub loader_seed: u64,
    /// Seed of the augmentation.
    pub augment_seed: u64,
    /// SHA-256 (lower-case hex) of every other file of the checkpoint.
    pub checksums: BTreeMap<String, String>,
    /// Shapes of the online networks' float parameters, in visiting order.
    pub online_shapes: Vec<Vec<usize>>,
    /// Shapes of the backbone's float parameters, in visiting order.
    pub backbone_shapes: Vec<Vec<usize>>,
}

/// An epoch's running totals at a mid-epoch checkpoint ([`CheckpointMeta::epoch_so_far`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochSoFar {
    /// The losses of its steps so far, summed.
    pub loss_sum: f64,
    /// Images trained on so far (every replica's).
    pub images: usize,
    /// Seconds spent on it so far.
    pub seconds: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

type Bytes = NamedMpkBytesRecorder<FullPrecisionSettings>;

/// Serialises a record to bytes (a checkpoint file; hooks holding networks write theirs so).
pub fn to_bytes<B: Backend, R: Record<B>>(record: R, what: &str) -> Result<Vec<u8>, TrainError> {
    Recorder::<B>::record(&Bytes::default(), record, ()).map_err(|e| TrainError::Checkpoint {
        path: PathBuf::from(what),
        reason: format!("cannot serialise the {what}: {e}"),
    })
}

/// Reads a record written by [`to_bytes`] from a checkpoint file (after [`verify`] checked its
/// bytes).
pub fn read_record<B: Backend, R: Record<B>>(
    path: &Path,
    device: &B::Device,
) -> Result<R, TrainError> {
    let bytes = fs::read(path).map_err(|e| io_error(path, e))?;
    Recorder::<B>::load(&Bytes::default(), bytes, device).map_err(|_| TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: "not a record of the expected kind (another method or model)".into(),
    })
}

/// The files of one checkpoint, serialised and ready to write.
pub(crate) struct CheckpointFiles {
    pub(crate) meta: CheckpointMeta,
    pub(crate) files: Vec<(&'static str, Vec<u8>)>,
}

/// An I/O error on a checkpoint file, worded by its kind.
pub(crate) fn io_error(path: &Path, e: std::io::Error) -> TrainError {
    TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: describe_io(&e),
    }
}

/// An I/O error while writing the run directory (a failure of the run, not of its input).
pub(crate) fn write_error(path: &Path, e: std::io::Error) -> TrainError {
    TrainError::Io {
        path: path.to_path_buf(),
        reason: describe_io(&e),
    }
}

/// An I/O error in words a user acts on (permission denied, missing, full disk...).
pub fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::PermissionDenied => "permission denied".into(),
        ErrorKind::ReadOnlyFilesystem => "a read-only file system".into(),
        ErrorKind::NotFound => "not found".into(),
        ErrorKind::StorageFull => "no space left on the device".into(),
        ErrorKind::NotADirectory => "a path component is not a directory".into(),
        ErrorKind::IsADirectory => "is a directory, not a file".into(),
        _ => e.to_string(),
    }
}

/// Writes a new file at `path` (never through a link or into an existing file: `create_new`)
/// and syncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| write_error(path, e))?;
    f.write_all(bytes).map_err(|e| write_error(path, e))?;
    f.sync_all().map_err(|e| write_error(path, e))
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed, then renamed, so
/// that a reader never sees a half-written file and an interruption leaves the old one.
///
/// # Errors
/// The file system's, naming `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    // A temporary file this process left (or a link planted under its name) is removed, not
    // written through: the rename then replaces `path` itself, a link at `path` included,
    // never the file a link points to.
    let _ = fs::remove_file(&tmp);
    let written = write_synced(&tmp, bytes)
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| write_error(path, e)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The checkpoints of a run directory.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointDir {
    root: PathBuf,
}

impl CheckpointDir {
    /// The `checkpoints/` folder of `run_dir` (created on the first save).
    pub(crate) fn new(run_dir: &Path) -> Self {
        Self {
            root: run_dir.join(files::CHECKPOINTS),
        }
    }

    /// The folder holding the checkpoints.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Writes a checkpoint for `meta.epoch` with the checksums of its files and points `latest`
    /// at it; returns its directory.
    pub(crate) fn save(&self, files: CheckpointFiles) -> Result<PathBuf, TrainError> {
        fs::create_dir_all(&self.root).map_err(|e| write_error(&self.root, e))?;
        let name = files::checkpoint_name_at(files.meta.epoch, files.meta.batch);
        let tmp = self
            .root
            .join(format!(".{name}.{}.tmp", std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| write_error(&tmp, e))?;
        }
        let written = self.write_into(&tmp, &name, files);
        if written.is_err() {
            // A failed write (a full disk) takes its partial copy with it.
            let _ = fs::remove_dir_all(&tmp);
        }
        written
    }

    /// [`CheckpointDir::save`]'s work once its temporary directory `tmp` is chosen.
    fn write_into(
        &self,
        tmp: &Path,
        name: &str,
        mut files: CheckpointFiles,
    ) -> Result<PathBuf, TrainError> {
        let target = self.root.join(name);
        fs::create_dir(tmp).map_err(|e| write_error(tmp, e))?;
        files.meta.checksums.clear();
        for (file, bytes) in &files.files {
            write_synced(&tmp.join(file), bytes)?;
            files
                .meta
                .checksums
                .insert(file.to_string(), sha256_hex(bytes));
        }
        let meta = serde_json::to_vec_pretty(&files.meta).expect("plain struct");
        write_synced(&tmp.join(files::META), &meta)?;
        write_synced(&tmp.join(files::META_SUM), sha256_hex(&meta).as_bytes())?;
        if target.exists() {
            let old = self.root.join(format!(".{name}.old"));
            if old.exists() {
                fs::remove_dir_all(&old).map_err(|e| write_error(&old, e))?;
            }
            fs::rename(&target, &old).map_err(|e| write_error(&target, e))?;
            fs::rename(tmp, &target).map_err(|e| write_error(&target, e))?;
            fs::remove_dir_all(&old).map_err(|e| write_error(&old, e))?;
        } else {
            fs::rename(tmp, &target).map_err(|e| write_error(&target, e))?;
        }
        write_atomic(&self.root.join(files::LATEST), name.as_bytes())?;
        if let Ok(dir) = File::open(&self.root) {
            let _ = dir.sync_all();
        }
        Ok(target)
    }

    /// Whether the folder holds any checkpoint (complete or not) or a `latest` pointer: then
    /// its run directory is a run, whatever else it holds.
    pub(crate) fn holds_checkpoints(&self) -> Result<bool, TrainError> {
        if self.root.join(files::LATEST).exists() {
            return Ok(true);
        }
        Ok(!self.complete()?.is_empty()
            || self.entries()?.iter().any(|(name, _)| {
                files::checkpoint_epoch(name).is_some()
                    || name.starts_with(".epoch-") && name.ends_with(".tmp")
            }))
    }

    /// Removes what an interrupted or failed writer left in the folder (its temporary
    /// directories and pointer files), and puts back a checkpoint that a kill left only as its
    /// `.epoch-NNNN.old` copy (between the two renames of a rewrite). Called by a resume, under
    /// the run's lock, so no other writer is at work.
    ///
    /// # Errors
    /// If the folder cannot be read or a leftover cannot be removed.
    pub(crate) fn clear_leftovers(&self) -> Result<(), TrainError> {
        for (name, path) in self.entries()? {
            let Some(rest) = name.strip_prefix('.') else {
                continue;
            };
            if let Some(checkpoint) = rest.strip_suffix(".old") {
                let target = self.root.join(checkpoint);
                if files::checkpoint_epoch(checkpoint).is_some() && !target.exists() {
                    log::warn!(
                        "{}: a rewrite of {checkpoint} was interrupted; putting the previous copy \
                         back",
                        path.display()
                    );
                    fs::rename(&path, &target).map_err(|e| write_error(&target, e))?;
                    continue;
                }
            } else if !rest.ends_with(".tmp") {
                continue;
            }
            log::info!("removing {}, left by an interrupted write", path.display());
            let removed = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(|e| write_error(&path, e))?;
        }
        Ok(())
    }

    fn entries(&self) -> Result<Vec<(String, PathBuf)>, TrainError> {
        let read = match fs::read_dir(&self.root) {
            Ok(read) => read,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&self.root, e)),
        };
        let mut out = Vec::new();
        for entry in read {
            let entry = entry.map_err(|e| io_error(&self.root, e))?;
            out.push((
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            ));
        }
        Ok(out)
    }

    /// Every complete checkpoint (a directory `epoch-NNNN` or `epoch-NNNN-batch-NNNNNNN` with
    /// `meta.json`), newest first.
    pub(crate) fn complete(&self) -> Result<Vec<PathBuf>, TrainError> {
        Ok(self
            .named()?
            .into_iter()
            .filter(|path| path.join(files::META).is_file())
            .collect())
    }

    /// Everything named as a checkpoint (`epoch-NNNN`, `epoch-NNNN-batch-NNNNNNN`), complete or
    /// not, newest first. A checkpoint is renamed into place only once written whole
    /// ([`CheckpointDir::save`]), so one without `meta.json` lost files after it was written.
    fn named(&self) -> Result<Vec<PathBuf>, TrainError> {
        let mut found: Vec<((usize, usize), PathBuf)> = self
            .entries()?
            .into_iter()
            .filter_map(|(name, path)| Some((files::checkpoint_position(&name)?, path)))
            .collect();
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        Ok(found.into_iter().map(|(_, p)| p).collect())
    }

    /// Removes the mid-epoch checkpoints older than `(epoch, batch)` (the one just written):
    /// an epoch's end keeps its checkpoint, the middle of an epoch only its newest, so that a
    /// run checkpointing every few hundred steps holds one more checkpoint, not hundreds. Each
    /// is first renamed to a hidden temporary name, so that a kill during its removal leaves a
    /// leftover [`CheckpointDir::clear_leftovers`] removes, not a damaged checkpoint.
    ///
    /// # Errors
    /// If the folder cannot be read or a checkpoint cannot be removed.
    pub(crate) fn remove_older_mid_epoch(
        &self,
        epoch: usize,
        batch: usize,
    ) -> Result<(), TrainError> {
        for (name, path) in self.entries()? {
            match files::checkpoint_position(&name) {
                Some((e, b)) if b > 0 && (e, b) < (epoch, batch) => {
                    let doomed = self
                        .root
                        .join(format!(".{name}.{}.removed.tmp", std::process::id()));
                    fs::rename(&path, &doomed).map_err(|e| write_error(&path, e))?;
                    fs::remove_dir_all(&doomed).map_err(|e| write_error(&doomed, e))?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The checkpoint `latest` names, if the pointer exists.
    ///
    /// # Errors
    /// If `latest` names anything but a checkpoint directory of this folder (`../x`, a path):
    /// it is not followed.
    fn pointer(&self) -> Result<Option<PathBuf>, TrainError> {
        let pointer = self.root.join(files::LATEST);
        let name = match fs::read_to_string(&pointer) {
            Ok(name) => name,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&pointer, e)),
        };
        let name = name.trim();
        if files::checkpoint_epoch(name).is_none() {
            return Err(TrainError::Checkpoint {
                path: pointer,
                reason: format!(
                    "names `{name}`, which is not a checkpoint of this run directory (expected \
                     a name like epoch-0005); it is not followed"
                ),
            });
        }
        Ok(Some(self.root.join(name)))
    }

    /// Candidates for resuming, best first: every checkpoint from the newest, the incomplete
    /// ones too (they are damage, skipped with a warning, not silently passed over: a folder
    /// whose every checkpoint lost its `meta.json` must not look empty). `latest` is checked (a
    /// pointer outside the folder is refused) and a stale one is said: resuming from the
    /// checkpoint it names would overwrite the newer ones.
    fn candidates(&self, named: Option<&PathBuf>) -> Result<Vec<PathBuf>, TrainError> {
        // The folder read once: every checkpoint, and the complete ones among them.
        let all = self.named()?;
        let complete: Vec<&PathBuf> = all
            .iter()
            .filter(|path| path.join(files::META).is_file())
            .collect();
        let base = |p: &Path| {
            p.file_name()
                .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
        };
        if let (Some(named), Some(&newest)) = (named, complete.first()) {
            let pointer = self.root.join(files::LATEST);
            if !complete.contains(&named) {
                log::warn!(
                    "{} names {}, which is missing or incomplete; using the newest complete \
                     checkpoint, {}",
                    pointer.display(),
                    base(named),
                    base(newest)
                );
            } else if named != newest {
                log::warn!(
                    "{} names {}, but {} is complete and newer (a stop between the checkpoint's \
                     rename and the pointer's update); using the newest",
                    pointer.display(),
                    base(named),
                    base(newest)
                );
            }
        }
        Ok(all)
    }

    /// The newest checkpoint whose files match their checksums, with its description. A damaged
    /// checkpoint is skipped with a warning naming the damaged file, and the previous complete
    /// one is used.
    ///
    /// # Errors
    /// If `latest` points outside the folder, or every checkpoint is damaged (each is named: one
    /// without `meta.json` too), or `latest` names a checkpoint and the folder holds none (they
    /// were removed: a resume would start the run afresh over its logs).
    pub(crate) fn newest_valid(&self) -> Result<Option<(PathBuf, CheckpointMeta)>, TrainError> {
        let pointer = self.pointer()?;
        let candidates = self.candidates(pointer.as_ref())?;
        if let (Some(named), true) = (&pointer, candidates.is_empty()) {
            let name = named
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let old = format!(".{name}.old");
            let reason = if self.root.join(&old).is_dir() {
                // A kill between the two renames of a rewrite: a resume, which clears leftovers
                // first, puts the copy back.
                format!(
                    "names {name}, which a rewrite interrupted by a kill left as {old}: resume \
                     the run (`recipe resume`) to put it back"
                )
            } else {
                format!(
                    "names {name}, but {} holds no checkpoint: they were removed after the run \
                     wrote them. Resuming would start the run afresh over its logs; to start \
                     it afresh, use a new run directory (or move this one's logs away and \
                     remove {})",
                    self.root.display(),
                    self.root.display()
                )
            };
            return Err(TrainError::Checkpoint {
                path: self.root.join(files::LATEST),
                reason,
            });
        }
        let mut damaged = Vec::new();
        for dir in candidates {
            let meta = if dir.join(files::META).is_file() {
                read_meta(&dir)
            } else {
                Err(TrainError::Checkpoint {
                    path: dir.clone(),
                    reason: format!(
                        "holds no {}: a checkpoint is moved into place only once written \
                         whole, so its files were removed or lost since",
                        files::META
                    ),
                })
            };
            match meta.and_then(|meta| verify(&dir, &meta).map(|()| meta)) {
                Ok(meta) => {
                    if !damaged.is_empty() {
                        log::warn!("falling back to the previous checkpoint {}", dir.display());
                    }
                    return Ok(Some((dir, meta)));
                }
                Err(e) => {
                    log::warn!("skipping a damaged checkpoint: {e}");
                    damaged.push(e.to_string());
                }
            }
        }
        if damaged.is_empty() {
            Ok(None)
        } else {
            Err(TrainError::Checkpoint {
                path: self.root.clone(),
                reason: format!("every checkpoint is damaged: {}", damaged.join("; ")),
            })
        }
    }
}

/// Reads `meta.json` of a checkpoint directory.
///
/// # Errors
/// If it is missing, unreadable, or of a layout version this build does not read. It reads 3
/// (whose `curricula.json` has no object boxes, read as none: no run of that layout used them),
/// 4 (no `kind`: self-supervised), 5 (a supervised one is read for evaluation; its record refuses
/// a resume), 6 (no `meta.sha256`: `meta.json` is read unchecked) and 7.
pub fn read_meta(checkpoint: &Path) -> Result<CheckpointMeta, TrainError> {
    let path = checkpoint.join(files::META);
    let text = fs::read(&path).map_err(|e| io_error(&path, e))?;
    let sum_path = checkpoint.join(files::META_SUM);
    match fs::read_to_string(&sum_path) {
        Ok(recorded) => {
            let found = sha256_hex(&text);
            if recorded.trim() != found {
                return Err(TrainError::Checkpoint {
                    path,
                    reason: format!(
                        "damaged: its SHA-256 is {found}, {} recorded {}",
                        files::META_SUM,
                        recorded.trim()
                    ),
                });
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(&sum_path, e)),
    }
    let version: Option<u32> = serde_json::from_slice::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("format_version")?.as_u64())
        .and_then(|v| u32::try_from(v).ok());
    if let Some(version) = version.filter(|v| !READABLE_VERSIONS.contains(v)) {
        return Err(TrainError::Checkpoint {
            path,
            reason: format!(
                "layout version {version} but this build reads versions {} to {FORMAT_VERSION} \
                 (version 1 had no checksums, version 2 no curriculum state, a newer version \
                 comes from a newer build: resume it with the version that wrote it)",
                READABLE_VERSIONS[0]
            ),
        });
    }
    if version.is_some_and(|v| v >= 7) && !sum_path.is_file() {
        return Err(TrainError::Checkpoint {
            path: sum_path,
            reason: format!(
                "missing: layout 7 keeps the SHA-256 of {} there",
                files::META
            ),
        });
    }
    serde_json::from_slice(&text).map_err(|e| TrainError::Checkpoint {
        path,
        reason: format!("not a checkpoint description: {e}"),
    })
}

/// Checks every file of a checkpoint against the SHA-256 recorded in its `meta.json`: the files
/// its kind requires ([`CheckpointKind::required_files`]) and every other file it records.
///
/// # Errors
/// Naming the first file that is missing, unreadable or damaged.
pub fn verify(checkpoint: &Path, meta: &CheckpointMeta) -> Result<(), TrainError> {
    let required = meta
        .kind
        .required_files(meta.format_version)
        .iter()
        .copied();
    let recorded = meta
        .checksums
        .keys()
        .map(String::as_str)
        .filter(|name| !meta.kind.required_files(meta.format_version).contains(name));
    for name in required.chain(recorded) {
        if name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(TrainError::Checkpoint {
                path: checkpoint.join(files::META),
                reason: format!("records a file outside the checkpoint: {name:?}"),
            });
        }
        let path = checkpoint.join(name);
        let Some(expected) = meta.checksums.get(name) else {
            return Err(TrainError::Checkpoint {
                path: checkpoint.join(files::META),
                reason: format!("records no checksum for {name}"),
            });
        };
        let bytes = fs::read(&path).map_err(|e| io_error(&path, e))?;
        let found = sha256_hex(&bytes);
        if &found != expected {
            return Err(TrainError::Checkpoint {
                path,
                reason: format!(
                    "damaged: its SHA-256 is {found}, {} recorded {expected}",
                    files::META
                ),
            });
        }
    }
    Ok(())
}

/// Resolves a path given by a user to a verified checkpoint directory: a checkpoint itself
/// (verified strictly), a run directory or a `checkpoints/` folder (its newest valid checkpoint,
/// falling back past damaged ones with a warning).
///
/// # Errors
/// If no checkpoint is found there, or the one named is damaged.
pub fn resolve_checkpoint(path: &Path) -> Result<PathBuf, TrainError> {
    if path.join(files::META).is_file() {
        verify(path, &read_meta(path)?)?;
        return Ok(path.to_path_buf());
    }
    for root in [path.to_path_buf(), path.join(files::CHECKPOINTS)] {
        let dir = CheckpointDir { root };
        if let Some((found, _)) = dir.newest_valid()? {
            return Ok(found);
        }
    }
    Err(TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: "no checkpoint here (expected a checkpoint directory with meta.json, or a run \
                 directory with checkpoints/epoch-*)"
            .into(),
    })
}

/// Compares the shapes a checkpoint recorded with those of the module that will receive it.
pub(crate) fn check_shapes(
    file: &Path,
    saved: &[Vec<usize>],
    expected: &[Vec<usize>],
) -> Result<(), TrainError> {
    if saved == expected {
        return Ok(());
    }
    let first = saved.iter().zip(expected).position(|(a, b)| a != b);
    let detail = match first {
        Some(i) => format!(
            "tensor {i} is {:?} there and {:?} here",
            saved[i], expected[i]
        ),
        None => "one holds more tensors than the other".into(),
    };
    Err(TrainError::Checkpoint {
        path: file.to_path_buf(),
        reason: format!(
            "its networks have {} parameter tensors, this model {} ({detail}): another \
             architecture or width",
            saved.len(),
            expected.len()
        ),
    })
}

/// Loads the backbone saved in a checkpoint (or a run directory's newest valid one) into
/// `backbone`, a freshly built backbone of the same architecture — for kNN or linear
/// evaluation, or export.
///
/// # Errors
/// If there is no checkpoint, it is damaged, its backbone is of another architecture, or it
/// holds values that are not finite.
pub fn load_backbone<B: Backend, M: Module<B>>(
    path: &Path,
    backbone: M,
    device: &B::Device,
) -> Result<M, TrainError> {
    let dir = resolve_checkpoint(path)?;
    let meta = read_meta(&dir)?;
    let file = dir.join(files::BACKBONE);
    let expected = shapes(&backbone);
    check_shapes(&file, &meta.backbone_shapes, &expected)?;
    let record = read_record::<B, M::Record>(&file, device)?;
    let loaded = backbone.load_record(record);
    // The record's own tensors must have the shapes meta.json promised.
    check_shapes(&file, &shapes(&loaded), &expected)?;
    let bad = non_finite_tensors(&loaded);
    if let Some(first) = bad.first() {
        return Err(TrainError::Checkpoint {
            path: file,
            reason: format!(
                "holds values that are not finite (NaN or infinite) in `{first}`{} (a diverged \
                 run's checkpoint, written before checkpoints were checked): use an earlier \
                 checkpoint",
                if bad.len() > 1 {
                    format!(" and {} more tensors", bad.len() - 1)
                } else {
                    String::new()
                }
            ),
        });
    }
    Ok(loaded)
}

/// The float tensors of `module` (parameters and batch-norm running statistics) holding a value
/// that is not finite (NaN, ±inf), by module path (e.g. `backbone.layer1.0.bn1`), in visiting
/// order; one read-back for the whole module.
pub(crate) fn non_finite_tensors<B: Backend, M: Module<B>>(module: &M) -> Vec<String> {
    struct Check<B: Backend> {
        path: Vec<String>,
        names: Vec<String>,
        flags: Vec<Tensor<B, 1, Int>>,
    }
    impl<B: Backend> burn::module::ModuleVisitor<B> for Check<B> {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
            let name = match self.path.join(".") {
                path if path.is_empty() => format!("tensor {}", self.names.len()),
                path => path,
            };
            self.names.push(name);
            self.flags
                .push(param.val().is_finite().bool_not().any().int().reshape([1]));
        }
    }
    let mut check = Check::<B> {
        path: Vec::new(),
        names: Vec::new(),
        flags: Vec::new(),
    };
    module.visit(&mut check);
    if check.flags.is_empty() {
        return Vec::new();
    }
    let flags = Tensor::cat(check.flags, 0)
        .into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .unwrap_or_default();
    check
        .names
        .into_iter()
        .zip(flags)
        .filter(|(_, bad)| *bad != 0)
        .map(|(name, _)| name)
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_names_round_trip_and_reject_paths() {
        assert_eq!(files::checkpoint_name(7), "epoch-0007");
        assert_eq!(files::checkpoint_name_at(7, 0), "epoch-0007");
        assert_eq!(files::checkpoint_name_at(7, 12), "epoch-0007-batch-0000012");
        assert_eq!(
            files::checkpoint_position("epoch-0007-batch-0000012"),
            Some((7, 12))
        );
        assert_eq!(files::checkpoint_position("epoch-0007"), Some((7, 0)));
        for bad in [
            "epoch-0007-batch-",
            "epoch-0007-batch-0000000",
            "epoch--batch-0000003",
            "epoch-0007-batch-12/..",
            "epoch-0007-step-0000012",
        ] {
            assert_eq!(files::checkpoint_position(bad), None, "{bad}");
        }
        assert_eq!(files::checkpoint_epoch("epoch-0007"), Some(7));
        assert_eq!(files::checkpoint_epoch("epoch-12345"), Some(12345));
        for bad in [
            "../../x",
            "epoch-",
            "epoch-1/../..",
            "/tmp/epoch-1",
            ".epoch-0001.tmp",
        ] {
            assert_eq!(files::checkpoint_epoch(bad), None, "{bad}");
        }
    }

    /// Versions 3 (before the object boxes), 4 (before `kind`), 5 (before the one loop) and 6
    /// (before `meta.sha256`) are still read, as self-supervised without a `kind`; 2 and a future
    /// 8 are refused, saying which versions this build reads.
    #[test]
    fn older_layouts_are_read_or_refused_by_version() {
        let dir = std::env::temp_dir().join(format!("curriculum-ssl-meta-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let meta = |version: u32| {
            serde_json::json!({
                "format_version": version,
                "epoch": 2,
                "step": 8,
                "loader_seed": 1,
                "augment_seed": 2,
                "checksums": {},
                "online_shapes": [[3, 4]],
                "backbone_shapes": [],
            })
            .to_string()
        };
        for version in [3, 4, 5, 6] {
            fs::write(dir.join(files::META), meta(version)).unwrap();
            let read = read_meta(&dir).unwrap();
            assert_eq!((read.format_version, read.epoch), (version, 2));
            assert_eq!(read.kind, CheckpointKind::SelfSupervised);
        }
        for version in [2, 8] {
            fs::write(dir.join(files::META), meta(version)).unwrap();
            let err = read_meta(&dir).unwrap_err().to_string();
            assert!(
                err.contains(&format!("layout version {version}"))
                    && err.contains("reads versions 3 to 7"),
                "{err}"
            );
        }
        // Layout 7 keeps meta.json's checksum beside it: one changed byte is damage, and a
        // missing checksum too.
        let text = meta(7);
        fs::write(dir.join(files::META), &text).unwrap();
        let err = read_meta(&dir).unwrap_err().to_string();
        assert!(
            err.contains("meta.sha256") && err.contains("missing"),
            "{err}"
        );
        fs::write(dir.join(files::META_SUM), sha256_hex(text.as_bytes())).unwrap();
        assert_eq!(read_meta(&dir).unwrap().epoch, 2);
        fs::write(
            dir.join(files::META),
            text.replace("\"step\":8", "\"step\":9"),
        )
        .unwrap();
        let err = read_meta(&dir).unwrap_err().to_string();
        assert!(err.contains("damaged: its SHA-256 is"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sha256_of_a_known_string() {
        // FIPS 180-2, appendix B.1.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
