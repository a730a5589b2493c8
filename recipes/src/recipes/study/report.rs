//! A study's report, written again after every run from the records of the runs that finished:
//! `study.md` (per arm mean ± sd and 95 % interval of every metric, each arm's paired
//! difference from the baseline with its interval and paired t test, compute per arm, the
//! curves), `study.csv` (a row per run), `summary.csv` (a row per arm and metric) and one PNG
//! per curve (mean over the seeds with its interval as a band).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::stats::{paired, summarise, Summary, CONFIDENCE};
use super::{
    damaged, load_record, record_path, run_dir, RunRecord, RunResult, Stored, StudyFile,
    RAW_PIXELS,
};
use crate::plots::{draw, Line, Table};

/// The report's file.
pub const REPORT: &str = "study.md";

/// The metrics in the report's order, with their names in it.
const METRICS: &[(&str, &str)] = &[
    ("knn20_top1", "kNN k=20"),
    ("knn200_top1", "kNN k=200"),
    ("probe_top1", "linear probe"),
    ("few_label_top1", "few-label probe"),
    ("test_top1", "test (supervised)"),
];

/// The name of `metric` in the report (`knn{k}_top1` as "kNN k={k}" for any `k`: the monitor
/// caps `k` at the training images).
fn label(metric: &str) -> String {
    if let Some((_, l)) = METRICS.iter().find(|(m, _)| *m == metric) {
        return l.to_string();
    }
    match metric
        .strip_prefix("knn")
        .and_then(|rest| rest.strip_suffix("_top1"))
    {
        Some(k) => format!("kNN k={k}"),
        None => metric.to_string(),
    }
}

/// `mean ± sd [low, high]` with two decimals (no interval for one seed).
fn cell(s: &Summary) -> String {
    match (s.sd, s.interval) {
        (Some(sd), Some((lo, hi))) => format!("{:.2} ± {sd:.2} [{lo:.2}, {hi:.2}]", s.mean),
        _ => format!("{:.2}", s.mean),
    }
}

/// The finished runs of `arm`: `(seed, result)`.
fn results(dir: &Path, arm: &str, seeds: &[u64]) -> Result<Vec<(u64, RunResult)>> {
    let mut out = Vec::new();
    for &seed in seeds {
        let path = record_path(dir, arm, seed);
        match load_record(&path)? {
            Stored::Record(RunRecord {
                result: Some(r), ..
            }) => out.push((seed, r)),
            // `recipe study` rebuilds it (or runs it again); the report goes without it.
            Stored::Damaged(why) => log::warn!("{}; left out of the report", damaged(&path, &why)),
            _ => {}
        }
    }
    Ok(out)
}

/// Writes the report of the study in `dir`.
///
/// # Errors
/// A record or log that cannot be read, a file that cannot be written.
pub fn write(dir: &Path, study: &StudyFile, title: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut arms: Vec<(String, Vec<(u64, RunResult)>)> = Vec::new();
    for arm in &study.arms {
        arms.push((arm.name.clone(), results(dir, &arm.name, &study.seeds)?));
    }
    let raw = results(dir, RAW_PIXELS, &study.seeds)?;
    let metrics: Vec<String> = {
        let present: BTreeSet<&String> = arms
            .iter()
            .flat_map(|(_, runs)| runs.iter().flat_map(|(_, r)| r.metrics.keys()))
            .collect();
        // The known metrics in their order, then the rest (a capped kNN's) by name.
        let rank = |m: &str| METRICS.iter().position(|(k, _)| *k == m).unwrap_or(METRICS.len());
        let mut ordered: Vec<String> = present.into_iter().cloned().collect();
        ordered.sort_by_key(|m| rank(m));
        ordered
    };
    let finished: usize = arms.iter().map(|(_, r)| r.len()).sum();
    let total = study.arms.len() * study.seeds.len();
    let values = |runs: &[(u64, RunResult)], metric: &str| -> Vec<(u64, f64)> {
        runs.iter()
            .filter_map(|(s, r)| Some((*s, *r.metrics.get(metric)?)))
            .collect()
    };
    let baseline = arms
        .iter()
        .find(|(name, _)| *name == study.baseline)
        .map(|(_, runs)| runs.clone())
        .unwrap_or_default();

    let mut md = String::new();
    let seeds: Vec<String> = study.seeds.iter().map(u64::to_string).collect();
    writeln!(md, "# {title}\n")?;
    writeln!(
        md,
        "Seeds {}; baseline `{}`; {finished} of {total} runs finished. Accuracies are top-1 in \
         percent: mean ± sd over the seeds [{:.0} % interval of the mean, Student t].\n",
        seeds.join(", "),
        study.baseline,
        100.0 * CONFIDENCE
    )?;
    if let Some(f) = study.evaluation.label_fraction {
        writeln!(
            md,
            "The few-label probe is a linear probe trained on {} % of the training labels \
             (balanced over the classes, drawn with the run's seed).\n",
            100.0 * f
        )?;
    }
    writeln!(md, "## Arms\n")?;
    let mut header = String::from("| arm | recipe | runs |");
    let mut rule = String::from("|---|---|---|");
    for m in &metrics {
        write!(header, " {} |", label(m))?;
        rule.push_str("---|");
    }
    header.push_str(" training time | images/s |");
    rule.push_str("---|---|");
    writeln!(md, "{header}\n{rule}")?;
    let mut summary_csv = csv::Writer::from_writer(Vec::new());
    summary_csv.write_record([
        "arm",
        "metric",
        "n",
        "mean",
        "sd",
        "ci_low",
        "ci_high",
        "diff_n",
        "diff_mean",
        "diff_ci_low",
        "diff_ci_high",
        "t",
        "p",
    ])?;
    let number = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v}"));
    for (name, runs) in &arms {
        let recipe = study.arm(name).map_or("", |a| a.recipe.as_str());
        let mut row = format!("| {name} | {recipe} | {} |", runs.len());
        for m in &metrics {
            let v: Vec<f64> = values(runs, m).into_iter().map(|(_, v)| v).collect();
            let s = summarise(&v);
            write!(row, " {} |", s.as_ref().map_or("–".into(), cell))?;
            let p = paired(&values(runs, m), &values(&baseline, m));
            if let Some(s) = s {
                let d = p.as_ref().filter(|_| name != &study.baseline);
                summary_csv.write_record([
                    name.clone(),
                    m.clone(),
                    s.n.to_string(),
                    s.mean.to_string(),
                    number(s.sd),
                    number(s.interval.map(|i| i.0)),
                    number(s.interval.map(|i| i.1)),
                    d.map_or(String::new(), |d| d.difference.n.to_string()),
                    number(d.map(|d| d.difference.mean)),
                    number(d.and_then(|d| d.difference.interval.map(|i| i.0))),
                    number(d.and_then(|d| d.difference.interval.map(|i| i.1))),
                    number(d.and_then(|d| d.t)),
                    number(d.and_then(|d| d.p)),
                ])?;
            }
        }
        let seconds: Vec<f64> = runs.iter().map(|(_, r)| r.train_seconds).collect();
        let speed: Vec<f64> = runs.iter().map(|(_, r)| r.images_per_s).collect();
        match (summarise(&seconds), summarise(&speed)) {
            (Some(t), Some(v)) => writeln!(row, " {} | {:.0} |", super::hms(t.mean), v.mean)?,
            _ => writeln!(row, " – | – |")?,
        }
        md.push_str(&row);
    }
    if !raw.is_empty() {
        let mut row = format!("| *raw pixels* | – | {} |", raw.len());
        for m in &metrics {
            let v: Vec<f64> = values(&raw, m).into_iter().map(|(_, v)| v).collect();
            write!(row, " {} |", summarise(&v).as_ref().map_or("–".into(), cell))?;
        }
        writeln!(row, " – | – |")?;
        md.push_str(&row);
    }
    writeln!(md, "\n## Against the baseline `{}`\n", study.baseline)?;
    writeln!(
        md,
        "Each arm's difference from the baseline, seed by seed over the seeds both finished: \
         mean [{:.0} % interval], and the two-sided paired t test.\n",
        100.0 * CONFIDENCE
    )?;
    writeln!(md, "| arm | metric | pairs | difference | p |\n|---|---|---|---|---|")?;
    for (name, runs) in arms.iter().filter(|(n, _)| *n != study.baseline) {
        for m in &metrics {
            let Some(p) = paired(&values(runs, m), &values(&baseline, m)) else {
                continue;
            };
            let d = &p.difference;
            let difference = match d.interval {
                Some((lo, hi)) => format!("{:+.2} [{lo:+.2}, {hi:+.2}]", d.mean),
                None => format!("{:+.2}", d.mean),
            };
            let pvalue = p.p.map_or("–".into(), |p| format!("{p:.3}"));
            writeln!(md, "| {name} | {} | {} | {difference} | {pvalue} |", label(m), d.n)?;
        }
    }
    let mut runs_csv = csv::Writer::from_writer(Vec::new());
    let mut head = vec!["arm".to_string(), "seed".to_string()];
    head.extend(metrics.iter().cloned());
    head.extend(["train_seconds".into(), "images_per_s".into()]);
    runs_csv.write_record(&head)?;
    for (name, runs) in arms.iter().chain(std::iter::once(&(RAW_PIXELS.to_string(), raw))) {
        for (seed, r) in runs {
            let mut row = vec![name.clone(), seed.to_string()];
            row.extend(metrics.iter().map(|m| number(r.metrics.get(m).copied())));
            row.extend([r.train_seconds.to_string(), r.images_per_s.to_string()]);
            runs_csv.write_record(&row)?;
        }
    }
    let plots = curves(dir, &arms)?;
    if !plots.is_empty() {
        writeln!(
            md,
            "\n## Curves\n\nMean over the finished seeds per epoch, the band its {:.0} % \
             interval.\n",
            100.0 * CONFIDENCE
        )?;
        for p in &plots {
            writeln!(md, "![{p}]({p})")?;
        }
    }
    let write = |name: &str, bytes: &[u8]| -> Result<()> {
        curriculum_ssl::train::write_atomic(&dir.join(name), bytes)?;
        Ok(())
    };
    write(REPORT, md.as_bytes())?;
    write("study.csv", &runs_csv.into_inner().map_err(|e| e.into_error())?)?;
    write("summary.csv", &summary_csv.into_inner().map_err(|e| e.into_error())?)?;
    Ok(())
}

/// A metric's values over the seeds, by epoch.
type EpochValues = BTreeMap<u64, Vec<f64>>;

/// One PNG per `*_top1` column of the finished runs' `epochs.csv` (`arms`: each arm's
/// finished runs): per arm, the mean over its seeds at each epoch and the interval as a band. Returns the files' names.
fn curves(dir: &Path, arms: &[(String, Vec<(u64, RunResult)>)]) -> Result<Vec<String>> {
    // column → arm → epoch → values over seeds.
    let mut by_column: BTreeMap<String, Vec<(String, EpochValues)>> = BTreeMap::new();
    for (name, runs) in arms {
        for (seed, _) in runs {
            let table = Table::read(&run_dir(dir, name, *seed).join("epochs.csv"))?;
            let epochs = table.column("epoch");
            for column in table.names().iter().filter(|n| n.ends_with("_top1")) {
                let arms = by_column.entry(column.clone()).or_default();
                if !arms.iter().any(|(a, _)| a == name) {
                    arms.push((name.clone(), BTreeMap::new()));
                }
                let points = &mut arms.iter_mut().find(|(a, _)| a == name).unwrap().1;
                for (epoch, value) in epochs.iter().zip(table.column(column)) {
                    if let (Some(e), Some(v)) = (epoch, value) {
                        points.entry(*e as u64).or_default().push(100.0 * v);
                    }
                }
            }
        }
    }
    let mut files = Vec::new();
    let mut columns: Vec<(String, Vec<(String, EpochValues)>)> = by_column.into_iter().collect();
    // The report's order of the metrics (kNN k=20 before k=200), then by name.
    columns.sort_by_key(|(c, _)| METRICS.iter().position(|(m, _)| m == c).unwrap_or(METRICS.len()));
    for (column, arms) in columns {
        let mut lines = Vec::new();
        for (arm, points) in arms {
            let mut xy = Vec::new();
            let mut band = Vec::new();
            for (epoch, values) in points {
                let s = summarise(&values).expect("at least one value");
                xy.push((epoch as f64, s.mean));
                // An accuracy lies in [0, 100]: so does the band drawn (two seeds' interval
                // can reach far past both).
                let (lo, hi) = s.interval.unwrap_or((s.mean, s.mean));
                band.push((lo.max(0.0), hi.min(100.0)));
            }
            lines.push(Line::with_band(arm, xy, band));
        }
        let name = format!("curve-{column}.png");
        draw(
            &dir.join(&name),
            &format!("{} per epoch", label(&column)),
            "epoch",
            "top-1 accuracy (%)",
            &lines,
        )?;
        files.push(name);
    }
    Ok(files)
}
