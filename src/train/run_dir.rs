//! The run directory and the run's record (documented on the `train` module's page).

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::checkpoint::{files, io_error, CheckpointDir};
use super::config::TrainConfig;
use super::error::{Difference, TrainError};
use super::self_supervised::SelfSupervisedSettings;

/// The `format` field of every run record: what marks a directory as a run of this crate.
pub(crate) const RUN_FORMAT: &str = "curriculum-ssl run";

/// The `format` field of the records of supervised runs written before the one loop (their own
/// trainer and layout): recognised as runs, refused on resume with a clear message.
pub(crate) const SUPERVISED_RUN_FORMAT: &str = "curriculum-ssl supervised run";

/// Whether `config.json` of `dir` is a run record of this crate, of any layout.
fn has_run_config(dir: &Path) -> bool {
    fs::read(dir.join(files::CONFIG))
        .ok()
        .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok())
        .and_then(|v| v.get("format")?.as_str().map(str::to_string))
        .is_some_and(|f| f == RUN_FORMAT || f == SUPERVISED_RUN_FORMAT)
}

/// What a run trains on, in a few bytes: the number of examples, their shape and the SHA-256
/// of their pixels and labels. Kept in the run record, so that a resume on changed data (a
/// folder whose images changed, another subset) is refused instead of silently continuing on
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFingerprint {
    /// Examples.
    pub examples: usize,
    /// `[height, width, channels]` of every example.
    pub shape: [usize; 3],
    /// Whether the examples have labels.
    pub labelled: bool,
    /// SHA-256 (lower-case hex) of the shape, the pixels and the labels (little-endian); of
    /// the files' names, sizes and labels for `files`.
    pub sha256: String,
    /// Whether the examples are image files read as they are trained on (streamed:
    /// [`DataFingerprint::of_files`]) rather than decoded pixels (absent when false, as in
    /// every record written before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files: bool,
}

impl DataFingerprint {
    /// The fingerprint of an array of images (a pass over its bytes: well under a second for
    /// CIFAR-10).
    pub fn of_images(images: &crate::data::ImageArray) -> Self {
        use sha2::{Digest, Sha256};
        let (h, w, c) = images.image_shape();
        let mut hash = Sha256::new();
        for n in [images.len(), h, w, c] {
            hash.update((n as u64).to_le_bytes());
        }
        hash.update(images.all_pixels());
        if let Some(labels) = images.labels() {
            for label in labels {
                hash.update(label.to_le_bytes());
            }
        }
        Self {
            examples: images.len(),
            shape: [h, w, c],
            labelled: images.labels().is_some(),
            sha256: hash.finalize().iter().map(|b| format!("{b:02x}")).collect(),
            files: false,
        }
    }
}

impl DataFingerprint {
    /// The fingerprint of image files read as they are trained on (a streamed folder): the
    /// files' names relative to `root` (so that machines holding copies at other paths agree),
    /// their sizes in bytes and labels, and `shape`, the `[height, width, channels]` the views
    /// are cut at. It reads no pixel (ImageNet's 140 GB would take minutes): a file rewritten at
    /// the same size is not seen; one added, removed, renamed, relabelled or resized is.
    pub fn of_files(
        source: &impl crate::data::stream::ImageSource,
        root: &Path,
        shape: [usize; 3],
    ) -> Self {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(b"files");
        for n in [source.len(), shape[0], shape[1], shape[2]] {
            hash.update((n as u64).to_le_bytes());
        }
        let labelled = !source.is_empty() && source.label(0).is_some();
        for i in 0..source.len() {
            let name = source.name(i);
            let relative = name.strip_prefix(root).unwrap_or(&name);
            let text = relative.to_string_lossy();
            hash.update((text.len() as u64).to_le_bytes());
            hash.update(text.as_bytes());
            let bytes = source.byte_size(i).unwrap_or(u64::MAX);
            hash.update(bytes.to_le_bytes());
            if let Some(label) = source.label(i) {
                hash.update(label.to_le_bytes());
            }
        }
        Self {
            examples: source.len(),
            shape,
            labelled,
            sha256: hash.finalize().iter().map(|b| format!("{b:02x}")).collect(),
            files: true,
        }
    }
}

impl std::fmt::Display for DataFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [h, w, c] = self.shape;
        write!(
            f,
            "{} {}{} {h}x{w}x{c}, SHA-256 {}",
            self.examples,
            if self.labelled { "labelled " } else { "" },
            if self.files {
                "image files streamed at"
            } else {
                "images"
            },
            &self.sha256[..self.sha256.len().min(12)]
        )
    }
}

/// Removes the setting at a dotted path (`run.data`) from a run record as JSON, if it is there.
pub(crate) fn remove_setting(record: &mut serde_json::Value, path: &str) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else {
        return;
    };
    let mut node = record;
    for part in parts {
        match node.get_mut(part) {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(last);
    }
}

/// A process's exclusive hold on a run directory while it trains there (a fresh start, a resume
/// or an extension): an advisory lock on `.lock` (`flock` on Unix, `LockFileEx` on Windows),
/// released when the process ends, however it ends. A second writer is refused, naming the
/// process that holds the directory, before it writes anything. The file stays (removing it
/// would let a third process lock a new file while the second still holds the old one); a
/// directory holding only `.lock` counts as empty.
#[derive(Debug)]
pub struct RunLock {
    _file: fs::File,
}

impl RunLock {
    /// Creates `run_dir` if needed and takes its lock.
    ///
    /// # Errors
    /// If another process holds it (naming its process id), or the directory cannot be made.
    /// A file system without locks is warned about, not refused.
    pub fn acquire(run_dir: &Path) -> Result<Self, TrainError> {
        fs::create_dir_all(run_dir).map_err(|e| super::checkpoint::write_error(run_dir, e))?;
        let path = run_dir.join(files::LOCK);
        // Something other than a file in the lock's place is damage to the run directory, named
        // as such (exit 2), not a failure of the disk.
        if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            return Err(TrainError::Run {
                path,
                reason: "is a directory where the run's lock file belongs; remove it (it holds \
                         nothing of the run) and run again"
                    .into(),
            });
        }
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| super::checkpoint::write_error(&path, e))?;
        match file.try_lock() {
            Ok(()) => {
                use std::io::Write;
                // The holder's id, for the message of the one refused.
                let _ = file.set_len(0);
                let _ = write!(file, "{}", std::process::id());
                let _ = file.flush();
            }
            Err(fs::TryLockError::WouldBlock) => {
                let holder = fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse::<u32>().ok())
                    .map_or_else(|| "another process".to_string(), |p| format!("process {p}"));
                return Err(TrainError::Run {
                    path: run_dir.to_path_buf(),
                    reason: format!(
                        "is in use by {holder} (a training, resume or extension of this run); \
                         wait for it to end, or stop it, before starting another here"
                    ),
                });
            }
            Err(fs::TryLockError::Error(e)) => log::warn!(
                "{}: cannot be locked ({e}); two processes writing this run at once would not \
                 be stopped",
                path.display()
            ),
        }
        Ok(Self { _file: file })
    }
}

/// The loop's settings that may differ on resume: they do not change what is trained (a step
/// adds its own, [`Task::resumable_changes`](super::Task::resumable_changes)).
pub(crate) const RESUMABLE_CHANGES: [&str; 3] = [
    "train.checkpoint_every",
    "train.checkpoint_every_steps",
    "train.progress_bar",
];

/// A planned run made longer on purpose: at step `at_step` the run of `from_epochs` epochs
/// became one of `to_epochs` epochs, and the learning-rate schedule was re-planned from there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extension {
    /// The first step trained under the new plan.
    pub at_step: usize,
    /// Epochs planned before.
    pub from_epochs: usize,
    /// Epochs planned after.
    pub to_epochs: usize,
}

/// Everything that defines a run, as saved in `config.json` and in each checkpoint's
/// `run.json`: the loop's settings, the step's (`T`, its fields at the top level: for a
/// self-supervised run the loader and the augmentation, [`SelfSupervisedSettings`]), the hooks'
/// settings, the extensions of the plan, and the caller's own description `run` (method,
/// backbone, data; typed by the caller, e.g. a recipe's settings struct).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "R: Serialize, T: Serialize",
    deserialize = "R: DeserializeOwned, T: DeserializeOwned"
))]
pub struct RunRecord<R = serde_json::Value, T = SelfSupervisedSettings> {
    /// Always `"curriculum-ssl run"`.
    pub format: String,
    /// The loop's settings.
    pub train: TrainConfig,
    /// The step's settings.
    #[serde(flatten)]
    pub task: T,
    /// The settings of the run's hooks, by name ([`Hook::describe`](super::Hook::describe);
    /// hooks with nothing to record are left out).
    #[serde(default)]
    pub hooks: std::collections::BTreeMap<String, serde_json::Value>,
    /// Extensions of the plan, oldest first.
    #[serde(default)]
    pub extensions: Vec<Extension>,
    /// What the run trains on ([`DataFingerprint`]; absent in runs recorded before it, or when
    /// the caller gives none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataFingerprint>,
    /// The caller's description of the run.
    pub run: R,
}

impl<R: DeserializeOwned, T: DeserializeOwned> RunRecord<R, T> {
    /// Reads the record of a run directory (`config.json`).
    ///
    /// # Errors
    /// If it is missing, unreadable, or not a run record of this crate.
    pub fn read(run_dir: &Path) -> Result<Self, TrainError> {
        Self::read_file(&run_dir.join(files::CONFIG))
    }

    /// Reads a record from a file (`config.json`, or a checkpoint's `run.json`).
    ///
    /// # Errors
    /// If it is missing, unreadable, or not a run record of this crate.
    pub fn read_file(path: &Path) -> Result<Self, TrainError> {
        let text = fs::read(path).map_err(|e| TrainError::Run {
            path: path.to_path_buf(),
            reason: super::checkpoint::describe_io(&e),
        })?;
        let not_ours = |reason: String| TrainError::Run {
            path: path.to_path_buf(),
            reason,
        };
        let mut value: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| not_ours(format!("not JSON ({e})")))?;
        if value.get("format").and_then(|f| f.as_str()) == Some(SUPERVISED_RUN_FORMAT) {
            return Err(not_ours(format!(
                "the record of a supervised run of an earlier layout (\"{SUPERVISED_RUN_FORMAT}\", \
                 written before the supervised trainer joined the one training loop): it cannot \
                 be resumed; start a new run directory (its checkpoints' backbone.mpk still \
                 loads for evaluation)"
            )));
        }
        if value.get("format").and_then(|f| f.as_str()) != Some(RUN_FORMAT) {
            return Err(not_ours(format!(
                "not the configuration of a curriculum-ssl run (no \"format\": \"{RUN_FORMAT}\")"
            )));
        }
        migrate(&mut value);
        serde_json::from_value(value).map_err(|e| not_ours(format!("unreadable run record: {e}")))
    }
}

/// Reads a record written before the hooks as today's: Fréchet batch curation's settings,
/// `train.curation`, become the settings of the hook named `curation`, and the kNN monitor's
/// cadence, `train.knn_every` (a setting a resume may change), is dropped: the monitor is a
/// hook with its own. A curation recorded before its threshold rule was a setting used the
/// paper's (`"threshold": "PaperMean"`). A loop setting added since the record was written
/// takes its default, which is what runs before it did (`checkpoint_every_steps`: 0, no
/// mid-epoch checkpoints).
fn migrate(record: &mut serde_json::Value) {
    let Some(train) = record.get_mut("train").and_then(|t| t.as_object_mut()) else {
        return;
    };
    train.remove("knn_every");
    if let Ok(serde_json::Value::Object(defaults)) = serde_json::to_value(TrainConfig::new()) {
        for (key, value) in defaults {
            train.entry(key).or_insert(value);
        }
    }
    let curation = train.remove("curation");
    if let Some(curation) = curation.filter(|c| !c.is_null()) {
        if let Some(fields) = record.as_object_mut() {
            let hooks = fields
                .entry("hooks")
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
            if let Some(hooks) = hooks.as_object_mut() {
                hooks.entry("curation").or_insert(curation);
            }
        }
    }
    let curation = record
        .get_mut("hooks")
        .and_then(|h| h.get_mut("curation"))
        .and_then(|c| c.as_object_mut());
    if let Some(curation) = curation {
        curation
            .entry("threshold")
            .or_insert_with(|| serde_json::Value::from("PaperMean"));
    }
}

/// What a directory holds, as far as starting a run there is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirState {
    /// Missing or empty: a run may start.
    Empty,
    /// A run of this crate (its `config.json`, or checkpoints).
    Run {
        /// Whether `config.json` is there and is ours.
        has_config: bool,
        /// Whether `checkpoints/` holds any checkpoint or a `latest` pointer.
        has_checkpoints: bool,
    },
    /// Not empty and not a run: a few of its entries, for the message.
    Foreign(Vec<String>),
}

/// Looks at a directory before a run starts or resumes there.
///
/// # Errors
/// If the path is a file, or cannot be read (permission denied is said so).
pub fn inspect(dir: &Path) -> Result<DirState, TrainError> {
    let read = match fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(DirState::Empty),
        Err(_) if dir.is_file() => {
            return Err(TrainError::Run {
                path: dir.to_path_buf(),
                reason: "is a file, not a directory".into(),
            })
        }
        Err(e) => return Err(io_error(dir, e)),
    };
    let mut names = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // The lock a run takes before it writes ([`RunLock`]) makes no run by itself.
        if name != files::LOCK {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Ok(DirState::Empty);
    }
    names.sort();
    let has_config = has_run_config(dir);
    let has_checkpoints = CheckpointDir::new(dir).holds_checkpoints()?;
    if has_config || has_checkpoints {
        return Ok(DirState::Run {
            has_config,
            has_checkpoints,
        });
    }
    names.truncate(5);
    Ok(DirState::Foreign(names))
}

/// Whether a run starting in `dir` as `mode` says resumes the run there: `false` for a missing or
/// empty directory, `true` for a run directory when resuming or extending.
///
/// # Errors
/// If the directory holds files that are not a run, or holds a run and `mode` is
/// [`StartMode::Fresh`](super::StartMode::Fresh).
pub(crate) fn holds_a_run_to_resume(
    dir: &Path,
    mode: super::StartMode,
) -> Result<bool, TrainError> {
    match (inspect(dir)?, mode) {
        (DirState::Empty, _) => Ok(false),
        (DirState::Foreign(names), _) => Err(TrainError::Run {
            path: dir.to_path_buf(),
            reason: format!(
                "is not empty and is not a run directory (it holds {}); choose a new or empty \
                 directory",
                names.join(", ")
            ),
        }),
        (DirState::Run { .. }, super::StartMode::Fresh) => Err(TrainError::Run {
            path: dir.to_path_buf(),
            reason: "already holds a run: resume it, or choose another run directory".into(),
        }),
        (DirState::Run { .. }, _) => Ok(true),
    }
}

/// Every leaf setting where `given` differs from `saved`, by path.
pub(crate) fn differences(saved: &serde_json::Value, given: &serde_json::Value) -> Vec<Difference> {
    fn walk(
        path: &str,
        a: Option<&serde_json::Value>,
        b: Option<&serde_json::Value>,
        out: &mut Vec<Difference>,
    ) {
        use serde_json::Value::Object;
        match (a, b) {
            (Some(Object(x)), Some(Object(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(&sub, x.get(k), y.get(k), out);
                }
            }
            (a, b) if a == b => {}
            (a, b) => {
                let show = |v: Option<&serde_json::Value>| {
                    v.map_or("absent".to_string(), |v| v.to_string())
                };
                out.push(Difference {
                    setting: path.to_string(),
                    run: show(a),
                    given: show(b),
                });
            }
        }
    }
    let mut out = Vec::new();
    walk("", Some(saved), Some(given), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A directory in the lock file's place is named as damage to the run (exit 2), not an
    /// input/output failure (it was `TrainError::Io`, exit 1); a lock file is taken as before.
    #[test]
    fn a_directory_in_the_locks_place_is_named() {
        let dir = std::env::temp_dir().join(format!("run-lock-dir-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join(files::LOCK)).unwrap();
        let e = RunLock::acquire(&dir).unwrap_err();
        assert!(matches!(e, TrainError::Run { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("is a directory where the run's lock file"),
            "{e}"
        );
        fs::remove_dir(dir.join(files::LOCK)).unwrap();
        assert!(RunLock::acquire(&dir).is_ok());
        let _ = fs::remove_dir_all(&dir);
    }

    /// Two copies of a folder at other paths have one fingerprint; a renamed file, a file of
    /// another size or another view size gives another.
    #[test]
    fn a_folder_fingerprint_follows_names_sizes_and_shape_not_the_root() {
        use crate::data::stream::testing::jpeg_folder;
        use crate::data::stream::ImageFiles;
        let a = jpeg_folder("fingerprint-a", 2, 3);
        let b = jpeg_folder("fingerprint-b", 2, 3);
        let of = |root: &Path, size: usize| {
            DataFingerprint::of_files(&ImageFiles::classes(root).unwrap(), root, [size, size, 3])
        };
        let first = of(&a, 32);
        assert_eq!(first, of(&b, 32));
        assert_eq!((first.examples, first.labelled), (6, true));
        assert_ne!(first, of(&a, 24));
        fs::rename(b.join("class1/002.jpg"), b.join("class1/009.jpg")).unwrap();
        let renamed = of(&b, 32);
        assert_ne!(first, renamed);
        let file = b.join("class1/001.jpg");
        let mut bytes = fs::read(&file).unwrap();
        bytes.push(0);
        fs::write(&file, bytes).unwrap();
        assert_ne!(renamed, of(&b, 32));
    }

    /// A record written before the hooks: the curation's settings move to the hook's, the kNN
    /// cadence goes, and a run without curation records no hook.
    #[test]
    fn records_before_the_hooks_read_as_today() {
        let old = |curation: serde_json::Value| {
            serde_json::json!({
                "format": RUN_FORMAT,
                "train": { "epochs": 6, "knn_every": 5, "curation": curation },
            })
        };
        // The loop's settings of today with the record's own.
        let mut train_today = serde_json::to_value(TrainConfig::new().with_epochs(6)).unwrap();
        let mut curated = old(serde_json::json!({ "warmup_epochs": 2, "max_retries": 3 }));
        migrate(&mut curated);
        assert_eq!(curated["train"], train_today);
        assert_eq!(
            curated["hooks"],
            serde_json::json!({ "curation": {
                "warmup_epochs": 2, "max_retries": 3, "threshold": "PaperMean"
            } })
        );
        // A record of the hooks' layout from before the threshold rule: the paper's rule, as
        // the configuration's default writes it; a recorded rule stays.
        let mut hooks = serde_json::json!({
            "format": RUN_FORMAT,
            "train": { "epochs": 6 },
            "hooks": { "curation": { "warmup_epochs": 2, "max_retries": 3 } },
        });
        migrate(&mut hooks);
        let today = serde_json::to_value(crate::curation::FrechetCurationConfig::new()).unwrap()
            ["threshold"]
            .clone();
        assert_eq!(hooks["hooks"]["curation"]["threshold"], today);
        let quantile = serde_json::json!({ "RecentQuantile": { "q": 0.9, "window": 50 } });
        hooks["hooks"]["curation"]["threshold"] = quantile.clone();
        migrate(&mut hooks);
        assert_eq!(hooks["hooks"]["curation"]["threshold"], quantile);
        let mut plain = old(serde_json::Value::Null);
        migrate(&mut plain);
        assert_eq!(plain["train"], train_today);
        assert_eq!(plain.get("hooks"), None);
        // A record from before mid-epoch checkpoints reads with none.
        train_today
            .as_object_mut()
            .unwrap()
            .remove("checkpoint_every_steps");
        let mut before = serde_json::json!({ "format": RUN_FORMAT, "train": train_today });
        migrate(&mut before);
        assert_eq!(before["train"]["checkpoint_every_steps"], 0);
        let train: TrainConfig = serde_json::from_value(before["train"].clone()).unwrap();
        assert_eq!((train.epochs, train.checkpoint_every_steps), (6, 0));
    }

    /// A supervised record of the layout before the one loop is refused by name, not read as
    /// another run.
    #[test]
    fn a_supervised_record_of_the_old_layout_is_refused_clearly() {
        let dir =
            std::env::temp_dir().join(format!("curriculum-ssl-old-sup-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(files::CONFIG);
        let old = json!({"format": SUPERVISED_RUN_FORMAT, "train": {"epochs": 2}, "run": null});
        fs::write(&path, old.to_string()).unwrap();
        let err = RunRecord::<serde_json::Value, serde_json::Value>::read_file(&path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("supervised run of an earlier layout")
                && err.contains("cannot be resumed"),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn differences_name_each_leaf_with_both_values() {
        let saved =
            json!({"train": {"lr": 0.2, "epochs": 10}, "run": {"settings": {"backbone": "Small"}}});
        let given = json!({"train": {"lr": 0.05, "epochs": 10}, "run": {"settings": {"backbone": "Resnet18", "x": 1}}});
        let d: Vec<String> = differences(&saved, &given)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            d,
            [
                "run.settings.backbone: run \"Small\", given \"Resnet18\"",
                "run.settings.x: run absent, given 1",
                "train.lr: run 0.2, given 0.05",
            ]
        );
        assert!(differences(&saved, &saved).is_empty());
    }
}
