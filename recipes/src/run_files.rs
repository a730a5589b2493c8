//! The files of a run directory the recipe binary reads and writes besides the library's own
//! (`config.json`, the logs and `checkpoints/`, named in `curriculum_ssl::train::files`):
//! one place for the names that the run, its report, its plots, `compare` and `export` share.

use std::path::{Path, PathBuf};

use anyhow::Result;

use curriculum_ssl::eval::KnnResult;
use curriculum_ssl::train::describe_io;

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

/// A hidden temporary file beside `path`, named by this process and keeping its extension
/// (`.loss.1234.tmp.png`: the image encoder picks its format by the extension).
pub(crate) fn temporary_beside(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let extension = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!(".{stem}.{}.tmp{extension}", std::process::id()))
}

/// Writes the file `target` by `write`, which is given a new, empty file beside it to write
/// (for writers that take a path: an image or array encoder; bytes go through the library's
/// [`curriculum_ssl::train::write_atomic`])
/// ([`temporary_beside`], created here, never an existing file or link); the file is synced and
/// renamed over `target`. A rename replaces a link at `target` instead of writing through it,
/// and a write that fails (a full disk) leaves the previous file whole and no temporary file.
///
/// # Errors
/// What `write` returns, or the creation, sync or rename of the file.
pub(crate) fn write_replacing(
    target: &Path,
    write: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let tmp = temporary_beside(target);
    // A file of that name is a leftover of an earlier process of this id (a link is removed,
    // not followed).
    let _ = std::fs::remove_file(&tmp);
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| anyhow::anyhow!("writing {}: {}", target.display(), describe_io(&e)))
        .and_then(|_| write(&tmp))
        .and_then(|()| {
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .and_then(|()| std::fs::rename(&tmp, target))
                .map_err(|e| anyhow::anyhow!("writing {}: {}", target.display(), describe_io(&e)))
        });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Whether `dir` is a run directory, as the library tells one (its `config.json`, or checkpoints
/// in `checkpoints/`).
pub(crate) fn is_run_dir(dir: &Path) -> bool {
    (dir.join("config.json").is_file() || dir.join("checkpoints").is_dir())
        && matches!(
            curriculum_ssl::train::inspect(dir),
            Ok(curriculum_ssl::train::DirState::Run { .. })
        )
}

/// The paths that writing `path` would reach: the path with its folder resolved (every link
/// above it followed), then, while that is a link, where the link leads (a dangling link too).
fn resolutions(path: &Path) -> Vec<PathBuf> {
    let mut hops = Vec::new();
    let mut current = path.to_path_buf();
    // The system's own bound on links followed in one path.
    for _ in 0..40 {
        let Some(name) = current.file_name().map(|n| n.to_os_string()) else {
            break;
        };
        let parent = match current.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let Ok(parent) = parent.canonicalize() else {
            break;
        };
        let full = parent.join(name);
        hops.push(full.clone());
        match std::fs::read_link(&full) {
            Ok(target) => current = parent.join(target),
            Err(_) => break,
        }
    }
    hops
}

/// The run directory and its file (or folder) that writing `path` would write over: `path`,
/// or where a link at `path` leads, inside the files a run writes ([`RUN_FILES`]) of any run
/// directory (one of `runs`, or any folder above the path that is a run), or a run directory
/// Returns the run directory, the run's file, and where a link at `path` led (`None`: the path
/// itself, its folder resolved, is the run's).
pub(crate) fn run_file_at(
    path: &Path,
    runs: &[&Path],
) -> Option<(PathBuf, String, Option<PathBuf>)> {
    let runs: Vec<PathBuf> = runs.iter().filter_map(|r| r.canonicalize().ok()).collect();
    for (i, hop) in resolutions(path).into_iter().enumerate() {
        for ancestor in hop.ancestors().skip(1) {
            let Ok(inside) = hop.strip_prefix(ancestor) else {
                continue;
            };
            let first = inside
                .components()
                .next()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default();
            if RUN_FILES.contains(&first.as_str())
                && (runs.iter().any(|r| r == ancestor) || is_run_dir(ancestor))
            {
                let link = (i > 0).then(|| hop.clone());
                return Some((ancestor.to_path_buf(), first, link));
            }
        }
    }
    None
}

/// Refuses the output `path` (`label` names it in the message: `--out X`) when writing it would
/// write over a run's own files ([`run_file_at`]), naming the file and the run directory.
pub(crate) fn check_not_a_runs_file(path: &Path, label: &str, runs: &[&Path]) -> Result<()> {
    let Some((run, file, link)) = run_file_at(path, runs) else {
        return Ok(());
    };
    let how = link.map_or(String::new(), |to| format!("a link to {}, ", to.display()));
    Err(crate::usage::usage(format!(
        "{label}: {how}the run's own {file} in the run directory {} (its record, logs or \
         checkpoints would be written over); choose another --out",
        run.display()
    )))
}

/// Refuses the output folder `dir` (`label` names it) when it is a run directory (one of
/// `runs`, or any run) or inside a run's own files ([`check_not_a_runs_file`]): what is written
/// there would mix with, or write over, the run's files.
pub(crate) fn check_output_folder(dir: &Path, label: &str, runs: &[&Path]) -> Result<()> {
    check_not_a_runs_file(dir, label, runs)?;
    let given: Vec<PathBuf> = runs.iter().filter_map(|r| r.canonicalize().ok()).collect();
    let mut places = resolutions(dir);
    places.extend(dir.canonicalize().ok());
    if let Some(run) = places
        .into_iter()
        .find(|p| given.contains(p) || is_run_dir(p))
    {
        return Err(crate::usage::usage(format!(
            "{label}: the run directory {} (the files written would go among the run's own); \
             choose another --out",
            run.display()
        )));
    }
    Ok(())
}

/// Whether a file can be created in `dir` (said before anything is computed): a new file is
/// made and removed there. Where `dir` does not exist yet, its nearest existing folder above
/// is tried, where it would be made; a file in the way is left to the caller. Returns the
/// folder that cannot be written and why.
pub(crate) fn check_can_write_in(dir: &Path) -> std::result::Result<(), (PathBuf, String)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static PROBES: AtomicUsize = AtomicUsize::new(0);
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let place = dir
        .ancestors()
        .map(|a| {
            if a.as_os_str().is_empty() {
                Path::new(".")
            } else {
                a
            }
        })
        .find(|a| std::fs::symlink_metadata(a).is_ok())
        .unwrap_or(Path::new("."));
    if !place.is_dir() {
        // A file where the folder should be: the caller's (or the library's) to say.
        return Ok(());
    }
    // Named by the process and a count: the replicas of one process probe at once.
    let probe = place.join(format!(
        ".write-probe.{}.{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    ));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err((place.to_path_buf(), describe_io(&e))),
    }
}

/// Refuses a training run's `--run-dir` that cannot be written (a read-only run directory, or
/// the folder it would be made in): the user's to fix, said before anything is trained (it was
/// exit 1 from the directory's creation or its lock).
pub(crate) fn check_run_dir_writable(run_dir: &Path) -> Result<()> {
    check_can_write_in(run_dir).map_err(|(dir, why)| {
        crate::usage::usage(format!(
            "--run-dir {}: cannot write in {}: {why}",
            run_dir.display(),
            dir.display()
        ))
    })
}
