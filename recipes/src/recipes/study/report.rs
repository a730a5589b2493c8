//! A study's report, written again after every run from the records of the runs that finished:
//! `study.md` (per arm mean ± sd and 95 % interval of every metric, each arm's paired
//! difference from the baseline with its interval and paired t test, its p raw and adjusted by
//! Holm's method over the arm's measures, compute per arm, the curves), `study.csv` (a row per run), `summary.csv` (a row per arm and metric) and one PNG
//! per curve (mean over the seeds with its interval as a band).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::stats::{holm, paired, summarise, Paired, Summary, CONFIDENCE};
use super::{
    damaged, load_record, record_path, run_dir, Binary, RunRecord, RunResult, Stored, StudyFile,
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

/// A p-value with 3 significant digits (0.2946 as 0.295, 0.035 as 0.0350, 1 as 1.00), below
/// 0.001 in scientific notation with 3 too (0.000123 as 1.23e-4).
fn p_text(p: f64) -> String {
    if p < 1e-3 {
        return format!("{p:.2e}");
    }
    let decimals = (2 - p.log10().floor() as i64).max(2) as usize;
    format!("{p:.decimals$}")
}

/// The values of `metric` over the runs that have it: `(seed, value)`.
fn values(runs: &[(u64, RunResult)], metric: &str) -> Vec<(u64, f64)> {
    runs.iter()
        .filter_map(|(s, r)| Some((*s, *r.metrics.get(metric)?)))
        .collect()
}

/// One arm against the baseline: each metric with a pair, its paired comparison and its p
/// adjusted by Holm's method ([`holm`]) over the metrics of this comparison that have a test
/// (the family: one arm against the baseline).
fn comparison(
    runs: &[(u64, RunResult)],
    baseline: &[(u64, RunResult)],
    metrics: &[String],
) -> Vec<(String, Paired, Option<f64>)> {
    let rows: Vec<(String, Paired)> = metrics
        .iter()
        .filter_map(|m| Some((m.clone(), paired(&values(runs, m), &values(baseline, m))?)))
        .collect();
    let tested: Vec<f64> = rows.iter().filter_map(|(_, p)| p.p).collect();
    let mut adjusted = holm(&tested).into_iter();
    rows.into_iter()
        .map(|(m, p)| {
            let a = p.p.and_then(|_| adjusted.next());
            (m, p, a)
        })
        .collect()
}

/// The time and speed of an arm's runs: the mean training time over them, and the images they
/// trained over the time they took, all together (`None` without a timed run).
fn arm_speed(runs: &[(u64, RunResult)]) -> Option<(f64, f64)> {
    let seconds: f64 = runs.iter().map(|(_, r)| r.train_seconds).sum();
    let images: f64 = runs
        .iter()
        .map(|(_, r)| r.images_per_s * r.train_seconds)
        .sum();
    (!runs.is_empty() && seconds > 0.0).then(|| (seconds / runs.len() as f64, images / seconds))
}

/// The finished runs of `arm`: `(seed, result)`, the time and speed derived again from the
/// run's epochs.csv where it is there (records of earlier versions held the mean of the
/// epochs' rates).
fn results(dir: &Path, arm: &str, seeds: &[u64]) -> Result<Vec<(u64, RunResult)>> {
    let mut out = Vec::new();
    for &seed in seeds {
        let path = record_path(dir, arm, seed);
        match load_record(&path)? {
            Stored::Record(RunRecord {
                result: Some(mut r),
                ..
            }) => {
                let epochs = run_dir(dir, arm, seed).join("epochs.csv");
                if epochs.is_file() {
                    (r.train_seconds, r.images_per_s) = Table::read(&epochs)?.training_speed();
                }
                out.push((seed, r));
            }
            // `recipe study` rebuilds it (or runs it again); the report goes without it.
            Stored::Damaged(why) => log::warn!("{}; left out of the report", damaged(&path, &why)),
            _ => {}
        }
    }
    Ok(out)
}

/// An arm's name and its finished runs: `(seed, result)`.
type ArmRuns = (String, Vec<(u64, RunResult)>);

/// Writes the report of the study in `dir`.
///
/// # Errors
/// A record or log that cannot be read, a file that cannot be written.
pub fn write(dir: &Path, study: &StudyFile, title: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut arms: Vec<ArmRuns> = Vec::new();
    for arm in &study.arms {
        arms.push((arm.name.clone(), results(dir, &arm.name, &study.seeds)?));
    }
    let raw = results(dir, RAW_PIXELS, &study.seeds)?;
    let metrics = ordered_metrics(&arms);
    let baseline = arms
        .iter()
        .find(|(name, _)| *name == study.baseline)
        .map(|(_, runs)| runs.clone())
        .unwrap_or_default();

    let mut md = introduction(dir, study, title, &arms)?;
    let summary = arms_table(&mut md, study, &arms, &raw, &baseline, &metrics)?;
    against_baseline(&mut md, study, &arms, &baseline, &metrics)?;
    for column in &study.epoch_columns {
        md.push_str(&per_epoch(dir, &arms, column)?);
    }
    let runs = runs_csv(&arms, raw, &metrics)?;
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
    write("study.csv", &runs)?;
    write("summary.csv", &summary)?;
    Ok(())
}

/// A value of the CSV files (empty where there is none).
fn number(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v}"))
}

/// The metrics the finished runs recorded: the known ones in their order, then the rest (a
/// capped kNN's) by name.
fn ordered_metrics(arms: &[ArmRuns]) -> Vec<String> {
    let present: BTreeSet<&String> = arms
        .iter()
        .flat_map(|(_, runs)| runs.iter().flat_map(|(_, r)| r.metrics.keys()))
        .collect();
    let rank = |m: &str| {
        METRICS
            .iter()
            .position(|(k, _)| *k == m)
            .unwrap_or(METRICS.len())
    };
    let mut ordered: Vec<String> = present.into_iter().cloned().collect();
    ordered.sort_by_key(|m| rank(m));
    ordered
}

/// The report's title, what its numbers are, and the builds that trained the runs.
fn introduction(dir: &Path, study: &StudyFile, title: &str, arms: &[ArmRuns]) -> Result<String> {
    let finished: usize = arms.iter().map(|(_, r)| r.len()).sum();
    let total = study.arms.len() * study.seeds.len();
    let mut md = String::new();
    let seeds: Vec<String> = study.seeds.iter().map(u64::to_string).collect();
    writeln!(md, "# {title}\n")?;
    writeln!(
        md,
        "Seeds {}; baseline `{}`; {finished} of {total} runs finished. Accuracies are top-1 in \
         percent: mean ± sd over the seeds [{:.0} % interval of the mean, Student t]. \
         Training time is the mean over the seeds of the epochs' wall time (the kNN monitor and \
         checkpoints excluded); images/s is the images trained over that time, the seeds' \
         together (an epoch's images: its images/s × seconds in the run's epochs.csv).\n",
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
    md.push_str(&builds(dir, study)?);
    Ok(md)
}

/// The table of the arms (and the raw pixels) appended to `md`; returns summary.csv's bytes.
fn arms_table(
    md: &mut String,
    study: &StudyFile,
    arms: &[ArmRuns],
    raw: &[(u64, RunResult)],
    baseline: &[(u64, RunResult)],
    metrics: &[String],
) -> Result<Vec<u8>> {
    writeln!(md, "## Arms\n")?;
    let mut header = String::from("| arm | recipe | runs |");
    let mut rule = String::from("|---|---|---|");
    for m in metrics {
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
        "p_holm",
    ])?;
    for (name, runs) in arms {
        let recipe = study.arm(name).map_or("", |a| a.recipe.as_str());
        let mut row = format!("| {name} | {recipe} | {} |", runs.len());
        let compared = if name == &study.baseline {
            Vec::new()
        } else {
            comparison(runs, baseline, metrics)
        };
        for m in metrics {
            let v: Vec<f64> = values(runs, m).into_iter().map(|(_, v)| v).collect();
            let s = summarise(&v);
            write!(row, " {} |", s.as_ref().map_or("–".into(), cell))?;
            let against = compared.iter().find(|(c, _, _)| c == m);
            if let Some(s) = s {
                let d = against.map(|(_, p, _)| p);
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
                    number(against.and_then(|(_, _, a)| *a)),
                ])?;
            }
        }
        match arm_speed(runs) {
            Some((seconds, rate)) => writeln!(row, " {} | {rate:.0} |", super::hms(seconds))?,
            None => writeln!(row, " – | – |")?,
        }
        md.push_str(&row);
    }
    if !raw.is_empty() {
        let mut row = format!("| *raw pixels* | – | {} |", raw.len());
        for m in metrics {
            let v: Vec<f64> = values(raw, m).into_iter().map(|(_, v)| v).collect();
            write!(
                row,
                " {} |",
                summarise(&v).as_ref().map_or("–".into(), cell)
            )?;
        }
        writeln!(row, " – | – |")?;
        md.push_str(&row);
    }
    Ok(summary_csv.into_inner().map_err(|e| e.into_error())?)
}

/// The section on each arm's differences from the baseline, appended to `md`.
fn against_baseline(
    md: &mut String,
    study: &StudyFile,
    arms: &[ArmRuns],
    baseline: &[(u64, RunResult)],
    metrics: &[String],
) -> Result<()> {
    writeln!(md, "\n## Against the baseline `{}`\n", study.baseline)?;
    let alpha = 1.0 - CONFIDENCE;
    writeln!(
        md,
        "Each arm's difference from the baseline, seed by seed over the seeds both finished: \
         mean [{:.0} % interval of that measure alone], and the two-sided paired t test's p, \
         as computed and adjusted by Holm's step-down method over the arm's measures in this \
         table (each arm against the baseline is one family). A difference is called \
         significant at {:.0} % only where its Holm-adjusted p is below {alpha:.2} (marked *); \
         the raw p of one measure out of several is no such evidence. p is printed with 3 \
         significant digits.\n",
        100.0 * CONFIDENCE,
        100.0 * alpha,
    )?;
    writeln!(
        md,
        "| arm | metric | pairs | difference | p | p (Holm) |\n|---|---|---|---|---|---|"
    )?;
    for (name, runs) in arms.iter().filter(|(n, _)| *n != study.baseline) {
        for (m, p, adjusted) in comparison(runs, baseline, metrics) {
            let d = &p.difference;
            let difference = match d.interval {
                Some((lo, hi)) => format!("{:+.2} [{lo:+.2}, {hi:+.2}]", d.mean),
                None => format!("{:+.2}", d.mean),
            };
            let pvalue = p.p.map_or("–".into(), p_text);
            let holm = adjusted.map_or("–".into(), |a| {
                format!("{}{}", p_text(a), if a < alpha { " *" } else { "" })
            });
            writeln!(
                md,
                "| {name} | {} | {} | {difference} | {pvalue} | {holm} |",
                label(&m),
                d.n
            )?;
        }
    }
    Ok(())
}

/// study.csv: every finished run's measures, the raw pixels' last.
fn runs_csv(arms: &[ArmRuns], raw: Vec<(u64, RunResult)>, metrics: &[String]) -> Result<Vec<u8>> {
    let mut runs_csv = csv::Writer::from_writer(Vec::new());
    let mut head = vec!["arm".to_string(), "seed".to_string()];
    head.extend(metrics.iter().cloned());
    head.extend(["train_seconds".into(), "images_per_s".into()]);
    runs_csv.write_record(&head)?;
    for (name, runs) in arms
        .iter()
        .chain(std::iter::once(&(RAW_PIXELS.to_string(), raw)))
    {
        for (seed, r) in runs {
            let mut row = vec![name.clone(), seed.to_string()];
            row.extend(metrics.iter().map(|m| number(r.metrics.get(m).copied())));
            row.extend([r.train_seconds.to_string(), r.images_per_s.to_string()]);
            runs_csv.write_record(&row)?;
        }
    }
    Ok(runs_csv.into_inner().map_err(|e| e.into_error())?)
}

/// The report's paragraph on the builds of `recipe` that trained the finished runs (their
/// records' `binaries`): one sentence when one build trained them all; otherwise a table of
/// the builds and their runs and a warning that arms trained by different builds are not
/// like for like (a change of the code no setting shows changes their numbers). Runs recorded
/// before builds were recorded (or rebuilt from their run) are counted as of an unknown build.
fn builds(dir: &Path, study: &StudyFile) -> Result<String> {
    // Build(s) → (arm, seed) of each finished run, in the study's order.
    let mut by_build: BTreeMap<Vec<Binary>, Vec<(&str, u64)>> = BTreeMap::new();
    for arm in &study.arms {
        for &seed in &study.seeds {
            if let Stored::Record(RunRecord {
                result: Some(_),
                binaries,
                ..
            }) = load_record(&record_path(dir, &arm.name, seed))?
            {
                by_build
                    .entry(binaries)
                    .or_default()
                    .push((&arm.name, seed));
            }
        }
    }
    let unknown = by_build.remove(&Vec::new()).unwrap_or_default();
    // `a` seeds 0, 1, `b` seed 2.
    let runs = |runs: &[(&str, u64)]| {
        let mut arms: Vec<(&str, Vec<String>)> = Vec::new();
        for (arm, seed) in runs {
            match arms.last_mut() {
                Some((a, seeds)) if a == arm => seeds.push(seed.to_string()),
                _ => arms.push((arm, vec![seed.to_string()])),
            }
        }
        arms.iter()
            .map(|(arm, seeds)| {
                let word = if seeds.len() == 1 { "seed" } else { "seeds" };
                format!("`{arm}` {word} {}", seeds.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let short = |b: &Binary| format!("{} ({})", &b.sha256[..b.sha256.len().min(12)], b.version);
    let name = |builds: &[Binary]| builds.iter().map(short).collect::<Vec<_>>().join(", then ");
    let mut md = String::new();
    match by_build.len() {
        0 => {}
        1 => {
            let (builds, of) = by_build.iter().next().expect("one build");
            writeln!(
                md,
                "Builds: {} of the finished runs were trained by one build of `recipe` \
                 (SHA-256 of the program, its version: {}).\n",
                of.len(),
                name(builds)
            )?;
        }
        n => {
            writeln!(
                md,
                "Builds: the finished runs were trained by {n} builds of `recipe` (SHA-256 of \
                 the program, its version): arms trained by different builds are not like for \
                 like, since a change of the code that no setting shows (an initialisation, a \
                 kernel) changes their numbers too.\n\n| build | runs |\n|---|---|"
            )?;
            for (builds, of) in &by_build {
                writeln!(md, "| {} | {} |", name(builds), runs(of))?;
            }
            md.push('\n');
        }
    }
    if !unknown.is_empty() {
        writeln!(
            md,
            "Finished runs with no record of their build (recorded by an earlier version, or \
             rebuilt from their run): {}.\n",
            runs(&unknown)
        )?;
    }
    Ok(md)
}

/// The report's section on `column` of the runs' epochs.csv (the study's `epoch_columns`): per
/// arm whose runs have it, each seed's value at each epoch (`a / b / c` in seed order, `–`
/// where a run has no value) and a summary over the epochs: the total where every value is a
/// whole number (a count, such as `curation_rejections`), the mean of the epochs that have a
/// value otherwise (a rate or a mean, such as `curation_threshold_mean`, whose sum means
/// nothing). A line saying so when no run has the column; empty when no run has a log yet.
fn per_epoch(dir: &Path, arms: &[(String, Vec<(u64, RunResult)>)], column: &str) -> Result<String> {
    let show = |v: Option<f64>| match v {
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) => format!("{v:.4}"),
        None => "–".to_string(),
    };
    let mut rows = Vec::new();
    let mut last_epoch = 0;
    // The columns of a run's log, for a name that none has.
    let mut columns_seen: Option<Vec<String>> = None;
    for (name, runs) in arms {
        // Per seed: epoch (from 1) → value.
        let mut seeds: Vec<BTreeMap<u64, Option<f64>>> = Vec::new();
        for (seed, _) in runs {
            let table = Table::read_if_any(&run_dir(dir, name, *seed).join("epochs.csv"))?;
            if !table.names().iter().any(|n| n == column) {
                if columns_seen.is_none() && !table.names().is_empty() {
                    columns_seen = Some(table.names().to_vec());
                }
                continue;
            }
            let epochs = table.column("epoch");
            let values = table.column(column);
            let by_epoch: BTreeMap<u64, Option<f64>> = epochs
                .into_iter()
                .zip(values)
                .filter_map(|(e, v)| Some((e? as u64, v)))
                .collect();
            last_epoch = last_epoch.max(by_epoch.keys().copied().max().unwrap_or(0));
            seeds.push(by_epoch);
        }
        if !seeds.is_empty() {
            rows.push((name.clone(), seeds));
        }
    }
    if rows.is_empty() {
        // A name no run's log has (a typo, or a column of another recipe's hook) is said, not
        // left out without a word.
        return Ok(match columns_seen {
            Some(columns) => {
                log::warn!("epoch_columns: no run's epochs.csv has a column `{column}`");
                format!(
                    "\n## Per epoch: `{column}`\n\nNo run's epochs.csv has this column (theirs: \
                     {}).\n",
                    columns.join(", ")
                )
            }
            None => String::new(),
        });
    }
    let counts = rows
        .iter()
        .flat_map(|(_, seeds)| seeds.iter().flat_map(|s| s.values().flatten()))
        .all(|v| v.fract() == 0.0);
    let (summary, said) = if counts {
        ("total", "its total over the epochs")
    } else {
        ("mean", "its mean over the epochs that have a value")
    };
    let mut md = format!(
        "\n## Per epoch: `{column}`\n\nEach finished seed's value in its epochs.csv, in seed \
         order (– where a run has none), and {said}.\n\n| arm |"
    );
    for epoch in 1..=last_epoch {
        md.push_str(&format!(" epoch {epoch} |"));
    }
    md.push_str(&format!(" {summary} |\n|---|"));
    md.push_str(&"---|".repeat(last_epoch as usize + 1));
    md.push('\n');
    for (name, seeds) in rows {
        md.push_str(&format!("| {name} |"));
        for epoch in 1..=last_epoch {
            let cells: Vec<String> = seeds
                .iter()
                .map(|s| show(s.get(&epoch).copied().flatten()))
                .collect();
            md.push_str(&format!(" {} |", cells.join(" / ")));
        }
        let totals: Vec<String> = seeds
            .iter()
            .map(|s| {
                let values: Vec<f64> = s.values().flatten().copied().collect();
                let sum: f64 = values.iter().sum();
                match (counts, values.len()) {
                    (true, _) => show(Some(sum)),
                    (false, 0) => show(None),
                    (false, n) => show(Some(sum / n as f64)),
                }
            })
            .collect();
        md.push_str(&format!(" {} |\n", totals.join(" / ")));
    }
    Ok(md)
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
    columns.sort_by_key(|(c, _)| {
        METRICS
            .iter()
            .position(|(m, _)| m == c)
            .unwrap_or(METRICS.len())
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_values_are_printed_with_three_significant_digits() {
        for (p, want) in [
            (0.2946, "0.295"),
            (0.035, "0.0350"),
            (0.108_43, "0.108"),
            (1.0, "1.00"),
            (0.5, "0.500"),
            (0.001_234, "0.00123"),
            (0.000_123_4, "1.23e-4"),
        ] {
            assert_eq!(p_text(p), want, "{p}");
        }
    }

    /// Writes the record of `arm`'s run with `seed` (its metrics: the baseline's 80, 81, 82 for
    /// seeds 0, 1, 2 plus `differences[seed]`) and its epochs.csv (rows of `(images/s,
    /// seconds)`). The record's speed is the mean of the epochs' rates, as earlier versions
    /// wrote it: the report must derive the speed from epochs.csv again.
    fn run(dir: &Path, arm: &str, seed: u64, differences: [f64; 4], epochs: &[(f64, f64)]) {
        let metrics = ["knn20_top1", "knn200_top1", "probe_top1", "few_label_top1"]
            .iter()
            .zip(differences)
            .map(|(m, d)| (m.to_string(), 80.0 + seed as f64 + d))
            .collect();
        let record = RunRecord {
            definition: serde_json::json!({}),
            seed,
            result: Some(RunResult {
                metrics,
                train_seconds: epochs.iter().map(|e| e.1).sum(),
                images_per_s: epochs.iter().map(|e| e.0).sum::<f64>() / epochs.len() as f64,
            }),
            binaries: Vec::new(),
        };
        let run = run_dir(dir, arm, seed);
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            record_path(dir, arm, seed),
            serde_json::to_vec(&record).unwrap(),
        )
        .unwrap();
        let mut csv = String::from("epoch,mean_loss,lr,images_per_s,seconds\n");
        for (i, (rate, seconds)) in epochs.iter().enumerate() {
            csv.push_str(&format!("{},1.0,0.1,{rate:.3},{seconds:.3}\n", i + 1));
        }
        std::fs::write(run.join("epochs.csv"), csv).unwrap();
    }

    /// The builds that trained the runs: named in one sentence when one build trained them
    /// all; otherwise a table of the builds (a resumed run's two in order) with their runs and a
    /// warning; runs whose record names no build counted apart.
    #[test]
    fn the_report_names_the_builds_that_trained_the_runs() {
        let dir = std::env::temp_dir().join(format!("study-builds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let study: StudyFile = toml::from_str(
            r#"
            seeds = [0, 1]
            baseline = "a"
            [evaluation]
            raw_pixels = false
            [[arm]]
            name = "a"
            recipe = "simclr"
            [[arm]]
            name = "b"
            recipe = "simclr"
            "#,
        )
        .unwrap();
        let build = |sha: &str| Binary {
            version: "0.1.0".into(),
            sha256: sha.repeat(64 / sha.len()),
        };
        let set = |arm: &str, seed: u64, binaries: Vec<Binary>| {
            let path = record_path(&dir, arm, seed);
            let Stored::Record(mut r) = load_record(&path).unwrap() else {
                panic!("a record")
            };
            r.binaries = binaries;
            std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
        };
        for seed in 0..2u64 {
            run(&dir, "a", seed, [0.0; 4], &[(100.0, 1.0)]);
            run(&dir, "b", seed, [1.0; 4], &[(100.0, 1.0)]);
        }
        for (arm, seed) in [("a", 0), ("a", 1), ("b", 0), ("b", 1)] {
            set(arm, seed, vec![build("ab")]);
        }
        write(&dir, &study, "t").unwrap();
        let md = std::fs::read_to_string(dir.join(REPORT)).unwrap();
        assert!(
            md.contains(
                "Builds: 4 of the finished runs were trained by one build of `recipe` (SHA-256 \
                 of the program, its version: abababababab (0.1.0))."
            ),
            "{md}"
        );
        assert!(!md.contains("no record of their build"), "{md}");

        // Arm b's seed 0 resumed by another build, its seed 1 trained by it alone; arm a's
        // seed 1 recorded by an earlier version.
        set("b", 0, vec![build("ab"), build("cd")]);
        set("b", 1, vec![build("cd")]);
        set("a", 1, Vec::new());
        write(&dir, &study, "t").unwrap();
        let md = std::fs::read_to_string(dir.join(REPORT)).unwrap();
        for want in [
            "the finished runs were trained by 3 builds of `recipe`",
            "are not like for like",
            "| build | runs |\n|---|---|\n",
            "| abababababab (0.1.0) | `a` seed 0 |\n",
            "| abababababab (0.1.0), then cdcdcdcdcdcd (0.1.0) | `b` seed 0 |\n",
            "| cdcdcdcdcdcd (0.1.0) | `b` seed 1 |\n",
            "Finished runs with no record of their build (recorded by an earlier version, or \
             rebuilt from their run): `a` seed 1.",
        ] {
            assert!(md.contains(want), "{want}\n{md}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `epoch_columns`: each arm's seeds' values of a column of epochs.csv, epoch by epoch, and
    /// their totals for a count, their means for a column with fractions; an arm whose runs lack
    /// the column is left out.
    #[test]
    fn the_report_shows_the_epoch_columns_asked_for_per_seed() {
        let dir = std::env::temp_dir().join(format!("study-epochs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let study: StudyFile = toml::from_str(
            r#"
            seeds = [0, 1]
            baseline = "plain"
            epoch_columns = ["curation_rejections", "curation_threshold_mean"]
            [evaluation]
            raw_pixels = false
            [[arm]]
            name = "plain"
            recipe = "simclr"
            [[arm]]
            name = "curated"
            recipe = "bad_batches"
            "#,
        )
        .unwrap();
        for seed in 0..2u64 {
            run(&dir, "plain", seed, [0.0; 4], &[(100.0, 1.0); 3]);
            run(&dir, "curated", seed, [0.0; 4], &[(100.0, 1.0); 3]);
            // Seed 0 rejects 0, 2, 5 batches; seed 1 has no value in epoch 1 (warm-up), then
            // 1 and 0.5.
            // The thresholds: seed 0 none in epoch 1, then 0.25 and 0.75; seed 1 0.5 in each.
            let cells = [["0", "2", "5"], ["", "1", "3"]][seed as usize];
            let means = [["", "0.25", "0.75"], ["0.5", "0.5", "0.5"]][seed as usize];
            let mut csv = String::from(
                "epoch,mean_loss,lr,images_per_s,seconds,curation_rejections,\
                 curation_threshold_mean\n",
            );
            for (i, (c, m)) in cells.iter().zip(means).enumerate() {
                csv.push_str(&format!("{},1.0,0.1,100.000,1.000,{c},{m}\n", i + 1));
            }
            std::fs::write(run_dir(&dir, "curated", seed).join("epochs.csv"), csv).unwrap();
        }
        write(&dir, &study, "t").unwrap();
        let md = std::fs::read_to_string(dir.join(REPORT)).unwrap();
        assert!(md.contains("## Per epoch: `curation_rejections`"), "{md}");
        assert!(
            md.contains("| arm | epoch 1 | epoch 2 | epoch 3 | total |\n|---|---|---|---|---|\n"),
            "{md}"
        );
        // Totals of the counts: 0 + 2 + 5 = 7 and 1 + 3 = 4.
        assert!(
            md.contains("| curated | 0 / – | 2 / 1 | 5 / 3 | 7 / 4 |"),
            "{md}"
        );
        // Means of the fractions over the epochs with a value: (0.25 + 0.75) / 2 = 0.5 and
        // (0.5 · 3) / 3 = 0.5; their sums (1 and 1.5) are not shown.
        assert!(
            md.contains("| arm | epoch 1 | epoch 2 | epoch 3 | mean |\n|---|---|---|---|---|\n"),
            "{md}"
        );
        assert!(
            md.contains(
                "| curated | – / 0.5000 | 0.2500 / 0.5000 | 0.7500 / 0.5000 | 0.5000 / 0.5000 |"
            ),
            "{md}"
        );
        assert!(!md.contains("| plain | 0 /"), "{md}");
        // A column no run has is said (it was left out without a word).
        let mut typo = study.clone();
        typo.epoch_columns = vec!["curation_rejection".into()];
        write(&dir, &typo, "t").unwrap();
        let md = std::fs::read_to_string(dir.join(REPORT)).unwrap();
        assert!(
            md.contains(
                "## Per epoch: `curation_rejection`\n\nNo run's epochs.csv has this column \
                 (theirs: epoch, mean_loss,"
            ),
            "{md}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The report's speed is images over wall time, its p-values raw and Holm-adjusted per arm,
    /// every number computed here by hand.
    ///
    /// Speed. The baseline's runs: epochs of (1000 images/s, 10 s) and (100 images/s, 50 s):
    /// 10,000 + 5,000 images in 60 s, 250 images/s (the mean of the two rates, 550, was the
    /// report's number before). Arm `small`: seed 0 as the baseline's (15,000 images, 60 s),
    /// seed 1 (200, 20) twice (8,000 images, 40 s), seed 2 (300, 10) twice (6,000 images, 20 s):
    /// per run 250, 200, 300; the arm 29,000 images in 120 s, 241.67 → 242, over a mean of 40 s.
    ///
    /// p. With three pairs the t distribution has 2 degrees of freedom, whose two-sided p is
    /// `1 − |t| / √(2 + t²)`. Differences 2, 3, 4 (mean 3, sd 1, t = 3√3, t² = 27): p = 1 −
    /// √(27/29) = 0.035099; 4, 5, 6 (t² = 75): 1 − √(75/77) = 0.013072; 0, 1, 2 (t² = 3): 1 −
    /// √(3/5) = 0.225403; 1, 2, 3 (t² = 12): 1 − √(12/14) = 0.074180. Holm over the four,
    /// ascending: 4 · 0.013072 = 0.052290; 3 · 0.035099 = 0.105296; 2 · 0.074180 = 0.148360;
    /// 0.225403 (above 0.148360, kept). So kNN k=200's raw 0.0131 is below 0.05 but its
    /// adjusted 0.0523 is not: nothing of `small` is marked. Arm `big`, differences 9.9, 10,
    /// 10.1 on every metric (t = 10 / (0.1/√3), t² = 30,000): p = 1 − √(30000/30002) =
    /// 3.3332e-5 each, all four adjusted to 4 · p = 1.3333e-4, marked.
    /// A study of three arms over three seeds, its runs' records and epochs written in `dir`:
    /// `base` all zeros; `small` 2–6 points above it, some epochs slow; `big` 10 ± 0.1 above.
    fn three_arms(dir: &Path) -> StudyFile {
        let study: StudyFile = toml::from_str(
            r#"
            seeds = [0, 1, 2]
            baseline = "base"
            [evaluation]
            raw_pixels = false
            [[arm]]
            name = "base"
            recipe = "simclr"
            [[arm]]
            name = "small"
            recipe = "simclr"
            [[arm]]
            name = "big"
            recipe = "simclr"
            "#,
        )
        .unwrap();
        let slow_fast = [(1000.0, 10.0), (100.0, 50.0)];
        let small: [[f64; 4]; 3] = [
            [2.0, 4.0, 0.0, 1.0],
            [3.0, 5.0, 1.0, 2.0],
            [4.0, 6.0, 2.0, 3.0],
        ];
        let small_epochs: [&[(f64, f64)]; 3] =
            [&slow_fast, &[(200.0, 20.0); 2], &[(300.0, 10.0); 2]];
        for seed in 0..3u64 {
            let s = seed as usize;
            run(dir, "base", seed, [0.0; 4], &slow_fast);
            run(dir, "small", seed, small[s], small_epochs[s]);
            run(
                dir,
                "big",
                seed,
                [[9.9; 4], [10.0; 4], [10.1; 4]][s],
                &slow_fast,
            );
        }
        study
    }

    #[test]
    fn the_report_gives_images_over_wall_time_and_holm_adjusted_p() {
        let dir = std::env::temp_dir().join(format!("study-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let study = three_arms(&dir);
        write(&dir, &study, "t").unwrap();
        let md = std::fs::read_to_string(dir.join(REPORT)).unwrap();
        let row = |start: &str| {
            md.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no row {start}\n{md}"))
                .to_string()
        };
        let time = |s: f64| super::super::hms(s);
        assert!(
            row("| base | simclr | 3 |").ends_with(&format!(" {} | 250 |", time(60.0))),
            "{md}"
        );
        assert!(
            row("| small | simclr | 3 |").ends_with(&format!(" {} | 242 |", time(40.0))),
            "{md}"
        );
        for (metric, difference, p, adjusted) in [
            ("kNN k=20", "+3.00 [", "0.0351", "0.105 |"),
            ("kNN k=200", "+5.00 [", "0.0131", "0.0523 |"),
            ("linear probe", "+1.00 [", "0.225", "0.225 |"),
            ("few-label probe", "+2.00 [", "0.0742", "0.148 |"),
        ] {
            let r = row(&format!("| small | {metric} | 3 | {difference}"));
            assert!(r.ends_with(&format!("| {p} | {adjusted}")), "{r}");
        }
        for metric in ["kNN k=20", "kNN k=200", "linear probe", "few-label probe"] {
            let r = row(&format!("| big | {metric} | 3 | +10.00 ["));
            assert!(r.ends_with("| 3.33e-5 | 1.33e-4 * |"), "{r}");
        }
        assert!(
            md.contains("called significant at 5 % only where its Holm-adjusted p is below 0.05"),
            "{md}"
        );
        // The CSV files: each run's images over its time; summary.csv's raw and adjusted p.
        let runs = std::fs::read_to_string(dir.join("study.csv")).unwrap();
        for (seed, rate) in [(0, 250.0), (1, 200.0), (2, 300.0)] {
            let line = runs
                .lines()
                .find(|l| l.starts_with(&format!("small,{seed},")))
                .unwrap();
            let got: f64 = line.rsplit(',').next().unwrap().parse().unwrap();
            assert!((got - rate).abs() < 1e-6, "{line}");
        }
        let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
        assert!(
            summary.lines().next().unwrap().ends_with(",t,p,p_holm"),
            "{summary}"
        );
        let line = summary
            .lines()
            .find(|l| l.starts_with("small,knn200_top1,"))
            .unwrap();
        let cells: Vec<f64> = line
            .rsplit(',')
            .take(2)
            .map(|c| c.parse().unwrap())
            .collect();
        assert!(
            (cells[0] - 4.0 * 0.013_072_457_560_346).abs() < 1e-9,
            "{line}"
        );
        assert!((cells[1] - 0.013_072_457_560_346).abs() < 1e-9, "{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
