//! `compare`: several runs side by side.
//!
//! ```text
//! recipe compare runs/simclr runs/light_moco [--out compare]
//! ```
//!
//! Draws the runs' curves on shared axes (the smoothed loss per step; each kNN top-1 per epoch,
//! from the network at initialisation) into `--out`, and prints a table of their final numbers
//! (also written as `--out/compare.md` with the plots): the recipe, backbone, epochs done, speed,
//! the last mean loss, each kNN's last top-1 with the initialisation's and the raw pixels', and
//! the best linear probe `recipe eval` recorded.

use std::path::{Path, PathBuf};

use super::common::RecipeRun;
use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::train::RunRecord;
use clap::Parser;

use crate::plots::Table;
use crate::run_files::{read_knn_results, KNN_AT_INIT, KNN_RAW_PIXELS};
use crate::usage::usage;

/// Options of `recipe compare`.
#[derive(Parser, Debug)]
#[command(
    no_binary_name = true,
    name = "recipe compare",
    args_override_self = true
)]
struct CompareArgs {
    /// The run directories.
    #[arg(required = true, value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// Where the plots and compare.md go.
    #[arg(long, default_value = "compare")]
    out: PathBuf,
}

/// `k` → top-1 of a run's kNN results file.
fn knn(file: &Path) -> Vec<(usize, f64)> {
    read_knn_results(file)
        .iter()
        .map(|r| (r.k, r.accuracy.top1))
        .collect()
}

/// The record of the run in `run`, refused (exit code 2) where `run` is no directory or has
/// trained no step.
fn read_run(run: &Path) -> Result<RunRecord<RecipeRun>> {
    if !run.is_dir() {
        return Err(usage(format!("{}: not a directory", run.display())));
    }
    if !run.join("steps.csv").is_file() {
        return Err(usage(format!(
            "{}: no steps.csv (not a run directory, or a run that has not trained a step)",
            run.display()
        )));
    }
    super::export::read_recipe_record(run)
}

/// The kNN settings any of the runs measured, in order of k.
fn measured_ks(runs: &[PathBuf]) -> Vec<usize> {
    let mut ks: Vec<usize> = Vec::new();
    for run in runs {
        for (k, _) in knn(&run.join(KNN_AT_INIT)) {
            if !ks.contains(&k) {
                ks.push(k);
            }
        }
    }
    ks.sort_unstable();
    ks
}

/// Refuses an output folder inside the data a compared run trained on (its record's data
/// directory or `--knn-data`; a relative one read from here): the plots are PNG files, which an
/// image folder would then take for images of a class (a streamed run trained on them, exit 0),
/// as a run directory there is refused.
fn check_not_in_data(out: &Path, label: &str, runs: &[(&Path, &RecipeRun)]) -> Result<()> {
    for (run, record) in runs {
        for (dir, option) in [(&record.data, "--data-dir"), (&record.knn_data, "--knn-data")] {
            let Some(dir) = dir else { continue };
            if super::common::is_inside(out, dir) {
                return Err(usage(format!(
                    "{label}: inside {}, the data {} trained on (its {option}); the plots would \
                     be read as images there: choose another --out",
                    dir.display(),
                    run.display()
                )));
            }
        }
    }
    Ok(())
}

/// Runs `recipe compare`.
pub fn run(args: &[String]) -> Result<()> {
    let args: CompareArgs = super::common::parse_args(args)?;
    let records = args
        .runs
        .iter()
        .map(|run| read_run(run))
        .collect::<Result<Vec<_>>>()?;
    // The plots and compare.md neither go among a run's files (its plots/, its top level) nor
    // into a place that cannot be written: said before anything is drawn.
    let label = format!("--out {}", args.out.display());
    let runs: Vec<&Path> = args.runs.iter().map(PathBuf::as_path).collect();
    crate::run_files::check_output_folder(&args.out, &label, &runs)?;
    if args.out.exists() && !args.out.is_dir() {
        return Err(usage(format!("{label}: not a directory")));
    }
    let trained: Vec<(&Path, &RecipeRun)> = runs
        .iter()
        .zip(&records)
        .map(|(run, record)| (*run, &record.run))
        .collect();
    check_not_in_data(&args.out, &label, &trained)?;
    crate::run_files::check_can_write_in(&args.out).map_err(|(dir, why)| {
        usage(format!("{label}: cannot write in {}: {why}", dir.display()))
    })?;
    let names: Vec<String> = args.runs.iter().map(|r| r.display().to_string()).collect();
    let plots = crate::plots::compare_runs(&args.runs, &names, &args.out)?;
    let ks = measured_ks(&args.runs);
    let mut header = vec![
        "run".to_string(),
        "recipe".into(),
        "backbone".into(),
        "epochs".into(),
        "images/s".into(),
        "last mean loss".into(),
    ];
    for k in &ks {
        header.push(format!("kNN k={k} top-1 % (init; raw pixels)"));
    }
    header.push("best probe top-1 %".into());
    let mut table = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for ((run, name), record) in args.runs.iter().zip(&names).zip(&records) {
        let epochs = Table::read_if_any(&run.join("epochs.csv"))?;
        let last = |column: &str| epochs.values(column).last().copied();
        // Images over the epochs' wall time (not the mean of the epochs' rates).
        let (seconds, speed) = epochs.training_speed();
        let number = |v: Option<f64>, digits: usize| {
            v.map_or("–".to_string(), |v| format!("{v:.digits$}"))
        };
        let mut cells = vec![
            name.clone(),
            record.run.recipe.clone(),
            format!("{:?}", record.run.backbone),
            format!("{}/{}", epochs.values("epoch").len(), record.train.epochs),
            number((seconds > 0.0).then_some(speed), 0),
            number(last("mean_loss"), 4),
        ];
        let (init, raw) = (knn(&run.join(KNN_AT_INIT)), knn(&run.join(KNN_RAW_PIXELS)));
        for k in &ks {
            let of =
                |list: &[(usize, f64)]| list.iter().find(|(x, _)| x == k).map(|(_, v)| 100.0 * v);
            cells.push(format!(
                "{} ({}; {})",
                number(last(&format!("knn{k}_top1")).map(|v| 100.0 * v), 2),
                number(of(&init), 2),
                number(of(&raw), 2)
            ));
        }
        let probe = Table::read_if_any(&run.join(super::eval::EVALS))?
            .values("probe_top1")
            .into_iter()
            .reduce(f64::max);
        cells.push(number(probe, 2));
        table.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    print!("{table}");
    let mut text = format!("# {} runs compared\n\n{table}\n", args.runs.len());
    for plot in &plots {
        if let Some(file) = plot.file_name() {
            let file = file.to_string_lossy();
            text.push_str(&format!("![{file}]({file})\n"));
        }
    }
    let md = args.out.join("compare.md");
    curriculum_ssl::train::write_atomic(&md, text.as_bytes())?;
    println!("plots and table: {}", md.display());
    Ok(())
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "compare",
    summary: "several runs' curves on shared axes and a table of their final numbers (RUN_DIR...)",
    run,
}];
