//! `study`: an A/B comparison of recipes over seeds, with intervals (`recipe study FILE.toml`).
//!
//! ```text
//! recipe study studies/light_moco.toml [--dir DIR] [--rerun-changed] [--report-only] [--check]
//! ```
//!
//! Every (arm, seed) is an ordinary run in `DIR/runs/<arm>/seed-<seed>/` (by default `DIR` is
//! the file's path without `.toml`), checkpointed every epoch, then evaluated by `recipe eval`
//! (linear probe, few-label probe) and recorded in `DIR/runs/<arm>/seed-<seed>.json`. Runs go
//! seed by seed, every arm of a seed before the next seed, so that paired differences come as
//! early as possible. A finished run is skipped and an interrupted one resumed, so the same
//! command continues a study after Ctrl-C, a reboot, or on another day; an arm whose
//! definition changed since its runs is refused (or, with `--rerun-changed`, its runs are
//! moved to `DIR/replaced/` and run again), never mixed into one row. After every run the
//! report is written again: `study.md`, `study.csv` (a row per run), `summary.csv` (a row per
//! arm and metric) and the per-epoch curves as PNG (`report`).
//!
//! Each run is a child process of this binary (a fresh process per run: no state of one run
//! reaches the next; Ctrl-C reaches the child, which checkpoints and stops). The children end
//! with the study, however it ends: killed with SIGKILL, the study leaves no run training on
//! its own (on Linux each child gets SIGTERM when the study dies and stops after its step). A
//! run directory still held by another process (such a run finishing its step) is waited for
//! up to 30 s, saying so, before it is refused naming the process.
//!
//! The records: each is written as a new file beside it, flushed, and renamed over the old one.
//! A record that cannot be read (truncated, not a record) is named, `PATH: damaged or truncated
//! (…)`, with a warning, and written again: rebuilt from its run directory when the run is
//! complete (its `config.json`'s epochs, the last row of its `epochs.csv` and that epoch's
//! checkpoint) and its `recipe.toml` shows the arm's recipe, the seed and the arm's settings,
//! its numbers taken from `epochs.csv` and from the row of `evals.csv` that evaluated the last
//! checkpoint as the study does; otherwise the run resumes (its own resume refuses other
//! settings; a complete run trains nothing and is evaluated again) or starts afresh. A damaged
//! record whose run shows other settings is a changed run (refused; `--rerun-changed` moves it
//! aside). A run directory without a record is adopted only when it is a run whose own
//! `recipe.toml` shows the arm's recipe, this seed and exactly the settings the arm resolves to
//! now (the study's own run, its record lost: a run with those settings is that run); anything
//! else there is refused, naming the directory and why, never adopted or overwritten.
//!
//! The study's directory may not be a file, a training run's directory, or inside one (its
//! report and runs would mix with a run's files), nor a folder of other files without the
//! study's `runs/` (its report would be written over them): each is refused before anything
//! runs. While it runs, a study holds its directory's `.lock` (as a run holds its own): a second
//! `recipe study` of the directory is refused, naming the first's process.

mod file;
mod report;
mod stats;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};

pub use file::{Arm, StudyFile};

use super::RecipeEntry;
use crate::plots::Table;
use crate::run_files::RECIPE_TOML;
use crate::usage::usage;

/// Options of `recipe study`.
#[derive(Parser, Debug)]
#[command(
    no_binary_name = true,
    name = "recipe study",
    args_override_self = true
)]
struct StudyArgs {
    /// The study file (TOML: seeds, baseline, [options], [evaluation], [[arm]]s).
    file: PathBuf,
    /// The study's directory (default: the file's path without `.toml`); it may live anywhere.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Runs of an arm whose definition changed are moved to DIR/replaced/ and run again
    /// (without it the study refuses to start, naming the arm).
    #[arg(long)]
    rerun_changed: bool,
    /// Write the report from the runs that finished, and run nothing.
    #[arg(long)]
    report_only: bool,
    /// Check the file and every arm (each recipe checks its options and settings), and run
    /// nothing.
    #[arg(long)]
    check: bool,
}

/// What the study records of one run: the definition it ran under and, once finished and
/// evaluated, its numbers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// The arm's definition ([`StudyFile::fingerprint`]).
    pub definition: serde_json::Value,
    /// The seed.
    pub seed: u64,
    /// Its numbers, once finished (percent).
    pub result: Option<RunResult>,
    /// The builds of `recipe` that trained it, in order (a run resumed by another build has
    /// two); empty in the records of earlier versions and in records rebuilt from a run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binaries: Vec<Binary>,
}

/// A build of `recipe`: its version and the SHA-256 of its executable. Two runs with the same
/// arguments and settings give different numbers when the code between them changed in a way
/// no setting shows (a network's initialisation, a kernel): the report names the builds so
/// that such arms are not compared as if like for like.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Binary {
    /// The package's version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// The SHA-256 of the executable file, in hex.
    pub sha256: String,
}

impl Binary {
    /// This program's build, read once per process; `None` (with a warning) when its file
    /// cannot be read.
    pub fn this() -> Option<Binary> {
        static THIS: std::sync::OnceLock<Option<Binary>> = std::sync::OnceLock::new();
        THIS.get_or_init(|| {
            let hash = || -> std::io::Result<String> {
                use sha2::Digest;
                let mut file = std::fs::File::open(std::env::current_exe()?)?;
                let mut hasher = sha2::Sha256::new();
                std::io::copy(&mut file, &mut hasher)?;
                Ok(format!("{:x}", hasher.finalize()))
            };
            match hash() {
                Ok(sha256) => Some(Binary {
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    sha256,
                }),
                Err(e) => {
                    log::warn!(
                        "reading this program's file to record its build: {e}; the study's \
                         records will not name the build of their runs"
                    );
                    None
                }
            }
        })
        .clone()
    }
}

/// The numbers of a finished run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    /// Metric name → top-1 accuracy in percent.
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// Seconds of training, summed over the epochs (a resumed run's pauses not counted).
    pub train_seconds: f64,
    /// Images trained over `train_seconds` ([`Table::training_speed`]). Records of earlier versions
    /// hold the mean of the epochs' rates instead; the report derives both numbers from the
    /// run's epochs.csv again where it is there.
    pub images_per_s: f64,
}

/// The name of the reference rows of the raw pixels.
pub const RAW_PIXELS: &str = "raw-pixels";

/// The directory of the run of `arm` with `seed`.
pub fn run_dir(dir: &Path, arm: &str, seed: u64) -> PathBuf {
    dir.join("runs").join(arm).join(format!("seed-{seed}"))
}

/// The record of the run of `arm` with `seed`.
pub fn record_path(dir: &Path, arm: &str, seed: u64) -> PathBuf {
    dir.join("runs").join(arm).join(format!("seed-{seed}.json"))
}

/// What a run's record file holds.
#[derive(Debug)]
pub enum Stored {
    /// No record.
    Missing,
    /// A file that is not a record (truncated by a full disk or a crash of an earlier version,
    /// edited by hand): why it cannot be read.
    Damaged(String),
    /// The record.
    Record(RunRecord),
}

/// Reads a run's record: the record, none, or a damaged file (said by [`damaged`]).
///
/// # Errors
/// A record that cannot be read at all (permission denied), naming it.
pub fn load_record(path: &Path) -> Result<Stored> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(match serde_json::from_slice(&bytes) {
            Ok(record) => Stored::Record(record),
            Err(e) => Stored::Damaged(e.to_string()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Stored::Missing),
        Err(e) => Err(usage(format!("{}: cannot read: {e}", path.display()))),
    }
}

/// How a damaged record is named: its path, "damaged or truncated", and what the reader found.
pub fn damaged(path: &Path, why: &str) -> String {
    format!("{}: damaged or truncated ({why})", path.display())
}

/// Reads a run's record, if the run has one.
///
/// # Errors
/// A record that cannot be read, or is damaged ([`damaged`]: a usage error).
pub fn read_record(path: &Path) -> Result<Option<RunRecord>> {
    match load_record(path)? {
        Stored::Missing => Ok(None),
        Stored::Record(record) => Ok(Some(record)),
        Stored::Damaged(why) => Err(usage(damaged(path, &why))),
    }
}

/// Writes a record as a new file beside it (created new: never through a file or link already
/// there), flushed, then renamed over the old one: a reader sees the old record or the new, and
/// a stop in between leaves the old one whole (the temporary file, named by this process, is
/// replaced by the next writer of the same name).
fn write_record(path: &Path, record: &RunRecord) -> Result<()> {
    use std::io::Write;
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let bytes = serde_json::to_vec_pretty(record)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename reaches the disk with its directory.
        if let Ok(dir) = std::fs::File::open(parent) {
            let _ = dir.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

/// The command that continues the study, quoted for a shell: `recipe study FILE` (with its
/// `--dir` when one was given).
fn continue_command(args: &StudyArgs) -> String {
    let word = std::ffi::OsStr::new;
    let mut words = vec![word("recipe"), word("study"), args.file.as_os_str()];
    if let Some(dir) = &args.dir {
        words.extend([word("--dir"), dir.as_os_str()]);
    }
    crate::recipes::common::shell_command(words)
}

/// Runs the study.
pub fn run(args: &[String]) -> Result<()> {
    let args = StudyArgs::try_parse_from(args).map_err(crate::usage::help_or_error)?;
    let study = StudyFile::read(&args.file)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| args.file.with_extension(""));
    if dir == args.file {
        return Err(usage(format!(
            "{}: the study directory would be the file itself; give --dir",
            args.file.display()
        )));
    }
    check_study_dir(&dir, args.dir.is_some())?;
    let title = study.title.clone().unwrap_or_else(|| {
        args.file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    if args.report_only {
        // Nothing to report before a run, and a report alone would make the directory one
        // of other files (refused above) for the study's first run.
        if !dir.join("runs").is_dir() {
            return Err(usage(format!(
                "{}: no runs/ yet, so nothing to report: run `recipe study {}` first",
                dir.display(),
                args.file.display()
            )));
        }
        return report::write(&dir, &study, &title);
    }
    let resolved = check_arms(&study)?;
    let Reconciled { changed, repairs } = reconcile(&dir, &study, &resolved)?;
    // `--check` refuses them too: a committed study whose runs no longer resolve to their arms
    // (a recipe's default changed since) is caught without running anything.
    replace_changed(&args, &dir, &changed)?;
    if args.check {
        println!(
            "study {}: {} arms over {} seeds, every arm valid (--check: nothing ran)",
            args.file.display(),
            study.arms.len(),
            study.seeds.len()
        );
        return Ok(());
    }
    // One study process at a time in a directory (`.lock`, as a run's): a second one planned
    // the same runs and failed on the first's, exit 1 "already holds a run".
    let _lock = curriculum_ssl::train::RunLock::acquire(&dir).map_err(|e| {
        usage(format!(
            "another `recipe study` of this directory is running, or it cannot be locked: {e}"
        ))
    })?;
    for repair in &repairs {
        repair.apply(&dir, &study)?;
    }
    let stop = crate::signals::stop_flag();
    let plan: Vec<(&Arm, u64)> = study
        .seeds
        .iter()
        .flat_map(|&seed| study.arms.iter().map(move |arm| (arm, seed)))
        .collect();
    let total = plan.len();
    let mut unfinished = unfinished(&dir, &plan)?;
    let mut durations = Vec::new();
    for (index, (arm, seed)) in plan.iter().enumerate() {
        if !unfinished[index] {
            continue;
        }
        let remaining = unfinished[index..].iter().filter(|u| **u).count();
        let eta = if durations.is_empty() {
            "ETA after this run".to_string()
        } else {
            let mean = durations.iter().sum::<f64>() / durations.len() as f64;
            format!("ETA {}", hms(mean * remaining as f64))
        };
        println!(
            "study: run {} of {total}: arm `{}`, seed {seed} ({} left with it; {eta})",
            index + 1,
            arm.name,
            remaining
        );
        let started = Instant::now();
        let finished = run_one(&dir, &study, arm, *seed)?;
        if !finished || stop.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::signals::Interrupted(format!(
                "the study stopped during arm `{}`, seed {seed}; `{}` continues it",
                arm.name,
                continue_command(&args)
            ))
            .into());
        }
        unfinished[index] = false;
        durations.push(started.elapsed().as_secs_f64());
        if study.evaluation.raw_pixels && study.evaluation.any() {
            raw_pixels(&dir, &study, *seed)?;
        }
        report::write(&dir, &study, &title)?;
    }
    // The raw pixels' rows of seeds whose runs had all finished before (their record lost or
    // damaged since): measured again.
    if study.evaluation.raw_pixels && study.evaluation.any() {
        for &seed in &study.seeds {
            raw_pixels(&dir, &study, seed)?;
        }
    }
    report::write(&dir, &study, &title)?;
    println!(
        "study: every run finished; the report is {}",
        dir.join(report::REPORT).display()
    );
    Ok(())
}

/// Arms whose runs no longer resolve to them: refused (with `--check`, or without
/// `--rerun-changed`), or their runs moved to `replaced/` to be run again.
fn replace_changed(args: &StudyArgs, dir: &Path, changed: &[(String, u64, String)]) -> Result<()> {
    if changed.is_empty() {
        return Ok(());
    }
    if args.check || !args.rerun_changed {
        return Err(usage(format!(
            "{}: {} since their runs were made ({}); restore it, give the new definition \
             another arm name, or run again with --rerun-changed (their runs move to {})",
            args.file.display(),
            if changed.len() == 1 {
                "an arm changed"
            } else {
                "arms changed"
            },
            changed
                .iter()
                .map(|(arm, seed, why)| format!("arm `{arm}`, seed {seed}{why}"))
                .collect::<Vec<_>>()
                .join("; "),
            dir.join("replaced").display()
        )));
    }
    for (arm, seed, _) in changed {
        replace(dir, arm, *seed)?;
    }
    Ok(())
}

/// Whether each run of `plan` is still to run (no record of a result).
fn unfinished(dir: &Path, plan: &[(&Arm, u64)]) -> Result<Vec<bool>> {
    let mut unfinished = Vec::with_capacity(plan.len());
    for (arm, seed) in plan {
        let record = load_record(&record_path(dir, &arm.name, *seed))?;
        unfinished.push(!matches!(
            record,
            Stored::Record(RunRecord {
                result: Some(_),
                ..
            })
        ));
    }
    Ok(unfinished)
}

/// `seconds` as the run logs write a duration (`1h02m03s`).
fn hms(seconds: f64) -> String {
    curriculum_ssl::train::format_duration(std::time::Duration::from_secs_f64(seconds.max(0.0)))
}

/// Refuses a study directory that cannot hold a study: a file (or a path through one), a
/// training run's directory (the study would write its report and its runs among the run's
/// files), or a directory inside a run directory. `given`: named by `--dir` (else it is the
/// study file's path without `.toml`).
fn check_study_dir(dir: &Path, given: bool) -> Result<()> {
    let name = match given {
        true => format!("--dir {}", dir.display()),
        false => format!(
            "{} (the study's directory: the file's path without .toml; --dir chooses another)",
            dir.display()
        ),
    };
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    // The nearest part of the path that is there.
    let Some((nearest, metadata)) = absolute
        .ancestors()
        .find_map(|a| Some((a, std::fs::metadata(a).ok()?)))
    else {
        return Ok(());
    };
    if !metadata.is_dir() {
        // The file as the path given names it (`afile` of `--dir afile/sub`).
        let above = absolute.components().count() - nearest.components().count();
        let shown = dir
            .ancestors()
            .nth(above)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(nearest);
        return Err(usage(match above {
            0 => format!("{name}: not a directory"),
            _ => format!("{name}: {} is not a directory", shown.display()),
        }));
    }
    let real = std::fs::canonicalize(nearest).unwrap_or_else(|_| nearest.to_path_buf());
    for ancestor in real.ancestors() {
        use curriculum_ssl::train::{inspect, DirState};
        if let Ok(DirState::Run { .. }) = inspect(ancestor) {
            return Err(usage(match ancestor == real && nearest == absolute {
                true => format!(
                    "{name}: a training run's directory (it holds the config.json or the \
                     checkpoints/ of a run); a study writes its report and its own runs into \
                     its directory: choose a new or empty directory"
                ),
                false => format!(
                    "{name}: inside the training run directory {}; a study's directory must \
                     not lie in a run's: choose one outside it",
                    ancestor.display()
                ),
            }));
        }
    }
    // A folder of other files: the report (study.md, study.csv, summary.csv, the plots) would
    // be written over files of those names (a user's notes were, exit 0). A study's own folder
    // holds its runs/.
    if nearest == absolute && !dir.join("runs").is_dir() {
        let mut held: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                    // (The study's own lock, left by one stopped before its first run.)
                    .filter(|name| name != curriculum_ssl::train::files::LOCK)
                    .collect()
            })
            .unwrap_or_default();
        if !held.is_empty() {
            held.sort();
            let shown = crate::usage::some_of(&held, 4);
            return Err(usage(format!(
                "{name}: holds {shown} and no runs/, so it is not a study's directory; a study \
                 writes its report (study.md, study.csv, summary.csv, the plots) and its runs \
                 there, over files of those names: choose a new or empty directory"
            )));
        }
    }
    Ok(())
}

/// What [`reconcile`] found before anything runs.
struct Reconciled {
    /// The (arm, seed, why) whose run was made under another definition of the arm
    /// ([`StudyFile::fingerprint`]), or whose settings are not what the arm resolves to now.
    changed: Vec<(String, u64, String)>,
    /// Records to write again (damaged, or missing for a run that is the arm's own).
    repairs: Vec<Repair>,
}

/// A record written again before the runs.
struct Repair {
    arm: String,
    seed: u64,
    /// What was wrong, for the warning: the damaged record's reader error, or none (missing).
    damaged: Option<String>,
    /// Whether the run's own recipe.toml shows it is the arm's, with this seed and the arm's
    /// settings (else only its resume can tell: the run's settings are checked by it).
    verified: bool,
}

impl Repair {
    /// Writes the record: rebuilt from a complete, verified run directory (its epochs.csv and
    /// the evaluation in its evals.csv), else unfinished, so that the run resumes (a complete
    /// run resumes with nothing to train, then is evaluated) or starts afresh.
    fn apply(&self, dir: &Path, study: &StudyFile) -> Result<()> {
        let arm = study.arm(&self.arm).expect("an arm of the study");
        let path = record_path(dir, &arm.name, self.seed);
        let run = run_dir(dir, &arm.name, self.seed);
        let result = match self.verified {
            true => rebuilt_result(&run, study, arm)?,
            false => None,
        };
        let started = matches!(
            curriculum_ssl::train::inspect(&run)?,
            curriculum_ssl::train::DirState::Run { .. }
        );
        let what = match &self.damaged {
            Some(why) => damaged(&path, why),
            None => format!(
                "{}: missing, but {} is this arm's run by its own recipe.toml (recipe `{}`, \
                 seed {}, the arm's settings)",
                path.display(),
                run.display(),
                arm.recipe,
                self.seed
            ),
        };
        let then = match (&result, started) {
            (Some(_), _) => format!(
                "rebuilt from the complete run in {} (its epochs.csv and evals.csv)",
                run.display()
            ),
            (None, true) => format!(
                "the run in {} resumes (its resume checks its settings against the arm's) and \
                 is evaluated",
                run.display()
            ),
            (None, false) => "its run had not started: it starts afresh".to_string(),
        };
        log::warn!("{what}; {then}");
        write_record(
            &path,
            &RunRecord {
                definition: study.fingerprint(arm),
                seed: self.seed,
                result,
                binaries: Vec::new(),
            },
        )
    }
}

/// Whether the run in `run` trained every epoch it planned (its config.json's `train.epochs`,
/// the last row of its epochs.csv, and the checkpoint of that epoch): the planned epochs, if so.
fn complete(run: &Path) -> Option<usize> {
    use curriculum_ssl::train::files;
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join(files::CONFIG)).ok()?).ok()?;
    let epochs = usize::try_from(config.get("train")?.get("epochs")?.as_u64()?).ok()?;
    let last = *Table::read(&run.join(files::EPOCHS))
        .ok()?
        .column("epoch")
        .last()?;
    let meta = run
        .join(files::CHECKPOINTS)
        .join(format!("epoch-{epochs:04}"))
        .join(files::META);
    (last == Some(epochs as f64) && meta.is_file()).then_some(epochs)
}

/// The numbers of a complete run as [`run_one`] records them, from the run directory's own
/// files: `None` when the run is not complete, or (evaluated by the study) its evals.csv holds
/// no evaluation of its last checkpoint with the study's settings.
fn rebuilt_result(run: &Path, study: &StudyFile, arm: &Arm) -> Result<Option<RunResult>> {
    let Some(epochs) = complete(run) else {
        return Ok(None);
    };
    let mut metrics = final_metrics(run)?;
    if study.evaluation.any() && !supervised(&arm.recipe) {
        let Some(evaluated) = recorded_evaluation(run, study, epochs) else {
            return Ok(None);
        };
        metrics.extend(evaluated);
    }
    Ok(Some(run_result(run, metrics)?))
}

/// The probes' top-1 accuracies of the newest row of a run's evals.csv that evaluated its last
/// checkpoint (`epoch-EPOCHS`) as the study evaluates it (`recipe eval`'s SGD protocol, the
/// study's probe epochs and label fraction; the label seed is the run's seed).
fn recorded_evaluation(
    run: &Path,
    study: &StudyFile,
    epochs: usize,
) -> Option<BTreeMap<String, f64>> {
    let mut reader = csv::Reader::from_path(run.join(super::eval::EVALS)).ok()?;
    let header = reader.headers().ok()?.clone();
    let column = |name: &str| header.iter().position(|h| h == name);
    let (checkpoint, protocol, probe_epochs, fraction) = (
        column("checkpoint")?,
        column("protocol")?,
        column("probe_epochs")?,
        column("label_fraction")?,
    );
    let want_epochs = match study.evaluation.linear_probe {
        true => study.evaluation.probe_epochs.unwrap_or(100),
        false => 0,
    };
    let last_checkpoint = format!("epoch-{epochs:04}");
    let mut found = None;
    for row in reader.records() {
        let row = row.ok()?;
        let cell = |i: usize| row.get(i).unwrap_or("");
        let fraction_matches = match study.evaluation.label_fraction {
            None => cell(fraction).is_empty(),
            Some(f) => cell(fraction).parse::<f64>().ok() == Some(f),
        };
        if cell(checkpoint)
            .trim_end_matches('/')
            .ends_with(&last_checkpoint)
            && cell(protocol) == "sgd"
            && cell(probe_epochs).parse::<usize>().ok() == Some(want_epochs)
            && fraction_matches
        {
            let mut metrics = BTreeMap::new();
            for name in ["probe_top1", "few_label_top1"] {
                if let Some(value) = column(name).and_then(|i| cell(i).parse::<f64>().ok()) {
                    metrics.insert(name.to_string(), value);
                }
            }
            found = Some(metrics);
        }
    }
    found
}

/// Whether the run in `run` is the run of `arm` with `seed` by its own `recipe.toml`: the same
/// recipe and seed, and every setting what the arm resolves to now (`now`; a setting only one
/// side has is a difference here), the per-run settings aside.
enum Own {
    /// It is.
    Same,
    /// It is not: the differences.
    Differs(Vec<String>),
    /// It cannot be told: why.
    Unknown(String),
}

fn own_run(run: &Path, arm: &Arm, seed: u64, now: Option<&serde_json::Value>) -> Own {
    let path = run.join(RECIPE_TOML);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Own::Unknown(format!("it has no {RECIPE_TOML}"))
        }
        Err(e) => return Own::Unknown(format!("{} cannot be read: {e}", path.display())),
    };
    let ran = match toml::from_str::<toml::Table>(&text).map(serde_json::to_value) {
        Ok(Ok(ran)) => ran,
        Ok(Err(e)) => return Own::Unknown(format!("{} cannot be read: {e}", path.display())),
        Err(e) => {
            return Own::Unknown(format!(
                "{} cannot be read: {}",
                path.display(),
                e.to_string().trim()
            ))
        }
    };
    let mut differences = Vec::new();
    let recipe = ran.get("recipe");
    if recipe.and_then(|r| r.as_str()) != Some(arm.recipe.as_str()) {
        differences.push(format!(
            "recipe: run {}, now \"{}\"",
            recipe.map_or("absent".into(), ToString::to_string),
            arm.recipe
        ));
    }
    let ran_seed = ran.get("options").and_then(|o| o.get("seed"));
    let seed_of = |v: &serde_json::Value| v.as_u64().or_else(|| v.as_str()?.parse().ok());
    if ran_seed.and_then(seed_of) != Some(seed) {
        differences.push(format!(
            "options.seed: run {}, now {seed}",
            ran_seed.map_or("absent".into(), ToString::to_string)
        ));
    }
    match now {
        Some(now) => differences.extend(settings_differences(&ran, now, true)),
        None if differences.is_empty() => {
            return Own::Unknown(format!(
                "recipe `{}` does not say the settings it resolves to",
                arm.recipe
            ))
        }
        None => {}
    }
    match differences.is_empty() {
        true => Own::Same,
        false => Own::Differs(differences),
    }
}

/// Looks at every (arm, seed) before anything runs: the runs made under another definition of
/// their arm or with other settings than it resolves to now (`resolved`, from [`check_arms`]: a
/// default of the recipes changed since), and the records to write again.
///
/// A damaged record (truncated, not JSON, not a record) is named with a warning and written
/// again ([`Repair`]): rebuilt from its run when the run is complete and its `recipe.toml` shows
/// the arm's recipe, seed and settings; else unfinished, so that the run resumes (whose resume
/// refuses other settings) or starts afresh; a run whose `recipe.toml` shows other settings is a
/// changed run (refused, or moved aside by `--rerun-changed`).
///
/// A missing record beside a run directory: the directory is adopted as the arm's run only when
/// it is a run whose own `recipe.toml` shows the arm's recipe, this seed and exactly the
/// settings the arm resolves to now (the study's own run, its record lost); anything else is
/// refused, naming the directory and why, and never adopted or overwritten.
fn reconcile(
    dir: &Path,
    study: &StudyFile,
    resolved: &BTreeMap<String, serde_json::Value>,
) -> Result<Reconciled> {
    use curriculum_ssl::train::{inspect, DirState};
    let mut changed = Vec::new();
    let mut repairs = Vec::new();
    for arm in &study.arms {
        let definition = study.fingerprint(arm);
        let now = resolved.get(&arm.name);
        for &seed in &study.seeds {
            let path = record_path(dir, &arm.name, seed);
            let run = run_dir(dir, &arm.name, seed);
            match load_record(&path)? {
                Stored::Record(r) if r.definition != definition => {
                    changed.push((arm.name.clone(), seed, String::new()))
                }
                Stored::Record(_) => {
                    if let Some(why) = settings_changed(&run, now)? {
                        changed.push((arm.name.clone(), seed, why));
                    }
                }
                Stored::Damaged(why) => match inspect(&run)? {
                    DirState::Empty => repairs.push(Repair {
                        arm: arm.name.clone(),
                        seed,
                        damaged: Some(why),
                        verified: false,
                    }),
                    DirState::Foreign(names) => changed.push((
                        arm.name.clone(),
                        seed,
                        format!(
                            " (its record {}, and its directory holds no run: {})",
                            damaged(&path, &why),
                            names.join(", ")
                        ),
                    )),
                    DirState::Run { .. } => match own_run(&run, arm, seed, now) {
                        Own::Differs(differences) => changed.push((
                            arm.name.clone(),
                            seed,
                            format!(
                                " (its record {}, and its run's settings are not the arm's \
                                 now: {})",
                                damaged(&path, &why),
                                differences.join(", ")
                            ),
                        )),
                        own => repairs.push(Repair {
                            arm: arm.name.clone(),
                            seed,
                            damaged: Some(why),
                            verified: matches!(own, Own::Same),
                        }),
                    },
                },
                Stored::Missing => {
                    repairs.extend(adopt_unrecorded(&run, &path, arm, seed, now)?);
                }
            }
        }
    }
    Ok(Reconciled { changed, repairs })
}

/// Why a recorded run is a changed one: its `recipe.toml` shows settings other than those the
/// arm resolves to `now` (`None` when they agree, or when either is unknown).
fn settings_changed(run: &Path, now: Option<&serde_json::Value>) -> Result<Option<String>> {
    let Some(now) = now else {
        return Ok(None);
    };
    let toml_path = run.join(RECIPE_TOML);
    let Ok(text) = std::fs::read_to_string(&toml_path) else {
        return Ok(None);
    };
    let ran: toml::Table =
        toml::from_str(&text).with_context(|| format!("reading {}", toml_path.display()))?;
    let differences = settings_differences(&serde_json::to_value(ran)?, now, false);
    Ok((!differences.is_empty()).then(|| {
        format!(
            " (its run's settings are not the arm's now: {})",
            differences.join(", ")
        )
    }))
}

/// A run directory with no record (`path` missing): adopted as the arm's run (a repair of its
/// record) only when its own `recipe.toml` shows the arm's recipe, `seed` and exactly the
/// settings the arm resolves to `now`; nothing for an empty directory; anything else refused,
/// naming the directory and why.
fn adopt_unrecorded(
    run: &Path,
    path: &Path,
    arm: &Arm,
    seed: u64,
    now: Option<&serde_json::Value>,
) -> Result<Option<Repair>> {
    use curriculum_ssl::train::{inspect, DirState};
    match inspect(run)? {
        DirState::Empty => Ok(None),
        DirState::Foreign(names) => Err(usage(format!(
            "{}: a directory the study did not record (no {}), and not a run \
             (it holds {}); move it away",
            run.display(),
            path.display(),
            names.join(", ")
        ))),
        DirState::Run { .. } => match own_run(run, arm, seed, now) {
            Own::Same => Ok(Some(Repair {
                arm: arm.name.clone(),
                seed,
                damaged: None,
                verified: true,
            })),
            Own::Differs(differences) => Err(usage(format!(
                "{}: a run the study did not record (no {}), and not arm `{}`'s \
                 run with seed {seed} by its recipe.toml ({}); move it away",
                run.display(),
                path.display(),
                arm.name,
                differences.join(", ")
            ))),
            Own::Unknown(why) => Err(usage(format!(
                "{}: a run the study did not record (no {}), which cannot be \
                 told to be arm `{}`'s run with seed {seed} ({why}); move it away",
                run.display(),
                path.display(),
                arm.name
            ))),
        },
    }
}

/// Moves the run of `arm` with `seed` and its record to `DIR/replaced/<arm>/seed-<seed>-<n>`.
fn replace(dir: &Path, arm: &str, seed: u64) -> Result<()> {
    let base = dir.join("replaced").join(arm);
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let target = (1..)
        .map(|n| base.join(format!("seed-{seed}-{n}")))
        .find(|p| !p.exists())
        .expect("some number is free");
    std::fs::create_dir_all(&target)?;
    let run = run_dir(dir, arm, seed);
    if run.exists() {
        std::fs::rename(&run, target.join("run"))
            .with_context(|| format!("moving {}", run.display()))?;
    }
    let record = record_path(dir, arm, seed);
    std::fs::rename(&record, target.join("record.json"))
        .with_context(|| format!("moving {}", record.display()))?;
    println!(
        "study: arm `{arm}` changed: its run with seed {seed} moved to {}",
        target.display()
    );
    Ok(())
}

/// This binary, to run a recipe in a process of its own.
fn this_binary() -> Result<PathBuf> {
    let path =
        std::env::current_exe().context("finding this program to run the study's recipes")?;
    still_there(path)
}

/// `path` if this program's file is still there: a rebuild that replaces the binary while a
/// study runs leaves Linux's `/proc/self/exe` pointing at `PATH (deleted)`, and starting it would
/// fail with a bare "No such file or directory".
fn still_there(path: PathBuf) -> Result<PathBuf> {
    let deleted = path.to_string_lossy().ends_with(" (deleted)");
    if deleted || !path.is_file() {
        anyhow::bail!(
            "this program's file {} was replaced or removed while the study ran (a rebuild?); \
             the finished runs are kept: run the same `recipe study` command again (with the \
             new binary) to continue",
            path.display()
        );
    }
    Ok(path)
}

/// The settings a study sets per run, or that follow its seed: not part of what an arm
/// resolves to (`method.seed`: RotNet's angle draws, seeded by `--seed`; without it every
/// seed but the one `--check` resolves with was refused as changed).
const PER_RUN_SETTINGS: [&[&str]; 6] = [
    &["options", "seed"],
    &["options", "checkpoint_every"],
    &["options", "checkpoint_every_steps"],
    // The loader's threads change no number (the batches are the same for any count), and the
    // default depends on the machine's cores.
    &["options", "workers"],
    &["augmentation", "seed"],
    &["method", "seed"],
];

/// The settings in which a run's `recipe.toml` (`ran`) and what its arm resolves to now
/// (`now`) differ, as `path: run X, now Y`. A setting only one side has is not a difference
/// unless `strict`: runs recorded before a setting existed lack it, and it was at its default
/// there (a run adopted without its record must show every setting).
fn settings_differences(
    ran: &serde_json::Value,
    now: &serde_json::Value,
    strict: bool,
) -> Vec<String> {
    fn walk(
        ran: &serde_json::Value,
        now: &serde_json::Value,
        strict: bool,
        path: &mut Vec<String>,
        out: &mut Vec<String>,
    ) {
        match (ran, now) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                let keys: std::collections::BTreeSet<&String> = match strict {
                    true => a.keys().chain(b.keys()).collect(),
                    false => a.keys().filter(|k| b.contains_key(*k)).collect(),
                };
                for key in keys {
                    path.push(key.clone());
                    let per_run = PER_RUN_SETTINGS.iter().any(|p| {
                        p.len() == path.len() && p.iter().zip(path.iter()).all(|(x, y)| x == y)
                    });
                    if !per_run {
                        match (a.get(key), b.get(key)) {
                            (Some(x), Some(y)) => walk(x, y, strict, path, out),
                            (x, y) => out.push(format!(
                                "{}: run {}, now {}",
                                path.join("."),
                                x.map_or("absent".into(), ToString::to_string),
                                y.map_or("absent".into(), ToString::to_string)
                            )),
                        }
                    }
                    path.pop();
                }
            }
            _ if ran != now => out.push(format!("{}: run {ran}, now {now}", path.join("."))),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(ran, now, strict, &mut Vec::new(), &mut out);
    out
}

/// Asks each arm's recipe to check its options and settings (`--check`) before anything runs,
/// and returns the settings each arm resolves to (the self-supervised recipes print them;
/// arms of recipes that do not are absent).
fn check_arms(study: &StudyFile) -> Result<BTreeMap<String, serde_json::Value>> {
    let mut resolved = BTreeMap::new();
    for arm in &study.arms {
        let mut args = study.arm_args(arm);
        args.push("--check".into());
        args.push("--print-settings".into());
        let output = crate::signals::ends_with_this_process(&mut Command::new(this_binary()?))
            .args(&args)
            .env("RUST_LOG", "error")
            .output()
            .context("starting a recipe to check an arm")?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let message = stderr
                .lines()
                .filter_map(|l| l.strip_prefix("error: "))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(usage(format!("arm `{}`: {message}", arm.name)));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        if let Some(line) = stdout.lines().find(|l| l.starts_with('{')) {
            let settings = serde_json::from_str(line).with_context(|| {
                format!("arm `{}`: reading the settings it resolves to", arm.name)
            })?;
            resolved.insert(arm.name.clone(), settings);
        }
    }
    Ok(resolved)
}

/// Whether `recipe` is one of the supervised recipes (which measure their own test accuracy;
/// `recipe eval` does not read their runs).
fn supervised(recipe: &str) -> bool {
    super::spl_advise::RECIPES.iter().any(|r| r.name == recipe)
}

/// Trains (or resumes) the run of `arm` with `seed`, evaluates it and records its numbers;
/// `false` when the run was interrupted (Ctrl-C or SIGTERM: exit code 130), recording nothing.
fn run_one(dir: &Path, study: &StudyFile, arm: &Arm, seed: u64) -> Result<bool> {
    let run = run_dir(dir, &arm.name, seed);
    let path = record_path(dir, &arm.name, seed);
    wait_for_the_run(&run)?;
    let definition = study.fingerprint(arm);
    // A run resumed here keeps the builds that trained it before.
    let mut binaries = match load_record(&path)? {
        Stored::Record(r) if r.definition == definition => r.binaries,
        _ => Vec::new(),
    };
    if let Some(this) = Binary::this() {
        if binaries.last() != Some(&this) {
            binaries.push(this);
        }
    }
    let mut record = RunRecord {
        definition,
        seed,
        result: None,
        binaries,
    };
    write_record(&path, &record)?;
    let mut args = study.arm_args(arm);
    args.extend([
        "--run-dir".to_string(),
        run.display().to_string(),
        "--seed".to_string(),
        seed.to_string(),
        "--checkpoint-every".to_string(),
        "1".to_string(),
    ]);
    if matches!(
        curriculum_ssl::train::inspect(&run)?,
        curriculum_ssl::train::DirState::Run { .. }
    ) {
        args.push("--resume".into());
    }
    let status = crate::signals::status_passing_signals(Command::new(this_binary()?).args(&args))
        .context("starting the run's recipe")?;
    if !status.success() {
        if status.code() == Some(i32::from(crate::signals::INTERRUPTED)) {
            return Ok(false);
        }
        anyhow::bail!(
            "arm `{}`, seed {seed}: `recipe {}` failed (exit code {}; its message is above); \
             the study continues from here when run again",
            arm.name,
            crate::recipes::common::shell_command(&args),
            status.code().map_or("none".into(), |c| c.to_string())
        );
    }
    let mut metrics = final_metrics(&run)?;
    if study.evaluation.any() && !supervised(&arm.recipe) {
        let row = evaluate(&run, study, seed, false)?;
        metrics.extend(row);
    }
    record.result = Some(run_result(&run, metrics)?);
    write_record(&path, &record)?;
    Ok(true)
}

/// A finished run's numbers: `metrics`, and its time and speed from its epochs.csv.
fn run_result(run: &Path, metrics: BTreeMap<String, f64>) -> Result<RunResult> {
    let (train_seconds, images_per_s) = Table::read(&run.join("epochs.csv"))?.training_speed();
    Ok(RunResult {
        metrics,
        train_seconds,
        images_per_s,
    })
}

/// How long a study waits for a run directory that another process holds before it refuses:
/// a run whose study was killed gets SIGTERM and stops after its step
/// ([`crate::signals::ends_with_this_process`]), which a large model on a slow machine may take
/// this long to end.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits (up to [`LOCK_WAIT`], saying so) while another process holds the run directory `run`
/// (its `.lock`): a run still finishing its step after its study was killed. Holding on past
/// the wait is refused, naming the process.
fn wait_for_the_run(run: &Path) -> Result<()> {
    use curriculum_ssl::train::files;
    let path = run.join(files::LOCK);
    // No lock file: no process trains there. One that cannot be opened: the run's own lock
    // says why.
    let Ok(file) = std::fs::File::open(&path) else {
        return Ok(());
    };
    let stop = crate::signals::stop_flag();
    let started = Instant::now();
    let mut said = false;
    loop {
        match file.try_lock() {
            // Released at once (dropping the file): the run takes it.
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            // A file system without locks: the run warns about it itself.
            Err(std::fs::TryLockError::Error(_)) => return Ok(()),
        }
        let holder = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        let who = holder.map_or("another process".to_string(), |p| format!("process {p}"));
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::signals::Interrupted(format!(
                "the study stopped while waiting for {who} to release {}; the same `recipe \
                 study` command continues it",
                run.display()
            ))
            .into());
        }
        if started.elapsed() >= LOCK_WAIT {
            return Err(usage(format!(
                "{}: is in use by {who} (a training, resume or extension of this run; a run of \
                 this study still going after its study ended?), still after {} s; stop it{} or \
                 wait for it to end, then run the study again",
                run.display(),
                LOCK_WAIT.as_secs(),
                holder.map_or(String::new(), |p| format!(
                    " (`kill {p}` stops a run after its step)"
                ))
            )));
        }
        if !said {
            println!(
                "study: {} is in use by {who} (a run still finishing its step?); waiting up to \
                 {} s for it to end",
                run.display(),
                LOCK_WAIT.as_secs()
            );
            use std::io::Write;
            let _ = std::io::stdout().flush();
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The last row's value of each column of the CSV file `path` that has one (a number).
fn last_row(path: &Path) -> Result<Vec<(String, f64)>> {
    let table = Table::read(path)?;
    Ok(table
        .names()
        .iter()
        .filter_map(|n| Some((n.clone(), table.column(n).last().copied().flatten()?)))
        .collect())
}

/// The top-1 accuracies of a run's last epoch (`epochs.csv`'s `*_top1` columns), in percent.
fn final_metrics(run: &Path) -> Result<std::collections::BTreeMap<String, f64>> {
    Ok(last_row(&run.join("epochs.csv"))?
        .into_iter()
        .filter(|(n, _)| n.ends_with("_top1"))
        .map(|(n, v)| (n, 100.0 * v))
        .collect())
}

/// Runs `recipe eval` on a run (on the raw pixels with `raw`) and returns its row's top-1
/// accuracies under the study's metric names: the probes' and, for the raw pixels, the kNN's.
fn evaluate(
    run: &Path,
    study: &StudyFile,
    seed: u64,
    raw: bool,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let mut args = vec![
        "eval".to_string(),
        "--run-dir".to_string(),
        run.display().to_string(),
    ];
    args.extend(study.evaluation.eval_args(seed));
    if raw {
        args.push("--raw-pixels".into());
    }
    println!(
        "study: recipe {}",
        crate::recipes::common::shell_command(&args)
    );
    let output = crate::signals::output_passing_signals(Command::new(this_binary()?).args(&args))
        .context("starting `recipe eval`")?;
    if !output.status.success() {
        if crate::signals::stop_flag().load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::signals::Interrupted(format!(
                "the study stopped during `recipe {}`; `recipe study` continues it",
                crate::recipes::common::shell_command(&args)
            ))
            .into());
        }
        anyhow::bail!(
            "`recipe {}` failed: {}",
            crate::recipes::common::shell_command(&args),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let mut metrics = std::collections::BTreeMap::new();
    for (name, value) in last_row(&run.join(super::eval::EVALS))? {
        // The kNN columns `knn_k{k}_top1` are named as epochs.csv names them, `knn{k}_top1`.
        let knn = name
            .strip_prefix("knn_k")
            .filter(|rest| rest.ends_with("_top1"));
        let name = match (name.as_str(), knn) {
            ("probe_top1" | "few_label_top1", _) => name.clone(),
            (_, Some(rest)) if raw => format!("knn{rest}"),
            _ => continue,
        };
        metrics.insert(name, value);
    }
    Ok(metrics)
}

/// The study's `[options]` that choose the data (`data_dir` or `data-dir`), by their
/// underscored names: what the raw pixels' numbers depend on besides the evaluation.
const DATA_OPTIONS: [&str; 7] = [
    "dataset",
    "data_dir",
    "image_size",
    "classes",
    "val_labels",
    "knn_data",
    "stream",
];

/// The raw pixels' reference numbers for `seed` (the few-label subset depends on it), measured
/// once on the data of the seed's first finished run, and again when the study's evaluation or
/// its options that choose the data ([`DATA_OPTIONS`]) change: a study whose `data_dir`
/// changed kept the rows measured on the old data beside its arms' new runs. A record written
/// before the data options were part of it (its definition the evaluation's alone) stands while
/// the evaluation is the same: measuring it again needs a run's checkpoint, which a committed
/// study does not hold.
fn raw_pixels(dir: &Path, study: &StudyFile, seed: u64) -> Result<()> {
    let path = record_path(dir, RAW_PIXELS, seed);
    let data: serde_json::Map<String, serde_json::Value> = study
        .options
        .iter()
        .filter(|(k, _)| DATA_OPTIONS.contains(&k.replace('-', "_").as_str()))
        .map(|(k, v)| (k.replace('-', "_"), serde_json::to_value(v).unwrap_or_default()))
        .collect();
    let definition = serde_json::json!({ "evaluation": study.evaluation, "data": data });
    let legacy = serde_json::json!({ "evaluation": study.evaluation });
    let stored = load_record(&path)?;
    if matches!(&stored, Stored::Record(r)
        if r.result.is_some() && (r.definition == definition || r.definition == legacy))
    {
        return Ok(());
    }
    let Some(arm) = study.arms.iter().find(|a| {
        !supervised(&a.recipe)
            && read_record(&record_path(dir, &a.name, seed))
                .ok()
                .flatten()
                .is_some_and(|r| r.result.is_some())
    }) else {
        return Ok(());
    };
    if let Stored::Damaged(why) = stored {
        log::warn!("{}; measured again", damaged(&path, &why));
    }
    let metrics = evaluate(&run_dir(dir, &arm.name, seed), study, seed, true)?;
    write_record(
        &path,
        &RunRecord {
            definition,
            seed,
            result: Some(RunResult {
                metrics,
                train_seconds: 0.0,
                images_per_s: 0.0,
            }),
            binaries: Vec::new(),
        },
    )
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "study",
    summary: "arms (recipes + settings) over seeds, resumable, with intervals and paired tests vs a baseline (FILE.toml)",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// A replaced binary (Linux names it `PATH (deleted)`) or a missing one is refused with the
    /// way to continue; a binary that is there (this test's own) is accepted as it is.
    #[test]
    fn a_replaced_binary_is_named_with_the_way_to_continue() {
        let here = std::env::current_exe().unwrap();
        assert_eq!(still_there(here.clone()).unwrap(), here);
        let deleted = PathBuf::from(format!("{} (deleted)", here.display()));
        let err = still_there(deleted).unwrap_err().to_string();
        assert!(
            err.contains("replaced or removed") && err.contains("run the same `recipe study`"),
            "{err}"
        );
        assert!(still_there(here.with_file_name("no-such-recipe-binary")).is_err());
    }

    /// What follows a run's seed is no difference between a run and its arm (RotNet's
    /// `method.seed` was: `recipe study studies/rotation_curriculum.toml` refused seeds 1 and
    /// 2 as changed); any other setting is, named with both values.
    #[test]
    fn the_settings_that_follow_the_seed_are_no_difference() {
        let now = serde_json::json!({
            "options": {"seed": 0, "checkpoint_every": 0, "epochs": 8},
            "method": {"seed": 0, "angles": 4},
            "augmentation": {"seed": 0},
        });
        let mut ran = now.clone();
        for section in ["options", "method", "augmentation"] {
            ran[section]["seed"] = 2.into();
        }
        ran["options"]["checkpoint_every"] = 1.into();
        assert!(settings_differences(&ran, &now, true).is_empty());
        ran["method"]["angles"] = 2.into();
        assert_eq!(
            settings_differences(&ran, &now, true),
            ["method.angles: run 2, now 4"]
        );
    }
}
