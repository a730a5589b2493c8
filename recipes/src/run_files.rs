//! The files of a run directory the recipe binary reads and writes besides the library's own
//! (`config.json`, the logs and `checkpoints/`, named in `curriculum_ssl::train::checkpoint::files`):
//! one place for the names that the run, its report, its plots, `compare` and `export` share.

use std::path::Path;

use curriculum_ssl::eval::KnnResult;

/// The recipe's settings as the user can edit and give back (`--config`), written by every start
/// or resume of a run.
pub const RECIPE_TOML: &str = "recipe.toml";

/// The file holding the kNN accuracies of the backbone at initialisation.
pub const KNN_AT_INIT: &str = "knn_at_init.json";

/// The file holding the kNN accuracies of the raw pixels (the baseline a representation has to
/// beat).
pub const KNN_RAW_PIXELS: &str = "knn_raw_pixels.json";

/// The kNN results a run directory keeps in `file` ([`KNN_AT_INIT`], [`KNN_RAW_PIXELS`]); none
/// when the file is absent or unreadable (runs recorded before it, runs without labels).
pub fn read_knn_results(file: &Path) -> Vec<KnnResult> {
    std::fs::read(file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The files and folders of a run directory its runs write (an output written over one would
/// destroy the run's record or logs).
pub const RUN_FILES: &[&str] = &[
    "config.json",
    RECIPE_TOML,
    "steps.csv",
    "epochs.csv",
    "evals.csv",
    "summary.md",
    KNN_AT_INIT,
    KNN_RAW_PIXELS,
    ".lock",
    "checkpoints",
    "tensorboard",
    "plots",
];
