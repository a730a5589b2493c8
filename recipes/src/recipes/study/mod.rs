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
//! reaches the next; Ctrl-C reaches the child, which checkpoints and stops).

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
#[command(no_binary_name = true, name = "recipe study", args_override_self = true)]
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
}

/// The numbers of a finished run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    /// Metric name → top-1 accuracy in percent.
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// Seconds of training, summed over the epochs (a resumed run's pauses not counted).
    pub train_seconds: f64,
    /// Images per second, averaged over the epochs.
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

/// Reads a run's record, if the run has one.
///
/// # Errors
/// A record that cannot be read or parsed.
pub fn read_record(path: &Path) -> Result<Option<RunRecord>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_record(path: &Path, record: &RunRecord) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    curriculum_ssl::train::write_atomic(path, &serde_json::to_vec_pretty(record)?)?;
    Ok(())
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
    let title = study.title.clone().unwrap_or_else(|| {
        args.file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    if args.report_only {
        return report::write(&dir, &study, &title);
    }
    let resolved = check_arms(&study)?;
    let changed = changed_runs(&dir, &study, &resolved)?;
    if !changed.is_empty() && !args.check {
        if !args.rerun_changed {
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
        for (arm, seed, _) in &changed {
            replace(&dir, arm, *seed)?;
        }
    }
    if args.check {
        println!(
            "study {}: {} arms over {} seeds, every arm valid (--check: nothing ran)",
            args.file.display(),
            study.arms.len(),
            study.seeds.len()
        );
        return Ok(());
    }
    let stop = crate::signals::stop_flag();
    let plan: Vec<(&Arm, u64)> = study
        .seeds
        .iter()
        .flat_map(|&seed| study.arms.iter().map(move |arm| (arm, seed)))
        .collect();
    let total = plan.len();
    let mut unfinished = Vec::with_capacity(total);
    for (arm, seed) in &plan {
        let record = read_record(&record_path(&dir, &arm.name, *seed))?;
        unfinished.push(record.is_none_or(|r| r.result.is_none()));
    }
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
                "the study stopped during arm `{}`, seed {seed}; `recipe study {}` continues it",
                arm.name,
                args.file.display()
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
    report::write(&dir, &study, &title)?;
    println!(
        "study: every run finished; the report is {}",
        dir.join(report::REPORT).display()
    );
    Ok(())
}

/// `seconds` as the run logs write a duration (`1h02m03s`).
fn hms(seconds: f64) -> String {
    curriculum_ssl::train::run_log::format_duration(std::time::Duration::from_secs_f64(
        seconds.max(0.0),
    ))
}

/// The (arm, seed, why) whose record was made under another definition of the arm, or whose
/// run resolved to settings other than the arm's now (`resolved`, from [`check_arms`]: a
/// default of the recipes changed since), or whose directory holds something the study did
/// not make.
fn changed_runs(
    dir: &Path,
    study: &StudyFile,
    resolved: &BTreeMap<String, serde_json::Value>,
) -> Result<Vec<(String, u64, String)>> {
    let mut changed = Vec::new();
    for arm in &study.arms {
        let definition = study.fingerprint(arm);
        for &seed in &study.seeds {
            match read_record(&record_path(dir, &arm.name, seed))? {
                Some(r) if r.definition != definition => {
                    changed.push((arm.name.clone(), seed, String::new()))
                }
                Some(_) => {
                    let Some(now) = resolved.get(&arm.name) else {
                        continue;
                    };
                    let toml_path = run_dir(dir, &arm.name, seed).join(RECIPE_TOML);
                    let Ok(text) = std::fs::read_to_string(&toml_path) else {
                        continue;
                    };
                    let ran: toml::Table = toml::from_str(&text)
                        .with_context(|| format!("reading {}", toml_path.display()))?;
                    let differences = settings_differences(&serde_json::to_value(ran)?, now);
                    if !differences.is_empty() {
                        changed.push((
                            arm.name.clone(),
                            seed,
                            format!(
                                " (its run's settings are not the arm's now: {})",
                                differences.join(", ")
                            ),
                        ));
                    }
                }
                None => {
                    let run = run_dir(dir, &arm.name, seed);
                    if run.exists() {
                        return Err(usage(format!(
                            "{}: a directory the study did not record (no {}); move it away",
                            run.display(),
                            record_path(dir, &arm.name, seed).display()
                        )));
                    }
                }
            }
        }
    }
    Ok(changed)
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
/// resolves to.
const PER_RUN_SETTINGS: [&[&str]; 3] = [
    &["options", "seed"],
    &["options", "checkpoint_every"],
    &["augmentation", "seed"],
];

/// The settings in which a run's `recipe.toml` (`ran`) and what its arm resolves to now
/// (`now`) differ, as `path: run X, now Y`. A setting only one side has is not a difference:
/// runs recorded before a setting existed lack it, and it was at its default there.
fn settings_differences(ran: &serde_json::Value, now: &serde_json::Value) -> Vec<String> {
    fn walk(ran: &serde_json::Value, now: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<String>) {
        match (ran, now) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (key, value) in a {
                    let Some(other) = b.get(key) else { continue };
                    path.push(key.clone());
                    let per_run = PER_RUN_SETTINGS
                        .iter()
                        .any(|p| p.len() == path.len() && p.iter().zip(path.iter()).all(|(x, y)| x == y));
                    if !per_run {
                        walk(value, other, path, out);
                    }
                    path.pop();
                }
            }
            _ if ran != now => out.push(format!("{}: run {ran}, now {now}", path.join("."))),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(ran, now, &mut Vec::new(), &mut out);
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
        let output = Command::new(this_binary()?)
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
            let settings = serde_json::from_str(line)
                .with_context(|| format!("arm `{}`: reading the settings it resolves to", arm.name))?;
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
    let mut record = RunRecord {
        definition: study.fingerprint(arm),
        seed,
        result: None,
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
        curriculum_ssl::train::run_dir::inspect(&run)?,
        curriculum_ssl::train::run_dir::DirState::Run { .. }
    ) {
        args.push("--resume".into());
    }
    let status =
        crate::signals::status_passing_signals(Command::new(this_binary()?).args(&args))
            .context("starting the run's recipe")?;
    if !status.success() {
        if status.code() == Some(i32::from(crate::signals::INTERRUPTED)) {
            return Ok(false);
        }
        anyhow::bail!(
            "arm `{}`, seed {seed}: `recipe {}` failed (exit code {}; its message is above); \
             the study continues from here when run again",
            arm.name,
            args.join(" "),
            status.code().map_or("none".into(), |c| c.to_string())
        );
    }
    let mut metrics = final_metrics(&run)?;
    if study.evaluation.any() && !supervised(&arm.recipe) {
        let row = evaluate(&run, study, seed, false)?;
        metrics.extend(row);
    }
    let epochs = Table::read(&run.join("epochs.csv"))?;
    let speeds = epochs.values("images_per_s");
    record.result = Some(RunResult {
        metrics,
        train_seconds: epochs.values("seconds").iter().sum(),
        images_per_s: speeds.iter().sum::<f64>() / speeds.len().max(1) as f64,
    });
    write_record(&path, &record)?;
    Ok(true)
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
    println!("study: recipe {}", args.join(" "));
    let output = crate::signals::output_passing_signals(Command::new(this_binary()?).args(&args))
        .context("starting `recipe eval`")?;
    if !output.status.success() {
        if crate::signals::stop_flag().load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::signals::Interrupted(format!(
                "the study stopped during `recipe {}`; `recipe study` continues it",
                args.join(" ")
            ))
            .into());
        }
        anyhow::bail!(
            "`recipe {}` failed: {}",
            args.join(" "),
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

/// The raw pixels' reference numbers for `seed` (the few-label subset depends on it), measured
/// once on the data of the seed's first finished run.
fn raw_pixels(dir: &Path, study: &StudyFile, seed: u64) -> Result<()> {
    let path = record_path(dir, RAW_PIXELS, seed);
    let definition = serde_json::json!({ "evaluation": study.evaluation });
    if read_record(&path)?.is_some_and(|r| r.result.is_some() && r.definition == definition) {
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
}
