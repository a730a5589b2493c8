//! A study file (TOML): its arms, seeds, shared options and evaluation, every part checked
//! before anything runs, and the command line of each run.
//!
//! ```toml
//! title = "Light-MoCo: SoftNCE against InfoNCE"
//! seeds = [0, 1, 2]
//! baseline = "infonce"
//! # columns of the runs' epochs.csv the report shows epoch by epoch (optional)
//! epoch_columns = ["curation_rejections"]
//!
//! [options]                 # every run's options, as a recipe's (`data_dir` is --data-dir)
//! dataset = "fashion-mnist"
//! data_dir = "/usr/share/datasets/fashion-mnist"
//! epochs = 10
//!
//! [evaluation]
//! linear_probe = true       # `recipe eval`'s SGD probe
//! label_fraction = 0.01     # and a probe on 1 % of the labels
//!
//! [[arm]]
//! name = "softnce"
//! recipe = "light_moco"
//!
//! [[arm]]
//! name = "infonce"
//! recipe = "light_moco"
//! set = ["method.soft_nce=none"]   # KEY=VALUE settings, as on a recipe's command line
//! options = { knn_every = 2 }      # this arm's options, over the shared ones
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use clap::CommandFactory;
use serde::{Deserialize, Serialize};

use crate::recipes::common::RecipeArgs;
use crate::usage::usage;

/// A study as its file gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    /// The report's heading (default: the file's name).
    pub title: Option<String>,
    /// The seeds every arm runs with.
    pub seeds: Vec<u64>,
    /// The arm the others are compared with.
    pub baseline: String,
    /// Options of every run, by the recipes' option names (`data_dir` or `data-dir`).
    #[serde(default)]
    pub options: toml::Table,
    /// How every finished run is evaluated.
    #[serde(default)]
    pub evaluation: Evaluation,
    /// The arms, in the report's order.
    #[serde(rename = "arm", default)]
    pub arms: Vec<Arm>,
    /// Columns of the runs' epochs.csv the report shows epoch by epoch, each seed's value (e.g.
    /// a batch curation's `curation_rejections`: whether it acted at all). The report's alone:
    /// no run depends on it.
    #[serde(default)]
    pub epoch_columns: Vec<String>,
}

/// One arm: a recipe with its settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    /// Its name in the report and its runs' directory (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// The recipe it runs.
    pub recipe: String,
    /// Its options, over the study's.
    #[serde(default)]
    pub options: toml::Table,
    /// KEY=VALUE settings of the method, optimiser or augmentation.
    #[serde(default)]
    pub set: Vec<String>,
}

/// The evaluation of each finished run, besides the kNN accuracies it logged.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Evaluation {
    /// `recipe eval`'s linear probe on the frozen backbone.
    #[serde(default = "yes")]
    pub linear_probe: bool,
    /// Its epochs (default: the protocol's 100).
    pub probe_epochs: Option<usize>,
    /// A probe on this fraction of the training labels too (0.01: 1 %).
    pub label_fraction: Option<f64>,
    /// The same evaluation of the raw pixels, per seed: the reference row.
    #[serde(default = "yes")]
    pub raw_pixels: bool,
}

fn yes() -> bool {
    true
}

impl Default for Evaluation {
    fn default() -> Self {
        Self {
            linear_probe: true,
            probe_epochs: None,
            label_fraction: None,
            raw_pixels: true,
        }
    }
}

impl Evaluation {
    /// Whether `recipe eval` runs at all (a supervised recipe measures its own test accuracy).
    pub fn any(&self) -> bool {
        self.linear_probe || self.label_fraction.is_some()
    }

    /// `recipe eval`'s options for this evaluation (the label subset drawn with `seed`).
    pub fn eval_args(&self, seed: u64) -> Vec<String> {
        let mut args = Vec::new();
        let epochs = match (self.linear_probe, self.probe_epochs) {
            (false, _) => 0,
            (true, e) => e.unwrap_or(100),
        };
        args.extend(["--probe-epochs".to_string(), epochs.to_string()]);
        if let Some(f) = self.label_fraction {
            args.extend([
                "--label-fraction".to_string(),
                f.to_string(),
                "--label-seed".to_string(),
                seed.to_string(),
            ]);
        }
        args
    }
}

/// Options the study sets for every run itself.
const MANAGED: &[&str] = &[
    "run-dir",
    "seed",
    "resume",
    "extend",
    "check",
    "checkpoint-every",
];

/// Recipes that train nothing.
const NOT_TRAINING: &[&str] = &[
    "eval",
    "export",
    "embed",
    "compare",
    "worked_values",
    "study",
    "pack",
    "bench_step",
];

impl StudyFile {
    /// Reads and checks `path` (everything but what only the recipes can tell: their options'
    /// values and KEY=VALUE settings, which [`super::check_arms`] asks them).
    ///
    /// # Errors
    /// A usage error naming the file and the problem.
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
        let file: Self = toml::from_str(&text)
            .map_err(|e| usage(format!("{}: {}", path.display(), e.to_string().trim())))?;
        file.validate()
            .map_err(|e| usage(format!("{}: {e}", path.display())))?;
        Ok(file)
    }

    /// The checks of [`StudyFile::read`], on a parsed file.
    pub fn validate(&self) -> Result<(), String> {
        if self.seeds.is_empty() {
            return Err("`seeds` is empty: give at least one seed (three for an interval)".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for s in &self.seeds {
            if !seen.insert(s) {
                return Err(format!("seed {s} is given twice"));
            }
        }
        if self.arms.is_empty() {
            return Err("no [[arm]]: a study compares at least one arm with itself".into());
        }
        let mut names = std::collections::BTreeSet::new();
        for arm in &self.arms {
            let ok = !arm.name.is_empty()
                && arm.name != "raw-pixels"
                && !arm.name.starts_with('.')
                && arm
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !ok {
                return Err(format!(
                    "arm name `{}`: use letters, digits, `-`, `_` and `.` (not a leading `.`, \
                     not `raw-pixels`): it names the arm's directory",
                    arm.name
                ));
            }
            if !names.insert(arm.name.as_str()) {
                return Err(format!("two arms are called `{}`", arm.name));
            }
            if NOT_TRAINING.contains(&arm.recipe.as_str()) {
                return Err(format!(
                    "arm `{}`: `{}` trains nothing; an arm runs a training recipe",
                    arm.name, arm.recipe
                ));
            }
            crate::recipes::find(&arm.recipe).map_err(|e| format!("arm `{}`: {e}", arm.name))?;
            for s in &arm.set {
                if !s.contains('=') {
                    return Err(format!("arm `{}`: set \"{s}\" is not KEY=VALUE", arm.name));
                }
            }
            option_args(&arm.options).map_err(|e| format!("arm `{}`: {e}", arm.name))?;
        }
        option_args(&self.options).map_err(|e| format!("[options]: {e}"))?;
        if !names.contains(self.baseline.as_str()) {
            return Err(format!(
                "baseline `{}` is not an arm (the arms: {})",
                self.baseline,
                names.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        if let Some(f) = self.evaluation.label_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!(
                    "[evaluation] label_fraction {f}: must lie in (0, 1]"
                ));
            }
        }
        if self.evaluation.probe_epochs == Some(0) {
            return Err(
                "[evaluation] probe_epochs 0: say `linear_probe = false` to skip the probe".into(),
            );
        }
        if self.epoch_columns.iter().any(|c| c.trim().is_empty()) {
            return Err("epoch_columns: an empty name (a column of the runs' epochs.csv)".into());
        }
        Ok(())
    }

    /// The arm called `name`.
    pub fn arm(&self, name: &str) -> Option<&Arm> {
        self.arms.iter().find(|a| a.name == name)
    }

    /// The recipe command line of `arm` (without the run directory and seed): the recipe, the
    /// study's options, the arm's options (which win: the last of an option counts), its
    /// settings.
    pub fn arm_args(&self, arm: &Arm) -> Vec<String> {
        let mut args = vec![arm.recipe.clone()];
        // An arm's `false` takes the study's setting away: a switch given once is on, and
        // `false` on a switch gives nothing to come last (`easy_to_hard = true` in [options]
        // and `false` in an arm trained the arm with it on).
        // (Only for a switch: an option that takes `false` as its value gets it last.)
        let switches = switches();
        let mut options = self.options.clone();
        for (key, value) in &arm.options {
            let long = key.replace('_', "-");
            if matches!(value, toml::Value::Boolean(false)) && switches.get(&long) == Some(&true) {
                options.retain(|k, _| k.replace('_', "-") != long);
            }
        }
        args.extend(option_args(&options).expect("validated"));
        args.extend(option_args(&arm.options).expect("validated"));
        args.extend(arm.set.iter().cloned());
        args
    }

    /// What decides an arm's runs, as recorded in each of them: a run made under another
    /// definition is never reported as this arm's.
    pub fn fingerprint(&self, arm: &Arm) -> serde_json::Value {
        serde_json::json!({
            "args": self.arm_args(arm),
            "evaluation": self.evaluation,
        })
    }
}

/// The recipes' long options, each with whether it is a switch (takes no value).
fn switches() -> BTreeMap<String, bool> {
    RecipeArgs::command()
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?.to_string();
            Some((long, !a.get_action().takes_values()))
        })
        .collect()
}

/// The command-line options of an `[options]` table: `key = value` becomes `--key value`
/// (`_` read as `-`), `true` on a switch `--key` and `false` nothing, an array its values
/// joined by commas.
///
/// # Errors
/// An option the study manages (the run directory, seed, resume, checkpoints), a nested table,
/// or a value of no option's kind.
pub fn option_args(table: &toml::Table) -> Result<Vec<String>, String> {
    let switches = switches();
    let mut args = Vec::new();
    for (key, value) in table {
        let long = key.replace('_', "-");
        if MANAGED.contains(&long.as_str()) {
            return Err(format!(
                "option `{key}`: the study sets it for every run (each run has its own \
                 directory and seed, and checkpoints every epoch)"
            ));
        }
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => {
                if switches.get(&long).copied().unwrap_or(false) {
                    if *b {
                        args.push(format!("--{long}"));
                    }
                    continue;
                }
                b.to_string()
            }
            toml::Value::Array(items) => {
                let mut parts = Vec::new();
                for item in items {
                    match item {
                        toml::Value::String(s) => parts.push(s.clone()),
                        toml::Value::Integer(i) => parts.push(i.to_string()),
                        toml::Value::Float(f) => parts.push(f.to_string()),
                        other => {
                            return Err(format!("option `{key}`: {other} in a list of values"))
                        }
                    }
                }
                parts.join(",")
            }
            other => {
                return Err(format!(
                    "option `{key}`: {} is not an option's value",
                    other.type_str()
                ))
            }
        };
        args.push(format!("--{long}"));
        args.push(text);
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StudyFile, String> {
        let file: StudyFile = toml::from_str(text).map_err(|e| e.to_string())?;
        file.validate()?;
        Ok(file)
    }

    const GOOD: &str = r#"
        seeds = [0, 1]
        baseline = "plain"
        [options]
        epochs = 2
        data_dir = "/data"
        easy_to_hard = false
        mean = [0.5]
        std = [0.25]
        [[arm]]
        name = "plain"
        recipe = "simclr"
        [[arm]]
        name = "mico"
        recipe = "mico_simclr"
        set = ["optimizer.weight_decay=1e-5"]
        options = { epochs = 3, easy_to_hard = true }
    "#;

    #[test]
    fn the_command_line_of_an_arm_has_its_options_after_the_studys() {
        let file = parse(GOOD).unwrap();
        let args = file.arm_args(file.arm("mico").unwrap());
        // In the file's order; `false` on a switch is nothing; the arm's options come after
        // the study's and win (clap keeps an option's last value).
        assert_eq!(
            args,
            [
                "mico_simclr",
                "--epochs",
                "2",
                "--data-dir",
                "/data",
                "--mean",
                "0.5",
                "--std",
                "0.25",
                "--epochs",
                "3",
                "--easy-to-hard",
                "optimizer.weight_decay=1e-5"
            ]
        );
        assert_eq!(file.arm_args(file.arm("plain").unwrap())[0], "simclr");
        // An arm's `false` turns off the study's switch (it stayed on).
        let text = GOOD
            .replace("easy_to_hard = false", "easy-to-hard = true")
            .replace("easy_to_hard = true }", "easy_to_hard = false }");
        let file_off = parse(&text).unwrap();
        let mico = file_off.arm_args(file_off.arm("mico").unwrap());
        assert!(!mico.contains(&"--easy-to-hard".to_string()), "{mico:?}");
        let plain = file_off.arm_args(file_off.arm("plain").unwrap());
        assert!(plain.contains(&"--easy-to-hard".to_string()), "{plain:?}");
        assert_ne!(
            file.fingerprint(file.arm("plain").unwrap()),
            file.fingerprint(file.arm("mico").unwrap())
        );
    }

    #[test]
    fn bad_files_name_their_problem() {
        let arms = r#"
            [[arm]]
            name = "a"
            recipe = "simclr"
        "#;
        for (text, expected) in [
            (
                format!("seeds = []\nbaseline = \"a\"\n{arms}"),
                "`seeds` is empty",
            ),
            (
                format!("seeds = [1, 1]\nbaseline = \"a\"\n{arms}"),
                "seed 1 is given twice",
            ),
            (
                format!("seeds = [1]\nbaseline = \"b\"\n{arms}"),
                "baseline `b` is not an arm",
            ),
            (
                format!("seeds = [1]\nbaseline = \"a\"\n{arms}{arms}"),
                "two arms are called `a`",
            ),
            (
                "seeds = [1]\nbaseline = \"a\"\n[[arm]]\nname = \"a\"\nrecipe = \"nope\"".into(),
                "arm `a`: unknown recipe `nope`",
            ),
            (
                "seeds = [1]\nbaseline = \"a\"\n[[arm]]\nname = \"a\"\nrecipe = \"eval\"".into(),
                "`eval` trains nothing",
            ),
            (
                "seeds = [1]\nbaseline = \"a/b\"\n[[arm]]\nname = \"a/b\"\nrecipe = \"simclr\""
                    .into(),
                "arm name `a/b`",
            ),
            (
                format!("seeds = [1]\nbaseline = \"a\"\n[options]\nseed = 3\n{arms}"),
                "option `seed`: the study sets it",
            ),
            (
                format!("seeds = [1]\nbaseline = \"a\"\n[options]\nrun_dir = \"x\"\n{arms}"),
                "option `run_dir`",
            ),
            (
                "seeds = [1]\nbaseline = \"a\"\n[[arm]]\nname = \"a\"\nrecipe = \"simclr\"\n\
                 set = [\"lr\"]"
                    .into(),
                "set \"lr\" is not KEY=VALUE",
            ),
            (
                format!(
                    "seeds = [1]\nbaseline = \"a\"\n[evaluation]\nlabel_fraction = 2.0\n{arms}"
                ),
                "label_fraction 2: must lie in (0, 1]",
            ),
            (
                format!("seeds = [1]\nbaseline = \"a\"\ncolour = 1\n{arms}"),
                "unknown field `colour`",
            ),
            (
                format!("seeds = [1]\nbaseline = \"a\"\n[options.x]\ny = 1\n{arms}"),
                "option `x`: table is not an option's value",
            ),
            (
                format!("seeds = [1]\nbaseline = \"a\"\nepoch_columns = [\"\"]\n{arms}"),
                "epoch_columns: an empty name",
            ),
            (
                "seeds = [1]\nbaseline = \"a\"\n[[arm]]\nname = \"a\"\nrecipe = \"pack\"".into(),
                "`pack` trains nothing",
            ),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(expected), "{expected}: {e}");
        }
    }

    #[test]
    fn evaluation_options_follow_the_file() {
        let e = Evaluation {
            label_fraction: Some(0.01),
            ..Evaluation::default()
        };
        assert_eq!(
            e.eval_args(4),
            [
                "--probe-epochs",
                "100",
                "--label-fraction",
                "0.01",
                "--label-seed",
                "4"
            ]
        );
        let off = Evaluation {
            linear_probe: false,
            ..Evaluation::default()
        };
        assert!(!off.any());
        assert_eq!(off.eval_args(0), ["--probe-epochs", "0"]);
    }
}
